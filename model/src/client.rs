//! A client's side: what it does with each reply and event, as the library's acquire and
//! watchdog driver do, every decision about the lease left to the library's watchdog.

use zkfence::model_api::Reply;
use zookeeper_client::SessionState;

use crate::config::Config;
use crate::state::{Message, Phase, Request, State};

/// A lock node's name, for the watchdog's guard.
const NODES: [&str; 2] = ["/lock/_c_a-lock-0000000001", "/lock/_c_b-lock-0000000002"];

impl State {
    /// The client takes the next message its connection brings.
    pub(crate) fn deliver(&mut self, client: usize, config: &Config) {
        let (_, message) = self.clients[client].inbox.remove(0);
        self.take(client, message, config);
    }

    /// The client takes `message`.
    pub(crate) fn take(&mut self, client: usize, message: Message, config: &Config) {
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
                self.disconnect(client);
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
        if !self.sessions[client].alive {
            self.clients[client]
                .watchdog
                .session(SessionState::Expired, now);
            if self.clients[client].phase != Phase::Holding {
                self.clients[client].phase = Phase::Failed;
            }
            return;
        }
        self.clients[client].server = Some(server);
        self.sessions[client].touched = self.now;
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
