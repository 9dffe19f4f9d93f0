//! A MySQL/MariaDB fence for [`zkfence`]: the database refuses the writes of a lock holder
//! that lost its lock without knowing it (a GC pause, a SIGSTOP, a partition), by the
//! [`FenceTicket`](zkfence::fence::FenceTicket)'s token, in the same transaction as the writes.
//!
//! # What it installs
//!
//! [`MySqlFence::install`] creates (idempotently) a table `zkfence_fence` (one row per
//! **scope**, a lock path: the highest token accepted) and four procedures, which any client
//! calls the same way ([`MySqlFence::install_sql`] prints the script for the `mysql`/`mariadb`
//! client; `zkfence fence install mysql://…` runs it):
//!
//! - `zkfence_claim(scope, token)` creates the scope's fence row if missing, reads it **`FOR
//!   UPDATE`**, decides from the token it read, and raises it, or signals SQLSTATE [`REFUSED`]
//!   (`ZF001`, the message ending with the token the fence holds). The row stays locked until
//!   the transaction ends, so fenced transactions of a scope run one at a time. On MariaDB it
//!   also bounds how long the transaction may then sit idle
//!   ([`MySqlFence::with_idle_timeout`], 10 s by default).
//! - `zkfence_seal(scope)`, called last before `COMMIT`: checks that this transaction still
//!   holds the scope's claim, or signals [`ROLLED_BACK`] (`ZF003`).
//! - `zkfence_begin(scope, token)` and `zkfence_commit(scope)`: the same claim and seal as a
//!   transaction's first and last statements. The first turns autocommit off before it claims,
//!   the second commits after it seals and turns autocommit back on, so a fenced transaction
//!   costs the server no statement more than a plain one. [`MySqlFence::transaction`] sends
//!   these.
//!
//! # The recipe, from any client
//!
//! ```sql
//! CALL zkfence_begin('/locks/orders', '4294967339'); -- instead of START TRANSACTION
//! UPDATE orders SET state = 'paid' WHERE id = 7;
//! CALL zkfence_commit('/locks/orders');              -- instead of COMMIT
//! ```
//!
//! or, on a connection that keeps autocommit off:
//!
//! ```sql
//! SET autocommit = 0;                               -- once per connection: the claim insists
//! CALL zkfence_claim('/locks/orders', '4294967339'); -- first: the token as text, as ZKFENCE_TOKEN holds it
//! UPDATE orders SET state = 'paid' WHERE id = 7;
//! CALL zkfence_seal('/locks/orders');               -- last before COMMIT
//! COMMIT;
//! ```
//!
//! **A failed claim or seal dooms what it refused**: it rolls the transaction back and leaves
//! the session read-only before it signals, so a client that carries on after the error
//! (`mariadb --force`, an exception caught and followed by `COMMIT`) commits nothing: its next
//! write fails with SQLSTATE `25006` (read-only transaction), in this transaction or in
//! autocommit after it. To use the connection again: `ROLLBACK; SET SESSION TRANSACTION READ
//! WRITE;` (a pool that resets connections does it too). The errors, the same in every zkfence
//! SQL store:
//!
//! | SQLSTATE | meaning | what to do |
//! | --- | --- | --- |
//! | `ZF001` ([`REFUSED`]) | a newer holder claimed the scope; the message ends with its token | stop writing under this hold |
//! | `ZF002` ([`BAD_CLAIM`]) | not a claim: a null, empty or too long scope (over 1024 bytes of UTF-8), a token that is not decimal text (negative, a float's text), autocommit on, or a connection an earlier error left read-only | fix the call |
//! | `ZF003` ([`ROLLED_BACK`]) | the seal found the claim rolled back under the work (a deadlock or lock wait timeout the client did not pass on), or no claim at all | run the whole transaction again |
//!
//! **The scope is text, compared as UTF-8** (`utf8mb4`) whatever the client's character set: the
//! procedures take it as `VARCHAR … CHARACTER SET utf8mb4`, so the server converts a latin1
//! client's `'/locks/café'` before the fence compares it, and the fence table keeps its UTF-8
//! bytes (`VARBINARY`, compared byte for byte: no collation folds two lock paths into one, and
//! trailing spaces count). A scope sent as bytes (`X'…'`, `UNHEX('…')`) is taken as UTF-8.
//!
//! **The token is text**: send it quoted (`'4294967339'`), or as an integer literal. The
//! procedure reads the decimal text it receives, and the server turns an unquoted literal into
//! text first: `42.0` (a DECIMAL) arrives as `'42.0'` and is refused (`ZF002`), but `4.2e1` (a
//! DOUBLE) arrives as `'42'` and claims 42, which the procedure cannot tell from a real `42`;
//! a token that went through a float has lost digits past 2⁵³ anyway. Never send a float.
//!
//! Autocommit must be off, not merely a transaction begun with `START TRANSACTION`: a deadlock
//! ends such a transaction and the server returns to autocommit, so the statements after it
//! would commit one by one, unfenced, before any seal could stop them.
//!
//! # The traps it avoids
//!
//! - **A plain `SELECT` reads a snapshot.** Under REPEATABLE READ (InnoDB's default) a plain
//!   read of the fence sees the database as it was when the snapshot was taken, not the claim
//!   a newer holder committed since; and it locks nothing, so a newer holder can claim and
//!   commit between the check and the write. The claim is a locking read (`FOR UPDATE`), which
//!   reads the newest committed row and holds it.
//! - **Rows-affected counts changed rows.** An `UPDATE … SET token = ? WHERE token <= ?` that
//!   sets the value the row already has reports 0 rows unless the client asked for found rows
//!   (`CLIENT_FOUND_ROWS`, off in `mysql_async`, on in some other clients): a holder's second
//!   write would read as refused, or a fence that decides from the count differs by client.
//!   The claim decides from the token it read, never from a count.
//! - **After a deadlock the transaction is gone, and the connection goes on.** MySQL rolls the
//!   whole transaction back on a deadlock (and, with `innodb_rollback_on_timeout`, on a lock
//!   wait timeout); in autocommit mode the next statements then commit one by one, unfenced.
//!   A fenced transaction runs with autocommit off, so statements after such a rollback open a
//!   new transaction instead, and its `COMMIT` goes behind `zkfence_seal`, which finds the
//!   claim's mark gone and dooms it: nothing of it commits, and it runs again. (The mark is a
//!   claim id the claim writes on the fence row, which the rollback takes back, and keeps in
//!   a session variable, which no rollback touches: the two agree only in the transaction of
//!   the session's latest claim.)
//! - **An error does not end a MySQL transaction.** A signalled refusal leaves the transaction
//!   open and its earlier statements in place; a client that ignores it would commit them. The
//!   claim rolls back and makes the session read-only before it signals (so the refusal
//!   survives a client that rolls back to a savepoint it took before the claim, too).
//! - **A locking read of a missing row takes a gap lock** under REPEATABLE READ (InnoDB's
//!   default, and the `mariadb` client's): a first claim that read the missing row `FOR
//!   UPDATE` would block the first claims of every other new scope in that gap until it ends.
//!   The claim inserts a missing row first (`INSERT … ON DUPLICATE KEY UPDATE`, which locks
//!   only that record) and reads the row that then exists; two first claims at once queue on
//!   that record, and the higher token wins.
//! - **A frozen holder keeps the fence row.** A writer stopped after its claim (a GC pause,
//!   SIGSTOP, a VM that lost its host) keeps its transaction open and the row locked; its
//!   successor waits `innodb_lock_wait_timeout` (50 s) and fails, again and again, until the
//!   frozen process wakes. On MariaDB the claim lowers the session's
//!   `idle_transaction_timeout`, `idle_write_transaction_timeout` and
//!   `idle_readonly_transaction_timeout` to the installed bound (never raising a value set
//!   lower, and for the rest of the session): the server closes a connection idle that long
//!   inside a transaction, which rolls it back and frees the row. **Oracle MySQL has none of
//!   these variables**: [`MySqlFence::install`] leaves the bound out there, a frozen holder
//!   keeps the row until its connection dies, and `zkfence fence verify` says so. There, give
//!   fenced connections a short `wait_timeout` (`SET SESSION wait_timeout = 10` on connections
//!   that never idle longer between statements), or kill sessions idle in a transaction from an
//!   `EVENT` that reads `information_schema.INNODB_TRX` and `PROCESSLIST`.
//!
//! # Using it
//!
//! ```no_run
//! use mysql_async::prelude::Queryable;
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence_mysql::MySqlFence;
//!
//! # async fn demo(zk: zookeeper_client::Client, mut db: mysql_async::Conn) -> Result<(), Box<dyn std::error::Error>> {
//! let fence = MySqlFence::new();
//! fence.install(&mut db).await?;
//! let lock = FencedLock::new(zk, "/locks/accounts", LockOptions::default())?;
//! let guard = lock.acquire().await?;
//! let balance: i64 = fence
//!     .transaction(&mut db, &guard.ticket(), |conn| {
//!         Box::pin(async move {
//!             let balance: Option<i64> =
//!                 conn.query_first("SELECT balance FROM accounts WHERE id = 7").await?;
//!             let balance = balance.unwrap_or(0) + 10;
//!             conn.exec_drop("UPDATE accounts SET balance = ? WHERE id = 7", (balance,)).await?;
//!             Ok::<_, mysql_async::Error>(balance)
//!         })
//!     })
//!     .await?;
//! guard.release().await?;
//! # let _ = balance; Ok(()) }
//! ```
//!
//! # What not to do
//!
//! - **Never check in one transaction and write in another**, nor in autocommit: a stale
//!   write lands between the two. The claim and the writes share one transaction, and the
//!   claim comes first.
//! - **No statement that commits implicitly** inside the work (DDL, `LOCK TABLES`, `START
//!   TRANSACTION`): it commits the claim's transaction and releases the fence row mid-way.
//! - A fenced transaction needs a connection with no transaction open; one whose future was
//!   dropped mid-way leaves its own open: roll it back (`ROLLBACK; SET autocommit = 1`) or drop
//!   the connection (a [`mysql_async::Pool`] resets it).
//!
//! Tested against Debian's MariaDB (10.11); the SQL is MySQL 8's too.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

#[cfg(feature = "conformance")]
mod conformance;
mod connected;
mod dial;
mod fence;
#[cfg(feature = "conformance")]
mod installed;
mod sql;

#[cfg(feature = "conformance")]
pub use crate::conformance::ConformanceStore;
pub use crate::connected::Connected;
pub use crate::fence::{MySqlFence, TxFuture};
pub use crate::sql::{BAD_CLAIM, MAX_SCOPE_BYTES, REFUSED, ROLLED_BACK};
