//! A real ZooKeeper for tests: Debian's `zookeeper` package run as a JVM on a free loopback
//! port with a temp data dir and a 200 ms tick (sessions from 400 ms), plus faults (pause,
//! kill, restart), real session expiry, a fresh chroot per test and a request-counting proxy.
//!
//! One server is shared per test binary ([`shared`]); tests that stop or restart a server start
//! their own ([`ZooKeeper::start`]). `ZKFENCE_TEST_ZK=host:port` points the shared one at an
//! existing ensemble instead (fault tests then start their own servers as usual).
//!
//! Every JVM runs under a small bash wrapper that kills it (and removes its data dir) when the
//! test process goes away, however it goes: the wrapper waits on a pipe from us.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

const JARS: &str = "/usr/share/java";
pub const INSTALL_HINT: &str = "ZooKeeper is not installed: run `sudo apt-get install -y zookeeper` (or `scripts/test`, which installs what the tests need)";

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

/// A JVM under its bash wrapper.
struct Jvm {
    wrapper: Child,
    /// Closing it tells the wrapper to kill the JVM.
    stdin: Option<ChildStdin>,
    pid: i32,
}

impl Jvm {
    fn spawn(dir: &Path, main: &str, args: &[&str]) -> Jvm {
        assert!(
            PathBuf::from(JARS).join("zookeeper.jar").exists(),
            "{INSTALL_HINT}"
        );
        let log = dir.join("server.log");
        let script = r#"java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Dzookeeper.admin.enableServer=false -Dzookeeper.4lw.commands.whitelist='*' \
            -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar "$@" >"$ZK_LOG" 2>&1 &
            pid=$!; echo $pid; read -r _; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"#;
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(script)
            .arg("zk-wrapper")
            .arg(main)
            .args(args);
        cmd.env("ZK_LOG", &log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut wrapper = cmd.spawn().expect("bash runs");
        let stdin = wrapper.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(wrapper.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = line.trim().parse().expect("wrapper prints the JVM pid");
        Jvm {
            wrapper,
            stdin: Some(stdin),
            pid,
        }
    }

    fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid, signal) };
    }
}

impl Drop for Jvm {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
        self.signal(libc::SIGCONT);
        self.stdin.take(); // the wrapper's `read` returns, it reaps the JVM and exits
        let _ = self.wrapper.wait();
    }
}

/// Sends a four-letter word and returns the answer, if the server answers.
pub fn four_letter(addr: &str, word: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

/// One standalone ZooKeeper server.
pub struct ZooKeeper {
    port: u16,
    dir: PathBuf,
    jvm: Mutex<Option<Jvm>>,
}

impl ZooKeeper {
    /// Starts a server on a free port and waits until it answers.
    pub fn start() -> ZooKeeper {
        let port = free_port();
        let dir = std::env::temp_dir().join(unique("zkfence-zk"));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let cfg = format!(
            "tickTime=200\ninitLimit=10\nsyncLimit=5\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
             maxClientCnxns=0\nminSessionTimeout=400\nmaxSessionTimeout=30000\nforceSync=no\nadmin.enableServer=false\n\
             4lw.commands.whitelist=*\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("zoo.cfg"), cfg).unwrap();
        let zk = ZooKeeper {
            port,
            dir,
            jvm: Mutex::new(None),
        };
        zk.boot();
        zk
    }

    fn boot(&self) {
        let cfg = self.dir.join("zoo.cfg");
        let jvm = Jvm::spawn(
            &self.dir,
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            &[cfg.to_str().unwrap()],
        );
        *self.jvm.lock().unwrap() = Some(jvm);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !four_letter(&self.addr(), "srvr").is_some_and(|s| s.contains("Mode:")) {
            assert!(
                Instant::now() < deadline,
                "zookeeper did not start; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        self.jvm.lock().unwrap().as_ref().map_or(0, |j| j.pid)
    }

    /// SIGSTOP: the server keeps its sockets but answers nothing.
    pub fn pause(&self) {
        self.jvm
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .signal(libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.jvm
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .signal(libc::SIGCONT);
    }

    /// kill -9, keeping the data dir for a restart.
    pub fn kill(&self) {
        self.jvm.lock().unwrap().take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(self.addr()).is_ok() {
            assert!(
                Instant::now() < deadline,
                "killed server still accepts connections"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts the server again on the same port and data: sessions survive if they have not
    /// timed out.
    pub fn restart(&self) {
        self.kill();
        self.boot();
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

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.jvm.lock().unwrap().take();
        let _ = std::fs::remove_dir_all(&self.dir);
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

/// Expires `victim`'s session for real: a second client joins the same session (id and
/// password), then closes it; the server ends the session and the victim hears `Expired`.
/// The victim may win the session back before the join completes (each connect moves the
/// session), so the join is retried until the close lands.
pub async fn expire_session(hosts: &str, victim: &zk::Client) {
    for _ in 0..20 {
        let joined = zk::Client::connector()
            .with_session(victim.session().clone())
            .with_session_timeout(victim.session_timeout())
            .connect(hosts)
            .await;
        if let Ok(thief) = joined {
            drop(thief); // dropping the last handle sends closeSession
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if victim.state() == zk::SessionState::Expired {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if victim.state() == zk::SessionState::Expired {
            return;
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

/// A TCP proxy in front of a server that counts the requests clients send through it
/// (pings excluded), by opcode, and can blackhole traffic both ways (a partition: bytes are
/// accepted and dropped, connections stay open).
pub struct CountingProxy {
    pub addr: String,
    counts: Arc<Mutex<HashMap<i32, u64>>>,
    blackhole: Arc<AtomicBool>,
}

impl CountingProxy {
    pub async fn start(upstream: &str) -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let counts: Arc<Mutex<HashMap<i32, u64>>> = Arc::default();
        let blackhole = Arc::new(AtomicBool::new(false));
        let (upstream, shared, hole) = (upstream.to_owned(), counts.clone(), blackhole.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, counts, hole) = (upstream.clone(), shared.clone(), hole.clone());
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut client_rx, mut client_tx) = client.into_split();
                    let (mut server_rx, mut server_tx) = server.into_split();
                    let back = hole.clone();
                    tokio::spawn(async move {
                        let _ = forward(&mut server_rx, &mut client_tx, &back).await;
                    });
                    let _ = forward_counting(&mut client_rx, &mut server_tx, &counts, &hole).await;
                });
            }
        });
        CountingProxy {
            addr,
            counts,
            blackhole,
        }
    }

    /// Requests by opcode so far (1 create, 2 delete, 3 exists, 4 getData, 8 getChildren, ...).
    pub fn counts(&self) -> HashMap<i32, u64> {
        self.counts.lock().unwrap().clone()
    }

    pub fn total(&self) -> u64 {
        self.counts.lock().unwrap().values().sum()
    }

    /// Drops every byte both ways while `on`, without closing connections.
    pub fn blackhole(&self, on: bool) {
        self.blackhole.store(on, Ordering::SeqCst);
    }
}

async fn forward(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    hole: &AtomicBool,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        if !hole.load(Ordering::SeqCst) {
            to.write_all(&buf[..n]).await?;
        }
    }
}

async fn forward_counting(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    counts: &Mutex<HashMap<i32, u64>>,
    hole: &AtomicBool,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut first = true;
    loop {
        let len = from.read_i32().await?;
        let mut frame = vec![0u8; len.max(0) as usize];
        from.read_exact(&mut frame).await?;
        if hole.load(Ordering::SeqCst) {
            continue;
        }
        if !first && frame.len() >= 8 {
            let op = i32::from_be_bytes(frame[4..8].try_into().unwrap());
            if op != 11 {
                *counts.lock().unwrap().entry(op).or_default() += 1;
            }
        }
        first = false; // the first frame is the connect request, which has no header
        to.write_i32(len).await?;
        to.write_all(&frame).await?;
    }
}
