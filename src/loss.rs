//! [`LossReason`]: why a held lock was lost (or ended).

use std::fmt;

/// Why a held lock was lost (or ended), as reported by [`LockGuard::lost`] and
/// [`Error::LockLost`].
///
/// [`LockGuard::lost`]: crate::Held::lost
/// [`Error::LockLost`]: crate::Error::LockLost
///
/// # Examples
///
/// ```
/// use zkfence::LossReason;
/// assert!(LossReason::SessionExpired.is_session_terminal());
/// assert_eq!(LossReason::LeaseExpired.as_str(), "lease_expired");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The connection to ZooKeeper was lost (ConnectionLoss). The session may survive, but
    /// until it reconnects nobody can tell whether it will.
    Disconnected,
    /// The session expired.
    SessionExpired,
    /// The client was closed.
    ClientClosed,
    /// The client failed to authenticate.
    AuthFailed,
    /// Our lock node was deleted by someone else (an admin, a parent cleanup).
    NodeDeleted,
    /// The client came back on a different session than the one that holds the node.
    SessionChanged,
    /// The lease deadline passed: no reply proved the session alive in time (a process pause,
    /// a starved runtime, a partition).
    LeaseExpired,
    /// The release's delete lost its reply, and its retry found the node gone: zkfence cannot
    /// tell its own delete from someone else's before it (after which another contender may
    /// have held the lock), so it reports the hold as possibly overlapped.
    ReleaseUnconfirmed,
    /// The guard was released (or dropped) by its owner: not a failure.
    Released,
}

impl LossReason {
    /// The snake_case name used as the `reason` metric label.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::LossReason::NodeDeleted.as_str(), "node_deleted");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            LossReason::Disconnected => "disconnected",
            LossReason::SessionExpired => "session_expired",
            LossReason::ClientClosed => "client_closed",
            LossReason::AuthFailed => "auth_failed",
            LossReason::NodeDeleted => "node_deleted",
            LossReason::SessionChanged => "session_changed",
            LossReason::LeaseExpired => "lease_expired",
            LossReason::ReleaseUnconfirmed => "release_unconfirmed",
            LossReason::Released => "released",
        }
    }

    /// True when the session itself is over: nothing more can be done with this client.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!zkfence::LossReason::Disconnected.is_session_terminal());
    /// ```
    pub fn is_session_terminal(&self) -> bool {
        matches!(
            self,
            LossReason::SessionExpired | LossReason::ClientClosed | LossReason::AuthFailed
        )
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Disconnected => "the connection to zookeeper was lost; stop using the lock and its token",
            LossReason::SessionExpired => "the zookeeper session expired; stop using the lock and its token",
            LossReason::ClientClosed => "the zookeeper client was closed; stop using the lock and its token",
            LossReason::AuthFailed => "zookeeper authentication failed; stop using the lock and its token",
            LossReason::NodeDeleted => "our lock node was deleted by someone else; stop using the lock and its token",
            LossReason::SessionChanged => "the client reconnected on another session; stop using the lock and its token",
            LossReason::LeaseExpired => {
                "the lease lapsed before a reply proved the session alive; stop using the lock and its token"
            }
            LossReason::ReleaseUnconfirmed => {
                "the release lost its reply and the node was gone on retry; someone else may have deleted it first, so treat the work as possibly overlapped (fenced writes are safe)"
            }
            LossReason::Released => "the guard was released",
        })
    }
}
