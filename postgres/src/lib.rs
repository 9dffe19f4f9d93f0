//! A PostgreSQL fence for [`zkfence`]: PostgreSQL refuses the writes of a lock holder
//! that lost its lock without knowing it (a GC pause, a SIGSTOP, a partition), by the
//! [`FenceTicket`](zkfence::fence::FenceTicket)'s token, in the same transaction as the writes.
//!
//! # What it installs
//!
//! [`PostgresFence::install`] creates (idempotently) a table `zkfence_fence` (one row per
//! **scope**, a lock path: the highest token accepted) and a function
//! `zkfence_claim(scope text, token bigint) RETURNS bigint`. The function raises the scope's
//! fence to the token, or raises SQLSTATE [`REFUSED`] (`ZF001`, DETAIL: the token the fence
//! holds) when a newer holder has claimed it, and it keeps the fence row locked until the
//! transaction ends. So **any client** gets the same check from one statement: `psql` in a
//! `zkfence run` command, Java, Python, diesel. [`PostgresFence::install_sql`] prints the
//! script, for migration tools.
//!
//! # Using it
//!
//! [`PostgresFence::transaction`] is the fenced transaction: it begins, raises the fence as its
//! **first statement** (so a read-modify-write reads nothing a stale holder could still
//! overwrite), runs your closure, checks the hold, and commits; a serialization failure or
//! deadlock runs the whole closure again. [`PostgresFence::claim`] raises the fence alone.
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence_postgres::PostgresFence;
//!
//! # async fn demo(zk: zookeeper_client::Client, mut db: tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = PostgresFence::new();
//! fence.install(&db).await?;
//! let lock = FencedLock::new(zk, "/locks/accounts", LockOptions::default())?;
//! let guard = lock.acquire().await?;
//! let balance: i64 = fence
//!     .transaction(&mut db, &guard.ticket(), |tx| {
//!         Box::pin(async move {
//!             let row = tx.query_one("SELECT balance FROM accounts WHERE id = 7", &[]).await?;
//!             let balance: i64 = row.get(0);
//!             tx.execute("UPDATE accounts SET balance = $1 WHERE id = 7", &[&(balance + 10)]).await?;
//!             Ok::<_, tokio_postgres::Error>(balance + 10)
//!         })
//!     })
//!     .await?;
//! guard.release().await?;
//! # let _ = balance; Ok(()) }
//! ```
//!
//! # Isolation levels, and what not to do
//!
//! - **READ COMMITTED** (PostgreSQL's default, and this fence's): the claim's row lock orders
//!   every fenced transaction of a scope, and each later statement reads what committed before
//!   it, so a transaction sees every write a holder before it committed.
//! - **REPEATABLE READ / SERIALIZABLE** ([`PostgresFence::with_isolation`]): the snapshot is
//!   taken at the claim, before it waits for the row lock; every claim updates the fence row,
//!   so a transaction whose snapshot predates another fenced commit fails with a serialization
//!   error at its claim, and is run again with a fresh snapshot. SERIALIZABLE also catches the
//!   closure's conflicts with unfenced writers; both are retried.
//! - **Never check in one transaction and write in another** (a `SELECT` of the fence, then an
//!   `UPDATE` in a second transaction or in autocommit): a stale write lands between the two.
//!   The claim and the writes must share one transaction, and the claim comes first.
//! - Compare tokens as `bigint` (the token's [`as_i64`](zkfence::FencingToken::as_i64)),
//!   never as text or `numeric` from text.
//! - Give each scope one meaning: the lock path. Two locks sharing a scope would refuse each
//!   other's holders.
//!
//! # Errors
//!
//! [`FenceError`](zkfence::fence::FenceError): `Refused` (a newer holder claimed; with a hint when the data looks reset),
//! `LockLost` (the hold's check before commit failed: rolled back), `InDoubt` (the connection
//! broke after `COMMIT` was sent: read back), `Store` (the database's error, or your closure's).
//!
//! # A reset ensemble
//!
//! A ZooKeeper ensemble rebuilt from empty data starts its zxids over, so every new token is
//! below the fences this table keeps, and every holder is refused. The refusal says so
//! ([`FenceError::looks_reset`](zkfence::fence::FenceError::looks_reset)); once no holder of the old ensemble can write any more, the
//! operator rebases the scope: `zkfence fence rebase --scope /locks/x --to N` ([`PostgresFence::rebase`]).

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

#[cfg(feature = "conformance")]
mod conformance;
mod connected;
mod dial;
mod fence;
mod sql;

#[cfg(feature = "conformance")]
pub use crate::conformance::ConformanceStore;
pub use crate::connected::Connected;
pub use crate::fence::{sqlstate, PostgresFence, TxFuture};
pub use crate::sql::{BAD_CLAIM, REFUSED};
