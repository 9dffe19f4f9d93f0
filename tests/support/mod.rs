//! A real ZooKeeper for tests: Debian's `zookeeper` package run as a JVM on a free loopback
//! port with a temp data dir and a 200 ms tick (sessions from 400 ms), plus faults (pause,
//! kill, restart), real session expiry, a fresh chroot per test and a request-counting proxy.
//!
//! One server is shared per test binary ([`shared`]); tests that stop or restart a server start
//! their own ([`ZooKeeper::start`]). `ZKFENCE_TEST_ZK=host:port` points the shared one at an
//! existing ensemble instead (fault tests then start their own servers as usual).
//!
//! Servers come from [`zkfence::local::LocalZooKeeper`], which kills its JVM when the test
//! process goes away, however it goes.
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use zkfence::local::LocalZooKeeper;
use zookeeper_client as zk;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `condition` holds, polling every 20 ms, or panics with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub use zkfence::local::four_letter;

/// One standalone server for one test (the library's launcher, with test-friendly panics).
pub struct ZooKeeper(LocalZooKeeper);

impl ZooKeeper {
    pub fn start() -> ZooKeeper {
        ZooKeeper(LocalZooKeeper::start().unwrap_or_else(|e| panic!("{e}")))
    }

    pub fn addr(&self) -> String {
        self.0.addr()
    }

    pub fn pause(&self) {
        self.0.pause()
    }

    pub fn resume(&self) {
        self.0.resume()
    }

    pub fn kill(&self) {
        self.0.kill()
    }

    pub fn restart(&self) {
        self.0.restart().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Server-side watch count (`wchs`).
    pub fn watch_count(&self) -> u64 {
        let out = four_letter(&self.addr(), "wchs").unwrap_or_default();
        out.lines()
            .find_map(|l| l.strip_prefix("Total watches:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected wchs answer: {out:?}"))
    }
}

/// Sessions watching `path` (a full server path), from the server's `wchp`.
pub fn watchers_of(server: &str, path: &str) -> Vec<String> {
    let out = four_letter(server, "wchp").unwrap_or_default();
    let mut lines = out.lines().skip_while(|l| *l != path).skip(1);
    let mut sessions = Vec::new();
    while let Some(line) = lines.next().filter(|l| l.starts_with(char::is_whitespace)) {
        sessions.push(line.trim().to_owned());
    }
    sessions
}

/// The connect string of the server this test binary shares.
pub fn shared() -> &'static str {
    static SHARED: OnceLock<(Option<ZooKeeper>, String)> = OnceLock::new();
    &SHARED
        .get_or_init(|| match std::env::var("ZKFENCE_TEST_ZK") {
            Ok(hosts) if !hosts.is_empty() => (None, hosts),
            _ => {
                let zk = ZooKeeper::start();
                let addr = zk.addr();
                (Some(zk), addr)
            }
        })
        .1
}

/// Connects with the given session timeout.
pub async fn connect(hosts: &str, session_timeout: Duration) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(session_timeout)
        .connect(hosts)
        .await
        .unwrap_or_else(|e| panic!("connect to {hosts}: {e}"))
}

/// A fresh chroot on `hosts` for one test: `hosts/zkfence-tests/<name>-<pid>-<n>`.
pub async fn chroot(hosts: &str, name: &str) -> String {
    let root = connect(hosts, Duration::from_secs(10)).await;
    let path = format!("/zkfence-tests/{}", unique(name));
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match root.create("/zkfence-tests", &[], &options).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(e) => panic!("create /zkfence-tests: {e}"),
    }
    root.create(&path, &[], &options).await.unwrap();
    format!("{hosts}{path}")
}

/// Expires `victim`'s session for real, from outside ([`zkfence::local::expire_session`]:
/// the server closes the session and deletes its nodes), and waits until the victim hears
/// `Expired`. `hosts` may carry a chroot.
pub async fn expire_session(hosts: &str, victim: &zk::Client) {
    let servers = hosts.split('/').next().unwrap_or(hosts);
    for _ in 0..10 {
        let _ = zkfence::local::expire_session(servers, victim.session_id()).await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if victim.state() == zk::SessionState::Expired {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("could not expire session {}", victim.session_id());
}

/// Children of `path` on a fresh client (the test's view from outside).
pub async fn children(hosts: &str, path: &str) -> Vec<String> {
    let client = connect(hosts, Duration::from_secs(10)).await;
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path}: {e}"),
    }
}

pub use zkfence::local::CountingProxy;
