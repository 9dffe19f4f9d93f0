//! [`FencedLock`] and [`LockOptions`]: acquire, try_acquire, acquire_timeout, contenders, run.

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::guard::{Held, LockGuard};
use crate::lease::LeasePolicy;
use crate::metrics as m;
use crate::recipe::{self, child_path, Kind};
use crate::watchdog::{self, GuardState, LossReason};

/// How a lock's parent nodes are created when they are missing.
///
/// # Examples
///
/// ```
/// let options = zkfence::LockOptions::default().with_parent_mode(zkfence::ParentMode::Persistent);
/// # let _ = options;
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentMode {
    /// Container nodes, as Apache Curator creates them: the server deletes them once empty, so
    /// idle locks leave nothing behind. Tokens stay monotonic when the parent is recreated.
    Container,
    /// Ordinary persistent nodes, kept until someone deletes them.
    Persistent,
}

/// How a [`FencedLock`] creates its nodes and watches its lease. Built with `with_*` methods
/// from [`LockOptions::default`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use zkfence::LockOptions;
///
/// let options = LockOptions::default()
///     .with_data(b"orders-worker-3".to_vec())
///     .with_create_parents(true)
///     .with_ride_out_disconnects(false)
///     .with_lease_margin(Duration::from_millis(200))
///     .with_metrics_label("orders");
/// assert_eq!(options.data(), b"orders-worker-3");
/// ```
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// Stored in our lock node so `contenders()` and operators can tell who holds the lock.
    data: Vec<u8>,
    /// ACLs of the lock node and of parents we create.
    acls: Vec<zk::Acl>,
    /// Whether missing parents are created rather than reported.
    create_parents: bool,
    parent_mode: ParentMode,
    /// Whether a disconnect cancels at once (false) or only once the lease lapses (true).
    ride_out: bool,
    lease: LeasePolicy,
    metrics_label: Option<Arc<str>>,
    /// How long a successor waits after a predecessor vanished without releasing.
    lock_delay: Option<Duration>,
}

/// The longest lock-delay [`LockOptions::with_lock_delay`] accepts.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

impl Default for LockOptions {
    /// Node data `host:<hostname> pid:<pid>`, ACL world:anyone with all permissions, container
    /// parents created when missing, cancel at once on disconnect, 1% drift, a margin of `T/20`
    /// (20 ms to 500 ms), and the ensemble's tickTime taken as `T/2`.
    fn default() -> Self {
        LockOptions {
            data: default_identity().into_bytes(),
            acls: zk::Acls::anyone_all().to_vec(),
            create_parents: true,
            parent_mode: ParentMode::Container,
            ride_out: false,
            lease: LeasePolicy::default(),
            metrics_label: None,
            lock_delay: None,
        }
    }
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned());
    format!("host:{host} pid:{}", std::process::id())
}

impl LockOptions {
    /// The data stored in our lock node (default `host:<hostname> pid:<pid>`).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_data("job-42");
    /// assert_eq!(options.data(), b"job-42");
    /// ```
    pub fn with_data(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.data = data.into();
        self
    }

    /// The ACLs of our lock node and of any parents we create (default world:anyone, all).
    ///
    /// # Examples
    ///
    /// ```
    /// use zookeeper_client::Acls;
    /// let options = zkfence::LockOptions::default().with_acls(Acls::creator_all().to_vec());
    /// # let _ = options;
    /// ```
    pub fn with_acls(mut self, acls: Vec<zk::Acl>) -> Self {
        self.acls = acls;
        self
    }

    /// Whether missing parents of the lock path are created (default `true`).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_create_parents(false);
    /// # let _ = options;
    /// ```
    pub fn with_create_parents(mut self, create: bool) -> Self {
        self.create_parents = create;
        self
    }

    /// How missing parents are created (default [`ParentMode::Container`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_parent_mode(zkfence::ParentMode::Persistent);
    /// # let _ = options;
    /// ```
    pub fn with_parent_mode(mut self, mode: ParentMode) -> Self {
        self.parent_mode = mode;
        self
    }

    /// Whether a disconnect from ZooKeeper is ridden out until the lease deadline (`true`)
    /// rather than cancelling the guard at once (`false`, the default). Riding out trades a
    /// little safety margin for availability during short network blips; the lease still
    /// ends the hold before the server could expire the session.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_ride_out_disconnects(true);
    /// # let _ = options;
    /// ```
    pub fn with_ride_out_disconnects(mut self, ride_out: bool) -> Self {
        self.ride_out = ride_out;
        self
    }

    /// Slack given up from the lease for scheduling and network jitter (default `T/20`,
    /// between 20 ms and 500 ms, `T` the negotiated session timeout): the lease ends `margin`
    /// before the earliest instant the leader could expire the session, and a follower is
    /// allowed `margin` of lateness when it relays the session's activity to the leader.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_lease_margin(std::time::Duration::from_millis(250));
    /// # let _ = options;
    /// ```
    pub fn with_lease_margin(mut self, margin: Duration) -> Self {
        self.lease.margin = Some(margin);
        self
    }

    /// The ensemble's `tickTime`, if you know it (by default zkfence assumes `T/2`, the
    /// largest ZooKeeper's default `minSessionTimeout = 2·tickTime` allows).
    ///
    /// A follower tells the leader that a session is alive only every `tickTime/2`, so a
    /// reply proves the leader heard from the session only that long before a later write was
    /// sent (see "The lease, and what each server reply proves" in the crate docs): a shorter
    /// tick gives a fresher lease. Give the real value or a larger one, never a smaller one.
    /// Set it when your servers' `minSessionTimeout` is below `2·tickTime`; to gain lease time
    /// when the tick is well below `T/2`; larger than the real tick to cover leader pauses
    /// (a tick of `2X` covers pauses up to `X`); and at twice the real tick for clients of
    /// observers behind an `ObserverMaster`. Settings that leave no room to renew the lease (a
    /// tick close to `T`) are refused by [`FencedLock::new`] with [`Error::LeaseTooShort`].
    ///
    /// # Examples
    ///
    /// ```
    /// // Stock ZooKeeper settings (tickTime=2000) with a 20 s session.
    /// let options = zkfence::LockOptions::default().with_tick_time(std::time::Duration::from_secs(2));
    /// # let _ = options;
    /// ```
    pub fn with_tick_time(mut self, tick: Duration) -> Self {
        self.lease.tick = (!tick.is_zero()).then_some(tick);
        self
    }

    /// **Unsound; for zkfence's chaos suite only.** Keeps the lease rule zkfence had before
    /// it learnt that a leader answers its own clients' syncs without a quorum: each `sync`
    /// reply extends the lease from its send time, margin `T/4`. The chaos suite runs it as a
    /// mutant to show that its partition faults catch it. Only built with the `mutants`
    /// feature.
    ///
    /// # Examples
    ///
    /// ```
    /// let mutant = zkfence::LockOptions::default().with_legacy_sync_lease_mutant(true);
    /// # let _ = mutant;
    /// ```
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_legacy_sync_lease_mutant(mut self, on: bool) -> Self {
        self.lease.legacy = on;
        self
    }

    /// Fraction of the session timeout given up for clock-rate differences between this host
    /// and the server (default 0.01, i.e. 1%). Values are clamped to `0.0..=0.5`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_lease_drift(0.02);
    /// # let _ = options;
    /// ```
    pub fn with_lease_drift(mut self, drift: f64) -> Self {
        self.lease.drift = if drift.is_nan() {
            0.01
        } else {
            drift.clamp(0.0, 0.5)
        };
        self
    }

    /// A name for this lock in metrics (label `lock`). Keep it low-cardinality: a lock's
    /// purpose, never a per-entity path. Unset by default (empty label).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_metrics_label("orders");
    /// # let _ = options;
    /// ```
    pub fn with_metrics_label(mut self, label: impl Into<String>) -> Self {
        self.metrics_label = Some(label.into().into());
        self
    }

    /// A lock-delay in the spirit of Chubby's and Consul's (off by default): when a node this
    /// contender watches while it waits vanishes **without a release** (its session expired,
    /// or an operator deleted it), the contender waits `delay` more before it takes the
    /// lock; if it gives up during the delay, its successor inherits it. A
    /// holder that stalled past its session may still be finishing a write; the delay narrows
    /// that window for storage that cannot check fencing tokens. A normal release is never
    /// delayed. Clamped to [`MAX_LOCK_DELAY`].
    ///
    /// How a successor tells the two apart: with this option on, a release deletes the node
    /// in a multi that first sets its data to `released`, so the successor's watch sees a
    /// data change before the node goes; a node that just vanishes was not released. The
    /// cost: a release sends one multi (two operations, one commit) instead of a delete, and
    /// a successor woken by a release lists the queue once before it proceeds. Every
    /// contender of a lock should use the same setting; a holder without it releases with a
    /// plain delete, which its delaying successors take for a failure.
    ///
    /// It errs towards delaying. A successor is also delayed when the node that vanished was a
    /// waiter (not the holder) whose session ended, and when it was disconnected while the
    /// release happened (on reconnect the server reports the deletion, not the marker). It
    /// is not delayed when the node vanished in the one round trip between its listing and
    /// its watch, nor when it arrives after a failed holder's node is already gone (that node
    /// outlived the holder's last contact by a whole session timeout). The marker is a write:
    /// the lock nodes' ACL must grant the creator WRITE (the default ACL does); without it a
    /// release falls back to a plain delete.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = zkfence::LockOptions::default().with_lock_delay(Duration::from_secs(5));
    /// assert_eq!(options.lock_delay(), Some(Duration::from_secs(5)));
    /// ```
    pub fn with_lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay.min(MAX_LOCK_DELAY));
        self
    }

    /// The lock-delay, if one is set.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::LockOptions::default().lock_delay(), None);
    /// ```
    pub fn lock_delay(&self) -> Option<Duration> {
        self.lock_delay
    }

    /// The node data.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence::LockOptions::default().data().starts_with(b"host:"));
    /// ```
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// One node in a lock's queue, as [`FencedLock::contenders`] reports it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// for (i, c) in lock.contenders().await?.iter().enumerate() {
///     let role = if i == 0 { "holder" } else { "waiting" };
///     println!("{role} {} token {} session {} ({})", c.node, c.token, c.session_id, c.identity());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The node's name under the lock path.
    pub node: String,
    /// Its fencing token (sequence and creation zxid).
    pub token: FencingToken,
    /// The session that owns the (ephemeral) node.
    pub session_id: zk::SessionId,
    /// The node's data: an identity such as `host:… pid:…`.
    pub data: Vec<u8>,
    /// When the node was created, in milliseconds since the Unix epoch (server clock).
    pub created_ms: i64,
}

impl Contender {
    /// The node data as text (lossy UTF-8).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     println!("held by {}", holder.identity());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn identity(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.data)
    }
}

/// A fair, fenced distributed lock on one ZooKeeper path.
///
/// Contenders queue as ephemeral sequential nodes `_c_<uuid>-lock-<seq>` under the lock path
/// (Apache Curator's `InterProcessMutex` naming, so the two exclude each other); each waiter
/// watches only its predecessor. The holder's [`LockGuard`] carries a [`FencingToken`] that
/// strictly increases from holder to holder, and is cancelled by the session's watchdog as
/// soon as the lock may be lost.
///
/// `FencedLock` is cheap to clone, and clones share an **in-process queue**: tasks that acquire
/// through clones of one `FencedLock` first wait in a fair FIFO queue inside the process, and
/// only the task at its head contends in ZooKeeper. A busy process so keeps at most one node
/// in the lock's queue (not one per task), and every acquisition still gets its own node and
/// its own, strictly greater token. Separately created `FencedLock`s on one path are separate
/// contenders, each with its own node.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let lock = zkfence::FencedLock::new(client.clone(), "/locks/orders", zkfence::LockOptions::default())?;
/// let guard = lock.acquire().await?;
/// println!("holding {} with token {}", guard.node_path(), guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedLock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: zk::Client,
    path: Arc<str>,
    options: LockOptions,
    label: String,
    kind: Kind,
    /// The in-process queue of exclusive kinds: its holder is this process's one contender.
    local: Option<Arc<tokio::sync::Mutex<()>>>,
}

/// How long an acquire may wait in the queue.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Forever,
    Never,
    Until(Instant),
}

impl FencedLock {
    /// A lock on `path`, using `client`'s session. Nothing is sent to ZooKeeper yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a path ZooKeeper would refuse (relative, trailing `/`,
    /// empty segments, under `/zookeeper`, ...); [`Error::InvalidOptions`] for an empty ACL
    /// list.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let lock = zkfence::FencedLock::new(client, "/locks/orders", zkfence::LockOptions::default())?;
    /// # let _ = lock; Ok(()) }
    /// ```
    pub fn new(
        client: zk::Client,
        path: impl Into<String>,
        options: LockOptions,
    ) -> Result<FencedLock> {
        FencedLock::with_kind(client, path.into(), options, Kind::Mutex)
    }

    /// A contender of `kind` on `path`: the mutex, a reader or writer of a read/write lock, or
    /// a semaphore lease. Each kind is the same queue with its own "may I proceed?" predicate.
    pub(crate) fn with_kind(
        client: zk::Client,
        path: String,
        options: LockOptions,
        kind: Kind,
    ) -> Result<FencedLock> {
        recipe::validate_lock_path(&path)?;
        if options.acls.is_empty() {
            return Err(Error::InvalidOptions("the ACL list is empty; use zookeeper_client::Acls::anyone_all() or name at least one"));
        }
        if client.session().is_readonly() {
            return Err(Error::ReadOnlySession);
        }
        let bytes = create_request_bytes(client.path(), &path, &options);
        if bytes > MAX_REQUEST_BYTES {
            return Err(Error::RequestTooLarge {
                bytes,
                limit: MAX_REQUEST_BYTES,
            });
        }
        let t = client.session_timeout();
        if let Err(why) = options.lease.check_feasible(t) {
            return Err(Error::LeaseTooShort {
                session_timeout: t,
                tick: why.tick,
                needed: why.needed(&options.lease),
            });
        }
        let label = m::lock_label(&options.metrics_label);
        Ok(FencedLock {
            inner: Arc::new(Inner {
                client,
                path: path.into(),
                options,
                label,
                kind,
                local: kind
                    .exclusive()
                    .then(|| Arc::new(tokio::sync::Mutex::new(()))),
            }),
        })
    }

    /// The lock path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: zkfence::FencedLock) {
    /// assert_eq!(lock.path(), "/locks/orders");
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The client whose session contends for the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: zkfence::FencedLock) {
    /// println!("session {}", lock.client().session_id());
    /// # }
    /// ```
    pub fn client(&self) -> &zk::Client {
        &self.inner.client
    }

    /// Waits in the lock's fair FIFO queue until this contender holds the lock.
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
    ///
    /// No node of ours is left behind on any error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any await point leaves no node behind. The
    /// cleanup runs as its own task on the Tokio runtime (it deletes our node, or finds it by
    /// its UUID and our session if the create's reply had not arrived), so it does not depend
    /// on the cancelled caller.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let guard = lock.acquire().await?;
    /// println!("token {}", guard.token().as_u64());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard> {
        match self.acquire_with(Wait::Forever).await? {
            Some(guard) => Ok(guard),
            // Wait::Forever only returns with a guard or an error.
            None => Err(Error::ClientClosed),
        }
    }

    /// Takes the lock if nobody holds it or waits for it, without waiting. Returns `None`
    /// (and leaves no node behind: ours is deleted before this returns) when it is taken.
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
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// match lock.try_acquire().await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::Never).await
    }

    /// As [`acquire`](Self::acquire), but gives up after `timeout` and returns `None`; our
    /// node is deleted before this returns when the timeout hit while queued, or by the
    /// background cleanup when it hit while ZooKeeper was unreachable.
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
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(guard) = lock.acquire_timeout(std::time::Duration::from_secs(2)).await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_with(Wait::Until(Instant::now() + timeout))
            .await
    }

    /// Runs a critical section under the lock: acquires, runs `f`'s future, releases, and
    /// returns its output.
    ///
    /// The future is checked **before every poll**: once the lock is lost or its lease has
    /// lapsed by the monotonic clock, it is dropped without being polled again and `run`
    /// returns `Err(Error::LockLost(reason).into())`. After a process pause, no new step of the
    /// future starts, even if the watchdog task has not been scheduled yet. A step already
    /// running when the lock is lost cannot be stopped from here: fence your writes with
    /// [`Held::token`].
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
    /// # async fn put(_k: &str, _v: &str, _fence: u64) -> zkfence::Result<()> { Ok(()) }
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let out = lock
    ///     .run(|held| async move {
    ///         held.check()?;
    ///         put("key", "value", held.token().as_u64()).await
    ///     })
    ///     .await?;
    /// # let _: () = out; Ok(()) }
    /// ```
    pub async fn run<F, Fut, T, E>(&self, f: F) -> std::result::Result<T, E>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        let guard = self.acquire().await?;
        run_section(guard, f).await
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
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let done = lock
    ///     .run_timeout(std::time::Duration::from_secs(2), |held| async move {
    ///         held.check()?;
    ///         Ok::<_, zkfence::Error>(held.token().as_u64())
    ///     })
    ///     .await?;
    /// println!("{done:?}");
    /// # Ok(()) }
    /// ```
    pub async fn run_timeout<F, Fut, T, E>(
        &self,
        timeout: Duration,
        f: F,
    ) -> std::result::Result<Option<T>, E>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: From<Error>,
    {
        match self.acquire_timeout(timeout).await? {
            Some(guard) => run_section(guard, f).await.map(Some),
            None => Ok(None),
        }
    }

    /// The queue, in order: the holder first, then the waiters (for a read lock or a
    /// semaphore, several of the first nodes may hold). Includes Curator's and other clients'
    /// nodes named `…lock-<seq>`, `…__READ__<seq>`, `…__WRIT__<seq>` or `…lease-<seq>`.
    ///
    /// # Errors
    ///
    /// [`Error::NoParent`] when the lock path does not exist (nobody has used it, or it was
    /// reaped), ZooKeeper errors otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let queue = lock.contenders().await?;
    /// if let Some(holder) = queue.first() {
    ///     println!("holder {} token {}", holder.node, holder.token.as_u64());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        let client = &self.inner.client;
        let path = &*self.inner.path;
        let session = client.session_id();
        let mut attempt = 0;
        let children = loop {
            match client.list_children(path).await {
                Ok(children) => break children,
                Err(zk::Error::NoNode) => {
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    })
                }
                Err(err) if recipe::is_connection_error(&err) => {
                    recipe::await_reconnect(client, &mut attempt).await?
                }
                Err(err) => return Err(Error::zk("list", path, session, err)),
            }
        };
        let ordered = recipe::queue_order(children);
        let mut out = Vec::with_capacity(ordered.len());
        // One multi-read per chunk keeps replies far below the server's 1 MiB jute.maxbuffer.
        for chunk in ordered.chunks(256) {
            let results = loop {
                let mut reader = client.new_multi_reader();
                for (name, _) in chunk {
                    let node = child_path(path, name);
                    reader
                        .add_get_data(&node)
                        .map_err(|e| Error::zk("get", &node, session, e))?;
                }
                match reader.commit().await {
                    Ok(results) => break results,
                    Err(err) if recipe::is_connection_error(&err) => {
                        recipe::await_reconnect(client, &mut attempt).await?
                    }
                    Err(err) => return Err(Error::zk("get", path, session, err)),
                }
            };
            for ((name, seq), result) in chunk.iter().zip(results) {
                // A node that vanished between the listing and the read is no longer queued.
                if let zk::MultiReadResult::Data { data, stat } = result {
                    out.push(Contender {
                        node: name.clone(),
                        token: FencingToken::new(*seq, stat.czxid as u64),
                        session_id: zk::SessionId(stat.ephemeral_owner),
                        data,
                        created_ms: stat.ctime,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Sets the lock node's own data (creating it and its parents as persistent nodes, with
    /// this lock's ACLs, when missing), retried across ConnectionLoss. For the semaphore's
    /// stored count.
    pub(crate) async fn store_data(&self, data: &[u8]) -> Result<()> {
        let client = &self.inner.client;
        let path = &*self.inner.path;
        let mut attempt = 0;
        let mut created = false;
        loop {
            match client.set_data(path, data, None).await {
                Ok(_) => return Ok(()),
                Err(zk::Error::NoNode) if !created => {
                    created = true;
                    recipe::create_parents(
                        client,
                        path,
                        zk::CreateMode::Persistent,
                        &self.inner.options.acls,
                    )
                    .await?;
                }
                Err(err) if recipe::is_connection_error(&err) => {
                    recipe::await_reconnect(client, &mut attempt).await?
                }
                Err(err) => return Err(Error::zk("set", path, client.session_id(), err)),
            }
        }
    }

    async fn acquire_with(&self, wait: Wait) -> Result<Option<LockGuard>> {
        let client = &self.inner.client;
        let span = tracing::debug_span!(
            "acquire",
            lock_path = %self.inner.path,
            kind = self.inner.kind.name(),
            session_id = %client.session_id(),
            fencing_token = tracing::field::Empty,
            node = tracing::field::Empty,
        );
        let started = Instant::now();
        let queued = self.queue(wait).instrument(span.clone());
        let result = match wait {
            // The protocol honours the deadline itself and deletes our node before returning;
            // this bound only matters while ZooKeeper is unreachable (then the node, if any,
            // is deleted in the background).
            Wait::Until(deadline) => {
                tokio::time::timeout_at(deadline + Duration::from_secs(1), queued)
                    .await
                    .unwrap_or(Ok(None))
            }
            _ => queued.await,
        };
        let outcome = match &result {
            Ok(Some(guard)) => {
                span.record("fencing_token", tracing::field::display(guard.token()));
                span.record("node", guard.node_path());
                ::metrics::counter!(m::ACQUISITIONS_TOTAL, "lock" => self.inner.label.clone())
                    .increment(1);
                tracing::debug!(parent: &span, waited_ms = started.elapsed().as_secs_f64() * 1e3, "acquired");
                "acquired"
            }
            Ok(None) if matches!(wait, Wait::Never) => "busy",
            Ok(None) => "timeout",
            Err(err) => {
                tracing::debug!(parent: &span, cause = %err, "acquire failed");
                "error"
            }
        };
        ::metrics::histogram!(m::ACQUIRE_DURATION_SECONDS, "outcome" => outcome, "lock" => self.inner.label.clone())
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Waits in the in-process queue for this process's turn to contend in ZooKeeper.
    /// `Ok(None)` when this kind has no in-process queue (readers, semaphore leases);
    /// `Err(Busy)` when the turn did not come (`Wait::Never`, or the deadline passed).
    async fn local_turn(&self, wait: Wait) -> std::result::Result<Option<LocalTurn>, Busy> {
        let Some(gate) = self.inner.local.clone() else {
            return Ok(None);
        };
        if let Ok(turn) = gate.clone().try_lock_owned() {
            return Ok(Some(turn));
        }
        let _waiting = m::LocalWaiter::new(&self.inner.label);
        match wait {
            Wait::Never => Err(Busy),
            Wait::Forever => Ok(Some(gate.lock_owned().await)),
            Wait::Until(deadline) => tokio::time::timeout_at(deadline, gate.lock_owned())
                .await
                .map(Some)
                .map_err(|_| Busy),
        }
    }

    /// The protocol: create (with the listing pipelined behind it), then wait on the nodes
    /// the kind's predicate names until it lets us proceed.
    async fn queue(&self, wait: Wait) -> Result<Option<LockGuard>> {
        let inner = &*self.inner;
        let client = &inner.client;
        let path = &*inner.path;
        let session = client.session_id();
        if let Some(err) = Error::from_session_state(client.state(), session) {
            return Err(err);
        }
        let Ok(local) = self.local_turn(wait).await else {
            return Ok(None);
        };
        let interest = watchdog::watch_session(client, &inner.options.lease, path);
        let lease = interest.watch().lease();
        let prefix = recipe::protected_prefix(&uuid::Uuid::new_v4(), inner.kind);
        let mark = inner.options.lock_delay.is_some();
        let mut pending = PendingNode {
            client: client.clone(),
            parent: path.into(),
            prefix,
            node: None,
            armed: true,
            mark,
        };
        let create_path = child_path(path, &pending.prefix);
        let create_options =
            zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&inner.options.acls));

        // Create our node; the listing rides right behind it on the session.
        let mut attempt = 0;
        let mut parent_attempts = 0;
        let mut permits = None;
        let (name, stat, mut listing) = loop {
            if let Wait::Until(deadline) = wait {
                if Instant::now() >= deadline {
                    return Ok(None); // `pending` cleans up whatever may have been created
                }
            }
            let sent = Instant::now();
            let create = client.create(&create_path, &inner.options.data, &create_options);
            let list = client.list_children(path);
            // A semaphore reads its stored permit count in the same round trip.
            let stored = matches!(inner.kind, Kind::Semaphore(_)).then(|| client.get_data(path));
            let created = create.await;
            if let Err(err) = &created {
                if crate::lease::answered_by_server(err) {
                    // Refused by a server, which so saw the session: a reply for the lease.
                    lease.replied(sent, Instant::now());
                }
            }
            let listed = list.await;
            if let Some(stored) = stored {
                permits = stored.await.ok();
            }
            match created {
                Ok((stat, sequence)) => {
                    // A committed write: a proof for the lease (see `crate::lease`).
                    lease.committed(sent, Instant::now());
                    break (format!("{}{sequence}", pending.prefix), stat, listed.ok());
                }
                Err(zk::Error::NoNode) if inner.options.create_parents && parent_attempts < 8 => {
                    pending.armed = false; // nothing was created
                    parent_attempts += 1;
                    let mode = match inner.options.parent_mode {
                        ParentMode::Container => zk::CreateMode::Container,
                        ParentMode::Persistent => zk::CreateMode::Persistent,
                    };
                    recipe::create_parents(client, path, mode, &inner.options.acls).await?;
                    pending.armed = true;
                }
                Err(zk::Error::NoNode) => {
                    pending.armed = false;
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    });
                }
                Err(err) if recipe::is_connection_error(&err) => {
                    recipe::await_reconnect(client, &mut attempt).await?;
                    if let Some((name, stat)) =
                        recipe::find_own_node(client, path, &pending.prefix).await?
                    {
                        break (name, stat, None);
                    }
                }
                Err(err) => {
                    // The server refused the create: nothing of ours exists.
                    pending.armed = false;
                    return Err(Error::zk("create", path, session, err));
                }
            }
        };
        let own_path = child_path(path, &name);
        pending.node = Some(own_path.clone());
        let Some(sequence) = recipe::parse_sequence(&name) else {
            return Err(Error::ZooKeeper {
                op: "create",
                path: own_path,
                source: zk::Error::UnexpectedError(format!(
                    "the server named our node {name:?}, without a 32-bit sequence"
                )),
            });
        };
        if stat.czxid <= 0 {
            pending.remove().await?;
            return Err(Error::ZooKeeper {
                op: "create",
                path: own_path,
                source: zk::Error::UnexpectedError(
                    "the server returned no Stat for our node (ZooKeeper before 3.5?); zkfence needs it for the fencing token".into(),
                ),
            });
        }
        let token = FencingToken::new(sequence, stat.czxid as u64);
        tracing::Span::current().record("node", own_path.as_str());
        if let Kind::Semaphore(requested) = inner.kind {
            if let Err(err) = agree_on_permits(client, path, requested, permits).await {
                pending.remove().await?;
                return Err(err);
            }
        }

        // Wait until the kind's predicate lets us proceed. While waiting we also watch our own
        // node (sent with the first round of watches, so it costs no extra round trip): if
        // someone deletes it, we fail instead of taking a lock we no longer queue for. The
        // watch is then handed to the watchdog, which keeps watching the node for the guard.
        let mut own_watch: Option<NodeWatch> = None;
        let deadline = match wait {
            Wait::Until(deadline) => Some(deadline),
            _ => None,
        };
        // A node we waited on vanished without a release (lock-delay applies).
        let mut vanished = false;
        let mut attempt = 0;
        loop {
            let children = match listing.take() {
                Some(children) => children,
                None => {
                    // A listing is a read, which a follower cut off from the leader still
                    // answers: it proves nothing for the lease (committed writes do).
                    match client.list_children(path).await {
                        Ok(children) => children,
                        Err(zk::Error::NoNode) => {
                            return Err(node_deleted_while_waiting(client, path, own_path).await)
                        }
                        Err(err) if recipe::is_connection_error(&err) => {
                            recipe::await_reconnect(client, &mut attempt).await?;
                            continue;
                        }
                        Err(err) => return Err(Error::zk("list", path, session, err)),
                    }
                }
            };
            // A create retried after a lost reply may have landed twice: any other node with
            // our UUID is ours, and must not sort before us as if it were someone else's.
            let duplicates: Vec<&String> = children
                .iter()
                .filter(|c| c.starts_with(&pending.prefix) && **c != name)
                .collect();
            if !duplicates.is_empty() {
                for duplicate in duplicates {
                    recipe::delete_node(client, &child_path(path, duplicate), mark).await?;
                }
                continue; // list again without them
            }
            let position = inner.kind.position(&children, &name, sequence);
            if !position.present {
                return Err(node_deleted_while_waiting(client, path, own_path).await);
            }
            if position.blocking == 0 {
                break;
            }
            if let Wait::Never = wait {
                pending.remove().await?;
                return Ok(None);
            }
            let own = own_watch
                .is_none()
                .then(|| client.check_and_watch_stat(&own_path));
            // Exists watches: unlike getData they need no READ permission on others' nodes.
            // All of them go out back to back (one round trip).
            let targets: Vec<String> = position.watch.iter().map(|n| child_path(path, n)).collect();
            let sent: Vec<_> = targets
                .iter()
                .map(|t| client.check_and_watch_stat(t))
                .collect();
            if let Some(own) = own {
                match own.await {
                    Ok((Some(_), watcher)) => {
                        own_watch = Some(Box::pin(watchdog::watch_changed(watcher)))
                    }
                    Ok((None, _)) => {
                        return Err(node_deleted_while_waiting(client, path, own_path).await)
                    }
                    Err(err) if recipe::is_connection_error(&err) => {
                        recipe::await_reconnect(client, &mut attempt).await?;
                        continue;
                    }
                    Err(err) => return Err(Error::zk("watch", &own_path, session, err)),
                }
            }
            let mut watchers: Vec<NodeWatch> = Vec::with_capacity(sent.len());
            let mut gone = false;
            let mut failed = None;
            for (target, reply) in targets.iter().zip(sent) {
                match reply.await {
                    Ok((Some(_), watcher)) => {
                        watchers.push(Box::pin(watchdog::watch_changed(watcher)))
                    }
                    // Gone between the listing and the watch (whether released or not is
                    // unknown: no lock-delay). The creation watch exists armed is dropped;
                    // the client removes it.
                    Ok((None, _)) => gone = true,
                    Err(err) => {
                        failed.get_or_insert((target, err));
                    }
                }
            }
            if let Some((target, err)) = failed {
                if recipe::is_connection_error(&err) {
                    recipe::await_reconnect(client, &mut attempt).await?;
                    continue;
                }
                return Err(Error::zk("watch", target, session, err));
            }
            if gone {
                // If it was the only blocker, nothing can block us now; else list again.
                if position.blocking == 1 {
                    break;
                }
                continue;
            }
            let own_changed = own_watch.as_mut().expect("own watch is set before waiting");
            let woke = tokio::select! {
                biased;
                event = own_changed => {
                    own_watch = None;
                    Woke::Own(event)
                }
                (event, _, _) = futures_util::future::select_all(watchers) => Woke::Blocker(event),
                _ = sleep_until_opt(deadline) => Woke::Timeout,
            };
            let event = match woke {
                Woke::Timeout => {
                    pending.remove().await?;
                    return Ok(None);
                }
                Woke::Own(event) if event.event_type == zk::EventType::NodeDeleted => {
                    return Err(node_deleted_while_waiting(client, path, own_path).await);
                }
                Woke::Own(event) | Woke::Blocker(event) => event,
            };
            match event.event_type {
                zk::EventType::NodeDeleted => {
                    // Released nodes announce themselves with a data change first when
                    // lock-delay is on; this one just vanished. Any such node counts, not
                    // only the last blocker: one failed session often owns several nodes
                    // (a holder and a waiter), and the waiter's deletion may be the one we
                    // see. Erring this way delays a successor of a failed waiter too.
                    vanished |= mark;
                    // The zero-round-trip handoff: our last listing showed it as the only
                    // blocker, and nothing new can sort before us.
                    if position.blocking == 1 {
                        break;
                    }
                }
                zk::EventType::Session => {
                    if let Some(err) = Error::from_session_state(event.session_state, session) {
                        return Err(err);
                    }
                }
                _ => {} // a release marker (data changed), or own-node noise: list again
            }
        }
        if let (true, Some(delay)) = (vanished, inner.options.lock_delay) {
            // A holder ahead of us failed rather than released: give its stalled work time
            // to end before ours starts (bounded by our own deadline).
            let until = Instant::now() + delay;
            // If we give up during the delay, our node goes without the release marker, so
            // our successor inherits the delay instead of walking straight in.
            pending.mark = false;
            tracing::debug!(
                delay_ms = delay.as_millis() as u64,
                "lock-delay: a node ahead vanished without a release"
            );
            ::metrics::counter!(m::LOCK_DELAYS_TOTAL, "lock" => inner.label.clone()).increment(1);
            if deadline.is_some_and(|d| d < until) {
                sleep_until_opt(deadline).await;
                pending.remove().await?;
                return Ok(None);
            }
            tokio::time::sleep_until(until).await;
        }

        pending.armed = false;
        let watch = interest.watch();
        let budget = inner.options.lease.budget(watch.session_timeout());
        let state = GuardState::new(watch, budget, inner.options.ride_out, inner.label.clone());
        let guard = LockGuard::new(
            client.clone(),
            inner.path.clone(),
            own_path,
            token,
            watch.interest(),
            state,
            crate::guard::Handoff {
                node_watch: own_watch,
                mark,
                local,
            },
        );
        Ok(Some(guard))
    }
}

/// The largest create request zkfence sends: ZooKeeper's default `jute.maxbuffer` (1 MiB − 1),
/// less room for what the leader adds when it turns the request into a transaction
/// (`TxnHeader`, the digest) and forwards it to its followers.
const MAX_REQUEST_BYTES: usize = 0xfffff - 1024;

/// The serialized size of our create request: header, path (chroot, lock path, protected
/// name), data, ACLs and flags, as jute writes them (a length before every string).
fn create_request_bytes(chroot: &str, path: &str, options: &LockOptions) -> usize {
    let name = "/_c_00000000-0000-0000-0000-000000000000-__WRIT__0000000000";
    let acls: usize = options
        .acls
        .iter()
        .map(|acl| 4 + 4 + acl.scheme().len() + 4 + acl.id().len())
        .sum();
    4 + 8 + (4 + chroot.len() + path.len() + name.len()) + (4 + options.data.len()) + 4 + acls + 4
}

/// The error for our queue node gone while waiting: the session's own error if the deletion
/// was its expiry, [`Error::NodeDeletedWhileWaiting`] if someone deleted the node.
async fn node_deleted_while_waiting(client: &zk::Client, path: &str, node: String) -> Error {
    match recipe::session_alive(client, path).await {
        Ok(()) => Error::NodeDeletedWhileWaiting { node },
        Err(err) => err,
    }
}

/// A pending `OneshotWatcher::changed()` on a node.
pub(crate) type NodeWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// A task's turn at the head of a lock's in-process queue.
pub(crate) type LocalTurn = tokio::sync::OwnedMutexGuard<()>;

/// The in-process queue's turn did not come in time.
struct Busy;

enum Woke {
    Own(zk::WatchedEvent),
    Blocker(zk::WatchedEvent),
    Timeout,
}

/// Makes all clients of a semaphore agree on its permit count: the count stored in the
/// semaphore node's data. The first client stores its own (a versioned set, so two first
/// clients cannot both win); later ones must match it.
async fn agree_on_permits(
    client: &zk::Client,
    path: &str,
    requested: u32,
    mut read: Option<(Vec<u8>, zk::Stat)>,
) -> Result<()> {
    let session = client.session_id();
    let mut attempt = 0;
    loop {
        let (data, stat) = match read.take() {
            Some(read) => read,
            None => match client.get_data(path).await {
                Ok(read) => read,
                Err(err) if recipe::is_connection_error(&err) => {
                    recipe::await_reconnect(client, &mut attempt).await?;
                    continue;
                }
                Err(err) => return Err(Error::zk("get", path, session, err)),
            },
        };
        if data.is_empty() {
            let value = requested.to_string();
            match client
                .set_data(path, value.as_bytes(), Some(stat.version))
                .await
            {
                Ok(_) => return Ok(()),
                Err(zk::Error::BadVersion) => continue, // another client stored first
                Err(err) if recipe::is_connection_error(&err) => {
                    recipe::await_reconnect(client, &mut attempt).await?;
                    continue;
                }
                Err(err) => return Err(Error::zk("set", path, session, err)),
            }
        }
        let stored = std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        return match stored {
            Some(stored) if stored == requested => Ok(()),
            Some(stored) => Err(Error::PermitsMismatch {
                path: path.to_owned(),
                stored,
                requested,
            }),
            None => Err(Error::PermitsMismatch {
                path: path.to_owned(),
                stored: 0,
                requested,
            }),
        };
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Runs `f`'s future under `guard`, checking the lock before every poll; releases after.
async fn run_section<F, Fut, T, E>(guard: LockGuard, f: F) -> std::result::Result<T, E>
where
    F: FnOnce(Held) -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: From<Error>,
{
    let held = guard.held();
    let cancelled = Box::pin(held.cancellation_token().cancelled_owned());
    let section = Fenced {
        future: Some(Box::pin(f(guard.held()))),
        held,
        cancelled,
    };
    match section.await {
        SectionEnd::Done(out) => {
            let released = guard.release().await;
            match (out, released) {
                (Ok(value), Ok(())) => Ok(value),
                (Ok(_), Err(err)) => Err(err.into()),
                (Err(err), _) => Err(err),
            }
        }
        SectionEnd::Lost(reason) => {
            // The node may still be ours (e.g. a disconnect we did not ride out): delete it.
            let _ = guard.release().await;
            Err(Error::LockLost(reason).into())
        }
        SectionEnd::Panicked(payload) => {
            let _ = guard.release().await;
            std::panic::resume_unwind(payload)
        }
    }
}

enum SectionEnd<O> {
    Done(O),
    Lost(LossReason),
    Panicked(Box<dyn std::any::Any + Send>),
}

/// Polls the critical section only while the lock holds; drops it the moment it does not.
struct Fenced<Fut> {
    held: Held,
    /// Wakes the section on loss, so one waiting on something slow is dropped promptly.
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    future: Option<Pin<Box<Fut>>>,
}

impl<Fut: Future> Future for Fenced<Fut> {
    type Output = SectionEnd<Fut::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Registers the waker before the check, so a loss between the two still wakes us.
        let _ = this.cancelled.as_mut().poll(cx);
        if let Err(reason) = this.held.loss_check() {
            this.future = None;
            return Poll::Ready(SectionEnd::Lost(reason));
        }
        let Some(future) = this.future.as_mut() else {
            return Poll::Ready(SectionEnd::Lost(LossReason::Released));
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => {
                this.future = None;
                Poll::Ready(SectionEnd::Done(out))
            }
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                this.future = None;
                Poll::Ready(SectionEnd::Panicked(payload))
            }
        }
    }
}

/// Our queue node until it is handed to a guard: deleted on every other way out, including
/// the acquire future being dropped.
struct PendingNode {
    client: zk::Client,
    parent: String,
    /// `_c_<uuid>-lock-`: finds the node when the create's reply was lost.
    prefix: String,
    /// Full path once the create's reply arrived.
    node: Option<String>,
    /// Whether something of ours may exist and must be cleaned up.
    armed: bool,
    /// Delete with the release marker (lock-delay is on).
    mark: bool,
}

impl PendingNode {
    /// Deletes our node now (awaited), for `try_acquire` and timeouts.
    ///
    /// Stays armed until the delete is confirmed: if this future is dropped while it waits for
    /// a reconnect, or the delete fails, the drop cleans up in the background.
    async fn remove(&mut self) -> Result<()> {
        match &self.node {
            Some(node) => recipe::delete_node(&self.client, node, self.mark)
                .await
                .map(|_| ())?,
            None => remove_by_prefix(&self.client, &self.parent, &self.prefix, self.mark).await?,
        }
        self.armed = false;
        Ok(())
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let mark = self.mark;
        match self.node.take() {
            Some(node) => spawn_cleanup(client, node, mark, None),
            None => {
                let (parent, prefix) = (
                    std::mem::take(&mut self.parent),
                    std::mem::take(&mut self.prefix),
                );
                spawn_task(async move {
                    let outcome = match remove_by_prefix(&client, &parent, &prefix, mark).await {
                        Ok(()) => "deleted",
                        Err(_) => "failed",
                    };
                    ::metrics::counter!(m::BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome)
                        .increment(1);
                });
            }
        }
    }
}

/// Deletes every node of ours with `prefix` (a create retried after a lost reply can have
/// landed twice).
async fn remove_by_prefix(
    client: &zk::Client,
    parent: &str,
    prefix: &str,
    mark: bool,
) -> Result<()> {
    while let Some((name, _)) = recipe::find_own_node(client, parent, prefix).await? {
        recipe::delete_node(client, &child_path(parent, &name), mark).await?;
    }
    Ok(())
}

/// Deletes `node` in a task of its own (retrying across ConnectionLoss), with the release
/// marker when `mark`.
///
/// `local`, the in-process queue turn of a dropped guard, is given up only once the delete is
/// done, so the process's next contender does not queue behind its own stale node.
pub(crate) fn spawn_cleanup(
    client: zk::Client,
    node: String,
    mark: bool,
    local: Option<LocalTurn>,
) {
    spawn_task(async move {
        let _local = local;
        let outcome = match recipe::delete_node(&client, &node, mark).await {
            Ok(recipe::Deleted::Confirmed) => "deleted",
            Ok(recipe::Deleted::Absent) => "absent",
            Ok(recipe::Deleted::Unconfirmed) => "unconfirmed",
            Err(err) => {
                tracing::debug!(%node, cause = %err, "background delete failed; the node goes with the session");
                "failed"
            }
        };
        ::metrics::counter!(m::BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome).increment(1);
    });
}

fn spawn_task(task: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(task);
        }
        Err(_) => tracing::warn!(
            "no tokio runtime at drop; the lock node is removed when the session ends"
        ),
    }
}
