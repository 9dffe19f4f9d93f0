//! The fence itself: its configuration, its claims and fenced writes, its reads and rebase.

use crate::sql::{self, MAX_SCOPE_BYTES, REFUSED, ROLLED_BACK};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel};
use zkfence::fence::author::TryFailure;
use zkfence::fence::{self, ConfigError, FenceError, FenceState, FenceTicket};

/// The label of this store in the `zkfence_fence_*` metrics.
pub(crate) const STORE: &str = "mysql";

/// The future a fenced transaction's work returns: it borrows the connection.
pub type TxFuture<'c, T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'c>>;

/// A MySQL/MariaDB fence: the database its table and procedures live in, the isolation level of
/// its transactions, and how often a transaction is retried. Cheap to clone; it holds no
/// connection (every call takes yours).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(mut db: mysql_async::Conn) -> Result<(), Box<dyn std::error::Error>> {
/// let fence = zkfence_mysql::MySqlFence::new()
///     .with_database("ops")?
///     .with_isolation(mysql_async::IsolationLevel::RepeatableRead);
/// fence.install(&mut db).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MySqlFence {
    database: Option<String>,
    isolation: IsolationLevel,
    max_attempts: u32,
    idle_timeout: Duration,
    flaw: Flaw,
}

/// A deliberate flaw (zkfence's own tests only: set by `with_mutant`).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// The claim procedure decides another way (see [`sql::Claim`]).
    Claim(sql::Claim),
    /// Claims in autocommit statements, then writes in a transaction nothing ties to them.
    CheckOutsideTransaction,
    /// Decides from an `UPDATE`'s rows-affected count.
    RowsAffected,
    /// Commits without the seals.
    UnsealedCommit,
}

impl Default for MySqlFence {
    fn default() -> Self {
        MySqlFence::new()
    }
}

impl MySqlFence {
    /// A fence in the connection's current database, at READ COMMITTED, retrying a
    /// transaction up to 10 times.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new();
    /// assert!(fence.install_sql().contains("zkfence_claim"));
    /// ```
    pub fn new() -> MySqlFence {
        MySqlFence {
            database: None,
            isolation: IsolationLevel::ReadCommitted,
            max_attempts: 10,
            idle_timeout: Duration::from_secs(sql::IDLE_BOUND_SECS),
            flaw: Flaw::None,
        }
    }

    /// Keeps the fence's table and procedures in `database` (created by
    /// [`install`](Self::install) if missing), whatever database a connection uses.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] for a name that is not a plain identifier.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new().with_database("ops")?;
    /// assert!(fence.install_sql().contains("`ops`.zkfence_fence"));
    /// # Ok::<(), zkfence::fence::ConfigError>(())
    /// ```
    pub fn with_database(mut self, database: &str) -> Result<MySqlFence, ConfigError> {
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$';
        if database.is_empty() || database.len() > 64 || !database.chars().all(plain) {
            let instead = "1 to 64 letters, digits, `_` or `$`, e.g. \"ops\"";
            return Err(ConfigError::new("database name", database, instead));
        }
        self.database = Some(database.to_owned());
        Ok(self)
    }

    /// The isolation level of fenced transactions (READ COMMITTED by default). The claim is a
    /// locking read, so it is sound at every level; under REPEATABLE READ InnoDB takes the
    /// snapshot at the work's first plain read, after the claim, so the work still sees what
    /// every earlier holder committed.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new()
    ///     .with_isolation(mysql_async::IsolationLevel::Serializable);
    /// # let _ = fence;
    /// ```
    pub fn with_isolation(mut self, isolation: IsolationLevel) -> Self {
        self.isolation = isolation;
        self
    }

    /// How many times a fenced transaction runs at most when the database rolls it back (a
    /// deadlock, a lock wait timeout, two first claims of a scope at once); at least 1.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new().with_max_attempts(3);
    /// # let _ = fence;
    /// ```
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// How long a fenced transaction may sit idle after its claim (no statement from its
    /// client) before MariaDB ends it, 10 s by default, rounded up to whole seconds; zero sets
    /// no bound. [`install`](Self::install) writes it into the claim procedure, which lowers
    /// the session's `idle_transaction_timeout`, `idle_write_transaction_timeout` and
    /// `idle_readonly_transaction_timeout` to it (never raising one set lower): a holder frozen
    /// inside its transaction (a GC pause, a SIGSTOP, a lost VM) then loses its connection,
    /// which rolls its transaction back and frees the fence row, instead of keeping its
    /// successor waiting until it wakes (and failing the successor at
    /// `innodb_lock_wait_timeout`, 50 s by default). The lowered values stay for the rest of
    /// the session, so a fenced transaction's work must not pause longer between statements.
    /// Oracle MySQL has no such variables: there the claim sets nothing (see the crate docs).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let fence = zkfence_mysql::MySqlFence::new().with_idle_timeout(Duration::from_secs(30));
    /// assert!(fence.install_sql().contains("DECLARE idle_bound INT DEFAULT 30;"));
    /// ```
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The idle bound [`with_idle_timeout`](Self::with_idle_timeout) set (10 s by default).
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new();
    /// assert_eq!(fence.idle_timeout(), std::time::Duration::from_secs(10));
    /// ```
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }

    /// **For zkfence's own tests.** This fence with one of its rules broken (see
    /// [`zkfence::FenceMutant`]); the conformance kit must catch it. Mutants of other stores
    /// leave it sound.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_mysql::MySqlFence::new().with_mutant(zkfence::FenceMutant::NoLockingRead);
    /// assert!(!fence.install_sql().contains("FOR UPDATE"));
    /// ```
    #[cfg(feature = "mutants")]
    pub fn with_mutant(mut self, mutant: zkfence::FenceMutant) -> Self {
        use zkfence::FenceMutant as M;
        self.flaw = match mutant {
            M::StrictlyGreater => Flaw::Claim(sql::Claim::StrictlyGreater),
            M::NoUpsert => Flaw::Claim(sql::Claim::NoUpsert),
            M::NoLockingRead => Flaw::Claim(sql::Claim::NoLockingRead),
            M::CheckOutsideTransaction => Flaw::CheckOutsideTransaction,
            M::RowsAffected => Flaw::RowsAffected,
            M::UnsealedCommit => Flaw::UnsealedCommit,
            M::CommitAfterRefusal => Flaw::Claim(sql::Claim::CommitAfterRefusal),
            M::NoOpSeal => Flaw::Claim(sql::Claim::NoOpSeal),
            M::NoIdleBound => Flaw::Claim(sql::Claim::NoIdleBound),
            M::GapLockingFirstClaim => Flaw::Claim(sql::Claim::GapLockingFirst),
            M::ClientCharsetScope => Flaw::Claim(sql::Claim::ClientCharsetScope),
            _ => Flaw::None,
        };
        self
    }

    fn db(&self) -> Option<&str> {
        self.database.as_deref()
    }

    /// The database the fence lives in (`None`: the connection's).
    #[cfg(feature = "conformance")]
    pub(crate) fn database(&self) -> Option<&str> {
        self.db()
    }

    fn claim_rule(&self) -> sql::Claim {
        match self.flaw {
            Flaw::Claim(claim) => claim,
            _ => sql::Claim::Sound,
        }
    }

    /// The code this fence installs on a server, MariaDB's (with the idle bound) or Oracle
    /// MySQL's (without: it has no idle transaction timeout).
    pub(crate) fn code(&self, mariadb: bool) -> sql::Code {
        let secs = self.idle_timeout.as_secs() + u64::from(self.idle_timeout.subsec_nanos() > 0);
        sql::Code {
            claim: self.claim_rule(),
            idle_bound: (mariadb && secs > 0).then_some(secs),
        }
    }

    /// The install script, for the `mysql`/`mariadb` client (with `DELIMITER` lines):
    /// idempotent. [`install`](Self::install) runs the same statements. It is MariaDB's: its
    /// claim sets the idle bound ([`with_idle_timeout`](Self::with_idle_timeout)) through
    /// variables Oracle MySQL lacks, which refuses it; on MySQL run
    /// [`install`](Self::install) (`zkfence fence install`), which leaves the bound out there.
    ///
    /// # Examples
    ///
    /// ```
    /// let script = zkfence_mysql::MySqlFence::new().install_sql();
    /// assert!(script.contains("CREATE TABLE IF NOT EXISTS zkfence_fence"));
    /// assert!(script.contains("CREATE PROCEDURE zkfence_claim"));
    /// ```
    pub fn install_sql(&self) -> String {
        sql::install_script(self.db(), self.code(true))
    }

    /// Creates the fence table (and the database) if missing, and replaces the procedures with
    /// this version's; safe to run on every start. A claim that runs while another process
    /// installs may find the procedure missing for a moment (an error, never a wrong answer).
    ///
    /// # Errors
    ///
    /// The database's error (e.g. no CREATE ROUTINE privilege: run the
    /// [`install_sql`](Self::install_sql) script as an owner instead).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the procedures missing; run it again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut db: mysql_async::Conn) -> Result<(), mysql_async::Error> {
    /// zkfence_mysql::MySqlFence::new().install(&mut db).await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self, conn: &mut impl Queryable) -> Result<(), mysql_async::Error> {
        let mariadb = is_mariadb(conn).await?;
        for statement in sql::install(self.db(), self.code(mariadb)) {
            match conn.query_drop(statement).await {
                // Another process installing at the same moment created it first.
                Err(mysql_async::Error::Server(e)) if e.code == 1304 => {}
                outcome => outcome?,
            }
        }
        Ok(())
    }

    /// Raises the ticket's scope's fence to its token, in a transaction of its own, committed
    /// at once: from then on every older holder is refused. Returns the token the fence held
    /// (`None` on the scope's first claim). To claim inside a transaction of yours, write in a
    /// [`transaction`](Self::transaction) (or, from another client, follow the crate docs'
    /// recipe: autocommit off, `CALL zkfence_claim`, the writes, `CALL zkfence_seal`, `COMMIT`).
    ///
    /// A claim alone does not make a later write safe (see the crate docs): write in a
    /// [`transaction`](Self::transaction), which claims first.
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`], [`FenceError::LockLost`] (before sending),
    /// [`FenceError::InDoubt`] (the connection broke with the claim sent),
    /// [`FenceError::Invalid`] (a scope longer than [`MAX_SCOPE_BYTES`]), and the database's
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
    /// # async fn demo(mut db: mysql_async::Conn, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let before = zkfence_mysql::MySqlFence::new().claim(&mut db, &ticket).await?;
    /// println!("fence raised from {before:?}");
    /// # Ok(()) }
    /// ```
    pub async fn claim(
        &self,
        conn: &mut Conn,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, FenceError<mysql_async::Error>> {
        let max = self.max_attempts;
        fence::author::drive_on(STORE, "claim", ticket, max, conn, |conn| async {
            let outcome = self.claim_once(conn, ticket).await;
            (conn, outcome)
        })
        .await
    }

    async fn claim_once(
        &self,
        conn: &mut Conn,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, TryFailure<mysql_async::Error>> {
        ticket.check_before_commit().map_err(TryFailure::Done)?;
        check_scope(ticket).map_err(TryFailure::Done)?;
        if self.flaw == Flaw::RowsAffected {
            return self.claim_by_count(conn, ticket).await;
        }
        let claim = sql::claim(self.db(), ticket.scope(), ticket.token().as_i64());
        match previous(conn, claim).await {
            Ok(previous) => Ok(previous),
            Err(err) => {
                // A failed claim stopped the batch with its transaction doomed: end it.
                roll_back(conn).await;
                Err(classify(ticket, err, "claim"))
            }
        }
    }

    /// The rows-affected mutant's claim: an update whose count says whether it passed.
    async fn claim_by_count(
        &self,
        conn: &mut impl Queryable,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, TryFailure<mysql_async::Error>> {
        let (scope, token) = (ticket.scope().as_bytes(), ticket.token().as_i64());
        let update = sql::conditional_update(self.db());
        let changed = match conn.exec_iter(update, (token, scope, token)).await {
            Ok(result) => {
                let changed = result.affected_rows();
                result.drop_result().await.map(|()| changed)
            }
            Err(err) => Err(err),
        };
        match changed {
            Ok(0) => {}
            Ok(_) => return Ok(None),
            Err(err) => return Err(classify(ticket, err, "claim")),
        }
        match conn.exec_drop(sql::insert(self.db()), (scope, token)).await {
            Ok(()) => Ok(None),
            // No row changed and the row exists: taken for a newer holder's.
            Err(mysql_async::Error::Server(e)) if e.code == 1062 => {
                Err(TryFailure::Done(ticket.refused(ticket.token().as_i64())))
            }
            Err(err) => Err(classify(ticket, err, "claim")),
        }
    }

    /// The fenced transaction: opens one (at this fence's isolation level, autocommit off),
    /// claims the ticket's scope as its first statement, runs `work` on the connection, checks
    /// the hold ([`FenceTicket::check`]), and commits behind `zkfence_seal`. Runs it all again
    /// (up to [`with_max_attempts`](Self::with_max_attempts)) when the database rolled it back:
    /// a deadlock or lock wait timeout, from `work` (passed on, or swallowed: the seal finds
    /// out) or from two first claims at once; `work` must therefore be safe to run again (it
    /// is: what it did was rolled back).
    ///
    /// `work`'s error type is yours (`mysql_async::Error`, or your own that converts from it
    /// and keeps it as its `source()`, so that a deadlock inside it is still recognised and
    /// retried); an error from `work` rolls back and comes back as [`FenceError::Store`].
    /// `work` must not commit, roll back or run DDL (see the crate docs).
    ///
    /// # Errors
    ///
    /// - [`FenceError::Refused`]: a newer holder claimed the scope; rolled back.
    /// - [`FenceError::LockLost`]: the hold's check before `COMMIT` failed; rolled back.
    /// - [`FenceError::InDoubt`]: the connection broke after `COMMIT` was sent: read back.
    /// - [`FenceError::Invalid`]: a transaction is already open on the connection, or a scope
    ///   is too long; nothing was done.
    /// - [`FenceError::Store`]: `work`'s error, or the database's (after the last attempt, a
    ///   deadlock); rolled back. On MariaDB that includes a connection the server closed
    ///   because `work` sat idle between two statements longer than the idle bound
    ///   ([`with_idle_timeout`](Self::with_idle_timeout)): rolled back with it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before `COMMIT` is sent leaves the transaction open on the
    /// connection (nothing committed): roll it back (`ROLLBACK; SET autocommit = 1`) or drop the
    /// connection; a fenced transaction refuses to start on it until then. Once `COMMIT` is
    /// sent, it may still apply (it passed the fence).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut db: mysql_async::Conn, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use mysql_async::prelude::Queryable;
    /// use zkfence::fence::FenceError;
    /// let fence = zkfence_mysql::MySqlFence::new();
    /// let outcome = fence
    ///     .transaction(&mut db, &ticket, |conn| {
    ///         Box::pin(async move {
    ///             conn.query_drop("UPDATE jobs SET state = 'done' WHERE id = 1").await?;
    ///             Ok::<_, mysql_async::Error>(conn.affected_rows())
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
        conn: &mut Conn,
        ticket: &FenceTicket,
        work: F,
    ) -> Result<T, FenceError<E>>
    where
        F: for<'c> FnMut(&'c mut Conn) -> TxFuture<'c, T, E>,
        E: From<mysql_async::Error> + std::error::Error + 'static,
    {
        self.transaction_all(conn, std::slice::from_ref(ticket), work)
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
    /// # async fn demo(mut db: mysql_async::Conn, locks: zkfence::FencedMultiLock) -> Result<(), Box<dyn std::error::Error>> {
    /// use mysql_async::prelude::Queryable;
    /// use zkfence::Acquire;
    /// let guard = locks.acquire().await?;
    /// zkfence_mysql::MySqlFence::new()
    ///     .transaction_all(&mut db, &guard.tickets(), |conn| {
    ///         Box::pin(async move {
    ///             conn.query_drop("UPDATE accounts SET balance = balance - 10 WHERE id = 4").await?;
    ///             conn.query_drop("UPDATE accounts SET balance = balance + 10 WHERE id = 17").await
    ///         })
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn transaction_all<T, E, F>(
        &self,
        conn: &mut Conn,
        tickets: &[FenceTicket],
        mut work: F,
    ) -> Result<T, FenceError<E>>
    where
        F: for<'c> FnMut(&'c mut Conn) -> TxFuture<'c, T, E>,
        E: From<mysql_async::Error> + std::error::Error + 'static,
    {
        let mut ordered: Vec<&FenceTicket> = tickets.iter().collect();
        ordered.sort_by(|a, b| a.scope().cmp(b.scope()));
        let Some(first) = ordered.first().copied() else {
            let why = "a fenced transaction needs at least one ticket";
            return Err(FenceError::Invalid(zkfence::Error::InvalidOptions(why)));
        };
        let ordered = &ordered[..];
        let (on, max) = ((conn, &mut work), self.max_attempts);
        fence::author::drive_on(STORE, "transaction", first, max, on, |(conn, work)| async {
            let outcome = self.try_transaction(conn, ordered, work).await;
            ((conn, work), outcome)
        })
        .await
    }

    /// One try of a fenced transaction.
    async fn try_transaction<T, E, F>(
        &self,
        conn: &mut Conn,
        tickets: &[&FenceTicket],
        work: &mut F,
    ) -> Result<T, TryFailure<E>>
    where
        F: for<'c> FnMut(&'c mut Conn) -> TxFuture<'c, T, E>,
        E: From<mysql_async::Error> + std::error::Error + 'static,
    {
        let checked = || (tickets.iter()).try_for_each(|t| t.check_before_commit::<E>());
        checked().map_err(TryFailure::Done)?;
        for ticket in tickets {
            check_scope(ticket).map_err(TryFailure::Done)?;
        }
        self.begin(conn, tickets)
            .await
            .map_err(|e| e.map_store(E::from))?;
        let value = match work(conn).await {
            Ok(value) => value,
            Err(err) => {
                roll_back(conn).await;
                let reason =
                    fence::author::find_cause::<mysql_async::Error>(&err).and_then(retryable);
                return Err(match reason {
                    Some(reason) => TryFailure::Retry(reason, FenceError::Store(err)),
                    None => TryFailure::Done(FenceError::Store(err)),
                });
            }
        };
        // The last check before the commit: a hold lost meanwhile writes nothing.
        if let Err(err) = checked() {
            roll_back(conn).await;
            return Err(TryFailure::Done(err));
        }
        // The mutants that claim outside the transaction, or commit unsealed, seal nothing.
        let sealed = !matches!(
            self.flaw,
            Flaw::UnsealedCommit | Flaw::CheckOutsideTransaction | Flaw::RowsAffected
        );
        let scopes: Vec<&str> = (tickets.iter())
            .filter(|_| sealed)
            .map(|t| t.scope())
            .collect();
        match conn.query_drop(sql::commit(self.db(), &scopes)).await {
            Ok(()) => Ok(value),
            Err(err @ mysql_async::Error::Server(_)) if !commit_in_doubt(&err) => {
                // A seal stopped the commit, or the commit failed: nothing committed.
                roll_back(conn).await;
                let reason = retryable(&err);
                let err = FenceError::Store(E::from(not_installed(err)));
                Err(match reason {
                    Some(reason) => TryFailure::Retry(reason, err),
                    None => TryFailure::Done(err),
                })
            }
            Err(err) => Err(TryFailure::Done(tickets[0].in_doubt(E::from(err)))),
        }
    }

    /// Opens the fenced transaction and claims every ticket's scope (in the order given); on
    /// failure nothing is left open.
    async fn begin(
        &self,
        conn: &mut Conn,
        tickets: &[&FenceTicket],
    ) -> Result<(), TryFailure<mysql_async::Error>> {
        if self.flaw == Flaw::CheckOutsideTransaction {
            // The mutant claims in statements of their own, in autocommit.
            for ticket in tickets {
                self.claim_once(conn, ticket).await?;
            }
        }
        let claims: Vec<(String, i64)> = (tickets.iter())
            .map(|t| (t.scope().to_owned(), t.token().as_i64()))
            .collect();
        let in_sql = !matches!(
            self.flaw,
            Flaw::CheckOutsideTransaction | Flaw::RowsAffected
        );
        let begin = sql::begin(self.db(), self.isolation, &claims, in_sql);
        let outcome = match conn.query_drop(begin).await {
            Err(mysql_async::Error::Server(e)) if e.code == 1568 => {
                // SET TRANSACTION failed first: nothing ran, and the open transaction is not ours.
                let why =
                    "a transaction is already open on this connection: commit or roll it back \
                           first (a fenced transaction dropped mid-way leaves its own open: \
                           `ROLLBACK; SET autocommit = 1`)";
                return Err(TryFailure::Done(FenceError::Invalid(
                    zkfence::Error::InvalidOptions(why),
                )));
            }
            Err(err) => Err(classify(tickets[0], err, "claim")),
            Ok(()) if self.flaw == Flaw::RowsAffected => {
                let mut outcome = Ok(());
                for ticket in tickets {
                    if let Err(err) = self.claim_by_count(conn, ticket).await {
                        outcome = Err(err);
                        break;
                    }
                }
                outcome
            }
            Ok(()) => Ok(()),
        };
        if let Err(err) = outcome {
            roll_back(conn).await;
            return Err(match err {
                // Inside a transaction that never commits: a broken connection rolled it back.
                TryFailure::Done(FenceError::InDoubt { cause, .. }) => {
                    TryFailure::Done(FenceError::Store(cause))
                }
                err => err,
            });
        }
        Ok(())
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
    /// # async fn demo(mut db: mysql_async::Conn) -> Result<(), mysql_async::Error> {
    /// let fence = zkfence_mysql::MySqlFence::new();
    /// println!("{:?}", fence.seen(&mut db, "/locks/orders").await?);
    /// # Ok(()) }
    /// ```
    pub async fn seen(
        &self,
        conn: &mut impl Queryable,
        scope: &str,
    ) -> Result<Option<i64>, mysql_async::Error> {
        conn.exec_first(sql::seen(self.db()), (scope.as_bytes(),))
            .await
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
    /// # async fn demo(mut db: mysql_async::Conn) -> Result<(), mysql_async::Error> {
    /// for row in zkfence_mysql::MySqlFence::new().fences(&mut db).await? {
    ///     println!("{} {} ({:?} claims)", row.scope, row.token, row.claims);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fences(
        &self,
        conn: &mut impl Queryable,
    ) -> Result<Vec<FenceState>, mysql_async::Error> {
        let rows: Vec<(Vec<u8>, i64, i64, Option<String>)> =
            conn.query(sql::scopes(self.db())).await?;
        Ok((rows.into_iter())
            .map(|(scope, token, claims, updated)| {
                let scope = String::from_utf8_lossy(&scope).into_owned();
                FenceState::new(scope, token).counted(claims, updated.unwrap_or_default())
            })
            .collect())
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
    /// Dropping the future before the commit rolls it back (with the connection's next use).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut db: mysql_async::Conn) -> Result<(), mysql_async::Error> {
    /// let fence = zkfence_mysql::MySqlFence::new();
    /// if let Some(old) = fence.rebase(&mut db, "/locks/orders", 0).await? {
    ///     println!("fence of /locks/orders moved from {old} to 0");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rebase(
        &self,
        conn: &mut Conn,
        scope: &str,
        to: i64,
    ) -> Result<Option<i64>, mysql_async::Error> {
        if to < 0 {
            return Err(mysql_async::Error::Other(
                "a fence's token is 0 or more".into(),
            ));
        }
        let table = sql::qualified(self.db(), "zkfence_fence");
        let mut tx = conn
            .start_transaction(mysql_async::TxOpts::default())
            .await?;
        let old: Option<i64> = tx
            .exec_first(
                format!("{} FOR UPDATE", sql::seen(self.db())),
                (scope.as_bytes(),),
            )
            .await?;
        if old.is_some() {
            tx.exec_drop(
                format!(
                    "UPDATE {table} SET token = ?, updated = CURRENT_TIMESTAMP(6) WHERE scope = ?"
                ),
                (to, scope.as_bytes()),
            )
            .await?;
        }
        tx.commit().await?;
        if let Some(old) = old {
            tracing::warn!(scope, from = old, to, "fence rebased");
        }
        Ok(old)
    }
}

/// Whether the server is MariaDB (not Oracle MySQL).
pub(crate) async fn is_mariadb(conn: &mut impl Queryable) -> Result<bool, mysql_async::Error> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    Ok(version.is_some_and(|v| v.contains("MariaDB")))
}

/// A claim's error, classified: a refusal; a rollback worth retrying; a broken connection with
/// the statement sent (in doubt); or the database's error.
fn classify(
    ticket: &FenceTicket,
    err: mysql_async::Error,
    phase: &'static str,
) -> TryFailure<mysql_async::Error> {
    let err = not_installed(err);
    if let Some(seen) = refusal(&err) {
        return TryFailure::Done(ticket.refused(seen));
    }
    if let mysql_async::Error::Server(e) = &err {
        // Two first claims at once: the second inserts a row the first committed.
        if e.code == 1062 && phase == "claim" {
            return TryFailure::Retry("first_claim", FenceError::Store(err));
        }
    }
    if let Some(reason) = retryable(&err) {
        return TryFailure::Retry(reason, FenceError::Store(err));
    }
    if err.is_fatal() {
        TryFailure::Done(ticket.in_doubt(err))
    } else {
        TryFailure::Done(FenceError::Store(err))
    }
}

/// `err`, or, where it says that one of the fence's procedures does not exist, the same error
/// saying what to run (an install older than `zkfence_begin` and `zkfence_commit` has the claim
/// and the seal alone).
fn not_installed(err: mysql_async::Error) -> mysql_async::Error {
    match err {
        mysql_async::Error::Server(mut e) if e.code == 1305 && e.message.contains("zkfence_") => {
            e.message.push_str(
                ": this version's fence is not installed in the database the fence looks in: \
                 run `zkfence fence install mysql://…/DB` (or MySqlFence::install), which also \
                 updates an older install",
            );
            mysql_async::Error::Server(e)
        }
        err => err,
    }
}

/// The token the fence holds, if `err` is `zkfence_claim`'s refusal.
fn refusal(err: &mysql_async::Error) -> Option<i64> {
    let mysql_async::Error::Server(e) = err else {
        return None;
    };
    if e.state != REFUSED {
        return None;
    }
    e.message
        .rsplit(' ')
        .next()
        .and_then(|n| n.trim().parse().ok())
}

/// Why running a transaction again may cure `err`: the database rolled it back.
fn retryable(err: &mysql_async::Error) -> Option<&'static str> {
    let mysql_async::Error::Server(e) = err else {
        return None;
    };
    match e.code {
        1213 => Some("deadlock"),
        1205 => Some("lock_wait_timeout"),
        _ if e.state == ROLLED_BACK => Some("rolled_back"),
        _ => None,
    }
}

/// Whether the server's error on the commit batch leaves the commit's outcome unknown
/// (`ER_ERROR_DURING_COMMIT`); any other server error there stopped it before it committed.
fn commit_in_doubt(err: &mysql_async::Error) -> bool {
    matches!(err, mysql_async::Error::Server(e) if e.code == 1180)
}

/// The token the fence held before the standalone claim `batch` (sent as one: its errors come
/// back only as the batch's replies are drained), as the claim left it in `@zkfence_previous`.
async fn previous(conn: &mut Conn, batch: String) -> Result<Option<i64>, mysql_async::Error> {
    conn.query_drop(batch).await?;
    let previous: Option<Option<i64>> = conn.query_first("SELECT @zkfence_previous").await?;
    Ok(previous.flatten())
}

/// Ends whatever the fenced transaction left open, and lifts a failed claim's or seal's doom
/// from the connection; a failure here (a broken connection) has ended it already.
async fn roll_back(conn: &mut Conn) {
    if let Err(err) = conn.query_drop(sql::ROLLBACK).await {
        tracing::debug!(store = STORE, cause = %err, "rollback failed");
    }
}

/// Refuses a scope longer than the fence table's key.
fn check_scope<E>(ticket: &FenceTicket) -> Result<(), FenceError<E>> {
    if ticket.scope().len() > MAX_SCOPE_BYTES {
        let why =
            "the scope (lock path) is longer than MAX_SCOPE_BYTES, the MySQL fence table's key";
        return Err(FenceError::Invalid(zkfence::Error::InvalidOptions(why)));
    }
    Ok(())
}
