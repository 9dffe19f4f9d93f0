//! The lease watchdog: one task per ZooKeeper session that cancels the guards held on it as
//! soon as their lock may be gone.
//!
//! # What it watches
//!
//! - **Session events**, from a persistent watch (every Disconnected/SyncConnected/Expired is
//!   delivered, even a quick flap that `zookeeper-client`'s latest-value state channel would
//!   hide) and from the state channel as a backstop.
//! - **Each guard's own node**, with a data watch: deleted by an admin or a parent cleanup
//!   means [`LossReason::NodeDeleted`].
//! - **The lease** ([`crate::lease`]): `anchor + T·(1 − drift) − margin`, the anchor moved
//!   only by committed writes paired with an earlier reply. The watchdog keeps the proofs
//!   coming with a probe: a `multi` holding one `check` of a held node, sent a pair gap after
//!   the newest reply, which also finds a node that is gone.
//!
//! The lease is stored as an atomic next to the guards, so [`LockGuard::check`] compares it
//! with the monotonic clock synchronously: after a process pause (which `CLOCK_MONOTONIC`
//! keeps counting through) the check fails at once, before the watchdog task has even been
//! scheduled.
//!
//! [`LockGuard::check`]: crate::Held::check

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::lease::{LeaseCell, LeasePolicy};
use crate::metrics as m;

/// Why a held lock was lost (or ended), as reported by [`LockGuard::lost`] and
/// [`Error::LockLost`].
///
/// [`LockGuard::lost`]: crate::Held::lost
/// [`Error::LockLost`]: crate::Error::LockLost
///
/// # Examples
///
/// ```
/// use zkfence::LossReason;
/// assert!(LossReason::SessionExpired.is_session_terminal());
/// assert_eq!(LossReason::LeaseExpired.as_str(), "lease_expired");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The connection to ZooKeeper was lost (ConnectionLoss). The session may survive, but
    /// until it reconnects nobody can tell whether it will.
    Disconnected,
    /// The session expired.
    SessionExpired,
    /// The client was closed.
    ClientClosed,
    /// The client failed to authenticate.
    AuthFailed,
    /// Our lock node was deleted by someone else (an admin, a parent cleanup).
    NodeDeleted,
    /// The client came back on a different session than the one that holds the node.
    SessionChanged,
    /// The lease deadline passed: no reply proved the session alive in time (a process pause,
    /// a starved runtime, a partition).
    LeaseExpired,
    /// The release's delete lost its reply, and its retry found the node gone: zkfence cannot
    /// tell its own delete from someone else's before it (after which another contender may
    /// have held the lock), so it reports the hold as possibly overlapped.
    ReleaseUnconfirmed,
    /// The guard was released (or dropped) by its owner: not a failure.
    Released,
}

impl LossReason {
    /// The snake_case name used as the `reason` metric label.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::LossReason::NodeDeleted.as_str(), "node_deleted");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            LossReason::Disconnected => "disconnected",
            LossReason::SessionExpired => "session_expired",
            LossReason::ClientClosed => "client_closed",
            LossReason::AuthFailed => "auth_failed",
            LossReason::NodeDeleted => "node_deleted",
            LossReason::SessionChanged => "session_changed",
            LossReason::LeaseExpired => "lease_expired",
            LossReason::ReleaseUnconfirmed => "release_unconfirmed",
            LossReason::Released => "released",
        }
    }

    /// True when the session itself is over: nothing more can be done with this client.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!zkfence::LossReason::Disconnected.is_session_terminal());
    /// ```
    pub fn is_session_terminal(&self) -> bool {
        matches!(
            self,
            LossReason::SessionExpired | LossReason::ClientClosed | LossReason::AuthFailed
        )
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Disconnected => "the connection to zookeeper was lost; stop using the lock and its token",
            LossReason::SessionExpired => "the zookeeper session expired; stop using the lock and its token",
            LossReason::ClientClosed => "the zookeeper client was closed; stop using the lock and its token",
            LossReason::AuthFailed => "zookeeper authentication failed; stop using the lock and its token",
            LossReason::NodeDeleted => "our lock node was deleted by someone else; stop using the lock and its token",
            LossReason::SessionChanged => "the client reconnected on another session; stop using the lock and its token",
            LossReason::LeaseExpired => {
                "the lease lapsed before a reply proved the session alive; stop using the lock and its token"
            }
            LossReason::ReleaseUnconfirmed => {
                "the release lost its reply and the node was gone on retry; someone else may have deleted it first, so treat the work as possibly overlapped (fenced writes are safe)"
            }
            LossReason::Released => "the guard was released",
        })
    }
}

/// What one guard shares with the watchdog: its cancellation, the reason, and its lease.
#[derive(Debug)]
pub(crate) struct GuardState {
    pub(crate) token: CancellationToken,
    reason: OnceLock<LossReason>,
    lease: Arc<LeaseCell>,
    budget: Duration,
    pub(crate) ride_out: bool,
    pub(crate) label: String,
}

impl GuardState {
    pub(crate) fn new(
        session: &SessionWatch,
        budget: Duration,
        ride_out: bool,
        label: String,
    ) -> GuardState {
        GuardState {
            token: session.token.child_token(),
            reason: OnceLock::new(),
            lease: session.lease.clone(),
            budget,
            ride_out,
            label,
        }
    }

    /// The current lease deadline.
    pub(crate) fn deadline(&self) -> Instant {
        self.lease.deadline(self.budget)
    }

    /// The reason, once lost or released (a token cancelled by its owner counts as released).
    pub(crate) fn reason(&self) -> Option<LossReason> {
        self.reason
            .get()
            .copied()
            .or_else(|| self.token.is_cancelled().then_some(LossReason::Released))
    }

    /// Records `reason` and cancels, once; returns whether this call did it.
    pub(crate) fn lose(&self, reason: LossReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.token.cancel();
        first
    }

    /// The synchronous check: lost, released, or past the lease deadline by the monotonic clock.
    pub(crate) fn check(&self) -> Result<(), LossReason> {
        if let Some(reason) = self.reason() {
            return Err(reason);
        }
        if Instant::now() >= self.deadline() {
            self.lose(LossReason::LeaseExpired);
            return Err(self.reason().unwrap_or(LossReason::LeaseExpired));
        }
        Ok(())
    }
}

/// Messages to a session's watchdog task.
pub(crate) enum Event {
    /// A guard was acquired: watch its node, cancel it on loss.
    /// `watch` is a pending watch on the node that the acquire already set, if any.
    Register {
        id: u64,
        node: Arc<str>,
        state: Arc<GuardState>,
        watch: Option<crate::lock::NodeWatch>,
    },
    /// The guard was released or dropped.
    Unregister { id: u64 },
    /// A session state change (from the persistent watch or the state channel).
    State(zk::SessionState),
    /// The client is on this session id (checked against the one the guards hold).
    SessionId(i64),
    /// A guard's node is gone.
    NodeGone { id: u64 },
    /// A client handle for probes and node watches, sent when interest rises from zero: the
    /// task lets its handle go when idle, so that it never keeps a session open by itself.
    Attach(zk::Client),
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Register { id, node, .. } => write!(f, "Register({id}, {node})"),
            Event::Unregister { id } => write!(f, "Unregister({id})"),
            Event::State(state) => write!(f, "State({state})"),
            Event::SessionId(id) => write!(f, "SessionId({id:#x})"),
            Event::NodeGone { id } => write!(f, "NodeGone({id})"),
            Event::Attach(_) => f.write_str("Attach"),
        }
    }
}

/// The per-session shared part: what acquires and guards hold.
#[derive(Debug)]
pub(crate) struct SessionWatch {
    session: i64,
    timeout: Duration,
    lease: Arc<LeaseCell>,
    /// A node the probe may check when no guard is held: the newest lock path (we list it,
    /// so we can read it).
    probe_path: Mutex<Arc<str>>,
    token: CancellationToken,
    events: mpsc::UnboundedSender<Event>,
    /// Acquires in progress plus guards held; the task exits when it stays zero.
    interest: AtomicU64,
    closed: AtomicBool,
    next_id: AtomicU64,
}

/// The watchdogs of this process, one per live session.
static SESSIONS: LazyLock<Mutex<HashMap<i64, Arc<SessionWatch>>>> = LazyLock::new(Default::default);

/// A counted interest in a session's watchdog; dropping it lets the watchdog wind down.
#[derive(Debug)]
pub(crate) struct Interest {
    watch: Arc<SessionWatch>,
}

impl Interest {
    pub(crate) fn watch(&self) -> &Arc<SessionWatch> {
        &self.watch
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        self.watch.interest.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The session's watchdog, started if it is not running, with one more unit of interest, for
/// a lock on `lock_path` leasing with `policy`.
pub(crate) fn watch_session(
    client: &zk::Client,
    policy: &LeasePolicy,
    lock_path: &str,
) -> Interest {
    let session = client.session_id().0;
    let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(watch) = sessions.get(&session) {
        // A task whose runtime shut down has dropped its receiver: replace it.
        if !watch.closed.load(Ordering::Acquire) && !watch.events.is_closed() {
            watch.adopt(policy, lock_path);
            // The driver lets its client handle go only while nobody is interested, so it
            // needs one again only when interest rises from zero (not on every acquire).
            if watch.interest.fetch_add(1, Ordering::AcqRel) == 0 {
                // No probe ran while idle: the next proof is a cold one (marked here, before
                // the caller's create can record its reply).
                watch.lease.restart();
                watch.send(Event::Attach(client.clone()));
            }
            return Interest {
                watch: watch.clone(),
            };
        }
    }
    let (watch, rx) = SessionWatch::new(session, client.session_timeout());
    watch.adopt(policy, lock_path);
    let watch = Arc::new(watch);
    sessions.insert(session, watch.clone());
    drop(sessions);
    ::metrics::gauge!(m::WATCHED_SESSIONS).increment(1.0);
    let driver = Driver::new(Arc::downgrade(&watch), rx, Some(client.clone()));
    tokio::spawn(driver.run());
    Interest { watch }
}

impl SessionWatch {
    /// A watch with no guards yet and one unit of interest, and the receiving end of its
    /// event channel, for the [`Driver`].
    fn new(session: i64, timeout: Duration) -> (SessionWatch, mpsc::UnboundedReceiver<Event>) {
        let (events, rx) = mpsc::unbounded_channel();
        let watch = SessionWatch {
            session,
            timeout,
            lease: Arc::new(LeaseCell::new(timeout)),
            probe_path: Mutex::new(Arc::from("/")),
            token: CancellationToken::new(),
            events,
            interest: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
        };
        (watch, rx)
    }

    pub(crate) fn lease(&self) -> &LeaseCell {
        &self.lease
    }

    /// A lock with `policy` on `lock_path` uses this session.
    fn adopt(&self, policy: &LeasePolicy, lock_path: &str) {
        self.lease.adopt(policy, self.timeout);
        let mut path = self.probe_path.lock().unwrap_or_else(|e| e.into_inner());
        if **path != *lock_path {
            *path = Arc::from(lock_path);
        }
    }

    fn probe_path(&self) -> Arc<str> {
        self.probe_path
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn send(&self, event: Event) {
        // The task outlives every holder of interest, so the receiver is there.
        let _ = self.events.send(event);
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// One more unit of interest in this (running) watchdog, for a guard built from an acquire.
    pub(crate) fn interest(self: &Arc<Self>) -> Interest {
        self.interest.fetch_add(1, Ordering::AcqRel);
        Interest {
            watch: self.clone(),
        }
    }
}

/// How long an idle watchdog keeps its client handle (and keeps probing) after the last guard
/// or acquire of its session ended. The task itself lives as long as the session; only the
/// handle, which would keep the session open, is let go.
const LINGER: Duration = Duration::from_secs(1);

type NodeWatch = Pin<Box<dyn Future<Output = (u64, bool)> + Send>>;
type Probe = Pin<Box<dyn Future<Output = ProbeReply> + Send>>;

/// A guard's node for the driver to watch.
pub(crate) struct NodeToWatch {
    id: u64,
    node: Arc<str>,
    /// The guard's token: a guard released before the watch is armed needs none.
    token: CancellationToken,
    pending: Option<crate::lock::NodeWatch>,
}

impl fmt::Debug for NodeToWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeToWatch")
            .field("id", &self.id)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// A guard as the watchdog sees it.
#[derive(Debug)]
struct Entry {
    node: Arc<str>,
    state: Arc<GuardState>,
    /// Whether its budget is in `Core::budgets`: only live guards have a lease deadline to
    /// sleep until (a lost one would make the deadline always past, and the task spin).
    counted: bool,
}

/// The watchdog's decisions, apart from ZooKeeper, so that tests drive it with paused time
/// through the same channel production uses.
#[derive(Debug)]
pub(crate) struct Core {
    session: i64,
    guards: HashMap<u64, Entry>,
    /// Lease budgets of the registered guards (a multiset), to sleep until the earliest deadline.
    budgets: BTreeMap<Duration, usize>,
    lease: Arc<LeaseCell>,
    /// Set once the session is over; guards registered later are cancelled at once.
    terminal: Option<LossReason>,
    disconnected: bool,
}

impl Core {
    pub(crate) fn new(session: i64, lease: Arc<LeaseCell>) -> Core {
        Core {
            session,
            guards: HashMap::new(),
            budgets: BTreeMap::new(),
            lease,
            terminal: None,
            disconnected: false,
        }
    }

    /// Applies one event at `now`; returns a newly registered guard whose node to watch.
    pub(crate) fn apply(&mut self, event: Event, now: Instant) -> Option<NodeToWatch> {
        match event {
            Event::Register {
                id,
                node,
                state,
                watch,
            } => {
                *self.budgets.entry(state.budget).or_default() += 1;
                let watch = NodeToWatch {
                    id,
                    node: node.clone(),
                    token: state.token.clone(),
                    pending: watch,
                };
                let ride_out = state.ride_out;
                self.guards.insert(
                    id,
                    Entry {
                        node,
                        state,
                        counted: true,
                    },
                );
                if let Some(reason) = self.terminal {
                    self.lose(id, reason, now);
                } else if self.disconnected && !ride_out {
                    self.lose(id, LossReason::Disconnected, now);
                } else if now >= self.guards[&id].state.deadline() {
                    self.lose(id, LossReason::LeaseExpired, now);
                }
                return Some(watch);
            }
            Event::Unregister { id } => {
                self.uncount(id);
                self.guards.remove(&id);
            }
            Event::State(state) => self.on_state(state, now),
            Event::SessionId(id) if id != self.session => {
                let ids: Vec<u64> = self.guards.keys().copied().collect();
                for id in ids {
                    self.lose(id, LossReason::SessionChanged, now);
                }
            }
            Event::SessionId(_) => {}
            Event::NodeGone { id } => self.lose(id, LossReason::NodeDeleted, now),
            Event::Attach(_) => {}
        }
        None
    }

    fn on_state(&mut self, state: zk::SessionState, now: Instant) {
        let reason = match state {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                self.disconnected = false;
                return;
            }
            zk::SessionState::Disconnected => {
                self.disconnected = true;
                LossReason::Disconnected
            }
            zk::SessionState::Expired => LossReason::SessionExpired,
            zk::SessionState::Closed => LossReason::ClientClosed,
            zk::SessionState::AuthFailed => LossReason::AuthFailed,
        };
        if reason.is_session_terminal() {
            self.terminal.get_or_insert(reason);
        }
        let ids: Vec<u64> = self
            .guards
            .iter()
            .filter(|(_, e)| reason != LossReason::Disconnected || !e.state.ride_out)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.lose(id, reason, now);
        }
    }

    /// The earliest lease deadline among registered guards.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let shortest = self.budgets.keys().next()?;
        Some(self.lease.deadline(*shortest))
    }

    /// Cancels every guard whose lease deadline has passed.
    pub(crate) fn check_lease(&mut self, now: Instant) {
        let due: Vec<u64> = self
            .guards
            .iter()
            .filter(|(_, e)| {
                e.counted && (e.state.token.is_cancelled() || now >= e.state.deadline())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            // Cancelled elsewhere (check(), release, the owner) or expired now.
            self.lose(id, LossReason::LeaseExpired, now);
        }
    }

    /// Takes a guard's budget out of the deadline multiset, once.
    fn uncount(&mut self, id: u64) {
        let Some(entry) = self.guards.get_mut(&id) else {
            return;
        };
        if !std::mem::replace(&mut entry.counted, false) {
            return;
        }
        let budget = entry.state.budget;
        if let Some(n) = self.budgets.get_mut(&budget) {
            *n -= 1;
            if *n == 0 {
                self.budgets.remove(&budget);
            }
        }
    }

    fn lose(&mut self, id: u64, reason: LossReason, now: Instant) {
        self.uncount(id);
        let Some(entry) = self.guards.get(&id) else {
            return;
        };
        if entry.state.lose(reason) {
            let observed = if reason == LossReason::LeaseExpired {
                entry.state.deadline().min(now)
            } else {
                now
            };
            let latency = Instant::now().saturating_duration_since(observed);
            ::metrics::counter!(m::LOCK_LOST_TOTAL, "reason" => reason.as_str(), "lock" => entry.state.label.clone())
                .increment(1);
            ::metrics::histogram!(m::LOSS_DETECTION_SECONDS, "reason" => reason.as_str())
                .record(latency.as_secs_f64());
            tracing::warn!(
                node = %entry.node,
                session_id = %zk::SessionId(self.session),
                reason = reason.as_str(),
                detection_latency_ms = latency.as_secs_f64() * 1e3,
                "lock lost: {reason}"
            );
        }
    }

    pub(crate) fn guards(&self) -> usize {
        self.guards.len()
    }

    /// A node to probe, rotating through the held ones.
    fn probe_target(&self, turn: usize) -> Option<(u64, Arc<str>)> {
        if self.guards.is_empty() {
            return None;
        }
        self.guards
            .iter()
            .nth(turn % self.guards.len())
            .map(|(id, e)| (*id, e.node.clone()))
    }
}

/// The watchdog task: the [`Core`] plus the ZooKeeper side (session events, node watches,
/// probes). Without a client (unit tests) it only applies what comes through the channel.
pub(crate) struct Driver {
    watch: Weak<SessionWatch>,
    events: mpsc::UnboundedReceiver<Event>,
    client: Option<zk::Client>,
    core: Core,
    timeout: Duration,
}

impl Driver {
    pub(crate) fn new(
        watch: Weak<SessionWatch>,
        events: mpsc::UnboundedReceiver<Event>,
        client: Option<zk::Client>,
    ) -> Driver {
        let strong = watch.upgrade();
        let (session, lease, timeout) = match &strong {
            Some(w) => (w.session, w.lease.clone(), w.timeout),
            None => {
                let timeout = Duration::from_secs(10);
                (0, Arc::new(LeaseCell::new(timeout)), timeout)
            }
        };
        Driver {
            watch,
            events,
            client,
            core: Core::new(session, lease),
            timeout,
        }
    }

    pub(crate) async fn run(mut self) {
        let mut node_watches: FuturesUnordered<NodeWatch> = FuturesUnordered::new();
        let mut probe: Option<Probe> = None;
        let mut last_sent: Option<Instant> = None;
        let mut turn = 0usize;
        let mut next_probe = Instant::now();
        let mut idle_since: Option<Instant> = None;
        // The state channel first, and the state as it is now: a disconnect that happens
        // while the persistent watch below is being registered must not go unseen.
        let mut states = self.client.as_ref().map(zk::Client::state_watcher);
        if let Some(client) = &self.client {
            self.on_state(client.state(), &mut next_probe);
        }
        let mut session_events = match &self.client {
            Some(client) => persistent_session_events(client).await,
            None => None,
        };
        loop {
            let lease_at = self.core.next_deadline();
            let detach_at = idle_since.map(|t| t + LINGER.min(self.timeout / 3));
            tokio::select! {
                biased;
                event = self.events.recv() => match event {
                    Some(Event::Attach(client)) => {
                        self.client = Some(client);
                        next_probe = Instant::now();
                    }
                    Some(event) => {
                        if let Some(node) = self.core.apply(event, Instant::now()) {
                            if let Some(client) = &self.client {
                                node_watches.push(Box::pin(watch_node(client.clone(), node)));
                            }
                        }
                    }
                    None => break,
                },
                event = next_session_event(&mut session_events) => {
                    self.on_state(event, &mut next_probe);
                }
                state = next_state(&mut states) => {
                    self.on_state(state, &mut next_probe);
                }
                Some((id, gone)) = node_watches.next() => {
                    if gone {
                        self.core.apply(Event::NodeGone { id }, Instant::now());
                    }
                }
                _ = sleep_until_opt(lease_at) => self.core.check_lease(Instant::now()),
                Some(reply) = poll_opt(&mut probe) => {
                    probe = None;
                    next_probe = match self.on_probe(reply) {
                        Some(retry) => retry,
                        None => self.probe_due(last_sent),
                    };
                }
                _ = tokio::time::sleep_until(next_probe), if probe.is_none() && self.client.is_some() => {
                    // A reply that came in since (an acquire's create) moves the probe on: it
                    // would pair with nothing until a gap has passed.
                    let due = self.probe_due(last_sent);
                    if due > Instant::now() {
                        next_probe = due;
                    } else if let Some(client) = &self.client {
                        last_sent = Some(Instant::now());
                        let target = self.probe_target(turn);
                        probe = Some(Box::pin(probe_session(client.clone(), target, self.core.lease.is_legacy())));
                        turn = turn.wrapping_add(1);
                    }
                }
                _ = sleep_until_opt(detach_at), if self.client.is_some() => {
                    // Idle: let the session close when the application drops its clients.
                    self.client = None;
                    probe = None;
                }
            }
            let idle = self.idle();
            if idle && self.core.terminal.is_some() && self.try_close() {
                break;
            }
            idle_since = match (idle_since, idle) {
                (_, false) => None,
                (Some(t), true) => Some(t),
                (None, true) => Some(Instant::now()),
            };
        }
        ::metrics::gauge!(m::WATCHED_SESSIONS).decrement(1.0);
    }

    /// When the next probe is due: once it can prove something (a pair gap after the newest
    /// reply) and a probe period after the last one (every `T/3` under the legacy rule).
    fn probe_due(&self, last_sent: Option<Instant>) -> Instant {
        let lease = &self.core.lease;
        if lease.is_legacy() {
            return last_sent.map_or_else(Instant::now, |s| s + self.timeout / 3);
        }
        // A probe pairs with the newest committed write once a gap has passed (replies that
        // are refusals do not move this: a lock retrying an error must not starve the probes).
        let pairs = lease
            .newest_commit()
            .map_or_else(Instant::now, |r| r + lease.gap());
        last_sent.map_or(pairs, |s| pairs.max(s + lease.probe_period()))
    }

    /// What the next probe checks: a held node (in turn), else the newest lock path.
    fn probe_target(&self, turn: usize) -> ProbeTarget {
        match self.core.probe_target(turn) {
            Some((id, path)) => ProbeTarget {
                guard: Some(id),
                path,
            },
            None => ProbeTarget {
                guard: None,
                path: self
                    .watch
                    .upgrade()
                    .map_or_else(|| Arc::from("/"), |w| w.probe_path()),
            },
        }
    }

    /// Records what a probe proved; returns when to try again if nothing came back.
    fn on_probe(&mut self, reply: ProbeReply) -> Option<Instant> {
        let lease = self.core.lease.clone();
        let now = Instant::now();
        let outcome = match reply.answer {
            Answer::Committed => {
                lease.committed(reply.sent, now);
                ::metrics::histogram!(m::LEASE_REMAINING_SECONDS)
                    .record(lease.remaining(now).as_secs_f64());
                if let Some(client) = &self.client {
                    self.core
                        .apply(Event::SessionId(client.session_id().0), now);
                }
                "committed"
            }
            Answer::Synced => {
                lease.synced(reply.sent);
                lease.replied(reply.sent, now);
                "synced"
            }
            Answer::Refused(gone) => {
                lease.replied(reply.sent, now);
                if let Some(id) = gone {
                    self.core.apply(Event::NodeGone { id }, now);
                }
                "refused"
            }
            Answer::None => "failed",
        };
        ::metrics::counter!(m::LEASE_PROBES_TOTAL, "outcome" => outcome).increment(1);
        // Nothing came back (the connection broke): try again a gap later, or at once when
        // the client reconnects (`on_state`).
        (reply.answer == Answer::None).then(|| now + lease.gap().max(Duration::from_millis(10)))
    }

    /// Applies a session state; after a reconnect, probes at once so that the lease is
    /// renewed as soon as the session can prove itself alive again.
    fn on_state(&mut self, state: zk::SessionState, next_probe: &mut Instant) {
        if matches!(
            state,
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
        ) {
            *next_probe = Instant::now();
        }
        self.core.apply(Event::State(state), Instant::now());
    }

    fn idle(&self) -> bool {
        self.watch
            .upgrade()
            .is_none_or(|w| w.interest.load(Ordering::Acquire) == 0)
            && self.core.guards() == 0
    }

    /// Leaves the registry once the session is over and nobody is interested; under the
    /// registry lock, so that nobody can take interest in a watchdog that is about to stop.
    fn try_close(&mut self) -> bool {
        let Some(watch) = self.watch.upgrade() else {
            return true;
        };
        let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        if watch.interest.load(Ordering::Acquire) != 0
            || !self.events.is_empty()
            || self.core.guards() != 0
        {
            return false;
        }
        watch.closed.store(true, Ordering::Release);
        if sessions
            .get(&watch.session)
            .is_some_and(|w| Arc::ptr_eq(w, &watch))
        {
            sessions.remove(&watch.session);
        }
        true
    }
}

/// What a probe checks: a held guard's node, or (with none held) a lock path.
#[derive(Debug)]
struct ProbeTarget {
    guard: Option<u64>,
    path: Arc<str>,
}

/// What came back for a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// The write was committed: a proof for the lease.
    Committed,
    /// The legacy rule's `sync` was answered.
    Synced,
    /// A server answered with an error; the guard whose node is gone, if that was the error.
    Refused(Option<u64>),
    /// No answer (the connection broke, the session ended).
    None,
}

/// One probe, timed from its send.
#[derive(Debug)]
struct ProbeReply {
    sent: Instant,
    answer: Answer,
}

/// One probe of the session: a `multi` holding one `check` of the target (any version). It is
/// a write, so it is committed only by a leader with a quorum (see [`crate::lease`]); it
/// changes nothing and fires no watch, and on a held node it also finds the node gone.
///
/// Under the legacy rule (the chaos suite's mutant) it is a `sync` then a read, as before
/// issue 11: unsound, since a leader answers its own clients' syncs without a quorum.
async fn probe_session(client: zk::Client, target: ProbeTarget, legacy: bool) -> ProbeReply {
    let sent = Instant::now();
    let result = if legacy {
        let synced = client.sync(&target.path);
        let read = client.check_stat(&target.path);
        let synced = synced.await;
        match read.await {
            Ok(None) => Err(zk::Error::NoNode),
            _ => synced,
        }
    } else {
        let mut multi = client.new_multi_writer();
        match multi.add_check_version(&target.path, -1) {
            Ok(()) => multi.commit().await.map(|_| ()).map_err(zk::Error::from),
            Err(err) => Err(err),
        }
    };
    let answer = match result {
        Ok(()) if legacy => Answer::Synced,
        Ok(()) => Answer::Committed,
        Err(zk::Error::NoNode) => Answer::Refused(target.guard),
        Err(err) if crate::lease::answered_by_server(&err) => Answer::Refused(None),
        Err(_) => Answer::None,
    };
    ProbeReply { sent, answer }
}

/// How long a guard must be held before the watchdog arms its own watch on the guard's node.
/// Most holds are shorter than this and then cost no request beyond create, list and delete.
/// A node deleted by someone else within this window is caught when the watch is armed (the
/// read finds it gone), so detection takes at most this delay plus one round trip.
/// A guard that waited in the queue already has its watch from the acquire.
const NODE_WATCH_DELAY: Duration = Duration::from_millis(10);

/// Watches one guard's node until it is deleted (`true`) or the session ends (`false`),
/// starting from the acquire's pending watch when there is one.
///
/// Once armed, a released guard's watch is not dropped early: dropping a pending watcher makes
/// the client send a removeWatches request, while the release's own delete is about to fire it
/// anyway. The result for an unregistered guard is ignored by [`Core`].
async fn watch_node(client: zk::Client, node: NodeToWatch) -> (u64, bool) {
    let NodeToWatch {
        id,
        node,
        token,
        mut pending,
    } = node;
    if pending.is_none() {
        tokio::select! {
            biased;
            _ = token.cancelled() => return (id, false),
            _ = tokio::time::sleep(NODE_WATCH_DELAY) => {}
        }
    }
    let mut attempt = 0;
    loop {
        let event = match pending.take() {
            Some(pending) => pending.await,
            // getData, not exists: on a missing node it arms no watch (exists would arm a
            // creation watch that we would then have to remove).
            None => match client.get_and_watch_data(&node).await {
                Ok((_, _, watcher)) => watch_changed(watcher).await,
                Err(zk::Error::NoNode) => return (id, true),
                Err(err) if crate::recipe::is_connection_error(&err) => {
                    if crate::recipe::await_reconnect(&client, &mut attempt)
                        .await
                        .is_err()
                    {
                        return (id, false);
                    }
                    continue;
                }
                Err(_) => return (id, false),
            },
        };
        match event.event_type {
            zk::EventType::NodeDeleted => return (id, true),
            zk::EventType::Session => return (id, false),
            _ => {} // data changed: watch again
        }
    }
}

/// A persistent watch on a path nobody creates, for its session events: unlike the state
/// channel it queues every transition, so a quick Disconnected→SyncConnected flap is seen.
async fn persistent_session_events(client: &zk::Client) -> Option<zk::PersistentWatcher> {
    match client
        .watch(
            "/zookeeper/zkfence-session-events",
            zk::AddWatchMode::Persistent,
        )
        .await
    {
        Ok(watcher) => Some(watcher),
        Err(err) => {
            tracing::debug!(cause = %err, "no persistent session watch; relying on the state channel");
            None
        }
    }
}

/// The next session state from the persistent watch.
///
/// `zookeeper-client` 0.11 drops the watch's channel after a terminal state and then panics
/// if it is polled again (`PersistentReceiver::recv` unwraps). The watcher is let go after a
/// terminal state, and a panic from it is caught, so that it can never take the watchdog task
/// down; the state channel then remains as the source of session states.
async fn next_session_event(events: &mut Option<zk::PersistentWatcher>) -> zk::SessionState {
    loop {
        let polled = match events.as_mut() {
            Some(watcher) => CatchUnwind(Box::pin(watcher.changed())).await,
            None => return std::future::pending().await,
        };
        match polled {
            Some(event) if event.event_type == zk::EventType::Session => {
                if event.session_state.is_terminated() {
                    *events = None;
                }
                return event.session_state;
            }
            Some(_) => {}
            None => {
                tracing::debug!(
                    "the persistent session watch closed; relying on the state channel"
                );
                *events = None;
            }
        }
    }
}

/// `OneshotWatcher::changed()`, with a panic inside it turned into a `Closed` session event:
/// `zookeeper-client` 0.11 unwraps the watch's channel, which panics if the session task went
/// away without a last event (its runtime shut down, say).
pub(crate) async fn watch_changed(watcher: zk::OneshotWatcher) -> zk::WatchedEvent {
    CatchUnwind(Box::pin(watcher.changed()))
        .await
        .unwrap_or_else(|| zk::WatchedEvent::new_session(zk::SessionState::Closed))
}

/// Polls a future, turning a panic inside it into `None`.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx))) {
            Ok(std::task::Poll::Ready(out)) => std::task::Poll::Ready(Some(out)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(None),
        }
    }
}

async fn next_state(states: &mut Option<zk::StateWatcher>) -> zk::SessionState {
    match states {
        Some(states) => states.changed().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn poll_opt<F: Future + Unpin>(future: &mut Option<F>) -> Option<F::Output> {
    match future {
        Some(f) => Some(f.await),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    //! The state machine, driven through its channel with paused time.

    use super::*;

    const T: Duration = Duration::from_secs(10);
    fn policy() -> LeasePolicy {
        LeasePolicy {
            margin: Some(Duration::from_millis(100)),
            ..LeasePolicy::default()
        }
    }

    /// A session watchdog with no ZooKeeper behind it: events come only from the test.
    fn start() -> Arc<SessionWatch> {
        let (watch, rx) = SessionWatch::new(7, T);
        let watch = Arc::new(watch);
        tokio::spawn(Driver::new(Arc::downgrade(&watch), rx, None).run());
        watch
    }

    fn register(watch: &Arc<SessionWatch>, ride_out: bool) -> (u64, Arc<GuardState>) {
        let state = Arc::new(GuardState::new(
            watch,
            policy().budget(T),
            ride_out,
            String::new(),
        ));
        let id = watch.next_id();
        let node: Arc<str> = format!("/locks/a/n{id}").into();
        watch.send(Event::Register {
            id,
            node,
            state: state.clone(),
            watch: None,
        });
        (id, state)
    }

    /// Lets the driver task run until it has handled what was sent.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_follows_the_anchor_and_the_guards_budget() {
        let watch = start();
        let anchor = Instant::now();
        watch.lease().prove(anchor);
        let (_, guard) = register(&watch, false);
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(9_800));
        watch.lease().prove(anchor + Duration::from_secs(3));
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(12_800));
        // An older proof never moves the deadline back.
        watch.lease().prove(anchor + Duration::from_secs(1));
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(12_800));
    }

    #[tokio::test(start_paused = true)]
    async fn disconnect_cancels_at_once_unless_riding_out() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, strict) = register(&watch, false);
        let (_, patient) = register(&watch, true);
        settle().await;
        watch.send(Event::State(zk::SessionState::Disconnected));
        settle().await;
        assert_eq!(strict.check(), Err(LossReason::Disconnected));
        assert!(strict.token.is_cancelled());
        assert_eq!(patient.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(9_799)).await;
        settle().await;
        assert_eq!(
            patient.check(),
            Ok(()),
            "cancelled before the lease deadline"
        );
        tokio::time::advance(Duration::from_millis(2)).await;
        settle().await;
        assert!(
            patient.token.is_cancelled(),
            "the watchdog did not cancel at the deadline"
        );
        assert_eq!(patient.check(), Err(LossReason::LeaseExpired));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconnect_with_fresh_replies_keeps_a_riding_out_guard() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, patient) = register(&watch, true);
        watch.send(Event::State(zk::SessionState::Disconnected));
        tokio::time::advance(Duration::from_secs(5)).await;
        watch.send(Event::State(zk::SessionState::SyncConnected));
        watch.lease().prove(Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        settle().await;
        assert_eq!(patient.check(), Ok(()));
        // A guard registered while connected again is not cancelled for the old disconnect.
        let (_, later) = register(&watch, false);
        settle().await;
        assert_eq!(later.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn terminal_states_cancel_every_guard_and_every_later_one() {
        for (state, reason) in [
            (zk::SessionState::Expired, LossReason::SessionExpired),
            (zk::SessionState::Closed, LossReason::ClientClosed),
            (zk::SessionState::AuthFailed, LossReason::AuthFailed),
        ] {
            let watch = start();
            watch.lease().prove(Instant::now());
            let guards: Vec<_> = (0..3).map(|i| register(&watch, i == 0).1).collect();
            watch.send(Event::State(state));
            settle().await;
            for guard in &guards {
                assert_eq!(guard.check(), Err(reason), "{state}");
            }
            let (_, late) = register(&watch, true);
            settle().await;
            assert_eq!(late.check(), Err(reason), "registered after {state}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_cancels_only_its_guard() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (gone, victim) = register(&watch, false);
        let (_, bystander) = register(&watch, false);
        watch.send(Event::NodeGone { id: gone });
        settle().await;
        assert_eq!(victim.check(), Err(LossReason::NodeDeleted));
        assert_eq!(bystander.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn another_session_id_cancels_with_session_changed() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, guard) = register(&watch, true);
        watch.send(Event::SessionId(7));
        settle().await;
        assert_eq!(guard.check(), Ok(()));
        watch.send(Event::SessionId(8));
        settle().await;
        assert_eq!(guard.check(), Err(LossReason::SessionChanged));
    }

    #[tokio::test(start_paused = true)]
    async fn check_fails_past_the_deadline_before_the_watchdog_runs() {
        // No driver at all: only the clock and the shared lease.
        let (watch, _events) = SessionWatch::new(7, T);
        watch.lease().prove(Instant::now());
        let guard = GuardState::new(&watch, policy().budget(T), false, String::new());
        tokio::time::advance(Duration::from_millis(9_799)).await;
        assert_eq!(guard.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(guard.check(), Err(LossReason::LeaseExpired));
        assert!(
            guard.token.is_cancelled(),
            "check() cancels the token itself"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_wins_over_later_losses_and_unregistered_guards_are_ignored() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (id, guard) = register(&watch, false);
        settle().await;
        assert!(guard.lose(LossReason::Released));
        watch.send(Event::Unregister { id });
        watch.send(Event::NodeGone { id });
        watch.send(Event::State(zk::SessionState::Disconnected));
        settle().await;
        assert_eq!(guard.check(), Err(LossReason::Released));
        assert!(
            !guard.lose(LossReason::NodeDeleted),
            "a second reason replaced the first"
        );
    }
}
