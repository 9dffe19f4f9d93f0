//! The lock kinds: one queue, and per kind the "may I proceed, and what do I watch?" predicate
//! (Curator's driver idea).

use super::names::{
    distance, holds_alone, marker_holds_alone, marker_of, parse_node, Role, LATCH_NAME, LEASE_NAME,
    LOCK_NAME, READ_NAME, WRITE_NAME,
};

/// The lock kinds, each a predicate over the one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One holder; waits for every earlier node.
    Mutex,
    /// Shares with other readers; waits only for earlier exclusive nodes.
    Read,
    /// A write lock: one holder; waits for every earlier node, readers included.
    Write,
    /// Up to `n` holders: proceeds when fewer than `n` nodes sort before it.
    Semaphore(u32),
    /// An election candidate (Curator's `LeaderLatch` names): leads when nothing sorts before
    /// it. It never writes into its node (no release marker): a Curator participant watching it
    /// reacts to its deletion only, and a data change would leave it stranded.
    Latch,
}

/// How many places ahead of a waiter its herald is (see [`Kind::herald`]): the warm-up it
/// sets off then has the handoffs in between to commit before the waiter's own turn. Measured
/// on a drain of 1,000 waiters with no critical section (`scripts/bench-scale`, the waiters):
/// 2 places left the proof's commit partly on the handoff's path (0.67–0.79 × zookeeper-client's
/// drain), 3 gave 1.00–1.06 ×, 4 gave 1.14–1.21 ×. Further ahead, the lease proved may lapse
/// before the grant when critical sections are long (a cold proof's lease is shorter than
/// `T`), which costs the grant a proof of its own again.
pub(crate) const HERALD_DEPTH: usize = 4;

impl Kind {
    /// The marker before the sequence in this kind's node names.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Kind::Mutex => LOCK_NAME,
            Kind::Read => READ_NAME,
            Kind::Write => WRITE_NAME,
            Kind::Semaphore(_) => LEASE_NAME,
            Kind::Latch => LATCH_NAME,
        }
    }

    /// The kind's name in traces.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Semaphore(_) => "semaphore",
            Kind::Latch => "election",
        }
    }

    /// The kind of the queue node `name` (by its marker); a lease is counted against
    /// `permits` when the asker knows them (a semaphore's), else as one holder at a time.
    pub(crate) fn of_node(name: &str, permits: Option<u32>) -> Option<Kind> {
        Some(match marker_of(name)? {
            LOCK_NAME => Kind::Mutex,
            READ_NAME => Kind::Read,
            WRITE_NAME => Kind::Write,
            LATCH_NAME => Kind::Latch,
            _ => Kind::Semaphore(permits.unwrap_or(1)),
        })
    }

    /// Whether the node `name` holds in this listing: nothing ahead of it blocks it, by its
    /// own kind's predicate.
    pub(crate) fn holds(children: &[String], name: &str, permits: Option<u32>) -> bool {
        let (Some(kind), Some(seq)) = (Kind::of_node(name, permits), parse_node(name)) else {
            return false;
        };
        let position = kind.position(children, name, seq.0);
        position.present && position.blocking == 0
    }

    /// The nodes of `ordered` (a listing in queue order, see `names::queue_order`) that hold,
    /// in that order: each judged by its own kind as [`Kind::holds`] judges it, in one pass
    /// (nodes ahead of each, exclusive nodes ahead of each), so linear in the queue's length.
    pub(crate) fn holders(ordered: Vec<(String, i32)>, permits: Option<u32>) -> Vec<(String, i32)> {
        let (mut ahead, mut exclusive_ahead) = (0usize, 0usize);
        let mut holding = Vec::new();
        for node in ordered {
            let name = &node.0;
            let (Some(kind), Some((_, role))) = (Kind::of_node(name, permits), parse_node(name))
            else {
                continue;
            };
            let exclusive = role == Role::Exclusive;
            let blocking = match kind {
                Kind::Mutex | Kind::Write | Kind::Latch => ahead,
                Kind::Read => exclusive_ahead,
                Kind::Semaphore(n) => (ahead + 1).saturating_sub(n.max(1) as usize),
            };
            if blocking == 0 {
                holding.push(node);
            }
            ahead += 1;
            exclusive_ahead += usize::from(exclusive);
        }
        holding
    }

    /// Whether this kind queues in-process first (one ZooKeeper contender per process): the
    /// kinds that exclude every other holder.
    pub(crate) fn queues_in_process(self) -> bool {
        matches!(self, Kind::Mutex | Kind::Write | Kind::Latch)
    }

    /// Whether a holder of this kind marks its release, so that a successor that queued
    /// behind more than one node may proceed on it without listing the queue again: the kinds
    /// whose holders hold alone (see `crate::queue::handoff`'s "The handoff").
    pub(crate) fn marks_release(self) -> bool {
        marker_holds_alone(self.marker())
    }

    /// Whether the marked release of `watched`, the nearest node that blocks us, leaves
    /// nothing ahead that blocks us. It does when `watched` held alone: everything sorted
    /// before it was gone when it took the lock, nothing new sorts before it, and between it
    /// and us there is nothing (a mutex or writer watches its immediate predecessor) or only
    /// readers (a reader watches the nearest exclusive node). A semaphore's permits are not
    /// counted this way.
    pub(crate) fn admitted_by_release(self, watched: &str) -> bool {
        match self {
            Kind::Mutex | Kind::Write | Kind::Read => holds_alone(watched),
            Kind::Semaphore(_) | Kind::Latch => false,
        }
    }

    /// The herald of a waiter whose node is `own_seq` in `children`, for the kinds whose
    /// waiters watch only their immediate predecessor (mutex, writer): the node
    /// [`HERALD_DEPTH`] places ahead of ours, or the farthest of the fewer there are, as long
    /// as that is not our predecessor. Its deletion is the sign that our turn is a few
    /// handoffs away, so that our lease is worth proving now, off the handoff's path (see "The
    /// handoff" in the queue module). A hint only: no decision rests on it. `None` with fewer
    /// than two nodes ahead.
    pub(crate) fn herald(self, children: &[String], own_seq: i32) -> Option<String> {
        if !matches!(self, Kind::Mutex | Kind::Write) {
            return None;
        }
        // The nearest nodes ahead (the largest negative distances), nearest first, in one pass.
        let depth = HERALD_DEPTH;
        let mut nearest: Vec<(i32, &String)> = Vec::with_capacity(depth + 1);
        for child in children {
            let Some((seq, _)) = parse_node(child) else {
                continue;
            };
            let d = distance(own_seq, seq);
            if d >= 0 {
                continue;
            }
            let at = nearest.partition_point(|&(e, _)| e > d);
            if at < depth {
                nearest.insert(at, (d, child));
                nearest.truncate(depth);
            }
        }
        (nearest.len() >= 2).then(|| nearest[nearest.len() - 1].1.clone())
    }

    /// Where our node (`own`, sequence `own_seq`) stands in `children`, in linear time
    /// without sorting the listing: how many nodes block us, and the ones to watch (the
    /// nearest blockers).
    pub(crate) fn position(self, children: &[String], own: &str, own_seq: i32) -> Position {
        let (present, others, ahead) = survey(children, own, own_seq);
        let behind = others - ahead.len();
        let (blocking, watch) = self.blockers(ahead);
        Position {
            present,
            blocking,
            watch: if blocking > 0 { watch } else { Vec::new() },
            others,
            behind,
        }
    }

    /// Of the nodes `ahead` of ours, how many block us by this kind's predicate, and the
    /// nearest of those, to watch.
    fn blockers(self, ahead: Vec<AheadNode<'_>>) -> (usize, Vec<String>) {
        match self {
            Kind::Mutex | Kind::Write | Kind::Latch => {
                let blocking = ahead.len();
                (blocking, watch_nearest(ahead, 1))
            }
            Kind::Read => {
                let writers: Vec<_> = ahead
                    .into_iter()
                    .filter(|&(_, _, role)| role == Role::Exclusive)
                    .collect();
                (writers.len(), watch_nearest(writers, 1))
            }
            Kind::Semaphore(n) => {
                // Any of the n nearest nodes ahead going away admits us when exactly n are
                // ahead; nodes further ahead going away never do (those n still block). With
                // no lock-delay, the queue watches fewer (`queue::watches`' "The
                // semaphore's gate"): the head of the waiters the children as a whole, any other waiter
                // the nearest alone.
                let n = n.max(1) as usize;
                let blocking = (ahead.len() + 1).saturating_sub(n);
                (blocking, watch_nearest(ahead, n))
            }
        }
    }
}

/// A queue node ahead of ours: its distance from ours (negative), its name and its role.
type AheadNode<'a> = (i32, &'a String, Role);

/// One pass over a listing, `children`, for our node (`own`, sequence `own_seq`): whether it
/// is there, how many other queue nodes there are, and those of them that sort before ours.
fn survey<'a>(
    children: &'a [String],
    own: &str,
    own_seq: i32,
) -> (bool, usize, Vec<AheadNode<'a>>) {
    let mut present = false;
    let mut others = 0;
    let mut ahead: Vec<AheadNode<'a>> = Vec::new();
    for child in children {
        if child == own {
            present = true;
            continue;
        }
        let Some((seq, role)) = parse_node(child) else {
            continue;
        };
        others += 1;
        let d = distance(own_seq, seq);
        if d < 0 {
            ahead.push((d, child, role));
        }
    }
    (present, others, ahead)
}

/// The names of the `n` nodes of `nodes` nearest ours, nearest first.
fn watch_nearest(mut nodes: Vec<AheadNode<'_>>, n: usize) -> Vec<String> {
    // The n nearest (largest, least negative distances) in linear time: a listing of a
    // long queue is never sorted; only the n picked are ordered, nearest first.
    let nearest = std::cmp::Reverse;
    if nodes.len() > n && n > 0 {
        nodes.select_nth_unstable_by_key(n - 1, |&(d, _, _)| nearest(d));
        nodes.truncate(n);
    }
    nodes.sort_unstable_by_key(|&(d, _, _)| nearest(d));
    nodes.into_iter().map(|(_, name, _)| name.clone()).collect()
}

/// Where we stand in one listing of the lock path's children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    /// Is our node in the listing at all.
    pub(crate) present: bool,
    /// How many nodes must go before we may proceed (0: proceed now).
    pub(crate) blocking: usize,
    /// The nodes we watch: the nearest blockers (one for a mutex, writer or reader; `n` for
    /// a semaphore of `n`). When one of them goes and `blocking` was 1, we proceed with no
    /// further request.
    pub(crate) watch: Vec<String>,
    /// How many queue nodes other than ours the listing shows, ahead or behind.
    pub(crate) others: usize,
    /// How many of them sort after ours.
    pub(crate) behind: usize,
}

impl Position {
    /// Whether this listing shows a crowded queue: two other nodes or more, so that our
    /// release is likely to have a successor that queued behind more than one node, and is
    /// marked for it (`queue::handoff`'s "The handoff").
    pub(crate) fn crowded(&self) -> bool {
        self.others >= 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass holders agree with `holds`, node by node, on mixed queues (readers,
    /// writers, mutexes, leases, names of no kind), across the sequence's wrap.
    #[test]
    fn holders_in_one_pass_agree_with_holds() {
        let markers = [
            "lock-", "__READ__", "__WRIT__", "lease-", "latch-", "other-",
        ];
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..500 {
            let len = next(12) as usize;
            let base = if next(2) == 0 { 0 } else { i32::MAX - 5 };
            let children: Vec<String> = (0..len)
                .map(|i| {
                    let marker = markers[next(markers.len() as u64) as usize];
                    let seq = base.wrapping_add(i as i32);
                    format!("_c_{i:036}-{marker}{:010}", seq)
                })
                .collect();
            let permits = (next(2) == 0).then(|| next(4) as u32 + 1);
            let ordered = crate::queue::names::queue_order(children.clone());
            let fast: Vec<String> = (Kind::holders(ordered.clone(), permits).into_iter())
                .map(|(name, _)| name)
                .collect();
            let slow: Vec<String> = (ordered.iter())
                .map(|(name, _)| name.clone())
                .filter(|name| Kind::holds(&children, name, permits))
                .collect();
            assert_eq!(fast, slow, "{children:?} permits {permits:?}");
        }
    }
    use crate::queue::names::mutex_names as names;

    #[test]
    fn the_herald_is_the_node_four_ahead_or_the_farthest_of_fewer() {
        let children = names(&[3, 7, 5, 9, 1, 11]);
        // Ours is 11: 9, 7, 5 and 3 ahead, nearest first; the herald is 3.
        assert_eq!(Kind::Mutex.herald(&children, 11), Some(children[0].clone()));
        assert_eq!(Kind::Write.herald(&children, 11), Some(children[0].clone()));
        // Ours is 7 (5, 3, 1 ahead): the farthest of the three.
        assert_eq!(Kind::Mutex.herald(&children, 7), Some(children[4].clone()));
        // Ours is 5 (3, 1 ahead): 1, two places ahead.
        assert_eq!(Kind::Mutex.herald(&children, 5), Some(children[4].clone()));
        // One node ahead, or none: no herald; nor for kinds that do not queue one by one.
        assert_eq!(Kind::Mutex.herald(&children, 3), None);
        assert_eq!(Kind::Mutex.herald(&children, 1), None);
        assert_eq!(Kind::Read.herald(&children, 11), None);
        assert_eq!(Kind::Semaphore(2).herald(&children, 11), None);
        // Across the sequence's wrap: i32::MAX - 1 and i32::MAX sort before i32::MIN.
        let wrapped = names(&[i32::MAX - 1, i32::MAX, i32::MIN]);
        assert_eq!(
            Kind::Mutex.herald(&wrapped, i32::MIN),
            Some(wrapped[0].clone())
        );
    }

    #[test]
    fn a_mutex_watches_only_the_immediate_predecessor() {
        let children = names(&[3, 7, 5, 9, 1]);
        let pos = Kind::Mutex.position(&children, &children[3], 9);
        assert_eq!(
            pos,
            Position {
                present: true,
                blocking: 4,
                watch: vec![children[1].clone()],
                others: 4,
                behind: 0,
            }
        );
        let first = Kind::Mutex.position(&children, &children[4], 1);
        assert_eq!(
            first,
            Position {
                present: true,
                blocking: 0,
                watch: vec![],
                others: 4,
                behind: 4,
            }
        );
        let gone = Kind::Mutex.position(&children, "_c_0f-lock-0000000004", 4);
        assert!(!gone.present);
        assert_eq!(gone.blocking, 2);
    }

    fn rw(spec: &[(char, i32)]) -> Vec<String> {
        spec.iter()
            .map(|&(k, s)| {
                let marker = if k == 'r' { READ_NAME } else { WRITE_NAME };
                format!("_c_{k}{s}-{marker}{s:010}")
            })
            .collect()
    }

    #[test]
    fn a_reader_waits_only_for_the_nearest_earlier_writer() {
        // R1 W2 R3 W4 R5: R5 is blocked by two writers and watches W4, the nearest.
        let children = rw(&[('r', 1), ('w', 2), ('r', 3), ('w', 4), ('r', 5)]);
        let r5 = Kind::Read.position(&children, &children[4], 5);
        assert_eq!(
            (r5.blocking, r5.watch.clone()),
            (2, vec![children[3].clone()])
        );
        // R3 waits for W2 only, not for R1.
        let r3 = Kind::Read.position(&children, &children[2], 3);
        assert_eq!(
            (r3.blocking, r3.watch.clone()),
            (1, vec![children[1].clone()])
        );
        // R1 proceeds; a second reader right behind it proceeds too.
        assert_eq!(Kind::Read.position(&children, &children[0], 1).blocking, 0);
        let readers = rw(&[('r', 1), ('r', 2)]);
        assert_eq!(Kind::Read.position(&readers, &readers[1], 2).blocking, 0);
        // W2 waits for R1; W4 for everything before it, watching R3.
        let w2 = Kind::Write.position(&children, &children[1], 2);
        assert_eq!(
            (w2.blocking, w2.watch.clone()),
            (1, vec![children[0].clone()])
        );
        let w4 = Kind::Write.position(&children, &children[3], 4);
        assert_eq!((w4.blocking, w4.watch), (3, vec![children[2].clone()]));
    }

    #[test]
    fn curator_mutex_nodes_exclude_readers() {
        let mut children = rw(&[('r', 2)]);
        children.push("_c_x-lock-0000000001".into());
        let r = Kind::Read.position(&children, &children[0], 2);
        assert_eq!(r.blocking, 1);
    }

    #[test]
    fn only_a_release_of_a_node_that_held_alone_admits_past_the_rest_of_the_queue() {
        let lock = "_c_a-lock-0000000007";
        let writer = "_c_b-__WRIT__0000000008";
        let reader = "_c_c-__READ__0000000009";
        let lease = "_c_d-lease-0000000010";
        for kind in [Kind::Mutex, Kind::Write, Kind::Read] {
            assert!(kind.admitted_by_release(lock), "{kind:?} behind a mutex");
            assert!(kind.admitted_by_release(writer), "{kind:?} behind a writer");
            assert!(
                !kind.admitted_by_release(reader),
                "{kind:?} behind a reader"
            );
            assert!(!kind.admitted_by_release(lease), "{kind:?} behind a lease");
        }
        assert!(!Kind::Semaphore(1).admitted_by_release(lock));
        assert!(!Kind::Mutex.admitted_by_release("not-a-queue-node"));
        assert!(Kind::Mutex.marks_release() && Kind::Write.marks_release());
        assert!(!Kind::Read.marks_release() && !Kind::Semaphore(2).marks_release());
    }

    #[test]
    fn the_handoff_holds_across_the_sequence_wrap() {
        // 2147483646 holds, 2147483647 waits, and our node got the wrapped -2147483648: we
        // watch the nearest (2147483647), and its marked release admits us.
        let children = names(&[i32::MAX - 1, i32::MAX, i32::MIN]);
        let pos = Kind::Mutex.position(&children, &children[2], i32::MIN);
        assert_eq!(
            (pos.blocking, pos.watch.clone()),
            (2, vec![children[1].clone()])
        );
        assert!(Kind::Mutex.admitted_by_release(&pos.watch[0]));
        // A wrapped node is still a node that holds alone.
        assert!(Kind::Write.admitted_by_release("_c_x-lock--2147483648"));
    }

    #[test]
    fn a_semaphore_waiter_is_blocked_by_its_n_nearest() {
        let children = names(&[1, 2, 3, 4, 5]);
        // With 3 permits: nodes 1, 2, 3 hold; 4 is blocked by one (any of 1..3 leaving
        // admits it): all three.
        for (i, seq) in [(0, 1), (1, 2), (2, 3)] {
            assert_eq!(
                Kind::Semaphore(3)
                    .position(&children, &children[i], seq)
                    .blocking,
                0
            );
        }
        let four = Kind::Semaphore(3).position(&children, &children[3], 4);
        assert_eq!(four.blocking, 1);
        assert_eq!(
            four.watch,
            vec![
                children[2].clone(),
                children[1].clone(),
                children[0].clone()
            ]
        );
        // 5 is blocked by two: 2, 3, 4 (with no lock-delay it follows 4 alone).
        let five = Kind::Semaphore(3).position(&children, &children[4], 5);
        assert_eq!(five.blocking, 2);
        assert_eq!(
            five.watch,
            vec![
                children[3].clone(),
                children[2].clone(),
                children[1].clone()
            ]
        );
        assert_eq!((four.behind, five.behind), (1, 0));
        // One permit is a mutex.
        assert_eq!(
            Kind::Semaphore(1).position(&children, &children[4], 5),
            Kind::Mutex.position(&children, &children[4], 5)
        );
    }
}
