//! The driver's proofs of the lease (the argument is the lease module's): the grants waiting
//! for one, when a probe goes (the regular one, a pair gap after the newest commit; the cold
//! phase's extra ones), what it checks, and what its replies prove.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::clock;
use super::core::{Answer, Event};
use super::driver::{Driver, Prover};
use super::probe::{abandon_after, probe_session, Check, ProbeReply};
use crate::metrics::{LEASE_PROBES_TOTAL, LEASE_REMAINING_SECONDS};

/// The most probes in flight at once: one, but for the cold phase's extra probes.
const MOST_IN_FLIGHT: usize = 4;

impl Driver {
    /// Takes a grant (or a waiter's warm-up) that waits for the lease: told at once if the
    /// lease vouches for a grant (`LeaseCell::vouches_for`, the queue's rule); else probes
    /// start now, and, if the lease has lapsed, as a cold start when nothing else kept them
    /// going (no proof was sent while the session only waited, so the newest replies are old,
    /// and the first commits lean on the client's keepalive, as after any idle spell: see the
    /// lease module; the lease model's `grant` does the same).
    pub(super) fn prove(&mut self, prover: Prover) {
        let lease = &self.core.lease;
        let now = clock::now();
        // A lease about to lapse is proved again: told at once, a grant would hold with less
        // than the rule's spare, and a waiter's warm-up sent then would prove nothing.
        if lease.vouches_for(prover.budget, now) {
            let _ = prover.done.send(());
            return;
        }
        if !self.wants_proofs() && lease.deadline(prover.budget) <= now {
            lease.restart(now);
        }
        self.provers.push(prover);
        self.probing.next = now;
    }

    /// Tells the grants whose lease holds now; forgets those whose acquire gave up.
    pub(super) fn settle_provers(&mut self) {
        let now = clock::now();
        let lease = self.core.lease.clone();
        for prover in std::mem::take(&mut self.provers) {
            if prover.done.is_closed() {
                continue;
            }
            match lease.deadline(prover.budget) > now {
                true => drop(prover.done.send(())),
                false => self.provers.push(prover),
            }
        }
    }

    /// Whether the session needs proofs: it holds a lock, an acquire is creating its node (a
    /// slow commit there must not leave the first lease to lapse: the cold phase's extra
    /// probes), or a grant waits for one. A session that only waits in queues sends none (the
    /// lease module says why that is enough).
    pub(super) fn wants_proofs(&self) -> bool {
        self.core.guards() > 0
            || self.provers.iter().any(|p| !p.done.is_closed())
            || self.watch.upgrade().is_some_and(|w| w.creating())
    }

    /// When to wake up to send a probe: the regular one when none is in flight, or a cold one
    /// (see [`Self::cold_probe_due`]); never without a client.
    pub(super) fn probe_at(&self) -> Option<Instant> {
        self.client.as_ref()?;
        if !self.wants_proofs() {
            return None;
        }
        let in_flight = self.probing.in_flight.len();
        let regular = (in_flight == 0).then_some(self.probing.next);
        let cold = (in_flight < MOST_IN_FLIGHT)
            .then(|| self.cold_probe_due())
            .flatten();
        regular.into_iter().chain(cold).min()
    }

    /// Sends the next probe if one can prove something now, else moves its time on (a reply
    /// that came in since, an acquire's create, pairs with nothing until a gap has passed).
    pub(super) fn send_probe(&mut self) {
        // Its time was set while the session wanted proofs; it may not any more (an acquire
        // that was creating now waits, a hold ended).
        if !self.wants_proofs() {
            return;
        }
        let now = clock::now();
        let cold = self.cold_probe_due().is_some_and(|at| at <= now)
            && self.probing.in_flight.len() < MOST_IN_FLIGHT;
        if !cold {
            if !self.probing.in_flight.is_empty() {
                return;
            }
            let due = self.probe_due(self.probing.last_sent);
            if due > now {
                self.probing.next = due;
                return;
            }
        }
        let Some(client) = &self.client else {
            return;
        };
        let target = self.probe_targets(self.probing.turn);
        let sync = self.core.probes_by_sync();
        let probe = abandon_after(self.timeout, probe_session(client.clone(), target, sync));
        self.probing.in_flight.push(Box::pin(probe));
        let period = self.core.lease.probe_period();
        (self.nodes).read_if_due(&self.core, client, now, period, self.timeout);
        self.probing.last_sent = Some(now);
        self.probing.turn = self.probing.turn.wrapping_add(1);
    }

    /// When the next regular probe is due: once it can prove something (a pair gap after the
    /// newest reply) and a probe period after the last one (every `T/3` under the
    /// `SyncLease` mutant's rule).
    fn probe_due(&self, last_sent: Option<Instant>) -> Instant {
        let lease = &self.core.lease;
        // What has never happened is due already: a time in the past, never "now", which
        // `send_probe` (comparing with the instant it read first) would find still ahead.
        let long_ago = || {
            clock::now()
                .checked_sub(self.timeout)
                .unwrap_or_else(clock::now)
        };
        if lease.is_legacy() {
            return last_sent.map_or_else(long_ago, |s| s + self.timeout / 3);
        }
        // A probe pairs with the newest committed write once a gap has passed (replies that
        // are refusals do not move this: a lock retrying an error must not starve the probes).
        let pairs = lease
            .newest_commit()
            .map_or_else(long_ago, |r| r + lease.gap());
        last_sent.map_or(pairs, |s| pairs.max(s + lease.probe_period()))
    }

    /// When an extra probe should go in the cold phase, if one should: while no commit has
    /// come back since the start, one every cold period; after that, once the regular probe
    /// could no longer be back before the lease lapses. Each cold commit leans on the client's
    /// keepalive (see the lease module), so a slow create (an fsync stall) followed by a slow
    /// first probe cannot leave the first lease to lapse.
    fn cold_probe_due(&self) -> Option<Instant> {
        let lease = &self.core.lease;
        let since = lease.cold_since()?;
        if lease.is_legacy() || !self.wants_proofs() {
            return None;
        }
        let period = lease
            .shortest_budget()
            .saturating_sub(lease.lean())
            .div_f64(6.0)
            .max(Duration::from_millis(10));
        // None can lean before the ticker has seen the process run a whole lean: until then
        // pairing is the only proof, and the regular probe brings it.
        let leans_from = lease.leans_from()?;
        let after_last =
            (self.probing.last_sent.map_or(since, |s| s.max(since)) + period).max(leans_from);
        let Some(reply) = lease.newest_commit().filter(|&r| r >= since) else {
            return Some(after_last);
        };
        let slowest = lease.slowest_cold_commit();
        let regular_back = self.probe_due(self.probing.last_sent).max(reply) + slowest;
        let deadline = lease.deadline(lease.shortest_budget());
        let margin = period;
        (regular_back + margin >= deadline).then_some(after_last)
    }

    /// What the next probe checks: every node in jeopardy, else a held node (in turn), else
    /// the newest lock path.
    fn probe_targets(&self, turn: usize) -> Vec<Check> {
        let targets = self.core.probe_targets(turn);
        // A grant waiting for a proof has its own node checked: the proof shows it still there.
        // One whose acquire gave up (a waiter that withdrew its node) is left out.
        let granted = (self.provers.iter().filter(|p| !p.done.is_closed())).map(|p| Check {
            guard: None,
            path: p.node.clone(),
        });
        let mut checks: Vec<Check> = (targets.into_iter())
            .map(|(id, path)| Check {
                guard: Some(id),
                path,
            })
            .chain(granted)
            .collect();
        if checks.is_empty() {
            let path = (self.watch.upgrade()).map_or_else(|| Arc::from("/"), |w| w.probe_path());
            checks.push(Check { guard: None, path });
        }
        checks
    }

    /// Records what a probe's chunks proved, and when the next probe goes.
    pub(super) fn on_probe(&mut self, replies: Vec<ProbeReply>) {
        let retry = (replies.into_iter())
            .filter_map(|reply| self.record_probe(reply))
            .min();
        self.settle_provers();
        self.probing.next = match retry {
            Some(retry) => retry,
            None => self.probe_due(self.probing.last_sent),
        };
    }

    /// Records what a probe proved; returns when to try again if nothing came back.
    fn record_probe(&mut self, reply: ProbeReply) -> Option<Instant> {
        let lease = self.core.lease.clone();
        let now = clock::now();
        if let (Answer::Committed, Some(client)) = (reply.answer, &self.client) {
            self.core
                .apply(Event::SessionId(client.session_id().0), now);
        }
        let guards: Vec<Option<u64>> = reply.checks.iter().map(|c| c.guard).collect();
        let missing = self.core.probed(reply.answer, reply.sent, &guards, now);
        let outcome = match reply.answer {
            Answer::Committed => {
                metrics::histogram!(LEASE_REMAINING_SECONDS)
                    .record(lease.remaining(now).as_secs_f64());
                "committed"
            }
            Answer::Synced => "synced",
            Answer::Refused(_) => {
                // The first missing node's hold ended; the others are probed again at once,
                // without it (the failed `multi` proved nothing about them).
                if let Some(check) = missing.and_then(|i| reply.checks.get(i)) {
                    // A granted node gone before its proof: its acquire hears of it.
                    if check.guard.is_none() {
                        self.provers.retain(|p| p.node != check.path);
                    }
                    metrics::counter!(LEASE_PROBES_TOTAL, "outcome" => "refused").increment(1);
                    return Some(now);
                }
                "refused"
            }
            Answer::None => "failed",
        };
        metrics::counter!(LEASE_PROBES_TOTAL, "outcome" => outcome).increment(1);
        // Nothing came back (the connection broke): try again a gap later, or at once when
        // the client reconnects (`on_state`).
        (reply.answer == Answer::None).then(|| now + lease.gap().max(Duration::from_millis(10)))
    }
}
