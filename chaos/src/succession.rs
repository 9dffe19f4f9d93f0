//! The failover bound of an election: after a leader is lost, a new leader within T plus the
//! election time E. Here each lost term is paired with its successor ([`successions`]); the
//! checker fails the run on a gap the run proves is past the bound, the figures report the
//! gaps per fault kind and the successions the run cannot judge.
//!
//! The definitions, on the shared clock:
//! - A term is a valid grant of the election (the leader's check right after `campaign`
//!   returned passed). It is **lost** at its last passing check (a grant, an invoke's check, a
//!   polled check): the last moment it acted as the leader. A killed or paused leader's
//!   session goes on until the server expires it, T after it last heard from it, which is no
//!   earlier than that check (a leader checks before every write, a few tens of ms apart).
//!   A term that ended with its leader's release was resigned, not lost: its successor's
//!   gap is a handoff, held to the same bound and reported apart.
//! - Its **successor** is the first valid grant with a greater epoch after that check. A term
//!   that a newer grant came before that check is not measured: it was replaced, not lost
//!   (a lease overlap, which the lease invariant fails; or an operator deleted its node).
//! - A new leader is **possible again** from the loss, or, when the ensemble could not commit
//!   at some time between the loss and the successor, from the end of that outage: a new
//!   ZooKeeper leader gives every session a fresh timeout, so an outage that begins just after
//!   a leader's last check delays its successor by its whole length plus T.
//! - The **bound** is the lost leader's negotiated session timeout T plus E: the election
//!   time, `2 · tickTime + 1 s` (the server expires sessions in tick-sized buckets, a tick
//!   late at most; the closing commit and the successor's notification; a candidate's new
//!   session after the outage expired its old one).
//!
//! When an outage ended is known only within bounds ([`possible_again`]), so the gap is: at
//! least its distance from the latest moment the outage can have ended, at most its distance
//! from the earliest. A succession is **over** the bound when even the least gap passes it,
//! **within** when even the greatest does not, and otherwise the run **cannot tell**: it says
//! so in the figures and does not fail. Which of two processes reconnects first after an
//! outage (the probe or a candidate) no longer decides a verdict.

use crate::event::{Ev, Event};
use crate::outage::Outage;
use crate::probe::Commit;
use crate::timeline::{holds, Timeline};
use std::collections::{HashMap, HashSet};

/// A lost term and its successor.
#[derive(Debug, Clone)]
pub(crate) struct Succession {
    /// The lost term's worker and epoch.
    pub w: u32,
    pub token: u64,
    /// Its last passing check.
    pub loss: i64,
    /// When a new leader was possible again: no earlier than `.0`, no later than `.1` (both the
    /// loss when nothing stopped the ensemble from the loss to the successor).
    pub possible: (i64, i64),
    /// The successor: its worker, epoch and grant.
    pub next_w: u32,
    pub next_token: u64,
    pub next_at: i64,
    /// From `possible` to the successor's grant (ms): at least `.0` (from `possible.1`), at
    /// most `.1` (from `possible.0`); and the bound T + E.
    pub gap_ms: (f64, f64),
    pub bound_ms: f64,
    /// The leader resigned (its term ended with its release): a handoff, not a loss.
    pub resigned: bool,
}

/// A succession against its bound, as far as the run can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judged {
    /// Even the greatest gap the evidence allows is within the bound.
    Within,
    /// Even the least gap the evidence allows is past it: a violation.
    Over,
    /// The bound falls between the least and the greatest gap.
    CannotTell,
}

impl Succession {
    /// This succession against its bound.
    pub(crate) fn judged(&self) -> Judged {
        if self.gap_ms.0 > self.bound_ms {
            Judged::Over
        } else if self.gap_ms.1 <= self.bound_ms {
            Judged::Within
        } else {
            Judged::CannotTell
        }
    }
}

/// The longest stretch between two of the probe's quick commits (from the first's sending to
/// the second's) that still counts as a quorum committing all along.
const CONTINUOUS_NS: i64 = 150_000_000;

/// A stretch without the probe's quick commits: from the sending of the last commit before it
/// to the answer of the first after it, and whether a new leader committed after it (a new
/// epoch); unknown at the ends of the probe's record.
#[derive(Debug, Clone, Copy)]
struct Stretch {
    from: i64,
    to: i64,
    new_leader: Option<bool>,
}

/// The probe's stretches without a commit, in order (`available` in the order sent).
fn stretches(available: &[Commit]) -> Vec<Stretch> {
    let (Some(first), Some(last)) = (available.first(), available.last()) else {
        return Vec::new();
    };
    let open = |from, to| Stretch {
        from,
        to,
        new_leader: None,
    };
    let inner = available.windows(2).filter_map(|pair| {
        let (a, b) = (pair[0], pair[1]);
        (b.sent - a.sent > CONTINUOUS_NS).then_some(Stretch {
            from: a.sent,
            to: b.answered,
            new_leader: Some(b.epoch != a.epoch),
        })
    });
    [open(i64::MIN, first.answered)]
        .into_iter()
        .chain(inner)
        .chain([open(last.sent, i64::MAX)])
        .collect()
}

/// When a new leader was possible again after `loss`, for a successor granted at `next`:
/// `(earliest, latest)`, on the evidence of the nemesis's `outages` and the probe's quick
/// commits (`available`, in the order sent).
///
/// What may have come between the loss and the successor: the nemesis's outages (each over by
/// its `back_by`; without one, by the successor's grant, which needs a commit), and the
/// probe's stretches without a commit that no outage of the nemesis's explains (a stretch
/// that overlaps one is the probe's own reconnect after it: the nemesis saw a leader serve).
/// A stretch after which the same leader committed again was a stall, not an election: it
/// delays a dead leader's expiry by its length at most. A stretch after which a new leader
/// committed had an election in it, over by the stretch's end.
///
/// - **Latest**: the end of the last outage or election that may have come between them
///   (the loss if none), plus the stalls after it.
/// - **Earliest**: the last moment the nemesis proves nobody could commit (`back_after`) of
///   an outage between them, or the start of a stretch between them after which a new leader
///   committed (the new leader began after it); the loss if neither.
fn possible_again(available: &[Commit], outages: &[Outage], loss: i64, next: i64) -> (i64, i64) {
    let between = |from: i64, to: i64| from < next && to > loss;
    let ends = |o: &Outage| o.back_by.unwrap_or(i64::MAX);
    let stretches = stretches(available);
    let explained = |s: &Stretch| outages.iter().any(|o| s.from < ends(o) && o.down < s.to);
    let unexplained: Vec<&Stretch> = (stretches.iter())
        .filter(|s| between(s.from, s.to) && !explained(s))
        .collect();
    let outages = || outages.iter().filter(|o| between(o.down, ends(o)));
    let base = (outages().map(ends))
        .chain(
            (unexplained.iter())
                .filter(|s| s.new_leader != Some(false))
                .map(|s| s.to),
        )
        .map(|to| to.min(next))
        .fold(loss, i64::max);
    let stalled: i64 = (unexplained.iter())
        .filter(|s| s.new_leader == Some(false))
        .map(|s| (s.to.min(next) - s.from.max(base)).max(0))
        .sum();
    let latest = (base + stalled).min(next).max(loss);
    let elected = (stretches.iter())
        .filter(|s| s.new_leader == Some(true) && between(s.from, s.to))
        .map(|s| s.from);
    let earliest = (outages().map(|o| o.back_after))
        .chain(elected)
        .fold(loss, i64::max)
        .min(latest);
    (earliest, latest)
}

/// Each term whose leader was lost (see the module's definitions) with its successor, for an
/// election scenario with election time `election_ms`.
pub(crate) fn successions(tl: &Timeline<'_>, election_ms: u64) -> Vec<Succession> {
    let resigned: HashSet<(u32, u64)> = (holds(tl).into_iter())
        .filter(|h| h.how == "release")
        .map(|h| (h.pid, h.token))
        .collect();
    let mut last_pass: HashMap<(u32, u64), i64> = HashMap::new();
    let mut timeout_of: HashMap<u32, u64> = HashMap::new();
    let mut terms = Vec::new();
    for e in tl.events {
        match e.ev {
            Ev::Start { session_ms, .. } => {
                timeout_of.insert(e.pid, session_ms);
            }
            Ev::Session { timeout_ms, .. } => {
                timeout_of.insert(e.pid, timeout_ms);
            }
            _ => {}
        }
        if let (Some(_), Some(token)) = (e.passed_check(), e.token()) {
            last_pass.insert((e.pid, token), e.t);
        }
        if e.valid_grant() {
            let t_ms = timeout_of.get(&e.pid).copied();
            terms.push((e, t_ms.unwrap_or(tl.input.session_ms)));
        }
    }
    let outages: Vec<Outage> = tl.input.faults.iter().filter_map(|f| f.outage).collect();
    let mut found = Vec::new();
    for (grant, t_ms) in terms {
        let token = grant.token().unwrap_or(0);
        let loss = last_pass
            .get(&(grant.pid, token))
            .copied()
            .unwrap_or(grant.t);
        let newer = |g: &&&Event| g.token() > Some(token);
        if tl.grants.iter().filter(newer).any(|g| g.t <= loss) {
            continue;
        }
        let Some(next) = tl.grants.iter().filter(newer).find(|g| g.t > loss) else {
            continue;
        };
        let possible = possible_again(&tl.input.available, &outages, loss, next.t);
        let gap = |from: i64| ((next.t - from).max(0) as f64) / 1e6;
        found.push(Succession {
            w: grant.w,
            token,
            loss,
            possible,
            next_w: next.w,
            next_token: next.token().unwrap_or(0),
            next_at: next.t,
            gap_ms: (gap(possible.1), gap(possible.0)),
            bound_ms: (t_ms + election_ms) as f64,
            resigned: resigned.contains(&(grant.pid, token)),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// The probe's quick commits every 20 ms from `from` to `to` (ms), each answered in 2 ms,
    /// under the leader of `epoch`.
    fn commits(from: i64, to: i64, epoch: u32) -> Vec<Commit> {
        (from / 20..to / 20)
            .map(|i| Commit {
                sent: i * 20 * MS,
                answered: (i * 20 + 2) * MS,
                epoch,
            })
            .collect()
    }

    /// An outage from 10 s; the nemesis proves nobody committed at 13.9 s and saw a leader
    /// serve at 14 s. The probe commits until 10 s and again from 14.5 s (its own reconnect).
    fn outage() -> (Vec<Commit>, Vec<Outage>) {
        let mut available = commits(0, 10_000, 1);
        available.extend(commits(14_500, 20_000, 2));
        let outage = Outage {
            down: 10_000 * MS,
            back_after: 13_900 * MS,
            back_by: Some(14_000 * MS),
        };
        (available, vec![outage])
    }

    #[test]
    fn a_loss_just_before_at_or_during_an_outage_counts_from_its_end() {
        let (available, outages) = outage();
        let next = 16_000 * MS;
        let end = (13_900 * MS, 14_000 * MS);
        // The last check 30 ms before the kill, with the probe committing in between.
        assert_eq!(possible_again(&available, &outages, 9_970 * MS, next), end);
        assert_eq!(possible_again(&available, &outages, 10_000 * MS, next), end);
        assert_eq!(possible_again(&available, &outages, 12_000 * MS, next), end);
        // A successor granted between the nemesis's last round without a leader and its first
        // with one: the outage ended by the grant.
        let early = 13_950 * MS;
        assert_eq!(
            possible_again(&available, &outages, 9_970 * MS, early),
            (13_900 * MS, early)
        );
    }

    #[test]
    fn a_loss_just_after_an_outage_counts_from_the_loss_though_the_probe_is_still_silent() {
        let (available, outages) = outage();
        let next = 16_000 * MS;
        let loss = 14_050 * MS;
        assert_eq!(
            possible_again(&available, &outages, loss, next),
            (loss, loss)
        );
        let loss = 15_000 * MS;
        assert_eq!(
            possible_again(&available, &outages, loss, next),
            (loss, loss)
        );
    }

    #[test]
    fn commits_going_on_from_the_loss_to_the_successor_count_from_the_loss() {
        let available = commits(0, 20_000, 1);
        let loss = 3_000 * MS;
        assert_eq!(
            possible_again(&available, &[], loss, 6_000 * MS),
            (loss, loss)
        );
    }

    #[test]
    fn a_silent_probe_without_the_nemesis_s_record_bounds_the_election_in_it() {
        // The probe silent from 10 s to 14.5 s, then committing under a new leader, and no
        // outage recorded: an election came in between, begun after the last commit before it
        // and over by the first after.
        let mut available = commits(0, 10_000, 1);
        available.extend(commits(14_500, 20_000, 2));
        let loss = 9_970 * MS;
        assert_eq!(
            possible_again(&available, &[], loss, 16_000 * MS),
            (9_980 * MS, 14_502 * MS)
        );
        // Silent past the successor's grant: the grant itself needed a commit.
        assert_eq!(
            possible_again(&available, &[], loss, 14_100 * MS),
            (9_980 * MS, 14_100 * MS)
        );
        // An outage whose watch never saw a leader: proven until its last round, ended by the
        // grant at the latest.
        let unseen = Outage {
            down: 10_000 * MS,
            back_after: 12_000 * MS,
            back_by: None,
        };
        assert_eq!(
            possible_again(&available, &[unseen], loss, 16_000 * MS),
            (12_000 * MS, 16_000 * MS)
        );
    }

    #[test]
    fn a_stall_under_the_same_leader_moves_the_latest_by_its_length_only() {
        // No commit for 400 ms at 3 s, the same leader after it (a stall: of the leader, or of
        // the probe): a dead leader's expiry is late by 400 ms at most.
        let mut available = commits(0, 3_000, 1);
        available.extend(commits(3_400, 20_000, 1));
        let loss = 1_000 * MS;
        let (earliest, latest) = possible_again(&available, &[], loss, 8_000 * MS);
        assert_eq!(earliest, loss);
        assert_eq!(latest, loss + 422 * MS);
    }

    #[test]
    fn a_gap_is_over_within_or_not_to_be_judged_by_its_range() {
        let at = |least: f64, most: f64| Succession {
            w: 0,
            token: 1,
            loss: 0,
            possible: (0, 0),
            next_w: 1,
            next_token: 2,
            next_at: 0,
            gap_ms: (least, most),
            bound_ms: 3400.0,
            resigned: false,
        };
        assert_eq!(at(3401.0, 6000.0).judged(), Judged::Over);
        assert_eq!(at(2000.0, 3400.0).judged(), Judged::Within);
        assert_eq!(at(2000.0, 6143.0).judged(), Judged::CannotTell);
    }
}
