//! The failover bench's tables: per fault, each implementation's failover percentiles (also
//! beyond the session timeout T), their spread, the expiry and handoff parts, zkfence ÷
//! Curator, and for pauses the old leader's stale steps and how long it took to step down.

use std::fmt::Write as _;

use zkfence_harness::stats::percentile;

use super::process::Side;
use super::trial::{Fault, Trial};
use crate::stats::Latencies;

/// The implementations, in the tables' order.
const SIDES: [Side; 2] = [Side::Zkfence, Side::Curator];

/// One implementation's trials under one fault, summarised.
#[derive(Debug)]
struct Summary {
    /// How many trials: the percentiles' sample size.
    trials: usize,
    /// The session timeout granted, the same for every trial of a run on one server.
    granted_ms: u64,
    /// From the fault to the standby's first step.
    failover: Latencies,
    /// From the fault to a third client's notice that the leader's node is gone.
    node_gone: Latencies,
    /// From that notice to the standby's first step, in ms, sorted (may be negative).
    handoff_ms: Vec<f64>,
    /// For pauses: stale steps over all trials, and the most in one.
    stale_steps: (usize, usize),
    /// For pauses: from the standby's first step to the old leader's `deposed`.
    window: Latencies,
    /// For pauses: from the old leader's SIGCONT to its `deposed`, the part of the window
    /// that is the implementation's (the rest is the bench's own reaction to the new leader).
    after_resume: Latencies,
    /// Pauses whose old leader had not reported `deposed` within 2·T of its SIGCONT.
    never_deposed: usize,
}

impl Summary {
    /// The summary of `trials` (of one implementation and fault).
    fn of(trials: &[&Trial]) -> Summary {
        let nanos = |f: &dyn Fn(&Trial) -> Option<u64>| -> Vec<u64> {
            trials.iter().filter_map(|t| f(t)).collect()
        };
        let stale: Vec<usize> = trials
            .iter()
            .filter_map(|t| t.stale.as_ref().map(|s| s.steps))
            .collect();
        Summary {
            trials: trials.len(),
            granted_ms: trials.iter().map(|t| t.granted_ms).max().unwrap_or(0),
            failover: Latencies::from_nanos(&nanos(&|t| Some(t.failover_ns))),
            node_gone: Latencies::from_nanos(&nanos(&|t| t.node_gone_ns)),
            handoff_ms: {
                let mut handoffs: Vec<f64> = trials.iter().filter_map(|t| t.handoff_ms()).collect();
                handoffs.sort_unstable_by(f64::total_cmp);
                handoffs
            },
            stale_steps: (stale.iter().sum(), stale.iter().copied().max().unwrap_or(0)),
            window: Latencies::from_nanos(&nanos(&|t| t.stale.as_ref()?.window_ns)),
            after_resume: Latencies::from_nanos(&nanos(&|t| t.stale.as_ref()?.after_resume_ns)),
            never_deposed: trials
                .iter()
                .filter(|t| t.stale.as_ref().is_some_and(|s| s.window_ns.is_none()))
                .count(),
        }
    }

    /// The failover's percentile `p` in milliseconds.
    fn failover_ms(&self, p: f64) -> Option<f64> {
        self.failover.percentile(p).map(|us| us / 1000.0)
    }

    /// The handoff's percentile `p` in milliseconds.
    fn handoff_ms(&self, p: f64) -> Option<f64> {
        percentile(&self.handoff_ms, p)
    }

    /// The failover's percentile `p` beyond T, in milliseconds.
    fn over_ms(&self, p: f64) -> Option<f64> {
        self.failover_ms(p).map(|ms| ms - self.granted_ms as f64)
    }
}

/// Milliseconds to the millisecond, `-` without a value.
fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.0} ms"))
}

/// Milliseconds to a tenth (handoffs and zkfence's stale windows are short), `-` without a
/// value.
fn ms1(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.1} ms"))
}

/// `a / b` to two decimals, `-` without both or with a zero `b`.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
        _ => "-".to_owned(),
    }
}

/// Every fault's table, for the faults that have trials.
pub(super) fn tables(trials: &[Trial]) -> String {
    let mut out = String::new();
    for fault in [Fault::Kill, Fault::Pause] {
        fault_table(&mut out, trials, fault);
    }
    out
}

/// One fault's table: a row per implementation, then zkfence ÷ Curator.
fn fault_table(out: &mut String, trials: &[Trial], fault: Fault) {
    let summaries: Vec<(Side, Summary)> = SIDES
        .iter()
        .map(|&side| {
            let of: Vec<&Trial> = trials
                .iter()
                .filter(|t| t.fault == fault && t.side == side)
                .collect();
            (side, Summary::of(&of))
        })
        .filter(|(_, s)| s.trials > 0)
        .collect();
    let Some((_, first)) = summaries.first() else {
        return;
    };
    let pause = fault == Fault::Pause;
    let _ = writeln!(
        out,
        "\n{} (T = {} ms granted; {} trials per impl):\n",
        fault.describe(),
        first.granted_ms,
        first.trials
    );
    let mut header = "| impl | failover p50 | failover p99 | min – max | p50 − T | p99 − T | leader's node gone p50 | first step after it p50 / p99 |".to_owned();
    if pause {
        header += " stale steps (all, most in a trial) | stale window p50 / p99 | deposed after SIGCONT p50 / p99 | not deposed within 2·T |";
    }
    let columns = header.matches('|').count() - 1;
    let _ = writeln!(out, "{header}\n|{}", " --- |".repeat(columns));
    for (side, s) in &summaries {
        let _ = write!(
            out,
            "| {} | {} | {} | {} – {} | {} | {} | {} | {} / {} |",
            side.name(),
            ms(s.failover_ms(0.5)),
            ms(s.failover_ms(0.99)),
            ms(s.failover_ms(0.0)),
            ms(s.failover_ms(1.0)),
            ms(s.over_ms(0.5)),
            ms(s.over_ms(0.99)),
            ms(s.node_gone.percentile(0.5).map(|us| us / 1000.0)),
            ms1(s.handoff_ms(0.5)),
            ms1(s.handoff_ms(0.99)),
        );
        if pause {
            let window = |l: &Latencies, p| l.percentile(p).map(|us| us / 1000.0);
            let _ = write!(
                out,
                " {}, {} | {} / {} | {} / {} | {} |",
                s.stale_steps.0,
                s.stale_steps.1,
                ms1(window(&s.window, 0.5)),
                ms1(window(&s.window, 0.99)),
                ms1(window(&s.after_resume, 0.5)),
                ms1(window(&s.after_resume, 0.99)),
                s.never_deposed,
            );
        }
        let _ = writeln!(out);
    }
    if let [(_, ours), (_, theirs)] = &summaries[..] {
        let _ = writeln!(
            out,
            "| zkfence ÷ Curator | {} | {} | | | | | |{}",
            ratio(ours.failover_ms(0.5), theirs.failover_ms(0.5)),
            ratio(ours.failover_ms(0.99), theirs.failover_ms(0.99)),
            if pause { " | | | |" } else { "" },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::trial::Stale;

    fn trial(side: Side, fault: Fault, failover_ms: u64, stale: Option<Stale>) -> Trial {
        Trial {
            round: 1,
            fault,
            side,
            asked_ms: 2000,
            granted_ms: 2000,
            failover_ns: failover_ms * 1_000_000,
            node_gone_ns: Some((failover_ms - 10) * 1_000_000),
            leader_epoch: 1,
            successor_epoch: 2,
            stale,
        }
    }

    #[test]
    fn a_table_per_fault_with_percentiles_beyond_t_and_the_ratio() {
        let stale = |steps, window_ms: Option<u64>| {
            Some(Stale {
                steps,
                window_ns: window_ms.map(|ms| ms * 1_000_000),
                after_resume_ns: window_ms.map(|ms| ms * 1_000_000),
            })
        };
        let trials = [
            trial(Side::Zkfence, Fault::Kill, 2100, None),
            trial(Side::Zkfence, Fault::Kill, 2300, None),
            trial(Side::Curator, Fault::Kill, 2200, None),
            trial(Side::Zkfence, Fault::Pause, 2100, stale(0, Some(5))),
            trial(Side::Curator, Fault::Pause, 2100, stale(3, Some(40))),
            trial(Side::Curator, Fault::Pause, 2100, stale(2, None)),
        ];
        let out = tables(&trials);
        assert!(
            out.contains("| zkfence | 2100 ms | 2300 ms | 2100 ms – 2300 ms | 100 ms | 300 ms | 2090 ms | 10.0 ms / 10.0 ms |"),
            "{out}"
        );
        assert!(
            out.contains("| zkfence ÷ Curator | 0.95 | 1.05 | | | | | |\n"),
            "{out}"
        );
        assert!(
            out.contains(" 0, 0 | 5.0 ms / 5.0 ms | 5.0 ms / 5.0 ms | 0 |"),
            "{out}"
        );
        assert!(
            out.contains(" 5, 3 | 40.0 ms / 40.0 ms | 40.0 ms / 40.0 ms | 1 |"),
            "{out}"
        );
        assert_eq!(out.matches("T = 2000 ms granted").count(), 2, "{out}");
    }

    #[test]
    fn no_trials_no_table() {
        assert_eq!(tables(&[]), "");
    }
}
