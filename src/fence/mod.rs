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

/// The error code of a refusal in every store's own terms: the SQLSTATE of PostgreSQL's and
/// MySQL's claim, the code of a Redis error reply. A newer holder has claimed the scope; nothing
/// of the refused transaction or script is written.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::fence::REFUSED, "ZF001");
/// ```
pub const REFUSED: &str = "ZF001";

/// The error code of a claim that cannot be made as asked, in every store: a token that is not
/// a decimal integer from 0 to `i64::MAX`, an empty scope, a fence key that holds no token, a
/// MySQL connection in autocommit mode or left read-only by an earlier refusal.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::fence::BAD_CLAIM, "ZF002");
/// ```
pub const BAD_CLAIM: &str = "ZF002";

/// The error code of a fenced transaction found rolled back under its work when it was about
/// to commit (MySQL's `zkfence_seal`: a deadlock or lock wait timeout rolled the claim back, and
/// the statements since ran unfenced): nothing of it commits.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::fence::ROLLED_BACK, "ZF003");
/// ```
pub const ROLLED_BACK: &str = "ZF003";

/// A ZooKeeper fence node's data, for a client in another language (`zkfence fence script
/// zk://` prints it).
///
/// # Examples
///
/// ```
/// assert!(zkfence::fence::ZOOKEEPER_FORMAT.contains("multi"));
/// ```
pub const ZOOKEEPER_FORMAT: &str = "\
zkfence ZooKeeper fence node: its data is

  <token>\n<scope>

the highest fencing token accepted (decimal) and the lock path it fences. A fenced write is one
multi: check the holder's lock node (it still exists), check the fence node's version (as read
with its token, which must be at most yours), set the fence node to your token (when higher),
then your operations. A multi that fails its checks wrote nothing: read the fence node again
and compare. Never delete a fence node (a recreated node starts its version over): lower it
with `zkfence fence rebase zk://hosts/fence-node --scope S --to T`.
";

mod connected;
mod contract;
mod driver;
mod error;
mod ticket;
mod url;
mod zookeeper;

/// Each store's fence protocol for clients in other languages: the statement, script or
/// header to send, the token forms accepted, the error a refusal raises, and the traps (the
/// repository's `docs/fences.md`, included here).
pub mod protocol {
    #![doc = include_str!("../../docs/fences.md")]
}

pub use self::contract::{BoxError, BoxFuture, ConfigError, Fence, FenceState};
pub use self::error::FenceError;
pub use self::ticket::{FenceTicket, TicketError};
pub use self::zookeeper::ZooKeeperFence;

/// The plumbing zkfence's fence packages share: the retry loop of a fenced operation
/// ([`drive_on`](author::drive_on), [`drive_once`](author::drive_once), a try failing with a
/// [`TryFailure`](author::TryFailure)),
/// its metrics ([`record`](author::record), [`record_retry`](author::record_retry)), the
/// backoff, the cause of an error, the TLS parameters of a store's URL, and the fence contract
/// on a store's fence and its connection ([`connected_fence!`](author::connected_fence)).
///
/// **Not API-stable**: it changes with the fence packages, in any release, as object_store's
/// `integration` module does. A fence of your own may use it with zkfence pinned to one
/// version; a service using the fences never needs it.
///
/// # Examples
///
/// ```
/// let pause = zkfence::fence::author::retry_backoff(1);
/// assert!(pause > std::time::Duration::ZERO);
/// ```
pub mod author {
    #[doc(inline)]
    pub use crate::__zkfence_connected_fence as connected_fence;
    pub use crate::fence::driver::{
        drive_on, drive_once, find_cause, record, record_retry, retry_backoff, TryFailure,
    };
    pub use crate::fence::url::{
        read_client_identity, read_url_file, take_url_parameters, SplitUrl,
    };
}
