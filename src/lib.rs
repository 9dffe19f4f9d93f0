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
//!    [`FencingToken::as_u64`], so storage that keeps the highest token it has accepted and
//!    refuses smaller ones (`UPDATE … SET fence = $t … WHERE fence <= $t`, a ZooKeeper multi
//!    with a version check, a conditional put) refuses the stale holder. Guarantee 3 needs
//!    the storage's help; without it, guarantees 1 and 2 are all there is.
//!
//! # The lease, and what each server reply proves
//!
//! Only the leader expires sessions, no earlier than `T` (the negotiated session timeout)
//! after it last *touched* the session (`SessionTrackerImpl`, whose `ExpiryQueue` rounds
//! `now + T` up to the next tick). It touches a session on every request the session sends it
//! directly; a follower only relays that it saw the session in its reply to the leader's
//! `PING`, every `tickTime/2`, and a request the follower *forwards* touches nothing
//! (`LeaderZooKeeperServer::submitLearnerRequest`). So, in ZooKeeper 3.8:
//!
//! - **A read reply proves nothing**: a follower cut off from the leader still answers reads.
//! - **A `sync` reply proves nothing**: a leader answers its own clients' syncs without a
//!   quorum round (its `CommitProcessor` has `matchSyncs = false`), and a leader cut off from
//!   its followers keeps answering for up to `syncLimit · tickTime`, while the followers elect
//!   a new leader that expires the session `T` after it took over. zkfence's first lease rule
//!   extended the lease on sync replies; with the leader cut off that gave two holders with
//!   valid leases for 3.6–8.8 s (tickTime 2000, syncLimit 5, T = 4 s).
//! - **A committed write `k`, sent at `s_k`, proves that no later leader can expire the session
//!   before `s_k + T`**: the write needs a quorum's acknowledgements, every later leader is
//!   established by a quorum, the two quorums share a server, and that server acknowledged
//!   `k` before it followed the later leader, which builds its session tracker (touching every
//!   session) only once established (`Leader::lead` → `startZkServer`).
//! - **The leader that committed `k` heard from the session no earlier than `s_j`, for any
//!   request `j` whose reply arrived at `r_j ≤ s_k − G`**, where `G = tickTime/2 · (1 + drift)
//!   + margin`: `j` touched our server by `r_j`; within `G` that server answered a leader
//!   `PING` with the touch; the answer travels the same ordered connection as the later
//!   forward of `k`, so the leader processed the touch before `k` (`LearnerHandler`). On the
//!   leader itself the touch is direct; after a reconnect, the new server's `REVALIDATE`
//!   touched the leader after `r_j`.
//!
//! So every committed write (our create, and the watchdog's probe: a `multi` holding one
//! `check` of a held node, which changes nothing and fires no watch) moves the lease's
//! **anchor** to the newest such `s_j`, and the lease deadline is `anchor + T·(1 − drift) −
//! margin`. Probes go out every `max(G, (budget − G)/4)`, each pairing with the reply before it:
//! at `T = 2 s` that is 1.5 committed writes per second per session, whatever the number of
//! locks it holds; at `T = 10 s`, 0.17.
//!
//! Assumptions, stated:
//! - clock rates differ by at most `drift` (1%);
//! - **timing:** a follower receives the leader's pings at most `G` apart. ZooKeeper only
//!   enforces silences up to `syncLimit · tickTime`, so a leader pause or a stalled
//!   leader-to-follower link longer than `G` can let the lease outlast the session by up to
//!   the stall; declare a tickTime of `2X` to cover pauses up to `X`;
//! - the ensemble's tickTime is at most `T/2` (ZooKeeper's default `minSessionTimeout` is
//!   `2 · tickTime`; set [`LockOptions::with_tick_time`] if yours differs, twice the tick for
//!   clients of observers behind an `ObserverMaster`; a tick too long to keep a lease is
//!   refused with [`Error::LeaseTooShort`]);
//! - every server negotiates the same session timeout (the client renegotiates on reconnect);
//! - the first lease after a session's watchdog starts has no earlier reply to pair with: it
//!   rests on `zookeeper-client` pinging an idle connection at least every `T/5` (its default
//!   connection timeout), and anchors at `s − G − T/5 − margin`.
//!
//! The chaos suite (`chaos/run partition`) attacks the partitions this must survive: the
//! leader cut off asymmetrically and symmetrically, a one-way follower-to-leader cut, a
//! minority follower, lossy leader links.
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
//! request when that predecessor was the only node ahead.
//!
//! **The handoff.** A mutex or writer that had to queue releases with a marker: one `multi`
//! that sets its node's data and deletes it (one transaction). Its successor's watch fires
//! with the data change, which only a holder's release writes (a waiter that gives up deletes
//! its node plainly), and a holder held alone: so the successor takes the lock with no
//! further request however many nodes it queued behind. A plain deletion (a Curator holder, a
//! waiter giving up, a session ending) sends the successor to list the queue again. Server
//! writes per acquisition: the create and the release, contended or not. The argument, node by
//! node, is in `src/queue/mod.rs` ("The handoff").
//!
//! One limit of mixing with Curator: Curator orders the queue by comparing sequence suffixes as
//! strings, which breaks when a parent's sequence wraps past 2³¹ (after about a billion lock
//! cycles on one persistent parent; container parents are reaped and start over). zkfence's
//! own order stays right across the wrap, but a mixed fleet on such a parent would disagree.
//!
//! # Secured ensembles: authentication, TLS, and the ACLs a lock needs
//!
//! zkfence takes the [`zookeeper_client::Client`] you built, so authentication and TLS are
//! set up on its `Connector` (TLS needs `zookeeper-client`'s `tls` feature in your
//! `Cargo.toml`; `examples/secured.rs` does both). A lock's requests need, per node:
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
//! use zookeeper_client::{Acls, Client};
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connector()
//!     .with_auth("digest", b"orders-service:s3cret")
//!     .connect("zk1:2181,zk2:2181,zk3:2181")
//!     .await?;
//! let options = LockOptions::default().with_acls(Acls::creator_all().to_vec());
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
//! - [`lock`](FencedLock): `FencedLock`, `LockOptions`: acquire, try_acquire, run; clones
//!   share an in-process queue (one ZooKeeper contender per process).
//! - [`FencedRwLock`]: readers share, writers exclude (Curator-compatible node names). A
//!   writer's token fences storage as the mutex's does; a reader's token only tells it,
//!   by comparison with the fence, whether a newer writer has been granted.
//! - [`FencedSemaphore`]: up to N holders, each with its own token and watchdog. Its tokens
//!   order the leases but do not fence storage: N holders are valid at once.
//! - [`LockGuard`] / [`Held`]: token, check, cancellation, release.
//! - [`FencingToken`]: the number storage compares.
//! - [`LossReason`]: why a lock was lost; the watchdog that detects it.
//! - [`Error`]: one error type with predicates.
//! - [`metrics`]: metric names and [`metrics::describe`].
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
mod lock;
mod loss;
pub mod metrics;
mod options;
mod queue;
mod rwlock;
mod semaphore;
mod time;
mod watchdog;
mod zk;

pub use crate::error::{Error, Result};
pub use crate::fencing::{FencingToken, ParseTokenError};
pub use crate::guard::{Held, LockGuard};
pub use crate::lock::{Contender, FencedLock};
pub use crate::loss::LossReason;
#[cfg(feature = "mutants")]
#[doc(hidden)]
pub use crate::options::HandoffMutant;
pub use crate::options::{LockOptions, ParentMode, MAX_LOCK_DELAY};
pub use crate::rwlock::FencedRwLock;
pub use crate::semaphore::FencedSemaphore;
