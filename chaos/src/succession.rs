//! The failover bound of an election: after a leader is lost, a new leader within T plus the
//! election time E. Here each lost term is paired with its successor ([`successions`]); the
//! checker fails the run on a gap past the bound, the figures report the gaps per fault kind.
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
//! - A new leader is **possible again** from the loss, or, when no quorum could commit at some
//!   time between the loss and the successor (the whole ensemble down, the ZooKeeper leader
//!   killed, a partition), from the first write the availability probe saw commit after that
//!   outage ([`crate::probe`]): recovering servers give every session a fresh timeout, so an
//!   outage that begins just after a leader's last check still delays its successor by its
//!   whole length plus T. The gap runs from then to the successor's grant.
//! - The **bound** is the lost leader's negotiated session timeout T plus E: the election
//!   time, `2 · tickTime + 1 s` (the server expires sessions in tick-sized buckets, a tick
//!   late at most; the closing commit and the successor's notification; a candidate's new
//!   session after the outage expired its old one).

use crate::event::{Ev, Event};
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
    /// When a new leader was possible again (the loss, or the first commit after it).
    pub possible: i64,
    /// The successor: its worker, epoch and grant.
    pub next_w: u32,
    pub next_token: u64,
    pub next_at: i64,
    /// From `possible` to the successor's grant, and the bound T + E (ms).
    pub gap_ms: f64,
    pub bound_ms: f64,
    /// The leader resigned (its term ended with its release): a handoff, not a loss.
    pub resigned: bool,
}

/// The longest pause between the probe's quick commits that still counts as a quorum
/// committing all along.
const CONTINUOUS_NS: i64 = 150_000_000;

/// When a leader was possible again after `loss`, for a successor granted at `next`: the end
/// of the last outage (a pause of more than 150 ms between the probe's quick commits) that
/// ended after the loss and began before the successor; the loss itself if the probe saw
/// commits go on from the loss to the successor. `None` if no commit came after the loss.
/// Without probe data, the loss.
///
/// An outage that begins after the loss still moves the start: the servers that recover from
/// it give every session a fresh timeout when their new leader is established, so a dead
/// leader's session lasts T from the recovery, not from its last check.
fn possible_after(available: &[i64], loss: i64, next: i64) -> Option<i64> {
    if available.is_empty() {
        return Some(loss);
    }
    let first = available.partition_point(|&t| t < loss);
    available.get(first)?;
    let after = available.partition_point(|&t| t <= next);
    let from = first.max(1);
    let recovered = (from..after.max(from))
        .rev()
        .find(|&i| available[i] - available[i - 1] > CONTINUOUS_NS)
        .map(|i| available[i]);
    let began_in_gap = first > 0 && available[first] - available[first - 1] > CONTINUOUS_NS;
    Some(match recovered {
        Some(end) => end,
        None if first == 0 || began_in_gap => available[first],
        None => loss,
    })
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
        let Some(possible) = possible_after(&tl.input.available, loss, next.t) else {
            continue;
        };
        found.push(Succession {
            w: grant.w,
            token,
            loss,
            possible,
            next_w: next.w,
            next_token: next.token().unwrap_or(0),
            next_at: next.t,
            gap_ms: ((next.t - possible).max(0) as f64) / 1e6,
            bound_ms: (t_ms + election_ms) as f64,
            resigned: resigned.contains(&(grant.pid, token)),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_possible_at_the_loss_while_commits_go_on_else_after_the_last_outage() {
        let ms = |x: i64| x * 1_000_000;
        let available = [ms(0), ms(50), ms(100), ms(3000), ms(3050)];
        // Commits go on from the loss to the successor.
        assert_eq!(possible_after(&available, ms(60), ms(90)), Some(ms(60)));
        // The loss falls in the outage: from its end.
        assert_eq!(
            possible_after(&available, ms(500), ms(3100)),
            Some(ms(3000))
        );
        // The outage begins after the loss, before the successor: from its end too.
        assert_eq!(possible_after(&available, ms(70), ms(3100)), Some(ms(3000)));
        assert_eq!(possible_after(&available, ms(4000), ms(5000)), None);
        assert_eq!(possible_after(&[], ms(500), ms(600)), Some(ms(500)));
    }
}
