//! [`ConformanceStore`]: the fence in a scratch database of a real server, as the conformance
//! kit ([`zkfence::fence::conformance`]) drives it: zkfence's own tests, and `zkfence fence
//! verify mysql://…` against a user's deployment.

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use zkfence::fence::conformance::{BoxFuture, FenceStore, Hooks, ReplySwitch};
use zkfence::fence::{FenceError, FenceTicket};

use crate::{sql, MySqlFence};

/// The fence in a database of its own (`zkfence_verify_<name>`), with the kit's tables:
/// `kit_counter` (the counters), `kit_log` (the commit log: a row per accepted increment,
/// inserted in the same transaction) and `kit_items` (for tests of their own). The fence's connections may go through a proxy, to lose
/// a commit's reply; reads go direct. [`ConformanceStore::drop_database`] removes it all.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence::fence::conformance;
/// use zkfence_mysql::{ConformanceStore, MySqlFence};
///
/// let url = "mysql://app:secret@db.internal:3306/orders";
/// let store = ConformanceStore::create(url, MySqlFence::new(), "check", None).await?;
/// conformance::order(&store).await?;
/// store.drop_database().await?;
/// # Ok(()) }
/// ```
pub struct ConformanceStore {
    fence: MySqlFence,
    db: String,
    /// The claims' connections, opened at the start (a claim is sent on one opened before its
    /// replies are dropped); `None` once one broke.
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    fence_url: String,
    direct: String,
    switch: Option<ReplySwitch>,
}

impl std::fmt::Debug for ConformanceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConformanceStore")
            .field("fence", &self.fence)
            .field("db", &self.db)
            .field("proxied", &self.switch.is_some())
            .finish()
    }
}

/// A connection to `url` over TCP (never the server's Unix socket, which a proxy in front of
/// the port would not see).
pub(crate) async fn open(url: &str) -> Result<Conn, mysql_async::Error> {
    let opts = Opts::from_url(url).map_err(mysql_async::Error::Url)?;
    Conn::new(OptsBuilder::from_opts(opts).prefer_socket(false)).await
}

/// `url` with its database replaced by `db`.
fn with_database(url: &str, db: &str) -> Result<String, mysql_async::Error> {
    let opts = Opts::from_url(url).map_err(mysql_async::Error::Url)?;
    let opts = OptsBuilder::from_opts(opts).db_name(Some(db));
    let opts = Opts::from(opts);
    let (user, pass) = (opts.user().unwrap_or_default(), opts.pass());
    let auth = match pass {
        Some(pass) => format!("{}:{}@", encode(user), encode(pass)),
        None if user.is_empty() => String::new(),
        None => format!("{}@", encode(user)),
    };
    Ok(format!(
        "mysql://{auth}{}:{}/{db}",
        opts.ip_or_hostname(),
        opts.tcp_port()
    ))
}

/// `text` percent-encoded for a URL's user or password.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl ConformanceStore {
    /// Installs `fence` (its database set to [`scratch_name`](zkfence::fence::conformance::scratch_name)`(name)`) and the kit's tables on
    /// the server at `url`. The fence's connections go to `through`'s URL (the same server
    /// behind a proxy, whose switch drops its replies) when given, else to `url`.
    ///
    /// # Errors
    ///
    /// The server's error (e.g. no CREATE privilege).
    ///
    /// # Cancel safety
    ///
    /// Dropped mid-way, it may leave the database behind.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn create(
        url: &str,
        fence: MySqlFence,
        name: &str,
        through: Option<(String, ReplySwitch)>,
    ) -> Result<ConformanceStore, mysql_async::Error> {
        let db = zkfence::fence::conformance::scratch_name(name, 64);
        let fence =
            (fence.with_database(&db)).map_err(|e| mysql_async::Error::Other(Box::new(e)))?;
        let mut conn = open(url).await?;
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{db}`"))
            .await?;
        fence.install(&mut conn).await?;
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.kit_counter (k VARCHAR(200) PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_items (k VARCHAR(200) PRIMARY KEY) ENGINE = InnoDB"
        ))
        .await?;
        let direct = with_database(url, &db)?;
        let (fence_url, switch) = match through {
            Some((via, switch)) => (with_database(&via, &db)?, Some(switch)),
            None => (direct.clone(), None),
        };
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(tokio::sync::Mutex::new(Some(open(&fence_url).await?)));
        }
        Ok(ConformanceStore {
            fence,
            db,
            conns,
            fence_url,
            direct,
            switch,
        })
    }

    /// The fence, in the store's database.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_mysql::ConformanceStore) {
    /// println!("{}", store.fence().install_sql());
    /// # }
    /// ```
    pub fn fence(&self) -> &MySqlFence {
        &self.fence
    }

    /// The store's database.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_mysql::ConformanceStore) {
    /// assert!(store.database().starts_with("zkfence_verify_"));
    /// # }
    /// ```
    pub fn database(&self) -> &str {
        &self.db
    }

    /// A connection of the fence's (through the proxy, if any), in the store's database.
    ///
    /// # Errors
    ///
    /// The server's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_mysql::ConformanceStore) -> Result<(), mysql_async::Error> {
    /// let conn = store.connect().await?;
    /// # let _ = conn; Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<Conn, mysql_async::Error> {
        open(&self.fence_url).await
    }

    /// A connection to the store's database, not through the proxy.
    ///
    /// # Errors
    ///
    /// The server's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_mysql::ConformanceStore) -> Result<(), mysql_async::Error> {
    /// let conn = store.direct().await?;
    /// # let _ = conn; Ok(()) }
    /// ```
    pub async fn direct(&self) -> Result<Conn, mysql_async::Error> {
        open(&self.direct).await
    }

    /// Removes the database and everything in it.
    ///
    /// # Errors
    ///
    /// The server's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one statement.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn drop_database(self) -> Result<(), mysql_async::Error> {
        let mut conn = open(&self.direct).await?;
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.db))
            .await
    }

    /// One fenced increment of `key` by `fence` on a connection of its own (the kit runs a
    /// stale and a current writer at once).
    ///
    /// # Errors
    ///
    /// The fenced transaction's.
    ///
    /// # Cancel safety
    ///
    /// As [`MySqlFence::transaction`]'s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_mysql::ConformanceStore, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let fence = store.fence().clone();
    /// let value = store.increment_with(&fence, &ticket, "n", Default::default()).await?;
    /// # let _ = value; Ok(()) }
    /// ```
    pub async fn increment_with(
        &self,
        fence: &MySqlFence,
        ticket: &FenceTicket,
        key: &str,
        hooks: Hooks,
    ) -> Result<i64, FenceError<mysql_async::Error>> {
        let hooks = Arc::new(std::sync::Mutex::new(hooks));
        let token = ticket.token().as_i64();
        let mut conn = self.connect().await.map_err(FenceError::Store)?;
        fence
            .transaction(&mut conn, ticket, |conn| {
                let (hooks, key) = (hooks.clone(), key.to_owned());
                Box::pin(async move {
                    let value: Option<i64> = conn
                        .exec_first("SELECT value FROM kit_counter WHERE k = ?", (&key,))
                        .await?;
                    let value = value.unwrap_or(0) + 1;
                    let between = hooks.lock().unwrap_or_else(|e| e.into_inner()).between.take();
                    if let Some(between) = between {
                        between.await;
                    }
                    conn.exec_drop(
                        "INSERT INTO kit_counter (k, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)",
                        (&key, value),
                    )
                    .await?;
                    conn.exec_drop("INSERT INTO kit_log (k, token) VALUES (?, ?)", (&key, token))
                        .await?;
                    let hook = hooks.lock().unwrap_or_else(|e| e.into_inner()).before_commit.take();
                    if let Some(hook) = hook {
                        hook();
                    }
                    Ok(value)
                })
            })
            .await
    }

    /// The claim as the `mariadb` client sends it, on `conn` (autocommit off): the token a text
    /// literal; refused by SQLSTATE `ZF001`.
    async fn claim_as_text(conn: &mut Conn, scope: &str, token: &str) -> Result<bool, String> {
        let sql = format!(
            "CALL zkfence_claim({}, {})",
            sql::hex(scope.as_bytes()),
            literal(token)
        );
        match conn.query_drop(sql).await {
            Ok(()) => Ok(true),
            Err(mysql_async::Error::Server(e)) if e.state == crate::REFUSED => Ok(false),
            Err(err) => Err(err.to_string()),
        }
    }
}

/// `text` as a MySQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

impl FenceStore for ConformanceStore {
    type Error = mysql_async::Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<mysql_async::Error>>> {
        Box::pin(async move {
            let mut slot = match self.conns.iter().find_map(|c| c.try_lock().ok()) {
                Some(slot) => slot,
                None => self.conns[0].lock().await,
            };
            let mut conn = match slot.take() {
                Some(conn) => conn,
                None => self.connect().await.map_err(FenceError::Store)?,
            };
            let outcome = self.fence.claim(&mut conn, ticket).await.map(|_| ());
            if !matches!(outcome, Err(FenceError::InDoubt { .. })) {
                *slot = Some(conn);
            }
            outcome
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<mysql_async::Error>>> {
        Box::pin(self.increment_with(&self.fence, ticket, key, hooks))
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            let value: Option<i64> = conn
                .exec_first("SELECT value FROM kit_counter WHERE k = ?", (key,))
                .await
                .map_err(|e| e.to_string())?;
            Ok(value.unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            conn.exec("SELECT token FROM kit_log WHERE k = ? ORDER BY seq", (key,))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (self.fence.seen(&mut conn, scope).await).map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            // A lock wait on this store's fence table alone (others may share the server).
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            let waits: Option<i64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX
                     WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%zkfence_fence%')",
                    (&self.db,),
                )
                .await
                .map_err(|e| e.to_string())?;
            Ok(waits.unwrap_or(0) > 0)
        })
    }

    fn reply_switch(&self) -> ReplySwitch {
        self.switch.clone().unwrap_or_else(|| Arc::new(|_| {}))
    }

    fn foreign_claim<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        Some(Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (conn.query_drop("SET autocommit = 0").await).map_err(|e| e.to_string())?;
            let claimed = Self::claim_as_text(&mut conn, scope, token).await?;
            let seal = format!("CALL zkfence_seal({}); COMMIT", sql::hex(scope.as_bytes()));
            if claimed {
                (conn.query_drop(seal).await).map_err(|e| e.to_string())?;
            }
            Ok(claimed)
        }))
    }

    fn carry_on<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
        key: &'a str,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        Some(Box::pin(async move {
            let before = self.log(key).await?.len();
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            // `mariadb --force`: each statement sent, each error ignored.
            let _ = conn.query_drop("SET autocommit = 0").await;
            let _ = Self::claim_as_text(&mut conn, scope, token).await;
            let (k, t) = (literal(key), literal(token));
            let statements = [
                format!("INSERT INTO kit_counter (k, value) VALUES ({k}, 1) ON DUPLICATE KEY UPDATE value = value + 1"),
                format!("INSERT INTO kit_log (k, token) VALUES ({k}, {t})"),
                format!("CALL zkfence_seal({})", sql::hex(scope.as_bytes())),
                "COMMIT".to_owned(),
            ];
            for statement in statements {
                let _ = conn.query_drop(statement).await;
            }
            Ok(self.log(key).await?.len() > before)
        }))
    }
}
