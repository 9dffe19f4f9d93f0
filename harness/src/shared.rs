//! What a test binary needs around a real ZooKeeper: one server shared per test binary
//! ([`shared`]), a fresh chroot per test ([`chroot`]), connections, real session expiry from
//! outside, conditions waited on with deadlines ([`wait_until`]), and a standalone server for
//! the tests that stop or restart one ([`ZooKeeper`], panicking with the reason on failure).
//!
//! `ZKFENCE_TEST_ZK=host:port` points the shared server at an existing ensemble instead (fault
//! tests then start their own servers as usual).
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() {
//! use zkfence_harness::{chroot, connect, shared};
//! let hosts = chroot(shared(), "my-test").await; // "127.0.0.1:port/zkfence-tests/my-test-…"
//! let client = connect(&hosts, std::time::Duration::from_secs(10)).await;
//! # let _ = client; }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use zkfence_testkit::{four_letter, LocalZooKeeper};

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique(name: &str) -> String {
    format!(
        "{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A free loopback port, below the kernel's ephemeral range ([`zkfence_testkit::free_port`]).
///
/// # Panics
///
/// When no loopback port can be bound.
pub fn free_port() -> u16 {
    zkfence_testkit::free_port().expect("no free loopback port")
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

/// One standalone server for one test: a [`LocalZooKeeper`] whose failures panic with the
/// reason (a test has no way on without its server).
#[derive(Debug)]
pub struct ZooKeeper(LocalZooKeeper);

impl ZooKeeper {
    /// Starts one, as [`LocalZooKeeper::start`].
    pub fn start() -> ZooKeeper {
        ZooKeeper(LocalZooKeeper::start().unwrap_or_else(|e| panic!("{e}")))
    }

    /// Its connect string.
    pub fn addr(&self) -> String {
        self.0.addr()
    }

    /// SIGSTOP.
    pub fn pause(&self) {
        self.0.pause()
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.0.resume()
    }

    /// SIGKILL, keeping its data.
    pub fn kill(&self) {
        self.0.kill()
    }

    /// Starts it again on the same port and data.
    pub fn restart(&self) {
        self.0.restart().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Server-side watch count, data and child watches together (`mntr`'s `zk_watch_count`;
    /// `wchs` counts data watches only).
    pub fn watch_count(&self) -> u64 {
        let out = four_letter(&self.addr(), "mntr").unwrap_or_default();
        out.lines()
            .find_map(|l| l.strip_prefix("zk_watch_count"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("unexpected mntr answer: {out:?}"))
    }
}

/// Whether `session` holds a data watch on `path`, a path under `hosts` (a connect string
/// that may end in a chroot), from the first server's `wchp`. ZooKeeper lists no child
/// watches there.
pub fn watches(hosts: &str, session: zk::SessionId, path: &str) -> bool {
    let (servers, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let server = servers.split(',').next().unwrap_or(servers);
    watchers_of(server, &format!("{root}{path}")).contains(&format!("{:#x}", session.0))
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

/// The PostgreSQL server this test binary shares (a [`LocalPostgres`](crate::LocalPostgres)
/// on a free loopback port, its log in a temp dir), started on first use; its connection
/// string for database `postgres`. Give each test a schema or database of its own.
///
/// # Panics
///
/// When the server cannot start (Debian's `postgresql` missing: the message says so).
pub fn shared_postgres() -> &'static str {
    static SHARED: OnceLock<(crate::LocalPostgres, String)> = OnceLock::new();
    &SHARED
        .get_or_init(|| {
            let logs = std::env::temp_dir().join(format!("zkfence-pg-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&logs);
            let pg = crate::LocalPostgres::start(&logs)
                .unwrap_or_else(|e| panic!("start a throwaway postgres: {e}"));
            let conninfo = pg.conninfo("postgres");
            (pg, conninfo)
        })
        .1
}

/// The MariaDB server this test binary shares (started on first use, stopped when the binary
/// exits): a `mysql://` URL of its `mysql` database as `root`. Give each test a database of
/// its own.
///
/// # Examples
///
/// ```no_run
/// let url = zkfence_harness::shared_mariadb();
/// assert!(url.starts_with("mysql://"));
/// ```
///
/// # Panics
///
/// When the server cannot start (Debian's `mariadb-server` missing: the message says so).
pub fn shared_mariadb() -> &'static str {
    static SHARED: OnceLock<(crate::LocalMariaDb, String)> = OnceLock::new();
    &SHARED
        .get_or_init(|| {
            let logs = std::env::temp_dir().join(format!("zkfence-mariadb-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&logs);
            let db = crate::LocalMariaDb::start(&logs)
                .unwrap_or_else(|e| panic!("start a throwaway mariadb: {e}"));
            let url = db.url("mysql");
            (db, url)
        })
        .1
}

/// Connects a new session with the given session timeout, through [`zkfence::Connect`], as
/// a service would: the session's creation anchors its first lease, so a lock's first acquire
/// on it is granted at once rather than after a paired proof.
pub async fn connect(hosts: &str, session_timeout: Duration) -> zk::Client {
    zkfence::Connect::new(hosts)
        .with_session_timeout(session_timeout)
        .connect()
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

/// Expires `victim`'s session for real ([`zkfence_testkit::expire_session`]: the server closes the
/// session and deletes its nodes), and waits until the victim hears `Expired`. `hosts` may
/// carry a chroot.
pub async fn expire_session(hosts: &str, victim: &zk::Client) {
    for _ in 0..10 {
        if let Err(err) = zkfence_testkit::expire_session(victim, hosts).await {
            eprintln!("expire_session: {err}");
        }
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

/// Runs `command` off the async runtime (it blocks until the process ends): its exit code
/// (`None` when a signal ended it), stdout and stderr as text.
///
/// # Panics
///
/// When the command cannot be started.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// let (code, out, _) = zkfence_harness::output(std::process::Command::new("true")).await;
/// assert_eq!((code, out.as_str()), (Some(0), ""));
/// # }
/// ```
pub async fn output(mut command: std::process::Command) -> (Option<i32>, String, String) {
    let done = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the command's thread")
        .unwrap_or_else(|e| panic!("cannot run the command: {e}"));
    let (stdout, stderr) = text(&done);
    (done.status.code(), stdout, stderr)
}

/// A finished process's (stdout, stderr) as text.
///
/// # Examples
///
/// ```no_run
/// let done = std::process::Command::new("echo").arg("hi").output().unwrap();
/// assert_eq!(zkfence_harness::text(&done).0, "hi\n");
/// ```
pub fn text(output: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
