//! The model for `stateright`: its initial states (built here, the creates sent through the
//! clients' side), the properties checked in every state, and each state's actions and next
//! states, which are the world's steps' (`step`).

use stateright::{Model, Property};
use zkfence::model_api::{Reply, Watchdog};

use crate::config::{Config, EXACT, FAST, SESSION_TICKS, SLOW};
use crate::state::{Client, Ghost, Message, Phase, Request, Role, Server, Session, State, CLIENTS};
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
/// An example the connect world must find: A's first acquire on the session its connect just
/// created, in a process that just started, granted at once (its lease anchored at the
/// connect, with no ticker record to lean on).
pub const FIRST_GRANT: &str = "a_new_sessions_first_acquire_is_granted_at_once";

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
    fn initial(&self, servers: [usize; CLIENTS], rate: i64, connected_new: bool) -> State {
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
                touched: match connected_new && c == 0 {
                    // The leader committed the session's creation at 0.
                    true => 0,
                    false => -self.config.keepalive_ticks(rates[c]),
                },
            }),
            nodes: [true; CLIENTS],
            clients: [0, 1].map(|c| Client {
                rate: rates[c],
                server: Some(servers[c]),
                down_since: 0,
                connected_new: connected_new && c == 0,
                paused: false,
                last_send: match connected_new && c == 0 {
                    true => 0,
                    false => -self.config.keepalive_ticks(rates[c]),
                },
                last_probe: -1,
                probes: 0,
                phase: Phase::Creating,
                in_flight: Some((Request::Create, 0)),
                inbox: vec![],
                watchdog: match connected_new && c == 0 {
                    true => self.connected(),
                    false => self.started(rates[c]),
                },
            }),
            faults: 0,
            ghost: Ghost::default(),
        };
        for client in 0..CLIENTS {
            state.send(client);
            let reply = Message::Reply {
                request: Request::Create,
                sent: 0,
                answer: Reply::Committed,
            };
            state.clients[client].inbox.push((0, reply));
        }
        state
    }

    /// A client's watchdog in a process that just started and connected a new session with
    /// a connect sent at 0 (`Connect::connect`): no ticker run before, the lease anchored at
    /// the connect.
    fn connected(&self) -> Watchdog {
        let mut watchdog = Watchdog::start(&self.config.settings, 0);
        watchdog.began(0);
        watchdog
    }

    /// A client's watchdog as it starts at 0, its process (on a clock of `rate`) running
    /// since a session timeout before, its ticker with it.
    fn started(&self, rate: i64) -> Watchdog {
        let mut watchdog = Watchdog::start(&self.config.settings, 0);
        watchdog.ran(-SESSION_TICKS * rate, 0);
        watchdog
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
        for &connected_new in self.config.new_sessions {
            for rate in [SLOW, FAST] {
                for servers in placements {
                    states.push(self.initial(servers, rate, connected_new));
                }
            }
        }
        states
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
            Property::sometimes(FIRST_GRANT, |model: &LeaseModel, state: &State| {
                state.now == 0 && state.clients[0].connected_new && model.passes(state, 0)
            }),
        ]
    }
}
