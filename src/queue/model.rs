//! The queue's decisions as values, for the queue model (`model/`, the `zkfence-model`
//! package): where a node stands in a listing and what it watches ([`position`], the kinds'
//! own predicate), what each event on a watched node means ([`Waiter`], the handoff's own
//! `Ahead`), and whether a release or a withdrawal carries the marker. The model supplies the
//! server (sequence numbers, watches, events in order) and calls these as the acquire does;
//! nothing here decides anything the library does not decide the same way.
//!
//! Built only with the `model` feature (which turns on `mutants`); reached as
//! `zkfence::model_api::queue`.

use zookeeper_client as zk;

use super::handoff::{self, Ahead};
use super::kind::{self, Kind};
use super::names;
use crate::mutants::{Flaw, Mutant};

fn flaw(mutant: Option<Mutant>) -> Flaw {
    mutant.map(Flaw::of).unwrap_or_default()
}

/// The lock kinds the queue model runs: the ones that share one queue and its handoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `FencedLock`: one holder.
    Mutex,
    /// `FencedRwLock`'s read lock: shares with readers, waits for earlier writers.
    Read,
    /// `FencedRwLock`'s write lock: one holder, waits for every earlier node.
    Write,
}

impl LockKind {
    fn kind(self) -> Kind {
        match self {
            LockKind::Mutex => Kind::Mutex,
            LockKind::Read => Kind::Read,
            LockKind::Write => Kind::Write,
        }
    }

    /// The node name the library gives contender `contender`'s node of this kind, once the
    /// server appended `sequence` (`_c_<id>-<marker><sequence>`, Curator's protected form).
    pub fn node_name(self, contender: u8, sequence: i32) -> String {
        let id = uuid::Uuid::from_u128(u128::from(contender) + 1);
        let prefix = names::protected_prefix(&id, self.kind().marker());
        format!("{prefix}{sequence:010}")
    }
}

/// Where a node stands in one listing, as the acquire reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    /// Our node is in the listing.
    pub present: bool,
    /// How many nodes must go before we may proceed (0: proceed now).
    pub blocking: usize,
    /// The nodes we watch, nearest first.
    pub watch: Vec<String>,
    /// The listing shows a crowded queue: our release will be marked.
    pub crowded: bool,
    others: usize,
    behind: usize,
}

impl Position {
    fn inner(&self) -> kind::Position {
        kind::Position {
            present: self.present,
            blocking: self.blocking,
            watch: self.watch.clone(),
            others: self.others,
            behind: self.behind,
        }
    }
}

/// Where our node `own` of `kind` stands in `children` (`Kind::position`); `None` if `own`
/// carries no sequence.
pub fn position(kind: LockKind, children: &[String], own: &str) -> Option<Position> {
    let sequence = names::parse_sequence(own)?;
    let position = kind.kind().position(children, own, sequence);
    Some(Position {
        present: position.present,
        blocking: position.blocking,
        crowded: position.crowded(),
        watch: position.watch,
        others: position.others,
        behind: position.behind,
    })
}

/// What a watch on a node ahead reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sense {
    /// A child watch: fires only on the node's deletion.
    Deletion,
    /// A data watch: fires on a data change, or on the deletion if no change came first.
    Data,
}

impl Sense {
    fn inner(self) -> handoff::Sense {
        match self {
            Sense::Deletion => handoff::Sense::Deletion,
            Sense::Data => handoff::Sense::Data,
        }
    }
}

/// What happened to a watched node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// Its data was written (a release marker, or a revocation request).
    DataChanged,
    /// It was deleted.
    Deleted,
}

/// What the waiter does after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Nothing ahead blocks it any more; `vanished`: a node it waited on went without a
    /// release (lock-delay applies).
    Proceed {
        /// A node went without a release.
        vanished: bool,
    },
    /// It keeps waiting.
    Wait,
    /// It lists the queue again; `after_vanish`: a watched node went without a release.
    Relist {
        /// A watched node went without a release.
        after_vanish: bool,
    },
}

impl Verdict {
    fn of(verdict: handoff::Verdict) -> Verdict {
        match verdict {
            handoff::Verdict::Proceed { vanished } => Verdict::Proceed { vanished },
            handoff::Verdict::Wait => Verdict::Wait,
            handoff::Verdict::Relist { after_vanish } => Verdict::Relist { after_vanish },
        }
    }
}

/// A waiter's view of the nodes it watches since it armed its watches (the handoff's `Ahead`),
/// as a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Waiter(Ahead);

impl Waiter {
    /// A waiter of `kind` at `position`, with lock-delay on or off, under `mutant`.
    pub fn new(
        kind: LockKind,
        position: &Position,
        lock_delay: bool,
        mutant: Option<Mutant>,
    ) -> Waiter {
        Waiter(Ahead::new(
            kind.kind(),
            &position.inner(),
            lock_delay,
            flaw(mutant),
        ))
    }

    /// The watches it sets on its `i`-th target, in the order it sends them.
    pub fn senses(&self, i: usize) -> Vec<Sense> {
        (self.0.senses(i).iter())
            .map(|sense| match sense {
                handoff::Sense::Deletion => Sense::Deletion,
                handoff::Sense::Data => Sense::Data,
            })
            .collect()
    }

    /// What `change` on target `i`, reported by its `sense` watch in the transaction `zxid`,
    /// means.
    pub fn on_event(&mut self, i: usize, sense: Sense, change: Change, zxid: i64) -> Verdict {
        let event_type = match change {
            Change::DataChanged => zk::EventType::NodeDataChanged,
            Change::Deleted => zk::EventType::NodeDeleted,
        };
        let event = zk::WatchedEvent::new(event_type, "/model").with_zxid(zxid);
        Verdict::of(self.0.on_event(i, sense.inner(), &event))
    }

    /// What it means that a target was gone when the watch on it was set.
    pub fn on_gone(&self) -> Verdict {
        Verdict::of(self.0.on_gone())
    }
}

/// Whether a holder of `kind` releases with the marker (the acquire's `release_marked`).
pub fn release_marked(kind: LockKind, lock_delay: bool, crowded: bool) -> bool {
    handoff::release_marked(kind.kind(), lock_delay, crowded)
}

/// Whether a waiter of `kind` that gives up deletes its node with the marker (the acquire's
/// `withdrawal_marked`), under `mutant`.
pub fn withdrawal_marked(kind: LockKind, lock_delay: bool, mutant: Option<Mutant>) -> bool {
    handoff::withdrawal_marked(kind.kind(), lock_delay, flaw(mutant))
}

/// Whether a grant whose waiter proceeded past a node that went without a release
/// (`vanished`, with lock-delay on) reads its own node again before it is handed out (the
/// acquire's `rereads_after_delay`), under `mutant`.
pub fn rereads_after_delay(vanished: bool, mutant: Option<Mutant>) -> bool {
    handoff::rereads_after_delay(vanished, flaw(mutant))
}
