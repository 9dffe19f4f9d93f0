//! [`LockGuard`], the proof of hold a lock, and [`Held`], the handle a critical section
//! gets from [`Acquire::run`](crate::Acquire::run); and the hold they share: one
//! acquisition's node, token, watchdog registration and release, which ends with the last of
//! its guards (more than one with reentrancy).

use std::marker::PhantomData;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::loss::LossReason;
use crate::metrics::{HELD_LOCKS, HOLD_DURATION_SECONDS, RELEASE_ERRORS_TOTAL};
use crate::mode::{Exclusive, Mode};
use crate::options::LockOptions;
use crate::queue::kind::Kind;
use crate::queue::{Grant, Release};
use crate::reentrancy::{HasOwner, HoldTable, Key, Owner};
use crate::requests::nodes::Deleted;
use crate::token::FencingToken;
use crate::watchdog::{CheckError, Event, GuardState, HoldTerms, LazyCancel, WatchdogRef};

/// One acquisition: what its guards and their [`Held`] handles share.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The node's path on the server, the client's chroot included (as the session's watchdog
    /// watches it); its path under the chroot, a child of the lock path, starts at `at`.
    node: Arc<str>,
    at: usize,
    token: FencingToken,
    state: Arc<GuardState>,
    /// Our registration with the session's watchdog.
    id: u64,
    acquired_at: Instant,
    /// Which lock it is (the session it is held on, and the lock path), and who owns it, for
    /// reentrancy.
    key: Key,
    kind: Kind,
    owner: Mutex<Owner>,
    /// Its guards, and what the last of them ends it with.
    guards: Mutex<Guards>,
    /// The first guard's own cancellation (a nested guard's is an allocation of its own), its
    /// token made only when asked for.
    first: LazyCancel,
}

/// The live guards of a hold, and what the last one takes with it.
#[derive(Debug)]
struct Guards {
    count: usize,
    /// Keeps the session's watchdog running while the hold lasts.
    watchdog_ref: Option<WatchdogRef>,
    /// Deletes the node (and gives up the in-process turn).
    release: Option<Release>,
}

/// The holdings of this process and who owns each, for reentrancy (see
/// [`crate::reentrancy`]).
static HOLDS: LazyLock<HoldTable<Hold>> = LazyLock::new(HoldTable::default);

impl HasOwner for Hold {
    fn owner(&self) -> Owner {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Hold {
    fn guards(&self) -> std::sync::MutexGuard<'_, Guards> {
        self.guards.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The holdings on `key` that `owner` owns, with their kinds.
pub(crate) fn owned_by(key: &Key, owner: Owner) -> Vec<(Kind, Arc<Hold>)> {
    HOLDS.owned_by(key, owner)
}

/// A cheap, cloneable view of a held lock: its token, its node, its cancellation and the
/// synchronous [`check`](Held::check). [`LockGuard`] dereferences to it, and
/// [`Acquire::run`](crate::Acquire::run) hands one to the critical section.
///
/// A `Held` does not keep the lock: the lock is released when its [`LockGuard`] is. `M` is the
/// hold's [`Mode`]: an [`Exclusive`] hold (the default) also hands out the
/// [`ticket`](Held::ticket) that fences storage; a [`Shared`](crate::Shared) one (a read lock,
/// a semaphore lease) does not.
///
/// # Examples
///
/// ```no_run
/// # use zkfence::Acquire;
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// let guard = lock.acquire().await?;
/// let held: zkfence::Held = guard.held();
/// tokio::spawn(async move {
///     held.check()?; // fails once the lock is lost or its lease has lapsed
///     println!("writing with token {}", held.token().as_i64());
///     Ok::<_, zkfence::Error>(())
/// });
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct Held<M: Mode = Exclusive> {
    hold: Arc<Hold>,
    /// This guard's cancellation, when it is a nested guard's (the first guard's is in the
    /// hold): a child of the hold's, also cancelled when this guard ends while others
    /// hold on.
    own: Option<Arc<LazyCancel>>,
    mode: PhantomData<fn() -> M>,
}

impl<M: Mode> Clone for Held<M> {
    fn clone(&self) -> Self {
        Held {
            hold: self.hold.clone(),
            own: self.own.clone(),
            mode: PhantomData,
        }
    }
}

impl<M: Mode> std::fmt::Debug for Held<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("lock_path", &self.lock_path())
            .field("node", &self.node_path())
            .field("token", &self.hold.token)
            .field("mode", &std::any::type_name::<M>())
            .finish_non_exhaustive()
    }
}

impl<M: Mode> Held<M> {
    /// The fencing token of this acquisition. Storage compares [`FencingToken::as_i64`]; give an
    /// exclusive hold's [`ticket`](Held::ticket) to a fence in [`crate::fence`], which does so.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// println!("token {} (sequence {})", guard.token().as_i64(), guard.token().sequence());
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> FencingToken {
        self.hold.token
    }

    /// Full path of our lock znode, e.g. `/locks/orders/_c_…-lock-0000000042`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert!(guard.node_path().starts_with("/locks/orders/_c_"));
    /// # Ok(()) }
    /// ```
    pub fn node_path(&self) -> &str {
        &self.hold.node[self.hold.at..]
    }

    /// The lock path this guard holds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// assert_eq!(guard.lock_path(), "/locks/orders");
    /// # Ok(()) }
    /// ```
    pub fn lock_path(&self) -> &str {
        let node = self.node_path();
        node.rsplit_once('/').map_or(node, |(parent, _)| parent)
    }

    /// The ZooKeeper session hold the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// println!("held by session {}", guard.session_id());
    /// # Ok(()) }
    /// ```
    pub fn session_id(&self) -> zk::SessionId {
        self.hold.key.session()
    }

    /// Cancelled when the lock is lost (see [`LossReason`]) or released. Select on it, or
    /// hand a [`child_token`](CancellationToken::child_token) to the work done under the lock.
    /// The first call makes it (a hold never asked for one keeps none); every call, from any
    /// clone of the handle, returns the same token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let cancel = guard.cancellation_token();
    /// tokio::select! {
    ///     _ = cancel.cancelled() => eprintln!("lock lost: {:?}", guard.check()),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => println!("work done"),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        let hold = &self.hold.state;
        self.own().token(|| hold.token().child_token())
    }

    /// Waits until the lock is lost or released, and says why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits on the cancellation token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let reason = guard.lost().await;
    /// eprintln!("stopped hold the lock: {reason}");
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LossReason {
        self.cancellation_token().cancelled().await;
        self.hold.state.reason().unwrap_or(LossReason::Released)
    }

    /// Fails fast, without any I/O, once the lock is lost, released, **or** the lease deadline
    /// has passed by the lease clock, even if the watchdog has not run yet (after a process
    /// pause, say). Call it right before each side effect.
    ///
    /// A passing check is not a promise about the future: a write sent after it may still
    /// arrive late at storage, which is why storage must also compare the fencing token.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] with the reason; [`Error::Jeopardy`] while the hold is in jeopardy
    /// (only with [`LockOptions::with_grace`](crate::LockOptions::with_grace)): not lost, but
    /// not to be acted on until [`steady`](Held::steady) returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// guard.check()?;
    /// // ... one side effect, through a fence with guard.ticket() ...
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.check_hold().map_err(Error::from)
    }

    /// Whether the hold is in jeopardy, as a watch: `true` while its lease has lapsed with no
    /// evidence of loss and a grace period runs (see
    /// [`LockOptions::with_grace`](crate::LockOptions::with_grace)); always `false` without a
    /// grace. A lapse is noticed by the watchdog's timer or by the next
    /// [`check`](Held::check), whichever comes first.
    ///
    /// The receiver's first `changed()` resolves at once, with the state as it is then, so a
    /// loop over `changed()` also sees a jeopardy that began before this call (between the
    /// acquire and the loop, say), not only the changes after it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let mut jeopardy = guard.jeopardy();
    /// // The first round prints the state now; each later one, a change.
    /// while jeopardy.changed().await.is_ok() {
    ///     println!("in jeopardy: {}", *jeopardy.borrow_and_update());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn jeopardy(&self) -> tokio::sync::watch::Receiver<bool> {
        self.hold.state.jeopardy()
    }

    /// Waits until the hold is steady: returns at once if [`check`](Held::check) passes;
    /// while in jeopardy, waits until a committed probe finds the node again and the lease
    /// holds; returns the loss if the hold ends first (the grace ran out, the session
    /// expired, the node was deleted, or it was released).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the guard's state.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// loop {
    ///     match guard.check() {
    ///         Ok(()) => break,
    ///         Err(zkfence::Error::Jeopardy) => guard.steady().await?,
    ///         Err(err) => return Err(err),
    ///     }
    /// }
    /// // ... a side effect, through a fence with guard.ticket() ...
    /// # Ok(()) }
    /// ```
    pub async fn steady(&self) -> Result<()> {
        let mut jeopardy = self.hold.state.jeopardy();
        let own = self.cancellation_token();
        loop {
            match self.check_hold() {
                Ok(()) => return Ok(()),
                Err(CheckError::Jeopardy) => {}
                Err(lost) => return Err(lost.into()),
            }
            tokio::select! {
                _ = jeopardy.changed() => {}
                _ = own.cancelled() => {}
            }
        }
    }

    /// Resolves when someone asks this holder to let go: a revocation request, which Apache
    /// Curator's `Revoker.attemptRevoke` and [`FencedLock::request_revocation`] write into the
    /// lock node. It costs nothing while held: the watchdog's watch on the node, there anyway,
    /// carries it (on a session hold past its watch share, [`HOLD_WATCH_BYTES`], the
    /// watchdog's read of the node once a probe period). It only asks: the lock stays held
    /// until released. It stays pending while no
    /// revocation is asked, also after the hold ends; select on it with [`lost`](Held::lost).
    ///
    /// [`FencedLock::request_revocation`]: crate::FencedLock::request_revocation
    /// [`HOLD_WATCH_BYTES`]: crate::HOLD_WATCH_BYTES
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the guard's state.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// tokio::select! {
    ///     _ = guard.revocation_requested() => println!("asked to let go: finishing early"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revocation_requested(&self) {
        self.hold.state.revocation().await
    }

    /// Whether someone has asked this holder to let go (see
    /// [`revocation_requested`](Held::revocation_requested)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// if guard.is_revocation_requested() {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_revocation_requested(&self) -> bool {
        self.hold.state.is_revocation_requested()
    }

    /// This guard's cancellation.
    fn own(&self) -> &LazyCancel {
        self.own.as_deref().unwrap_or(&self.hold.first)
    }

    /// The synchronous check: this guard ended (released, while others hold on), or the
    /// hold's own state.
    pub(crate) fn check_hold(&self) -> std::result::Result<(), CheckError> {
        let state = &self.hold.state;
        if self.own().is_cancelled() && state.reason().is_none() {
            return Err(CheckError::Lost(LossReason::Released));
        }
        state.check()
    }

    /// The current lease deadline: the lock is considered lost from this instant on unless a
    /// reply from ZooKeeper moves it. It moves forward while the session is healthy. Useful
    /// in logs and to give storage-side leases a TTL that ends no later than ours.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let left = guard.lease_deadline().saturating_duration_since(tokio::time::Instant::now());
    /// println!("lease holds for at least {left:?} more");
    /// # Ok(()) }
    /// ```
    pub fn lease_deadline(&self) -> Instant {
        self.hold.state.deadline()
    }

    /// How long this lock has been held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// println!("held for {:?}", guard.held_for());
    /// # Ok(()) }
    /// ```
    pub fn held_for(&self) -> Duration {
        self.hold.acquired_at.elapsed()
    }
}

/// Proof that this process holds a lock, with the acquisition's [`FencingToken`]: a
/// [`FencedLock`](crate::FencedLock)'s or a write lock's (`LockGuard`, that is
/// `LockGuard<Exclusive>`), or a read lock's or a semaphore lease's (`LockGuard<Shared>`: see
/// [`Mode`]).
///
/// The guard is owned (`'static`), `Send + Sync`, and may be moved to and released from any
/// task or thread. Release it with [`release`](LockGuard::release), which deletes the lock
/// node and reports errors. Dropping it cancels its token at once and deletes the node in the
/// background (on the Tokio runtime current at drop, if any; otherwise the node goes when the
/// session ends).
///
/// The guard dereferences to [`Held`] for [`token`](Held::token), [`check`](Held::check),
/// [`cancellation_token`](Held::cancellation_token), [`lost`](Held::lost) and
/// [`lease_deadline`](Held::lease_deadline).
///
/// # Examples
///
/// ```no_run
/// # use zkfence::Acquire;
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// let guard = lock.acquire().await?;
/// let token = guard.token();
/// std::thread::spawn(move || {
///     let rt = tokio::runtime::Runtime::new().unwrap();
///     rt.block_on(guard.release()) // released from another thread
/// })
/// .join()
/// .unwrap()?;
/// println!("held with {token}");
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard<M: Mode = Exclusive> {
    held: Held<M>,
    /// Whether this guard has ended (released).
    ended: bool,
    /// A downgrade's share of the write lock it was taken under, kept while writers queued
    /// behind that write lock before the read lock (see `FencedRwLock`'s "Downgrade").
    pinned: Option<Box<LockGuard<Exclusive>>>,
}

impl<M: Mode> std::fmt::Debug for LockGuard<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("held", &self.held)
            .field("ended", &self.ended)
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl<M: Mode> std::ops::Deref for LockGuard<M> {
    type Target = Held<M>;

    fn deref(&self) -> &Held<M> {
        &self.held
    }
}

/// Who holds a new hold, and which lock it is on.
#[derive(Debug)]
pub(crate) struct NewHold {
    pub(crate) key: Key,
    pub(crate) kind: Kind,
    pub(crate) owner: Owner,
}

impl<M: Mode> LockGuard<M> {
    /// The first guard of `grant`, held with `options`' lease and disconnect
    /// policy; registered with the session's watchdog, which watches its node from now on, and
    /// recorded as `holder`'s for reentrancy.
    pub(crate) fn new(
        grant: Grant,
        options: &LockOptions,
        label: Arc<str>,
        holder: NewHold,
    ) -> LockGuard<M> {
        let Grant {
            token,
            watchdog_ref,
            node_watch,
            chroot_len,
            release,
            ..
        } = grant;
        let watch = watchdog_ref.watch();
        let state = Arc::new(watch.guard_state(HoldTerms {
            budget: options.lease.budget(watch.session_timeout()),
            ride_out: options.ride_out,
            grace: options.grace,
            label,
        }));
        let id = watch.next_id();
        let (node, at) = (release.node().clone(), chroot_len);
        watch.post(Event::Register {
            id,
            node: node.clone(),
            state: state.clone(),
            watch: node_watch,
        });
        metrics::gauge!(HELD_LOCKS).increment(1.0);
        let hold = Arc::new(Hold {
            node,
            at,
            token,
            state,
            id,
            acquired_at: Instant::now(),
            key: holder.key,
            kind: holder.kind,
            owner: Mutex::new(holder.owner),
            guards: Mutex::new(Guards {
                count: 1,
                watchdog_ref: Some(watchdog_ref),
                release: Some(release),
            }),
            first: LazyCancel::default(),
        });
        HOLDS.insert(&hold.key, hold.kind, &hold);
        LockGuard::of(hold, None)
    }

    /// One more guard of `hold` (a reentrant acquire): the same node and token, no
    /// request. `Ok(None)` if the hold was released meanwhile (the acquire queues);
    /// [`Error::LockLost`] if it was lost: its node may still stand in the queue, and an
    /// acquire queued behind it would wait for the task's own lost guard.
    pub(crate) fn nest(hold: Arc<Hold>) -> Result<Option<LockGuard<M>>> {
        {
            let mut guards = hold.guards();
            match hold.state.reason() {
                Some(LossReason::Released) => return Ok(None),
                Some(reason) => return Err(Error::LockLost(reason)),
                None if guards.count == 0 => return Ok(None),
                None => guards.count += 1,
            }
        }
        Ok(Some(LockGuard::of(hold, Some(Arc::default()))))
    }

    /// A guard of `hold`, with its own cancellation `own`: `None` for the first guard,
    /// whose cancellation is the hold's `first`.
    fn of(hold: Arc<Hold>, own: Option<Arc<LazyCancel>>) -> LockGuard<M> {
        LockGuard {
            held: Held {
                hold,
                own,
                mode: PhantomData,
            },
            ended: false,
            pinned: None,
        }
    }

    /// Keeps `write` (the write lock this read lock was taken under) until this guard ends.
    pub(crate) fn pin(&mut self, write: LockGuard<Exclusive>) {
        self.pinned = Some(Box::new(write));
    }

    /// A cloneable [`Held`] handle for other tasks: token, check, cancellation.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// let held = guard.held();
    /// let worker = tokio::spawn(async move { held.lost().await });
    /// guard.release().await?;
    /// assert_eq!(worker.await.unwrap(), zkfence::LossReason::Released);
    /// # Ok(()) }
    /// ```
    pub fn held(&self) -> Held<M> {
        self.held.clone()
    }

    /// Makes the current task the owner of this hold (and of its nested guards), for
    /// reentrancy: a guard moved to another task stays owned by the task that acquired it,
    /// whose further acquires re-enter it (or fail with
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock)), while the task that received
    /// it is a stranger to the lock and would wait for its own hold. Call this in the task
    /// that now works under the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// tokio::spawn(async move {
    ///     guard.adopt();
    ///     // ... work that may acquire the same (reentrant) lock again ...
    ///     guard.release().await
    /// });
    /// # Ok(()) }
    /// ```
    pub fn adopt(&self) {
        *self
            .held
            .hold
            .owner
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Owner::current();
    }

    /// Releases the lock: one delete of our node, awaited, retried across ConnectionLoss
    /// until it succeeds or the session is gone. The cancellation token is cancelled first,
    /// so work still running under the lock stops before the next holder can start. A nested
    /// guard (reentrancy) only ends itself: the node is deleted by the release of the last
    /// guard of the hold.
    ///
    /// # Errors
    ///
    /// - [`Error::LockLost`] if the lock had been lost while held (the node is still deleted
    ///   when the session allows): the work done under it may have overlapped another holder,
    ///   and only fenced writes are known to be safe. Also when that cannot be ruled out:
    ///   [`LossReason::NodeDeleted`] when the node was already gone, and
    ///   [`LossReason::ReleaseUnconfirmed`] when the delete's reply was lost and its retry found
    ///   the node gone (our delete, or someone else's first: ZooKeeper keeps no record of who
    ///   deleted a node).
    /// - [`Error::SessionExpired`] / [`Error::ClientClosed`]: the session is gone, and its
    ///   ephemeral node with it.
    /// - [`Error::AccessDenied`] and other ZooKeeper errors: the node remains until the
    ///   session ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters: if this future is dropped before the delete is
    /// confirmed, the node is deleted in the background instead.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// // ... fenced work ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        let hold = self.held.hold.clone();
        let lost = hold.state.reason().filter(|r| *r != LossReason::Released);
        let outcome = match self.end() {
            Some(mut release) => {
                let deleted = release.now().await;
                match (lost, deleted) {
                    (Some(reason), _) => Err(Error::LockLost(reason)),
                    (None, Ok(Deleted::Confirmed)) => Ok(()),
                    (None, Ok(Deleted::Absent)) => Err(Error::LockLost(LossReason::NodeDeleted)),
                    (None, Ok(Deleted::Unconfirmed)) => {
                        Err(Error::LockLost(LossReason::ReleaseUnconfirmed))
                    }
                    (None, Err(err)) => Err(err),
                }
            }
            // A nested guard: the hold goes on for the others.
            None => lost.map_or(Ok(()), |reason| Err(Error::LockLost(reason))),
        };
        let outcome = match self.pinned.take() {
            Some(write) => outcome.and(Box::pin(write.release()).await),
            None => outcome,
        };
        match &outcome {
            Ok(()) => {
                tracing::debug!(node = %self.node_path(), fencing_token = %hold.token, "released")
            }
            Err(err) => {
                if !err.is_lock_lost() {
                    metrics::counter!(RELEASE_ERRORS_TOTAL).increment(1);
                }
                tracing::warn!(node = %self.node_path(), fencing_token = %hold.token, cause = %err, "release reported an error");
            }
        }
        outcome
    }

    /// Ends this guard, once: cancels its token; if it was the last of its hold, ends the
    /// hold (cancelled as released, unregistered, forgotten) and returns the release that
    /// deletes the node.
    fn end(&mut self) -> Option<Release> {
        if std::mem::replace(&mut self.ended, true) {
            return None;
        }
        self.held.own().cancel();
        let hold = &self.held.hold;
        let (watchdog_ref, release) = {
            let mut guards = hold.guards();
            guards.count -= 1;
            if guards.count > 0 {
                return None;
            }
            (guards.watchdog_ref.take(), guards.release.take())
        };
        hold.state.lose(LossReason::Released);
        HOLDS.remove(&hold.key, hold);
        if let Some(watchdog_ref) = watchdog_ref {
            watchdog_ref
                .watch()
                .post_quietly(Event::Unregister { id: hold.id });
        }
        metrics::gauge!(HELD_LOCKS).decrement(1.0);
        metrics::histogram!(HOLD_DURATION_SECONDS, "lock" => hold.state.terms.label.clone())
            .record(hold.acquired_at.elapsed().as_secs_f64());
        release
    }
}

impl<M: Mode> crate::section::Guarded for LockGuard<M> {
    type Handle = Held<M>;

    fn handle(&self) -> Held<M> {
        self.held()
    }

    fn release(self) -> impl std::future::Future<Output = Result<()>> + Send {
        LockGuard::release(self)
    }
}

impl<M: Mode> crate::section::Fenceable for Held<M> {
    fn check_hold(&self) -> std::result::Result<(), CheckError> {
        Held::check_hold(self)
    }

    fn steady(&self) -> impl std::future::Future<Output = Result<()>> + Send {
        Held::steady(self)
    }

    fn cancellation_token(&self) -> CancellationToken {
        Held::cancellation_token(self)
    }
}

impl<M: Mode> Drop for LockGuard<M> {
    /// Ends the guard at once; if it was the last of its hold, the node is deleted in the
    /// background by the release dropped here, unless `release` confirmed it gone.
    fn drop(&mut self) {
        drop(self.end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn guard_and_handle_are_send_sync_static() {
        assert_send_sync_static::<LockGuard>();
        assert_send_sync_static::<Held>();
        assert_send_sync_static::<LockGuard<crate::Shared>>();
        assert_send_sync_static::<Held<crate::Shared>>();
        assert_send_sync_static::<crate::FencedLock>();
        assert_send_sync_static::<crate::FencedLock<crate::Shared>>();
        assert_send_sync_static::<crate::FenceTicket>();
    }
}
