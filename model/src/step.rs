//! The world's steps: the [`Action`] enum, which actions each state enables (time moving on
//! only once nothing is due within the tick; faults while the schedule has some left), and
//! applying one: a tick (the leader's expiries, then each running client's tick), each other
//! action handed to the servers' side (`ensemble`) or the clients' side (`client`), and the
//! faults (a partition's servers dropping their clients, a connection breaking, a process
//! pausing), counted against the schedule's bound. It keeps the waiter's ghost up to date.
//!
//! The top of the model's calls: these call the clients' side and the servers' side, and
//! neither calls back up here.

use crate::config::Config;
use crate::ensemble::Dropped;
use crate::state::{Ghost, Phase, Role, State, CLIENTS, SERVERS};

/// One step of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time moves on one tick: sessions the leader last heard of `T` ago expire, running
    /// clients' watchdog tickers run, idle clients ping, watchdog timers run.
    Tick,
    /// The client takes the next message its connection brings, once it is due (a reply that
    /// came back late, or what queued behind it or behind a pause).
    Deliver(usize),
    /// The client's watchdog sends a probe; its reply comes back at once or (`true`) late, by
    /// the longest reply delay.
    Probe(usize, bool),
    /// A disconnected client connects to a working server.
    Reconnect(usize, usize),
    /// A follower answers the leader's ping, relaying the sessions that touched it.
    Relay(usize),
    /// A server is elected leader by a quorum of looking servers (at once, when it can be).
    Elect(usize),
    /// Fault: the leader is cut off from both followers, which notice at once, drop their
    /// clients and elect. The old leader notices at once too (`true`: as if it crashed), or
    /// never: stale, it answers its own clients' syncs for the rest of the schedule.
    IsolateLeader(bool),
    /// Fault: a follower is cut off from the others; it notices at once (`true`) and drops its
    /// clients, or never, keeping them connected to nothing for the rest of the schedule.
    CutFollower(usize, bool),
    /// Fault: a client's connection breaks.
    CutClient(usize),
    /// Fault: a client's process pauses.
    Pause(usize),
    /// The paused client runs again.
    Unpause(usize),
}

impl Action {
    /// Whether the action is a fault (counted against the schedule's bound).
    fn is_fault(self) -> bool {
        matches!(
            self,
            Action::IsolateLeader(_)
                | Action::CutFollower(..)
                | Action::CutClient(_)
                | Action::Pause(_)
        )
    }
}

impl State {
    /// The actions this state enables under `config`, in a fixed order: the tick, each
    /// client's, each server's.
    pub(crate) fn actions(&self, config: &Config, actions: &mut Vec<Action>) {
        if self.may_tick(config) {
            actions.push(Action::Tick);
        }
        self.client_actions(config, actions);
        self.ensemble_actions(config, actions);
    }

    /// The clients' actions, faults among them.
    fn client_actions(&self, config: &Config, actions: &mut Vec<Action>) {
        let faults_left = self.faults < config.faults;
        for client in 0..CLIENTS {
            let c = &self.clients[client];
            if c.paused {
                actions.push(Action::Unpause(client));
                continue;
            }
            if self.over(client) {
                continue;
            }
            if c.inbox.first().is_some_and(|&(due, _)| due <= self.now) {
                actions.push(Action::Deliver(client));
            }
            let live_guard = c.phase == Phase::Holding;
            let wants_proofs = live_guard || c.phase == Phase::Proving;
            if wants_proofs && self.can_probe(client, config) {
                actions.push(Action::Probe(client, false));
                actions.push(Action::Probe(client, true));
            }
            if c.server.is_none() {
                let open = |s: &usize| {
                    self.working(*s)
                        || (self.roams(client, config) && self.servers[*s].role == Role::Stale)
                };
                let servers = (0..SERVERS).filter(open);
                actions.extend(servers.map(|s| Action::Reconnect(client, s)));
            }
            if faults_left {
                if c.server.is_some() {
                    actions.push(Action::CutClient(client));
                }
                let warm_holder = live_guard && !c.watchdog.cold();
                if warm_holder || config.pause_anywhere {
                    actions.push(Action::Pause(client));
                }
            }
        }
    }

    /// The servers' actions, faults among them.
    fn ensemble_actions(&self, config: &Config, actions: &mut Vec<Action>) {
        let faults_left = self.faults < config.faults;
        for server in 0..SERVERS {
            let s = &self.servers[server];
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
                Role::Looking if self.electable(server) => actions.push(Action::Elect(server)),
                _ => {}
            }
        }
    }

    /// Whether time may move on: nothing is due that must happen within this tick (a relay, a
    /// message, a grant's proof, a reconnect, an election).
    fn may_tick(&self, config: &Config) -> bool {
        if self.now >= config.horizon {
            return false;
        }
        let relay_due = (0..SERVERS).any(|s| self.relay_due(s));
        let election_due = (0..SERVERS).any(|s| self.electable(s));
        !relay_due && !election_due && (0..CLIENTS).all(|c| !self.client_due(c, config))
    }

    /// Whether `client` has something to do before time moves on: a message that is due, a
    /// grant's proof to send, a connection to make again.
    fn client_due(&self, client: usize, config: &Config) -> bool {
        let c = &self.clients[client];
        if c.paused || self.over(client) {
            return false;
        }
        let delivery = c.inbox.first().is_some_and(|&(due, _)| due <= self.now);
        let proof = c.phase == Phase::Proving && self.can_probe(client, config);
        // In the connect world, while a leader cut off from its quorum still answers, a
        // reconnect may take up to the reply delay (and reach that leader): the client tries
        // the servers one by one. (Elsewhere a reconnect's timing changes nothing a late
        // probe's does not already cover.)
        let stale = (0..SERVERS).any(|s| self.servers[s].role == Role::Stale);
        let late =
            self.roams(client, config) && stale && self.now < c.down_since + config.reply_delay;
        let reconnect = c.server.is_none() && !late && (0..SERVERS).any(|s| self.working(s));
        delivery || proof || reconnect
    }

    /// Whether `client` may reconnect late, and to a leader cut off from its quorum: A, in
    /// the connect world (B, the waiter, reconnects as elsewhere: what it may do there is
    /// covered by A's, the holder's, whose lease is what such a reconnect could stretch).
    fn roams(&self, client: usize, config: &Config) -> bool {
        config.connect && client == 0
    }

    /// Applies `action`.
    pub(crate) fn apply(&mut self, action: Action, config: &Config) {
        match action {
            Action::Tick => self.tick(config),
            Action::Deliver(client) => self.deliver(client, config),
            Action::Probe(client, late) => self.probe(client, late, config),
            Action::Reconnect(client, server) => self.reconnect(client, server, config),
            Action::Relay(server) => self.relay(server),
            Action::Elect(server) => self.elect(server),
            Action::IsolateLeader(noticed) => {
                let dropped = self.isolate_leader(noticed);
                self.drop_clients(dropped, config);
            }
            Action::CutFollower(server, noticed) => {
                let dropped = self.cut_follower(server, noticed);
                self.drop_clients(dropped, config);
            }
            Action::CutClient(client) => self.disconnect(client, config),
            Action::Pause(client) => self.clients[client].paused = true,
            Action::Unpause(client) => self.clients[client].paused = false,
        }
        if action.is_fault() {
            self.faults += 1;
        }
        self.watch_waiter();
    }

    /// Time moves on one tick: the leader expires the sessions it last heard of `T` ago (the
    /// clients hearing of each at once), then each running client's process runs through it.
    fn tick(&mut self, config: &Config) {
        self.now += 1;
        for client in 0..CLIENTS {
            if self.expires(client) {
                self.expire(client);
                self.hear_expiry(client, config);
            }
        }
        for client in 0..CLIENTS {
            self.run_tick(client, config);
        }
    }

    /// The clients connected to a server that stepped down lose their connections.
    fn drop_clients(&mut self, dropped: Dropped, config: &Config) {
        for client in 0..CLIENTS {
            if self.clients[client].server.is_some_and(|s| dropped[s]) {
                self.disconnect(client, config);
            }
        }
    }

    /// Keeps `Ghost::waiter_ready_since` up to date.
    fn watch_waiter(&mut self) {
        let b = &self.clients[1];
        let ready = !self.nodes[0]
            && self.sessions[1].alive
            && !b.paused
            && b.server.is_some_and(|s| self.working(s))
            && matches!(b.phase, Phase::Waiting | Phase::Proving);
        let ghost: &mut Ghost = &mut self.ghost;
        ghost.waiter_ready_since = match ready {
            true => Some(ghost.waiter_ready_since.unwrap_or(self.now)),
            false => None,
        };
    }
}
