//! The clients' side: each client's connection (what it sends, what its connection brings it
//! and in what order, breaking, reconnecting), its process's tick (the watchdog's ticker, the
//! keepalive, the lease's timer), and its acquire (the create, the wait, the grant, the proof,
//! the guard's registration) as the library's acquire and watchdog driver do them, every
//! decision about the lease left to the library's watchdog (`zkfence::model_api`).
//!
//! In the middle of the model's calls: the world's steps (`step`) call these; these call the
//! servers' side (`ensemble`) where a client's request reaches its server (a send touches the
//! session, a probe is answered, a reconnect revalidates), and never the steps.

use zkfence::model_api::Reply;
use zookeeper_client::SessionState;

use crate::config::Config;
use crate::state::{Message, Phase, Request, State, CLIENTS};

/// A lock node's name, for the watchdog's guard.
const NODES: [&str; 2] = ["/lock/_c_a-lock-0000000001", "/lock/_c_b-lock-0000000002"];

impl State {
    /// `client` sends something to its server at this tick: the server sees the session.
    pub(crate) fn send(&mut self, client: usize) {
        self.clients[client].last_send = self.now;
        if let Some(server) = self.clients[client].server {
            self.touch(server, client);
        }
    }

    /// Whether `client` is done: its acquire failed, or its hold is over.
    pub(crate) fn over(&self, client: usize) -> bool {
        let c = &self.clients[client];
        c.phase == Phase::Failed || (c.phase == Phase::Holding && c.watchdog.lost().is_some())
    }

    /// Whether `client`'s watchdog may send a probe now: it is connected, nothing is in
    /// flight, it sent none this tick, and it has probes left.
    pub(crate) fn can_probe(&self, client: usize, config: &Config) -> bool {
        let c = &self.clients[client];
        c.server.is_some()
            && c.in_flight.is_none()
            && c.last_probe < self.now
            && c.probes < config.probes[client]
    }

    /// The client's process ran through the tick just ended, unless it is paused or done: its
    /// watchdog's ticker runs (a paused one's did not, and its first run after the pause sees
    /// the gap), it pings its server if it has been idle a keepalive, and its watchdog's timer
    /// checks the lease.
    pub(crate) fn run_tick(&mut self, client: usize, config: &Config) {
        let now = self.now;
        let c = &self.clients[client];
        if c.paused || self.over(client) {
            return;
        }
        let (from, to) = ((now - 1) * c.rate, now * c.rate);
        self.clients[client].watchdog.ran(from, to);
        let c = &self.clients[client];
        if c.server.is_some() && now - c.last_send >= config.keepalive_ticks(c.rate) {
            self.send(client);
        }
        let clock = self.clock(client);
        let c = &mut self.clients[client];
        if c.watchdog.registered() {
            c.watchdog.check_lease(clock);
        }
    }

    /// The client's connection is gone: what was in flight and on its way is lost. (The
    /// connect world notes when, for how late a reconnect may come; elsewhere the tick would
    /// only tell apart states that are the same.)
    pub(crate) fn disconnect(&mut self, client: usize, config: &Config) {
        let now = self.now;
        let c = &mut self.clients[client];
        c.server = None;
        if config.connect {
            c.down_since = now;
        }
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

    /// The clients hear that the leader expired `client`'s session: the waiter behind it (its
    /// watch on the deleted node fires) and the client itself, if their servers are working.
    pub(crate) fn hear_expiry(&mut self, client: usize, config: &Config) {
        let behind = client + 1;
        if behind < CLIENTS && self.clients[behind].phase == Phase::Waiting {
            self.notify(behind, Message::Deleted, config);
        }
        self.notify(client, Message::Expired, config);
    }

    /// `message` reaches `client` at tick `due`: taken at once if it is due now, the client
    /// runs and nothing is queued ahead of it; else queued, in order.
    fn receive(&mut self, client: usize, message: Message, due: i64, config: &Config) {
        let c = &self.clients[client];
        if due <= self.now && !c.paused && c.inbox.is_empty() {
            self.take(client, message, config);
        } else {
            let due = (c.inbox.last()).map_or(due, |&(last, _)| due.max(last));
            self.clients[client].inbox.push((due, message));
        }
    }

    /// The client's watchdog sends a probe, of its guard's node or of its granted node; its
    /// server answers it as it arrives, and the reply comes back at once, or `late`.
    pub(crate) fn probe(&mut self, client: usize, late: bool, config: &Config) {
        let c = &self.clients[client];
        let sync = c.watchdog.probes_by_sync();
        let request = Request::Probe {
            sync,
            guard: c.phase == Phase::Holding,
        };
        self.send(client);
        let now = self.now;
        self.clients[client].last_probe = now;
        self.clients[client].probes += 1;
        let server = self.clients[client].server;
        match server.and_then(|server| self.answer(server, client, sync)) {
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

    /// The client takes the next message its connection brings.
    pub(crate) fn deliver(&mut self, client: usize, config: &Config) {
        let (_, message) = self.clients[client].inbox.remove(0);
        self.take(client, message, config);
    }

    /// The client takes `message`.
    fn take(&mut self, client: usize, message: Message, config: &Config) {
        let now = self.clock(client);
        match message {
            Message::Reply {
                request,
                sent,
                answer,
            } => {
                self.clients[client].in_flight = None;
                let sent = sent * self.clients[client].rate;
                self.replied(client, request, sent, answer, now, config);
            }
            Message::Deleted => self.grant(client, config),
            Message::Expired => {
                self.clients[client]
                    .watchdog
                    .session(SessionState::Expired, now);
                self.disconnect(client, config);
                if self.clients[client].phase != Phase::Holding {
                    self.clients[client].phase = Phase::Failed;
                }
            }
        }
    }

    /// A reply to `request`, sent at `sent` and answered `answer`, arrives at `now` (lease
    /// clock): recorded by the library as the acquire (the create) or the driver (a probe)
    /// records it.
    fn replied(
        &mut self,
        client: usize,
        request: Request,
        sent: i64,
        answer: Reply,
        now: i64,
        config: &Config,
    ) {
        let before = self.clients[client].watchdog.jeopardy_since();
        match request {
            Request::Create => {
                self.clients[client].watchdog.committed(sent, now);
                self.created(client, config);
            }
            Request::Probe { guard, .. } => {
                let c = &mut self.clients[client];
                c.watchdog.probed(answer, sent, guard, now);
                if c.phase == Phase::Proving {
                    if answer == Reply::Refused(true) {
                        c.phase = Phase::Failed;
                    } else if c.watchdog.proven(&config.settings, now) {
                        self.register(client, config);
                    }
                }
            }
        }
        let c = &self.clients[client];
        let resumed = c.watchdog.jeopardy_since().is_none() && c.watchdog.lost().is_none();
        if let (Some(since), true) = (before, resumed) {
            self.ghost.resumed = true;
            let proof = (request, answer)
                == (
                    Request::Probe {
                        sync: false,
                        guard: true,
                    },
                    Reply::Committed,
                );
            if !proof || sent < since {
                self.ghost.bad_resume = Some((client, self.now));
            }
        }
    }

    /// The client's node exists (its create's reply came, or it found the node after a lost
    /// reply): A's is first, and granted; B's listing showed A's node ahead (the creates were
    /// processed in order at the start), so B waits, its watch telling it when A's goes.
    fn created(&mut self, client: usize, config: &Config) {
        match client {
            0 => self.grant(client, config),
            _ => self.clients[client].phase = Phase::Waiting,
        }
    }

    /// The acquire is granted: the lease vouches for it at once, or the grant waits for a
    /// probe (the library decides, and cools the lease if the session sent no proof while it
    /// waited).
    fn grant(&mut self, client: usize, config: &Config) {
        let now = self.clock(client);
        let c = &mut self.clients[client];
        if c.phase == Phase::Failed {
            return;
        }
        match c.watchdog.grant(&config.settings, false, now) {
            true => self.register(client, config),
            false => self.clients[client].phase = Phase::Proving,
        }
    }

    /// The guard is built and registered with the watchdog; its token is checked against the
    /// earlier grants'.
    fn register(&mut self, client: usize, config: &Config) {
        let now = self.clock(client);
        let c = &mut self.clients[client];
        c.watchdog.register(&config.settings, NODES[client], now);
        c.phase = Phase::Holding;
        let token = client as u8 + 1;
        if token <= self.ghost.last_token {
            self.ghost.token_regressed = true;
        }
        self.ghost.last_token = token;
    }

    /// The client connects to `server` again: the server revalidates the session with the
    /// leader (a touch), or finds it expired; the client's watches are set again and fire if
    /// their nodes went meanwhile.
    pub(crate) fn reconnect(&mut self, client: usize, server: usize, config: &Config) {
        let now = self.clock(client);
        if !self.revalidate(client, server) {
            self.clients[client]
                .watchdog
                .session(SessionState::Expired, now);
            if self.clients[client].phase != Phase::Holding {
                self.clients[client].phase = Phase::Failed;
            }
            return;
        }
        self.clients[client].server = Some(server);
        self.clients[client].down_since = 0;
        self.clients[client].last_send = self.now;
        self.clients[client]
            .watchdog
            .session(SessionState::SyncConnected, now);
        if self.clients[client].phase == Phase::Creating {
            // Its create's reply was lost: it finds its node by its name (a read, no proof).
            self.created(client, config);
        }
        let ahead_gone = client > 0 && !self.nodes[client - 1];
        if self.clients[client].phase == Phase::Waiting && ahead_gone {
            self.receive(client, Message::Deleted, self.now, config);
        }
        if self.clients[client].phase == Phase::Holding && !self.nodes[client] {
            self.clients[client].watchdog.node_gone(now);
        }
    }
}
