//! [`LocalZooKeeper`]: one throwaway standalone server from Debian's package (open, TLS or SASL),
//! and the JVM and config plumbing the ensembles share.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::StartError;
use crate::options::EnsembleOptions;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A JVM under its bash wrapper.
#[derive(Debug)]
pub(crate) struct Jvm {
    wrapper: Child,
    /// Closing it tells the wrapper to kill the JVM.
    stdin: Option<ChildStdin>,
    pid: i32,
}

impl Jvm {
    /// Starts `java <flags> <main> <args>` under the wrapper, inside network namespace
    /// `netns` when given.
    pub(crate) fn spawn(
        dir: &Path,
        netns: Option<&str>,
        flags: &[String],
        main: &str,
        args: &[&str],
    ) -> Result<Jvm, StartError> {
        let dist = crate::Distribution::find()?;
        let script = r#""$JAVA_BIN" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
            -Dzookeeper.admin.enableServer=false -Dzookeeper.4lw.commands.whitelist='*' $ZK_JVMFLAGS \
            -cp "$ZK_CLASSPATH" "$@" >"$ZK_LOG" 2>&1 &
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
            .env("JAVA_BIN", dist.java())
            .env("ZK_CLASSPATH", dist.classpath())
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

    pub(crate) fn signal(&self, signal: i32) {
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
/// let answer = zkfence_testkit::four_letter("127.0.0.1:2181", "srvr");
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
pub(crate) struct Node {
    pub(crate) host: String,
    port: u16,
    dir: PathBuf,
    main: &'static str,
    /// The network namespace it runs in, if it has its own.
    pub(crate) netns: Option<String>,
    jvm_flags: Vec<String>,
    pub(crate) jvm: Mutex<Option<Jvm>>,
}

/// A free loopback port for a server you start: one below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768–60999 by default), from a start that differs per
/// process and call, that binds on `127.0.0.1` now, and that no caller of this function, in
/// this process or another, was handed in the last ten minutes by a process still alive.
///
/// The kernel never hands out such a port to a client's connection or a bind to port 0 (a
/// port from the ephemeral range was taken by a client's connection before PostgreSQL could
/// bind it: CI 2026-11-29). The gap between this check and the server's own bind was still
/// open to another test binary picking ports the same way (a Redis Cluster node found its
/// port answered by another binary's server: CI 2026-11-29), so each port handed out is
/// reserved by a file `zkfence-ports/<port>` under the temp dir holding the caller's pid,
/// taken with `O_EXCL`; a reservation of a process that has exited, or older than ten minutes
/// (a server binds in seconds), is taken over. Where the temp dir cannot be written, the bind
/// check alone decides. Falls back to a port the kernel chooses when the range starts too low.
///
/// # Errors
///
/// The socket's error.
///
/// # Examples
///
/// ```
/// let port = zkfence_testkit::free_port()?;
/// assert!(port > 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn free_port() -> std::io::Result<u16> {
    const LOWEST: u16 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral > LOWEST + 1_000 {
        let span = u64::from(ephemeral - LOWEST);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::from(d.subsec_nanos()));
        let seed = u64::from(std::process::id()) * 7_919
            + NEXT.fetch_add(1, Ordering::Relaxed) * 104_729
            + nanos;
        for step in 0..span {
            let port = LOWEST + u16::try_from((seed + step * 977) % span).unwrap_or(0);
            if TcpListener::bind(("127.0.0.1", port)).is_ok() && reserve(port) {
                return Ok(port);
            }
        }
    }
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// How long a reservation of [`free_port`] keeps a port from other callers.
const RESERVED_FOR: Duration = Duration::from_secs(600);

/// Reserves `port` for this process (see [`free_port`]): false when another caller holds it.
fn reserve(port: u16) -> bool {
    let dir = std::env::temp_dir().join("zkfence-ports");
    if std::fs::create_dir_all(&dir).is_err() {
        return true;
    }
    let path = dir.join(port.to_string());
    for _ in 0..2 {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                let _ = write!(file, "{}", std::process::id());
                return true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !reservation_lapsed(&path) {
                    return false;
                }
                // Two callers taking over the same lapsed port at once may both win; each
                // still had to bind it first, within the same instant.
                let _ = std::fs::remove_file(&path);
            }
            Err(_) => return true,
        }
    }
    false
}

/// Whether the reservation at `path` is of a process that has exited, or older than
/// [`RESERVED_FOR`]. One just created and not yet written holds.
fn reservation_lapsed(path: &Path) -> bool {
    let age = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok());
    if age.is_some_and(|age| age > RESERVED_FOR) {
        return true;
    }
    let owner = std::fs::read_to_string(path).ok();
    let pid = owner
        .as_deref()
        .and_then(|text| text.trim().parse::<u32>().ok());
    pid.is_some_and(|pid| !crate::process::is_alive(pid))
}

/// A fresh directory of this process's own under the system's temp dir,
/// `zkfence-<kind>-<pid>-<n>`, with an empty `data` folder in it, for a server's files; never
/// one a crashed process with the same pid left. Removing it is the caller's.
///
/// # Errors
///
/// The file system's error.
///
/// # Examples
///
/// ```
/// let dir = zkfence_testkit::temp_dir("mystore")?;
/// assert!(dir.join("data").is_dir());
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn temp_dir(kind: &str) -> std::io::Result<PathBuf> {
    loop {
        let name = format!(
            "zkfence-{kind}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = std::env::temp_dir().join(name);
        // A folder of its own, made here: one left by a crashed process that had our pid (pids
        // are reused) is skipped, never shared.
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                std::fs::create_dir(dir.join("data"))?;
                return Ok(dir);
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err),
        }
    }
}

/// The settings every server here shares: the tick and limits of `options` (sessions from
/// 2 ticks to 20 ticks, at least 30 s), no fsync, four-letter words on, the admin server off.
pub(crate) fn base_config(dir: &Path, host: &str, port: u16, options: &EnsembleOptions) -> String {
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
    pub(crate) fn new(
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

    pub(crate) fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub(crate) fn spawn(&self) -> Result<(), StartError> {
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

    pub(crate) fn serving(&self) -> bool {
        four_letter(&self.addr(), "srvr").is_some_and(|s| s.contains("Mode:"))
    }

    pub(crate) fn wait_serving(&self, timeout: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + timeout;
        while !self.serving() {
            if Instant::now() >= deadline {
                let log = self.log();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let mut log = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                log.push_str(&self.jvm_state());
                return Err(StartError::NotServing { timeout, log });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// What became of the JVM, for a start that timed out: its pid, its state letter in
    /// `/proc` (`R` running, `S` sleeping, `D` in uninterruptible I/O, `T` stopped, `Z` exited
    /// and not reaped) and the kernel function it waits in. An empty log alone cannot tell a
    /// JVM that never ran from one stuck before its first line.
    fn jvm_state(&self) -> String {
        let pid = self.pid();
        if pid <= 0 {
            return "\n(no JVM was started)".into();
        }
        let state = crate::process::linux_state(pid as u32).map_or("gone".into(), String::from);
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        format!("\n(the JVM, pid {pid}: state {state}, waiting in {wchan:?})")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub(crate) fn pid(&self) -> i32 {
        self.jvm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map_or(0, |j| j.pid)
    }

    pub(crate) fn signal(&self, signal: i32) {
        if let Some(jvm) = self.jvm.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            jvm.signal(signal);
        }
    }

    pub(crate) fn kill(&self) {
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

pub(crate) const STANDALONE: &str = "org.apache.zookeeper.server.ZooKeeperServerMain";
pub(crate) const QUORUM: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One standalone ZooKeeper server on a loopback port, stopped (by pid) when dropped.
///
/// # Examples
///
/// ```no_run
/// let zk = zkfence_testkit::LocalZooKeeper::start()?;
/// println!("connect to {}", zk.addr());
/// zk.pause();   // SIGSTOP: sessions see silence
/// zk.resume();  // SIGCONT
/// # Ok::<(), zkfence_testkit::StartError>(())
/// ```
#[derive(Debug)]
pub struct LocalZooKeeper {
    node: Node,
    /// With TLS: the `secureClientPort` and the PEM of the CA that signed the server's key.
    tls: Option<(u16, PathBuf)>,
}

/// How a [`LocalZooKeeper`] is set up beyond the shared settings: how it lets clients in, its
/// tick, whether it syncs its log.
#[derive(Debug, PartialEq, Eq)]
enum Setup {
    Open,
    /// Open, set up for measurements: the JIT's every tier, and `forceSync` as given.
    Bench {
        force_sync: bool,
    },
    /// Open, with this tickTime instead of the test default.
    Stock(Duration),
    Tls,
    /// SASL DIGEST-MD5 required, for these (user, password) pairs.
    Sasl(Vec<(String, String)>),
}

/// The password of the test key stores; they live in the server's temp dir for one run.
const STORE_PASSWORD: &str = "zkfence-test";

/// A throwaway CA and a server key pair it signs for `127.0.0.1` and `localhost`, made with
/// `keytool` in `dir`: `ca.pem` (what clients trust) and `server.p12` (the server's key store).
fn make_test_certificates(dir: &Path) -> Result<PathBuf, StartError> {
    let store = "-storetype PKCS12 -storepass {p} -validity 2";
    let steps = [
        "-genkeypair -alias ca -dname CN=zkfence-test-ca -ext bc:c -keyalg EC -groupname secp256r1 -keystore ca.p12 {store}",
        "-exportcert -rfc -alias ca -keystore ca.p12 -storepass {p} -file ca.pem",
        "-genkeypair -alias zk -dname CN=localhost -keyalg EC -groupname secp256r1 -keystore server.p12 {store}",
        "-certreq -alias zk -keystore server.p12 -storepass {p} -file server.csr",
        "-gencert -alias ca -keystore ca.p12 -storepass {p} -infile server.csr -outfile server.pem -rfc -validity 2 -ext SAN=ip:127.0.0.1,dns:localhost -ext eku=serverAuth,clientAuth",
        "-importcert -alias ca -file ca.pem -keystore server.p12 -storepass {p} -noprompt",
        "-importcert -alias zk -file server.pem -keystore server.p12 -storepass {p} -noprompt",
    ];
    for step in steps {
        let line = step
            .replace("{store}", store)
            .replace("{p}", STORE_PASSWORD);
        let args: Vec<&str> = line.split_whitespace().collect();
        let out = std::process::Command::new("keytool")
            .args(&args)
            .current_dir(dir)
            .output()?;
        if !out.status.success() {
            return Err(StartError::Io(std::io::Error::other(format!(
                "keytool {}: {}",
                args[0],
                String::from_utf8_lossy(&out.stderr)
            ))));
        }
    }
    Ok(dir.join("ca.pem"))
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
    /// let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start() -> Result<LocalZooKeeper, StartError> {
        LocalZooKeeper::start_configured(Setup::Open)
    }

    /// Starts a server that also serves TLS on a `secureClientPort` ([`tls_addr`]), with a
    /// key signed by a throwaway CA ([`tls_ca`]) that `keytool` makes at start. Client
    /// certificates are not required. The plain port stays open for set-up and checks.
    ///
    /// [`tls_addr`]: LocalZooKeeper::tls_addr
    /// [`tls_ca`]: LocalZooKeeper::tls_ca
    ///
    /// # Errors
    ///
    /// As [`start`](LocalZooKeeper::start), and [`StartError::Io`] when `keytool` fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::LocalZooKeeper::start_tls()?;
    /// println!("tcp+tls://{} trusting {}", zk.tls_addr().unwrap(), zk.tls_ca().unwrap().display());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start_tls() -> Result<LocalZooKeeper, StartError> {
        LocalZooKeeper::start_configured(Setup::Tls)
    }

    /// Starts a server with this `tickTime` (the default here is 200 ms; stock servers use
    /// 2 s, which makes the sessions they grant 4 s to 40 s).
    ///
    /// # Errors
    ///
    /// As [`start`](LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let stock = zkfence_testkit::LocalZooKeeper::start_with_tick(std::time::Duration::from_secs(2))?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start_with_tick(tick: Duration) -> Result<LocalZooKeeper, StartError> {
        LocalZooKeeper::start_configured(Setup::Stock(tick))
    }

    /// Starts a server set up for measurements rather than quick tests: the JVM compiles with
    /// every JIT tier, as a stock server's does (test servers stop at the first tier, which
    /// starts faster and runs slower), and with `force_sync` every transaction is fsynced
    /// before it is acknowledged, as on a production ensemble (test servers never fsync).
    ///
    /// # Errors
    ///
    /// As [`start`](LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let durable = zkfence_testkit::LocalZooKeeper::start_for_bench(true)?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start_for_bench(force_sync: bool) -> Result<LocalZooKeeper, StartError> {
        LocalZooKeeper::start_configured(Setup::Bench { force_sync })
    }

    /// Starts a server that requires SASL DIGEST-MD5 authentication (ZooKeeper's
    /// `enforce.auth.enabled`): `users` are the (name, password) pairs of its JAAS `Server`
    /// section. A client that does not authenticate has its requests refused.
    ///
    /// # Errors
    ///
    /// As [`start`](LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::LocalZooKeeper::start_sasl(&[("alice", "secret")])?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start_sasl(users: &[(&str, &str)]) -> Result<LocalZooKeeper, StartError> {
        let users = users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
        LocalZooKeeper::start_configured(Setup::Sasl(users))
    }

    fn start_configured(setup: Setup) -> Result<LocalZooKeeper, StartError> {
        let port = free_port()?;
        let dir = temp_dir("zk")?;
        let mut options = EnsembleOptions::default();
        if let Setup::Stock(tick) = setup {
            options = options.with_tick(tick);
        }
        let mut jvm_flags = Vec::new();
        if let Setup::Bench { force_sync } = setup {
            // A later flag wins on the JVM's command line, and a later key in the server's
            // properties file.
            jvm_flags.push("-XX:TieredStopAtLevel=4".to_owned());
            if force_sync {
                options.config.push("forceSync=yes".to_owned());
            }
        }
        if let Setup::Sasl(users) = &setup {
            let entries: String = users
                .iter()
                .map(|(user, password)| format!("\n    user_{user}=\"{password}\""))
                .collect();
            let jaas = dir.join("jaas.conf");
            std::fs::write(
                &jaas,
                format!("Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required{entries};\n}};\n"),
            )?;
            jvm_flags.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas.display()
            ));
            options.config.extend([
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
                    .to_owned(),
                "enforce.auth.enabled=true".to_owned(),
                "enforce.auth.schemes=sasl".to_owned(),
            ]);
        }
        let tls = if setup == Setup::Tls {
            let secure_port = free_port()?;
            let ca = make_test_certificates(&dir)?;
            let store = dir.join("server.p12");
            options.config.extend([
                format!("secureClientPort={secure_port}"),
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory".to_owned(),
                format!("ssl.keyStore.location={}", store.display()),
                format!("ssl.keyStore.password={STORE_PASSWORD}"),
                "ssl.keyStore.type=PKCS12".to_owned(),
                format!("ssl.trustStore.location={}", store.display()),
                format!("ssl.trustStore.password={STORE_PASSWORD}"),
                "ssl.trustStore.type=PKCS12".to_owned(),
                "ssl.clientAuth=none".to_owned(),
            ]);
            Some((secure_port, ca))
        } else {
            None
        };
        let config = base_config(&dir, "127.0.0.1", port, &options);
        let zk = LocalZooKeeper {
            tls,
            node: Node::new("127.0.0.1", port, dir, STANDALONE, &config, None, jvm_flags)?,
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
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// assert!(zk.addr().starts_with("127.0.0.1:"));
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn addr(&self) -> String {
        self.node.addr()
    }

    /// With [`start_tls`](LocalZooKeeper::start_tls): the TLS address, `127.0.0.1:<port>`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::LocalZooKeeper::start_tls()?;
    /// let hosts = format!("tcp+tls://{}", zk.tls_addr().unwrap());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn tls_addr(&self) -> Option<String> {
        self.tls
            .as_ref()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
    }

    /// With [`start_tls`](LocalZooKeeper::start_tls): the CA certificate (PEM) to trust.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::LocalZooKeeper::start_tls()?;
    /// let ca = std::fs::read_to_string(zk.tls_ca().unwrap())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tls_ca(&self) -> Option<&Path> {
        self.tls.as_ref().map(|(_, ca)| ca.as_path())
    }

    /// The server's log so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// eprintln!("{}", zk.log());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn log(&self) -> String {
        self.node.log()
    }

    /// The JVM's pid (0 while killed).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// assert!(zk.pid() > 0);
    /// # Ok::<(), zkfence_testkit::StartError>(())
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
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// zk.pause();
    /// zk.resume();
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn pause(&self) {
        self.node.signal(libc::SIGSTOP);
    }

    /// SIGCONT after [`pause`](Self::pause).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// zk.pause();
    /// zk.resume();
    /// # Ok::<(), zkfence_testkit::StartError>(())
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
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// zk.kill();
    /// zk.restart()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
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
    /// # let zk = zkfence_testkit::LocalZooKeeper::start()?;
    /// zk.restart()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn restart(&self) -> Result<(), StartError> {
        self.node.kill();
        self.node.spawn()?;
        self.node.wait_serving(START_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ports handed out are never handed out again while reserved, in this process or by
    /// another; a reservation of a process that has exited is taken over.
    #[test]
    fn a_port_handed_out_is_not_handed_out_again() {
        let ports: Vec<u16> = (0..300).map(|_| free_port().unwrap()).collect();
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
        let reservation = |port: u16| std::env::temp_dir().join(format!("zkfence-ports/{port}"));
        let ours = std::fs::read_to_string(reservation(ports[0])).unwrap();
        assert_eq!(ours, std::process::id().to_string());
        assert!(!reserve(ports[0]), "a live reservation was taken over");
        // A process that has exited: `true`, waited for, so its pid is gone.
        let mut gone = Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        std::fs::write(reservation(ports[1]), gone.id().to_string()).unwrap();
        assert!(reserve(ports[1]), "an exited process's reservation held");
        for port in ports {
            let _ = std::fs::remove_file(reservation(port));
        }
    }
}
