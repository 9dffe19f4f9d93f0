//! The hold: one acquisition, what its guards and their handles share, and the holds of this
//! process by lock and owner, for reentrancy.

use std::sync::{Arc, LazyLock, Mutex};

use tokio::time::Instant;

use crate::queue::kind::Kind;
use crate::queue::Release;
use crate::reentrancy::{HasOwner, HoldTable, Key, Owner};
use crate::token::FencingToken;
use crate::watchdog::{GuardState, LazyCancel, WatchdogRef};

/// One acquisition: what its guards and their [`Held`](super::held::Held) handles share.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The node's path on the server, the client's chroot included (as the session's watchdog
    /// watches it); its path under the chroot, a child of the lock path, starts at `at`.
    pub(super) node: Arc<str>,
    pub(super) at: usize,
    pub(super) token: FencingToken,
    pub(super) state: Arc<GuardState>,
    /// Our registration with the session's watchdog.
    pub(super) id: u64,
    pub(super) acquired_at: Instant,
    /// Which lock it is (the session it is held on, and the lock path), and who owns it, for
    /// reentrancy.
    pub(super) key: Key,
    pub(super) kind: Kind,
    pub(super) owner: Mutex<Owner>,
    /// Its guards, and what the last of them ends it with.
    pub(super) guards: Mutex<Guards>,
    /// The first guard's own cancellation (a nested guard's is an allocation of its own), its
    /// token made only when asked for.
    pub(super) first: LazyCancel,
}

/// The live guards of a hold, and what the last one takes with it.
#[derive(Debug)]
pub(super) struct Guards {
    pub(super) count: usize,
    /// Keeps the session's watchdog running while the hold lasts.
    pub(super) watchdog_ref: Option<WatchdogRef>,
    /// Deletes the node (and gives up the in-process turn).
    pub(super) release: Option<Release>,
}

/// The holdings of this process and who owns each, for reentrancy (see
/// [`crate::reentrancy`]).
pub(super) static HOLDS: LazyLock<HoldTable<Hold>> = LazyLock::new(HoldTable::default);

impl HasOwner for Hold {
    fn owner(&self) -> Owner {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Hold {
    pub(super) fn guards(&self) -> std::sync::MutexGuard<'_, Guards> {
        self.guards.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The holdings on `key` that `owner` owns, with their kinds.
pub(crate) fn owned_by(key: &Key, owner: Owner) -> Vec<(Kind, Arc<Hold>)> {
    HOLDS.owned_by(key, owner)
}

/// Who holds a new hold, and which lock it is on.
#[derive(Debug)]
pub(crate) struct NewHold {
    pub(crate) key: Key,
    pub(crate) kind: Kind,
    pub(crate) owner: Owner,
}
