//! The model for `stateright`: its initial states, the actions each state allows, and the
//! properties checked in every state.

use stateright::{Model, Property};
use zkfence::model_api::{Reply, Watchdog};

use crate::config::{Config, EXACT, FAST, SESSION_TICKS, SLOW};
use crate::state::{
    Client, Ghost, Message, Phase, Request, Role, Server, Session, State, CLIENTS, SERVERS,
};
use crate::step::Action;

/// The lease model under one [`Config`].
#[derive(Debug, Clone)]
pub struct LeaseModel {
    /// Its bounds and rule.
    pub config: Config,
}

/// The name of the safety property at the heart of the lease: while a holder's lease holds, no
/// other contender holds the lock.
pub const ONE_HOLDER: &str = "one_holder_at_a_time";
/// A hold leaves jeopardy only on a committed probe of its node sent since the spell began.
pub const RESUME: &str = "resume_only_on_a_committed_proof";
/// Each grant's token is above every earlier grant's.
pub const TOKENS: &str = "tokens_increase_with_grants";
/// Liveness where it is promised: the waiter is granted within a bound once the holder's node
/// is gone and the waiter's session works.
pub const WAITER: &str = "waiter_granted_once_holder_gone";
/// An example the search must find: a hold that resumes from jeopardy.
pub const RESUMES: &str = "a_hold_resumes_from_jeopardy";
/// An example the search must find: the waiter granted after the holder's session expired.
pub const HANDOFF: &str = "the_waiter_takes_over_after_an_expiry";

impl LeaseModel {
    /// The model of `config`.
    pub fn new(config: Config) -> LeaseModel {
        LeaseModel { config }
    }

    /// Whether `client` would pass `check()` now: its process runs, and the library's guard
    /// check, at its clock's reading, passes.
    pub fn passes(&self, state: &State, client: usize) -> bool {
        let c = &state.clients[client];
        !c.paused && c.watchdog.check(state.clock(client)) == Some(Ok(()))
    }

    /// One initial state: the leader is server 0, A and B connected to `servers`, A's clock
    /// at `rate`; both have just sent their creates (A's first), processed at once. Both
    /// sessions were last heard of a keepalive ago, the worst their clients' pings allow.
    fn initial(&self, servers: [usize; CLIENTS], rate: i64) -> State {
        let server = |role| Server {
            role,
            isolated: false,
            pending: [false; CLIENTS],
            pending_since: None,
            sees: [true; CLIENTS],
        };
        let rates = [rate, EXACT];
        let mut state = State {
            now: 0,
            servers: [
                server(Role::Leader),
                server(Role::Follower),
                server(Role::Follower),
            ],
            sessions: [0, 1].map(|c| Session {
                alive: true,
                touched: -self.config.keepalive_ticks(rates[c]),
            }),
            nodes: [true; CLIENTS],
            clients: [0, 1].map(|c| Client {
                rate: rates[c],
                server: Some(servers[c]),
                paused: false,
                last_send: -self.config.keepalive_ticks(rates[c]),
                last_probe: -1,
                probes: 0,
                phase: Phase::Creating,
                in_flight: Some((Request::Create, 0)),
                inbox: vec![],
                watchdog: self.started(rates[c]),
            }),
            faults: 0,
            ghost: Ghost::default(),
        };
        for client in 0..CLIENTS {
            state.touch(client);
            let reply = Message::Reply {
                request: Request::Create,
                sent: 0,
                answer: Reply::Committed,
            };
            state.clients[client].inbox.push((0, reply));
        }
        state
    }

    /// A client's watchdog as it starts at 0, its process (on a clock of `rate`) running
    /// since a session timeout before, its ticker with it.
    fn started(&self, rate: i64) -> Watchdog {
        let mut watchdog = Watchdog::start(&self.config.settings, 0);
        watchdog.ran(-SESSION_TICKS * rate, 0);
        watchdog
    }

    /// The client actions `state` allows.
    fn client_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faults_left = state.faults < self.config.faults;
        for client in 0..CLIENTS {
            let c = &state.clients[client];
            if c.paused {
                actions.push(Action::Unpause(client));
                continue;
            }
            if state.over(client) {
                continue;
            }
            if c.inbox.first().is_some_and(|&(due, _)| due <= state.now) {
                actions.push(Action::Deliver(client));
            }
            let live_guard = c.phase == Phase::Holding;
            let wants_proofs = live_guard || c.phase == Phase::Proving;
            let can_probe = c.server.is_some()
                && c.in_flight.is_none()
                && c.last_probe < state.now
                && c.probes < self.config.probes[client];
            if wants_proofs && can_probe {
                actions.push(Action::Probe(client, false));
                actions.push(Action::Probe(client, true));
            }
            if c.server.is_none() {
                let working = (0..SERVERS).filter(|&s| state.working(s));
                actions.extend(working.map(|s| Action::Reconnect(client, s)));
            }
            if faults_left {
                if c.server.is_some() {
                    actions.push(Action::CutClient(client));
                }
                let warm_holder = live_guard && !c.watchdog.cold();
                if warm_holder || self.config.pause_anywhere {
                    actions.push(Action::Pause(client));
                }
            }
        }
    }

    /// The ensemble's actions `state` allows.
    fn ensemble_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faults_left = state.faults < self.config.faults;
        for server in 0..SERVERS {
            let s = &state.servers[server];
            if s.role == Role::Follower && s.pending_since.is_some() {
                actions.push(Action::Relay(server));
            }
            match s.role {
                Role::Follower if faults_left => {
                    actions.push(Action::CutFollower(server, false));
                    actions.push(Action::CutFollower(server, true));
                }
                Role::Leader if faults_left => {
                    actions.push(Action::IsolateLeader(false));
                    actions.push(Action::IsolateLeader(true));
                }
                Role::Looking if state.electable(server) => actions.push(Action::Elect(server)),
                _ => {}
            }
        }
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        // A on the leader or a follower; B on the leader, A's follower or the other one (a
        // follower is a follower: A on server 2 mirrors A on server 1). A's clock slow or fast.
        let placements = [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]];
        let mut states = Vec::new();
        for rate in [SLOW, FAST] {
            for servers in placements {
                states.push(self.initial(servers, rate));
            }
        }
        states
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.may_tick(&self.config) {
            actions.push(Action::Tick);
        }
        self.client_actions(state, actions);
        self.ensemble_actions(state, actions);
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        next.apply(action, &self.config);
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_HOLDER, |model: &LeaseModel, state: &State| {
                !(0..CLIENTS).all(|c| model.passes(state, c))
            }),
            Property::always(RESUME, |_, state: &State| state.ghost.bad_resume.is_none()),
            Property::always(TOKENS, |_, state: &State| !state.ghost.token_regressed),
            Property::always(WAITER, |model: &LeaseModel, state: &State| {
                let bound = 2 * model.config.reply_delay + 1;
                let since = state.ghost.waiter_ready_since;
                since.is_none_or(|since| state.now - since <= bound)
            }),
            Property::sometimes(RESUMES, |_, state: &State| state.ghost.resumed),
            Property::sometimes(HANDOFF, |model: &LeaseModel, state: &State| {
                !state.sessions[0].alive && model.passes(state, 1)
            }),
        ]
    }
}
