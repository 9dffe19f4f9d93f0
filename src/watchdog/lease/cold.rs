//! The cold phase (the lease module's "What a reply proves", its last paragraph): from a
//! watchdog's (re)start until a proof pairs with a reply of its own, a committed write leans on
//! the client's keepalive, but only across a stretch the process is known to have run through
//! ("Leaning needs a running process"): the watchdog's ticker, each session's record of its
//! runs, and the process's ([`RunRecord`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::cell::LeaseCell;
use super::epoch::{from_nanos, nanos, to_nanos, NO_PROOF};
use crate::mutants::{Flaw, Mutant};

/// What the tickers of every session's watchdog in this process have seen, together: since
/// when some ticker has run at least every `stall` (the smallest stall any of them reported),
/// so a session whose watchdog starts now can lean on the process's history rather than wait
/// for its own (see "Leaning needs a running process"). Both instants only move forward, so a
/// ticker that recorded late (descheduled between reading the clock and storing) cannot undo
/// a break that a later one found.
#[derive(Debug)]
pub(crate) struct RunRecord {
    /// The longest gap that is no break, in nanoseconds: the smallest stall reported.
    stall: AtomicI64,
    last_ran: AtomicI64,
    running_since: AtomicI64,
}

impl RunRecord {
    pub(crate) const fn new() -> RunRecord {
        RunRecord {
            stall: AtomicI64::new(i64::MAX),
            last_ran: AtomicI64::new(NO_PROOF),
            running_since: AtomicI64::new(NO_PROOF),
        }
    }

    /// A ticker that tolerates `stall` ran at `now`. Returns since when the process has run
    /// with no gap longer than the record's stall (at most `stall`) between any two tickers'
    /// runs, up to `now`. A stall smaller than any before counts as a break: the gaps recorded
    /// so far were judged against a longer one.
    pub(crate) fn ran(&self, now: Instant, stall: Duration) -> Instant {
        let (now, stall) = (to_nanos(now), nanos(stall));
        let before = self.stall.fetch_min(stall, Ordering::AcqRel);
        let last = self.last_ran.fetch_max(now, Ordering::AcqRel);
        if last == NO_PROOF || stall < before || now.saturating_sub(last) > stall.min(before) {
            self.running_since.fetch_max(now, Ordering::AcqRel);
        }
        from_nanos(self.running_since.load(Ordering::Acquire))
    }
}

impl LeaseCell {
    /// The watchdog starts (or starts again after an idle spell): the next proofs are cold
    /// ones.
    pub(crate) fn restart(&self, now: Instant) {
        self.cold.store(true, Ordering::Release);
        self.cold_since.store(to_nanos(now), Ordering::Release);
        self.slowest_cold_commit.store(0, Ordering::Release);
    }

    /// Since when the lease is cold (no paired proof as good as a lean one yet), if it is.
    pub(crate) fn cold_since(&self) -> Option<Instant> {
        if !self.cold.load(Ordering::Acquire) {
            return None;
        }
        match self.cold_since.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    /// The slowest commit of the cold phase so far (zero before the first).
    pub(crate) fn slowest_cold_commit(&self) -> Duration {
        Duration::from_nanos(self.slowest_cold_commit.load(Ordering::Acquire))
    }

    /// How long a cold proof's anchor lies before its write was sent: `G`, the keepalive, the
    /// margin and the longest stall the ticker lets pass as running.
    pub(crate) fn lean(&self) -> Duration {
        self.gap() + Duration::from_nanos(self.keepalive.load(Ordering::Acquire)) + self.stall()
    }

    /// The longest gap between the ticker's runs that still counts as the process running.
    pub(crate) fn stall(&self) -> Duration {
        Duration::from_nanos(self.stall.load(Ordering::Acquire))
    }

    /// How often the watchdog's ticker runs: a quarter of the stall it tolerates (at least a
    /// millisecond), so that a gap past the stall is a pause, not a late timer. With no lock's
    /// policy adopted yet nothing can lean, and once a second will do.
    pub(crate) fn ticker_period(&self) -> Duration {
        match self.stall() {
            Duration::ZERO => Duration::from_secs(1),
            stall => (stall / 4).max(Duration::from_millis(1)),
        }
    }

    /// The watchdog's ticker ran at `now`: a gap longer than the stall since its last run (or
    /// no run before) is a break, and the process counts as running only from `now`. `true`
    /// while the ticker has found no break since its first run (gaps before a lock's policy
    /// set the stall do not count: nothing leans before that).
    pub(crate) fn ran(&self, now: Instant) -> bool {
        let now = to_nanos(now);
        let last = self.last_ran.load(Ordering::Acquire);
        let stall = self.stall.load(Ordering::Acquire) as i64;
        if last == NO_PROOF || now.saturating_sub(last) > stall {
            self.running_since.store(now, Ordering::Release);
            if last != NO_PROOF && stall > 0 {
                self.broken.store(true, Ordering::Release);
            }
        }
        self.last_ran.fetch_max(now, Ordering::AcqRel);
        !self.broken.load(Ordering::Acquire)
    }

    /// The process-wide record vouches that the process has run without a break since
    /// `since`, up to this cell's latest run of its own ticker (just recorded): a new session's
    /// watchdog starts with the history of the tickers already running in this process, so
    /// that only the first acquire of a process waits for a paired proof. Only while `unbroken`
    /// (what [`ran`](Self::ran) returned): a cell whose own ticker found a break keeps its own
    /// record, so another runtime's ticker cannot paper over it.
    pub(crate) fn inherit(&self, since: Instant, unbroken: bool) {
        if unbroken {
            self.running_since
                .fetch_min(to_nanos(since), Ordering::AcqRel);
        }
    }

    /// Whether the process is known to have run throughout the lean before a write sent at
    /// `sent` (nanoseconds): the ticker has run without a break since at least a lean before
    /// it, and its last run is no more than a stall before it (or after it: then the run that
    /// straddles `sent` was no break either). A write sent right after a resume, before the
    /// ticker has run, finds the last run from before the pause, too old.
    fn ran_through(&self, sent: i64) -> bool {
        if self.flaw().is(Mutant::LeanThroughPause) {
            return true;
        }
        let since = self.running_since.load(Ordering::Acquire);
        let last = self.last_ran.load(Ordering::Acquire);
        let stall = self.stall.load(Ordering::Acquire) as i64;
        let lean = nanos(self.lean());
        since != NO_PROOF && since <= sent.saturating_sub(lean) && sent - last <= stall
    }

    /// The earliest send time from which a cold proof can lean as things stand (a lean after
    /// the ticker's current run began); `None` before the ticker's first run.
    pub(crate) fn leans_from(&self) -> Option<Instant> {
        if self.flaw().is(Mutant::LeanThroughPause) {
            return self.cold_since();
        }
        match self.running_since.load(Ordering::Acquire) {
            NO_PROOF => None,
            since => Some(from_nanos(since.saturating_add(nanos(self.lean())))),
        }
    }
    /// The anchor a commit of the cold phase, sent at `sent` and replied at `at`, proves: the
    /// later of its pair's (`paired`) and a lean on the client's keepalive (when the process
    /// ran through the lean). Ends the cold phase when a pair with a reply of this phase does
    /// at least as well as the lean; else counts the commit's time toward the slowest one.
    pub(super) fn cold_anchor(
        &self,
        flaw: Flaw,
        paired: Option<i64>,
        sent: Instant,
        at: Instant,
        gap: i64,
    ) -> Option<i64> {
        let sent_at = to_nanos(sent);
        // The cold phase: lean on the keepalive, until pairing does at least as well; but
        // only across a stretch the process is known to have run through (else the
        // keepalive may not have run either: the lease module's "The cold proofs").
        let lean = match flaw.is(Mutant::ColdWithoutKeepalive) {
            true => gap,
            false => nanos(self.lean()),
        };
        let leaning = self.ran_through(sent_at).then_some(sent_at - lean);
        let candidate = match (paired, leaning) {
            (Some(p), Some(l)) => Some(p.max(l)),
            (p, l) => p.or(l),
        };
        // Only a pair with a reply of this phase ends it: older ones, from before an idle
        // spell, prove too little for the regular probes to keep the lease from there.
        let since = self.cold_since.load(Ordering::Acquire);
        if paired.is_some_and(|p| p >= since && leaning.is_none_or(|l| p >= l)) {
            self.cold.store(false, Ordering::Release);
        } else {
            let took = nanos(at.saturating_duration_since(sent)) as u64;
            self.slowest_cold_commit.fetch_max(took, Ordering::AcqRel);
        }
        candidate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchdog::lease::cell::tests::{cell, ms, T};
    use crate::watchdog::lease::LeasePolicy;

    /// The watchdog's ticker, running every period from now until `until` (paused time).
    async fn run_ticker(cell: &LeaseCell, until: Instant) {
        while Instant::now() < until {
            cell.ran(Instant::now());
            tokio::time::advance(cell.ticker_period()).await;
        }
        cell.ran(Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cold_proof_leans_only_across_a_stretch_the_process_ran_through() {
        let policy = LeasePolicy::default();
        let fresh = || cell(&policy);
        let lean = fresh().lean(); // G + T/5 + margin + stall
        assert_eq!(lean, fresh().gap() + ms(800) + ms(200) + ms(200));
        assert_eq!(fresh().ticker_period(), ms(50));

        // A first acquire (or one right after a pause) with nothing to show that the process
        // ran through the lean before its create: the keepalive may not have run, so the cold
        // proof gives no anchor (the rule before the ticker anchored it a lean back).
        let cell = fresh();
        tokio::time::advance(Duration::from_secs(30)).await;
        let s = Instant::now();
        cell.committed(s, s + ms(5));
        assert_eq!(cell.anchor(), None, "a cold proof leaned with no evidence");
        assert!(!cell.vouches_for(policy.budget(T), s + ms(5)));

        // The ticker has run, but not yet a whole lean before the write: no lean; a lean
        // after its start, the proof leans.
        let cell = fresh();
        let t0 = Instant::now();
        run_ticker(&cell, t0 + lean - ms(100)).await;
        let early = Instant::now();
        cell.committed(early, early + ms(5));
        assert_eq!(cell.anchor(), None, "leaned across the ticker's start");
        run_ticker(&cell, t0 + lean + ms(200)).await;
        let ran = Instant::now();
        cell.committed(ran, ran + ms(5));
        assert_eq!(cell.anchor(), Some(ran - lean));

        // A pause of 9 s (SIGSTOP) just before a write sent right after the resume, answered
        // before the ticker has run again: its last run is too old, no lean.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        let resumed = Instant::now();
        cell.committed(resumed, resumed + ms(5));
        assert_eq!(cell.anchor(), None, "leaned through a pause");
        // Pairing needs no keepalive: a write a gap after that reply pairs with it.
        let paired = resumed + ms(5) + cell.gap();
        cell.committed(paired, paired + ms(5));
        assert_eq!(cell.anchor(), Some(resumed));

        // The same pause, the ticker's first run after it before the write: a break, and the
        // process counts as running only from then on.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        cell.ran(Instant::now());
        tokio::time::advance(ms(1)).await;
        let after = Instant::now();
        cell.committed(after, after + ms(5));
        assert_eq!(cell.anchor(), None, "leaned across a detected pause");

        // A gap of the stall itself is no break (a late timer); a longer one is.
        let cell = cell_with_history().await;
        tokio::time::advance(cell.stall()).await;
        cell.ran(Instant::now());
        let at = Instant::now();
        cell.committed(at, at + ms(5));
        assert_eq!(cell.anchor(), Some(at - lean));
        tokio::time::advance(cell.stall() + ms(1)).await;
        cell.ran(Instant::now());
        let next = Instant::now();
        cell.committed(next, next + ms(5));
        assert_eq!(
            cell.anchor(),
            Some(at - lean),
            "leaned across a gap past the stall"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_process_record_passes_on_its_runs_and_every_break() {
        let (record, stall) = (RunRecord::new(), ms(200));
        let t0 = Instant::now();
        assert_eq!(record.ran(t0, stall), t0);
        // Runs a quarter of the stall apart, from any session's ticker: no break.
        for _ in 0..100 {
            tokio::time::advance(ms(50)).await;
            assert_eq!(record.ran(Instant::now(), stall), t0);
        }
        // A new session's lease starts from the record on its ticker's first run, and its
        // first cold proof leans at once.
        let cell = cell(&LeasePolicy::default());
        let now = Instant::now();
        cell.inherit(record.ran(now, cell.stall()), cell.ran(now));
        cell.committed(now, now + ms(5));
        assert_eq!(cell.anchor(), Some(now - cell.lean()));
        // A gap past the stall is a break, whichever ticker finds it.
        tokio::time::advance(ms(201)).await;
        let b = Instant::now();
        assert_eq!(record.ran(b, stall), b);
        // A ticker that tolerates more is judged by the smallest stall reported.
        tokio::time::advance(ms(300)).await;
        let c = Instant::now();
        assert_eq!(record.ran(c, ms(500)), c);
        // A ticker that read the clock before `c` and records after it takes nothing back.
        assert_eq!(record.ran(b + ms(10), stall), c);
        // A smaller stall than any before: the gaps so far were judged against a longer one.
        tokio::time::advance(ms(10)).await;
        let d = Instant::now();
        assert_eq!(record.ran(d, ms(20)), d);
        // A lease whose own ticker ran before keeps its own record: its break stands.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        let woke = Instant::now();
        cell.inherit(t0, cell.ran(woke));
        cell.committed(woke, woke + ms(5));
        assert_eq!(
            cell.anchor(),
            None,
            "a lease inherited across its own break"
        );
    }

    /// A cold cell whose ticker has run for twice a lean.
    async fn cell_with_history() -> LeaseCell {
        let cell = cell(&LeasePolicy::default());
        run_ticker(&cell, Instant::now() + cell.lean() * 2).await;
        cell
    }

    #[tokio::test(start_paused = true)]
    async fn cold_proofs_lean_on_the_keepalive_until_pairing_does_as_well() {
        let cell = cell_with_history().await;
        let gap = cell.gap();
        let lean = gap + ms(1_200); // G + T/5 + margin + stall
        assert_eq!(cell.lean(), lean);
        let s = Instant::now();
        // Cold: nothing known before it, the client pinged within T/5 (+ margin).
        cell.committed(s, s + ms(5));
        assert_eq!(cell.anchor(), Some(s - lean));
        assert!(cell.cold_since().is_some());
        // Still cold (nothing to pair with yet): a slow second write leans too.
        run_ticker(&cell, Instant::now() + Duration::from_millis(500)).await;
        let slow = Instant::now();
        cell.committed(slow, slow + ms(900));
        assert_eq!(cell.anchor(), Some(slow - lean));
        assert_eq!(cell.slowest_cold_commit(), ms(900));
        // A write a gap after the first reply pairs with it, as well as leaning would: warm.
        let paired = s + ms(5) + gap;
        cell.committed(paired, paired + ms(5));
        assert_eq!(cell.anchor(), Some(s));
        assert_eq!(cell.cold_since(), None);
        // Warm: a write with no reply G before it proves nothing new.
        run_ticker(&cell, Instant::now() + Duration::from_secs(4)).await;
        let later = Instant::now();
        cell.committed(later, later + ms(5));
        assert!(cell.anchor() < Some(later - lean), "a warm write leaned");
        // After a restart (the watchdog was idle), cold again.
        cell.restart(Instant::now());
        run_ticker(&cell, Instant::now() + ms(100)).await;
        let again = Instant::now();
        cell.committed(again, again + ms(5));
        assert_eq!(cell.anchor(), Some(again - lean));
    }
}
