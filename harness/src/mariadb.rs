//! [`LocalMariaDb`]: a throwaway MariaDB server from Debian's `mariadb-server` package, for the
//! MySQL/MariaDB fence's tests: `mariadb-install-db` in a temp dir, one loopback port, InnoDB
//! with a small buffer pool, stopped (and its files removed) when dropped or when this process
//! dies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::run_as::{as_user, give, identity};
use zkfence_testkit::{spawn_tied, Keeper};

const SERVER: &str = "/usr/sbin/mariadbd";
const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
const ADMIN: &str = "/usr/bin/mariadb-admin";

/// A MariaDB server that lives as long as this value. Its `root` account has no password on
/// loopback.
///
/// # Examples
///
/// ```no_run
/// let db = zkfence_harness::LocalMariaDb::start(&std::env::temp_dir())?;
/// println!("mysql_async::Conn::from_url({:?})", db.url("test"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalMariaDb {
    child: Child,
    dir: PathBuf,
    port: u16,
    /// Dropped after the server is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

impl LocalMariaDb {
    /// Creates the system tables in a fresh temp dir and starts the server on a free loopback
    /// port (no binary log, no DNS lookups, a 32 MiB buffer pool); its error log goes to
    /// `log_dir/mariadb.log`. Waits (up to 60 s) until it answers a ping.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let db = zkfence_harness::LocalMariaDb::start(std::path::Path::new("/tmp"))?;
    /// assert!(db.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn start(log_dir: &Path) -> Result<LocalMariaDb, String> {
        LocalMariaDb::start_with(log_dir, None)
    }

    /// [`start`](LocalMariaDb::start), with TLS (`ca`'s server certificate) and
    /// `require_secure_transport`: a connection in the clear is refused.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let db = zkfence_harness::LocalMariaDb::start_tls(std::path::Path::new("/tmp"), &ca)?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_tls(log_dir: &Path, ca: &crate::TestCa) -> Result<LocalMariaDb, String> {
        LocalMariaDb::start_with(log_dir, Some(ca))
    }

    fn start_with(log_dir: &Path, tls: Option<&crate::TestCa>) -> Result<LocalMariaDb, String> {
        let install = "install Debian's mariadb-server package (`sudo apt-get install -y mariadb-server`; scripts/test does it)";
        if !Path::new(SERVER).exists() || !Path::new(INSTALL_DB).exists() {
            return Err(format!("{SERVER} is missing: {install}"));
        }
        let who = identity("mysql", "mariadb-server")?;
        let dir = zkfence_testkit::temp_dir("mariadb").map_err(|e| format!("temp dir: {e}"))?;
        give(&dir, who);
        let data = dir.join("data");
        let mut init = Command::new(INSTALL_DB);
        init.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if who.is_some() {
            init.arg("--user=mysql");
        }
        let out = init.output().map_err(|e| format!("{INSTALL_DB}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-install-db failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let port = zkfence_testkit::free_port().map_err(|e| format!("no free port: {e}"))?;
        let log_path = log_dir.join("mariadb.log");
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        give(&log_path, who);
        let mut cmd = Command::new(SERVER);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("sock").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--log-error={}", log_path.display()))
            .args([&format!("--port={port}"), "--bind-address=127.0.0.1"])
            .args(["--skip-name-resolve", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=100"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(ca) = tls {
            let (key, cert) = ca.server_files(&dir, who)?;
            cmd.arg(format!("--ssl-cert={}", cert.display()))
                .arg(format!("--ssl-key={}", key.display()))
                .arg("--require-secure-transport=ON");
        }
        as_user(&mut cmd, who);
        // SIGTERM: a clean shutdown; the server goes with us however we die.
        let (child, _keeper) =
            spawn_tied(cmd, libc::SIGTERM).map_err(|e| format!("start mariadbd: {e}"))?;
        let db = LocalMariaDb {
            child,
            dir,
            port,
            _keeper,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready(port) {
            if Instant::now() > deadline {
                return Err(format!(
                    "mariadbd did not answer on port {port} within 60 s; see {}",
                    log_path.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(db)
    }

    /// The port it listens on, on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let db = zkfence_harness::LocalMariaDb::start(std::path::Path::new("/tmp"))?;
    /// assert!(db.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A `mysql://` URL for database `db` as `root` (`mysql_async::Opts::from_url`). The
    /// database is not created.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let db = zkfence_harness::LocalMariaDb::start(std::path::Path::new("/tmp"))?;
    /// assert!(db.url("test").ends_with("/test"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for LocalMariaDb {
    fn drop(&mut self) {
        // SAFETY: signalling our own child (SIGTERM: a clean shutdown).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the server on `port` answers `mariadb-admin ping` (not only its port).
fn ready(port: u16) -> bool {
    Command::new(ADMIN)
        .args(["--protocol=tcp", "-h", "127.0.0.1", "-u", "root"])
        .arg(format!("--port={port}"))
        .args(["--connect-timeout=2", "ping"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
