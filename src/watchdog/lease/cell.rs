//! [`LeaseCell`]: what one session's replies have proven, shared by its watchdog, its guards'
//! checks and its acquires: its fields, its setup from the locks' policies, and what it vouches
//! for. The anchor's arithmetic is in `anchor.rs`, the cold phase's in `cold.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::epoch::{from_nanos, nanos, start_clock, to_nanos, NO_PROOF};
use super::policy::{client_keepalive, LeasePolicy};
use crate::mutants::{Flaw, Mutant};
use crate::watchdog::clock;

/// What one session's replies have proven: the anchor, and the recent replies that later
/// committed writes can pair with.
#[derive(Debug)]
pub(crate) struct LeaseCell {
    /// The leader that can expire the session heard from it no earlier than this instant
    /// (nanoseconds from the epoch; [`NO_PROOF`] until the first proof).
    pub(super) anchor: AtomicI64,
    /// `G` in nanoseconds: the largest any lock on this session asked for.
    pub(super) gap: AtomicU64,
    /// The shortest lease budget of the locks on this session, in nanoseconds.
    pub(super) budget: AtomicU64,
    /// When the newest committed write's reply arrived (the watchdog's next probe pairs with
    /// it); [`NO_PROOF`] before the first.
    pub(super) newest_commit: AtomicI64,
    /// True from the watchdog's (re)start until a proof pairs with a reply sent since then and
    /// is at least as good as a lean one: until then committed writes lean on the client's
    /// keepalive.
    pub(super) cold: AtomicBool,
    /// When the cold phase began ([`NO_PROOF`] when warm).
    pub(super) cold_since: AtomicI64,
    /// The slowest commit of the cold phase, in nanoseconds (from send to reply).
    pub(super) slowest_cold_commit: AtomicU64,
    /// `T/5` plus the largest margin, for the cold proof.
    pub(super) keepalive: AtomicU64,
    /// `T/5`, the keepalive without its margin.
    pub(super) client_keepalive: Duration,
    /// The longest gap between two runs of the watchdog's ticker that still counts as the
    /// process running throughout (the largest margin), in nanoseconds: a longer one is a
    /// pause, and a cold proof may lean only across a stretch without one.
    pub(super) stall: AtomicU64,
    /// When the ticker last ran ([`NO_PROOF`]: never).
    pub(super) last_ran: AtomicI64,
    /// Since when the ticker has run with no gap longer than `stall` ([`NO_PROOF`]: never).
    pub(super) running_since: AtomicI64,
    /// Whether the ticker has found a break since its first run (then the process's record
    /// is not inherited; see [`LeaseCell::inherit`]). Not in the model's snapshots: the model
    /// does not inherit.
    pub(super) broken: AtomicBool,
    /// A deliberate flaw (a mutant's): none in a service.
    pub(super) flaw: Mutex<Flaw>,
    /// `(sent, replied)` of recent requests that got a server reply, sorted by reply time.
    pub(super) replies: Mutex<VecDeque<(i64, i64)>>,
}

impl LeaseCell {
    pub(crate) fn new(session_timeout: Duration) -> LeaseCell {
        start_clock();
        LeaseCell {
            anchor: AtomicI64::new(NO_PROOF),
            gap: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            newest_commit: AtomicI64::new(NO_PROOF),
            cold: AtomicBool::new(true),
            cold_since: AtomicI64::new(to_nanos(clock::now())),
            slowest_cold_commit: AtomicU64::new(0),
            keepalive: AtomicU64::new(0),
            client_keepalive: client_keepalive(session_timeout),
            stall: AtomicU64::new(0),
            last_ran: AtomicI64::new(NO_PROOF),
            running_since: AtomicI64::new(NO_PROOF),
            broken: AtomicBool::new(false),
            flaw: Mutex::new(Flaw::default()),
            replies: Mutex::new(VecDeque::new()),
        }
    }

    /// A lock with `policy` uses this session: `G` becomes at least its gap, the budget at
    /// most its budget.
    pub(crate) fn adopt(&self, policy: &LeasePolicy, session_timeout: Duration) {
        let gap = nanos(policy.pair_gap(session_timeout)) as u64;
        self.gap.fetch_max(gap, Ordering::AcqRel);
        let budget = nanos(policy.budget(session_timeout)) as u64;
        self.budget.fetch_min(budget, Ordering::AcqRel);
        let keepalive = nanos(self.client_keepalive + policy.margin(session_timeout)) as u64;
        self.keepalive.fetch_max(keepalive, Ordering::AcqRel);
        let stall = nanos(policy.stall(session_timeout)) as u64;
        self.stall.fetch_max(stall, Ordering::AcqRel);
        if policy.flaw != Flaw::default() {
            *self.flaw.lock().unwrap_or_else(|e| e.into_inner()) = policy.flaw;
        }
    }

    /// This session's flaw (a mutant's), if any.
    pub(crate) fn flaw(&self) -> Flaw {
        *self.flaw.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn gap(&self) -> Duration {
        Duration::from_nanos(self.gap.load(Ordering::Acquire))
    }

    /// The shortest lease budget of the locks on this session.
    pub(crate) fn shortest_budget(&self) -> Duration {
        Duration::from_nanos(self.budget.load(Ordering::Acquire))
    }

    /// How often the watchdog probes: every pair gap (each probe then pairs with the one
    /// before it), but no more often than a quarter of what the budget leaves beyond one gap,
    /// which keeps at least three quarters of it in hand after every renewal.
    pub(crate) fn probe_period(&self) -> Duration {
        let gap = self.gap();
        gap.max(self.shortest_budget().saturating_sub(gap) / 4)
    }

    /// When a lease of `budget` ends: `anchor + budget`, long past before the first proof.
    pub(crate) fn deadline(&self, budget: Duration) -> Instant {
        let anchor = self.anchor.load(Ordering::Acquire);
        from_nanos(anchor.saturating_add(nanos(budget)))
    }

    /// Whether the lease can vouch at `now` for a hold of `budget` just granted, with a
    /// sixteenth of it to spare; else the grant waits for a probe (the queue's `prove`).
    pub(crate) fn vouches_for(&self, budget: Duration, now: Instant) -> bool {
        self.deadline(budget) > now + budget / 16
    }

    /// Whether an acquire granted at `now` may hand out its guard at once (the queue's
    /// `prove` and the model's grant): when the lease vouches for it, else only after a
    /// committed probe of the granted node.
    pub(crate) fn grants_at_once(&self, budget: Duration, now: Instant) -> bool {
        // A warm lease decides without the flaw's lock.
        self.vouches_for(budget, now) || self.flaw().is(Mutant::GrantWithoutProof)
    }

    /// The lease left at `now` for the shortest budget on this session.
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.deadline(self.shortest_budget())
            .saturating_duration_since(now)
    }

    /// When the newest committed write's reply arrived, if any has.
    pub(crate) fn newest_commit(&self) -> Option<Instant> {
        match self.newest_commit.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    pub(crate) fn is_legacy(&self) -> bool {
        self.flaw().is(Mutant::SyncLease)
    }
}

/// A lease cell's content as a value, for the lease model (`crate::watchdog::model`).
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LeaseSnapshot {
    anchor: i64,
    gap: u64,
    budget: u64,
    newest_commit: i64,
    cold: bool,
    cold_since: i64,
    slowest_cold_commit: u64,
    keepalive: u64,
    client_keepalive: Duration,
    stall: u64,
    last_ran: i64,
    running_since: i64,
    flaw: Flaw,
    replies: Vec<(i64, i64)>,
}

#[cfg(feature = "model")]
impl LeaseCell {
    /// This cell's content as a value.
    pub(crate) fn snapshot(&self) -> LeaseSnapshot {
        LeaseSnapshot {
            anchor: self.anchor.load(Ordering::Acquire),
            gap: self.gap.load(Ordering::Acquire),
            budget: self.budget.load(Ordering::Acquire),
            newest_commit: self.newest_commit.load(Ordering::Acquire),
            cold: self.cold.load(Ordering::Acquire),
            cold_since: self.cold_since.load(Ordering::Acquire),
            slowest_cold_commit: self.slowest_cold_commit.load(Ordering::Acquire),
            keepalive: self.keepalive.load(Ordering::Acquire),
            client_keepalive: self.client_keepalive,
            stall: self.stall.load(Ordering::Acquire),
            last_ran: self.last_ran.load(Ordering::Acquire),
            running_since: self.running_since.load(Ordering::Acquire),
            flaw: self.flaw(),
            replies: self.replies().iter().copied().collect(),
        }
    }

    /// A cell holding what `snapshot` holds.
    pub(crate) fn restore(snapshot: &LeaseSnapshot) -> LeaseCell {
        start_clock();
        LeaseCell {
            anchor: AtomicI64::new(snapshot.anchor),
            gap: AtomicU64::new(snapshot.gap),
            budget: AtomicU64::new(snapshot.budget),
            newest_commit: AtomicI64::new(snapshot.newest_commit),
            cold: AtomicBool::new(snapshot.cold),
            cold_since: AtomicI64::new(snapshot.cold_since),
            slowest_cold_commit: AtomicU64::new(snapshot.slowest_cold_commit),
            keepalive: AtomicU64::new(snapshot.keepalive),
            client_keepalive: snapshot.client_keepalive,
            stall: AtomicU64::new(snapshot.stall),
            last_ran: AtomicI64::new(snapshot.last_ran),
            running_since: AtomicI64::new(snapshot.running_since),
            broken: AtomicBool::new(false),
            flaw: Mutex::new(snapshot.flaw),
            replies: Mutex::new(snapshot.replies.iter().copied().collect()),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The session timeout of the lease modules' tests.
    pub(in crate::watchdog::lease) const T: Duration = Duration::from_secs(4);

    pub(in crate::watchdog::lease) fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A cell of a session with timeout [`T`] under `policy`.
    pub(in crate::watchdog::lease) fn cell(policy: &LeasePolicy) -> LeaseCell {
        let cell = LeaseCell::new(T);
        cell.adopt(policy, T);
        cell
    }

    #[test]
    fn probes_come_every_gap_or_a_quarter_of_the_spare_budget() {
        let default = cell(&LeasePolicy::default());
        assert_eq!(default.probe_period(), default.gap()); // 1.21 s
        let fast_tick = LeasePolicy {
            tick: Some(ms(200)),
            ..LeasePolicy::default()
        };
        let long = LeaseCell::new(Duration::from_secs(10));
        long.adopt(&fast_tick, Duration::from_secs(10));
        // budget 9.4 s, gap 0.601 s: (9.4 - 0.601) / 4
        assert_eq!(long.probe_period(), ms(2_199) + Duration::from_micros(750));
    }
}
