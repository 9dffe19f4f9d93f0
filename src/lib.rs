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
//!    at once, even before the watchdog task has run.
//! 3. **Nothing inside a process can stop a write already in flight** when the process stalls
//!    (GC pause, SIGSTOP, swap, a slow disk) past its lease. The fencing token makes such a
//!    write harmless, *if storage checks it*: every later holder has a strictly greater
//!    [`FencingToken::as_i64`], so storage that keeps the highest token it has accepted and
//!    refuses smaller ones refuses the stale holder. [`fence`] gives storage that check: an
//!    exclusive hold's [`FenceTicket`] goes to a [`fence::ZooKeeperFence`], or to the
//!    `zkfence-postgres` package's fenced transactions (a SQL function any client can call).
//!    Guarantee 3 needs the storage's help; without it, guarantees 1 and 2 are all there is,
//!    which is also all that any other ZooKeeper lock gives.
//!
//! # The lease, in short
//!
//! The lease is how a holder knows, without asking anyone, that no other contender can hold
//! the lock yet. Only the leader expires sessions, no earlier than `T` (the negotiated session
//! timeout) after it last heard from one, so only a **committed write** proves anything: a read
//! reply does not (a follower cut off from the leader still answers reads), nor does a `sync`
//! reply (a leader answers its own clients' syncs without a quorum; zkfence's first lease rule
//! trusted them and gave two holders valid leases for 3.6–8.8 s when the leader was cut off
//! from its followers).
//! A committed write, paired with a reply of ours that came back at least a gap `G` before it
//! was sent (`G`: how long a follower may wait before relaying our activity to the leader,
//! `tickTime/2` plus slack), proves that the leader heard from the session no earlier than that
//! reply's send time, the lease's **anchor**. The lease ends at `anchor + T·(1 − drift) −
//! margin`: by default a drift of 1% and a margin of `T/20`, kept between 20 and 500 ms. The
//! watchdog keeps proofs coming with a write that changes nothing (a `multi`
//! holding one `check` of a held node), about once per `G` per session, whatever the number of
//! locks it holds.
//!
//! The argument, reply by reply with the ZooKeeper 3.8 code each step rests on, and its stated
//! assumptions (clock drift of at most 1%; leader pings reaching a follower at most `G` apart,
//! so that a leader pause longer than `G` is covered only by declaring a longer tickTime; a
//! tickTime of at most `T/2` unless declared with [`LockOptions::with_tick_time`], refused
//! with [`Error::LeaseTooShort`] when no lease fits; one session timeout negotiated by every
//! server; the client's keepalive for the first proof after the watchdog starts) are written
//! once, in the lease module (`src/watchdog/lease/mod.rs`).
//!
//! The lease model (the `zkfence-model` package, `model/` in the repository) checks the rule
//! exhaustively at small bounds, with the library's own lease code. It found one gap in the
//! rule as it was: the first proof of a session's watchdog (a first acquire, or a grant after
//! a long wait) leaned on the client's keepalive in the `G + T/5` before it, so a process
//! paused right there, past its session's expiry, got a lease up to that long after the server
//! had expired the session. The rule now leans only across a stretch that a ticker shows the
//! process ran through (any session's watchdog's, recorded process-wide), and the model pauses
//! clients anywhere. The cost falls on a process's first acquire: nothing shows that the
//! process ran before it, so it waits for a paired proof, about `G` longer, unless its session
//! was made by [`Connect`], whose creation the leader committed after the connect was sent, a
//! proof in itself. The `zkfence` command connects that way.
//!
//! The chaos suite's `chaos/run partition` runs the faults the lease must survive with
//! ZooKeeper's stock settings (tickTime 2000, syncLimit 5, T = 4 s), with the earlier sync rule
//! as a mutant that it must catch; its figures are in the chaos suite's README.
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
//! survives the wrap. Every token is in `0..=i64::MAX` (checked when it is built): store it as
//! a `BIGINT`. [`FencingToken::sequence`] is for people; storage compares
//! [`FencingToken::as_i64`].
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
//! Curator's `InterProcessMutex` on one path exclude each other (tested against Debian's
//! Curator 5.4). After a ConnectionLoss on create, our node is found by its UUID **and** our
//! session as its `ephemeralOwner`; another session's node is never taken for ours. The
//! uncontended acquire pipelines the children listing behind the create (ZooKeeper answers a
//! session's requests in order): one round trip plus one commit.
//!
//! A waiter watches only its immediate predecessor (no herd), with a child watch: an ephemeral
//! node has no children, so the watch fires only when the node is deleted, never when someone
//! writes into it. When that node goes and it was the only node ahead in the waiter's last
//! listing, the waiter holds the lock with no further request. A revocation request (the data
//! Curator's `Revoker` writes into the holder's node) wakes nobody. An exists watch, which
//! fires on data writes too, would let the waiter take such a request for a release and walk
//! in beside the holder, Curator's `Revoker` included (the `DataChangeAdmits` mutant, caught
//! by `tests/revocation.rs`).
//!
//! **The handoff.** A deletion alone does not say whether the predecessor held the lock or
//! gave up waiting, so a waiter that queued behind several nodes would have to list the queue
//! again: a read on the critical path of every handoff. Instead, a mutex or writer that waited
//! in a crowded queue (its listing showed two other nodes or more, or it waited 10 ms or longer)
//! releases with a marker: one `multi` that sets its node's data and deletes it (one
//! transaction). Two contenders passing the lock back and forth release with a plain delete:
//! each queued behind the holder alone, which needs no marker. The marker is only ever an
//! optimisation: a successor that finds none lists again.
//!
//! A successor that queued behind several nodes also sets a data watch on its predecessor, and
//! a release fires it (the data change) and then the child watch (the deletion). Only a
//! holder's release writes the marker (a waiter that gives up deletes its node plainly), and a
//! holder took the lock only once everything before it was gone; so on both events the
//! successor takes the lock with no further request, however many nodes it queued behind. A
//! data change alone (a revocation request) keeps it waiting. A reader's or a semaphore
//! holder's release proves nothing about the nodes ahead of it, and a plain deletion (a
//! Curator holder, a waiter giving up, an expired session) sends the successor to list the
//! queue again. On ZooKeeper 3.9 and later both events carry the transaction's zxid, which must
//! match. On 3.8, a write of someone else's into a *waiting* node followed by that waiter's
//! failure would pass for a release: zkfence's own requests go only to holders, so do not aim
//! Curator's `Revoker` at the waiters of a mixed fleet. A Curator waiter woken by a marked
//! release lists the queue, finds the node gone and proceeds as usual. The argument, node by
//! node, is in `src/queue/mod.rs` ("The handoff").
//!
//! **Costs.** Server writes per acquisition: 2 (the create and the release), contended or not.
//! Requests per contended acquisition: the create, the listing, the watches (a child watch on
//! the predecessor, plus a data watch on it behind several nodes or with lock-delay,
//! pipelined), and the release. A waiter watches its own node (an administrator deleting it
//! fails the acquire) only once it has waited 10 ms; a shorter wait leaves that to the holder's
//! watchdog, which arms its watch on a node held for 10 ms. Either way a deletion by someone
//! else is found within 10 ms plus a round trip, or, for a hold past the session's watch share
//! ([`HOLD_WATCH_BYTES`]), by the watchdog's read of it within a probe period; session expiry
//! needs no watch (the lease covers it). With 1,000 waiters released one after the other (`zkfence-bench --scale`), the
//! measured cost was 1.00 request per handoff.
//!
//! **Mutants of the handoff**, built with the `mutants` feature, must each produce a second
//! holder in the test suite: a waiter that marks its withdrawal
//! (`tests/lock.rs::the_marked_withdrawal_mutant_is_caught`), a successor admitted by any
//! marked release, a reader's included (`tests/kinds.rs::the_any_release_admits_mutant_is_caught`),
//! and a successor admitted by a data change alone
//! (`tests/revocation.rs::the_data_change_admits_mutant_is_caught`).
//!
//! A cancelled, timed-out or failed acquire deletes its node from a task of its own. A release
//! is one delete or one marked `multi`, awaited and retried across ConnectionLoss. Queue order
//! uses serial-number arithmetic, so it stays right across the 2³¹ sequence wrap.
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
#[cfg(feature = "conformance")]
pub mod conformance;
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
mod requests;
mod rwlock;
mod section;
mod semaphore;
mod token;
mod wait;
mod watchdog;

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
pub use crate::options::{
    LockOptions, ParentMode, MAX_LOCK_DELAY, SESSION_NODE_BYTES, WAITING_WATCH_BYTES,
};
pub use crate::rwlock::FencedRwLock;
pub use crate::semaphore::FencedSemaphore;
pub use crate::token::{FencingToken, TokenError};
pub use crate::watchdog::HOLD_WATCH_BYTES;
/// **For zkfence's models only** (`model/`): the watchdog's own lease, jeopardy and resume
/// code, driven with explicit times, and ([`model_api::queue`]) the queue's predicates and
/// handoff as values. Only built with the `model` feature.
#[cfg(feature = "model")]
#[doc(hidden)]
pub mod model_api {
    pub use crate::queue::model as queue;
    pub use crate::watchdog::model::*;
}

/// The README's Rust example, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of `docs/locks.md`, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/locks.md")]
pub struct LocksDoctests;

/// The Rust examples of `docs/fences-rust.md`, compiled by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../docs/fences-rust.md")]
pub struct FencesRustDoctests;
