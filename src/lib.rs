//! Fenced distributed locks on Apache ZooKeeper that stay safe when a holder stalls.
//!
//! A [`FencedLock`] is a fair FIFO lock on a ZooKeeper path. Its [`LockGuard`] carries a
//! [`FencingToken`] that strictly increases from holder to holder, and a cancellation token
//! that a per-session **lease watchdog** cancels as soon as the lock may be lost.
//!
//! # What is guaranteed, and what is not
//!
//! 1. **While a holder's lease holds, no other contender holds the lock.** ZooKeeper's
//!    ephemeral sequential queue gives mutual exclusion among live sessions.
//! 2. **A holder whose lease may have ended is told** as early as the process can observe
//!    it: its [`cancellation_token`](Held::cancellation_token) fires and
//!    [`check`](Held::check) fails, on a disconnect (by default), session expiry, client
//!    close, deletion of its lock node, or the lease deadline passing. The lease deadline is
//!    `send time of the last request that got a reply + T·(1 − drift) − margin` (`T` the
//!    negotiated session timeout, the margin `T/4` by default). Only replies that prove the
//!    leader heard us count: our create (a write) and the watchdog's probes (a `sync`, which a
//!    follower cut off from the leader cannot answer). The leader cannot expire the session
//!    before `send time + T`, so, without process pauses, the holder is told **before** the server
//!    could hand the lock to someone else. `check()` compares the deadline with the
//!    monotonic clock synchronously, so after a pause it fails at once.
//! 3. **Nothing inside a process can stop a write already in flight** when the process stalls
//!    (GC pause, SIGSTOP, swap, a slow disk) past its lease. The fencing token makes such a
//!    write harmless, *if storage checks it*: every later holder has a strictly greater
//!    [`FencingToken::as_u64`], so storage that keeps the highest token it has accepted and
//!    refuses smaller ones (`UPDATE … SET fence = $t … WHERE fence <= $t`, a ZooKeeper multi
//!    with a version check, a conditional put) refuses the stale holder. Guarantee 3 needs
//!    the storage's help; without it, guarantees 1 and 2 are all there is.
//!
//! # The fencing token
//!
//! [`FencingToken::sequence`] is the lock node's sequence number, as in
//! `_c_…-lock-0000000042`. [`FencingToken::as_u64`] is the node's creation zxid (`czxid`,
//! from the create reply): zxids order every write of the ensemble, and the sequence numbers
//! of one parent are assigned in that same order, so `as_u64()` strictly increases from
//! holder to holder for the life of the ensemble's data, including when the lock's parent is
//! deleted and recreated (the sequence restarts at 0) and past the sequence's 2³¹ wrap (it
//! goes negative). Queue order itself is computed with serial-number arithmetic, so it too
//! survives the wrap.
//!
//! The lease is measured with the monotonic clock (`CLOCK_MONOTONIC`), which keeps running
//! while a process is stopped but not while the whole machine is suspended; a suspended VM or
//! laptop is a case only the fencing token covers.
//!
//! # Protocol and interoperability
//!
//! Nodes are named `_c_<uuid>-lock-<seq>` (Apache Curator's protected mode), so zkfence and
//! Curator's `InterProcessMutex` on one path exclude each other. After a ConnectionLoss on
//! create, our node is found by its UUID **and** our session as its `ephemeralOwner`. The
//! uncontended acquire pipelines the children listing behind the create (one round trip plus
//! one commit); a waiter watches only its predecessor, and takes the lock with no further
//! request when that predecessor was the only node ahead. Release is one awaited delete.
//!
//! One limit of mixing with Curator: Curator orders the queue by comparing sequence suffixes as
//! strings, which breaks when a parent's sequence wraps past 2³¹ (after about a billion lock
//! cycles on one persistent parent; container parents are reaped and start over). zkfence's
//! own order stays right across the wrap, but a mixed fleet on such a parent would disagree.
//!
//! # Layout
//!
//! - [`lock`](FencedLock): `FencedLock`, `LockOptions`: acquire, try_acquire, run; clones
//!   share an in-process queue (one ZooKeeper contender per process).
//! - [`FencedRwLock`]: readers share, writers exclude (Curator-compatible node names).
//! - [`FencedSemaphore`]: up to N holders, each with its own token and watchdog.
//! - [`LockGuard`] / [`Held`]: token, check, cancellation, release.
//! - [`FencingToken`]: the number storage compares.
//! - [`LossReason`]: why a lock was lost; the watchdog that detects it.
//! - [`Error`]: one error type with predicates.
//! - [`metrics`]: metric names and [`metrics::describe`].
//! - [`local`]: a throwaway local ZooKeeper (Debian's package) for demos and tests.
//!
//! # Examples
//!
//! ```no_run
//! use zkfence::{FencedLock, LockOptions};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
//! let lock = FencedLock::new(client, "/locks/orders", LockOptions::default())?;
//!
//! // Explicit guard:
//! let guard = lock.acquire().await?;
//! guard.check()?; // fail fast before the side effect
//! let fence = guard.token().as_u64() as i64;
//! // sqlx::query("UPDATE orders SET total = $1, fence = $2 WHERE id = $3 AND fence <= $2")
//! //     .bind(total).bind(fence).bind(id).execute(&pool).await?;  -- 0 rows: a newer holder exists
//! # let _ = fence;
//! guard.release().await?;
//!
//! // Or a cancellable critical section, dropped the moment the lock is lost:
//! let fence = lock
//!     .run(|held| async move {
//!         held.check()?;
//!         Ok::<_, zkfence::Error>(held.token().as_u64())
//!     })
//!     .await?;
//! # let _ = fence;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod error;
mod fencing;
mod guard;
mod lease;
pub mod local;
mod lock;
pub mod metrics;
mod recipe;
mod rwlock;
mod semaphore;
mod watchdog;

pub use crate::error::{Error, Result};
pub use crate::fencing::{FencingToken, ParseTokenError};
pub use crate::guard::{Held, LockGuard};
pub use crate::lock::{Contender, FencedLock, LockOptions, ParentMode, MAX_LOCK_DELAY};
pub use crate::rwlock::FencedRwLock;
pub use crate::semaphore::FencedSemaphore;
pub use crate::watchdog::LossReason;
