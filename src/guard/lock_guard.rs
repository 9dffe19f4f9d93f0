//! [`LockGuard`]: the guards of a hold, made from a grant or nested in a reentrant acquire,
//! and their release.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::held::Held;
use super::hold::{Guards, Hold, NewHold, HOLDS};
use crate::error::{Error, Result};
use crate::loss::LossReason;
use crate::metrics::{HELD_LOCKS, HOLD_DURATION_SECONDS, RELEASE_ERRORS_TOTAL};
use crate::mode::{Exclusive, Mode};
use crate::options::LockOptions;
use crate::queue::{Grant, Release};
use crate::reentrancy::Owner;
use crate::requests::nodes::Deleted;
use crate::watchdog::{Event, HoldTerms, LazyCancel};

/// Proof that this process holds a lock, with the acquisition's
/// [`FencingToken`](crate::FencingToken): a [`FencedLock`](crate::FencedLock)'s or a write
/// lock's (`LockGuard`, that is `LockGuard<Exclusive>`), or a read lock's or a semaphore
/// lease's (`LockGuard<Shared>`: see [`Mode`]).
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

impl<M: Mode> Drop for LockGuard<M> {
    /// Ends the guard at once; if it was the last of its hold, the node is deleted in the
    /// background by the release dropped here, unless `release` confirmed it gone.
    fn drop(&mut self) {
        drop(self.end());
    }
}
