//! The fence itself: its configuration, its claims and fenced writes, its reads and rebase.

use crate::sql;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, GenericClient, IsolationLevel, Transaction};
use zkfence::fence::author::TryFailure;
use zkfence::fence::{self, ConfigError, FenceError, FenceState, FenceTicket};

/// The future a [`PostgresFence::transaction`] closure returns: boxed, borrowing the
/// transaction.
pub type TxFuture<'t, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 't>>;

/// The label of this store in the `zkfence_fence_*` metrics.
pub(crate) const STORE: &str = "postgres";

/// A PostgreSQL fence: where its table and function live, the isolation level of its
/// transactions, and how often a transaction is retried. Cheap to clone; it holds no
/// connection (every call takes yours).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
/// use tokio_postgres::IsolationLevel;
/// let fence = zkfence_postgres::PostgresFence::new()
///     .with_schema("ops")
///     .expect("a schema name")
///     .with_isolation(IsolationLevel::Serializable);
/// fence.install(&db).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresFence {
    schema: Option<String>,
    isolation: IsolationLevel,
    max_attempts: u32,
    /// The longest a claimed transaction may sit idle, in milliseconds (0: no bound).
    idle_ms: u64,
    flaw: Flaw,
}

/// A deliberate flaw (zkfence's own tests only: set by `with_mutant`).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    Compare(sql::Compare),
    CheckOutsideTransaction,
    SerializationAsSuccess,
    RefusalInSavepoint,
    NoIdleBound,
}

impl Default for PostgresFence {
    fn default() -> Self {
        PostgresFence::new()
    }
}

impl PostgresFence {
    /// The fence in the connection's search path (usually `public`), with READ COMMITTED
    /// transactions retried up to 10 times.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_postgres::PostgresFence::new();
    /// assert!(fence.install_sql().contains("zkfence_claim"));
    /// ```
    pub fn new() -> PostgresFence {
        PostgresFence {
            schema: None,
            isolation: IsolationLevel::ReadCommitted,
            max_attempts: 10,
            idle_ms: sql::DEFAULT_IDLE_MS,
            flaw: Flaw::None,
        }
    }

    /// The fence in schema `schema` (created by [`install`](Self::install) if missing)
    /// instead of the search path's.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for an empty name or one with a control character.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_postgres::PostgresFence::new().with_schema("ops")?;
    /// assert!(fence.install_sql().contains("\"ops\".zkfence_fence"));
    /// # Ok::<(), zkfence::fence::ConfigError>(())
    /// ```
    pub fn with_schema(mut self, schema: impl Into<String>) -> Result<PostgresFence, ConfigError> {
        let schema = schema.into();
        if schema.is_empty() || schema.chars().any(char::is_control) {
            let instead = "a non-empty name without control characters, e.g. \"ops\"";
            return Err(ConfigError::new("schema name", schema, instead));
        }
        self.schema = Some(schema);
        Ok(self)
    }

    /// The schema the fence lives in (`None`: the search path's).
    #[cfg(feature = "conformance")]
    pub(crate) fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The isolation level of [`transaction`](Self::transaction)s (READ COMMITTED by default;
    /// see the crate docs for each level).
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_postgres::PostgresFence::new()
    ///     .with_isolation(tokio_postgres::IsolationLevel::Serializable);
    /// # let _ = fence;
    /// ```
    pub fn with_isolation(mut self, isolation: IsolationLevel) -> Self {
        self.isolation = isolation;
        self
    }

    /// How many times a [`transaction`](Self::transaction) runs before a run of serialization
    /// failures or deadlocks is returned as the database's error (at least 1; 10 by default).
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_postgres::PostgresFence::new().with_max_attempts(3);
    /// # let _ = fence;
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long a transaction may sit idle (its client silent) once it has claimed, before the
    /// server ends its session and so releases the fence row: 10 s by default. The claim sets
    /// `idle_in_transaction_session_timeout` for its own transaction (`SET LOCAL`), and never
    /// raises a lower value already in force. A holder frozen inside its open fenced
    /// transaction (a GC pause, SIGSTOP, a debugger) otherwise keeps the fence row locked, and
    /// its successor's claim waits until it wakes. Zero sets no bound. Rounded down to whole
    /// milliseconds; takes effect through [`install`](Self::install).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let fence = zkfence_postgres::PostgresFence::new().with_idle_timeout(Duration::from_secs(5));
    /// assert!(fence.install_sql().contains("idle_limit constant bigint := 5000;"));
    /// ```
    pub fn with_idle_timeout(mut self, idle: std::time::Duration) -> Self {
        self.idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// **For zkfence's own tests**: the fence with one of its rules broken, which the
    /// conformance kit must catch.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: zkfence::FenceMutant) -> Self {
        use zkfence::FenceMutant as M;
        self.flaw = match mutant {
            M::CheckOutsideTransaction => Flaw::CheckOutsideTransaction,
            M::StrictlyGreater => Flaw::Compare(sql::Compare::StrictlyGreater),
            M::Equality => Flaw::Compare(sql::Compare::Equality),
            M::StringCompare => Flaw::Compare(sql::Compare::Strings),
            M::NoUpsert => Flaw::Compare(sql::Compare::NoUpsert),
            M::SerializationAsSuccess => Flaw::SerializationAsSuccess,
            M::RefusalInSavepoint => Flaw::RefusalInSavepoint,
            M::NoIdleBound => Flaw::NoIdleBound,
            // Other stores' flaws: this fence has none of them.
            _ => Flaw::None,
        };
        self
    }

    /// The install script: the fence table and the `zkfence_claim` function, idempotent. For
    /// migration tools; [`install`](Self::install) runs it.
    ///
    /// # Examples
    ///
    /// ```
    /// let script = zkfence_postgres::PostgresFence::new().install_sql();
    /// assert!(script.contains("CREATE TABLE IF NOT EXISTS zkfence_fence"));
    /// assert!(script.contains("CREATE OR REPLACE FUNCTION zkfence_claim"));
    /// ```
    pub fn install_sql(&self) -> String {
        sql::install(self.schema.as_deref(), self.rules())
    }

    /// The rules the installed claim follows: the sound ones, or this fence's mutant's.
    fn rules(&self) -> sql::Rules {
        sql::Rules {
            compare: match self.flaw {
                Flaw::Compare(compare) => compare,
                _ => sql::Compare::Sound,
            },
            doom_in_savepoint: self.flaw != Flaw::RefusalInSavepoint,
            idle_ms: match self.flaw {
                Flaw::NoIdleBound => 0,
                _ => self.idle_ms,
            },
        }
    }

    /// Whether the claim function installed for this fence is this version's sound one (with
    /// whatever idle bound it was installed with): `Ok(Some(bound))` (0: no bound), `Ok(None)`
    /// when none is installed, `Err` with the installed body when it differs.
    #[cfg(feature = "conformance")]
    pub(crate) async fn installed(
        &self,
        client: &impl GenericClient,
    ) -> Result<Result<Option<u64>, String>, tokio_postgres::Error> {
        let row = client
            .query_typed_opt(&sql::installed(self.schema()), &[])
            .await?;
        let Some(body) = row.map(|r| r.get::<_, String>(0)) else {
            return Ok(Ok(None));
        };
        let table = sql::qualified(self.schema(), "zkfence_fence");
        let sound = |idle_ms| sql::Rules {
            compare: sql::Compare::Sound,
            doom_in_savepoint: true,
            idle_ms,
        };
        Ok(match sql::idle_bound_of(&body) {
            Some(idle) if sql::claim_body(&table, sound(idle)) == body => Ok(Some(idle)),
            _ => Err(body),
        })
    }

    /// Creates the fence table and the claim function (and the schema) if missing, and
    /// replaces the function with this version's; safe to run on every start.
    ///
    /// # Errors
    ///
    /// The database's error (e.g. no CREATE privilege: run the
    /// [`install_sql`](Self::install_sql) script as an owner instead).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the script runs as one implicit transaction, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    /// zkfence_postgres::PostgresFence::new().install(&db).await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self, client: &impl GenericClient) -> Result<(), tokio_postgres::Error> {
        client.batch_execute(&self.install_sql()).await
    }

    /// Raises the ticket's scope's fence to its token, in a statement of its own (its own
    /// transaction, or the caller's if `client` is a [`Transaction`]): from then on every older
    /// holder is refused. Returns the token the fence held (`None` on the scope's first
    /// claim). Two first claims at once: the higher token wins; the lower is refused if it
    /// comes second.
    ///
    /// A claim alone does not make a later write safe (see the crate docs): write in a
    /// [`transaction`](Self::transaction), which claims first.
    ///
    /// A claim refused inside a savepoint (`client` a [`Transaction`] made by
    /// [`Transaction::transaction`], or any subtransaction) ends the connection's session, as the
    /// installed function does for every client: a rollback to the savepoint would undo the
    /// refusal. `client` is closed after that refusal; connect again.
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`], [`FenceError::LockLost`] (before sending),
    /// [`FenceError::InDoubt`] (the connection broke with the claim sent), and the database's
    /// error as [`FenceError::Store`].
    ///
    /// # Cancel safety
    ///
    /// A claim already sent may commit after the future is dropped; a claim only refuses older
    /// holders, so that is harmless.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: tokio_postgres::Client, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let before = zkfence_postgres::PostgresFence::new().claim(&db, &ticket).await?;
    /// println!("fence raised from {before:?}");
    /// # Ok(()) }
    /// ```
    pub async fn claim(
        &self,
        client: &impl GenericClient,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, FenceError<tokio_postgres::Error>> {
        let work = self.claim_once(client, ticket);
        fence::author::drive_once(STORE, "claim", ticket, work).await
    }

    async fn claim_once(
        &self,
        client: &impl GenericClient,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, FenceError<tokio_postgres::Error>> {
        ticket.check_before_commit()?;
        self.claim_in(client, ticket, false).await
    }

    /// The claim statement on `client`, its outcome classified: a refusal; the database's
    /// error (nothing done); or, for a claim that commits on its own (`in_transaction`
    /// false), a broken connection after it was sent: in doubt (it may have applied). Inside
    /// a transaction that never commits, a broken connection rolls it back.
    async fn claim_in(
        &self,
        client: &impl GenericClient,
        ticket: &FenceTicket,
        in_transaction: bool,
    ) -> Result<Option<i64>, FenceError<tokio_postgres::Error>> {
        let (scope, token) = sql::params(ticket);
        let claim = sql::claim(self.schema.as_deref());
        let err = match client
            .query_typed_one(&claim, &claim_params(&scope, &token))
            .await
        {
            Ok(row) => return row.try_get(0).map_err(FenceError::Store),
            Err(err) => err,
        };
        Err(match refusal(&err) {
            Some(seen) => ticket.refused(seen),
            None if err.as_db_error().is_some() || in_transaction => FenceError::Store(err),
            None => ticket.in_doubt(err),
        })
    }

    /// The fenced transaction: begins (at this fence's isolation level), raises the ticket's
    /// fence as its first statement, runs `work` on the transaction, checks the hold
    /// ([`FenceTicket::check`]), and commits. The claim costs no round trip of its own: it is
    /// sent, and `work` starts at once, without waiting for its answer (pipelined). The server
    /// runs the claim before `work`'s statements, and a refused claim aborts the transaction,
    /// so each of them fails and the refusal is what this returns; but what `work` does outside
    /// the transaction (a file, a call to another service) may happen although the claim is
    /// refused, and is never fenced. Runs it all again (up to
    /// [`with_max_attempts`](Self::with_max_attempts)) when the database reports a
    /// serialization failure or a deadlock, from `work` or the commit; `work` must therefore be
    /// safe to run again (it is: what it did was rolled back).
    ///
    /// `work`'s error type is yours (`tokio_postgres::Error`, or your own that converts from
    /// it and keeps it as its `source()`, so that a serialization failure inside it is still
    /// recognised and retried); an error from `work` rolls back and comes back as
    /// [`FenceError::Store`]. A transaction that an error aborted inside `work` (one `work`
    /// swallowed) is never reported committed: PostgreSQL answers its `COMMIT` with a silent
    /// `ROLLBACK`, so the commit is sent behind a `SELECT 1` that fails there instead.
    ///
    /// # Errors
    ///
    /// - [`FenceError::Refused`]: a newer holder claimed the scope; rolled back.
    /// - [`FenceError::LockLost`]: the hold's check before `COMMIT` failed; rolled back.
    /// - [`FenceError::InDoubt`]: the connection broke after `COMMIT` was sent, or the commit
    ///   failed with an error that does not say it rolled back: read back.
    /// - [`FenceError::Store`]: `work`'s error, or the database's (after the last attempt, a
    ///   serialization failure); rolled back.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before `COMMIT` is sent rolls the transaction back; once sent, the
    /// commit may still apply (it passed the fence).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut db: tokio_postgres::Client, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence::fence::FenceError;
    /// let fence = zkfence_postgres::PostgresFence::new();
    /// let outcome = fence
    ///     .transaction(&mut db, &ticket, |tx| {
    ///         Box::pin(async move {
    ///             tx.execute("UPDATE jobs SET state = 'done' WHERE id = 1", &[]).await
    ///         })
    ///     })
    ///     .await;
    /// match outcome {
    ///     Ok(rows) => println!("{rows} rows updated"),
    ///     Err(FenceError::Refused { seen, .. }) => println!("a newer holder ({seen}) owns the jobs"),
    ///     Err(FenceError::InDoubt { .. }) => println!("read back before doing anything else"),
    ///     Err(err) => return Err(err.into()),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn transaction<T, E, F>(
        &self,
        client: &mut Client,
        ticket: &FenceTicket,
        work: F,
    ) -> Result<T, FenceError<E>>
    where
        F: for<'t> FnMut(&'t Transaction<'_>) -> TxFuture<'t, T, E>,
        E: From<tokio_postgres::Error> + std::error::Error + 'static,
    {
        self.transaction_all(client, std::slice::from_ref(ticket), work)
            .await
    }

    /// As [`transaction`](Self::transaction), fenced by several tickets at once (a
    /// [`MultiGuard`](zkfence::MultiGuard)'s [`tickets`](zkfence::MultiHeld::tickets)): their
    /// claims are the transaction's first statements, in scope order (so that two multi-lock
    /// holders never wait for each other's fence rows in opposite orders), and each hold is
    /// checked before the commit. A refusal names the first ticket refused.
    ///
    /// # Errors
    ///
    /// As [`transaction`](Self::transaction); [`FenceError::Invalid`] for no ticket at all.
    ///
    /// # Cancel safety
    ///
    /// As [`transaction`](Self::transaction).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut db: tokio_postgres::Client, locks: zkfence::FencedMultiLock) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence::Acquire;
    /// let guard = locks.acquire().await?;
    /// zkfence_postgres::PostgresFence::new()
    ///     .transaction_all(&mut db, &guard.tickets(), |tx| {
    ///         Box::pin(async move {
    ///             tx.execute("UPDATE accounts SET balance = balance - 10 WHERE id = 4", &[]).await?;
    ///             tx.execute("UPDATE accounts SET balance = balance + 10 WHERE id = 17", &[]).await
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction_all<T, E, F>(
        &self,
        client: &mut Client,
        tickets: &[FenceTicket],
        mut work: F,
    ) -> Result<T, FenceError<E>>
    where
        F: for<'t> FnMut(&'t Transaction<'_>) -> TxFuture<'t, T, E>,
        E: From<tokio_postgres::Error> + std::error::Error + 'static,
    {
        let mut ordered: Vec<&FenceTicket> = tickets.iter().collect();
        ordered.sort_by(|a, b| a.scope().cmp(b.scope()));
        let Some(first) = ordered.first().copied() else {
            let why = "a fenced transaction needs at least one ticket";
            return Err(FenceError::Invalid(zkfence::Error::InvalidOptions(why)));
        };
        let ordered = &ordered[..];
        let (on, max) = ((client, &mut work), self.max_attempts);
        fence::author::drive_on(STORE, "transaction", first, max, on, |(db, work)| async {
            let outcome = self.try_transaction(db, ordered, work).await;
            ((db, work), outcome.map_err(worth_retrying))
        })
        .await
    }

    /// One try of a fenced transaction. A serialization failure comes back as
    /// `FenceError::Store`, for [`transaction_all`](Self::transaction_all) to retry.
    async fn try_transaction<T, E, F>(
        &self,
        client: &mut Client,
        tickets: &[&FenceTicket],
        work: &mut F,
    ) -> Result<T, FenceError<E>>
    where
        F: for<'t> FnMut(&'t Transaction<'_>) -> TxFuture<'t, T, E>,
        E: From<tokio_postgres::Error> + std::error::Error + 'static,
    {
        let checked = || (tickets.iter()).try_for_each(|t| t.check_before_commit::<E>());
        checked()?;
        let outside = self.flaw == Flaw::CheckOutsideTransaction;
        if outside {
            // The mutant claims in statements of their own, then writes in a transaction that
            // nothing ties to the claims.
            for ticket in tickets {
                self.claim_once(client, ticket)
                    .await
                    .map_err(|e| e.map_store(E::from))?;
            }
        }
        let store = |err: tokio_postgres::Error| FenceError::Store(E::from(err));
        let tx = client
            .build_transaction()
            .isolation_level(self.isolation)
            .start()
            .await
            .map_err(store)?;
        // The claims and `work` pipelined: every claim is sent before `work`'s first
        // statement, without waiting for its answer, so the fence costs no round trip of its
        // own. The server runs them in the order sent: a refused claim aborts the transaction
        // and every statement of `work` after it fails (SQLSTATE 25P02), and the refusal is
        // what comes back.
        let claims = (tickets.iter().filter(|_| !outside))
            .map(|ticket| self.claim_in(&tx, ticket, true))
            .collect::<Vec<_>>();
        let (claimed, worked) = pipelined(claims, work(&tx)).await;
        claimed.map_err(|e| e.map_store(E::from))?;
        let value = worked.map_err(FenceError::Store)?;
        // The last check before the commit: a hold lost meanwhile writes nothing (the
        // transaction is rolled back as it drops).
        checked()?;
        match commit(tx).await {
            Ok(()) => Ok(value),
            // The mutant takes a commit refused for serialization for a commit.
            Err(err) if self.flaw == Flaw::SerializationAsSuccess && is_serialization(&err) => {
                Ok(value)
            }
            Err(err) if rolled_back(&err) => Err(store(err)),
            Err(err) => Err(tickets[0].in_doubt(E::from(err))),
        }
    }

    /// The token the fence holds for `scope`; `None` before its first claim.
    ///
    /// # Errors
    ///
    /// The database's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    /// let fence = zkfence_postgres::PostgresFence::new();
    /// println!("{:?}", fence.seen(&db, "/locks/orders").await?);
    /// # Ok(()) }
    /// ```
    pub async fn seen(
        &self,
        client: &impl GenericClient,
        scope: &str,
    ) -> Result<Option<i64>, tokio_postgres::Error> {
        let row = client
            .query_typed_opt(&sql::seen(self.schema.as_deref()), &[(&scope, Type::TEXT)])
            .await?;
        row.map(|row| row.try_get(0)).transpose()
    }

    /// Every scope's fence, by scope (its claim count and last change too).
    ///
    /// # Errors
    ///
    /// The database's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    /// for row in zkfence_postgres::PostgresFence::new().fences(&db).await? {
    ///     println!("{} {} ({:?} claims)", row.scope, row.token, row.claims);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fences(
        &self,
        client: &impl GenericClient,
    ) -> Result<Vec<FenceState>, tokio_postgres::Error> {
        let rows = client
            .query_typed(&sql::scopes(self.schema.as_deref()), &[])
            .await?;
        // try_get: a zkfence_fence table of another shape (made by hand) errs, never panics.
        (rows.iter())
            .map(|row| {
                let (scope, token): (String, i64) = (row.try_get(0)?, row.try_get(1)?);
                let (claims, updated): (i64, String) = (row.try_get(2)?, row.try_get(3)?);
                Ok(FenceState::new(scope, token).counted(claims, updated))
            })
            .collect()
    }

    /// Sets `scope`'s fence to `to`, whatever it holds: the operator's way out after the
    /// ZooKeeper ensemble's data was reset (every new token is below the old fences). Returns
    /// what it held; `None` if the scope has no fence (nothing to rebase). Only once no holder
    /// of the old ensemble can write any more: a fence set lower lets their late writes in.
    ///
    /// # Errors
    ///
    /// The database's error (`to` must be 0 or more).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one statement, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(db: tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    /// let fence = zkfence_postgres::PostgresFence::new();
    /// if let Some(old) = fence.rebase(&db, "/locks/orders", 0).await? {
    ///     println!("fence of /locks/orders moved from {old} to 0");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rebase(
        &self,
        client: &impl GenericClient,
        scope: &str,
        to: i64,
    ) -> Result<Option<i64>, tokio_postgres::Error> {
        let row = client
            .query_typed_opt(
                &sql::rebase(self.schema.as_deref()),
                &[(&scope, Type::TEXT), (&to, Type::INT8)],
            )
            .await?;
        let old: Option<i64> = row.map(|row| row.try_get(0)).transpose()?;
        if let Some(old) = old {
            tracing::warn!(scope, from = old, to, "fence rebased");
        }
        Ok(old)
    }
}

/// Runs `claims` and then `work` together on one connection: each polled in that order, so
/// that each sends its statement before the next does (tokio-postgres sends a statement when
/// its future is first polled, and the server answers in order). The first failed claim, or
/// `Ok`; and `work`'s outcome once it is done too.
async fn pipelined<C, W, E>(claims: Vec<C>, work: W) -> (Result<(), E>, W::Output)
where
    C: Future<Output = Result<Option<i64>, E>>,
    W: Future,
{
    let mut claims: Vec<Pin<Box<C>>> = claims.into_iter().map(Box::pin).collect();
    let mut claimed: Vec<Option<Result<Option<i64>, E>>> = claims.iter().map(|_| None).collect();
    let mut work = std::pin::pin!(work);
    let mut worked = None;
    let worked = std::future::poll_fn(|cx| {
        for (claim, outcome) in claims.iter_mut().zip(claimed.iter_mut()) {
            if outcome.is_none() {
                *outcome = ready(claim.as_mut().poll(cx));
            }
        }
        if worked.is_none() {
            worked = ready(work.as_mut().poll(cx));
        }
        match worked.take() {
            Some(out) if claimed.iter().all(Option::is_some) => Poll::Ready(out),
            out => {
                worked = out;
                Poll::Pending
            }
        }
    })
    .await;
    let first_failed = claimed.into_iter().flatten().find_map(Result::err);
    (first_failed.map_or(Ok(()), Err), worked)
}

/// A poll's value, if it is ready.
fn ready<T>(poll: Poll<T>) -> Option<T> {
    match poll {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

/// The claim's parameters with their types: sent with the statement (`query_typed`), one round
/// trip, where a prepare would cost another (a fenced transaction measured 0.68× an unfenced
/// one with the prepare, about 0.8× without).
fn claim_params<'a>(
    scope: &'a String,
    token: &'a i64,
) -> [(&'a (dyn tokio_postgres::types::ToSql + Sync), Type); 2] {
    [(scope, Type::TEXT), (token, Type::INT8)]
}

/// Commits `tx` behind a `SELECT 1`, in one round trip: PostgreSQL answers the `COMMIT` of a
/// transaction that an error aborted with `ROLLBACK` and no error, which would read as a
/// commit; the `SELECT` fails there (SQLSTATE 25P02) and the transaction is rolled back as it
/// drops.
async fn commit(tx: Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute("SELECT 1; COMMIT").await?;
    // Committed: nothing is left for its drop to roll back (it would send a ROLLBACK with no
    // transaction open). It owns no allocation, so forgetting it frees nothing.
    std::mem::forget(tx);
    Ok(())
}

/// Whether a failed commit is known to have rolled back: the server said so, with an error of
/// a class that ends the transaction without committing it (a serialization failure or
/// deadlock, a constraint checked at commit, the transaction's state, a limit), and not a
/// fatal one that may have come from a pooler mid-commit.
fn rolled_back(err: &tokio_postgres::Error) -> bool {
    let Some(db) = err.as_db_error() else {
        return false;
    };
    let fatal = matches!(
        db.parsed_severity(),
        Some(tokio_postgres::error::Severity::Fatal | tokio_postgres::error::Severity::Panic)
    );
    let class = &db.code().code()[..2];
    !fatal && matches!(class, "40" | "23" | "25" | "54")
}

/// The token the fence holds, if `err` is `zkfence_claim`'s refusal.
fn refusal(err: &tokio_postgres::Error) -> Option<i64> {
    let db = err.as_db_error()?;
    if db.code().code() != sql::REFUSED {
        return None;
    }
    db.detail().and_then(|d| d.trim().parse().ok())
}

/// Whether `err` is a serialization failure or a deadlock.
fn is_serialization(err: &tokio_postgres::Error) -> bool {
    matches!(
        err.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// A failed try of a fenced transaction, worth another when it failed for a serialization
/// failure or a deadlock (the database rolled it back).
fn worth_retrying<E: std::error::Error + 'static>(err: FenceError<E>) -> TryFailure<E> {
    match err {
        FenceError::Store(err) if retryable(&err) => {
            TryFailure::Retry("serialization", FenceError::Store(err))
        }
        err => TryFailure::Done(err),
    }
}

/// Whether `err` (or an error in its `source()` chain) is a serialization failure or deadlock.
fn retryable<E: std::error::Error + 'static>(err: &E) -> bool {
    fence::author::find_cause::<tokio_postgres::Error>(err).is_some_and(is_serialization)
}

/// What to do about a pooler in statement mode, in [`describe`]'s words and verify's.
#[cfg(feature = "conformance")]
pub(crate) const STATEMENT_MODE: &str = "a pooler in statement mode splits the claim from your \
    writes: use transaction or session mode (PgBouncer: pool_mode = transaction)";

/// `err` as a line for a person: the server's message, its SQLSTATE and detail for a database
/// error (tokio-postgres's own text says only "db error"), else the error's text with its
/// causes. A pooler's refusal of a transaction in statement mode (PgBouncer's "transaction
/// blocks not allowed in statement pooling mode") says what to change.
#[cfg(feature = "conformance")]
pub(crate) fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => {
            let detail = db.detail().map(|d| format!("; {d}")).unwrap_or_default();
            let advice = match db.message().contains("statement pooling mode") {
                true => format!(": {STATEMENT_MODE}"),
                false => String::new(),
            };
            format!(
                "{} (SQLSTATE {}){detail}{advice}",
                db.message(),
                db.code().code()
            )
        }
        None => {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// The SQLSTATE of the first PostgreSQL server error among `err` and its causes (`"42501"`
/// for a refused privilege, [`REFUSED`](crate::REFUSED) for a refused claim), for a caller
/// that holds the error behind another type, as a [`FenceError`] or a boxed error does.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(db: tokio_postgres::Client) {
/// let err: Box<dyn std::error::Error> = match db.execute("SELECT 1", &[]).await {
///     Ok(_) => return,
///     Err(err) => Box::new(err),
/// };
/// if zkfence_postgres::sqlstate(&*err) == Some("42501") {
///     eprintln!("grant the role what it needs");
/// }
/// # }
/// ```
pub fn sqlstate<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a str> {
    std::iter::successors(Some(err), |e| e.source()).find_map(|e| {
        let db = e.downcast_ref::<tokio_postgres::Error>()?.as_db_error()?;
        Some(db.code().code())
    })
}
