//! [`Held`], the cloneable handle of a hold: its token, its check, its cancellation.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::hold::Hold;
use crate::error::{Error, Result};
use crate::loss::LossReason;
use crate::mode::{Exclusive, Mode};
use crate::token::FencingToken;
use crate::watchdog::{CheckError, LazyCancel};

/// A cheap, cloneable view of a held lock: its token, its node, its cancellation and the
/// synchronous [`check`](Held::check). [`LockGuard`] dereferences to it, and
/// [`Acquire::run`](crate::Acquire::run) hands one to the critical section.
///
/// A `Held` does not keep the lock: the lock is released when its [`LockGuard`] is. `M` is the
/// hold's [`Mode`]: an [`Exclusive`] hold (the default) also hands out the
/// [`ticket`](Held::ticket) that fences storage; a [`Shared`](crate::Shared) one (a read lock,
/// a semaphore lease) does not.
///
/// [`LockGuard`]: crate::LockGuard
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
    pub(super) hold: Arc<Hold>,
    /// This guard's cancellation, when it is a nested guard's (the first guard's is in the
    /// hold): a child of the hold's, also cancelled when this guard ends while others
    /// hold on.
    pub(super) own: Option<Arc<LazyCancel>>,
    pub(super) mode: PhantomData<fn() -> M>,
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
    pub(super) fn own(&self) -> &LazyCancel {
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
