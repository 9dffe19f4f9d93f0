//! The anchor: the replies a session's requests got, and what a committed write proves from
//! them (the lease module's "What a reply proves"): a pair with a reply back at least `G`
//! before it was sent; a new session's connect; the `SyncLease` mutant's unsound `sync`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::cell::LeaseCell;
#[cfg(test)]
use super::epoch::{from_nanos, NO_PROOF};
use super::epoch::{nanos, to_nanos};
use crate::mutants::{Flaw, Mutant};

/// The most replies remembered. Past it, every other one is forgotten (the newest kept), so the
/// list covers its whole span at a coarser grain rather than losing its oldest part, which is
/// the part the next proofs pair with. Forgetting a reply only ever proves less.
const HISTORY: usize = 256;

impl LeaseCell {
    /// The replies remembered, `(sent, replied)`, sorted by reply time.
    pub(super) fn replies(&self) -> std::sync::MutexGuard<'_, VecDeque<(i64, i64)>> {
        self.replies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request sent at `sent` got a server reply (of any kind) at `at`: the server it was
    /// connected to saw the session by then.
    pub(crate) fn replied(&self, sent: Instant, at: Instant) {
        let (sent, at) = (to_nanos(sent), to_nanos(at));
        let mut replies = self.replies();
        // Callers record from different tasks: keep the list sorted by reply time.
        let index = replies.partition_point(|&(_, r)| r <= at);
        replies.insert(index, (sent, at));
        if replies.len() > HISTORY {
            let last = replies.len() - 1;
            let mut i = 0;
            replies.retain(|_| {
                i += 1;
                (i - 1) % 2 == 0 || i - 1 == last
            });
        }
    }

    /// A write sent at `sent` was committed, its reply arriving at `at`: moves the anchor to the
    /// latest send time among the replies that came back at least `G` before `sent` (see the
    /// lease module), or on a cold start to what the client's keepalive guarantees.
    pub(crate) fn committed(&self, sent: Instant, at: Instant) {
        if self.is_legacy() {
            self.synced(sent, at);
            return;
        }
        let flaw = self.flaw();
        let sent_at = to_nanos(sent);
        let gap = nanos(self.gap());
        let paired = self.paired_anchor(flaw, sent_at, gap);
        let mut candidate = paired;
        if self.cold.load(Ordering::Acquire) {
            candidate = self.cold_anchor(flaw, paired, sent, at, gap);
        }
        if let Some(candidate) = candidate {
            self.anchor.fetch_max(candidate, Ordering::AcqRel);
        }
        self.newest_commit.fetch_max(to_nanos(at), Ordering::AcqRel);
        self.replied(sent, at);
    }

    /// The anchor a write sent at `sent_at` (nanoseconds) proves by pairing, if any: the
    /// latest send time among the replies back at least `gap` (`G`) before it was sent. Keeps
    /// only the best of those replies.
    fn paired_anchor(&self, flaw: Flaw, sent_at: i64, gap: i64) -> Option<i64> {
        // The replies `k` can pair with: back at least `G` before it was sent.
        let pair_by = match flaw.is(Mutant::NoPairGap) {
            true => sent_at,
            false => sent_at - gap,
        };
        let mut replies = self.replies();
        let old_enough = replies.partition_point(|&(_, r)| r <= pair_by);
        let best = replies
            .iter()
            .take(old_enough)
            .copied()
            .max_by_key(|&(s, _)| s);
        // Every later proof finds all of these old enough too: only the best one matters.
        if let Some(best) = best {
            replies.drain(..old_enough);
            replies.push_front(best);
        }
        // The anchor is the reply's send time: its arrival at the server is no earlier.
        best.map(|(s, r)| if flaw.is(Mutant::ReceiveAnchor) { r } else { s })
    }

    /// The session was created by a connect sent at `at` (no earlier): the leader that
    /// committed its creation started its timeout after that, so `at` anchors the lease as a
    /// paired proof's send time does (the lease module's "A new session's first lease").
    pub(crate) fn began(&self, at: Instant) {
        self.anchor.fetch_max(to_nanos(at), Ordering::AcqRel);
    }

    /// Sets the anchor directly (tests of the watchdog that only need a live lease).
    #[cfg(test)]
    pub(crate) fn prove(&self, anchor: Instant) {
        self.anchor.fetch_max(to_nanos(anchor), Ordering::AcqRel);
    }

    /// The anchor, once there is one.
    #[cfg(test)]
    pub(super) fn anchor(&self) -> Option<Instant> {
        match self.anchor.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    /// The `SyncLease` mutant's rule: a `sync` (or create) reply, arriving at `at`, extends the
    /// lease from its send time. Unsound when the ensemble is partitioned; only that mutant uses
    /// it.
    pub(crate) fn synced(&self, sent: Instant, at: Instant) {
        self.anchor.fetch_max(to_nanos(sent), Ordering::AcqRel);
        self.newest_commit.fetch_max(to_nanos(at), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watchdog::lease::cell::tests::{cell, ms};
    use crate::watchdog::lease::LeasePolicy;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_committed_write_anchors_at_the_newest_reply_a_gap_before_it() {
        let policy = LeasePolicy {
            tick: Some(ms(400)),
            ..LeasePolicy::default()
        };
        let cell = cell(&policy);
        let gap = cell.gap(); // 202 ms + 200 ms
        assert_eq!(gap, ms(402));
        let t0 = Instant::now();
        cell.cold.store(false, Ordering::Release);
        // j1 sent at 0, answered at 10; j2 sent at 100, answered at 110.
        cell.replied(t0, t0 + ms(10));
        cell.replied(t0 + ms(100), t0 + ms(110));
        // k sent at 300: no reply is G before it, so nothing is proven yet.
        cell.committed(t0 + ms(300), t0 + ms(310));
        assert_eq!(cell.anchor(), None);
        assert!(cell.deadline(Duration::from_secs(60)) <= Instant::now());
        // k sent at 420: j1 (answered at 10 <= 420 - 402) qualifies, j2 does not.
        cell.committed(t0 + ms(420), t0 + ms(430));
        assert_eq!(cell.anchor(), Some(t0));
        // k sent at 720: the newest qualifying reply is the write at 300 (answered at 310).
        cell.committed(t0 + ms(720), t0 + ms(730));
        assert_eq!(cell.anchor(), Some(t0 + ms(300)));
        // Never its own send time: a write's reply alone proves the leader heard nothing.
        assert!(cell.anchor() < Some(t0 + ms(720)));
    }

    #[tokio::test(start_paused = true)]
    async fn among_old_enough_replies_the_latest_send_wins() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        // A slow request sent at 50 answered after a fast one sent at 80.
        cell.replied(t0 + ms(80), t0 + ms(90));
        cell.replied(t0 + ms(50), t0 + ms(95));
        let k = t0 + ms(95) + cell.gap();
        cell.committed(k, k + ms(5));
        assert_eq!(cell.anchor(), Some(t0 + ms(80)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_anchor_never_moves_back() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        let gap = cell.gap();
        cell.replied(t0 + ms(500), t0 + ms(510));
        cell.committed(t0 + ms(510) + gap, t0 + ms(520) + gap);
        assert_eq!(cell.anchor(), Some(t0 + ms(500)));
        // A slow write sent long ago and answered only now proves less: ignored.
        cell.committed(t0 + ms(600), t0 + ms(900) + gap);
        assert_eq!(cell.anchor(), Some(t0 + ms(500)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dense_stream_of_replies_still_leaves_old_ones_to_pair_with() {
        // 1,000 acquires in 4 s on one session (each create a reply and a commit): the
        // history stays bounded, and a write sent a gap after the first replies pairs with
        // one of them rather than finding them forgotten.
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        for i in 0..1000u64 {
            cell.replied(t0 + ms(4 * i), t0 + ms(4 * i + 2));
        }
        assert!(cell.replies().len() <= HISTORY);
        let gap = cell.gap(); // 1.21 s
        cell.committed(t0 + ms(1_300) + gap, t0 + ms(1_305) + gap);
        let anchor = cell.anchor().expect("paired with an old reply");
        assert!(anchor <= t0 + ms(1_300), "{:?}", anchor - t0);
        assert!(anchor >= t0 + ms(1_000), "{:?}", anchor - t0);
    }

    #[tokio::test(start_paused = true)]
    async fn replies_recorded_out_of_order_are_sorted_and_history_is_bounded() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        cell.replied(t0 + ms(20), t0 + ms(30));
        cell.replied(t0, t0 + ms(10));
        let order: Vec<i64> = cell.replies().iter().map(|&(_, r)| r).collect();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        for i in 0..(HISTORY as u64 * 2) {
            cell.replied(t0 + ms(i), t0 + ms(i + 1));
        }
        assert!(cell.replies().len() <= HISTORY);
        // Thinned, not truncated: the oldest reply's era is still covered.
        assert!(cell
            .replies()
            .front()
            .is_some_and(|&(s, _)| s <= to_nanos(t0 + ms(30))));
        assert_eq!(cell.newest_commit(), None, "replies are not commits");
    }
}
