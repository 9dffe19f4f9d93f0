//! [`Error`] and [`Result`]: one error type for every fallible operation of the crate.

use std::time::Duration;

use zookeeper_client as zk;

use crate::loss::LossReason;

/// The result type of every fallible zkfence operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, holding or releasing a fenced lock.
///
/// Messages are lowercase and say what to do. Match on the variant or use the predicates
/// ([`Error::is_retryable`], [`Error::is_lock_lost`], [`Error::is_session_terminal`]) rather
/// than on the message text. The ZooKeeper error, where there is one, is kept as the
/// [`source`](std::error::Error::source).
///
/// # Examples
///
/// ```
/// use zkfence::{Error, LossReason};
///
/// let err = Error::LockLost(LossReason::SessionExpired);
/// assert!(err.is_lock_lost());
/// assert!(!err.is_retryable());
/// assert_eq!(err.to_string(), "lock lost: the zookeeper session expired; stop using the lock and its token");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The lock path is not a valid ZooKeeper path for a lock.
    #[error(
        "invalid lock path {path:?}: {reason}; use an absolute path such as \"/locks/orders\""
    )]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// A multi-lock was given two paths whose queues would share or nest: the same path
    /// twice, or one inside the other's lock directory.
    #[error("a multi-lock cannot hold {first} and {second}: the same path twice, or one inside the other's lock directory, share or nest their queues; list each lock once, and none under another")]
    OverlappingLocks {
        /// The first of the two paths, in sorted order.
        first: String,
        /// The second.
        second: String,
    },

    /// A node path given to a revocation is not a node of that lock's queue.
    #[error("{node:?} is not a node of lock {lock_path}'s queue; pass a guard's node_path(), or the lock path, '/' and a node name from contenders()")]
    NotInQueue {
        /// The node path as given.
        node: String,
        /// The lock path.
        lock_path: String,
    },

    /// The [`LockOptions`](crate::LockOptions) cannot be used as given.
    #[error("invalid lock options: {0}")]
    InvalidOptions(&'static str),

    /// The create request a lock would send (its node data, path and ACLs) is larger than
    /// ZooKeeper accepts. A server closes the connection of a client that sends a packet over
    /// its `jute.maxbuffer`, so sending it would disconnect the session (and cancel every lock
    /// it holds) on every retry.
    #[error("a lock node create would be {bytes} bytes, over ZooKeeper's default jute.maxbuffer ({limit} bytes), and the server would drop the connection; keep LockOptions::with_data to an identity (a few hundred bytes) and store payloads elsewhere")]
    RequestTooLarge {
        /// The size of the create request, in bytes.
        bytes: usize,
        /// The largest request zkfence sends.
        limit: usize,
    },

    /// The client's session is read-only (built with `Connector::with_readonly(true)` and
    /// attached to a server in read-only mode). A lock needs writes, and `zookeeper-client`
    /// gives a read-only session a new id when it reaches a writable server, which would leave
    /// the lock's watchdog on the old one.
    #[error("the zookeeper client holds a read-only session; locks need writes: connect without Connector::with_readonly(true), or wait until a writable server is reachable")]
    ReadOnlySession,

    /// With this session timeout and tickTime the lease could not be renewed before it lapses:
    /// a follower tells the leader a session is alive only every `tickTime/2`, so proofs come
    /// too far apart.
    #[error("a session timeout of {session_timeout:?} leaves no room for a lease with a tickTime of {tick:?} (followers report a session's activity to the leader every tickTime/2); use a session timeout of at least {needed:?}")]
    LeaseTooShort {
        /// The negotiated session timeout.
        session_timeout: Duration,
        /// The tickTime the lease assumes (given, or `T/2`).
        tick: Duration,
        /// The shortest session timeout that works with this tickTime and margin.
        needed: Duration,
    },

    /// A semaphore's permit count, stored in its node so that all clients agree, differs
    /// from the count this client was built with. `stored` is 0 when the node's data is not
    /// a count.
    #[error("semaphore {path} is set up for {stored} permits (stored in the node's data) but this client asked for {requested}; build it with {stored}, or change the count for everyone with FencedSemaphore::set_permits")]
    PermitsMismatch {
        /// The semaphore path.
        path: String,
        /// The count all clients use.
        stored: u32,
        /// This client's count.
        requested: u32,
    },

    /// This session keeps as many lock nodes as it may: one more would take their paths past
    /// [`LockOptions::with_session_node_bytes`]. When a session ends, its leader deletes its
    /// ephemeral nodes in one close-session transaction that lists their paths; past the
    /// servers' `jute.maxbuffer` it cannot be written, and the ensemble wedges (ZOOKEEPER-4306).
    ///
    /// [`LockOptions::with_session_node_bytes`]: crate::LockOptions::with_session_node_bytes
    #[error("session {session} keeps {nodes} lock nodes ({bytes} bytes of paths), and one more would pass its budget of {limit} bytes: past the servers' jute.maxbuffer its expiry could wedge the ensemble (ZOOKEEPER-4306); spread the locks over more sessions (a client each), release some first, or raise LockOptions::with_session_node_bytes with the servers' jute.maxbuffer (at most half of it)")]
    SessionNodeBudget {
        /// The session.
        session: zk::SessionId,
        /// The lock nodes it keeps (held or queued) in this process.
        nodes: u64,
        /// Their paths' bytes, as the close-session transaction counts them.
        bytes: u64,
        /// The budget.
        limit: u64,
    },

    /// This session has as many acquires in progress as it may: the watches of one more could
    /// take the session's watched paths past what `zookeeper-client` 0.11 can set again after
    /// a disconnect (128 KiB: past it the session never reconnects, and every lock on it is
    /// lost). The watches of acquires that may wait (from their start to their grant) may take
    /// [`WAITING_WATCH_BYTES`](crate::WAITING_WATCH_BYTES) of paths; holds are not limited this
    /// way (past their share they are read back instead of watched), nor is `try_acquire`.
    #[error("session {session} has {waiting} acquires in progress, whose watches may take {bytes} bytes of paths, and one more would pass the budget of {limit} bytes: past 128 KiB of watched paths zookeeper-client cannot set a session's watches again after a disconnect, and every lock on it would be lost; spread the acquires over more sessions (a client each), or wait for some to be granted first")]
    SessionWatchBudget {
        /// The session.
        session: zk::SessionId,
        /// The acquires in progress on it in this process (that may wait).
        waiting: u64,
        /// The bytes of paths their watches may take.
        bytes: u64,
        /// The budget.
        limit: u64,
    },

    /// The lock path (or one of its ancestors) does not exist and creating parents is off.
    #[error("lock path {path} does not exist; create it first or enable LockOptions::with_create_parents(true)")]
    NoParent {
        /// The lock path.
        path: String,
    },

    /// ZooKeeper refused the operation because of the path's ACL.
    #[error("zookeeper denied {op} on {path} (acl); authenticate the client (Connect::with_auth) or grant it read, create and delete there")]
    AccessDenied {
        /// The operation that was refused (`create`, `list`, `delete`, ...).
        op: &'static str,
        /// The path it was refused on.
        path: String,
    },

    /// Our queue node vanished while we were waiting for the lock (someone deleted it or the
    /// whole lock path). We are no longer in the queue; acquiring again is safe.
    #[error("our queue node {node} was deleted while waiting (was the lock path removed?); acquire again")]
    NodeDeletedWhileWaiting {
        /// Full path of the node that vanished.
        node: String,
    },

    /// The ZooKeeper session expired. The client is dead: build a new one.
    #[error("the zookeeper session {session} expired; connect a new client and acquire again")]
    SessionExpired {
        /// The session that expired.
        session: zk::SessionId,
    },

    /// The ZooKeeper client was closed (or every handle to its session was dropped).
    #[error("the zookeeper client is closed; connect a new client")]
    ClientClosed,

    /// The ZooKeeper client failed to authenticate; the session is unusable.
    #[error("zookeeper authentication failed; check the client's credentials")]
    AuthFailed,

    /// The lock was held but is lost (or its lease lapsed); the work done under it must stop
    /// and its fencing token must not be used for new writes.
    #[error("lock lost: {0}")]
    LockLost(LossReason),

    /// The calling task already holds this lock (on this session), and the acquire would
    /// wait for that hold, which only the task itself can end: a self-deadlock. A lock built
    /// with [`LockOptions::with_reentrant`](crate::LockOptions::with_reentrant) re-enters its
    /// own hold instead; a reader asking for the write lock (an upgrade) always gets this, as
    /// two readers upgrading would wait for each other.
    #[error("this task already holds {held} on {path} and asked for {asked}, which would wait for itself forever; release it first, or build the lock with LockOptions::with_reentrant(true) to re-enter it (an upgrade from read to write is never allowed)")]
    WouldDeadlock {
        /// The lock path.
        path: String,
        /// What the task holds there.
        held: &'static str,
        /// What it asked for.
        asked: &'static str,
    },

    /// The hold is in jeopardy, not lost: its lease lapsed (or, without ride-out, the
    /// connection dropped) with no evidence that the lock is gone, and a grace period is set
    /// ([`LockOptions::with_grace`](crate::LockOptions::with_grace)). Make no side effect
    /// under the lock until [`Held::steady`](crate::Held::steady) returns; the hold is lost
    /// (and its cancellation token fires) if the grace runs out first.
    #[error("the lock's hold is in jeopardy (its lease lapsed with no evidence of loss): make no side effect under it until Held::steady() returns; it is lost if the grace period runs out")]
    Jeopardy,

    /// A ZooKeeper fence node holds the fence of another scope than the ticket's: one fence
    /// node serves one scope.
    #[error("fence node {node} fences scope {fenced:?}, not {asked:?}; give each scope (lock path) a fence node of its own")]
    FenceScope {
        /// The fence node.
        node: String,
        /// The scope it fences.
        fenced: String,
        /// The ticket's scope.
        asked: String,
    },

    /// A node given as a ZooKeeper fence node holds something else than a fence
    /// (`<token>\n<scope>`).
    #[error("{node} is not a zkfence fence node (its data is not `<token>\\n<scope>`); give the fence a node of its own")]
    NotAFence {
        /// The node.
        node: String,
    },

    /// Other writers kept moving a ZooKeeper fence node between our read and our commit, more
    /// times than a fenced write tries.
    #[error("the fence of {scope} moved under us {attempts} times in a row; too many writers claim this scope at once, back off and try again")]
    FenceContended {
        /// The fence's scope.
        scope: String,
        /// How many times the write tried.
        attempts: u32,
    },

    /// Any other ZooKeeper failure, with the operation and path it happened on.
    #[error("zookeeper {op} on {path} failed: {source}")]
    ZooKeeper {
        /// The operation that failed.
        op: &'static str,
        /// The path it failed on.
        path: String,
        /// The client's error.
        #[source]
        source: zk::Error,
    },
}

impl Error {
    /// True when trying the same operation again, with the same client, may succeed:
    /// transient ZooKeeper failures, a queue node deleted under us, a hold in jeopardy (check
    /// again once it is steady), or a lock lost while the session itself is still alive.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::{Error, LossReason};
    /// assert!(Error::LockLost(LossReason::NodeDeleted).is_retryable());
    /// assert!(!Error::ClientClosed.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::NodeDeletedWhileWaiting { .. } | Error::Jeopardy => true,
            Error::LockLost(reason) => !reason.is_session_terminal(),
            Error::ZooKeeper { source, .. } => matches!(
                source,
                zk::Error::ConnectionLoss
                    | zk::Error::Timeout
                    | zk::Error::Throttled
                    | zk::Error::NoHosts
            ),
            _ => false,
        }
    }

    /// True for [`Error::LockLost`]: the lock was held and is no longer.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::{Error, LossReason};
    /// assert!(Error::LockLost(LossReason::LeaseExpired).is_lock_lost());
    /// ```
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost(_))
    }

    /// True when the ZooKeeper session behind the client is over (expired, closed, failed
    /// authentication): nothing will succeed with this client again.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::Error;
    /// assert!(Error::ClientClosed.is_session_terminal());
    /// ```
    pub fn is_session_terminal(&self) -> bool {
        match self {
            Error::SessionExpired { .. } | Error::ClientClosed | Error::AuthFailed => true,
            Error::LockLost(reason) => reason.is_session_terminal(),
            _ => false,
        }
    }

    /// The error for a session in `state`, if that state is terminal (expired, closed, failed
    /// authentication); `None` while the session may still be used.
    pub(crate) fn from_session_state(
        state: zk::SessionState,
        session: zk::SessionId,
    ) -> Option<Error> {
        match state {
            zk::SessionState::Expired => Some(Error::SessionExpired { session }),
            zk::SessionState::Closed => Some(Error::ClientClosed),
            zk::SessionState::AuthFailed => Some(Error::AuthFailed),
            _ => None,
        }
    }

    /// Maps a client error from `op` on `path` to ours, giving the common cases their own
    /// variants.
    pub(crate) fn from_request(
        op: &'static str,
        path: &str,
        session: zk::SessionId,
        source: zk::Error,
    ) -> Error {
        match source {
            zk::Error::NoAuth => Error::AccessDenied {
                op,
                path: path.to_owned(),
            },
            zk::Error::SessionExpired | zk::Error::SessionMoved => {
                Error::SessionExpired { session }
            }
            zk::Error::ClientClosed => Error::ClientClosed,
            zk::Error::AuthFailed => Error::AuthFailed,
            source => Error::ZooKeeper {
                op,
                path: path.to_owned(),
                source,
            },
        }
    }
}
