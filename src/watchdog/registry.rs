//! The watchdogs of this process, one per live session: the per-session part that acquires
//! and guards share (its lease, its event channel, its cancellation), and the counted interest
//! that keeps a watchdog running. The messages themselves are `core`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::core::Event;
use super::lease::{LeaseCell, LeasePolicy};
use super::state::{GuardState, Terms};

/// The per-session shared part: what acquires and guards hold.
#[derive(Debug)]
pub(crate) struct SessionWatch {
    pub(super) session: i64,
    pub(super) timeout: Duration,
    pub(super) lease: Arc<LeaseCell>,
    /// A node the probe may check when no guard is held: the newest lock path (we list it,
    /// so we can read it).
    probe_path: Mutex<Arc<str>>,
    pub(super) token: CancellationToken,
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

/// One more unit of interest in the session's registered watchdog, if it is running; else a
/// new one, registered, with the receiving end of its events for a new task to drive.
pub(super) fn join(
    client: &zk::Client,
    policy: &LeasePolicy,
    lock_path: &str,
) -> (Interest, Option<mpsc::UnboundedReceiver<Event>>) {
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
            let watch = watch.clone();
            return (Interest { watch }, None);
        }
    }
    let (watch, rx) = SessionWatch::new(session, client.session_timeout());
    watch.adopt(policy, lock_path);
    let watch = Arc::new(watch);
    sessions.insert(session, watch.clone());
    (Interest { watch }, Some(rx))
}

impl SessionWatch {
    /// A watch with no guards yet and one unit of interest, and the receiving end of its
    /// event channel, for the watchdog task.
    pub(super) fn new(
        session: i64,
        timeout: Duration,
    ) -> (SessionWatch, mpsc::UnboundedReceiver<Event>) {
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

    pub(super) fn probe_path(&self) -> Arc<str> {
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

    /// The shared state of a new guard on this session: cancelled with the session's token,
    /// leasing on the session's lease.
    pub(crate) fn guard_state(&self, terms: Terms) -> GuardState {
        GuardState::new(self.token.child_token(), self.lease.clone(), terms)
    }

    /// Whether anyone holds interest in this watchdog.
    pub(super) fn interested(&self) -> bool {
        self.interest.load(Ordering::Acquire) != 0
    }

    /// Leaves the registry, unless someone is interested or `busy()` says the task still has
    /// work; under the registry lock, so that nobody can take interest in a watchdog that is
    /// about to stop. Returns whether it left.
    pub(super) fn leave_unless(self: &Arc<Self>, busy: impl FnOnce() -> bool) -> bool {
        let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
        if self.interested() || busy() {
            return false;
        }
        self.closed.store(true, Ordering::Release);
        if sessions
            .get(&self.session)
            .is_some_and(|w| Arc::ptr_eq(w, self))
        {
            sessions.remove(&self.session);
        }
        true
    }
}
