//! [`LocalRedis`]: a throwaway `redis-server` from Debian's package, the lock peer the bench
//! measures zkfence against: one loopback port, no persistence, stopped when dropped or when
//! this process dies.

use std::ffi::OsString;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zkfence_testkit::{spawn_tied, Keeper};

use crate::tls::Serve;

/// Where Debian's package puts the server.
const REDIS_SERVER: &str = "/usr/bin/redis-server";

/// A Redis server that lives as long as this value.
///
/// # Examples
///
/// ```no_run
/// let redis = zkfence_harness::LocalRedis::start()?;
/// println!("redis at {}", redis.addr());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalRedis {
    child: Child,
    dir: PathBuf,
    port: u16,
    /// The server's arguments, to start it again after a crash.
    args: Vec<OsString>,
    /// Whether it serves TLS only (then readiness is an accepted connection, not a `PING`).
    tls: bool,
    /// Dropped after the server is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

impl LocalRedis {
    /// Starts `redis-server` on a free loopback port, in a fresh temp dir, with persistence
    /// off (no RDB snapshots, no append-only file: a lock service's keys are short-lived) and
    /// its log in that dir. Waits (up to 10 s) until it answers `PING`.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let redis = zkfence_harness::LocalRedis::start()?;
    /// assert!(redis.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn start() -> Result<LocalRedis, String> {
        LocalRedis::start_with(None, false)
    }

    /// [`start`](LocalRedis::start), durable: an append-only file synced on every write
    /// (`appendonly yes`, `appendfsync always`), so that what Redis acknowledged survives a
    /// `kill -9` ([`StoreFaults::crash_and_restart`](crate::StoreFaults::crash_and_restart)).
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence_harness::StoreFaults;
    /// let mut redis = zkfence_harness::LocalRedis::start_durable()?;
    /// redis.crash_and_restart()?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_durable() -> Result<LocalRedis, String> {
        LocalRedis::start_with(None, true)
    }

    /// [`start`](LocalRedis::start), serving TLS only (`ca`'s server certificate on its port,
    /// no plain port; clients need no certificate of their own): `rediss://127.0.0.1:<port>`.
    /// Waits (up to 10 s) until the port accepts connections.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let redis = zkfence_harness::LocalRedis::start_tls(&ca)?;
    /// println!("rediss://{}", redis.addr());
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_tls(ca: &crate::TestCa) -> Result<LocalRedis, String> {
        LocalRedis::start_with(Some(Serve { ca, clients: false }), false)
    }

    /// [`start_tls`](LocalRedis::start_tls), and clients must show a certificate `ca` signed
    /// (`--tls-auth-clients yes`): a handshake without one, or with another CA's, fails.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let redis = zkfence_harness::LocalRedis::start_mtls(&ca)?;
    /// println!(
    ///     "rediss://{}/?ssl_ca_certs={}&ssl_certfile={}&ssl_keyfile={}",
    ///     redis.addr(),
    ///     ca.ca_cert().display(),
    ///     ca.client_cert().display(),
    ///     ca.client_key().display(),
    /// );
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_mtls(ca: &crate::TestCa) -> Result<LocalRedis, String> {
        LocalRedis::start_with(Some(Serve { ca, clients: true }), false)
    }

    fn start_with(tls: Option<Serve<'_>>, durable: bool) -> Result<LocalRedis, String> {
        if !std::path::Path::new(REDIS_SERVER).exists() {
            return Err(format!("{REDIS_SERVER} is missing: install Debian's redis-server package (`sudo apt-get install -y redis-server`; scripts/bench and scripts/test do it)"));
        }
        let dir = zkfence_testkit::temp_dir("redis").map_err(|e| format!("temp dir: {e}"))?;
        let port = zkfence_testkit::free_port().map_err(|e| format!("no free port: {e}"))?;
        let mut cmd = Command::new(REDIS_SERVER);
        match tls {
            None => cmd.args(["--port", &port.to_string()]),
            Some(Serve { ca, clients }) => cmd
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(ca.server_cert())
                .arg("--tls-key-file")
                .arg(ca.server_key())
                .arg("--tls-ca-cert-file")
                .arg(ca.ca_cert())
                .args(["--tls-auth-clients", if clients { "yes" } else { "no" }]),
        };
        let persistence: &[&str] = match durable {
            true => &["--appendonly", "yes", "--appendfsync", "always"],
            false => &["--appendonly", "no"],
        };
        cmd.args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--daemonize", "no"])
            .args(persistence)
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"));
        let args: Vec<OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
        let (child, _keeper) = spawn(&args)?;
        let redis = LocalRedis {
            child,
            dir,
            port,
            args,
            tls: tls.is_some(),
            _keeper,
        };
        redis.wait_ready()?;
        Ok(redis)
    }

    /// Waits up to 10 s until it answers `PING` (a TLS port: until it accepts connections,
    /// as `PING` would need a handshake); a server loading its append-only file answers
    /// `-LOADING` until it is done.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let ready = || match self.tls {
            false => self.answers_ping(),
            true => TcpStream::connect(("127.0.0.1", self.port)).is_ok(),
        };
        while !ready() {
            if Instant::now() > deadline {
                return Err(format!(
                    "redis-server did not answer on port {} within 10 s; see {}",
                    self.port,
                    self.dir.join("redis.log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    /// `127.0.0.1:<port>`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let redis = zkfence_harness::LocalRedis::start()?;
    /// assert!(redis.addr().starts_with("127.0.0.1:"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port it listens on, on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let redis = zkfence_harness::LocalRedis::start()?;
    /// assert!(redis.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id (for its CPU time).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let redis = zkfence_harness::LocalRedis::start()?;
    /// assert!(redis.pid() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

/// Without the append-only file ([`LocalRedis::start`]) a crash loses every key.
impl crate::StoreFaults for LocalRedis {
    fn pause(&self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
    }

    fn resume(&self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
    }

    fn crash_and_restart(&mut self) -> Result<(), String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.child, self._keeper) = spawn(&self.args)?;
        self.wait_ready()
    }
}

/// Starts `redis-server` with `args`, tied to this process: it stops with us however we die,
/// whichever thread started it.
fn spawn(args: &[OsString]) -> Result<(Child, Keeper), String> {
    let mut cmd = Command::new(REDIS_SERVER);
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    spawn_tied(cmd, libc::SIGKILL).map_err(|e| format!("start redis-server: {e}"))
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        crate::StoreFaults::resume(self);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_redis_answers_and_goes_with_its_value() {
        let redis = LocalRedis::start().unwrap_or_else(|err| panic!("{err}"));
        assert!(redis.answers_ping());
        let (pid, dir) = (redis.pid(), redis.dir.clone());
        drop(redis);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        assert!(!dir.exists());
    }
}
