//! [`LocalPostgres`]: a throwaway PostgreSQL server from Debian's package, for the stores the
//! examples and the chaos suite fence: `initdb` in a temp dir, one loopback port, fsync on,
//! stopped (and its files removed) when dropped or when this process dies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::database::{Server, Setup};
use crate::run_as::give;
use crate::tls::Serve;

/// The superuser `initdb` creates; it trusts loopback connections.
pub const POSTGRES_USER: &str = crate::tls::CLIENT_NAME;

/// A PostgreSQL server that lives as long as this value.
///
/// # Examples
///
/// ```no_run
/// let pg = zkfence_harness::LocalPostgres::start(&std::env::temp_dir())?;
/// println!("tokio_postgres::connect({:?}, NoTls)", pg.conninfo("postgres"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalPostgres {
    server: Server,
}

/// Debian's newest installed PostgreSQL `bin` folder.
fn bin_dir() -> Result<PathBuf, String> {
    let install = "install Debian's postgresql package (`sudo apt-get install -y postgresql`; scripts/test and chaos/run do it)";
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| format!("PostgreSQL is not installed: {install}"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    found.sort();
    found
        .pop()
        .ok_or_else(|| format!("no /usr/lib/postgresql/*/bin/postgres: {install}"))
}

impl LocalPostgres {
    /// Runs `initdb` in a fresh temp dir and starts the server on a free loopback port; its
    /// log goes to `log_dir/postgres.log`. Waits (up to 30 s) until it accepts connections.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let pg = zkfence_harness::LocalPostgres::start(std::path::Path::new("/tmp"))?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start(log_dir: &Path) -> Result<LocalPostgres, String> {
        LocalPostgres::start_with(log_dir, None)
    }

    /// [`start`](LocalPostgres::start), serving TLS only on its TCP port (`ssl=on` with
    /// `ca`'s server certificate; `hostnossl` connections rejected).
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let pg = zkfence_harness::LocalPostgres::start_tls(std::path::Path::new("/tmp"), &ca)?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_tls(log_dir: &Path, ca: &crate::TestCa) -> Result<LocalPostgres, String> {
        LocalPostgres::start_with(log_dir, Some(Serve { ca, clients: false }))
    }

    /// [`start_tls`](LocalPostgres::start_tls), and every TCP connection must show a client
    /// certificate `ca` signed whose common name is the user it connects as (`pg_hba.conf`'s
    /// `hostssl all all 127.0.0.1/32 cert`, `ssl_ca_file` the CA):
    /// [`TestCa::client_cert`](crate::TestCa::client_cert) is [`POSTGRES_USER`]'s.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let pg = zkfence_harness::LocalPostgres::start_mtls(std::path::Path::new("/tmp"), &ca)?;
    /// println!(
    ///     "postgresql://{}@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
    ///     zkfence_harness::POSTGRES_USER,
    ///     pg.port(),
    ///     ca.ca_cert().display(),
    ///     ca.client_cert().display(),
    ///     ca.client_key().display(),
    /// );
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_mtls(log_dir: &Path, ca: &crate::TestCa) -> Result<LocalPostgres, String> {
        LocalPostgres::start_with(log_dir, Some(Serve { ca, clients: true }))
    }

    fn start_with(log_dir: &Path, tls: Option<Serve<'_>>) -> Result<LocalPostgres, String> {
        let bin = bin_dir()?;
        let setup = Setup::new("postgres", "postgres", "postgresql", log_dir)?;
        let data = setup.dir.join("pgdata");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb.arg("-D").arg(&data).args([
            "-U",
            POSTGRES_USER,
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ]);
        setup.init(initdb, true)?;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&setup.log)
            .map_err(|e| format!("{}: {e}", setup.log.display()))?;
        let mut cmd = Command::new(bin.join("postgres"));
        cmd.arg("-D")
            .arg(&data)
            .args(["-p", &setup.port.to_string(), "-k"])
            .arg(&setup.dir)
            .stderr(log);
        for setting in [
            "listen_addresses=127.0.0.1",
            "fsync=on",
            "synchronous_commit=on",
            "shared_buffers=32MB",
            "max_connections=50",
        ] {
            cmd.args(["-c", setting]);
        }
        if let Some(tls) = tls {
            serve_tls_only(&mut cmd, &setup, tls)?;
        }
        // SIGINT: a fast shutdown. Listening is not serving: during startup postgres accepts
        // connections and refuses them ("the database system is starting up"); pg_isready
        // asks the server itself.
        let server = setup.launch(cmd, libc::SIGINT, Duration::from_secs(30), move |port| {
            ready(&bin, port)
        })?;
        Ok(LocalPostgres { server })
    }

    /// The port it listens on, on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let pg = zkfence_harness::LocalPostgres::start(std::path::Path::new("/tmp"))?;
    /// assert!(pg.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// A `tokio-postgres` connection string for database `db` as [`POSTGRES_USER`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let pg = zkfence_harness::LocalPostgres::start(std::path::Path::new("/tmp"))?;
    /// assert!(pg.conninfo("postgres").contains("dbname=postgres"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={POSTGRES_USER} dbname={db} connect_timeout=5",
            self.server.port
        )
    }
}

crate::database::store_faults_by_server!(LocalPostgres);

/// TLS on `cmd`'s server with the CA's certificate, and connections in the clear rejected;
/// with `tls.clients`, connections without a client certificate the CA signed too.
fn serve_tls_only(cmd: &mut Command, setup: &Setup, tls: Serve<'_>) -> Result<(), String> {
    let (key, cert) = tls.ca.server_files(&setup.dir, setup.who)?;
    let method = match tls.clients {
        true => "cert",
        false => "trust",
    };
    let hba = setup.dir.join("pg_hba.conf");
    std::fs::write(
        &hba,
        format!("local all all trust\nhostssl all all 127.0.0.1/32 {method}\nhostnossl all all 127.0.0.1/32 reject\n"),
    )
    .map_err(|e| format!("{}: {e}", hba.display()))?;
    give(&hba, setup.who);
    let mut settings = vec![
        "ssl=on".to_owned(),
        format!("ssl_cert_file={}", cert.display()),
        format!("ssl_key_file={}", key.display()),
        format!("hba_file={}", hba.display()),
    ];
    if tls.clients {
        let ca = tls.ca.ca_file(&setup.dir, setup.who)?;
        settings.push(format!("ssl_ca_file={}", ca.display()));
    }
    for setting in settings {
        cmd.arg("-c").arg(setting);
    }
    Ok(())
}

/// Whether the server on `port` accepts connections (`pg_isready`, exit status 0), not only
/// its port.
fn ready(bin: &Path, port: u16) -> bool {
    Command::new(bin.join("pg_isready"))
        .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string()])
        .status()
        .is_ok_and(|status| status.success())
}
