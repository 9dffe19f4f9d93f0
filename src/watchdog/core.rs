//! The watchdog's decisions, apart from ZooKeeper: which guards to cancel or put in jeopardy,
//! when, and why; and the messages its task takes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::lease::LeaseCell;
use super::state::{GuardState, JeopardySpell};
use crate::loss::LossReason;
use crate::metrics::{JEOPARDY_SECONDS, JEOPARDY_TOTAL, LOCK_LOST_TOTAL, LOSS_DETECTION_SECONDS};
use crate::mutants::Mutant;

/// Messages to a session's watchdog task.
pub(crate) enum Event {
    /// A guard was acquired: watch its node, cancel it on loss.
    /// `watch` is a pending watch on the node that the acquire already set, if any.
    Register {
        id: u64,
        node: Arc<str>,
        state: Arc<GuardState>,
        watch: Option<crate::requests::watch::NodeWatch>,
    },
    /// The guard was released or dropped.
    Unregister { id: u64 },
    /// A session state change (from the state channel, a folded flap put back).
    State(zk::SessionState),
    /// The client is on this session id (checked against the one the guards hold).
    SessionId(i64),
    /// A guard's node is gone.
    NodeGone { id: u64 },
    /// A client handle for probes and node watches, sent when interest rises from zero: the
    /// task lets its handle go when idle, so that it never keeps a session open by itself.
    Attach(Arc<zk::Client>),
    /// Messages were posted for the driver to take (see `SessionWatch::post`).
    Posted,
    /// An acquire was granted `node` while the lease could not vouch for a hold of `budget`
    /// (its session sent no proof while it waited), or a waiter expects its grant soon (the
    /// queue's warm-up): prove the session, checking the node, and say when the lease holds
    /// for `budget` (`done` dropped: the node is gone).
    Prove {
        node: Arc<str>,
        budget: Duration,
        done: tokio::sync::oneshot::Sender<()>,
    },
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
            Event::Posted => f.write_str("Posted"),
            Event::Prove { node, .. } => write!(f, "Prove({node})"),
        }
    }
}

/// What came back for a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Answer {
    /// The write was committed: a proof for the lease (and that the checked node exists).
    Committed,
    /// A `sync` was answered (the `SyncLease` and `ResumeWithoutProof` mutants' probes).
    Synced,
    /// A server answered with an error: the index of the check whose node is gone, if that is
    /// the error.
    Refused(Option<usize>),
    /// No answer (the connection broke, the session ended).
    None,
}

/// A guard's node for the driver to watch.
pub(crate) struct NodeToWatch {
    pub(super) id: u64,
    pub(super) node: Arc<str>,
    /// The guard's state: a guard released before the watch is armed needs none, and a
    /// revocation request found in the node's data is told to it.
    pub(super) state: Arc<GuardState>,
    pub(super) pending: Option<crate::requests::watch::NodeWatch>,
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
struct WatchedGuard {
    node: Arc<str>,
    state: Arc<GuardState>,
    /// Whether its budget is in `Core::budgets`: only steady live guards have a lease deadline
    /// to sleep until (a lapsed one would make the deadline always past, and the task spin).
    counted: bool,
    /// When its grace runs out, while it is in jeopardy (also in `Core::grace_ends`).
    grace_end: Option<Instant>,
}

/// The watchdog's decisions, apart from ZooKeeper, so that tests drive it with paused time
/// through the same channel production uses. Instants are on the lease clock.
#[derive(Debug)]
pub(crate) struct Core {
    session: i64,
    guards: HashMap<u64, WatchedGuard>,
    /// Lease budgets of the steady guards (a multiset), to sleep until the earliest deadline.
    budgets: BTreeMap<Duration, usize>,
    /// When the grace of each guard in jeopardy runs out.
    grace_ends: BTreeSet<(Instant, u64)>,
    pub(super) lease: Arc<LeaseCell>,
    /// Set once the session is over; guards registered later are cancelled at once.
    pub(super) terminal: Option<LossReason>,
    disconnected: bool,
}

impl Core {
    pub(crate) fn new(session: i64, lease: Arc<LeaseCell>) -> Core {
        Core {
            session,
            guards: HashMap::new(),
            budgets: BTreeMap::new(),
            grace_ends: BTreeSet::new(),
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
            } => return Some(self.register(id, node, state, watch, now)),
            Event::Unregister { id } => {
                self.uncount(id);
                self.end_grace(id);
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
            Event::Attach(_) | Event::Posted | Event::Prove { .. } => {}
        }
        None
    }

    fn register(
        &mut self,
        id: u64,
        node: Arc<str>,
        state: Arc<GuardState>,
        watch: Option<crate::requests::watch::NodeWatch>,
        now: Instant,
    ) -> NodeToWatch {
        *self.budgets.entry(state.terms.budget).or_default() += 1;
        let to_watch = NodeToWatch {
            id,
            node: node.clone(),
            state: state.clone(),
            pending: watch,
        };
        let ride_out = state.terms.ride_out;
        let deadline = state.deadline();
        let entry = WatchedGuard {
            node,
            state,
            counted: true,
            grace_end: None,
        };
        self.guards.insert(id, entry);
        if let Some(reason) = self.terminal {
            self.lose(id, reason, now);
        } else if self.disconnected && !ride_out {
            self.falter(id, now, LossReason::Disconnected, now);
        } else if now >= deadline {
            self.falter(id, deadline, LossReason::LeaseExpired, now);
        }
        to_watch
    }

    fn on_state(&mut self, state: zk::SessionState, now: Instant) {
        let reason = match state {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                if self.disconnected && self.lease.flaw().is(Mutant::AnchorOnReconnect) {
                    // The mutant's flaw: a resumed session's reconnect taken for a new
                    // session's connect, which anchors the lease where it began.
                    self.lease.began(now);
                }
                self.disconnected = false;
                return;
            }
            zk::SessionState::Disconnected => {
                self.disconnected = true;
                let strict: Vec<u64> = (self.guards.iter())
                    .filter(|(_, e)| !e.state.terms.ride_out)
                    .map(|(id, _)| *id)
                    .collect();
                for id in strict {
                    self.falter(id, now, LossReason::Disconnected, now);
                }
                return;
            }
            zk::SessionState::Expired => LossReason::SessionExpired,
            zk::SessionState::Closed => LossReason::ClientClosed,
            zk::SessionState::AuthFailed => LossReason::AuthFailed,
        };
        self.terminal.get_or_insert(reason);
        let ids: Vec<u64> = self.guards.keys().copied().collect();
        for id in ids {
            self.lose(id, reason, now);
        }
    }

    /// The hold of `id` stopped being provable at `since`, for `cause`: with a grace it is in
    /// jeopardy from then on; without one it is lost.
    fn falter(&mut self, id: u64, since: Instant, cause: LossReason, now: Instant) {
        let Some(state) = self.guards.get(&id).map(|e| e.state.clone()) else {
            return;
        };
        if state.terms.grace.is_zero() {
            self.lose(id, cause, now);
            return;
        }
        if state.enter_jeopardy(JeopardySpell { since, cause }) {
            metrics::counter!(JEOPARDY_TOTAL, "outcome" => "entered", "lock" => state.terms.label.clone())
                .increment(1);
            tracing::warn!(
                node = %self.guards[&id].node,
                session_id = %zk::SessionId(self.session),
                cause = cause.as_str(),
                grace_ms = state.terms.grace.as_millis() as u64,
                "lock in jeopardy: suspended until a committed probe finds its node, lost if the grace runs out"
            );
        }
        self.track_spell(id);
    }

    /// Takes a guard that is in jeopardy (put there by us or by its own `check()`) out of the
    /// lease deadlines and into the grace deadlines.
    fn track_spell(&mut self, id: u64) {
        let Some(spell) = self.guards.get(&id).and_then(|e| e.state.current_spell()) else {
            return;
        };
        self.uncount(id);
        let Some(entry) = self.guards.get_mut(&id) else {
            return;
        };
        if entry.grace_end.is_none() {
            let end = spell.since + entry.state.terms.grace;
            entry.grace_end = Some(end);
            self.grace_ends.insert((end, id));
        }
    }

    /// A committed probe sent at `sent` found the node of `id`: a spell that began by then
    /// ends if the lease holds again.
    pub(crate) fn found(&mut self, id: u64, sent: Instant, now: Instant) {
        let Some(state) = self.guards.get(&id).map(|e| e.state.clone()) else {
            return;
        };
        let Some(spell) = state.resume(sent, now) else {
            return;
        };
        self.end_grace(id);
        if let Some(entry) = self.guards.get_mut(&id) {
            entry.counted = true;
            *self.budgets.entry(state.terms.budget).or_default() += 1;
        }
        let spent = now.saturating_duration_since(spell.since);
        metrics::counter!(JEOPARDY_TOTAL, "outcome" => "resumed", "lock" => state.terms.label.clone())
            .increment(1);
        metrics::histogram!(JEOPARDY_SECONDS, "outcome" => "resumed").record(spent.as_secs_f64());
        tracing::info!(
            node = %self.guards[&id].node,
            session_id = %zk::SessionId(self.session),
            jeopardy_ms = spent.as_secs_f64() * 1e3,
            "lock steady again: a committed probe found its node"
        );
    }

    /// Records what the answer to a probe sent at `sent` proves, `checked` naming the guard of
    /// each of its checks in order (`None` for a granted node or a lock path): a commit is a
    /// proof for the lease (see the lease module) and finds each checked guard's node; any
    /// other server answer is a reply to pair with; a refusal that names a missing node ends
    /// that node's hold. Returns the index of the check found missing, if one was.
    pub(crate) fn probed(
        &mut self,
        answer: Answer,
        sent: Instant,
        checked: &[Option<u64>],
        now: Instant,
    ) -> Option<usize> {
        let guards = || checked.iter().flatten().copied();
        match answer {
            Answer::Committed => {
                self.lease.committed(sent, now);
                for id in guards() {
                    self.found(id, sent, now);
                }
            }
            Answer::Synced => {
                self.lease.synced(sent, now);
                self.lease.replied(sent, now);
                // The mutant's flaw: a sync's answer taken for the nodes found.
                if self.lease.flaw().is(Mutant::ResumeWithoutProof) {
                    for id in guards() {
                        self.found(id, sent, now);
                    }
                }
            }
            Answer::Refused(gone) => {
                self.lease.replied(sent, now);
                let missing = gone.filter(|&i| i < checked.len())?;
                if let Some(id) = checked[missing] {
                    self.lose(id, LossReason::NodeDeleted, now);
                }
                return Some(missing);
            }
            Answer::None => {}
        }
        None
    }

    /// Whether the next probe is a `sync` rather than a committed write: only under the
    /// mutants' flaws (the `SyncLease` rule, or `ResumeWithoutProof` while a guard is in
    /// jeopardy).
    pub(crate) fn probes_by_sync(&self) -> bool {
        self.lease.is_legacy()
            || (self.lease.flaw().is(Mutant::ResumeWithoutProof) && self.any_in_jeopardy())
    }

    /// Whether any guard is in jeopardy.
    pub(crate) fn any_in_jeopardy(&self) -> bool {
        !self.grace_ends.is_empty()
    }

    /// The earliest instant something is due: a steady guard's lease deadline, or the end of a
    /// jeopardized guard's grace.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let lease = (self.budgets.keys().next()).map(|shortest| self.lease.deadline(*shortest));
        let grace = self.grace_ends.first().map(|&(end, _)| end);
        lease.into_iter().chain(grace).min()
    }

    /// Puts in jeopardy (or cancels) every steady guard whose lease has lapsed, and cancels
    /// every guard whose grace has run out.
    pub(crate) fn check_lease(&mut self, now: Instant) {
        let due: Vec<(u64, bool)> = self
            .guards
            .iter()
            .filter(|(_, e)| e.counted && (e.state.is_cancelled() || now >= e.state.deadline()))
            .map(|(id, e)| (*id, e.state.is_cancelled()))
            .collect();
        for (id, cancelled) in due {
            if cancelled {
                // Cancelled elsewhere (check(), release, the owner): records why, once.
                self.lose(id, LossReason::LeaseExpired, now);
            } else {
                let lapsed_at = self.guards[&id].state.deadline();
                self.falter(id, lapsed_at, LossReason::LeaseExpired, now);
            }
        }
        let over: Vec<u64> = (self.grace_ends.iter())
            .take_while(|&&(end, _)| end <= now)
            .map(|&(_, id)| id)
            .collect();
        for id in over {
            let cause = (self.guards.get(&id))
                .and_then(|e| e.state.current_spell())
                .map_or(LossReason::LeaseExpired, |s| s.cause);
            self.lose(id, cause, now);
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
        let budget = entry.state.terms.budget;
        if let Some(n) = self.budgets.get_mut(&budget) {
            *n -= 1;
            if *n == 0 {
                self.budgets.remove(&budget);
            }
        }
    }

    /// Takes a guard's grace deadline out, once.
    fn end_grace(&mut self, id: u64) {
        if let Some(end) = self.guards.get_mut(&id).and_then(|e| e.grace_end.take()) {
            self.grace_ends.remove(&(end, id));
        }
    }

    fn lose(&mut self, id: u64, reason: LossReason, now: Instant) {
        self.uncount(id);
        let grace_end = self.guards.get(&id).and_then(|e| e.grace_end);
        self.end_grace(id);
        let Some(entry) = self.guards.get(&id) else {
            return;
        };
        let spell = entry.state.current_spell();
        if !entry.state.lose(reason) {
            return;
        }
        // When the loss became observable: the grace's end, the lease deadline, or now.
        let observed = match (grace_end, reason) {
            (Some(end), _) => end.min(now),
            (None, LossReason::LeaseExpired) => entry.state.deadline().min(now),
            _ => now,
        };
        let latency = now.saturating_duration_since(observed);
        let label = entry.state.terms.label.clone();
        metrics::counter!(LOCK_LOST_TOTAL, "reason" => reason.as_str(), "lock" => label)
            .increment(1);
        metrics::histogram!(LOSS_DETECTION_SECONDS, "reason" => reason.as_str())
            .record(latency.as_secs_f64());
        if let Some(spell) = spell {
            metrics::histogram!(JEOPARDY_SECONDS, "outcome" => "lost")
                .record(now.saturating_duration_since(spell.since).as_secs_f64());
        }
        tracing::warn!(
            node = %entry.node,
            session_id = %zk::SessionId(self.session),
            reason = reason.as_str(),
            detection_latency_ms = latency.as_secs_f64() * 1e3,
            "lock lost: {reason}"
        );
    }

    pub(crate) fn guards(&self) -> usize {
        self.guards.len()
    }

    /// Whether guard `id` is registered (not yet unregistered).
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.guards.contains_key(&id)
    }

    /// Guard `id`'s node and state, while it is registered and has not ended.
    pub(super) fn live_node(&self, id: u64) -> Option<(&Arc<str>, &Arc<GuardState>)> {
        (self.guards.get(&id))
            .filter(|e| !e.state.is_cancelled())
            .map(|e| (&e.node, &e.state))
    }

    /// What the next probe checks: every guard in jeopardy, when there is one (only a
    /// committed probe of its own node ends a guard's jeopardy, and one `multi` that checks
    /// them all resumes them together); else one held node, in turn.
    pub(super) fn probe_targets(&self, turn: usize) -> Vec<(u64, Arc<str>)> {
        if !self.grace_ends.is_empty() {
            return (self.grace_ends.iter())
                .filter_map(|&(_, id)| self.guards.get(&id).map(|e| (id, e.node.clone())))
                .collect();
        }
        if self.guards.is_empty() {
            return Vec::new();
        }
        (self.guards.iter())
            .nth(turn % self.guards.len())
            .map(|(id, e)| (*id, e.node.clone()))
            .into_iter()
            .collect()
    }
}

/// A watchdog core's content as a value, its lease's included, for the lease model
/// (`crate::watchdog::model`).
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CoreSnapshot {
    session: i64,
    pub(super) lease: super::lease::LeaseSnapshot,
    /// The guards, by id.
    pub(super) guards: Vec<GuardSnapshot>,
    terminal: Option<LossReason>,
    disconnected: bool,
}

/// A guard as the core sees it, as a value.
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct GuardSnapshot {
    id: u64,
    node: Arc<str>,
    counted: bool,
    grace_end: Option<Instant>,
    pub(super) state: super::state::StateSnapshot,
}

#[cfg(feature = "model")]
impl Core {
    /// This core's content (and its lease's) as a value.
    pub(crate) fn snapshot(&self) -> CoreSnapshot {
        let mut guards: Vec<GuardSnapshot> = (self.guards.iter())
            .map(|(id, e)| GuardSnapshot {
                id: *id,
                node: e.node.clone(),
                counted: e.counted,
                grace_end: e.grace_end,
                state: e.state.snapshot(),
            })
            .collect();
        guards.sort_by_key(|g| g.id);
        CoreSnapshot {
            session: self.session,
            lease: self.lease.snapshot(),
            guards,
            terminal: self.terminal,
            disconnected: self.disconnected,
        }
    }

    /// A core (with its own lease cell) holding what `snapshot` holds; the budget and grace
    /// deadlines are rebuilt from the guards, as the core keeps them.
    pub(crate) fn restore(snapshot: &CoreSnapshot) -> Core {
        let lease = Arc::new(LeaseCell::restore(&snapshot.lease));
        let mut core = Core::new(snapshot.session, lease.clone());
        core.terminal = snapshot.terminal;
        core.disconnected = snapshot.disconnected;
        for guard in &snapshot.guards {
            let state = Arc::new(GuardState::restore(&guard.state, lease.clone()));
            if guard.counted {
                *core.budgets.entry(state.terms.budget).or_default() += 1;
            }
            if let Some(end) = guard.grace_end {
                core.grace_ends.insert((end, guard.id));
            }
            let entry = WatchedGuard {
                node: guard.node.clone(),
                state,
                counted: guard.counted,
                grace_end: guard.grace_end,
            };
            core.guards.insert(guard.id, entry);
        }
        core
    }
}
