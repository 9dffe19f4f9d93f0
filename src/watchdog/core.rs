//! The watchdog's decisions, apart from ZooKeeper: which guards to cancel, when, and why.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::lease::LeaseCell;
use crate::loss::LossReason;
use crate::metrics::{LOCK_LOST_TOTAL, LOSS_DETECTION_SECONDS};

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
    pub(super) fn new(
        token: CancellationToken,
        lease: Arc<LeaseCell>,
        budget: Duration,
        ride_out: bool,
        label: String,
    ) -> GuardState {
        GuardState {
            token,
            reason: OnceLock::new(),
            lease,
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
        watch: Option<crate::requests::NodeWatch>,
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

/// A guard's node for the driver to watch.
pub(crate) struct NodeToWatch {
    pub(super) id: u64,
    pub(super) node: Arc<str>,
    /// The guard's token: a guard released before the watch is armed needs none.
    pub(super) token: CancellationToken,
    pub(super) pending: Option<crate::requests::NodeWatch>,
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
            metrics::counter!(LOCK_LOST_TOTAL, "reason" => reason.as_str(), "lock" => entry.state.label.clone())
                .increment(1);
            metrics::histogram!(LOSS_DETECTION_SECONDS, "reason" => reason.as_str())
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
    pub(super) fn probe_target(&self, turn: usize) -> Option<(u64, Arc<str>)> {
        if self.guards.is_empty() {
            return None;
        }
        self.guards
            .iter()
            .nth(turn % self.guards.len())
            .map(|(id, e)| (*id, e.node.clone()))
    }
}
