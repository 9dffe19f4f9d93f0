//! Throwaway local ZooKeeper servers (standalone or a 3-server ensemble), for demos, tests and
//! chaos experiments.
//!
//! [`LocalZooKeeper::start`] runs Debian's `zookeeper` package (`ZooKeeperServerMain`, jars
//! under `/usr/share/java`) as a JVM on a free loopback port with a temp data dir and a
//! 200 ms tick, so sessions from 400 ms to 30 s can be negotiated. It offers the faults a lock
//! must survive: [`pause`](LocalZooKeeper::pause) (SIGSTOP), [`resume`](LocalZooKeeper::resume),
//! [`kill`](LocalZooKeeper::kill) (SIGKILL) and [`restart`](LocalZooKeeper::restart) on the
//! same port and data.
//!
//! [`expire_session`] ends another client's session from outside, the way an operator would.
//!
//! The JVM runs under a small `bash` wrapper that kills it and removes the data dir when this
//! process goes away, however it goes (the wrapper waits on a pipe from us), so a crashed test
//! or demo leaves no server behind.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

/// Where Debian's `zookeeper` package puts its jars.
const JARS: &str = "/usr/share/java";

/// The command that installs what [`LocalZooKeeper`] needs.
pub const INSTALL_HINT: &str =
    "ZooKeeper is not installed: run `sudo apt-get install -y zookeeper` (Debian's package), or scripts/demo, which does it";

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Why a local server could not be started.
///
/// # Examples
///
/// ```
/// let err = zkfence::local::StartError::NotInstalled;
/// assert!(err.to_string().contains("apt-get install"));
/// ```
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Debian's `zookeeper` package is not installed.
    #[error("{INSTALL_HINT}")]
    NotInstalled,
    /// Running `bash`/`java`, or writing the temp dir, failed.
    #[error("could not start zookeeper: {0}")]
    Io(#[from] std::io::Error),
    /// The server did not answer in time; the message carries the end of its log.
    #[error("zookeeper did not start within {timeout:?}; last log lines:\n{log}")]
    NotServing {
        /// How long we waited.
        timeout: Duration,
        /// The end of the server log.
        log: String,
    },
}

/// A JVM under its bash wrapper.
#[derive(Debug)]
struct Jvm {
    wrapper: Child,
    /// Closing it tells the wrapper to kill the JVM.
    stdin: Option<ChildStdin>,
    pid: i32,
}

impl Jvm {
    /// Starts `java <flags> <main> <args>` under the wrapper, inside network namespace
    /// `netns` when given.
    fn spawn(
        dir: &Path,
        netns: Option<&str>,
        flags: &[String],
        main: &str,
        args: &[&str],
    ) -> Result<Jvm, StartError> {
        if !Path::new(JARS).join("zookeeper.jar").exists() {
            return Err(StartError::NotInstalled);
        }
        let script = r#"java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Dzookeeper.admin.enableServer=false -Dzookeeper.4lw.commands.whitelist='*' $ZK_JVMFLAGS \
            -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-nop.jar "$@" >"$ZK_LOG" 2>&1 &
            pid=$!; echo $pid; read -r _; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; exit 0"#;
        let mut command = match netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns, "bash"]);
                command
            }
            None => Command::new("bash"),
        };
        let mut wrapper = command
            .arg("-c")
            .arg(script)
            .arg("zk-wrapper")
            .arg(main)
            .args(args)
            .env("ZK_LOG", dir.join("server.log"))
            .env("ZK_JVMFLAGS", flags.join(" "))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdin = wrapper.stdin.take();
        let mut line = String::new();
        if let Some(stdout) = wrapper.stdout.take() {
            BufReader::new(stdout).read_line(&mut line)?;
        }
        let pid = line
            .trim()
            .parse()
            .map_err(|_| std::io::Error::other("the zookeeper wrapper printed no pid"))?;
        Ok(Jvm {
            wrapper,
            stdin,
            pid,
        })
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with a pid we started; at worst it fails with ESRCH.
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

/// Sends a ZooKeeper four-letter word (`ruok`, `srvr`, `wchs`, ...) and returns the answer.
///
/// # Examples
///
/// ```no_run
/// let answer = zkfence::local::four_letter("127.0.0.1:2181", "srvr");
/// println!("{answer:?}");
/// ```
pub fn four_letter(addr: &str, word: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).ok()?;
    Some(out)
}

/// One server process: its address, its files, its JVM.
#[derive(Debug)]
struct Node {
    host: String,
    port: u16,
    dir: PathBuf,
    main: &'static str,
    /// The network namespace it runs in, if it has its own.
    netns: Option<String>,
    jvm_flags: Vec<String>,
    jvm: Mutex<Option<Jvm>>,
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn temp_dir(kind: &str) -> std::io::Result<PathBuf> {
    let name = format!(
        "zkfence-{kind}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(dir.join("data"))?;
    Ok(dir)
}

/// The settings every server here shares: the tick and limits of `options` (sessions from
/// 2 ticks to 20 ticks, at least 30 s), no fsync, four-letter words on, the admin server off.
fn base_config(dir: &Path, host: &str, port: u16, options: &EnsembleOptions) -> String {
    let tick = options.tick.as_millis().max(1);
    format!(
        "tickTime={tick}\ninitLimit={}\nsyncLimit={}\ndataDir={}\nclientPort={port}\nclientPortAddress={host}\n\
         maxClientCnxns=0\nminSessionTimeout={}\nmaxSessionTimeout={}\nforceSync=no\nadmin.enableServer=false\n\
         4lw.commands.whitelist=*\n{}",
        options.init_limit,
        options.sync_limit,
        dir.join("data").display(),
        2 * tick,
        (20 * tick).max(30_000),
        options.config.iter().map(|line| format!("{line}\n")).collect::<String>(),
    )
}

impl Node {
    fn new(
        host: &str,
        port: u16,
        dir: PathBuf,
        main: &'static str,
        config: &str,
        netns: Option<String>,
        jvm_flags: Vec<String>,
    ) -> Result<Node, StartError> {
        std::fs::write(dir.join("zoo.cfg"), config)?;
        Ok(Node {
            host: host.to_owned(),
            port,
            dir,
            main,
            netns,
            jvm_flags,
            jvm: Mutex::new(None),
        })
    }

    fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn spawn(&self) -> Result<(), StartError> {
        let cfg = self.dir.join("zoo.cfg");
        let jvm = Jvm::spawn(
            &self.dir,
            self.netns.as_deref(),
            &self.jvm_flags,
            self.main,
            &[&cfg.to_string_lossy()],
        )?;
        *self.jvm.lock().unwrap_or_else(|e| e.into_inner()) = Some(jvm);
        Ok(())
    }

    fn serving(&self) -> bool {
        four_letter(&self.addr(), "srvr").is_some_and(|s| s.contains("Mode:"))
    }

    fn wait_serving(&self, timeout: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + timeout;
        while !self.serving() {
            if Instant::now() >= deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                return Err(StartError::NotServing {
                    timeout,
                    log: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    fn pid(&self) -> i32 {
        self.jvm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |j| j.pid)
    }

    fn signal(&self, signal: i32) {
        if let Some(jvm) = self.jvm.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            jvm.signal(signal);
        }
    }

    fn kill(&self) {
        self.jvm.lock().unwrap_or_else(|e| e.into_inner()).take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(self.addr()).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.jvm.lock().unwrap_or_else(|e| e.into_inner()).take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const STANDALONE: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
const QUORUM: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One standalone ZooKeeper server on a loopback port, stopped (by pid) when dropped.
///
/// # Examples
///
/// ```no_run
/// let zk = zkfence::local::LocalZooKeeper::start()?;
/// println!("connect to {}", zk.addr());
/// zk.pause();   // SIGSTOP: sessions see silence
/// zk.resume();  // SIGCONT
/// # Ok::<(), zkfence::local::StartError>(())
/// ```
#[derive(Debug)]
pub struct LocalZooKeeper {
    node: Node,
}

impl LocalZooKeeper {
    /// Starts a server on a free loopback port and waits (up to 60 s) until it serves requests.
    ///
    /// # Errors
    ///
    /// [`StartError::NotInstalled`] without Debian's `zookeeper` package; the other variants
    /// when it cannot be run or does not come up.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence::local::LocalZooKeeper::start()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn start() -> Result<LocalZooKeeper, StartError> {
        let port = free_port()?;
        let dir = temp_dir("zk")?;
        let config = base_config(&dir, "127.0.0.1", port, &EnsembleOptions::default());
        let zk = LocalZooKeeper {
            node: Node::new(
                "127.0.0.1",
                port,
                dir,
                STANDALONE,
                &config,
                None,
                Vec::new(),
            )?,
        };
        zk.node.spawn()?;
        zk.node.wait_serving(START_TIMEOUT)?;
        Ok(zk)
    }

    /// The connect string, `127.0.0.1:<port>`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// assert!(zk.addr().starts_with("127.0.0.1:"));
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn addr(&self) -> String {
        self.node.addr()
    }

    /// The server's log so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// eprintln!("{}", zk.log());
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn log(&self) -> String {
        self.node.log()
    }

    /// The JVM's pid (0 while killed).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// assert!(zk.pid() > 0);
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn pid(&self) -> i32 {
        self.node.pid()
    }

    /// SIGSTOP: the server keeps its sockets open but answers nothing, and its clock keeps
    /// running, so sessions whose timeout passes during the pause expire when it resumes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// zk.pause();
    /// zk.resume();
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn pause(&self) {
        self.node.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`pause`](Self::pause).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// zk.pause();
    /// zk.resume();
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn resume(&self) {
        self.node.signal(libc::SIGCONT);
    }

    /// SIGKILL, keeping the data dir for [`restart`](Self::restart); returns once the port
    /// refuses connections.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// zk.kill();
    /// zk.restart()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn kill(&self) {
        self.node.kill();
    }

    /// Kills the server if it runs and starts it again on the same port and data: sessions
    /// survive if they have not timed out meanwhile.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence::local::LocalZooKeeper::start()?;
    /// zk.restart()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn restart(&self) -> Result<(), StartError> {
        self.node.kill();
        self.node.spawn()?;
        self.node.wait_serving(START_TIMEOUT)
    }
}

/// A 3-server ZooKeeper ensemble (`QuorumPeerMain`) on loopback ports, for leader and quorum
/// faults. Servers are numbered 0, 1, 2.
///
/// # Examples
///
/// ```no_run
/// let ensemble = zkfence::local::LocalEnsemble::start()?;
/// let leader = ensemble.leader().expect("a leader was elected");
/// ensemble.kill(leader);            // the others elect a new leader
/// ensemble.restart(leader)?;
/// println!("connect to {}", ensemble.addr());
/// # Ok::<(), zkfence::local::StartError>(())
/// ```
#[derive(Debug)]
pub struct LocalEnsemble {
    nodes: Vec<Node>,
    /// Set when each server has its own network namespace (see [`EnsembleOptions`]).
    isolated: bool,
}

/// How a [`LocalEnsemble`] is set up: its tick and limits, extra JVM flags, and whether each
/// server gets a network namespace of its own so that the links between servers can be cut.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let options = zkfence::local::EnsembleOptions::default()
///     .with_tick(Duration::from_millis(2000))
///     .with_sync_limit(5);
/// assert_eq!(options.tick(), Duration::from_secs(2));
/// ```
#[derive(Debug, Clone)]
pub struct EnsembleOptions {
    tick: Duration,
    sync_limit: u32,
    init_limit: u32,
    namespaces: bool,
    jvm_flags: Vec<String>,
    /// Extra `zoo.cfg` lines.
    config: Vec<String>,
}

impl Default for EnsembleOptions {
    /// A 200 ms tick, `syncLimit=5`, `initLimit=10`, every server on loopback.
    fn default() -> Self {
        EnsembleOptions {
            tick: Duration::from_millis(200),
            sync_limit: 5,
            init_limit: 10,
            namespaces: false,
            jvm_flags: Vec::new(),
            config: Vec::new(),
        }
    }
}

impl EnsembleOptions {
    /// The servers' `tickTime` (default 200 ms). Sessions from 2 to 20 ticks (at least 30 s)
    /// can be negotiated.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_tick(std::time::Duration::from_secs(2));
    /// # let _ = options;
    /// ```
    pub fn with_tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The servers' `syncLimit` in ticks (default 5): how long a leader keeps leading without
    /// hearing from a quorum, and a follower following a silent leader.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_sync_limit(10);
    /// # let _ = options;
    /// ```
    pub fn with_sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks.max(1);
        self
    }

    /// The servers' `initLimit` in ticks (default 10).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_init_limit(20);
    /// # let _ = options;
    /// ```
    pub fn with_init_limit(mut self, ticks: u32) -> Self {
        self.init_limit = ticks.max(1);
        self
    }

    /// One more JVM flag for every server, e.g. `-Dreadonlymode.enabled=true`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_jvm_flag("-Dreadonlymode.enabled=true");
    /// # let _ = options;
    /// ```
    pub fn with_jvm_flag(mut self, flag: impl Into<String>) -> Self {
        self.jvm_flags.push(flag.into());
        self
    }

    /// One more `zoo.cfg` setting for every server, e.g. `localSessionsEnabled=true`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_config("localSessionsEnabled", "true");
    /// # let _ = options;
    /// ```
    pub fn with_config(mut self, key: &str, value: &str) -> Self {
        self.config.push(format!("{key}={value}"));
        self
    }

    /// Gives each server a network namespace and an address of its own (`10.77.<n>.<i>`, on a
    /// bridge in this process's namespace), so that [`LocalEnsemble::cut`] can cut the links
    /// between servers while clients still reach every server. Needs root, and this process
    /// must already run in a private network and mount namespace (`unshare --net --mount`):
    /// it adds a bridge, and it refuses to touch the machine's own network.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::local::EnsembleOptions::default().with_own_network_namespaces(true);
    /// # let _ = options;
    /// ```
    pub fn with_own_network_namespaces(mut self, on: bool) -> Self {
        self.namespaces = on;
        self
    }

    /// The tick.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::local::EnsembleOptions::default().tick().as_millis(), 200);
    /// ```
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The sync limit, in ticks.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::local::EnsembleOptions::default().sync_limit(), 5);
    /// ```
    pub fn sync_limit(&self) -> u32 {
        self.sync_limit
    }
}

/// What [`LocalEnsemble::cut`] does to the packets one server sends another.
///
/// # Examples
///
/// ```
/// let fault = zkfence::local::LinkFault::Lossy(0.3);
/// # let _ = fault;
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkFault {
    /// They vanish: the sender learns nothing until its own timeouts fire.
    Drop,
    /// They are answered with a TCP reset: the sender's connection fails at once.
    Reset,
    /// Each one is lost with this probability (TCP retransmits: a slow, jittery link).
    Lossy(f64),
}

/// The ensembles this process has put in network namespaces, for unique names and addresses.
static NAMESPACED: AtomicU64 = AtomicU64::new(0);

/// Runs `ip`/`iptables` (or any command) and fails with its stderr.
fn run(program: &str, args: &[&str]) -> Result<(), StartError> {
    let out = Command::new(program).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(StartError::Io(std::io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))))
    }
}

/// The bridge every namespaced server hangs off, made once per process, after checking that
/// this process has a network namespace of its own.
fn bridge() -> Result<(), StartError> {
    static BRIDGE: Mutex<bool> = Mutex::new(false);
    let mut made = BRIDGE.lock().unwrap_or_else(|e| e.into_inner());
    if *made {
        return Ok(());
    }
    // A namespace made for us has nothing but `lo`; the machine's own has its real interfaces.
    let links = Command::new("ip").args(["-o", "link", "show"]).output()?;
    let names: Vec<String> = String::from_utf8_lossy(&links.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|name| name.trim().split('@').next().unwrap_or("").to_owned())
        .collect();
    if names.iter().any(|name| name != "lo") {
        return Err(StartError::Io(std::io::Error::other(
            "servers in network namespaces need a private network namespace: run this process under `unshare --net --mount` (chaos/run does)",
        )));
    }
    run("ip", &["link", "set", "lo", "up"])?;
    run("ip", &["link", "add", "zkfbr0", "type", "bridge"])?;
    run("ip", &["addr", "add", "10.77.0.1/16", "dev", "zkfbr0"])?;
    run("ip", &["link", "set", "zkfbr0", "up"])?;
    *made = true;
    Ok(())
}

/// Server `i` of namespaced ensemble `n`: its own namespace, a veth on the bridge, an address.
fn namespace(n: u64, i: usize) -> Result<(String, String), StartError> {
    let netns = format!("zkf-{}-{n}-{i}", std::process::id());
    let veth = format!("zkf{n}v{i}");
    let addr = format!("10.77.{}.{}", n + 1, i + 1);
    run("ip", &["netns", "add", &netns])?;
    run(
        "ip",
        &[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ],
    )?;
    run("ip", &["link", "set", &veth, "master", "zkfbr0", "up"])?;
    run(
        "ip",
        &[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{addr}/16"),
            "dev",
            "eth0",
        ],
    )?;
    run("ip", &["-n", &netns, "link", "set", "eth0", "up"])?;
    run("ip", &["-n", &netns, "link", "set", "lo", "up"])?;
    Ok((netns, addr))
}

impl LocalEnsemble {
    /// Starts three servers and waits until each serves requests (a leader is elected).
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn start() -> Result<LocalEnsemble, StartError> {
        LocalEnsemble::start_with(EnsembleOptions::default())
    }

    /// Starts three servers set up as `options` says, and waits until each serves requests.
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`]; with namespaces, also when this process is not root or
    /// not in a private network namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence::local::{EnsembleOptions, LocalEnsemble};
    /// let options = EnsembleOptions::default().with_tick(std::time::Duration::from_secs(2));
    /// let ensemble = LocalEnsemble::start_with(options)?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn start_with(options: EnsembleOptions) -> Result<LocalEnsemble, StartError> {
        // (host, client port, peer port, election port, namespace) per server.
        let mut places = Vec::new();
        if options.namespaces {
            bridge()?;
            let n = NAMESPACED.fetch_add(1, Ordering::Relaxed);
            for i in 0..3 {
                let (netns, addr) = namespace(n, i)?;
                places.push((addr, 2181, 2888, 3888, Some(netns)));
            }
        } else {
            for _ in 0..3 {
                let host = "127.0.0.1".to_owned();
                places.push((host, free_port()?, free_port()?, free_port()?, None));
            }
        }
        let servers: String = places
            .iter()
            .enumerate()
            .map(|(i, (host, _, peer, election, _))| {
                format!("server.{}={host}:{peer}:{election}\n", i + 1)
            })
            .collect();
        let mut ensemble = LocalEnsemble {
            nodes: Vec::new(),
            isolated: options.namespaces,
        };
        for (i, (host, client, _, _, netns)) in places.into_iter().enumerate() {
            let dir = temp_dir("ensemble")?;
            std::fs::write(dir.join("data").join("myid"), format!("{}\n", i + 1))?;
            let config = format!("{}{servers}", base_config(&dir, &host, client, &options));
            let node = Node::new(
                &host,
                client,
                dir,
                QUORUM,
                &config,
                netns,
                options.jvm_flags.clone(),
            )?;
            ensemble.nodes.push(node);
        }
        for node in &ensemble.nodes {
            node.spawn()?;
        }
        for node in &ensemble.nodes {
            node.wait_serving(START_TIMEOUT)?;
        }
        Ok(ensemble)
    }

    /// Makes server `from`'s packets to server `to` suffer `fault` (one direction; cut both
    /// for a symmetric partition). Only traffic between servers is touched: clients reach
    /// every server as before. Needs [`EnsembleOptions::with_own_network_namespaces`].
    ///
    /// # Errors
    ///
    /// When the ensemble has no namespaces, or `iptables` fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// use zkfence::local::LinkFault;
    /// // The leader cut off from both followers, the way real networks often do it: their
    /// // packets to it are reset, its packets to them vanish.
    /// let leader = ensemble.leader().unwrap();
    /// for f in (0..3).filter(|&f| f != leader) {
    ///     ensemble.cut(f, leader, LinkFault::Reset)?;
    ///     ensemble.cut(leader, f, LinkFault::Drop)?;
    /// }
    /// ensemble.heal()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn cut(&self, from: usize, to: usize, fault: LinkFault) -> Result<(), StartError> {
        let netns = self.nodes[from].netns.as_deref().ok_or_else(|| {
            StartError::Io(std::io::Error::other(
                "cutting links needs EnsembleOptions::with_own_network_namespaces(true)",
            ))
        })?;
        let peer = self.nodes[to].host.clone();
        let mut rule = vec![
            "netns", "exec", netns, "iptables", "-A", "OUTPUT", "-d", &peer,
        ];
        let probability;
        match fault {
            LinkFault::Drop => rule.extend(["-j", "DROP"]),
            LinkFault::Reset => {
                rule.extend(["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
            }
            LinkFault::Lossy(p) => {
                probability = format!("{:.3}", p.clamp(0.0, 1.0));
                rule.extend([
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &probability,
                    "-j",
                    "DROP",
                ]);
            }
        }
        run("ip", &rule)
    }

    /// Removes every link fault: all servers reach each other again.
    ///
    /// # Errors
    ///
    /// When `iptables` fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.heal()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn heal(&self) -> Result<(), StartError> {
        for node in &self.nodes {
            if let Some(netns) = &node.netns {
                run("ip", &["netns", "exec", netns, "iptables", "-F", "OUTPUT"])?;
            }
        }
        Ok(())
    }

    /// Whether each server has its own network namespace (links can be cut).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// assert!(!ensemble.is_isolated());
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn is_isolated(&self) -> bool {
        self.isolated
    }

    /// The connect string of all three servers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// assert_eq!(ensemble.addr().split(',').count(), 3);
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn addr(&self) -> String {
        self.nodes
            .iter()
            .map(Node::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string of server `i` alone.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// println!("{}", ensemble.server_addr(0));
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn server_addr(&self, i: usize) -> String {
        self.nodes[i].addr()
    }

    /// The server that currently says it leads, if any.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// println!("leader: {:?}", ensemble.leader());
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn leader(&self) -> Option<usize> {
        self.nodes.iter().position(|n| {
            four_letter(&n.addr(), "srvr").is_some_and(|s| s.contains("Mode: leader"))
        })
    }

    /// SIGSTOP server `i`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.pause(0);
    /// ensemble.resume(0);
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn pause(&self, i: usize) {
        self.nodes[i].signal(libc::SIGSTOP);
    }

    /// SIGCONT server `i`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.pause(0);
    /// ensemble.resume(0);
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn resume(&self, i: usize) {
        self.nodes[i].signal(libc::SIGCONT);
    }

    /// SIGKILL server `i`, keeping its data.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.kill(1);
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn kill(&self, i: usize) {
        self.nodes[i].kill();
    }

    /// Kills server `i` if it runs, starts it again, and waits until it serves.
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.restart(1)?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn restart(&self, i: usize) -> Result<(), StartError> {
        self.nodes[i].kill();
        self.nodes[i].spawn()?;
        self.nodes[i].wait_serving(START_TIMEOUT)
    }
}

impl Drop for LocalEnsemble {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.jvm.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(netns) = &node.netns {
                let _ = run("ip", &["netns", "del", netns]);
            }
        }
    }
}

impl LocalEnsemble {
    /// Kills every server that still runs, starts all three again on their ports and data,
    /// and waits until each serves (a quorum restart: one server alone never serves).
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence::local::LocalEnsemble::start()?;
    /// ensemble.restart_all()?;
    /// # Ok::<(), zkfence::local::StartError>(())
    /// ```
    pub fn restart_all(&self) -> Result<(), StartError> {
        for node in &self.nodes {
            node.kill();
        }
        for node in &self.nodes {
            node.spawn()?;
        }
        for node in &self.nodes {
            node.wait_serving(START_TIMEOUT)?;
        }
        Ok(())
    }
}

/// A TCP proxy in front of a server that counts the requests clients send through it
/// (pings excluded), by opcode, and can blackhole traffic both ways (a partition: bytes are
/// accepted and dropped, connections stay open), drop only the server's replies, delay every
/// frame (a slow link), refuse new connections and reset the open ones (to steer a client to
/// other servers).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// let proxy = zkfence::local::CountingProxy::start("127.0.0.1:2181").await;
/// // connect clients to proxy.addr ...
/// println!("{} requests so far", proxy.total());
/// proxy.blackhole(true); // a partition
/// # }
/// ```
#[derive(Debug)]
pub struct CountingProxy {
    /// The address clients connect to.
    pub addr: String,
    counts: Arc<Mutex<HashMap<i32, u64>>>,
    notifications: Arc<AtomicU64>,
    link: Link,
}

impl CountingProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound (a test tool: there is no way on without one).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let proxy = zkfence::local::CountingProxy::start("127.0.0.1:2181").await;
    /// # }
    /// ```
    pub async fn start(upstream: &str) -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let counts: Arc<Mutex<HashMap<i32, u64>>> = Arc::default();
        let notifications = Arc::new(AtomicU64::new(0));
        let link = Link::default();
        let (upstream, shared, notified, links) = (
            upstream.to_owned(),
            counts.clone(),
            notifications.clone(),
            link.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if links.refuse.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let (upstream, counts, notifications, link) = (
                    upstream.clone(),
                    shared.clone(),
                    notified.clone(),
                    links.clone(),
                );
                let reset = link.reset_token();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let _open = link.open();
                    // Without this, Nagle's algorithm and delayed ACKs add ~40 ms to small frames.
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (mut client_rx, mut client_tx) = client.into_split();
                    let (mut server_rx, mut server_tx) = server.into_split();
                    let back = link.clone();
                    let replies = async move {
                        // Replies carry their request's xid; watch notifications carry -1.
                        let _ =
                            forward_frames(&mut server_rx, &mut client_tx, &back, true, |frame| {
                                if header_field(frame, 0) == -1 {
                                    notifications.fetch_add(1, Ordering::Relaxed);
                                }
                            })
                            .await;
                    };
                    // Requests: xid, then the opcode; pings (11) are not counted.
                    let requests =
                        forward_frames(&mut client_rx, &mut server_tx, &link, false, |frame| {
                            let op = header_field(frame, 4);
                            if op != 11 {
                                *counts
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .entry(op)
                                    .or_default() += 1;
                            }
                        });
                    // Either direction ending, or a reset, closes both sockets.
                    tokio::select! {
                        _ = replies => {}
                        _ = requests => {}
                        _ = reset.cancelled() => {}
                    }
                });
            }
        });
        CountingProxy {
            addr,
            counts,
            notifications,
            link,
        }
    }

    /// Requests by opcode so far (1 create, 2 delete, 3 exists, 4 getData, 8 getChildren, ...).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// let creates = proxy.counts().get(&15).copied().unwrap_or(0); // create2
    /// # }
    /// ```
    pub fn counts(&self) -> HashMap<i32, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// All requests so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// println!("{}", proxy.total());
    /// # }
    /// ```
    pub fn total(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Watch notifications the server has sent through the proxy so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// println!("{} notifications", proxy.notifications());
    /// # }
    /// ```
    pub fn notifications(&self) -> u64 {
        self.notifications.load(Ordering::Relaxed)
    }

    /// Drops every frame both ways while `on`, without closing connections.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// proxy.blackhole(true);
    /// proxy.blackhole(false);
    /// # }
    /// ```
    pub fn blackhole(&self, on: bool) {
        self.link.hole.store(on, Ordering::SeqCst);
    }

    /// Drops the server's frames (replies, notifications) while `on`; requests still reach the
    /// server. Turning it off closes every open connection, so that no client goes on with a
    /// reply missing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// proxy.drop_replies(true);  // the next request is applied, its reply lost
    /// proxy.drop_replies(false);
    /// # }
    /// ```
    pub fn drop_replies(&self, on: bool) {
        let was = self.link.mute.swap(on, Ordering::SeqCst);
        if was && !on {
            self.reset();
        }
    }

    /// Holds every frame, both ways, for `delay` before forwarding it (zero: no delay).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// proxy.delay(std::time::Duration::from_millis(300)); // a slow link
    /// proxy.delay(std::time::Duration::ZERO);
    /// # }
    /// ```
    pub fn delay(&self, delay: Duration) {
        self.link
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// While `on`, closes every new connection at once (the client tries its next server).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// proxy.refuse(true);
    /// proxy.reset(); // clients behind this proxy move to their other servers
    /// # }
    /// ```
    pub fn refuse(&self, on: bool) {
        self.link.refuse.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// proxy.reset();
    /// # }
    /// ```
    pub fn reset(&self) {
        let mut token = self.link.reset.lock().unwrap_or_else(|e| e.into_inner());
        token.cancel();
        *token = tokio_util::sync::CancellationToken::new();
    }

    /// The longest the clients went without sending a frame (pings included), over the
    /// connections open at the time, since the proxy started or since the last call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// let quiet = proxy.longest_client_silence(); // how often an idle client pings
    /// # }
    /// ```
    pub fn longest_client_silence(&self) -> Duration {
        let mut silence = self.link.silence.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut silence.1)
    }

    /// How many client connections are open through this proxy.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence::local::CountingProxy) {
    /// let on_this_server = proxy.connections() > 0;
    /// # }
    /// ```
    pub fn connections(&self) -> u64 {
        self.link.open.load(Ordering::SeqCst)
    }
}

/// The faults a proxy applies to its connections, shared by all of them.
#[derive(Debug, Clone, Default)]
struct Link {
    hole: Arc<AtomicBool>,
    /// Drop the server's frames only.
    mute: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    refuse: Arc<AtomicBool>,
    /// Cancelled (and replaced) by `reset`.
    reset: Arc<Mutex<tokio_util::sync::CancellationToken>>,
    open: Arc<AtomicU64>,
    /// When a client last sent a frame, and the longest gap seen between two.
    silence: Arc<Mutex<(Option<Instant>, Duration)>>,
}

impl Link {
    fn reset_token(&self) -> tokio_util::sync::CancellationToken {
        self.reset.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counts one open connection until the returned guard drops.
    fn open(&self) -> OpenConnection {
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenConnection(self.open.clone())
    }
}

struct OpenConnection(Arc<AtomicU64>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Forwards length-prefixed ZooKeeper frames from `from` to `to`, handing each frame after the
/// first (the connect request or response, which has no header) to `seen`, dropping frames
/// while the link is blackholed (or, from the server, muted) and delaying them while it is
/// slow.
async fn forward_frames(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    link: &Link,
    from_server: bool,
    seen: impl Fn(&[u8]),
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut first = true;
    loop {
        let len = from.read_i32().await?;
        let mut frame = vec![0u8; len.max(0) as usize];
        from.read_exact(&mut frame).await?;
        if !from_server {
            let mut silence = link.silence.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if let Some(last) = silence.0 {
                silence.1 = silence.1.max(now - last);
            }
            silence.0 = Some(now);
        }
        if link.hole.load(Ordering::SeqCst) || (from_server && link.mute.load(Ordering::SeqCst)) {
            continue;
        }
        let delay = link.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if !first && frame.len() >= 8 {
            seen(&frame);
        }
        first = false;
        to.write_i32(len).await?;
        to.write_all(&frame).await?;
    }
}

fn header_field(frame: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
}

const SUPER_SECRET: i64 = 0xB341_5C00;
const OP_CLOSE_SESSION: i32 = -11;

/// The bytes `java.util.Random(seed).nextBytes(new byte[n])` produces.
fn java_random_bytes(seed: i64, n: usize) -> Vec<u8> {
    const MULT: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;
    let mut state = (seed as u64 ^ MULT) & MASK;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state = state.wrapping_mul(MULT).wrapping_add(0xB) & MASK;
        let mut word = (state >> 16) as u32;
        for _ in 0..(n - out.len()).min(4) {
            out.push(word as u8);
            word >>= 8;
        }
    }
    out
}

/// The password the server gave session `id`.
fn session_password(id: i64) -> Vec<u8> {
    java_random_bytes(id ^ SUPER_SECRET, 16)
}

/// Expires another client's session from outside, as an operator or a chaos test would: it
/// reattaches to session `session` through one of `hosts` (a plain `host:port` list, no
/// chroot) and closes it. The server deletes the session's ephemeral nodes at once, and the
/// owner learns `SessionExpired` when it next reaches a server. Returns the server that
/// took the close.
///
/// ZooKeeper derives a session's password from its id (`ZooKeeperServer.generatePasswd`: a
/// `java.util.Random` seeded with `id ^ 0xB3415C00`), so the id is all it needs. The connect
/// and the close go out in one write: once the server moves the session to our connection,
/// the owner reconnects at once and would take it back before a second round trip.
///
/// # Errors
///
/// A message naming the server when it does not know the session (it never existed, or has
/// already ended), or the last failure when no attempt got a close acknowledged.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(victim: zookeeper_client::Client) {
/// let server = zkfence::local::expire_session("127.0.0.1:2181", victim.session_id()).await;
/// println!("closed through {server:?}");
/// # }
/// ```
pub async fn expire_session(hosts: &str, session: zk::SessionId) -> Result<String, String> {
    let (id, timeout_ms) = (session.0, 30_000);
    let mut last = String::from("no server given");
    // The owner may win the session back before our close is read (the server then drops
    // our connection unanswered): try again until a close is acknowledged or the server no
    // longer knows the session.
    for attempt in 0..20u64 {
        for host in hosts.split(',') {
            let tried =
                tokio::time::timeout(Duration::from_secs(3), close_via(host, id, timeout_ms));
            match tried.await {
                Ok(Ok(Closing::Closed)) => return Ok(host.to_owned()),
                Ok(Ok(Closing::Gone)) if attempt > 0 => return Ok(host.to_owned()),
                Ok(Ok(Closing::Gone)) => {
                    return Err(format!(
                        "{host}: the server does not know session {:#x}",
                        id
                    ))
                }
                Ok(Ok(Closing::Unknown)) => {
                    last = format!("{host}: the connection closed unanswered")
                }
                Ok(Err(err)) => last = format!("{host}: {err}"),
                Err(_) => last = format!("{host}: no answer within 3 s"),
            }
        }
        tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
    }
    Err(last)
}

/// What one reattach-and-close attempt achieved.
enum Closing {
    /// The server acknowledged the close.
    Closed,
    /// The server refused to reattach: the session no longer exists.
    Gone,
    /// The connection closed before the close was answered (the owner took the session back,
    /// or the server closed the session without answering).
    Unknown,
}

async fn close_via(host: &str, id: i64, timeout_ms: i32) -> std::io::Result<Closing> {
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let password = session_password(id);
    let mut connect = Vec::new();
    connect.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    connect.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    connect.extend_from_slice(&timeout_ms.to_be_bytes());
    connect.extend_from_slice(&id.to_be_bytes());
    connect.extend_from_slice(&(password.len() as i32).to_be_bytes());
    connect.extend_from_slice(&password);
    connect.push(0); // not read-only
    let mut close = Vec::new();
    close.extend_from_slice(&1i32.to_be_bytes()); // xid
    close.extend_from_slice(&OP_CLOSE_SESSION.to_be_bytes());
    // The close goes out with the connect: once the server moves the session to this
    // connection, the owner reconnects at once and would take the session back (closing this
    // connection) before a second round trip.
    let mut out = Vec::new();
    for body in [&connect, &close] {
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
    }
    stream.write_all(&out).await?;
    // ConnectResponse: protocol version (4), negotiated timeout (4), session id (8), ...
    match recv(&mut stream).await {
        Ok(reply) if reply.len() >= 16 => {
            if i64::from_be_bytes(reply[8..16].try_into().unwrap_or_default()) != id {
                return Ok(Closing::Gone);
            }
        }
        Ok(_) => return Err(std::io::Error::other("short connect response")),
        Err(_) => return Ok(Closing::Unknown),
    }
    // ReplyHeader: xid (4), zxid (8), err (4).
    match recv(&mut stream).await {
        Ok(reply) if reply.len() >= 16 && reply[12..16] == [0, 0, 0, 0] => Ok(Closing::Closed),
        Ok(reply) => Err(std::io::Error::other(format!(
            "closeSession answered {:?}",
            reply.get(12..16)
        ))),
        Err(_) => Ok(Closing::Unknown),
    }
}

async fn recv(stream: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let len = stream.read_i32().await?;
    let mut body = vec![0u8; len.clamp(0, 1 << 20) as usize];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_random_matches_the_jdk() {
        // new java.util.Random(42).nextInt() == -1170105035
        let bytes = java_random_bytes(42, 4);
        assert_eq!(i32::from_le_bytes(bytes.try_into().unwrap()), -1170105035);
    }
}
