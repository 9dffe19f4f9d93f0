//! [`ConformanceStore`]: the fence on a scratch schema of a real database, as the conformance
//! kit ([`zkfence::conformance`]) drives it: zkfence's own tests, and `zkfence fence
//! verify postgresql://…` against a user's deployment.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, IsolationLevel};
use zkfence::conformance::{
    rescoped, scratch_name, BoxFuture, CarryOn, Conflicted, FenceStore, Frozen, Hooks, ReplySwitch,
    Setup,
};
use zkfence::fence::{BoxError, FenceError, FenceTicket};

use crate::dial::Dial;
use crate::PostgresFence;

/// The kit's tables in a schema of their own ([`scratch_name`]`(name)`): `kit_counter` (the
/// counters), `kit_log` (the commit log: a row per accepted increment, inserted in the same
/// transaction), `kit_items` (for a serialization conflict); the fence installed there afresh
/// ([`Setup::Fresh`]), or the deployment's as it is installed, on scopes of its own
/// ([`Setup::Deployed`]). The fence's connections may go through a proxy, to lose a commit's
/// reply; reads go direct. [`ConformanceStore::remove`] removes it all (a deployed fence's
/// scratch scopes too).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::conformance::{self, Setup};
/// use zkfence_postgres::{ConformanceStore, PostgresFence};
///
/// let url = "postgresql://app@db.internal/orders";
/// let store = ConformanceStore::create(url, PostgresFence::new(), "check", Setup::Deployed, None).await?;
/// conformance::order(&store).await?;
/// store.remove().await?;
/// # Ok(()) }
/// ```
pub struct ConformanceStore {
    fence: PostgresFence,
    /// The schema of the kit's tables.
    schema: String,
    /// The prefix of the scopes the store claims (a deployed fence's), or "".
    scopes: String,
    conns: Vec<Mutex<Client>>,
    reader: Client,
    side: Arc<Mutex<Client>>,
    /// Where the fence's connections go (through the proxy, if any).
    fenced: Dial,
    /// The database itself.
    direct: Dial,
    switch: Option<ReplySwitch>,
}

impl std::fmt::Debug for ConformanceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConformanceStore")
            .field("fence", &self.fence)
            .field("schema", &self.schema)
            .field("proxied", &self.switch.is_some())
            .finish()
    }
}

impl ConformanceStore {
    /// Creates the kit's tables in the schema [`scratch_name`]`(name)` of the database at
    /// `url` (dropping what a run of that name left), with `fence` installed there afresh
    /// ([`Setup::Fresh`]), or `fence` as deployed, claiming scopes under
    /// [`Setup::scopes`] ([`Setup::Deployed`]). The fence's connections go to `through`'s URL
    /// (the same database behind a proxy, whose switch drops its replies:
    /// [`FenceStore::reply_switch`]) when given, else to `url`.
    ///
    /// # Errors
    ///
    /// A URL it cannot use (see [`Connected::connect`](crate::Connected::connect) for its TLS
    /// parameters), or the database's error (e.g. no CREATE privilege on the database).
    ///
    /// # Cancel safety
    ///
    /// Dropped mid-way, it may leave the schema behind.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn create(
        url: &str,
        fence: PostgresFence,
        name: &str,
        setup: Setup,
        through: Option<(String, ReplySwitch)>,
    ) -> Result<ConformanceStore, BoxError> {
        let schema = scratch_name(name, 63);
        let fence = match setup {
            Setup::Fresh => fence
                .with_schema(&schema)
                .unwrap_or_else(|_| unreachable!("a plain schema name")),
            Setup::Deployed => fence,
        };
        let direct = Dial::parse(url)?;
        let reader = direct.open(None).await?;
        reader
            .batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            ))
            .await?;
        // Past the schema's creation, a failure drops it again: nothing is left behind.
        let rest = async {
            if setup == Setup::Fresh {
                fence.install(&reader).await?;
            }
            reader
                .batch_execute(&format!(
                    "CREATE TABLE {schema}.kit_counter (key text PRIMARY KEY, value bigint NOT NULL);
                     CREATE TABLE {schema}.kit_log (seq bigserial PRIMARY KEY, key text NOT NULL, token bigint NOT NULL);
                     CREATE TABLE {schema}.kit_items (k text NOT NULL);"
                ))
                .await?;
            let (fenced, switch) = match through {
                Some((via, switch)) => (Dial::parse(&via)?, Some(switch)),
                None => (direct.clone(), None),
            };
            let mut conns = Vec::new();
            for _ in 0..3 {
                conns.push(Mutex::new(fenced.open(Some(&schema)).await?));
            }
            let side = Arc::new(Mutex::new(direct.open(Some(&schema)).await?));
            Ok::<_, BoxError>((fenced, switch, conns, side))
        };
        let (fenced, switch, conns, side) = match rest.await {
            Ok(made) => made,
            Err(err) => {
                let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
                let _ = reader.batch_execute(&drop).await;
                return Err(err);
            }
        };
        Ok(ConformanceStore {
            fence,
            scopes: setup.scopes(&schema),
            schema,
            conns,
            reader,
            side,
            fenced,
            direct,
            switch,
        })
    }

    /// The fence, in the store's schema.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_postgres::ConformanceStore) {
    /// println!("{}", store.fence().install_sql());
    /// # }
    /// ```
    pub fn fence(&self) -> &PostgresFence {
        &self.fence
    }

    /// The store's schema.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_postgres::ConformanceStore) {
    /// assert!(store.schema().starts_with("zkfence_verify_"));
    /// # }
    /// ```
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A connection of the fence's, as the store's increments use.
    ///
    /// # Errors
    ///
    /// The database's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_postgres::ConformanceStore) -> Result<(), tokio_postgres::Error> {
    /// let client = store.connect().await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<Client, tokio_postgres::Error> {
        self.fenced.open(None).await
    }

    /// Removes the schema and everything in it, and a deployed fence's scratch scopes.
    ///
    /// # Errors
    ///
    /// The database's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what it removed stays removed.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn remove(self) -> Result<(), tokio_postgres::Error> {
        let ConformanceStore {
            fence,
            schema,
            scopes,
            direct,
            ..
        } = self;
        // Every connection of the store goes first (they go by the schema's name; dropped
        // above, and ended on the server here): a claim in flight when a run was stopped
        // (SIGTERM in `zkfence fence verify`) would otherwise commit a scratch scope after
        // the delete, and an open transaction would hold the schema's locks against its drop.
        let client = direct.open(None).await?;
        let others = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                      WHERE application_name = $1 AND pid <> pg_backend_pid()";
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let name = [(
            &schema as &(dyn tokio_postgres::types::ToSql + Sync),
            Type::TEXT,
        )];
        while client
            .query_typed_one(others, &name)
            .await?
            .get::<_, i64>(0)
            > 0
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A deployment without the fence installed has no fence table, and no scopes to delete.
        let table = crate::sql::qualified(fence.schema(), "zkfence_fence");
        let installed = "SELECT to_regclass($1) IS NOT NULL";
        let has_table = client
            .query_typed_one(installed, &[(&table, Type::TEXT)])
            .await?;
        if !scopes.is_empty() && has_table.get::<_, bool>(0) {
            let like = format!("{scopes}/%");
            client
                .query_typed(
                    &format!("DELETE FROM {table} WHERE scope LIKE $1"),
                    &[(&like, Type::TEXT)],
                )
                .await?;
        }
        let drop = format!("DROP SCHEMA IF EXISTS {schema} CASCADE");
        client.batch_execute(&drop).await
    }

    /// A connection of the store's own, direct to the database (a client of another language,
    /// a frozen holder): named as the store's others, so that [`remove`](Self::remove) ends it.
    async fn own_connection(&self) -> Result<Client, String> {
        (self.direct.open(Some(&self.schema)).await).map_err(|e| crate::fence::describe(&e))
    }

    /// [`PostgresFence::installed`] on a connection of its own, in a transaction: its read
    /// prepares a named statement, which a pooler in transaction mode may send to another
    /// server connection than the one that prepared it, outside a transaction. Where a pooler
    /// refuses transactions (statement mode: [`FenceStore::preconditions`] says so), outside
    /// one.
    async fn installed_here(&self) -> Result<Result<Option<u64>, String>, tokio_postgres::Error> {
        let mut client = self.direct.open(Some(&self.schema)).await?;
        let installed = match client.transaction().await {
            Ok(tx) => self.fence.installed(&tx).await,
            Err(err) if crate::fence::describe(&err).contains(crate::fence::STATEMENT_MODE) => {
                self.fence.installed(&self.reader).await
            }
            Err(err) => Err(err),
        };
        installed
    }

    /// Whether a transaction of the fence's connections stays on one server session, as the
    /// claim and the writes after it must: a pooler in statement mode splits it (PgBouncer
    /// refuses it and ends the client's connection); `Err` with what to change.
    async fn one_session_per_transaction(&self) -> Result<(), String> {
        let client =
            (self.fenced.open(Some(&self.schema)).await).map_err(|e| crate::fence::describe(&e))?;
        let pid = "SELECT pg_backend_pid()::text";
        let probe = async {
            client.simple_query("BEGIN").await?;
            let first = backend(&client.simple_query(pid).await?);
            let second = backend(&client.simple_query(pid).await?);
            client.simple_query("ROLLBACK").await?;
            Ok::<_, tokio_postgres::Error>((first, second))
        };
        match probe.await {
            Ok((first, second)) if first == second => Ok(()),
            Ok((first, second)) => Err(format!(
                "{}: two statements of one transaction ran on server sessions {} and {}",
                crate::fence::STATEMENT_MODE,
                first.unwrap_or_default(),
                second.unwrap_or_default()
            )),
            Err(err) => Err(crate::fence::describe(&err)),
        }
    }

    /// `scope` as this store claims it.
    fn scope(&self, scope: &str) -> String {
        format!("{}{scope}", self.scopes)
    }

    /// A free connection of the fence's (a fresh one if the proxy closed it).
    async fn conn(&self) -> Result<tokio::sync::MutexGuard<'_, Client>, tokio_postgres::Error> {
        let mut guard = match self.conns.iter().find_map(|c| c.try_lock().ok()) {
            Some(guard) => guard,
            None => self.conns[0].lock().await,
        };
        if guard.is_closed() {
            *guard = self.fenced.open(Some(&self.schema)).await?;
        }
        Ok(guard)
    }

    async fn increment_with(
        &self,
        fence: &PostgresFence,
        ticket: &FenceTicket,
        key: &str,
        hooks: Hooks,
        conflict: Option<Arc<AtomicU32>>,
    ) -> Result<i64, FenceError<tokio_postgres::Error>> {
        let hooks = Arc::new(std::sync::Mutex::new(hooks));
        let (schema, key) = (self.schema.clone(), key.to_owned());
        let token = ticket.token().as_i64();
        let side = self.side.clone();
        let mut conn = self.conn().await.map_err(FenceError::Store)?;
        let ticket = rescoped(ticket, &self.scopes);
        fence
            .transaction(&mut conn, &ticket, |tx| {
                let (hooks, schema, key, side) =
                    (hooks.clone(), schema.clone(), key.clone(), side.clone());
                let attempt = conflict
                    .as_ref()
                    .map(|a| a.fetch_add(1, Ordering::SeqCst) + 1);
                Box::pin(async move {
                    let read = format!("SELECT value FROM {schema}.kit_counter WHERE key = $1");
                    let row = tx.query_opt(&read, &[&key]).await?;
                    let value = row.map_or(0, |r| r.get::<_, i64>(0)) + 1;
                    let between = hooks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .between
                        .take();
                    if let Some(between) = between {
                        between.await;
                    }
                    if attempt.is_some() {
                        // Write skew under SERIALIZABLE: we read a:key and write b:key; on the
                        // first attempt another transaction reads b:key, writes a:key and
                        // commits first, so our commit is the one refused.
                        let (a, b) = (format!("a:{key}"), format!("b:{key}"));
                        let items = format!("{schema}.kit_items");
                        let count = format!("SELECT count(*) FROM {items} WHERE k = $1");
                        let insert = format!("INSERT INTO {items} VALUES ($1)");
                        tx.query_one(&count, &[&a]).await?;
                        if attempt == Some(1) {
                            let side = side.lock().await;
                            side.batch_execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
                                .await?;
                            side.query_one(&count, &[&b]).await?;
                            side.execute(&insert, &[&a]).await?;
                        }
                        tx.execute(&insert, &[&b]).await?;
                    }
                    let write = format!(
                        "INSERT INTO {schema}.kit_counter VALUES ($1, $2) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                    );
                    tx.execute(&write, &[&key, &value]).await?;
                    let log = format!("INSERT INTO {schema}.kit_log (key, token) VALUES ($1, $2)");
                    tx.execute(&log, &[&key, &token]).await?;
                    if attempt == Some(1) {
                        side.lock().await.batch_execute("COMMIT").await?;
                    }
                    let hook = hooks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .before_commit
                        .take();
                    if let Some(hook) = hook {
                        hook();
                    }
                    Ok(value)
                })
            })
            .await
    }

    /// The claim as `psql` sends it: the token a text literal, cast by PostgreSQL's own
    /// `bigint` input; refused by SQLSTATE `ZF001`.
    async fn claim_as_text(
        &self,
        client: &Client,
        scope: &str,
        token: &str,
    ) -> Result<bool, String> {
        let sql = format!(
            "SELECT {}({}, {})",
            crate::sql::qualified(self.fence.schema(), "zkfence_claim"),
            literal(&self.scope(scope)),
            literal(token)
        );
        match client.simple_query(&sql).await {
            Ok(_) => Ok(true),
            Err(err) if err.code().map(|c| c.code()) == Some(crate::REFUSED) => Ok(false),
            Err(err) => Err(crate::fence::describe(&err)),
        }
    }
}

/// The first column of the first row of a simple query's answer.
fn backend(messages: &[tokio_postgres::SimpleQueryMessage]) -> Option<String> {
    messages.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
}

/// `text` as a SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl FenceStore for ConformanceStore {
    type Error = tokio_postgres::Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<tokio_postgres::Error>>> {
        Box::pin(async move {
            let conn = self.conn().await.map_err(FenceError::Store)?;
            let ticket = rescoped(ticket, &self.scopes);
            self.fence.claim(&*conn, &ticket).await.map(|_| ())
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<tokio_postgres::Error>>> {
        Box::pin(self.increment_with(&self.fence, ticket, key, hooks, None))
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT value FROM {}.kit_counter WHERE key = $1",
                self.schema
            );
            let row = (self
                .reader
                .query_typed_opt(&sql, &[(&key, Type::TEXT)])
                .await)
                .map_err(|e| crate::fence::describe(&e))?;
            Ok(row.map_or(0, |r| r.get(0)))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT token FROM {}.kit_log WHERE key = $1 ORDER BY seq",
                self.schema
            );
            let rows = (self.reader.query_typed(&sql, &[(&key, Type::TEXT)]).await)
                .map_err(|e| crate::fence::describe(&e))?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let scope = self.scope(scope);
            let sql = crate::sql::seen(self.fence.schema());
            let row = (self
                .reader
                .query_typed_opt(&sql, &[(&scope, Type::TEXT)])
                .await)
                .map_err(|e| crate::fence::describe(&e))?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            // A lock wait of this store's connections alone (others may share the server),
            // which go by the schema's name.
            let sql = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                       WHERE NOT l.granted AND a.application_name = $1";
            let name = [(
                &self.schema as &(dyn tokio_postgres::types::ToSql + Sync),
                Type::TEXT,
            )];
            let row = (self.reader.query_typed_one(sql, &name).await)
                .map_err(|e| crate::fence::describe(&e))?;
            Ok(row.get::<_, i64>(0) > 0)
        })
    }

    fn reply_switch(&self) -> ReplySwitch {
        self.switch.clone().unwrap_or_else(|| Arc::new(|_| {}))
    }

    fn increment_through_conflict<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
    ) -> Option<Conflicted<'a, tokio_postgres::Error>> {
        Some(Box::pin(async move {
            let attempts = Arc::new(AtomicU32::new(0));
            let fence = (self.fence.clone()).with_isolation(IsolationLevel::Serializable);
            let hooks = Hooks::default();
            let value =
                (self.increment_with(&fence, ticket, key, hooks, Some(attempts.clone()))).await?;
            Ok((value, attempts.load(Ordering::SeqCst)))
        }))
    }

    fn foreign_claim<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        Some(Box::pin(async move {
            let client = self.own_connection().await?;
            self.claim_as_text(&client, scope, token).await
        }))
    }

    fn carry_on<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
        key: &'a str,
        how: CarryOn,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        // A deadlock aborts the whole transaction here, and every statement after it fails.
        let in_savepoints = match how {
            CarryOn::Ignoring => false,
            CarryOn::InSavepoints => true,
            CarryOn::AfterRollbackUnderWork => return None,
        };
        Some(Box::pin(async move {
            let before = self.log(key).await?.len();
            let client = self.own_connection().await?;
            let schema = &self.schema;
            let (k, t) = (literal(key), literal(token));
            let claim = format!(
                "SELECT {}({}, {t})",
                crate::sql::qualified(self.fence.schema(), "zkfence_claim"),
                literal(&self.scope(scope)),
            );
            let statements = [
                claim,
                format!(
                    "INSERT INTO {schema}.kit_counter VALUES ({k}, 1) \
                     ON CONFLICT (key) DO UPDATE SET value = {schema}.kit_counter.value + 1"
                ),
                format!("INSERT INTO {schema}.kit_log (key, token) VALUES ({k}, {t})"),
            ];
            // psql without ON_ERROR_STOP: each statement sent, each error ignored. With
            // ON_ERROR_ROLLBACK (and psycopg's nested transaction(), Django's nested atomic(),
            // pgjdbc's autosave): each statement in a savepoint, rolled back to after an error.
            let _ = client.simple_query("BEGIN").await;
            for statement in statements {
                if !in_savepoints {
                    let _ = client.simple_query(&statement).await;
                    continue;
                }
                let _ = client.simple_query("SAVEPOINT zkfence_kit").await;
                let end = match client.simple_query(&statement).await {
                    Ok(_) => "RELEASE SAVEPOINT zkfence_kit",
                    Err(_) => "ROLLBACK TO SAVEPOINT zkfence_kit",
                };
                let _ = client.simple_query(end).await;
            }
            let _ = client.simple_query("COMMIT").await;
            Ok(self.log(key).await?.len() > before)
        }))
    }

    fn installed(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        Some(Box::pin(async move {
            let where_ = match self.fence.schema() {
                Some(schema) => format!(" in schema {schema}"),
                None => " in the connection's search path".to_owned(),
            };
            match self.installed_here().await {
                Ok(Ok(Some(_))) => Ok(()),
                Ok(Ok(None)) => Err(format!(
                    "the fence is not installed (no function zkfence_claim(text, bigint){where_}): \
                     run `zkfence fence install` with this URL"
                )),
                Ok(Err(_)) => Err(format!(
                    "the function zkfence_claim{where_} is not the one this version of zkfence \
                     installs (edited by hand, or from another version): run `zkfence fence \
                     install` with this URL to replace it"
                )),
                Err(err) => Err(format!(
                    "cannot read the installed zkfence_claim{where_}: {}",
                    crate::fence::describe(&err)
                )),
            }
        }))
    }

    fn preconditions(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        // The fence runs in the database; what it stands on beyond its own code is that the
        // claim and the writes share one transaction on one server session, which a pooler
        // in statement mode breaks.
        Some(Box::pin(self.one_session_per_transaction()))
    }

    fn frozen_claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> Option<BoxFuture<'a, Result<Frozen, String>>> {
        Some(Box::pin(async move {
            let client = self.own_connection().await?;
            client
                .simple_query("BEGIN")
                .await
                .map_err(|e| crate::fence::describe(&e))?;
            let token = ticket.token().as_i64().to_string();
            match self.claim_as_text(&client, ticket.scope(), &token).await? {
                true => Ok(Box::new(client) as Frozen),
                false => Err(format!("the frozen holder's claim of {token} was refused")),
            }
        }))
    }

    fn frozen_bound(&self) -> BoxFuture<'_, Result<Option<Duration>, String>> {
        Box::pin(async move {
            let sql = crate::sql::installed(self.fence.schema());
            let row = (self.reader.query_typed_opt(&sql, &[]).await)
                .map_err(|e| crate::fence::describe(&e))?;
            let body = row.map(|r| r.get::<_, String>(0)).unwrap_or_default();
            Ok(crate::sql::idle_bound_of(&body)
                .filter(|&ms| ms > 0)
                .map(Duration::from_millis))
        })
    }
}
