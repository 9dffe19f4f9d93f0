//! Reentrancy: the holds of this process, by session and lock path, and which task owns each
//! ([`HoldTable`]); and the rule ([`reentry`]) by which a task that already holds a lock
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
    /// Shared with the registry's copy of the key, and with the lock's path when the client
    /// has no chroot.
    path: Arc<str>,
}

impl Key {
    /// The session whose holds these are.
    pub(crate) fn session(&self) -> zookeeper_client::SessionId {
        zookeeper_client::SessionId(self.session)
    }

    /// The key of `path` on a client of `session` and `chroot`.
    pub(crate) fn new(session: i64, chroot: &str, path: &Arc<str>) -> Key {
        let path = match crate::requests::chroot_prefix(chroot) {
            "" => path.clone(),
            chroot => Arc::from(format!("{chroot}{path}")),
        };
        Key { session, path }
    }
}

/// A hold that says who owns it now (an adoption moves it).
pub(crate) trait HasOwner {
    /// Its owner.
    fn owner(&self) -> Owner;
}

/// One hold in [`HoldTable`]: its kind, and the hold itself, which knows its owner.
#[derive(Debug)]
struct HoldEntry<T> {
    kind: Kind,
    hold: Weak<T>,
}

/// The holds on one lock. Most locks have one, kept in the map without an allocation.
#[derive(Debug)]
enum LockHolds<T> {
    One(HoldEntry<T>),
    Many(Vec<HoldEntry<T>>),
}

impl<T> LockHolds<T> {
    fn entries(&self) -> &[HoldEntry<T>] {
        match self {
            LockHolds::One(entry) => std::slice::from_ref(entry),
            LockHolds::Many(entries) => entries,
        }
    }
}

/// The holds of this process (of one type `T`), by lock, with who owns each.
#[derive(Debug)]
pub(crate) struct HoldTable<T> {
    holds: Mutex<HashMap<Key, LockHolds<T>>>,
}

impl<T> Default for HoldTable<T> {
    fn default() -> Self {
        HoldTable {
            holds: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: HasOwner> HoldTable<T> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Key, LockHolds<T>>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `hold`, of `kind`.
    pub(crate) fn insert(&self, key: &Key, kind: Kind, hold: &Arc<T>) {
        let entry = HoldEntry {
            kind,
            hold: Arc::downgrade(hold),
        };
        let mut map = self.map();
        let Some(holds) = map.get_mut(key) else {
            map.insert(key.clone(), LockHolds::One(entry));
            return;
        };
        let entries = match std::mem::replace(holds, LockHolds::Many(Vec::new())) {
            LockHolds::One(first) => vec![first, entry],
            LockHolds::Many(mut entries) => {
                entries.push(entry);
                entries
            }
        };
        *holds = LockHolds::Many(entries);
    }

    /// Forgets `hold` (and any hold that has ended meanwhile).
    pub(crate) fn remove(&self, key: &Key, hold: &Arc<T>) {
        let mut map = self.map();
        let gone = Arc::downgrade(hold);
        let keep = |e: &HoldEntry<T>| !e.hold.ptr_eq(&gone) && e.hold.strong_count() > 0;
        let empty = match map.get_mut(key) {
            None => return,
            Some(LockHolds::One(entry)) => !keep(entry),
            Some(LockHolds::Many(entries)) => {
                entries.retain(keep);
                entries.is_empty()
            }
        };
        if empty {
            map.remove(key);
            shrink_after_burst(&mut map);
        }
    }

    /// The live holds on `key` that `owner` owns, with their kinds. Their owners are read
    /// after the map's lock is let go, and so are the holds dropped that `owner` does not own.
    pub(crate) fn owned_by(&self, key: &Key, owner: Owner) -> Vec<(Kind, Arc<T>)> {
        let live: Vec<(Kind, Arc<T>)> = match self.map().get(key) {
            Some(holds) => (holds.entries().iter())
                .filter_map(|e| e.hold.upgrade().map(|hold| (e.kind, hold)))
                .collect(),
            None => return Vec::new(),
        };
        (live.into_iter())
            .filter(|(_, hold)| hold.owner() == owner)
            .collect()
    }
}

/// With room for this many holds or fewer, a map of holds keeps what it has: most processes
/// keep a few holds, and would otherwise give the room back and take it again on every acquire.
const KEEP_ROOM: usize = 1024;

/// Gives back most of `map`'s room once it holds under a quarter of what it has room for: a
/// burst of thousands of holds would otherwise leave this process-wide map as large as at its
/// peak for good (about 90 bytes for each hold it once had). Keeping room for twice what is
/// left, a shrink costs a pass over the entries left and comes only after as many removals, so
/// removals stay O(1) amortized.
fn shrink_after_burst<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > KEEP_ROOM && map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
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

    impl HasOwner for () {
        fn owner(&self) -> Owner {
            Owner::current()
        }
    }

    #[test]
    fn the_map_gives_back_a_bursts_room_and_keeps_a_few_holds() {
        let owners = HoldTable::<()>::default();
        let hold = Arc::new(());
        let keys: Vec<Key> = (0..10_000)
            .map(|i| Key::new(1, "", &Arc::from(format!("/locks/{i}"))))
            .collect();
        for key in &keys {
            owners.insert(key, Kind::Mutex, &hold);
        }
        let peak = owners.map().capacity();
        assert!(peak >= 10_000, "room for every hold: {peak}");
        for key in &keys[..9_990] {
            owners.remove(key, &hold);
        }
        let after = owners.map().capacity();
        assert!(
            after <= KEEP_ROOM,
            "room kept after the burst: {after} (peak {peak})"
        );
        for key in &keys[9_990..] {
            assert_eq!(owners.owned_by(key, Owner::current()).len(), 1);
        }
        // A few holds coming and going keep their room: no shrink below KEEP_ROOM.
        let small = HoldTable::<()>::default();
        small.insert(&keys[0], Kind::Mutex, &hold);
        let room = small.map().capacity();
        small.remove(&keys[0], &hold);
        assert_eq!(small.map().capacity(), room);
    }

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

    impl HasOwner for Mutex<Owner> {
        fn owner(&self) -> Owner {
            *self.lock().unwrap()
        }
    }

    #[test]
    fn only_the_owners_live_holds_are_found() {
        let owners: HoldTable<Mutex<Owner>> = HoldTable::default();
        let path = Arc::from("/locks/a");
        let key = Key::new(7, "/", &path);
        assert_eq!(key, Key::new(7, "", &path));
        assert_eq!(
            Key::new(7, "/app/", &path),
            Key::new(7, "/app", &"/locks/a".into())
        );
        assert_ne!(key, Key::new(7, "/app", &path));
        assert_ne!(key, Key::new(8, "/", &path));
        let me = Owner::Thread(std::thread::current().id());
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .unwrap();
        let mine = Arc::new(Mutex::new(me));
        let theirs = Arc::new(Mutex::new(Owner::Thread(other)));
        owners.insert(&key, Kind::Mutex, &mine);
        owners.insert(&key, Kind::Read, &theirs);
        let found = owners.owned_by(&key, me);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, Kind::Mutex);
        assert!(Arc::ptr_eq(&found[0].1, &mine));
        // An adoption moves the owner.
        *theirs.lock().unwrap() = me;
        assert_eq!(owners.owned_by(&key, me).len(), 2);
        owners.remove(&key, &mine);
        drop(theirs);
        assert!(owners.owned_by(&key, me).is_empty());
    }
}
