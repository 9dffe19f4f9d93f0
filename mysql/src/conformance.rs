//! [`ConformanceStore`]: the fence in a scratch database of a real server, as the conformance
//! kit ([`zkfence::conformance`]) drives it: zkfence's own tests, and `zkfence fence
//! verify mysql://…` against a user's deployment.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use zkfence::conformance::{
    rescoped, scratch_name, BoxFuture, CarryOn, FenceStore, Frozen, Hooks, ReplySwitch, Setup,
};
use zkfence::fence::{BoxError, FenceError, FenceTicket};

use crate::dial::Dial;
use crate::{sql, MySqlFence};

/// The two recipes docs/fences.md gives for MySQL/MariaDB, each attacked by the cases whose
/// client carries on: autocommit off, `zkfence_claim`, the writes, `zkfence_seal`, `COMMIT`;
/// and `zkfence_begin`, the writes, `zkfence_commit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recipe {
    ClaimSeal,
    BeginCommit,
}

/// The kit's tables in a database of their own ([`scratch_name`]`(name)`): `kit_counter` (the
/// counters), `kit_log` (the commit log: a row per accepted increment,
/// inserted in the same transaction) and `kit_items` (for tests of their own); the fence
/// installed there afresh ([`Setup::Fresh`]), or the deployment's as installed in the URL's
/// database, on scopes of its own ([`Setup::Deployed`]). The fence's connections may go through
/// a proxy, to lose a commit's reply; reads go direct. [`ConformanceStore::remove`] removes it
/// all (a deployed fence's scratch scopes too).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::conformance::{self, Setup};
/// use zkfence_mysql::{ConformanceStore, MySqlFence};
///
/// let url = "mysql://app:secret@db.internal:3306/orders";
/// let store = ConformanceStore::create(url, MySqlFence::new(), "check", Setup::Deployed, None).await?;
/// conformance::order(&store).await?;
/// store.remove().await?;
/// # Ok(()) }
/// ```
pub struct ConformanceStore {
    fence: MySqlFence,
    /// The database of the kit's tables.
    db: String,
    /// The prefix of the scopes the store claims (a deployed fence's), or "".
    scopes: String,
    /// The claims' connections, opened at the start (a claim is sent on one opened before its
    /// replies are dropped); `None` once one broke.
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    /// Where the fence's connections go (through the proxy, if any), in the store's database.
    fenced: Dial,
    /// The server itself, in the store's database.
    direct: Dial,
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

impl ConformanceStore {
    /// Creates the kit's tables in the database [`scratch_name`]`(name)` on the server at
    /// `url` (dropping what a run of that name left), with `fence` installed there afresh
    /// ([`Setup::Fresh`]), or `fence` as deployed in `url`'s database, claiming scopes under
    /// [`Setup::scopes`] ([`Setup::Deployed`]). The fence's connections go to `through`'s URL
    /// (the same server behind a proxy, whose switch drops its replies) when given, else to
    /// `url`.
    ///
    /// # Errors
    ///
    /// A URL it cannot use (see [`Connected::connect`](crate::Connected::connect) for its TLS
    /// parameters), or the server's error (e.g. no CREATE privilege).
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
        setup: Setup,
        through: Option<(String, ReplySwitch)>,
    ) -> Result<ConformanceStore, BoxError> {
        let db = scratch_name(name, 64);
        let server = Dial::parse(url)?;
        let mut conn = server.open().await?;
        conn.query_drop(format!(
            "DROP DATABASE IF EXISTS `{db}`; CREATE DATABASE `{db}`"
        ))
        .await?;
        let (fence, home) = match setup {
            Setup::Fresh => {
                let fence = fence.with_database(&db)?;
                fence.install(&mut conn).await?;
                (fence, server.with_database(&db))
            }
            Setup::Deployed => (fence, server),
        };
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.kit_counter (k VARCHAR(200) PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_items (k VARCHAR(200) PRIMARY KEY) ENGINE = InnoDB"
        ))
        .await?;
        let (fenced, switch) = match through {
            Some((via, switch)) => {
                let via = Dial::parse(&via)?;
                let via = match home.database() {
                    Some(db) => via.with_database(db),
                    None => via,
                };
                (via, Some(switch))
            }
            None => (home.clone(), None),
        };
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(tokio::sync::Mutex::new(Some(fenced.open().await?)));
        }
        Ok(ConformanceStore {
            fence,
            scopes: setup.scopes(&db),
            db,
            conns,
            fenced,
            direct: home,
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
        self.fenced.open().await
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
        self.direct.open().await
    }

    /// Whether a transaction of the server waits, now, for a lock on `table` of the store's
    /// database (`kit_items`, say).
    ///
    /// It reads `SHOW ENGINE INNODB STATUS`, which InnoDB writes afresh for each call (it needs
    /// the PROCESS privilege). `information_schema.INNODB_TRX` would not do for a poll: InnoDB
    /// refreshes its rows only once nobody read them for 100 ms (`CACHE_MIN_IDLE_TIME_NS` in
    /// `trx0i_s.cc`), so a poll every few milliseconds, or two polls side by side, read the
    /// rows of the first read for ever and miss a wait that began after it.
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
    /// while !store.lock_waits_on("kit_items").await? {
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock_waits_on(&self, table: &str) -> Result<bool, mysql_async::Error> {
        let mut conn = self.direct.open().await?;
        waits_on(&mut conn, &format!("table `{}`.`{table}`", self.db)).await
    }

    /// Removes the database and everything in it, and a deployed fence's scratch scopes.
    ///
    /// # Errors
    ///
    /// The server's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what it removed stays removed.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn remove(self) -> Result<(), mysql_async::Error> {
        let mut conn = self.direct.open().await?;
        if !self.scopes.is_empty() {
            let like = format!("{}/%", self.scopes);
            let table = sql::qualified(self.fence.database(), "zkfence_fence");
            let deleted = conn
                .exec_drop(
                    format!("DELETE FROM {table} WHERE scope LIKE ?"),
                    (like.as_bytes(),),
                )
                .await;
            match deleted {
                // No fence installed there: no scope to remove.
                Err(mysql_async::Error::Server(e)) if e.code == 1146 => {}
                deleted => deleted?,
            }
        }
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.db))
            .await
    }

    /// `scope` as this store claims it.
    fn scope(&self, scope: &str) -> String {
        format!("{}{scope}", self.scopes)
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
        let ticket = rescoped(ticket, &self.scopes);
        let db = self.db.clone();
        fence
            .transaction(&mut conn, &ticket, |conn| {
                let (hooks, key, db) = (hooks.clone(), key.to_owned(), db.clone());
                Box::pin(async move {
                    let read = format!("SELECT value FROM `{db}`.kit_counter WHERE k = ?");
                    let value: Option<i64> = conn.exec_first(read, (&key,)).await?;
                    let value = value.unwrap_or(0) + 1;
                    let between = hooks.lock().unwrap_or_else(|e| e.into_inner()).between.take();
                    if let Some(between) = between {
                        between.await;
                    }
                    conn.exec_drop(
                        format!("INSERT INTO `{db}`.kit_counter (k, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)"),
                        (&key, value),
                    )
                    .await?;
                    let log = format!("INSERT INTO `{db}`.kit_log (k, token) VALUES (?, ?)");
                    conn.exec_drop(log, (&key, token)).await?;
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
    /// literal; refused by SQLSTATE `ZF001`. The procedure as installed where the fence looks.
    async fn claim_as_text(
        &self,
        conn: &mut Conn,
        scope: &str,
        token: &str,
    ) -> Result<bool, String> {
        self.claim_by(Recipe::ClaimSeal, conn, scope, token).await
    }

    /// [`claim_as_text`](Self::claim_as_text) by `recipe`'s claim (`zkfence_claim`, or
    /// `zkfence_begin`).
    async fn claim_by(
        &self,
        recipe: Recipe,
        conn: &mut Conn,
        scope: &str,
        token: &str,
    ) -> Result<bool, String> {
        let procedure = match recipe {
            Recipe::ClaimSeal => "zkfence_claim",
            Recipe::BeginCommit => "zkfence_begin",
        };
        let sql = format!(
            "CALL {}({}, {})",
            sql::qualified(self.fence.database(), procedure),
            sql::hex(self.scope(scope).as_bytes()),
            literal(token)
        );
        match conn.query_drop(sql).await {
            Ok(()) => Ok(true),
            Err(mysql_async::Error::Server(e)) if e.state == crate::REFUSED => Ok(false),
            Err(err) => Err(err.to_string()),
        }
    }

    /// The installed seal's call for `scope`.
    fn seal_call(&self, scope: &str) -> String {
        self.call(scope, "zkfence_seal")
    }

    /// `CALL <procedure>(<scope>)`, the procedure as installed where the fence looks.
    fn call(&self, scope: &str, procedure: &str) -> String {
        format!(
            "CALL {}({})",
            sql::qualified(self.fence.database(), procedure),
            sql::hex(self.scope(scope).as_bytes())
        )
    }

    /// What `recipe` sends after its writes: the seal and `COMMIT`, or `zkfence_commit` (and a
    /// `COMMIT` all the same, as a client that carries on sends one).
    fn ends(&self, recipe: Recipe, scope: &str) -> [String; 2] {
        match recipe {
            Recipe::ClaimSeal => [self.seal_call(scope), "COMMIT".to_owned()],
            Recipe::BeginCommit => [self.call(scope, "zkfence_commit"), "COMMIT".to_owned()],
        }
    }

    /// The recipe's writes for counter `key` under `token`: the increment and its log entry.
    fn writes(&self, key: &str, token: &str) -> [String; 2] {
        let (k, t, db) = (literal(key), literal(token), &self.db);
        [
            format!("INSERT INTO `{db}`.kit_counter (k, value) VALUES ({k}, 1) ON DUPLICATE KEY UPDATE value = value + 1"),
            format!("INSERT INTO `{db}`.kit_log (k, token) VALUES ({k}, {t})"),
        ]
    }

    /// The recipe after its claim, each error ignored: the writes, then its ends.
    async fn finish_ignoring(
        &self,
        recipe: Recipe,
        conn: &mut Conn,
        (scope, key, token): (&str, &str, &str),
    ) {
        let [counter, log] = self.writes(key, token);
        let [seal, commit] = self.ends(recipe, scope);
        for statement in [counter, log, seal, commit] {
            let _ = conn.query_drop(statement).await;
        }
    }

    /// `mariadb --force`: each statement sent, each error ignored.
    async fn carry_on_ignoring(
        &self,
        recipe: Recipe,
        (scope, token, key): (&str, &str, &str),
    ) -> Result<bool, String> {
        let before = self.log(key).await?.len();
        let mut conn = self.direct().await.map_err(|e| e.to_string())?;
        let _ = conn.query_drop("SET autocommit = 0").await;
        let _ = self.claim_by(recipe, &mut conn, scope, token).await;
        (self.finish_ignoring(recipe, &mut conn, (scope, key, token))).await;
        Ok(self.log(key).await?.len() > before)
    }

    /// Each statement in a savepoint of its own, rolled back to after an error (psql's
    /// `ON_ERROR_ROLLBACK`, a nested transaction of an ORM), then `COMMIT`.
    async fn carry_on_in_savepoints(
        &self,
        recipe: Recipe,
        (scope, token, key): (&str, &str, &str),
    ) -> Result<bool, String> {
        let before = self.log(key).await?.len();
        let mut conn = self.direct().await.map_err(|e| e.to_string())?;
        let _ = conn.query_drop("SET autocommit = 0").await;
        let _ = conn.query_drop("SAVEPOINT zkfence_kit").await;
        if !matches!(
            self.claim_by(recipe, &mut conn, scope, token).await,
            Ok(true)
        ) {
            let _ = conn.query_drop("ROLLBACK TO SAVEPOINT zkfence_kit").await;
        }
        let [counter, log] = self.writes(key, token);
        let [seal, _] = self.ends(recipe, scope);
        for statement in [counter, log, seal] {
            let _ = conn.query_drop("SAVEPOINT zkfence_kit").await;
            if conn.query_drop(statement).await.is_err() {
                let _ = conn.query_drop("ROLLBACK TO SAVEPOINT zkfence_kit").await;
            }
        }
        let _ = conn.query_drop("COMMIT").await;
        Ok(self.log(key).await?.len() > before)
    }

    /// The claim accepted, then the transaction made a deadlock's victim (tried again, on
    /// fresh rows, until it is the one InnoDB rolls back, for up to 60 s), then the client goes
    /// on: its writes, the seal, `COMMIT`, each error ignored.
    async fn carry_on_after_rollback(
        &self,
        recipe: Recipe,
        (scope, token, key): (&str, &str, &str),
    ) -> Result<bool, String> {
        let before = self.log(key).await?.len();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut conn = loop {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (conn.query_drop("SET autocommit = 0").await).map_err(|e| e.to_string())?;
            if !self.claim_by(recipe, &mut conn, scope, token).await? {
                return Err(format!(
                    "the claim of {token} on {scope} was refused: the case needs it accepted"
                ));
            }
            if self.lose_a_deadlock(&mut conn, scope, token).await? {
                break conn;
            }
            let _ = conn.query_drop(sql::ROLLBACK).await;
            if Instant::now() > deadline {
                return Err(
                    "the fenced transaction was never the deadlock's victim in 60 s".into(),
                );
            }
        };
        (self.finish_ignoring(recipe, &mut conn, (scope, key, token))).await;
        Ok(self.log(key).await?.len() > before)
    }

    /// Runs `conn`'s fenced transaction into a deadlock with another fenced transaction (of
    /// `scope`'s sibling scope, on two rows of `kit_items` taken in opposite orders), the other
    /// one made the heavier (50 rows more), so that InnoDB rolls back `conn`'s, the one with
    /// fewer. Whether `conn`'s was the victim (`false`: the other
    /// was, and `conn`'s transaction is still open).
    async fn lose_a_deadlock(
        &self,
        conn: &mut Conn,
        scope: &str,
        token: &str,
    ) -> Result<bool, String> {
        static ROUND: AtomicU32 = AtomicU32::new(0);
        let round = ROUND.fetch_add(1, Ordering::Relaxed);
        let db = &self.db;
        let row = |name: &str| {
            format!(
                "INSERT INTO `{db}`.kit_items (k) VALUES ('deadlock-{}-{round}-{name}')",
                std::process::id()
            )
        };
        let e = |e: mysql_async::Error| e.to_string();
        conn.query_drop(row("a")).await.map_err(e)?;
        let mut side = self.direct().await.map_err(e)?;
        side.query_drop("SET autocommit = 0").await.map_err(e)?;
        let sibling = format!("{scope}-deadlock");
        if !self.claim_as_text(&mut side, &sibling, token).await? {
            return Err(format!(
                "the other transaction's claim of {sibling} was refused"
            ));
        }
        for i in 0..50 {
            side.query_drop(row(&format!("s{i}"))).await.map_err(e)?;
        }
        side.query_drop(row("b")).await.map_err(e)?;
        let blocked = row("a");
        let other = tokio::spawn(async move {
            let outcome = side.query_drop(blocked).await;
            let _ = side.query_drop(sql::ROLLBACK).await;
            outcome
        });
        let ours = conn.query_drop(row("b")).await;
        let other = tokio::time::timeout(Duration::from_secs(60), other).await;
        let other = other.map_err(|_| "the other transaction never finished".to_owned())?;
        let other = other.map_err(|e| e.to_string())?;
        match (ours, other) {
            (Err(mysql_async::Error::Server(err)), Ok(())) if err.code == 1213 => Ok(true),
            (Ok(()), Err(mysql_async::Error::Server(err))) if err.code == 1213 => Ok(false),
            (ours, other) => Err(format!(
                "two transactions that take two rows in opposite orders did not deadlock (is \
                 innodb_deadlock_detect off?): ours {ours:?}, the other {other:?}"
            )),
        }
    }
}

/// Whether a transaction waits for a lock whose description, in `SHOW ENGINE INNODB STATUS`,
/// contains `table` (`` table `db`.`t` ``, as a record lock's "index PRIMARY of table `db`.`t`"
/// and a table lock's "TABLE LOCK table `db`.`t`" both name it).
async fn waits_on(conn: &mut Conn, table: &str) -> Result<bool, mysql_async::Error> {
    let status: Option<(String, String, String)> =
        conn.query_first("SHOW ENGINE INNODB STATUS").await?;
    Ok(status.is_some_and(|(_, _, status)| waiting_for(&status, table)))
}

/// Whether the status's list of transactions has one in `LOCK WAIT` for a lock on `table`:
/// the line after its "TO BE GRANTED:" names the lock it waits for.
fn waiting_for(status: &str, table: &str) -> bool {
    status.split("---TRANSACTION ").skip(1).any(|trx| {
        let waits = trx.lines().any(|line| line.starts_with("LOCK WAIT"));
        let lock = trx
            .split_once("TO BE GRANTED:")
            .and_then(|(_, rest)| rest.trim_start().lines().next());
        waits && lock.is_some_and(|lock| lock.contains(table))
    })
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
            let ticket = rescoped(ticket, &self.scopes);
            let outcome = self.fence.claim(&mut conn, &ticket).await.map(|_| ());
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
            let read = format!("SELECT value FROM `{}`.kit_counter WHERE k = ?", self.db);
            let value: Option<i64> =
                (conn.exec_first(read, (key,)).await).map_err(|e| e.to_string())?;
            Ok(value.unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            let read = format!(
                "SELECT token FROM `{}`.kit_log WHERE k = ? ORDER BY seq",
                self.db
            );
            conn.exec(read, (key,)).await.map_err(|e| e.to_string())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            let scope = self.scope(scope);
            (self.fence.seen(&mut conn, &scope).await).map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            // A claim waiting for a fence row: this store's alone when its fence is its own;
            // any claim of the deployment's fence table otherwise (a wrong "yes" lets the
            // stale writer go on early, which no verdict rests on).
            let table = match self.scopes.is_empty() {
                true => format!("table `{}`.`zkfence_fence`", self.db),
                false => "`.`zkfence_fence`".to_owned(),
            };
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (waits_on(&mut conn, &table).await).map_err(|e| e.to_string())
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
            let claimed = self.claim_as_text(&mut conn, scope, token).await?;
            if claimed {
                let seal = self.ends(Recipe::ClaimSeal, scope).join("; ");
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
        how: CarryOn,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        // Both recipes the docs give: claim and seal, then begin and commit (the second only
        // if the first committed nothing, each with its own connection).
        Some(Box::pin(async move {
            for recipe in [Recipe::ClaimSeal, Recipe::BeginCommit] {
                let case = (scope, token, key);
                let landed = match how {
                    CarryOn::Ignoring => self.carry_on_ignoring(recipe, case).await?,
                    CarryOn::InSavepoints => self.carry_on_in_savepoints(recipe, case).await?,
                    CarryOn::AfterRollbackUnderWork => {
                        self.carry_on_after_rollback(recipe, case).await?
                    }
                };
                if landed {
                    return Ok(true);
                }
            }
            Ok(false)
        }))
    }

    fn installed(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        Some(Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (self.fence.check_installed(&mut conn).await).map_err(|e| e.to_string())?
        }))
    }

    fn frozen_claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> Option<BoxFuture<'a, Result<Frozen, String>>> {
        Some(Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            // REPEATABLE READ, the server's default and the mariadb client's: where a first
            // claim's locking read of a missing row would take a gap lock.
            let open = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SET autocommit = 0";
            (conn.query_drop(open).await).map_err(|e| e.to_string())?;
            let token = ticket.token().as_i64().to_string();
            match self
                .claim_as_text(&mut conn, ticket.scope(), &token)
                .await?
            {
                true => Ok(Box::new(conn) as Frozen),
                false => Err(format!("the frozen holder's claim of {token} was refused")),
            }
        }))
    }

    fn frozen_bound(&self) -> BoxFuture<'_, Result<Option<Duration>, String>> {
        Box::pin(async move {
            let mut conn = self.direct().await.map_err(|e| e.to_string())?;
            (self.fence.installed_idle_bound(&mut conn).await).map_err(|e| e.to_string())?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::waiting_for;

    /// The transactions part of MariaDB 10.11's `SHOW ENGINE INNODB STATUS`: one transaction
    /// waiting for a row of `t2`.`x`, one holding it (which names the table too, in its
    /// query).
    const STATUS: &str = "------------
TRANSACTIONS
------------
Trx id counter 120077
LIST OF TRANSACTIONS FOR EACH SESSION:
---TRANSACTION 120076, ACTIVE 1 sec inserting
mysql tables in use 1, locked 1
LOCK WAIT 2 lock struct(s), heap size 1128, 1 row lock(s)
MariaDB thread id 9, OS thread handle 140045491959488, query id 18 127.0.0.1 root Update
INSERT INTO x VALUES (1)
------- TRX HAS BEEN WAITING 1000795 us FOR THIS LOCK TO BE GRANTED:
RECORD LOCKS space id 10 page no 3 n bits 320 index PRIMARY of table `t2`.`x` trx id 120076 lock mode S locks rec but not gap waiting
Record lock, heap no 2 PHYSICAL RECORD: n_fields 3; compact format; info bits 0

------------------
---TRANSACTION 120075, ACTIVE 2 sec
2 lock struct(s), heap size 1128, 1 row lock(s), undo log entries 1
MariaDB thread id 8, OS thread handle 140045492266688, query id 16 127.0.0.1 root User sleep
SELECT * FROM `t2`.`y`
--------
FILE I/O
";

    #[test]
    fn a_wait_is_found_by_the_table_of_the_lock_it_waits_for() {
        assert!(waiting_for(STATUS, "table `t2`.`x`"));
        // The holder's query names `y`, but nobody waits for a lock there.
        assert!(!waiting_for(STATUS, "table `t2`.`y`"));
        assert!(!waiting_for(STATUS, "table `t3`.`x`"));
        let granted = STATUS.replace("LOCK WAIT 2", "2");
        assert!(!waiting_for(&granted, "table `t2`.`x`"));
    }
}
