//! [`LocalMariaDb`]: a throwaway MariaDB server from Debian's `mariadb-server` package, for the
//! MySQL/MariaDB fence's tests: `mariadb-install-db` in a temp dir, one loopback port, InnoDB
//! with a small buffer pool, stopped (and its files removed) when dropped or when this process
//! dies.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::database::{Server, Setup};
use crate::run_as::give;
use crate::tls::Serve;

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
    server: Server,
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
        LocalMariaDb::start_with(log_dir, Some(Serve { ca, clients: false }))
    }

    /// [`start_tls`](LocalMariaDb::start_tls), and `root` must show a client certificate `ca`
    /// signed (its accounts `REQUIRE X509`, `--ssl-ca` the CA): a connection without one is
    /// denied access, one with another CA's certificate fails its handshake.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let db = zkfence_harness::LocalMariaDb::start_mtls(std::path::Path::new("/tmp"), &ca)?;
    /// println!(
    ///     "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}&ssl-cert={}&ssl-key={}",
    ///     db.url("test"),
    ///     ca.ca_cert().display(),
    ///     ca.client_cert().display(),
    ///     ca.client_key().display(),
    /// );
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_mtls(log_dir: &Path, ca: &crate::TestCa) -> Result<LocalMariaDb, String> {
        LocalMariaDb::start_with(log_dir, Some(Serve { ca, clients: true }))
    }

    fn start_with(log_dir: &Path, tls: Option<Serve<'_>>) -> Result<LocalMariaDb, String> {
        let install = "install Debian's mariadb-server package (`sudo apt-get install -y mariadb-server`; scripts/test does it)";
        if !Path::new(SERVER).exists() || !Path::new(INSTALL_DB).exists() {
            return Err(format!("{SERVER} is missing: {install}"));
        }
        let setup = Setup::new("mariadb", "mysql", "mariadb-server", log_dir)?;
        let data = setup.dir.join("data");
        // Temporary tables in a dir of this server's own, not the shared /tmp: a bootstrap
        // failed once (CI, 2026-11-29) when its temp table's file was gone from /tmp before
        // its DROP ("Could not remove temporary table ... Unknown table 'mysql.tmp_user_sys'").
        let tmp = setup.dir.join("tmp");
        std::fs::create_dir(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        give(&tmp, setup.who);
        let mut init = Command::new(INSTALL_DB);
        init.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if setup.who.is_some() {
            init.arg("--user=mysql"); // it switches to that user itself
        }
        setup.init(init, false)?;
        let mut cmd = Command::new(SERVER);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", setup.dir.join("sock").display()))
            .arg(format!("--pid-file={}", setup.dir.join("pid").display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!("--log-error={}", setup.log.display()))
            .args([
                &format!("--port={}", setup.port),
                "--bind-address=127.0.0.1",
            ])
            .args(["--skip-name-resolve", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=100"])
            .stderr(Stdio::null());
        if let Some(tls) = tls {
            serve_tls_only(&mut cmd, &setup, tls)?;
        }
        // SIGTERM: a clean shutdown.
        let server = setup.launch(cmd, libc::SIGTERM, Duration::from_secs(60), ready)?;
        Ok(LocalMariaDb { server })
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
        self.server.port
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
        format!("mysql://root@127.0.0.1:{}/{db}", self.server.port)
    }
}

crate::database::store_faults_by_server!(LocalMariaDb);

/// TLS on `cmd`'s server with the CA's certificate, and connections in the clear refused; with
/// `tls.clients`, `root`'s accounts require a client certificate the CA signed.
fn serve_tls_only(cmd: &mut Command, setup: &Setup, tls: Serve<'_>) -> Result<(), String> {
    let (key, cert) = tls.ca.server_files(&setup.dir, setup.who)?;
    cmd.arg(format!("--ssl-cert={}", cert.display()))
        .arg(format!("--ssl-key={}", key.display()))
        .arg("--require-secure-transport=ON");
    if tls.clients {
        let ca = tls.ca.ca_file(&setup.dir, setup.who)?;
        // Run at every start, restarts included; the accounts `mariadb-install-db` made.
        let init = setup.dir.join("init.sql");
        let sql: String = ["localhost", "127.0.0.1", "::1", "%"]
            .iter()
            .map(|host| format!("ALTER USER IF EXISTS 'root'@'{host}' REQUIRE X509;\n"))
            .collect();
        std::fs::write(&init, sql).map_err(|e| format!("{}: {e}", init.display()))?;
        give(&init, setup.who);
        cmd.arg(format!("--ssl-ca={}", ca.display()))
            .arg(format!("--init-file={}", init.display()));
    }
    Ok(())
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
