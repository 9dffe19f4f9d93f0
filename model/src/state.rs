//! The model's state as data: three servers, the leader's session tracker, the lock's nodes,
//! two clients, each with the library's watchdog as a value, and what the properties watch;
//! with the queries every side of the model reads (the leader, whether a server works, a
//! client's lease clock). The bottom of the model's calls: it calls none of the other modules.

use zkfence::model_api::{Reply, Watchdog};

/// The servers: 0, 1, 2.
pub const SERVERS: usize = 3;
/// The clients: A (0) creates its node first, B (1) queues behind it.
pub const CLIENTS: usize = 2;

/// A client's name in traces.
pub fn name(client: usize) -> char {
    (b'A' + client as u8) as char
}

/// What a server is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Leads with a quorum: commits writes, expires sessions.
    Leader,
    /// Follows the leader: relays its clients' touches, forwards their writes and syncs.
    Follower,
    /// A leader cut off from its quorum that has not noticed yet: it still answers its own
    /// clients' syncs and reads (from its data as it was), and commits nothing.
    Stale,
    /// A follower cut off from its leader that has not noticed yet: it keeps its clients
    /// connected; their writes and syncs go nowhere, their touches are never relayed.
    Cut,
    /// Serving no clients: electing, or waiting for a partition to heal.
    Looking,
}

/// One server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Server {
    /// Its role.
    pub role: Role,
    /// Its links to the other servers are cut.
    pub isolated: bool,
    /// The sessions that touched it since its last relay (a follower's touch table).
    pub pending: [bool; CLIENTS],
    /// When the oldest touch not yet relayed came (it must be relayed within a relay period).
    pub pending_since: Option<i64>,
    /// Which clients' lock nodes it sees (a stale server's data is as it was when cut off).
    pub sees: [bool; CLIENTS],
}

/// A session as the leader's tracker knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Session {
    /// Not yet expired.
    pub alive: bool,
    /// The real tick at which the tracker last touched it; it expires `T` later.
    pub touched: i64,
}

/// Where a client's acquire is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its create is on its way.
    Creating,
    /// Queued behind the other client's node, watching it.
    Waiting,
    /// Granted, waiting for a probe to prove the lease (it waited long: no proofs meanwhile).
    Proving,
    /// Its guard is registered with the watchdog.
    Holding,
    /// Its acquire failed (the session expired first).
    Failed,
}

/// A request of a client's, processed by its server as it arrived (in the tick it was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// The acquire's create (with its listing).
    Create,
    /// A watchdog probe: a check-only `multi` (or under the mutants' rules, a `sync`), of the
    /// guard's node (`guard`) or of a granted node waiting for its proof.
    Probe {
        /// A `sync` rather than a committed write.
        sync: bool,
        /// It checks the registered guard's node.
        guard: bool,
    },
}

/// What a client's connection brings it, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Message {
    /// The reply to its request sent at real tick `sent`.
    Reply {
        /// What was asked.
        request: Request,
        /// When it was sent (real tick).
        sent: i64,
        /// The server's answer.
        answer: Reply,
    },
    /// The watch on the node ahead fired: deleted.
    Deleted,
    /// The session expired (the server closes the connection).
    Expired,
}

/// One client: its connection, its process, its acquire and its watchdog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its clock's rate, in lease-clock nanoseconds per tick.
    pub rate: i64,
    /// The server it is connected to.
    pub server: Option<usize>,
    /// When its connection last broke (real tick).
    pub down_since: i64,
    /// Its session was created by its connect at tick 0 (`Connect`), which anchored its
    /// first lease; else it existed before the schedule.
    pub connected_new: bool,
    /// Its process is paused (or its machine suspended): it takes no step, its clock runs on.
    pub paused: bool,
    /// When it last sent anything to its server (its keepalive pings at least every `T/5`).
    pub last_send: i64,
    /// When its watchdog last sent a probe: at most one a tick (the driver's probes go at
    /// least a pair gap apart, its cold ones most of a tick apart).
    pub last_probe: i64,
    /// Probes sent so far (the search bounds them per client).
    pub probes: u8,
    /// Where its acquire is.
    pub phase: Phase,
    /// Its request in flight, sent at that real tick: one at a time (a request whose server
    /// cannot answer it stays here until the connection breaks).
    pub in_flight: Option<(Request, i64)>,
    /// What its connection brings, each with the tick it was sent on its way.
    pub inbox: Vec<(i64, Message)>,
    /// The library's watchdog of its session.
    pub watchdog: Watchdog,
}

/// What the properties watch besides the system.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// A hold that left jeopardy without a committed probe of its node sent since the spell
    /// began: the client and the tick.
    pub bad_resume: Option<(usize, i64)>,
    /// A grant whose token was not above every earlier grant's.
    pub token_regressed: bool,
    /// The highest token granted so far.
    pub last_token: u8,
    /// Since when the waiter (B) could have been granted: the holder's node gone, B connected
    /// to a working server, unpaused, its session alive, not yet holding.
    pub waiter_ready_since: Option<i64>,
    /// A hold resumed from jeopardy (an example the checker must find, so that the resume
    /// rule is exercised).
    pub resumed: bool,
}

/// The whole model's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, in ticks.
    pub now: i64,
    /// The servers.
    pub servers: [Server; SERVERS],
    /// The leader's session tracker.
    pub sessions: [Session; CLIENTS],
    /// The clients' lock nodes, as committed (A's is sequence 1, B's 2).
    pub nodes: [bool; CLIENTS],
    /// The clients.
    pub clients: [Client; CLIENTS],
    /// Faults so far.
    pub faults: u8,
    /// What the properties watch.
    pub ghost: Ghost,
}

impl State {
    /// The leader, if one leads.
    pub fn leader(&self) -> Option<usize> {
        self.servers.iter().position(|s| s.role == Role::Leader)
    }

    /// Whether `server` serves its clients as part of the working ensemble.
    pub fn working(&self, server: usize) -> bool {
        matches!(self.servers[server].role, Role::Leader | Role::Follower)
    }

    /// `client`'s lease clock at the current tick.
    pub fn clock(&self, client: usize) -> i64 {
        self.now * self.clients[client].rate
    }
}
