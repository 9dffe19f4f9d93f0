//! The queue model's state as data: the lock path's children on one server (sequences, the
//! watches set on them), three contenders each with the library's waiter and watchdog as
//! values, what each connection brings in order, and what the properties watch.

use zkfence::model_api::queue::{LockKind, Sense, Waiter};
use zkfence::model_api::Watchdog;

/// The contenders: A, B, C.
pub const CONTENDERS: usize = 3;

/// A contender's name in traces.
pub fn name(contender: usize) -> char {
    (b'A' + contender as u8) as char
}

/// A lock node under the lock path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Node {
    /// Whose it is.
    pub owner: usize,
    /// The sequence the server appended.
    pub seq: i32,
}

/// A watch the server holds for a contender: one-shot, on the node of sequence `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Watch {
    /// Whose.
    pub owner: usize,
    /// The listing it was set for (a contender that lists again leaves its older watches set:
    /// they fire into nothing, as the library's parked watches do).
    pub generation: u8,
    /// The target's index in that listing's watch list.
    pub target: usize,
    /// The watched node.
    pub seq: i32,
    /// A child watch (fires on the deletion) or a data watch (on a data change, or on the
    /// deletion if no change came first).
    pub sense: Sense,
}

/// A request on its way to the server; one contender's are processed in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// The acquire's create (an ephemeral sequential node).
    Create,
    /// A listing of the lock path's children (pipelined behind the create, or a listing
    /// again).
    List,
    /// A watch on a node ahead, for listing `generation`'s target `target`.
    Watch {
        /// The listing it belongs to.
        generation: u8,
        /// The target's index.
        target: usize,
        /// The node.
        seq: i32,
        /// Child or data watch.
        sense: Sense,
    },
    /// The grant's proof: a committed check of our node.
    Probe,
    /// The grant's read of our node after a lock-delay (an `exists`).
    Reread,
    /// Our node's deletion: plain, or (`marked`) a `multi` that sets its data first.
    Delete {
        /// Carries the release marker.
        marked: bool,
    },
}

/// What a contender's connection brings it, in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// The create's reply: our node's sequence.
    Created(i32),
    /// A listing: each child's owner and sequence.
    Listing(Vec<(usize, i32)>),
    /// A watch's reply: set, or (`false`) its node was gone.
    Armed {
        /// The listing it belongs to.
        generation: u8,
        /// Set.
        set: bool,
    },
    /// The proof's reply: our node was there (committed) or not.
    Probed(bool),
    /// The read's reply after a lock-delay: our node was there or not.
    Reread(bool),
    /// Watches on one node fired in one notification.
    Event {
        /// The listing they belong to.
        generation: u8,
        /// The target's index.
        target: usize,
        /// The data watch fired.
        data: bool,
        /// The child watch fired.
        child: bool,
        /// A deletion (else a data change).
        deleted: bool,
        /// The transaction's zxid.
        zxid: i64,
    },
}

/// How a contender's acquire ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    /// It held and released.
    Released,
    /// It gave up waiting (its node withdrawn).
    GaveUp,
    /// Its session expired while it waited, or its node was found gone.
    Failed,
    /// Its session expired while it held.
    Lost,
}

/// Where a contender's acquire is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Its create is on its way.
    Creating,
    /// A listing is on its way.
    Listing,
    /// Its watches on the nodes ahead are on their way.
    Arming,
    /// Waiting on its watches.
    Waiting,
    /// Past a lock-delay: its read of its own node is on its way.
    Rereading,
    /// Granted after a wait its lease does not vouch for: its proof is on its way.
    Proving,
    /// It holds.
    Holding,
    /// Over.
    Done(End),
}

/// One contender: its acquire, its connection, the library's waiter and watchdog.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Contender {
    /// The lock kind it takes.
    pub kind: LockKind,
    /// Where its acquire is.
    pub phase: Phase,
    /// Its node's sequence, once created.
    pub seq: Option<i32>,
    /// Its requests not yet processed, in order.
    pub outbox: Vec<Request>,
    /// What its connection brings, in order.
    pub inbox: Vec<Message>,
    /// The library's view of the nodes it watches (since its last listing).
    pub waiter: Option<Waiter>,
    /// How many nodes blocked it at its last listing.
    pub blocking: usize,
    /// The sequences of the nodes it watches, as the waiter indexes them.
    pub targets: Vec<i32>,
    /// The current listing's number; events of older watches are dropped.
    pub generation: u8,
    /// Watch replies still due.
    pub arming: u8,
    /// A watch found its node gone.
    pub gone: bool,
    /// Events that came while its watches were still being set, in order.
    pub early: Vec<Message>,
    /// It waited in a crowded queue: its release is marked.
    pub crowded: bool,
    /// Its wait lasted longer than the lease: its clock reads [`LONG`](super::world::LONG).
    pub long: bool,
    /// Proofs sent.
    pub probes: u8,
    /// Its current listing was sent because a watched node went without a release: if
    /// nothing blocks it then, that node may have been a failed holder (lock-delay).
    pub after_vanish: bool,
    /// It proceeded past a node that went without a release, and sat out the lock-delay.
    pub delayed: bool,
    /// The library's watchdog of its session (its lease).
    pub watchdog: Watchdog,
}

/// What the properties watch besides the system.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Ghost {
    /// A contender handed its grant on a lease that did not hold.
    pub unproven: Option<usize>,
    /// A grant's token was not above an earlier grant it must follow.
    pub token_regressed: bool,
    /// The highest token of any grant so far.
    pub last_any: i32,
    /// The highest token of an exclusive grant so far.
    pub last_exclusive: i32,
    /// A successor proceeded on a marked release with no listing, past more than one node.
    pub marker_handoff: bool,
    /// A grant after a long wait was proved first.
    pub proved_grant: bool,
    /// A waiter listed again after a watched node went without a release.
    pub relisted_after_vanish: bool,
    /// A contender was handed its grant after a lock-delay while its node was gone, having
    /// taken a message the server sent after the deletion.
    pub granted_gone: Option<usize>,
    /// Per contender whose node a [`Close`](super::world::Action::Close) deleted: how many
    /// of the messages it has yet to take were sent before that transaction.
    pub before_close: [Option<u8>; CONTENDERS],
    /// Per contender: it took a message the server sent after a close deleted its node.
    pub past_close: [bool; CONTENDERS],
    /// A waiter past a lock-delay found its own node gone, and failed.
    pub reread_found_gone: bool,
}

/// The queue model's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The lock path's children, in creation order.
    pub nodes: Vec<Node>,
    /// The next sequence the server appends.
    pub next_seq: i32,
    /// The last transaction's zxid.
    pub zxid: i64,
    /// The watches the server holds.
    pub watches: Vec<Watch>,
    /// The contenders.
    pub contenders: [Contender; CONTENDERS],
    /// Faults so far (give-ups, expiries, closes, revocation requests).
    pub faults: u8,
    /// What the properties watch.
    pub ghost: Ghost,
}

impl State {
    /// The live node of `owner`, if it has one.
    pub fn node_of(&self, owner: usize) -> Option<Node> {
        self.nodes.iter().copied().find(|n| n.owner == owner)
    }

    /// Whether `owner` holds with its node still there.
    pub fn holds(&self, owner: usize) -> bool {
        self.contenders[owner].phase == Phase::Holding && self.node_of(owner).is_some()
    }
}
