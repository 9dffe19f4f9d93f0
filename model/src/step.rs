//! How the model moves: ZooKeeper's side (touches, relays, commits, expiry, elections), the
//! network's and the processes' faults, and each client's side, which hands every decision
//! about the lease to the library's watchdog.

use zkfence::model_api::Reply;
use zookeeper_client::SessionState;

use crate::config::{Config, RELAY_TICKS, SESSION_TICKS};
use crate::state::{Ghost, Message, Phase, Request, Role, State, CLIENTS, SERVERS};

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

impl State {
    /// `client` sent something to its server at this tick: the server saw the session.
    pub(crate) fn touch(&mut self, client: usize) {
        let now = self.now;
        self.clients[client].last_send = now;
        let Some(server) = self.clients[client].server else {
            return;
        };
        match self.servers[server].role {
            Role::Leader => {
                if self.sessions[client].alive {
                    self.sessions[client].touched = now;
                }
            }
            Role::Follower => {
                let s = &mut self.servers[server];
                s.pending[client] = true;
                s.pending_since.get_or_insert(now);
            }
            // A cut or stale server's touches never reach the working leader.
            Role::Stale | Role::Cut | Role::Looking => {}
        }
    }

    /// The follower relays its touch table to the leader, which touches those sessions now.
    fn relay(&mut self, server: usize) {
        let pending = std::mem::take(&mut self.servers[server].pending);
        self.servers[server].pending_since = None;
        for (session, touched) in self.sessions.iter_mut().zip(pending) {
            if touched && session.alive {
                session.touched = self.now;
            }
        }
    }

    /// The client's connection is gone: what was in flight and on its way is lost.
    pub(crate) fn disconnect(&mut self, client: usize) {
        let c = &mut self.clients[client];
        c.server = None;
        c.in_flight = None;
        c.inbox.clear();
        let now = self.clock(client);
        self.clients[client]
            .watchdog
            .session(SessionState::Disconnected, now);
    }

    /// Sends `message` to `client` over its connection, if it has one to a working server.
    fn notify(&mut self, client: usize, message: Message, config: &Config) {
        if self.clients[client].server.is_some_and(|s| self.working(s)) {
            self.receive(client, message, self.now, config);
        }
    }

    /// `message` reaches `client` at tick `due`: taken at once if it is due now, the client
    /// runs and nothing is queued ahead of it; else queued, in order.
    pub(crate) fn receive(&mut self, client: usize, message: Message, due: i64, config: &Config) {
        let c = &self.clients[client];
        if due <= self.now && !c.paused && c.inbox.is_empty() {
            self.take(client, message, config);
        } else {
            let due = (c.inbox.last()).map_or(due, |&(last, _)| due.max(last));
            self.clients[client].inbox.push((due, message));
        }
    }

    /// The leader expires the session of `client`: its node is deleted, the waiter behind it
    /// and the client itself hear of it if their servers are working.
    fn expire(&mut self, client: usize, config: &Config) {
        self.sessions[client].alive = false;
        self.nodes[client] = false;
        for server in 0..SERVERS {
            if self.working(server) {
                self.servers[server].sees[client] = false;
            }
        }
        let behind = client + 1;
        if behind < CLIENTS && self.clients[behind].phase == Phase::Waiting {
            self.notify(behind, Message::Deleted, config);
        }
        self.notify(client, Message::Expired, config);
    }

    /// What `client`'s server answers to a probe sent now, `None` if it cannot (it waits for a
    /// quorum that does not come); `Some(Err(()))` if the session is gone.
    fn answer(&self, client: usize, sync: bool) -> Option<Result<Reply, ()>> {
        let server = self.clients[client].server?;
        let role = self.servers[server].role;
        let committed = self.working(server);
        if sync {
            // A leader answers its own clients' syncs without a quorum round; a follower
            // forwards them to its leader. The read behind it is the server's own data.
            if !matches!(role, Role::Leader | Role::Stale | Role::Follower) {
                return None;
            }
            if committed && !self.sessions[client].alive {
                return Some(Err(()));
            }
            let seen = self.servers[server].sees[client];
            return Some(Ok(if seen {
                Reply::Synced
            } else {
                Reply::Refused(true)
            }));
        }
        if !committed {
            return None;
        }
        if !self.sessions[client].alive {
            return Some(Err(()));
        }
        Some(Ok(match self.nodes[client] {
            true => Reply::Committed,
            false => Reply::Refused(true),
        }))
    }

    /// The client's watchdog sends a probe, of its guard's node or of its granted node; its
    /// reply comes back at once, or `late`.
    fn probe(&mut self, client: usize, late: bool, config: &Config) {
        let c = &self.clients[client];
        let sync = c.watchdog.probes_by_sync();
        let request = Request::Probe {
            sync,
            guard: c.phase == Phase::Holding,
        };
        self.touch(client);
        let now = self.now;
        self.clients[client].last_probe = now;
        self.clients[client].probes += 1;
        match self.answer(client, sync) {
            None => self.clients[client].in_flight = Some((request, now)),
            Some(Err(())) => self.notify(client, Message::Expired, config),
            Some(Ok(answer)) => {
                self.clients[client].in_flight = Some((request, now));
                let reply = Message::Reply {
                    request,
                    sent: now,
                    answer,
                };
                // Back on the connection it came by, whatever the server's role now.
                let due = now + if late { config.reply_delay } else { 0 };
                self.receive(client, reply, due, config);
            }
        }
    }

    /// Time moves on one tick.
    fn tick(&mut self, config: &Config) {
        self.now += 1;
        let now = self.now;
        if self.leader().is_some() {
            for client in 0..CLIENTS {
                let session = self.sessions[client];
                if session.alive && session.touched + SESSION_TICKS <= now {
                    self.expire(client, config);
                }
            }
        }
        for client in 0..CLIENTS {
            let c = &self.clients[client];
            if c.paused || self.over(client) {
                continue;
            }
            // The process ran through the tick: its watchdog's ticker ran (a paused one's
            // did not, and its first run after the pause sees the gap).
            let (from, to) = ((now - 1) * c.rate, now * c.rate);
            self.clients[client].watchdog.ran(from, to);
            let c = &self.clients[client];
            if c.server.is_some() && now - c.last_send >= config.keepalive_ticks(c.rate) {
                self.touch(client);
            }
            let clock = self.clock(client);
            let c = &mut self.clients[client];
            if c.watchdog.registered() {
                c.watchdog.check_lease(clock);
            }
        }
    }

    /// Whether time may move on: nothing is due that must happen within this tick (a relay, a
    /// message, a grant's proof, a reconnect, an election).
    pub(crate) fn may_tick(&self, config: &Config) -> bool {
        if self.now >= config.horizon {
            return false;
        }
        let relay_due = (0..SERVERS).any(|s| {
            let server = &self.servers[s];
            server.role == Role::Follower
                && (server.pending_since).is_some_and(|t| t + RELAY_TICKS <= self.now)
        });
        let election_due = (0..SERVERS).any(|s| self.electable(s));
        !relay_due && !election_due && (0..CLIENTS).all(|c| !self.client_due(c, config))
    }

    /// Whether `client` has something to do before time moves on: a message that is due, a
    /// grant's proof to send, a connection to make again.
    pub(crate) fn client_due(&self, client: usize, config: &Config) -> bool {
        let c = &self.clients[client];
        if c.paused || self.over(client) {
            return false;
        }
        let delivery = c.inbox.first().is_some_and(|&(due, _)| due <= self.now);
        let proof = c.phase == Phase::Proving
            && c.in_flight.is_none()
            && c.server.is_some()
            && c.last_probe < self.now
            && c.probes < config.probes[client];
        let reconnect = c.server.is_none() && (0..SERVERS).any(|s| self.working(s));
        delivery || proof || reconnect
    }

    /// Whether `client` is done: its acquire failed, or its hold is over.
    pub(crate) fn over(&self, client: usize) -> bool {
        let c = &self.clients[client];
        c.phase == Phase::Failed || (c.phase == Phase::Holding && c.watchdog.lost().is_some())
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
            Action::IsolateLeader(noticed) => self.isolate_leader(noticed),
            Action::CutFollower(server, noticed) => self.cut_follower(server, noticed),
            Action::CutClient(client) => self.disconnect(client),
            Action::Pause(client) => self.clients[client].paused = true,
            Action::Unpause(client) => self.clients[client].paused = false,
        }
        if matches!(
            action,
            Action::IsolateLeader(_)
                | Action::CutFollower(..)
                | Action::CutClient(_)
                | Action::Pause(_)
        ) {
            self.faults += 1;
        }
        self.watch_waiter();
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
