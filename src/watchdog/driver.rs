//! The watchdog task: the [`Core`] plus the ZooKeeper side (session events, node watches,
//! probes): its loop, what wakes it, the messages and session states it applies, and its end.
//! Its proofs of the lease (when a probe goes, what it checks, what its replies prove) are in
//! `proving.rs`; a probe on the wire in `probe.rs`; the session's states in `session.rs`.

use std::ops::ControlFlow;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::clock;
use super::core::{Core, Event, NodeToWatch};
use super::lease::{LeaseCell, RunRecord};
use super::nodes::Nodes;
use super::probe::{Probe, ProbeReply};
use super::registry::SessionWatch;
use super::session::{next_state, SessionStates};
use crate::metrics::WATCHED_SESSIONS;
use crate::wait::sleep_until_opt;

/// How long an idle watchdog keeps its client handle (and keeps probing) after the last guard
/// or acquire of its session ended. The task itself lives as long as the session; only the
/// handle, which would keep the session open, is let go.
const LINGER: Duration = Duration::from_secs(1);

/// The watchdog task: the [`Core`] plus the ZooKeeper side (session events, node watches,
/// probes). Without a client (unit tests) it only applies what comes through the channel.
/// Instants are on the lease clock ([`clock`]), turned into timers only to sleep.
pub(crate) struct Driver {
    pub(super) watch: Weak<SessionWatch>,
    events: mpsc::UnboundedReceiver<Event>,
    pub(super) client: Option<Arc<zk::Client>>,
    pub(super) core: Core,
    pub(super) timeout: Duration,
    pub(super) probing: Probing,
    /// Grants, and waiters expecting theirs, waiting for the lease to hold (see [`Event::Prove`]).
    pub(super) provers: Vec<Prover>,
    /// When the ticker runs next: it tells the lease that the process runs (`LeaseCell::ran`),
    /// so that a cold proof leans only across a stretch without a pause.
    tick_at: Instant,
    /// The guards' nodes: watched, or read back past the session's watch share.
    pub(super) nodes: Nodes,
}

/// A grant waiting for a proof: its node (checked by the probes until then), the budget the
/// lease must hold for, and whom to tell.
pub(super) struct Prover {
    pub(super) node: Arc<str>,
    pub(super) budget: Duration,
    pub(super) done: tokio::sync::oneshot::Sender<()>,
}

/// The probes in flight and when the next one goes.
pub(super) struct Probing {
    pub(super) in_flight: FuturesUnordered<Probe>,
    pub(super) last_sent: Option<Instant>,
    pub(super) next: Instant,
    /// Which held node the next probe checks (they take turns).
    pub(super) turn: usize,
}

/// What woke the task.
enum Wake {
    Event(Option<Event>),
    /// The first deferred node watch is due.
    Sweep,
    /// A session state, after the Disconnected that the state channel folded into it, if
    /// it did (see [`SessionStates`]).
    State(Option<zk::SessionState>, zk::SessionState),
    /// A node watch ended: its node deleted (`true`), or the session over.
    Watched(u64, bool),
    /// A read of the unwatched holds' nodes came back: each read, and whether it is gone.
    Read(Vec<(u64, bool)>),
    Due,
    Probed(Vec<ProbeReply>),
    ProbeTime,
    Detach,
    /// The ticker's time.
    Tick,
}

impl Driver {
    pub(crate) fn new(
        watch: Weak<SessionWatch>,
        events: mpsc::UnboundedReceiver<Event>,
        client: Option<Arc<zk::Client>>,
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
            probing: Probing {
                in_flight: FuturesUnordered::new(),
                last_sent: None,
                next: clock::now(),
                turn: 0,
            },
            provers: Vec::new(),
            tick_at: clock::now(),
            nodes: Nodes::new(),
        }
    }

    /// The ticker: records that the process runs now (in the session's lease and in the
    /// process's record, whose history a new session's lease starts from), and when to run
    /// next.
    fn tick(&mut self) {
        let now = clock::now();
        let lease = &self.core.lease;
        let unbroken = lease.ran(now);
        // Before a lock's policy sets the stall, every gap would be a break.
        if lease.stall() > Duration::ZERO {
            lease.inherit(process_ran(now, lease.stall()), unbroken);
        }
        self.tick_at = now + lease.ticker_period();
    }

    pub(crate) async fn run(mut self) {
        let mut idle_since: Option<Instant> = None;
        // The state channel, and the state as it is now, taken from it (so that what comes
        // next on it is a change from this).
        let mut states = self.client.as_deref().map(SessionStates::new);
        if let Some(states) = &states {
            self.on_state(states.first());
        }
        self.tick();
        loop {
            self.take_posted();
            let detach_at = idle_since.map(|t| t + LINGER.min(self.timeout / 3));
            let wake = self.next_wake(&mut states, detach_at).await;
            if self.on_wake(wake).is_break() {
                break;
            }
            self.stop_looking();
            let idle = self.idle();
            if idle && self.core.terminal.is_some() && self.try_close() {
                break;
            }
            idle_since = idle.then(|| idle_since.unwrap_or_else(Instant::now));
        }
        metrics::gauge!(WATCHED_SESSIONS).decrement(1.0);
    }

    /// Waits for what wakes the task next: the ticker first, then messages, session states,
    /// node watches and reads, the lease deadline, probes, the deferred watches' sweep, and
    /// (idle since `detach_at`) the time to let the client handle go.
    async fn next_wake(
        &mut self,
        states: &mut Option<SessionStates>,
        detach_at: Option<Instant>,
    ) -> Wake {
        let (due_at, probe_at) = (self.core.next_deadline(), self.probe_at());
        let sweep_at = self.nodes.next_due();
        tokio::select! {
            biased;
            // First: after a pause its time is long past, and it records the gap before
            // anything else runs.
            _ = sleep_on_lease_clock(Some(self.tick_at)) => Wake::Tick,
            event = self.events.recv() => Wake::Event(event),
            (folded, state) = next_state(states) => Wake::State(folded, state),
            Some((id, gone)) = self.nodes.watches.next() => Wake::Watched(id, gone),
            Some(read) = self.nodes.reads.next() => Wake::Read(read),
            _ = sleep_on_lease_clock(due_at) => Wake::Due,
            Some(reply) = self.probing.in_flight.next() => Wake::Probed(reply),
            _ = sleep_on_lease_clock(probe_at) => Wake::ProbeTime,
            _ = sleep_until_opt(sweep_at) => Wake::Sweep,
            _ = sleep_until_opt(detach_at), if self.client.is_some() => Wake::Detach,
        }
    }

    /// Does what woke the task; `Break` once the message channel has closed (the task ends).
    fn on_wake(&mut self, wake: Wake) -> ControlFlow<()> {
        match wake {
            Wake::Tick => self.tick(),
            Wake::Event(None) => return ControlFlow::Break(()),
            Wake::Event(Some(event)) => {
                if let Some(node) = self.on_event(event) {
                    (self.nodes).add(node, Instant::now(), &self.core, self.client.as_ref());
                }
            }
            Wake::State(folded, state) => {
                // Both in one turn: a guard registered between them would be judged by
                // the break that came before it.
                folded.into_iter().for_each(|folded| self.on_state(folded));
                self.on_state(state);
            }
            Wake::Watched(id, gone) => {
                if gone {
                    self.core.apply(Event::NodeGone { id }, clock::now());
                }
                (self.nodes).watch_ended(id, &self.core, self.client.as_ref());
            }
            Wake::Read(read) => {
                for id in self.nodes.gone(read) {
                    self.core.apply(Event::NodeGone { id }, clock::now());
                }
            }
            Wake::Due => self.core.check_lease(clock::now()),
            Wake::Probed(reply) => self.on_probe(reply),
            Wake::ProbeTime => self.send_probe(),
            Wake::Sweep => self.nodes.sweep(&self.core, self.client.as_ref()),
            Wake::Detach => self.detach(),
        }
        ControlFlow::Continue(())
    }

    /// Takes the registrations and ends the guards posted (see [`SessionWatch::post`]).
    fn take_posted(&mut self) {
        let Some(watch) = self.watch.upgrade() else {
            return;
        };
        let posted = watch.take_posted();
        // A guard registered and ended within one batch, with no watch set on its node, never
        // needed the driver: both messages are dropped unseen.
        let ended: std::collections::HashSet<u64> = (posted.iter())
            .filter_map(|(_, event)| match event {
                Event::Unregister { id } => Some(*id),
                _ => None,
            })
            .collect();
        let mut passed = std::collections::HashSet::new();
        for (at, event) in posted {
            match &event {
                Event::Register {
                    id, watch: None, ..
                } if ended.contains(id) => {
                    passed.insert(*id);
                    continue;
                }
                Event::Unregister { id } if passed.contains(id) => continue,
                _ => {}
            }
            if let Some(node) = self.on_event(event) {
                (self.nodes).add(node, at, &self.core, self.client.as_ref());
            }
        }
    }

    /// Lets posts wake the task again once nothing brings it back on its own (no deferred
    /// watch), then takes what was posted before the flag went down.
    fn stop_looking(&mut self) {
        let Some(watch) = self.watch.upgrade() else {
            return;
        };
        if self.nodes.has_deferred() {
            watch
                .looking
                .store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        watch
            .looking
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // A post that saw the flag still up woke nobody: look again (the loop takes it).
        if watch.has_posted()
            && !watch
                .looking
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            watch.send(Event::Posted);
        }
    }

    /// Idle: lets the client handle go, so that the session can close when the application
    /// drops its clients; keeps it if interest rose meanwhile (its acquire saw it attached).
    fn detach(&mut self) {
        if let Some(watch) = self.watch.upgrade() {
            watch
                .attached
                .store(false, std::sync::atomic::Ordering::SeqCst);
            if watch.interested() {
                watch
                    .attached
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        }
        self.client = None;
        self.probing.in_flight = FuturesUnordered::new();
        self.nodes.detach();
    }

    /// Applies a message; a newly registered guard's node to watch, if there is one.
    fn on_event(&mut self, event: Event) -> Option<NodeToWatch> {
        match event {
            Event::Attach(client) => {
                self.client = Some(client);
                self.probing.next = clock::now();
                None
            }
            Event::Prove { node, budget, done } => {
                self.prove(Prover { node, budget, done });
                None
            }
            event => {
                if let Event::Unregister { id } = event {
                    self.nodes.forget(id);
                }
                self.core.apply(event, clock::now())
            }
        }
    }
    /// renewed as soon as the session can prove itself alive again.
    fn on_state(&mut self, state: zk::SessionState) {
        if matches!(
            state,
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
        ) {
            self.probing.next = clock::now();
        }
        self.core.apply(Event::State(state), clock::now());
        if self.core.terminal.is_some() {
            // No proof will come: the grants waiting for one hear it (their senders dropped).
            self.provers.clear();
        }
    }

    fn idle(&self) -> bool {
        self.watch.upgrade().is_none_or(|w| !w.interested()) && self.core.guards() == 0
    }

    /// Leaves the registry once the session is over and nobody is interested; under the
    /// registry lock, so that nobody can take interest in a watchdog that is about to stop.
    fn try_close(&mut self) -> bool {
        let Some(watch) = self.watch.upgrade() else {
            return true;
        };
        let (events, core) = (&self.events, &self.core);
        let busy = || !events.is_empty() || watch.has_posted() || core.guards() != 0;
        watch.leave_unless(busy)
    }
}

/// Records a run of a ticker in the process's [`RunRecord`] and returns since when the
/// process has run without a break. Unit tests (paused clocks, one per test thread) keep one
/// record per thread, so no test's paused instants reach another's.
fn process_ran(now: Instant, stall: Duration) -> Instant {
    #[cfg(not(test))]
    {
        static PROCESS: RunRecord = RunRecord::new();
        PROCESS.ran(now, stall)
    }
    #[cfg(test)]
    {
        thread_local! {
            static PROCESS: RunRecord = const { RunRecord::new() };
        }
        PROCESS.with(|record| record.ran(now, stall))
    }
}

/// Sleeps until the lease clock reads `at` (forever without one), but never longer than
/// [`clock::LONGEST_SLEEP`]: tokio's timers do not count a suspend, the lease clock does.
async fn sleep_on_lease_clock(at: Option<Instant>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let cap = Instant::now() + clock::LONGEST_SLEEP;
    tokio::time::sleep_until(clock::timer(at).min(cap)).await;
}
