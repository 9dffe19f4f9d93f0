//! [`Acquire`]: the one family of acquire and critical-section methods that every lock kind
//! shares, written once: a kind supplies its guard and how to wait for it, and gets
//! `acquire`, `try_acquire`, `acquire_timeout`, `run` and `run_timeout`.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::section::{self, Guarded};
use crate::wait::Wait;

/// Taking a lock, and running a critical section under it: what [`FencedLock`],
/// [`FencedMultiLock`], [`FencedSemaphore`] and the two sides of a [`FencedRwLock`]
/// ([`reader`](crate::FencedRwLock::reader), [`writer`](crate::FencedRwLock::writer)) have in
/// common. Bring it into scope to call these methods (`use zkfence::Acquire;`). Sealed: only
/// zkfence's lock kinds implement it.
///
/// [`FencedLock`]: crate::FencedLock
/// [`FencedMultiLock`]: crate::FencedMultiLock
/// [`FencedSemaphore`]: crate::FencedSemaphore
/// [`FencedRwLock`]: crate::FencedRwLock
///
/// | implementor | [`Guard`](Acquire::Guard) | [`Handle`](Acquire::Handle) |
/// | --- | --- | --- |
/// | `FencedLock`, `rw.writer()` | [`LockGuard`](crate::LockGuard) | [`Held`](crate::Held) |
/// | `rw.reader()`, `FencedSemaphore` | `LockGuard<Shared>` | `Held<Shared>` |
/// | `FencedMultiLock` | [`MultiGuard`](crate::MultiGuard) | [`MultiHeld`](crate::MultiHeld) |
///
/// # Examples
///
/// ```no_run
/// use zkfence::{Acquire, FencedLock, LockOptions};
///
/// # async fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
/// let lock = FencedLock::new(client, "/locks/orders", LockOptions::default())?;
/// let guard = lock.acquire().await?;
/// guard.release().await?;
/// let fence = lock
///     .run(|held| async move {
///         held.check()?;
///         Ok::<_, zkfence::Error>(held.token().as_i64())
///     })
///     .await?;
/// # let _ = fence; Ok(()) }
/// ```
pub trait Acquire: sealed::Sealed + Send + Sync {
    /// Proof of holding: released by its `release()`, or in the background when dropped.
    type Guard: Guarded<Handle = Self::Handle>;

    /// The cloneable handle a critical section gets: token, `check()`, cancellation.
    type Handle;

    /// Waits as `wait` allows: `Ok(None)` when the wait ran out.
    #[doc(hidden)]
    fn acquire_with(&self, wait: Wait) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;

    /// Waits in the lock's fair FIFO queue until this contender holds the lock (every lock, for
    /// a multi-lock, taken one by one in sorted path order).
    ///
    /// Round trips: an uncontended acquire sends the create and the children listing back to
    /// back on the session (ZooKeeper answers them in order), so it costs one round trip
    /// plus one commit. A waiter watches only its predecessor; when that node goes and it was
    /// the only one ahead, the lock is ours with no further request.
    ///
    /// # Errors
    ///
    /// - [`Error::SessionExpired`], [`Error::ClientClosed`], [`Error::AuthFailed`]: the
    ///   session ended while queued (never a lock).
    /// - [`Error::NoParent`] when the path is missing and parents are not created;
    ///   [`Error::AccessDenied`] when ACLs refuse us.
    /// - [`Error::NodeDeletedWhileWaiting`] when our queue node (or the whole lock path) was
    ///   deleted by someone else while we waited.
    /// - [`Error::WouldDeadlock`] when the calling task already holds the lock and the lock is
    ///   not reentrant; [`Error::LockLost`] when it holds it and that hold was lost.
    /// - [`Error::PermitsMismatch`] from a semaphore whose stored count differs from ours.
    ///
    /// No node of ours is left behind on any error (a multi-lock releases the locks it took).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any await point leaves no node behind. The
    /// cleanup runs as its own task on the Tokio runtime (it deletes our node, or finds it by
    /// its UUID and our session if the create's reply had not arrived), so it does not depend
    /// on the cancelled caller; a multi-lock's locks already taken are released the same way.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// println!("token {}", guard.token().as_i64());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    fn acquire(&self) -> impl Future<Output = Result<Self::Guard>> + Send {
        async move {
            loop {
                // A wait without a deadline ends only with a guard or an error.
                if let Some(guard) = self.acquire_with(Wait::Forever).await? {
                    return Ok(guard);
                }
            }
        }
    }

    /// Takes the lock if it is free now, without waiting behind anyone. Returns `None` (and
    /// leaves no node behind: ours is deleted before this returns) when it is taken.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// match lock.try_acquire().await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(()) }
    /// ```
    fn try_acquire(&self) -> impl Future<Output = Result<Option<Self::Guard>>> + Send {
        self.acquire_with(Wait::Never)
    }

    /// As [`acquire`](Self::acquire), but gives up after `timeout` (for all the locks of a
    /// multi-lock together) and returns `None`, holding nothing: our node is deleted before
    /// this returns when the timeout hit while queued, or by the background cleanup when it
    /// hit while ZooKeeper was unreachable.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(guard) = lock.acquire_timeout(std::time::Duration::from_secs(2)).await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    fn acquire_timeout(
        &self,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send {
        self.acquire_with(Wait::Until(Instant::now() + timeout))
    }

    /// Runs a critical section under the lock: acquires, runs `f`'s future, releases, and
    /// returns its output.
    ///
    /// The future is checked **before every poll**: once the lock is lost or its lease has
    /// lapsed by the monotonic clock, it is dropped without being polled again and `run`
    /// returns `Err(Error::LockLost(reason).into())`; while the hold is in jeopardy (with a
    /// grace period) it is not polled. After a process pause, no new step of the future
    /// starts, even if the watchdog task has not been scheduled yet. A step already running
    /// when the lock is lost cannot be stopped from here: fence your writes with the hold's
    /// [`ticket`](crate::Held::ticket).
    ///
    /// The lock is released whatever happens: success, error, loss, a panic in the future
    /// (released, then the panic resumes), or `run` itself being cancelled (background
    /// delete).
    ///
    /// # Errors
    ///
    /// Acquire errors and [`Error::LockLost`], converted into `E`; `f`'s own errors as they
    /// are. A release error after a successful section is returned too, since the section may
    /// have overlapped another holder if the lock was lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the section's future and the guard (which deletes the
    /// node in the background).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn put(_k: &str, _v: &str, _fence: i64) -> zkfence::Result<()> { Ok(()) }
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let out = lock
    ///     .run(|held| async move {
    ///         held.check()?;
    ///         put("key", "value", held.token().as_i64()).await
    ///     })
    ///     .await?;
    /// # let _: () = out; Ok(()) }
    /// ```
    fn run<F, Fut, T, E>(&self, f: F) -> impl Future<Output = std::result::Result<T, E>>
    where
        F: FnOnce(Self::Handle) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        async move {
            let guard = self.acquire().await?;
            section::run(guard, f).await
        }
    }

    /// As [`run`](Self::run), but gives up waiting for the lock after `timeout` and returns
    /// `Ok(None)` without running `f`.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`run`](Self::run).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let done = lock
    ///     .run_timeout(std::time::Duration::from_secs(2), |held| async move {
    ///         held.check()?;
    ///         Ok::<_, zkfence::Error>(held.token().as_i64())
    ///     })
    ///     .await?;
    /// println!("{done:?}");
    /// # Ok(()) }
    /// ```
    fn run_timeout<F, Fut, T, E>(
        &self,
        timeout: Duration,
        f: F,
    ) -> impl Future<Output = std::result::Result<Option<T>, E>>
    where
        F: FnOnce(Self::Handle) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        async move {
            match self.acquire_timeout(timeout).await? {
                Some(guard) => section::run(guard, f).await.map(Some),
                None => Ok(None),
            }
        }
    }
}

pub(crate) mod sealed {
    /// Only zkfence's lock kinds implement [`Acquire`](super::Acquire).
    pub trait Sealed {}
}
