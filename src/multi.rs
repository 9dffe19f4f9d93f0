//! [`FencedMultiLock`]: several locks held together, taken in one canonical order, all or
//! nothing; [`MultiGuard`] and [`MultiHeld`], a token per path.

use std::future::Future;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::acquire::{sealed::Sealed, Acquire};
use crate::error::{Error, Result};
use crate::fence::FenceTicket;
use crate::guard::{Held, LockGuard};
use crate::lock::FencedLock;
use crate::loss::LossReason;
use crate::options::LockOptions;
use crate::section::{Fenceable, Guarded};
use crate::token::FencingToken;
use crate::wait::Wait;
use crate::watchdog::CheckError;

/// Several fenced locks held together, like Apache Curator's `InterProcessMultiLock`, but
/// acquired in **one canonical order** (sorted by path) whatever order you give them, so two
/// multi-locks over overlapping sets never deadlock (Curator takes the caller's order, and
/// Redisson's users hit exactly that deadlock). All or nothing: a failure, a timeout or a
/// cancelled acquire leaves no node of ours on any path. The guard carries a token per path
/// (in your order), is cancelled when any of its locks is lost, and its `check()` fails when
/// any lease has lapsed. Take it with the [`Acquire`] methods.
///
/// # Examples
///
/// ```no_run
/// use zkfence::Acquire;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let both = zkfence::FencedMultiLock::new(
///     client,
///     ["/locks/accounts/17", "/locks/accounts/4"],
///     zkfence::LockOptions::default(),
/// )?;
/// let guard = both.acquire().await?;
/// let [from, to] = guard.tokens()[..] else { unreachable!() };
/// println!("transfer fenced by {from} and {to}");
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedMultiLock {
    /// The locks in acquisition order (sorted by path).
    locks: Vec<FencedLock>,
    /// For each path in the caller's order, its index in `locks`.
    caller: Vec<usize>,
}

impl FencedMultiLock {
    /// A multi-lock on `paths` (any iterable of path strings: `["/a", "/b"]`, `&["/a", "/b"]`,
    /// a `Vec<String>`, ...), all on `client`'s session, each with `options`. Nothing is sent
    /// to ZooKeeper yet.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::new`] for each path; [`Error::InvalidOptions`] for no path at all;
    /// [`Error::OverlappingLocks`] for the same path twice, or one path inside another's lock
    /// directory (their queues would share or nest).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// use zkfence::{FencedMultiLock, LockOptions};
    /// let locks = FencedMultiLock::new(client.clone(), ["/locks/a", "/locks/b"], LockOptions::default())?;
    /// assert_eq!(locks.paths(), ["/locks/a", "/locks/b"]);
    /// // Any list of paths: a slice of &str, a Vec<String>, a borrowed Vec.
    /// let _ = FencedMultiLock::new(client.clone(), &["/locks/a", "/locks/b"], LockOptions::default())?;
    /// let owned: Vec<String> = vec!["/locks/a".into(), "/locks/b".into()];
    /// let _ = FencedMultiLock::new(client.clone(), &owned, LockOptions::default())?;
    /// let _ = FencedMultiLock::new(client, owned, LockOptions::default())?;
    /// # Ok(()) }
    /// ```
    pub fn new<I>(client: zk::Client, paths: I, options: LockOptions) -> Result<FencedMultiLock>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let paths: Vec<String> = (paths.into_iter()).map(|p| p.as_ref().to_owned()).collect();
        if paths.is_empty() {
            return Err(Error::InvalidOptions(
                "a multi-lock needs at least one path",
            ));
        }
        for path in &paths {
            FencedLock::check_path(path)?;
        }
        let mut sorted: Vec<usize> = (0..paths.len()).collect();
        sorted.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
        for pair in sorted.windows(2) {
            let (first, second) = (&paths[pair[0]], &paths[pair[1]]);
            let nested = second
                .strip_prefix(first.as_str())
                .is_some_and(|r| r.starts_with('/'));
            if first == second || nested {
                return Err(Error::OverlappingLocks {
                    first: first.clone(),
                    second: second.clone(),
                });
            }
        }
        let mut caller = vec![0; paths.len()];
        for (at, &i) in sorted.iter().enumerate() {
            caller[i] = at;
        }
        let locks = (sorted.iter())
            .map(|&i| FencedLock::new(client.clone(), paths[i].clone(), options.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(FencedMultiLock { locks, caller })
    }

    /// The lock paths, in the order given to [`new`](Self::new).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(locks: zkfence::FencedMultiLock) {
    /// for path in locks.paths() {
    ///     println!("{path}");
    /// }
    /// # }
    /// ```
    pub fn paths(&self) -> Vec<&str> {
        self.caller.iter().map(|&i| self.locks[i].path()).collect()
    }

    /// Takes the locks in sorted order; on any failure or timeout, releases what it took.
    async fn take_all(&self, wait: Wait) -> Result<Option<MultiGuard>> {
        let mut taken = Vec::with_capacity(self.locks.len());
        for lock in &self.locks {
            match lock.acquire_with(wait).await {
                Ok(Some(guard)) => taken.push(guard),
                other => {
                    // The acquire's own outcome is what the caller hears; a lock whose release
                    // fails here goes with the session.
                    let _ = release_all(taken).await;
                    return other.map(|_| None);
                }
            }
        }
        Ok(Some(MultiGuard::new(taken, &self.caller)))
    }
}

impl Sealed for FencedMultiLock {}

impl Acquire for FencedMultiLock {
    type Guard = MultiGuard;
    type Handle = MultiHeld;

    fn acquire_with(&self, wait: Wait) -> impl Future<Output = Result<Option<MultiGuard>>> + Send {
        self.take_all(wait)
    }
}

/// Releases `guards` (in reverse order of acquisition); the first error, if any.
async fn release_all(guards: Vec<LockGuard>) -> Result<()> {
    let mut outcome = Ok(());
    for guard in guards.into_iter().rev() {
        let released = guard.release().await;
        if outcome.is_ok() {
            outcome = released;
        }
    }
    outcome
}

/// A cheap, cloneable view of a held multi-lock: a [`Held`] per lock (in the order given to
/// [`FencedMultiLock::new`]), one cancellation for all, and a check that fails when any lock
/// is lost or its lease has lapsed.
///
/// # Examples
///
/// ```no_run
/// # use zkfence::Acquire;
/// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
/// let guard = locks.acquire().await?;
/// let held: zkfence::MultiHeld = guard.held();
/// held.check()?;
/// for (path, token) in held.lock_paths().iter().zip(held.tokens()) {
///     println!("{path}: {token}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiHeld {
    helds: Vec<Held>,
    /// Cancelled when any lock is lost or released.
    cancel: CancellationToken,
    /// `true` while any lock is in jeopardy.
    jeopardy: watch::Receiver<bool>,
}

impl MultiHeld {
    /// The fencing tokens, one per lock, in the order the paths were given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// let fences: Vec<i64> = guard.tokens().iter().map(|t| t.as_i64()).collect();
    /// # let _ = fences; Ok(()) }
    /// ```
    pub fn tokens(&self) -> Vec<FencingToken> {
        self.helds.iter().map(Held::token).collect()
    }

    /// The [`FenceTicket`]s, one per lock, in the order the paths were given: each lock's
    /// scope (its path) and token, checked against that lock's hold (see [`Held::ticket`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// for ticket in guard.tickets() {
    ///     println!("{ticket}"); // e.g. 42@4294967339:_c_…-lock-0000000042:/locks/accounts/17
    /// }
    /// # Ok(()) }
    /// ```
    pub fn tickets(&self) -> Vec<FenceTicket> {
        self.helds.iter().map(|held| held.ticket()).collect()
    }

    /// The lock paths, in the order given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// println!("{:?}", guard.lock_paths());
    /// # Ok(()) }
    /// ```
    pub fn lock_paths(&self) -> Vec<&str> {
        self.helds.iter().map(Held::lock_path).collect()
    }

    /// The per-lock handles, in the order given: each lock's node, token, check and lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// for held in guard.helds() {
    ///     println!("{} holds {}", held.lock_path(), held.node_path());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn helds(&self) -> &[Held] {
        &self.helds
    }

    /// Fails fast, without I/O, when any lock is lost or released, any lease has lapsed, or
    /// any hold is in jeopardy: as [`Held::check`] for each lock.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] (any lock lost) before [`Error::Jeopardy`] (none lost, one in
    /// jeopardy).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// guard.check()?;
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.check_hold().map_err(Error::from)
    }

    fn check_hold(&self) -> std::result::Result<(), CheckError> {
        let failed: Vec<CheckError> = self
            .helds
            .iter()
            .filter_map(|h| h.check_hold().err())
            .collect();
        match failed.iter().find(|h| matches!(h, CheckError::Lost(_))) {
            Some(lost) => Err(*lost),
            None => failed.first().map_or(Ok(()), |h| Err(*h)),
        }
    }

    /// Cancelled when any of the locks is lost, or the guard is released.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// let cancel = guard.cancellation_token();
    /// # let _ = cancel; Ok(()) }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Waits until any lock is lost or the guard released, and says why (the first lock's
    /// loss that is not a release, else [`LossReason::Released`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits on the cancellation token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// eprintln!("{}", guard.lost().await);
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LossReason {
        self.cancel.cancelled().await;
        (self.helds.iter())
            .filter_map(|h| h.check().err())
            .find_map(|err| match err {
                Error::LockLost(reason) if reason != LossReason::Released => Some(reason),
                _ => None,
            })
            .unwrap_or(LossReason::Released)
    }

    /// Whether any lock is in jeopardy, as a watch (see [`Held::jeopardy`]): its first
    /// `changed()` resolves at once, with the state as it is then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// println!("{}", *guard.jeopardy().borrow());
    /// # Ok(()) }
    /// ```
    pub fn jeopardy(&self) -> watch::Receiver<bool> {
        let mut receiver = self.jeopardy.clone();
        receiver.mark_changed();
        receiver
    }

    /// Waits until every lock is steady (see [`Held::steady`]).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when a lock is lost first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the guards' state.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// guard.steady().await?;
    /// # Ok(()) }
    /// ```
    pub async fn steady(&self) -> Result<()> {
        for held in &self.helds {
            held.steady().await?;
        }
        Ok(())
    }

    /// Resolves when someone asks the holder of any of the locks to let go (see
    /// [`Held::revocation_requested`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// guard.revocation_requested().await;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revocation_requested(&self) {
        let asked = self
            .helds
            .iter()
            .map(|h| Box::pin(h.revocation_requested()));
        futures_util::future::select_all(asked).await;
    }
}

impl Fenceable for MultiHeld {
    fn check_hold(&self) -> std::result::Result<(), CheckError> {
        MultiHeld::check_hold(self)
    }

    fn steady(&self) -> impl Future<Output = Result<()>> + Send {
        MultiHeld::steady(self)
    }

    fn cancellation_token(&self) -> CancellationToken {
        MultiHeld::cancellation_token(self)
    }
}

/// Proof that this process holds every lock of a [`FencedMultiLock`]. Release it with
/// [`release`](MultiGuard::release); dropping it releases every lock in the background. It
/// dereferences to [`MultiHeld`].
///
/// # Examples
///
/// ```no_run
/// # use zkfence::Acquire;
/// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
/// let guard = locks.acquire().await?;
/// guard.check()?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In acquisition (sorted) order.
    guards: Vec<LockGuard>,
    held: MultiHeld,
}

impl std::ops::Deref for MultiGuard {
    type Target = MultiHeld;

    fn deref(&self) -> &MultiHeld {
        &self.held
    }
}

impl MultiGuard {
    /// The guard of `guards` (sorted order); `caller` maps the caller's order to it.
    fn new(guards: Vec<LockGuard>, caller: &[usize]) -> MultiGuard {
        let helds: Vec<Held> = caller.iter().map(|&i| guards[i].held()).collect();
        let cancel = CancellationToken::new();
        let (jeopardy, watching) = watch::channel(false);
        tokio::spawn(follow(helds.clone(), cancel.clone(), jeopardy));
        MultiGuard {
            guards,
            held: MultiHeld {
                helds,
                cancel,
                jeopardy: watching,
            },
        }
    }

    /// A cloneable [`MultiHeld`] handle.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// let guard = locks.acquire().await?;
    /// let held = guard.held();
    /// tokio::spawn(async move { held.lost().await });
    /// # Ok(()) }
    /// ```
    pub fn held(&self) -> MultiHeld {
        self.held.clone()
    }

    /// Releases every lock (in reverse order of acquisition), as [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// The first error among the releases (the others are released anyway).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters: locks not yet released are released in the
    /// background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use zkfence::Acquire;
    /// # async fn demo(locks: zkfence::FencedMultiLock) -> zkfence::Result<()> {
    /// locks.acquire().await?.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.held.cancel.cancel();
        release_all(std::mem::take(&mut self.guards)).await
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        self.held.cancel.cancel();
    }
}

impl Guarded for MultiGuard {
    type Handle = MultiHeld;

    fn handle(&self) -> MultiHeld {
        self.held()
    }

    fn release(self) -> impl Future<Output = Result<()>> + Send {
        MultiGuard::release(self)
    }
}

/// Keeps the multi-guard's cancellation and jeopardy in step with its locks': cancels at the
/// first lock's end, and reads `true` while any lock is in jeopardy.
async fn follow(helds: Vec<Held>, cancel: CancellationToken, jeopardy: watch::Sender<bool>) {
    let mut watching: Vec<watch::Receiver<bool>> = helds.iter().map(Held::jeopardy).collect();
    let ended = futures_util::future::select_all(
        (helds.iter()).map(|h| Box::pin(h.cancellation_token().cancelled_owned())),
    );
    tokio::pin!(ended);
    loop {
        let changed =
            futures_util::future::select_all((watching.iter_mut()).map(|w| Box::pin(w.changed())));
        let go_on = tokio::select! {
            _ = &mut ended => false,
            _ = cancel.cancelled() => false,
            _ = changed => true,
        };
        if !go_on {
            break;
        }
        let now = watching.iter().any(|w| *w.borrow());
        jeopardy.send_if_modified(|was| std::mem::replace(was, now) != now);
    }
    cancel.cancel();
    jeopardy.send_replace(false);
}
