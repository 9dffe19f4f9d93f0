//! The queue model for `stateright`: its initial state, its properties, its actions and next
//! states (the steps of [`world`](super::world)).

use stateright::{Model, Property};
use zkfence::model_api::queue::LockKind;

use super::state::{Phase, State, CONTENDERS};
use super::world::{initial, Action, QueueConfig};

/// The queue model under one [`QueueConfig`].
#[derive(Debug, Clone)]
pub struct QueueModel {
    /// Its bounds and rule.
    pub config: QueueConfig,
}

/// No two contenders hold at once with their nodes there, unless both read.
pub const ONE_HOLDER: &str = "one_holder_at_a_time";
/// A contender holds only once every live node that sorts before its own and blocks its kind
/// is gone: grants follow the queue's order among live nodes.
pub const ORDER: &str = "grants_in_queue_order";
/// A grant is handed out only on a lease that holds at that moment.
pub const PROVEN: &str = "grants_on_a_proven_lease";
/// Each exclusive grant's token is above every earlier grant's; each shared grant's above
/// every earlier exclusive grant's.
pub const TOKENS: &str = "tokens_increase_with_grants";
/// A guard granted after a lock-delay is handed out only while its node is there, unless it
/// took nothing the server sent after the node went: a node of ours deleted in one
/// transaction with the node we proceeded past (a session's close, an administrator's `multi`)
/// is found gone before the grant.
pub const LIVE: &str = "grants_on_a_live_node";
/// Every schedule ends with every contender served: it held and released, or its acquire
/// ended (gave up, or its session expired); no waiter is left stranded.
pub const SERVED: &str = "every_contender_is_served";
/// An example the search must find: a successor that queued behind more than one node
/// proceeds on a marked release, with no listing.
pub const MARKER: &str = "a_successor_proceeds_on_the_marker";
/// An example the search must find: a grant after a wait longer than the lease is proved by a
/// committed probe first.
pub const PROVED: &str = "a_long_wait_is_proved_before_its_grant";
/// An example the search must find: a waiter lists again after a watched node went without a
/// release.
pub const RELIST: &str = "a_waiter_lists_again_after_a_vanish";
/// An example a search with A and B on one session and lock-delay on must find: a waiter past
/// a lock-delay reads its own node and finds it gone.
pub const REREAD: &str = "a_waiter_finds_its_node_gone_after_a_lock_delay";

/// The queue model's safety properties, and its liveness one.
pub const SAFETY: [&str; 6] = [ONE_HOLDER, ORDER, PROVEN, LIVE, TOKENS, SERVED];
/// The examples every run of the library's rule must find.
pub const EXAMPLES: [&str; 2] = [PROVED, RELIST];

impl QueueModel {
    /// The model of `config`.
    pub fn new(config: QueueConfig) -> QueueModel {
        QueueModel { config }
    }
}

/// Whether a node of kind `ahead` blocks a node of `kind` behind it: a reader waits only for
/// writers, every other kind for every node (the kinds' definitions, written here, not taken
/// from the library).
fn blocks(kind: LockKind, ahead: LockKind) -> bool {
    kind != LockKind::Read || ahead != LockKind::Read
}

impl Model for QueueModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![initial(&self.config)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        state.actions(&self.config, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        next.apply(action, &self.config);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |_, state: &State| {
                let holders: Vec<usize> = (0..CONTENDERS).filter(|&c| state.holds(c)).collect();
                let readers = |c: &usize| state.contenders[*c].kind == LockKind::Read;
                holders.len() <= 1 || holders.iter().all(readers)
            }),
            Property::always(ORDER, |_, state: &State| {
                (0..CONTENDERS).filter(|&c| state.holds(c)).all(|c| {
                    let own = state.node_of(c).map_or(0, |n| n.seq);
                    let kind = state.contenders[c].kind;
                    !(state.nodes.iter())
                        .any(|n| n.seq < own && blocks(kind, state.contenders[n.owner].kind))
                })
            }),
            Property::always(PROVEN, |_, state: &State| state.ghost.unproven.is_none()),
            Property::always(LIVE, |_, state: &State| state.ghost.granted_gone.is_none()),
            Property::always(TOKENS, |_, state: &State| !state.ghost.token_regressed),
            Property::eventually(SERVED, |_, state: &State| {
                (state.contenders.iter()).all(|k| matches!(k.phase, Phase::Done(_)))
            }),
            Property::sometimes(MARKER, |_, state: &State| state.ghost.marker_handoff),
            Property::sometimes(PROVED, |_, state: &State| state.ghost.proved_grant),
            Property::sometimes(RELIST, |_, state: &State| state.ghost.relisted_after_vanish),
            Property::sometimes(REREAD, |_, state: &State| state.ghost.reread_found_gone),
        ]
    }
}
