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

mod core;
mod driver;
pub(crate) mod lease;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::metrics as m;

pub(crate) use self::core::GuardState;
use self::driver::Driver;
use self::lease::{LeaseCell, LeasePolicy};

/// Messages to a session's watchdog task.
pub(crate) enum Event {
    /// A guard was acquired: watch its node, cancel it on loss.
    /// `watch` is a pending watch on the node that the acquire already set, if any.
    Register {
        id: u64,
        node: Arc<str>,
        state: Arc<GuardState>,
        watch: Option<crate::zk::NodeWatch>,
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

#[cfg(test)]
mod tests {
    //! The state machine, driven through its channel with paused time.

    use super::*;
    use crate::loss::LossReason;
    use tokio::time::Instant;

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
