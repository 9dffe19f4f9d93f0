//! What the events on the nodes ahead of a waiter mean: when it may proceed with no further
//! request, when it must list the queue again, and when it simply goes on waiting. Pure: the
//! queue arms the watches this asks for and feeds their events in. The argument:
//!
//! # The handoff
//!
//! A watch says that a node changed, not why. A waiter whose last listing showed only its
//! predecessor ahead may proceed when that node goes (nothing new sorts before it). One that
//! queued behind more nodes would have to list the queue again, a read on the critical path of
//! every handoff, unless the event itself says that the predecessor held the lock. So:
//!
//! - **A waiter learns of a node's deletion from a child watch** on it. An ephemeral node has
//!   no children, so the watch fires only when the node is deleted, never when someone writes
//!   its data: a revocation request (zkfence's or Apache Curator's `Revoker`, which writes
//!   `__REVOKE__` into the holder's node) wakes nobody waiting behind the holder. An exists
//!   watch would fire on that write, and a waiter that took it for a release would walk in
//!   beside the holder (the `DataChangeAdmits` mutant).
//! - **A holder marks its release** when a successor is likely to need it: it deletes its node
//!   in a `multi` that first sets the node's data (`cleanup::RELEASED`). Only holders of
//!   the kinds that hold alone mark (mutex, writer; `Kind::marks_release`), and only if they
//!   waited in a crowded queue: their listing showed two other nodes or more, or the wait
//!   lasted long enough (`OWN_WATCH_DELAY`) for others to queue behind them. Two contenders
//!   passing the lock back and forth (an active and a standby) each queue behind the holder
//!   alone, proceed on its deletion, and a plain delete serves them at less cost. A successor
//!   that did queue behind more than one node and finds the deletion unmarked lists again, a
//!   round trip later, never sooner: marking only saves requests, and omitting it is always
//!   safe. With lock-delay on, every release is marked (it says "released, not failed").
//! - **A waiter that gives up never marks** its deletion as a lock node of a kind that holds
//!   alone. So a data change on a `lock-` or `__WRIT__` node followed by its deletion in the
//!   same transaction proves that its holder released it, and a holder took the lock only
//!   once everything sorted before it was gone.
//! - **A successor that queued behind more than one node** also sets a data watch on the node
//!   it watches (`handoff::Ahead::senses`). The release's transaction fires the data watch
//!   (the data change) and then the child watch (the deletion); on seeing both, the successor
//!   proceeds with no request when the node held alone (`Kind::admitted_by_release`): a mutex
//!   or writer watched its immediate predecessor, a reader the nearest exclusive node with
//!   only readers between. Nothing new can sort before us, and every node before ours was in
//!   our listing (it was sent after our create). A data change alone (a revocation request)
//!   makes it wait on; a deletion alone, or a reader's or a semaphore lease's release, sends it
//!   to list again. ZooKeeper 3.9+ gives both events the transaction's zxid, and they must
//!   match; before 3.9 a write of someone else's into a *waiting* node, followed by that
//!   waiter's failure, would pass for a release here (zkfence's own revocation requests go
//!   only to holders; Curator's `Revoker` aimed at waiters is the case to avoid).
//! - **A waiter proves its session before its turn.** A grant needs a lease that holds, and a
//!   waiting session writes nothing, so after a wait longer than its lease a grant would
//!   commit a proof between the release and the acquire's return: a second commit on the
//!   handoff's path. So a mutex or writer waiter that queued behind two nodes or more, and
//!   whose lease lapses while it still waits, sets one more child watch: on its *herald*
//!   ([`Kind::herald`]), the node four places ahead of its own, or the farthest of fewer. When
//!   the herald goes, the waiter's turn is a few handoffs away, and it asks the watchdog for a
//!   proof at once, as a grant would; by its own turn the lease holds, or the proof is on its
//!   way and the grant waits for it rather than send another. The herald decides nothing: its
//!   deletion only moves a proof earlier (a herald that withdrew, or critical sections that
//!   outlast the lease, cost one proof more). A wait that ends while the create's commit
//!   still keeps the lease costs nothing more. Draining a long queue, each handoff
//!   then commits the release and one proof, as before, but only the release is on its path;
//!   each node is watched by its successor and by the waiter whose herald it is, so a deletion
//!   notifies two sessions, not one. `zkfence_grant_proofs_total` counts grants by how their
//!   lease was proved.
//!

use zookeeper_client as zk;

use super::kind::{Kind, Position};
use crate::mutants::{Flaw, Mutant};

/// What a watch on a node ahead reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Sense {
    /// A child watch: it fires only when the node is deleted (an ephemeral node has no
    /// children), never on a write of its data such as a revocation request.
    Deletion,
    /// A data watch: it also fires on a data change, which tells a marked release (set data
    /// and delete in one transaction) from a plain deletion.
    Data,
}

/// What the waiter does after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Verdict {
    /// Nothing ahead blocks us any more; `vanished`: a node we waited on went without a
    /// release, so lock-delay applies.
    Proceed { vanished: bool },
    /// Keep waiting on the other watches.
    Wait,
    /// List the queue again; `after_vanish`: a node we watched went without a release.
    Relist { after_vanish: bool },
}

/// One node ahead that we watch.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Target {
    /// Its release (held alone) admits us past every other node ahead.
    admits_on_release: bool,
    /// The zxid of the data change seen on it, once one was (the release marker, or a write
    /// of someone else's).
    marked: Option<i64>,
}

/// The nodes a waiter watches, and what it has seen of them since it armed its watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Ahead {
    blocking: usize,
    targets: Vec<Target>,
    lock_delay: bool,
    /// A semaphore waiter behind the head of the waiters: its one target is its predecessor,
    /// a waiter too, whose data change is the announcement that it was admitted (see the queue
    /// module's `watches`, "The semaphore's gate").
    follows: bool,
    flaw: Flaw,
}

impl Ahead {
    /// For a waiter of `kind` at `position`.
    pub(crate) fn new(kind: Kind, position: &Position, lock_delay: bool, flaw: Flaw) -> Ahead {
        // With lock-delay every semaphore waiter watches its n nearest, for their markers.
        let follows = matches!(kind, Kind::Semaphore(_)) && position.blocking > 1 && !lock_delay;
        let watched = if follows { 1 } else { position.watch.len() };
        let targets = (position.watch.iter().take(watched))
            .map(|name| Target {
                admits_on_release: flaw.is(Mutant::AnyReleaseAdmits)
                    || kind.admitted_by_release(name),
                marked: None,
            })
            .collect();
        Ahead {
            blocking: position.blocking,
            targets,
            lock_delay,
            follows,
            flaw,
        }
    }

    /// Whether this is a semaphore waiter behind the head of the waiters with no lock-delay,
    /// which watches its predecessor's data alone (see `queue::watches`' "The
    /// semaphore's gate").
    pub(crate) fn follows(&self) -> bool {
        self.follows
    }

    /// How many of the position's nodes (the nearest first) this waiter watches.
    pub(crate) fn watched(&self) -> usize {
        self.targets.len()
    }

    /// The watches to set on target `i`: its deletion always; its data when a marked release
    /// would tell us something a deletion does not (it admits us past other nodes ahead, or
    /// it decides lock-delay).
    pub(crate) fn senses(&self, i: usize) -> &'static [Sense] {
        if self.follows {
            // One watch: its data change (the announcement) and its deletion both fire it.
            return &[Sense::Data];
        }
        let marker_counts = self.flaw.is(Mutant::DataChangeAdmits)
            || self.lock_delay
            || (self.blocking > 1 && self.targets[i].admits_on_release);
        if marker_counts {
            &[Sense::Deletion, Sense::Data]
        } else {
            &[Sense::Deletion]
        }
    }

    /// What it means that a node ahead was gone when we set our watch on it (between the
    /// listing and the watch, released or not, unknown: no lock-delay): proceed if it was the
    /// only one blocking us, else list again.
    pub(crate) fn on_gone(&self) -> Verdict {
        match self.blocking {
            1 => Verdict::Proceed { vanished: false },
            _ => Verdict::Relist {
                after_vanish: false,
            },
        }
    }

    /// What an event of `sense`'s watch on target `i` means.
    pub(crate) fn on_event(&mut self, i: usize, sense: Sense, event: &zk::WatchedEvent) -> Verdict {
        let target = &mut self.targets[i];
        match event.event_type {
            zk::EventType::NodeDataChanged if sense == Sense::Data && self.follows => {
                // Our predecessor announced its admission (or someone wrote into it): we may
                // be the head of the waiters now.
                Verdict::Relist {
                    after_vanish: false,
                }
            }
            zk::EventType::NodeDataChanged if sense == Sense::Data => {
                if self.flaw.is(Mutant::DataChangeAdmits)
                    && (self.blocking == 1 || target.admits_on_release)
                {
                    // The mutant's flaw: any data change taken for the release itself.
                    return Verdict::Proceed { vanished: false };
                }
                // A marked release shows its deletion next (on the child watch); a write of
                // someone else's (a revocation request) shows nothing more: wait either way.
                target.marked = Some(event.zxid);
                Verdict::Wait
            }
            zk::EventType::NodeDeleted => self.on_deletion(&self.targets[i], event.zxid),
            // A reconnect or anything unexpected: what the queue looks like now is unknown.
            _ => Verdict::Relist {
                after_vanish: false,
            },
        }
    }

    /// What the deletion of `target`, at zxid `deleted`, means: the zero-request handoff
    /// when it was our only blocker, a pass past the others when it was a marked release of a
    /// node that held alone, else a new listing.
    fn on_deletion(&self, target: &Target, deleted: i64) -> Verdict {
        // The same transaction as the data change, when the server says (3.9+).
        let blind = self.flaw.is(Mutant::ZxidBlind);
        let marked = target.marked.is_some_and(|changed| {
            blind
                || changed == zk::WatchedEvent::NO_ZXID
                || deleted == zk::WatchedEvent::NO_ZXID
                || changed == deleted
        });
        if self.blocking == 1 {
            // Our last listing showed it as the only blocker, and nothing new can
            // sort before us: the zero-request handoff.
            Verdict::Proceed {
                vanished: self.lock_delay && !marked,
            }
        } else if (marked || self.flaw.is(Mutant::UnmarkedAdmits)) && target.admits_on_release {
            Verdict::Proceed { vanished: false }
        } else {
            Verdict::Relist {
                after_vanish: !marked,
            }
        }
    }
}

/// Whether a waiter of `kind` that gives up deletes its node with the release marker: only
/// with lock-delay on (where the marker says "not a failure"), and never for a mutex or writer,
/// whose marked node would read as a holder's release and let its successor past the nodes
/// still ahead (`queue::handoff`'s "The handoff").
pub(crate) fn withdrawal_marked(kind: Kind, lock_delay: bool, flaw: Flaw) -> bool {
    flaw.is(Mutant::MarkedWithdrawal) || (lock_delay && !kind.marks_release())
}

/// Whether a grant reads its own node again before it is handed out: after a lock-delay
/// (`vanished`: a node ahead went without a release; see the queue's `Attempt::reread`).
pub(crate) fn rereads_after_delay(vanished: bool, flaw: Flaw) -> bool {
    vanished && !flaw.is(Mutant::UnreadAfterLockDelay)
}

/// Whether a holder of `kind` releases with the marker: always with lock-delay on; otherwise
/// when its kind holds alone and it waited in a crowded queue (`queue::handoff`'s "The
/// handoff").
pub(crate) fn release_marked(kind: Kind, lock_delay: bool, crowded: bool) -> bool {
    lock_delay || (kind.marks_release() && crowded)
}

/// Whether a semaphore waiter admitted by the listing that showed `behind` nodes after its
/// own (`None`: admitted on an event, with no listing) announces its admission with a write
/// into its node: the waiter right behind it watches its data and becomes the head of the
/// waiters then (`queue::watches`' "The semaphore's gate"). Not with lock-delay, where every
/// waiter watches its `n` nearest.
pub(crate) fn announces_admission(
    kind: Kind,
    lock_delay: bool,
    behind: Option<usize>,
    flaw: Flaw,
) -> bool {
    matches!(kind, Kind::Semaphore(_))
        && !lock_delay
        && !flaw.is(Mutant::SilentAdmission)
        && behind.is_none_or(|behind| behind > 0)
}

/// Whether a follower's watch on its predecessor `target`, set at data version `version`,
/// came too late for an announcement: the version is not the one this follower last acted on
/// (`acted`, the node and version it listed again for; 0 for a node it never saw written), so
/// a write it has not seen landed before the watch, and it lists again rather than wait for
/// an event that already happened.
pub(crate) fn announced_before_watch(
    acted: Option<&(String, i32)>,
    target: &str,
    version: i32,
    flaw: Flaw,
) -> bool {
    let seen = acted
        .filter(|(node, _)| node == target)
        .map_or(0, |(_, v)| *v);
    version != seen && !flaw.is(Mutant::UnseenAnnouncement)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::names::mutex_names;

    fn event(event_type: zk::EventType, zxid: i64) -> zk::WatchedEvent {
        zk::WatchedEvent::new(event_type, "/l/n").with_zxid(zxid)
    }

    fn ahead(blocking: usize, lock_delay: bool) -> Ahead {
        let names = mutex_names(&[1]);
        let position = Position {
            present: true,
            blocking,
            watch: names,
            others: blocking,
            behind: 0,
        };
        Ahead::new(Kind::Mutex, &position, lock_delay, Flaw::default())
    }

    const CHANGED: zk::EventType = zk::EventType::NodeDataChanged;
    const DELETED: zk::EventType = zk::EventType::NodeDeleted;
    const NONE: i64 = zk::WatchedEvent::NO_ZXID;

    #[test]
    fn a_sole_blocker_is_watched_for_its_deletion_only_and_a_write_to_it_admits_nobody() {
        let mut ahead = ahead(1, false);
        assert_eq!(ahead.senses(0), &[Sense::Deletion]);
        // A revocation request written into the holder's node reaches only a data watch; even
        // if one were set, it does not admit us.
        assert_eq!(
            ahead.on_event(0, Sense::Data, &event(CHANGED, 7)),
            Verdict::Wait
        );
        assert_eq!(
            ahead.on_event(0, Sense::Deletion, &event(DELETED, 9)),
            Verdict::Proceed { vanished: false }
        );
    }

    #[test]
    fn behind_several_nodes_only_a_marked_release_admits_without_a_listing() {
        let mut plain = ahead(3, false);
        assert_eq!(plain.senses(0), &[Sense::Deletion, Sense::Data]);
        assert_eq!(
            plain.on_event(0, Sense::Deletion, &event(DELETED, NONE)),
            Verdict::Relist { after_vanish: true }
        );
        let mut marked = ahead(3, false);
        assert_eq!(
            marked.on_event(0, Sense::Data, &event(CHANGED, NONE)),
            Verdict::Wait
        );
        assert_eq!(
            marked.on_event(0, Sense::Deletion, &event(DELETED, NONE)),
            Verdict::Proceed { vanished: false }
        );
    }

    #[test]
    fn with_zxids_a_write_and_a_later_deletion_are_not_a_marked_release() {
        // 3.9+ servers give both events of the release multi one zxid.
        let mut same = ahead(3, false);
        same.on_event(0, Sense::Data, &event(CHANGED, 40));
        assert_eq!(
            same.on_event(0, Sense::Deletion, &event(DELETED, 40)),
            Verdict::Proceed { vanished: false }
        );
        // A revocation request (zxid 40), then the node's failure (41): not a release.
        let mut apart = ahead(3, false);
        apart.on_event(0, Sense::Data, &event(CHANGED, 40));
        assert_eq!(
            apart.on_event(0, Sense::Deletion, &event(DELETED, 41)),
            Verdict::Relist { after_vanish: true }
        );
    }

    #[test]
    fn a_grant_reads_its_node_again_only_after_a_lock_delay() {
        assert!(rereads_after_delay(true, Flaw::default()));
        assert!(!rereads_after_delay(false, Flaw::default()));
        // The mutant skips it (the queue model and `tests/kinds.rs` must catch that).
        #[cfg(feature = "mutants")]
        assert!(!rereads_after_delay(
            true,
            Flaw::of(Mutant::UnreadAfterLockDelay)
        ));
    }

    #[test]
    fn lock_delay_watches_data_and_delays_only_after_a_plain_deletion() {
        let mut failed = ahead(1, true);
        assert_eq!(failed.senses(0), &[Sense::Deletion, Sense::Data]);
        assert_eq!(
            failed.on_event(0, Sense::Deletion, &event(DELETED, NONE)),
            Verdict::Proceed { vanished: true }
        );
        let mut released = ahead(1, true);
        released.on_event(0, Sense::Data, &event(CHANGED, NONE));
        assert_eq!(
            released.on_event(0, Sense::Deletion, &event(DELETED, NONE)),
            Verdict::Proceed { vanished: false }
        );
    }

    #[test]
    fn a_semaphore_head_never_admits_past_the_others_on_a_release() {
        // The head of the waiters under lock-delay watches its n nearest: one's release
        // admits it; a marker alone does not.
        let position = Position {
            present: true,
            blocking: 1,
            watch: mutex_names(&[1, 2]),
            others: 2,
            behind: 0,
        };
        let mut head = Ahead::new(Kind::Semaphore(2), &position, true, Flaw::default());
        assert!(!head.follows());
        assert_eq!(
            head.on_event(1, Sense::Data, &event(CHANGED, 5)),
            Verdict::Wait
        );
        assert_eq!(
            head.on_event(1, Sense::Deletion, &event(DELETED, 5)),
            Verdict::Proceed { vanished: false }
        );
    }

    #[test]
    fn a_semaphore_follower_watches_its_predecessor_once_and_lists_again_on_any_change() {
        let position = Position {
            present: true,
            blocking: 2,
            watch: mutex_names(&[3, 2]),
            others: 4,
            behind: 1,
        };
        // Under lock-delay it watches both nearest, as the head does.
        let delayed = Ahead::new(Kind::Semaphore(2), &position, true, Flaw::default());
        assert!(!delayed.follows());
        assert_eq!(delayed.watched(), 2);
        for (change, after_vanish) in [(CHANGED, false), (DELETED, true)] {
            let mut follower = Ahead::new(Kind::Semaphore(2), &position, false, Flaw::default());
            assert!(follower.follows());
            assert_eq!(follower.watched(), 1);
            assert_eq!(follower.senses(0), &[Sense::Data]);
            assert_eq!(
                follower.on_event(0, Sense::Data, &event(change, NONE)),
                Verdict::Relist { after_vanish }
            );
        }
    }

    #[test]
    fn only_a_semaphore_admitted_with_someone_behind_or_unlisted_announces() {
        let none = Flaw::default();
        let sem = Kind::Semaphore(3);
        assert!(announces_admission(sem, false, Some(2), none));
        assert!(announces_admission(sem, false, None, none));
        assert!(!announces_admission(sem, false, Some(0), none));
        assert!(!announces_admission(sem, true, None, none));
        assert!(!announces_admission(Kind::Mutex, false, Some(2), none));
    }

    #[test]
    fn a_watch_set_after_an_unseen_write_lists_again_once() {
        let none = Flaw::default();
        // Never written: wait on the watch.
        assert!(!announced_before_watch(None, "p", 0, none));
        // Written before the watch: list again, once for that version.
        assert!(announced_before_watch(None, "p", 1, none));
        let acted = ("p".to_owned(), 1);
        assert!(!announced_before_watch(Some(&acted), "p", 1, none));
        assert!(announced_before_watch(Some(&acted), "p", 2, none));
        // What we acted on was another node's.
        assert!(announced_before_watch(Some(&acted), "q", 1, none));
    }
}
