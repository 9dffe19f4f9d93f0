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
//!    close, deletion of its lock node, or the lease deadline passing. Without process pauses,
//!    and under the assumptions of the next section, the lease ends **before** any server
//!    could expire the session and hand the lock to someone else, also when the ensemble itself
//!    is partitioned. `check()`
//!    compares the deadline with the monotonic clock synchronously, so after a pause it fails
//!    at once.
//! 3. **Nothing inside a process can stop a write already in flight** when the process stalls
//!    (GC pause, SIGSTOP, swap, a slow disk) past its lease. The fencing token makes such a
//!    write harmless, *if storage checks it*: every later holder has a strictly greater
//!    [`FencingToken::as_i64`], so storage that keeps the highest token it has accepted and
//!    refuses smaller ones refuses the stale holder. [`fence`] gives storage that check: an
//!    exclusive hold's [`FenceTicket`] goes to a [`fence::ZooKeeperFence`], or to the
//!    `zkfence-postgres` package's fenced transactions (a SQL function any client can call).
//!    Guarantee 3 needs the storage's help; without it, guarantees 1 and 2 are all there is.
//!
//! # The lease, in short
//!
//! The lease is how a holder knows, without asking anyone, that no other contender can hold
//! the lock yet. Only the leader expires sessions, no earlier than `T` (the negotiated session
//! timeout) after it last heard from one, so only a **committed write** proves anything: a read
//! reply does not (a follower cut off from the leader still answers reads), nor does a `sync`
//! reply (a leader answers its own clients' syncs without a quorum; zkfence's first lease rule
//! trusted them and gave two holders valid leases for seconds when the leader was cut off).
//! A committed write, paired with a reply of ours that came back at least a gap `G` before it
//! was sent (`G`: how long a follower may wait before relaying our activity to the leader,
//! `tickTime/2` plus slack), proves that the leader heard from the session no earlier than that
//! reply's send time, the lease's **anchor**. The lease ends at `anchor + T·(1 − drift) −
//! margin`. The watchdog keeps proofs coming with a write that changes nothing (a `multi`
//! holding one `check` of a held node), about once per `G` per session, whatever the number of
//! locks it holds.
//!
//! The argument, reply by reply with the ZooKeeper 3.8 code each step rests on, and its stated
//! assumptions (clock drift of at most 1%; leader pings reaching a follower at most `G` apart;
//! a tickTime of at most `T/2` unless declared with [`LockOptions::with_tick_time`], refused
//! with [`Error::LeaseTooShort`] when no lease fits; one session timeout negotiated by every
//! server; the client's keepalive for the first proof after the watchdog starts) are written
//! once, in the lease module (`src/watchdog/lease.rs`). The chaos suite (`chaos/run
//! partition`) attacks it with the partitions it must survive.
//!
//! # The fencing token
//!
//! [`FencingToken::sequence`] is the lock node's sequence number, as in
//! `_c_…-lock-0000000042`. [`FencingToken::as_i64`] is the node's creation zxid (`czxid`,
//! from the create reply): zxids order every write of the ensemble, and the sequence numbers
//! of one parent are assigned in that same order, so `as_i64()` strictly increases from
//! holder to holder for the life of the ensemble's data, including when the lock's parent is
//! deleted and recreated (the sequence restarts at 0) and past the sequence's 2³¹ wrap (it
//! goes negative). Queue order itself is computed with serial-number arithmetic, so it too
//! survives the wrap.
//!
//! The lease is measured on a clock that counts a suspend of the machine (`CLOCK_BOOTTIME`'s
//! lead over `CLOCK_MONOTONIC`), so a laptop or host that sleeps through its lease wakes up
//! with `check()` failing; a paused VM, whose clocks all stop, is a case only the fencing
//! token covers.
//!
//! # Riding out failovers: jeopardy and a grace period
//!
//! With [`LockOptions::with_grace`], a lease that lapses with no evidence of loss (a leader
//! failover, a rolling restart, an fsync stall) puts the hold in **jeopardy** rather than
//! ending it, as Chubby's grace period does: [`Held::check`] fails with [`Error::Jeopardy`],
//! [`Held::jeopardy`] reads `true`, a [`Acquire::run`] section is not polled, and the
//! cancellation token waits. A committed probe that finds the guard's node again resumes it
//! ([`Held::steady`]); the grace running out ends it. The argument is in the lease module.
//! Work that only watches the cancellation token must not use a grace.
//!
//! # Reentrancy, revocation and several locks at once
//!
//! - [`LockOptions::with_reentrant`]: the task that holds a lock gets another guard with the
//!   same token when it acquires it again, with no request; the node goes with the last
//!   guard. Without it, such an acquire fails at once with [`Error::WouldDeadlock`], never a
//!   hang. A writer may take the read lock (a downgrade); a reader never gets the write lock.
//! - Revocation, Apache Curator's protocol: [`FencedLock::request_revocation`] asks a holder
//!   to let go, [`Held::revocation_requested`] tells it (Curator's `Revoker` reaches it too),
//!   [`FencedLock::force_revocation`] takes the lock.
//! - [`FencedMultiLock`]: several locks taken in one canonical order, all or nothing, a token
//!   per path.
//!
//! ```no_run
//! # use zkfence::Acquire;
//! use zkfence::{FencedLock, FencedMultiLock, LockOptions};
//!
//! # async fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
//! let lock = FencedLock::new(client.clone(), "/locks/a", LockOptions::default().with_reentrant(true))?;
//! let outer = lock.acquire().await?;
//! let inner = lock.acquire().await?; // same task: same token, nothing sent
//! assert_eq!(inner.token(), outer.token());
//! drop(inner);
//! tokio::select! {
//!     _ = outer.revocation_requested() => {} // someone asked us to let go
//!     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
//! }
//! outer.release().await?;
//!
//! let pair = FencedMultiLock::new(client, ["/locks/b", "/locks/a"], LockOptions::default())?;
//! let both = pair.acquire().await?; // /locks/a first, whatever the order given
//! println!("{:?}", both.tokens());  // in the order given: /locks/b's, then /locks/a's
//! both.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Leader election
//!
//! [`FencedElection`] puts its candidates in the same fair queue, named as Curator's
//! `LeaderLatch` names its participants (a mixed fleet has one leader at a time). The leader is
//! the head; its [`epoch`](Leadership::epoch) is its node's fencing token, so storage fences a
//! deposed leader exactly as it fences a lock's stale holder. [`FencedElection::lead`] is the
//! singleton worker's loop: campaign, run the work while leading (dropped the moment
//! leadership is lost), resign, campaign again, on a new session after an expiry.
//!
//! ```no_run
//! # async fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
//! let election = zkfence::FencedElection::new(client, "/elections/compactor", zkfence::LockOptions::default())?;
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! election
//!     .lead("host-a", shutdown, |leadership| async move {
//!         leadership.proclaim("host-a: compacting").await?;
//!         leadership.check()?; // then write through a fence with leadership.ticket()
//!         Ok::<(), zkfence::Error>(())
//!     })
//!     .await
//! # }
//! ```
//!
//! # Protocol and interoperability
//!
//! Nodes are named `_c_<uuid>-lock-<seq>` (Apache Curator's protected mode), so zkfence and
//! Curator's `InterProcessMutex` on one path exclude each other. After a ConnectionLoss on
//! create, our node is found by its UUID **and** our session as its `ephemeralOwner`. The
//! uncontended acquire pipelines the children listing behind the create (one round trip plus
//! one commit); a waiter watches only its predecessor, with a child watch (it fires on the
//! node's deletion, never on a write into it such as a revocation request), and takes the lock
//! with no further request when that predecessor was the only node ahead.
//!
//! **The handoff.** A mutex or writer that had to queue releases with a marker: one `multi`
//! that sets its node's data and deletes it (one transaction). A successor that queued behind
//! several nodes also watches its predecessor's data, and sees the data change and then the
//! deletion, which only a holder's release writes together (a waiter that gives up deletes its
//! node plainly), and a holder held alone: so the successor takes the lock with no further
//! request however many nodes it queued behind. A plain deletion (a Curator holder, a waiter
//! giving up, a session ending) sends the successor to list the queue again. Server writes per
//! acquisition: the create and the release, contended or not. The argument, node by node, is
//! in `src/queue/mod.rs` ("The handoff").
//!
//! One limit of mixing with Curator: Curator orders the queue by comparing sequence suffixes as
//! strings, which breaks when a parent's sequence wraps past 2³¹ (after about a billion lock
//! cycles on one persistent parent; container parents are reaped and start over). zkfence's
//! own order stays right across the wrap, but a mixed fleet on such a parent would disagree.
//!
//! # Secured ensembles: authentication, TLS, and the ACLs a lock needs
//!
//! zkfence takes the [`zookeeper_client::Client`] you built, so authentication and TLS are
//! set up where it is connected: on [`Connect`] (TLS with zkfence's `tls` feature, SASL with its
//! `sasl` feature), or on `zookeeper-client`'s `Connector` (TLS with its `tls` feature;
//! `examples/secured.rs` does both there). A lock's requests need, per node:
//!
//! | node | permissions | for |
//! | --- | --- | --- |
//! | the lock path (the parent) | CREATE, DELETE, READ | our node's create and delete; the listing |
//! | each ancestor we create under | CREATE | `with_create_parents(true)` only |
//! | our own node | READ, WRITE | the watchdog's probe is a `check` (READ); the release marker is a `setData` (without WRITE a release is a plain delete: successors list the queue again, and with lock-delay they are delayed as after a failure) |
//! | other contenders' nodes | none | waiting uses `exists` watches, which ZooKeeper does not check |
//! | a semaphore's node | READ; WRITE for `set_permits` | the permit count |
//!
//! The nodes zkfence creates (its own, and missing parents) get [`LockOptions::with_acls`].
//! When every contender authenticates as one identity, `Acls::creator_all()` keeps everyone
//! else out. With several identities, create the lock path beforehand with an ACL that grants
//! each of them CREATE, DELETE and READ, and keep `creator_all` for the lock nodes.
//!
//! ```no_run
//! use zkfence::{FencedLock, LockOptions};
//! use zookeeper_client::Acls;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = zkfence::Connect::new("zk1:2181,zk2:2181,zk3:2181")
//!     .with_auth("digest", b"orders-service:s3cret")
//!     .connect()
//!     .await?;
//! let options = LockOptions::default().with_acls(&Acls::creator_all());
//! let lock = FencedLock::new(client, "/locks/orders", options)?;
//! # let _ = lock;
//! # Ok(()) }
//! ```
//!
//! A refused request surfaces as [`Error::AccessDenied`] naming the node and the operation;
//! nothing is left behind (a node we could create but not delete stays only until our session
//! ends).
//!
//! # Layout
//!
//! - [`Connect`]: connects a new session whose creation anchors its first lease (its first
//!   acquire is granted at once).
//! - [`Acquire`]: acquire, try_acquire, acquire_timeout, run, run_timeout, written once for
//!   every lock kind (`use zkfence::Acquire;` to call them).
//! - [`FencedLock`]: the mutex; contenders, holders, revocation; clones share an in-process
//!   queue (one ZooKeeper contender per process).
//! - [`LockOptions`]: node data, ACLs, parents, the disconnect policy, the lease's margin,
//!   drift and tickTime, lock-delay, the metrics label.
//! - [`FencedRwLock`]: readers share, writers exclude (Curator-compatible node names). A
//!   writer's token fences storage as the mutex's does; a reader's token only tells it,
//!   by comparison with the fence, whether a newer writer has been granted.
//! - [`FencedSemaphore`]: up to N holders, each with its own token and watchdog. Its tokens
//!   order the leases but do not fence storage: N holders are valid at once.
//! - [`FencedMultiLock`], [`MultiGuard`], [`MultiHeld`]: several locks at once.
//! - [`FencedElection`], [`Leadership`], [`Leader`], [`Observer`]: leader election on the same
//!   queue; the leader's epoch is its token (see below).
//! - [`LockGuard`] / [`Held`]: token, check, cancellation, jeopardy, revocation, release.
//! - [`FencingToken`]: the number storage compares; [`Exclusive`] and [`Shared`], the modes
//!   that say whether a hold's token may fence storage.
//! - [`fence`]: [`FenceTicket`] (what a fence needs from a hold, and its text form),
//!   [`fence::FenceError`], [`fence::ZooKeeperFence`]; `zkfence-postgres` fences PostgreSQL.
//! - [`LossReason`]: why a lock was lost; the watchdog that detects it.
//! - [`Error`]: one error type with predicates.
//! - [`metrics`]: metric names and [`metrics::describe`].
//!
//! # Examples
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
//! let lock = FencedLock::new(client, "/locks/orders", LockOptions::default())?;
//!
//! // Explicit guard:
//! let guard = lock.acquire().await?;
//! guard.check()?; // fail fast before the side effect
//! let ticket = guard.ticket(); // scope, token and the hold's check, for a fence
//! // zkfence_postgres::PostgresFence::new().transaction(&mut db, &ticket, |tx| ...).await?;
//! # let _ = ticket;
//! guard.release().await?;
//!
//! // Or a cancellable critical section, dropped the moment the lock is lost:
//! let fence = lock
//!     .run(|held| async move {
//!         held.check()?;
//!         Ok::<_, zkfence::Error>(held.token().as_i64())
//!     })
//!     .await?;
//! # let _ = fence;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod acquire;
mod connect;
mod election;
mod error;
pub mod fence;
mod guard;
mod lock;
mod loss;
pub mod metrics;
mod mode;
mod multi;
mod mutants;
mod options;
mod queue;
mod reentrancy;
mod rwlock;
mod section;
mod semaphore;
mod token;
mod wait;
mod watchdog;
mod zk;

pub use crate::acquire::Acquire;
pub use crate::connect::Connect;
pub use crate::election::{FencedElection, Leader, Leadership, Observer, Reconnect};
pub use crate::error::{Error, Result};
pub use crate::fence::FenceTicket;
pub use crate::guard::{Held, LockGuard};
pub use crate::lock::{Contender, FencedLock};
pub use crate::loss::LossReason;
pub use crate::mode::{Exclusive, Mode, Shared};
pub use crate::multi::{FencedMultiLock, MultiGuard, MultiHeld};
#[cfg(feature = "mutants")]
#[doc(hidden)]
pub use crate::mutants::{FenceMutant, Mutant};
pub use crate::options::{LockOptions, ParentMode, MAX_LOCK_DELAY, SESSION_NODE_BYTES};
pub use crate::rwlock::FencedRwLock;
pub use crate::semaphore::FencedSemaphore;
pub use crate::token::{FencingToken, TokenError};
/// **For zkfence's lease model only** (`model/`): the watchdog's own lease, jeopardy and
/// resume code, driven with explicit times. Only built with the `model` feature.
#[cfg(feature = "model")]
#[doc(hidden)]
pub use crate::watchdog::model as model_api;
