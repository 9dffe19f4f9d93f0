//! Reentrancy: the holds of this process, by session and lock path, and which task owns each
//! ([`Owners`]); and the rule ([`reentry`]) by which a task that already holds a lock
//! re-enters it, downgrades a write lock to a read lock, or is told at once that waiting would
//! deadlock it.
//!
//! "The task" is the tokio task that acquired the hold (the async counterpart of Curator's
//! thread), or the thread when the acquire ran outside any task (inside `block_on`). A guard
//! moved to another task stays owned by the task that acquired it until the new task adopts it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::queue::kind::Kind;

/// Who owns a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The tokio task that acquired it (or adopted its guard).
    Task(tokio::task::Id),
    /// A thread outside any task (a `block_on` future).
    Thread(std::thread::ThreadId),
}

impl Owner {
    /// The caller's identity.
    pub(crate) fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => Owner::Task(id),
            None => Owner::Thread(std::thread::current().id()),
        }
    }
}

/// Which lock a hold is on: the session, and the lock path under the client's chroot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    session: i64,
    /// Shared with the registry's copy of the key.
    path: Arc<str>,
}

impl Key {
    pub(crate) fn new(session: i64, chroot: &str, path: &str) -> Key {
        let chroot = chroot.trim_end_matches('/');
        Key {
            session,
            path: Arc::from(format!("{chroot}{path}")),
        }
    }
}

/// One hold in [`Owners`]: its kind, its owner (which the hold's guards share, so that an
/// adoption moves it), and the hold itself.
#[derive(Debug)]
struct Entry<T> {
    kind: Kind,
    owner: Arc<Mutex<Owner>>,
    hold: Weak<T>,
}

/// The holds of this process (of one type `T`), by lock, with who owns each.
#[derive(Debug)]
pub(crate) struct Owners<T> {
    holds: Mutex<HashMap<Key, Vec<Entry<T>>>>,
}

impl<T> Default for Owners<T> {
    fn default() -> Self {
        Owners {
            holds: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Owners<T> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Vec<Entry<T>>>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `hold`, of `kind`, owned by `owner`.
    pub(crate) fn insert(&self, key: &Key, kind: Kind, owner: Arc<Mutex<Owner>>, hold: &Arc<T>) {
        let entry = Entry {
            kind,
            owner,
            hold: Arc::downgrade(hold),
        };
        // Most locks have one hold: room for one (an empty `Vec` grows to four at once).
        (self.map().entry(key.clone()))
            .or_insert_with(|| Vec::with_capacity(1))
            .push(entry);
    }

    /// Forgets `hold` (and any hold that has ended meanwhile).
    pub(crate) fn remove(&self, key: &Key, hold: &Arc<T>) {
        let mut map = self.map();
        if let Some(entries) = map.get_mut(key) {
            let gone = Arc::downgrade(hold);
            entries.retain(|e| !e.hold.ptr_eq(&gone) && e.hold.strong_count() > 0);
            if entries.is_empty() {
                map.remove(key);
            }
        }
    }

    /// The live holds on `key` that `owner` owns, with their kinds.
    pub(crate) fn owned_by(&self, key: &Key, owner: Owner) -> Vec<(Kind, Arc<T>)> {
        let map = self.map();
        let Some(entries) = map.get(key) else {
            return Vec::new();
        };
        (entries.iter())
            .filter(|e| *e.owner.lock().unwrap_or_else(|p| p.into_inner()) == owner)
            .filter_map(|e| e.hold.upgrade().map(|hold| (e.kind, hold)))
            .collect()
    }
}

/// What an acquire of `asking` gets from a task that already holds `held` on the same lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reentry {
    /// Queue as any other contender (the task holds nothing that blocks it for good).
    Queue,
    /// Re-enter the hold at this index of `held`: the same node and token, no request.
    Nest(usize),
    /// Take a read lock beside the write lock at this index (a downgrade).
    Downgrade(usize),
    /// Waiting would wait for the task itself: refuse at once.
    WouldDeadlock,
}

/// The rule (see the crate docs' "Reentrancy"): a task that holds an exclusive lock (a mutex
/// or the write lock) and asks for the same kind again re-enters it when the lock is
/// reentrant; a writer asking for the read lock downgrades; a reader asking again re-enters
/// when reentrant; a semaphore lease holder gets another lease unless it already holds as many
/// as there are permits. Anything else would wait for the task's own hold.
pub(crate) fn reentry(held: &[Kind], asking: Kind, reentrant: bool) -> Reentry {
    if held.is_empty() {
        return Reentry::Queue;
    }
    if let Kind::Semaphore(permits) = asking {
        let leases = held.iter().filter(|k| **k == asking).count();
        let others = held.iter().any(|k| !matches!(k, Kind::Semaphore(_)));
        return if leases >= permits.max(1) as usize || others {
            Reentry::WouldDeadlock
        } else {
            Reentry::Queue
        };
    }
    let same = held.iter().position(|k| *k == asking);
    match (asking, same) {
        (_, Some(i)) if reentrant => Reentry::Nest(i),
        (_, Some(_)) => Reentry::WouldDeadlock,
        (Kind::Read, None) => match held.iter().position(|k| *k == Kind::Write) {
            Some(i) => Reentry::Downgrade(i),
            None => Reentry::WouldDeadlock,
        },
        _ => Reentry::WouldDeadlock,
    }
}

/// How a kind of hold reads in messages.
pub(crate) fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::Mutex => "the lock",
        Kind::Read => "a read lock",
        Kind::Write => "the write lock",
        Kind::Semaphore(_) => "a semaphore lease",
        Kind::Latch => "the leadership",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_re_enters_only_a_reentrant_lock_of_the_same_kind() {
        assert_eq!(reentry(&[], Kind::Mutex, false), Reentry::Queue);
        assert_eq!(reentry(&[Kind::Mutex], Kind::Mutex, true), Reentry::Nest(0));
        assert_eq!(
            reentry(&[Kind::Mutex], Kind::Mutex, false),
            Reentry::WouldDeadlock
        );
        assert_eq!(reentry(&[Kind::Write], Kind::Write, true), Reentry::Nest(0));
        // A mutex and a write lock on one path share one queue: each waits for the other.
        assert_eq!(
            reentry(&[Kind::Mutex], Kind::Write, true),
            Reentry::WouldDeadlock
        );
    }

    #[test]
    fn a_writer_downgrades_and_a_reader_never_upgrades() {
        assert_eq!(
            reentry(&[Kind::Write], Kind::Read, false),
            Reentry::Downgrade(0)
        );
        assert_eq!(
            reentry(&[Kind::Read], Kind::Write, true),
            Reentry::WouldDeadlock
        );
        // After a downgrade the task holds both; another read re-enters the read hold.
        assert_eq!(
            reentry(&[Kind::Write, Kind::Read], Kind::Read, true),
            Reentry::Nest(1)
        );
        assert_eq!(
            reentry(&[Kind::Read], Kind::Read, false),
            Reentry::WouldDeadlock
        );
        assert_eq!(
            reentry(&[Kind::Mutex], Kind::Read, true),
            Reentry::WouldDeadlock
        );
    }

    #[test]
    fn a_lease_holder_queues_for_another_lease_until_it_holds_all_permits() {
        let lease = Kind::Semaphore(2);
        assert_eq!(reentry(&[lease], lease, false), Reentry::Queue);
        assert_eq!(
            reentry(&[lease, lease], lease, true),
            Reentry::WouldDeadlock
        );
        assert_eq!(
            reentry(&[Kind::Semaphore(1)], Kind::Semaphore(1), false),
            Reentry::WouldDeadlock
        );
    }

    #[test]
    fn only_the_owners_live_holds_are_found() {
        let owners: Owners<u32> = Owners::default();
        let key = Key::new(7, "/", "/locks/a");
        assert_eq!(key, Key::new(7, "", "/locks/a"));
        let me = Owner::Thread(std::thread::current().id());
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        let mine = Arc::new(1);
        let theirs = Arc::new(2);
        owners.insert(&key, Kind::Mutex, Arc::new(Mutex::new(me)), &mine);
        let their_owner = Arc::new(Mutex::new(Owner::Thread(other)));
        owners.insert(&key, Kind::Read, their_owner.clone(), &theirs);
        let found = owners.owned_by(&key, me);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].0, *found[0].1), (Kind::Mutex, 1));
        // An adoption moves the owner.
        *their_owner.lock().unwrap() = me;
        assert_eq!(owners.owned_by(&key, me).len(), 2);
        owners.remove(&key, &mine);
        drop(theirs);
        assert!(owners.owned_by(&key, me).is_empty());
    }
}
