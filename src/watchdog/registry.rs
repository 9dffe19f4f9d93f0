//! The watchdogs of this process, one per live session: the per-session part that acquires
//! and guards share (its lease, its event channel, its client handle), and the counted interest
//! that keeps a watchdog running. The messages themselves are `core`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::clock;
use super::core::Event;
use super::lease::{LeaseCell, LeasePolicy};
use super::state::{GuardState, HoldTerms};
use crate::requests::chroot_prefix;

/// The per-session shared part: what acquires and guards hold.
#[derive(Debug)]
pub(crate) struct SessionWatch {
    pub(super) session: i64,
    pub(super) timeout: Duration,
    pub(super) lease: Arc<LeaseCell>,
    /// A node the probe may check when no guard is held: the newest lock path (we list it,
    /// so we can read it), on the server (its client's chroot included).
    probe_path: Mutex<Arc<str>>,
    events: mpsc::UnboundedSender<Event>,
    /// Guards' registrations and ends, with when they were posted: the driver takes them in
    /// batches (see [`SessionWatch::post`]).
    posted: Mutex<Vec<(Instant, Event)>>,
    /// Whether the driver will take the posted messages soon without being woken: it was woken
    /// for them, or has a node watch to arm (within `NODE_WATCH_DELAY`).
    pub(super) looking: AtomicBool,
    /// Whether the driver holds a client handle (it lets it go while nobody is interested).
    pub(super) attached: AtomicBool,
    /// Acquires in progress plus guards held; the task exits when it stays zero.
    interest: AtomicU64,
    /// Acquires creating their node now (not yet waiting): they want the cold phase's probes.
    creating: AtomicU64,
    /// The lock nodes this process keeps on the session (held or queued), and their paths'
    /// bytes as the close-session transaction counts them (ZOOKEEPER-4306).
    nodes: AtomicU64,
    node_bytes: AtomicU64,
    /// The acquires of this process that may wait on the session (from their start to their
    /// grant), and the bytes of paths their watches may take (`crate::WAITING_WATCH_BYTES`).
    waiting: AtomicU64,
    waiting_bytes: AtomicU64,
    closed: AtomicBool,
    next_id: AtomicU64,
    /// The session's one client handle at the server's root ([`SessionWatch::root_handle`]),
    /// while anything keeps it: the watchdog, pending nodes and releases.
    root: Mutex<Weak<zk::Client>>,
}

/// A handle on `client`'s session at the server's root: the session's watchdog reads and
/// watches its holds' nodes by their paths on the server, whatever chroot each was taken
/// under (two clients of one session may have different chroots, `zk::Client::chroot`).
pub(crate) fn root_client(client: &zk::Client) -> zk::Client {
    client.clone().chroot("/").unwrap_or_else(|same| same)
}

/// The watchdogs of this process, one per live session.
static SESSIONS: LazyLock<Mutex<HashMap<i64, Arc<SessionWatch>>>> = LazyLock::new(Default::default);

/// A counted interest in a session's watchdog; dropping it lets the watchdog wind down (and
/// gives back the node bytes it reserved).
#[derive(Debug)]
pub(crate) struct WatchdogRef {
    watch: Arc<SessionWatch>,
    /// The bytes of the lock node this acquire (then its hold) keeps on the session.
    node_bytes: u64,
    /// The bytes of paths this acquire's watches may take while it waits.
    waiting_bytes: u64,
}

impl WatchdogRef {
    pub(crate) fn watch(&self) -> &Arc<SessionWatch> {
        &self.watch
    }

    /// Reserves `bytes` of the session's node budget `limit` for this acquire's node, until
    /// this interest ends (the hold's end, or the acquire's failure). `Err` with the session's
    /// nodes and bytes when it would pass the budget.
    pub(crate) fn reserve_node(&mut self, bytes: u64, limit: u64) -> Result<(), (u64, u64)> {
        let watch = &self.watch;
        reserve((&watch.nodes, &watch.node_bytes), bytes, limit)?;
        self.node_bytes += bytes;
        Ok(())
    }

    /// Reserves `bytes` of the session's budget `limit` for the paths this acquire's watches
    /// may take while it waits, until its grant ([`Self::granted`]) or its end. `Err` with the
    /// session's waiting acquires and their bytes when it would pass the budget.
    pub(crate) fn reserve_waiting(&mut self, bytes: u64, limit: u64) -> Result<(), (u64, u64)> {
        let watch = &self.watch;
        reserve((&watch.waiting, &watch.waiting_bytes), bytes, limit)?;
        self.waiting_bytes += bytes;
        Ok(())
    }

    /// The acquire was granted: its waiting watches' reservation goes back (the hold's own
    /// watch counts against the watchdog's share instead).
    pub(crate) fn granted(&mut self) {
        if self.waiting_bytes > 0 {
            self.watch.waiting.fetch_sub(1, Ordering::SeqCst);
            (self.watch.waiting_bytes).fetch_sub(self.waiting_bytes, Ordering::SeqCst);
            self.waiting_bytes = 0;
        }
    }
}

/// Adds `bytes` to a budget's bytes and one to its count, unless that would take the bytes
/// past `limit`; `Err` with the count and the bytes then.
fn reserve(
    (count, counter): (&AtomicU64, &AtomicU64),
    bytes: u64,
    limit: u64,
) -> Result<(), (u64, u64)> {
    let mut current = counter.load(Ordering::SeqCst);
    loop {
        if current + bytes > limit {
            return Err((count.load(Ordering::SeqCst), current));
        }
        match counter.compare_exchange(current, current + bytes, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => break,
            Err(now) => current = now,
        }
    }
    count.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// An acquire creating its node (see [`SessionWatch::start_creating`]).
#[derive(Debug)]
pub(crate) struct Creating {
    watch: Arc<SessionWatch>,
}

impl Drop for Creating {
    fn drop(&mut self) {
        self.watch.creating.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for WatchdogRef {
    fn drop(&mut self) {
        self.granted();
        if self.node_bytes > 0 {
            self.watch.nodes.fetch_sub(1, Ordering::SeqCst);
            (self.watch.node_bytes).fetch_sub(self.node_bytes, Ordering::SeqCst);
        }
        self.watch.interest.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One more unit of interest in the session's registered watchdog, if it is running; else a
/// new one, registered, with the receiving end of its events for a new task to drive.
pub(super) fn join(
    client: &zk::Client,
    policy: &LeasePolicy,
    lock_path: &str,
) -> (WatchdogRef, Option<mpsc::UnboundedReceiver<Event>>) {
    let session = client.session_id().0;
    let mut sessions = SESSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(watch) = sessions.get(&session) {
        // A task whose runtime shut down has dropped its receiver: replace it.
        if !watch.closed.load(Ordering::Acquire) && !watch.events.is_closed() {
            watch.adopt(policy, client, lock_path);
            // The driver lets its client handle go only while nobody is interested, so it
            // needs one again only when interest rises from zero (not on every acquire).
            if watch.interest.fetch_add(1, Ordering::SeqCst) == 0 {
                // No probe ran while idle: the next proof is a cold one (marked here, before
                // the caller's create can record its reply).
                watch.lease.restart(clock::now());
                if !watch.attached.swap(true, Ordering::SeqCst) {
                    watch.send(Event::Attach(watch.root_handle(client)));
                }
            }
            let watch = watch.clone();
            let interest = WatchdogRef {
                watch,
                node_bytes: 0,
                waiting_bytes: 0,
            };
            return (interest, None);
        }
    }
    let (watch, rx) = SessionWatch::new(session, client.session_timeout());
    if let Some(at) = take_began(session) {
        watch.lease.began(at);
    }
    watch.adopt(policy, client, lock_path);
    let watch = Arc::new(watch);
    sessions.insert(session, watch.clone());
    let interest = WatchdogRef {
        watch,
        node_bytes: 0,
        waiting_bytes: 0,
    };
    (interest, Some(rx))
}

/// Sessions that [`Connect`](crate::Connect) created, with when their connect began (on the
/// lease clock) and their timeout, until the session's watch starts and takes its entry.
static BEGAN: LazyLock<Mutex<Vec<(i64, Instant, Duration)>>> = LazyLock::new(Mutex::default);

/// A new session was created by a connect sent no earlier than `at` (the lease module's "A new
/// session's first lease"). Entries whose anchor could no longer vouch for anything (older than
/// their session timeout) are dropped on the way, so sessions zkfence never uses cost nothing.
pub(crate) fn session_began(session: i64, at: Instant, timeout: Duration) {
    let now = clock::now();
    let mut began = BEGAN.lock().unwrap_or_else(|e| e.into_inner());
    began.retain(|&(_, at, timeout)| at + timeout > now);
    began.push((session, at, timeout));
}

/// When the connect that created `session` began, if [`session_began`] was told.
fn take_began(session: i64) -> Option<Instant> {
    let mut began = BEGAN.lock().unwrap_or_else(|e| e.into_inner());
    let at = began.iter().position(|&(s, _, _)| s == session)?;
    Some(began.swap_remove(at).1)
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
            events,
            posted: Mutex::new(Vec::new()),
            looking: AtomicBool::new(false),
            attached: AtomicBool::new(true),
            interest: AtomicU64::new(1),
            creating: AtomicU64::new(0),
            nodes: AtomicU64::new(0),
            node_bytes: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            waiting_bytes: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            root: Mutex::new(Weak::new()),
        };
        (watch, rx)
    }

    /// The session's handle at the server's root ([`root_client`] of `client`, a client of
    /// this session), one for the watchdog and every pending node and release of the session,
    /// whatever chroot each was taken under: a hold keeps a pointer rather than a client of its
    /// own (112 bytes and an allocation).
    pub(crate) fn root_handle(&self, client: &zk::Client) -> Arc<zk::Client> {
        let mut root = self.root.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(root) = root.upgrade() {
            return root;
        }
        let fresh = Arc::new(root_client(client));
        *root = Arc::downgrade(&fresh);
        fresh
    }

    pub(crate) fn lease(&self) -> &LeaseCell {
        &self.lease
    }

    /// A lock with `policy` on `lock_path` under `client`'s chroot uses this session.
    fn adopt(&self, policy: &LeasePolicy, client: &zk::Client, lock_path: &str) {
        self.lease.adopt(policy, self.timeout);
        let chroot = chroot_prefix(client.path());
        let mut path = self.probe_path.lock().unwrap_or_else(|e| e.into_inner());
        if path.strip_prefix(chroot) != Some(lock_path) {
            *path = Arc::from(format!("{chroot}{lock_path}"));
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

    /// Sends `event` to the driver, waking it.
    pub(crate) fn send(&self, event: Event) {
        // The task outlives every holder of interest, so the receiver is there.
        let _ = self.events.send(event);
    }

    /// Posts a guard's registration or end for the driver to take with others: it wakes the
    /// driver only if the driver is not about to look anyway, so that a stream of short holds
    /// on one session costs the driver one wake per `NODE_WATCH_DELAY`, not two per hold.
    /// Nothing here needs the driver sooner: a guard's check, its cancellation and its
    /// lease's clock do not wait for it, and its node's watch is armed only after that
    /// delay (or, set by the acquire, is already armed).
    pub(crate) fn post(&self, event: Event) {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), event));
        if !self.looking.swap(true, Ordering::SeqCst) {
            self.send(Event::Posted);
        }
    }

    /// Posts a guard's end without waking the driver: it is taken with the next batch.
    pub(crate) fn post_quietly(&self, event: Event) {
        self.posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), event));
    }

    /// The messages posted since the last call, in order.
    pub(super) fn take_posted(&self) -> Vec<(Instant, Event)> {
        std::mem::take(&mut *self.posted.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether messages are waiting to be taken.
    pub(super) fn has_posted(&self) -> bool {
        !self
            .posted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The shared state of a new guard on this session, leasing on the session's lease (its
    /// cancellation is its own, its token made when first asked for).
    pub(crate) fn guard_state(&self, terms: HoldTerms) -> GuardState {
        GuardState::new(self.lease.clone(), terms)
    }

    /// An acquire starts creating its node: the driver probes (the cold phase's extra probes)
    /// until the returned [`Creating`] is dropped, when the acquire waits or is granted.
    pub(crate) fn start_creating(self: &Arc<Self>) -> Creating {
        if self.creating.fetch_add(1, Ordering::SeqCst) == 0 {
            self.send(Event::Posted); // wakes the driver to schedule its probes
        }
        Creating {
            watch: self.clone(),
        }
    }

    /// Whether an acquire is creating its node.
    pub(super) fn creating(&self) -> bool {
        self.creating.load(Ordering::SeqCst) != 0
    }

    /// Whether anyone holds interest in this watchdog.
    pub(super) fn interested(&self) -> bool {
        self.interest.load(Ordering::SeqCst) != 0
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
