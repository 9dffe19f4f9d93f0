//! [`LocalPgBouncer`]: Debian's PgBouncer (1.18) in front of a PostgreSQL server, in one of its
//! three pool modes ([`PoolMode`]), for the tests of the PostgreSQL fence through a pooler: its
//! config in a temp dir, one loopback port, run in the foreground tied to this process, stopped
//! (and its files removed) when dropped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::database::{Server, Setup};
use crate::run_as::give;

/// Where Debian's `pgbouncer` package installs the binary.
const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// PgBouncer's `pool_mode`: when a client's server connection goes back to the pool.
///
/// # Examples
///
/// ```
/// use zkfence_harness::PoolMode;
/// assert_eq!(PoolMode::Transaction.as_str(), "transaction");
/// assert_eq!(PoolMode::ALL.len(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolMode {
    /// Back to the pool when the client disconnects: a server connection per client.
    Session,
    /// Back to the pool when a transaction ends: a transaction stays on one server
    /// connection, statements outside transactions may each go to another.
    Transaction,
    /// Back to the pool after every statement: PgBouncer refuses multi-statement transactions
    /// ("transaction blocks not allowed in statement pooling mode") and ends the client's
    /// connection.
    Statement,
}

impl PoolMode {
    /// Every mode, in the order above.
    pub const ALL: [PoolMode; 3] = [
        PoolMode::Session,
        PoolMode::Transaction,
        PoolMode::Statement,
    ];

    /// The mode as `pool_mode` spells it in `pgbouncer.ini`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence_harness::PoolMode::Statement.as_str(), "statement");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }
}

impl std::fmt::Display for PoolMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A PgBouncer in front of one PostgreSQL server, as long as this value lives.
///
/// Every database of the server is served under its own name (`* = host=… port=…`), to the
/// server's user (trusted, as the test server trusts loopback connections), on a free port of
/// 127.0.0.1 (no Unix socket); `application_name` is passed on (PgBouncer tracks it), and
/// `extra_float_digits` is ignored at startup. Its log is `log_dir/pgbouncer.log`. When this
/// process runs as root, PgBouncer (which refuses root) runs as Debian's `postgres` user.
///
/// # Examples
///
/// ```no_run
/// use zkfence_harness::{shared_postgres, LocalPgBouncer, PoolMode};
/// let pooler = LocalPgBouncer::start(shared_postgres(), PoolMode::Transaction)?;
/// println!("tokio_postgres::connect({:?}, NoTls)", pooler.conninfo("postgres"));
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalPgBouncer {
    server: Server,
    mode: PoolMode,
    user: String,
}

impl LocalPgBouncer {
    /// Starts PgBouncer in `mode` in front of the server `postgres` names (a `key=value`
    /// conninfo with `host`, `port` and `user`, as [`shared_postgres`](crate::shared_postgres)
    /// returns), its log in a temp dir of this process. Waits (up to 10 s) until it accepts
    /// connections.
    ///
    /// # Errors
    ///
    /// A message saying what to install (Debian's `pgbouncer`) or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence_harness::{LocalPgBouncer, PoolMode};
    /// let pooler = LocalPgBouncer::start("host=127.0.0.1 port=5432 user=zkfence", PoolMode::Session)?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start(postgres: &str, mode: PoolMode) -> Result<LocalPgBouncer, String> {
        let logs = std::env::temp_dir().join(format!("zkfence-pgbouncer-{}", std::process::id()));
        std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        LocalPgBouncer::start_logging(postgres, mode, &logs)
    }

    /// [`start`](LocalPgBouncer::start), its log in `log_dir/pgbouncer.log`.
    ///
    /// # Errors
    ///
    /// As [`start`](LocalPgBouncer::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence_harness::{shared_postgres, LocalPgBouncer, PoolMode};
    /// let logs = std::path::Path::new("/tmp");
    /// let pooler = LocalPgBouncer::start_logging(shared_postgres(), PoolMode::Statement, logs)?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_logging(
        postgres: &str,
        mode: PoolMode,
        log_dir: &Path,
    ) -> Result<LocalPgBouncer, String> {
        if !Path::new(PGBOUNCER).exists() {
            return Err(format!(
                "no {PGBOUNCER}: install Debian's pgbouncer package (`sudo apt-get install -y pgbouncer`; scripts/test does it)"
            ));
        }
        let get = |key: &str| {
            (postgres.split_whitespace())
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_owned)
                .ok_or_else(|| format!("no {key}= in the conninfo {postgres:?}"))
        };
        let (host, port, user) = (get("host")?, get("port")?, get("user")?);
        let setup = Setup::new("pgbouncer", "postgres", "postgresql", log_dir)?;
        let users = setup.dir.join("userlist.txt");
        write_for(&users, &format!("\"{user}\" \"\"\n"), &setup)?;
        let ini = setup.dir.join("pgbouncer.ini");
        let config = format!(
            "[databases]\n\
             * = host={host} port={port}\n\
             \n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {listen}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = {mode}\n\
             max_client_conn = 200\n\
             default_pool_size = 20\n\
             ignore_startup_parameters = extra_float_digits\n\
             server_check_delay = 0\n\
             logfile =\n\
             pidfile =\n",
            listen = setup.port,
            users = users.display(),
        );
        write_for(&ini, &config, &setup)?;
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&setup.log)
            .map_err(|e| format!("{}: {e}", setup.log.display()))?;
        let mut cmd = Command::new(PGBOUNCER);
        cmd.arg(&ini).stderr(log);
        // SIGTERM: an immediate shutdown (SIGINT waits for every client to leave).
        let server = setup.launch(cmd, libc::SIGTERM, Duration::from_secs(10), serves)?;
        Ok(LocalPgBouncer { server, mode, user })
    }

    /// Its pool mode.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let p = zkfence_harness::LocalPgBouncer::start(zkfence_harness::shared_postgres(), zkfence_harness::PoolMode::Session)?;
    /// assert_eq!(p.mode(), zkfence_harness::PoolMode::Session);
    /// # Ok::<(), String>(())
    /// ```
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// The port it listens on, on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let p = zkfence_harness::LocalPgBouncer::start(zkfence_harness::shared_postgres(), zkfence_harness::PoolMode::Session)?;
    /// assert!(p.port() > 0);
    /// # Ok::<(), String>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.server.port
    }

    /// A `tokio-postgres` connection string for database `db` of the server behind it, through
    /// it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let p = zkfence_harness::LocalPgBouncer::start(zkfence_harness::shared_postgres(), zkfence_harness::PoolMode::Session)?;
    /// assert!(p.conninfo("postgres").contains(&format!("port={}", p.port())));
    /// # Ok::<(), String>(())
    /// ```
    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1 port={} user={} dbname={db} connect_timeout=5",
            self.server.port, self.user
        )
    }

    /// A `postgresql://` URL of database `db` through it, as users give one to `zkfence fence`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let p = zkfence_harness::LocalPgBouncer::start(zkfence_harness::shared_postgres(), zkfence_harness::PoolMode::Session)?;
    /// assert!(p.url("orders").ends_with("/orders"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgresql://{}@127.0.0.1:{}/{db}",
            self.user, self.server.port
        )
    }
}

/// Writes `text` to `path`, handed to the server's user.
fn write_for(path: &Path, text: &str, setup: &Setup) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    give(path, setup.who);
    Ok(())
}

/// Whether PgBouncer answers on `port`: it listens once its config is loaded, and then serves.
fn serves(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}
