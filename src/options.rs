//! [`LockOptions`] and [`ParentMode`]: how a lock names, creates and protects its nodes, and
//! how its lease is computed.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use crate::mutants::Flaw;
use crate::watchdog::lease::LeasePolicy;

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

/// How a [`FencedLock`](crate::FencedLock) creates its nodes and watches its lease. Built with `with_*` methods
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
    pub(crate) data: Vec<u8>,
    /// ACLs of the lock node and of parents we create.
    pub(crate) acls: Vec<zk::Acl>,
    /// Whether missing parents are created rather than reported.
    pub(crate) create_parents: bool,
    pub(crate) parent_mode: ParentMode,
    /// Whether a disconnect cancels at once (false) or only once the lease lapses (true).
    pub(crate) ride_out: bool,
    /// How long a hold may stay in jeopardy before it is lost (zero: no jeopardy).
    pub(crate) grace: Duration,
    /// Whether a task that holds the lock may acquire it again (nested holds).
    pub(crate) reentrant: bool,
    pub(crate) lease: LeasePolicy,
    pub(crate) metrics_label: Option<Arc<str>>,
    /// How long a successor waits after a predecessor vanished without releasing.
    pub(crate) lock_delay: Option<Duration>,
    /// The most bytes of lock node paths one session may keep (reconnects, ZOOKEEPER-4306).
    pub(crate) session_node_bytes: usize,
    /// A deliberate flaw, for zkfence's own tests (see `crate::mutants`); none in a service.
    pub(crate) flaw: Flaw,
}

/// The default of [`LockOptions::with_session_node_bytes`]: half of ZooKeeper's default
/// `jute.maxbuffer` (1 MiB), which a session's close-session transaction, listing the paths of
/// all its ephemeral nodes, must fit (ZOOKEEPER-4306). About 5,500 locks of 30-byte lock paths.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::SESSION_NODE_BYTES, 512 * 1024);
/// ```
pub const SESSION_NODE_BYTES: usize = 512 * 1024;

/// The most bytes of paths the watches of one session's acquires may take while they wait: an
/// acquire that may wait counts four times its node's path (its predecessor's data and child
/// watches, its own node's and its herald's; `2n + 2` times for a semaphore of `n` with
/// lock-delay, which watches its `n` nearest) from its start to its grant, and one past the
/// budget fails at once with [`Error::SessionWatchBudget`](crate::Error::SessionWatchBudget).
/// About 180 acquires of 30-byte lock paths in progress at once per session; `try_acquire`
/// counts nothing.
///
/// **Why:** after a disconnect `zookeeper-client` 0.11 sets a session's watches again in
/// `SetWatches` requests of at most 128 KiB of paths, and when it needs two it mismatches
/// their replies and drops the connection, every time, until the session expires. The held
/// nodes' watches take at most [`HOLD_WATCH_BYTES`](crate::HOLD_WATCH_BYTES) (a hold past it is read back once a probe
/// period instead), these at most this, and 16 KiB is left for the application's own.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::WAITING_WATCH_BYTES, 64 * 1024);
/// ```
pub const WAITING_WATCH_BYTES: usize = 64 * 1024;

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
            grace: Duration::ZERO,
            reentrant: false,
            lease: LeasePolicy::default(),
            metrics_label: None,
            lock_delay: None,
            session_node_bytes: SESSION_NODE_BYTES,
            flaw: Flaw::default(),
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

    /// The ACLs of our lock node and of any parents we create (default world:anyone, all):
    /// `&Acls::creator_all()`, a `&Vec<Acl>`, an array.
    ///
    /// # Examples
    ///
    /// ```
    /// use zookeeper_client::Acls;
    /// let options = zkfence::LockOptions::default().with_acls(&Acls::creator_all());
    /// # let _ = options;
    /// ```
    pub fn with_acls(mut self, acls: &[zk::Acl]) -> Self {
        self.acls = acls.to_vec();
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

    /// A grace period, after Chubby's (default zero: off). With a grace, a lease that lapses
    /// with no evidence that the lock is lost puts the hold in **jeopardy** instead of ending
    /// it: [`check`](crate::Held::check) fails at once with [`Error::Jeopardy`](crate::Error::Jeopardy),
    /// [`jeopardy`](crate::Held::jeopardy) reads `true`, and a section under
    /// [`run`](crate::Acquire::run) is not polled; but the cancellation token does **not**
    /// fire. When a committed probe of the watchdog finds the guard's node again, and the
    /// lease holds again, the hold resumes ([`steady`](crate::Held::steady) returns). If the
    /// grace runs out first, or the session expires, or the node is deleted, the hold is lost
    /// and the token fires. The argument that resuming is safe is in the lease module
    /// (`src/watchdog/lease/mod.rs`, "Jeopardy").
    ///
    /// It keeps holds through what routinely outlasts a lease: a leader that goes silent until
    /// the followers elect another (`syncLimit · tickTime`), a leader's long GC pause, a
    /// rolling restart, an fsync stall. A grace of `T` rides out all of these at `T = 10 s`
    /// (the chaos suite's needless-cancel figures). Without ride-out a disconnect puts the hold
    /// in jeopardy at once (it resumes once the session proves itself again); with ride-out a
    /// disconnect changes nothing until the lease lapses.
    ///
    /// **Work that only watches the cancellation token must not use a grace**: in jeopardy the
    /// token stays quiet while the lease no longer vouches for the lock. Work under a grace
    /// calls `check()` before each side effect (or awaits `steady()`), or runs under
    /// [`run`](crate::Acquire::run), which stops polling it while in jeopardy.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = zkfence::LockOptions::default().with_grace(Duration::from_secs(10));
    /// assert_eq!(options.grace(), Duration::from_secs(10));
    /// ```
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Reentrancy, as Apache Curator's `InterProcessMutex` (and Hazelcast's `FencedLock`) has
    /// it; off by default. With it, an acquire (any of `acquire`, `try_acquire`,
    /// `acquire_timeout`, `run`) by the task that holds the lock returns at once another guard
    /// with the **same token**, sending nothing; the node is deleted only when the last of the
    /// nested guards ends (release or drop), and a loss cancels them all. A lost hold has
    /// nothing to re-enter: while one of its guards lives, the task's acquire fails at once
    /// with [`Error::LockLost`](crate::Error::LockLost) (drop the guards, then acquire again)
    /// rather than wait behind the lost node. "The task that holds
    /// it" is the tokio task that acquired it (see [`LockGuard::adopt`](crate::LockGuard::adopt)
    /// for a guard moved to another task), across clones of one lock and across locks built on
    /// the same path and session. Without it such an acquire fails at once with
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) instead of waiting for itself. A
    /// read/write lock's writer may take the read lock either way (a downgrade); a reader never
    /// gets the write lock (an upgrade can deadlock two readers).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_reentrant(true);
    /// assert!(options.reentrant());
    /// ```
    pub fn with_reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Whether the lock is reentrant.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!zkfence::LockOptions::default().reentrant());
    /// ```
    pub fn reentrant(&self) -> bool {
        self.reentrant
    }

    /// The grace period (zero when off).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence::LockOptions::default().grace().is_zero());
    /// ```
    pub fn grace(&self) -> Duration {
        self.grace
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
    /// sent (the crate docs' "The lease, in short"): a shorter tick gives a fresher lease. Give the real value or a larger one, never a smaller one.
    /// Set it when your servers' `minSessionTimeout` is below `2·tickTime`; to gain lease time
    /// when the tick is well below `T/2`; larger than the real tick to cover leader pauses
    /// (a tick of `2X` covers pauses up to `X`); and at twice the real tick for clients of
    /// observers behind an `ObserverMaster`. Settings that leave no room to renew the lease (a
    /// tick close to `T`) are refused by [`FencedLock::new`](crate::FencedLock::new) with
    /// [`Error::LeaseTooShort`](crate::Error::LeaseTooShort).
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

    /// **For zkfence's own tests; never in a service.** Builds this lock with `mutant`'s
    /// deliberate flaw, which a test or chaos scenario must catch (the list, and what catches
    /// each, is in the `mutants` module). Only built with the `mutants` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::{LockOptions, Mutant};
    /// let mutant = LockOptions::default().with_mutant(Mutant::AnyReleaseAdmits);
    /// # let _ = mutant;
    /// ```
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: crate::mutants::Mutant) -> Self {
        self.flaw = Flaw::of(mutant);
        self.lease.flaw = self.flaw;
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
    /// How a successor tells the two apart: with this option on, every release deletes the
    /// node in a multi that first sets its data to `released` (the marker the handoff protocol
    /// also uses, see the crate's "Protocol"), so the successor's watch sees a data change
    /// instead of the deletion; a node that just vanishes was not released. The cost: a
    /// release that would otherwise be a plain delete (a holder that found the queue empty,
    /// a reader, a semaphore holder) sends one multi (two operations, one commit). Every
    /// contender of a lock should use the same setting; a holder without it may release with
    /// a plain delete, which its delaying successors take for a failure.
    ///
    /// A delay is decided by the change that lets the successor proceed: a plain deletion of
    /// the node it watched, when nothing else blocks it then. A failure costs one delay: the
    /// delayed holder's own release is marked, so the waiter behind it is not delayed again.
    /// A waiter of a mutex or writer that gives up deletes its node plainly (a marker there
    /// would read as a holder's release); its successor lists the queue again and is delayed
    /// only if nothing else is ahead by then.
    ///
    /// It errs towards delaying. A successor is also delayed when the node that vanished was a
    /// waiter (not the holder) whose session ended with nothing else ahead, and when it was
    /// disconnected while the release happened (on reconnect the server reports the deletion,
    /// not the marker). It is not delayed when the node vanished in the one round trip between
    /// its listing and its watch, nor when it arrives after a failed holder's node is already
    /// gone (that node outlived the holder's last contact by a whole session timeout). The
    /// marker is a write: the lock nodes' ACL must grant the creator WRITE (the default ACL
    /// does); without it a release falls back to a plain delete.
    ///
    /// A delayed waiter reads its own node once more after the delay (one round trip) and
    /// fails with [`Error::NodeDeletedWhileWaiting`](crate::Error::NodeDeletedWhileWaiting)
    /// (or the session's error) if it is gone: the failure it waited out may have been its own
    /// session's, closed from outside with all its nodes in one transaction.
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

    /// The most bytes of lock node paths one session may keep at once, across every lock it
    /// holds or waits for in this process (default [`SESSION_NODE_BYTES`], 512 KiB). An acquire
    /// past it fails at once with [`Error::SessionNodeBudget`](crate::Error::SessionNodeBudget).
    ///
    /// **Why** (ZOOKEEPER-4306, open): when a session ends, its leader deletes all of its
    /// ephemeral nodes in one close-session transaction that lists their paths (4 bytes and the
    /// path each). Past the servers' `jute.maxbuffer` (1 MiB by default) that transaction cannot
    /// be written, and the ensemble can wedge, also across restarts.
    ///
    /// A lock node's path is the lock path, `/`, and about 60 bytes of name
    /// (`_c_<uuid>-lock-<seq>`): with 30-byte lock paths, 512 KiB is about 5,500 locks per
    /// session. For more, raise the servers' `jute.maxbuffer` and this with it, never past half
    /// of it (10,000 locks of 30-byte paths want about 1 MiB here and 2 MiB there), or spread
    /// the locks over several sessions (a client each).
    ///
    /// Reconnects do not limit holds: the watchdog keeps at most [`HOLD_WATCH_BYTES`](crate::HOLD_WATCH_BYTES) of held
    /// nodes watched, and reads the rest back once a probe period. Waiting acquires are limited
    /// apart, by [`WAITING_WATCH_BYTES`].
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence::LockOptions::default().with_session_node_bytes(64 * 1024);
    /// assert_eq!(options.session_node_bytes(), 64 * 1024);
    /// ```
    pub fn with_session_node_bytes(mut self, bytes: usize) -> Self {
        self.session_node_bytes = bytes;
        self
    }

    /// See [`with_session_node_bytes`](Self::with_session_node_bytes).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::LockOptions::default().session_node_bytes(), zkfence::SESSION_NODE_BYTES);
    /// ```
    pub fn session_node_bytes(&self) -> usize {
        self.session_node_bytes
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
