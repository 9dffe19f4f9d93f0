//! Fences at the storage end: the [`FenceTicket`] a hold hands out, the errors every fence
//! reports ([`FenceError`]), and the [`ZooKeeperFence`] for data kept in ZooKeeper. The
//! `zkfence-postgres` package fences PostgreSQL with the same ticket and errors.
//!
//! # What a fence does
//!
//! A fence keeps, per **scope** (a lock path), the highest token it has accepted, and refuses
//! a write whose token is lower: the late write of a holder that stalled past its lease while
//! a newer holder took over. Three rules make that safe, and every fence here follows them (the
//! conformance kit in `zkfence-testkit` holds each store to them, with a mutant per rule):
//!
//! 1. **Compare and write in one atomic step.** A check in one transaction and a write in
//!    another lets a stale write land in between: the fence is raised, compared and the data
//!    written in one ZooKeeper `multi`, or one SQL transaction that holds the fence row's lock.
//! 2. **Raise the fence before the first read** of a read-modify-write. A holder that read
//!    before raising could have read what a stale holder is about to overwrite; a fenced
//!    transaction's first statement raises the fence, so from then on every older holder is
//!    refused, and every later one waits or is refused.
//! 3. **Compare integers**, `>=` to accept (a holder writes more than once; the first write
//!    of a scope creates its fence), never strings (`"9" > "10"`) or doubles (2⁵³ + 1 reads as
//!    2⁵³).
//!
//! Just before it commits, a fence also runs the ticket's [`check`](FenceTicket::check):
//! once the hold is lost or its lease has lapsed, nothing is written
//! ([`FenceError::LockLost`]). The token does the rest for a holder that stalls between that
//! check and the commit.
//!
//! # Errors: one vocabulary for every store
//!
//! | error | what happened | what to do |
//! | --- | --- | --- |
//! | [`FenceError::Refused`] | the fence holds a newer token: a newer holder has claimed the scope; nothing was written | stop working under this hold |
//! | [`FenceError::LockLost`] | the check before commit failed; nothing was written | stop, or acquire again |
//! | [`FenceError::InDoubt`] | the commit's reply was lost: it may or may not have applied | read back before doing anything else |
//! | [`FenceError::Store`] | the store's own error (before the commit) | as for any store error |
//!
//! A refusal of a hold that is still valid cannot come from a newer holder of the same
//! ensemble (no other contender holds while our lease holds). It means the fence holds tokens of
//! another ensemble, or of this one before its data was reset (an ensemble rebuilt from empty
//! data starts its zxids, and so its tokens, over): [`FenceError::looks_reset`] says so, and
//! the message names the operator command that rebases the scope.
//!
//! # Examples
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence::fence::{FenceError, ZooKeeperFence};
//!
//! # async fn demo(client: zookeeper_client::Client) -> Result<(), Box<dyn std::error::Error>> {
//! let lock = FencedLock::new(client.clone(), "/locks/config", LockOptions::default())?;
//! let fence = ZooKeeperFence::with_fence_node(client.clone(), "/app/config-fence")?;
//! let guard = lock.acquire().await?;
//! match fence.write(&guard.ticket(), |ops| ops.add_set_data("/app/config", b"v2", None)).await {
//!     Ok(_) => println!("written"),
//!     Err(FenceError::Refused { seen, .. }) => println!("a newer holder ({seen}) took over"),
//!     Err(err) => return Err(err.into()),
//! }
//! guard.release().await?;
//! # Ok(()) }
//! ```

mod error;
mod record;
mod ticket;
mod zookeeper;

pub use self::error::FenceError;
pub use self::record::{find_cause, record, record_retry, retry_backoff};
pub use self::ticket::{FenceTicket, TicketError};
pub use self::zookeeper::ZooKeeperFence;
