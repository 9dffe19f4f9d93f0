//! The verdict: what each scenario found ([`ScenarioResult`], from the controller), whether a
//! run passes (every scenario without a mutant holds every invariant and makes progress after
//! its heal, smoke injected enough faults, every mutant failed), its `report.json`, and the
//! `RESULT:` line.

use crate::checker::{self, Violation};
use crate::clock;
use crate::cluster::Mutant;
use crate::fault::{FAILOVER_TARGET_KINDS, PARTITION_KINDS, STORE_KINDS};
use crate::mode::Mode;
use crate::report;
use serde_json::json;
use std::path::Path;

/// What one scenario found: the controller's, for the verdict.
pub(crate) struct ScenarioResult {
    pub name: String,
    pub mutant: Mutant,
    pub violations: Vec<Violation>,
    pub figures: serde_json::Value,
    pub faults: serde_json::Value,
}

/// The run's totals over its scenarios without a mutant.
struct Totals {
    faults: u64,
    pauses: u64,
    partitions: u64,
    /// Faults of a scenario's own store.
    store_faults: u64,
    /// Writes whose outcome the worker could not know, and those of them the store has.
    in_doubt: u64,
    in_doubt_committed: u64,
    increments: u64,
    overlaps: u64,
}

impl Totals {
    fn of(results: &[ScenarioResult]) -> Totals {
        let plain = || results.iter().filter(|r| r.mutant == Mutant::None);
        Totals {
            faults: plain().map(|r| count(r, "faults")).sum(),
            pauses: plain()
                .map(|r| count(r, "holder_pauses_past_timeout"))
                .sum(),
            partitions: plain().map(|r| faults_of(r, &PARTITION_KINDS)).sum(),
            store_faults: plain().map(|r| faults_of(r, &STORE_KINDS)).sum(),
            in_doubt: plain()
                .map(|r| r.figures["writes_in_doubt"]["count"].as_u64().unwrap_or(0))
                .sum(),
            in_doubt_committed: plain()
                .map(|r| {
                    r.figures["writes_in_doubt"]["committed"]
                        .as_u64()
                        .unwrap_or(0)
                })
                .sum(),
            increments: plain().map(|r| count(r, "increments_applied")).sum(),
            overlaps: plain()
                .map(|r| r.figures["lease_overlaps"]["count"].as_u64().unwrap_or(0))
                .sum(),
        }
    }
}

/// A figure that is a count.
fn count(r: &ScenarioResult, key: &str) -> u64 {
    r.figures[key].as_u64().unwrap_or(0)
}

/// How many of the faults a scenario injected are of `kinds` (the partitions inside the
/// ensemble, the store's own faults).
fn faults_of(r: &ScenarioResult, kinds: &[&str]) -> u64 {
    r.faults.as_array().map_or(0, |f| {
        let of = |f: &&serde_json::Value| f["kind"].as_str().is_some_and(|k| kinds.contains(&k));
        f.iter().filter(of).count() as u64
    })
}

/// Whether the run passes: every scenario without a mutant holds every invariant and makes
/// progress after its heal; every mutant fails. Prints the report and the RESULT line.
pub(crate) fn verdict(
    mode: &Mode,
    seed: u64,
    dir: &Path,
    started: i64,
    results: &[ScenarioResult],
) -> Result<bool, String> {
    let totals = Totals::of(results);
    let mut reasons = scenario_failures(results);
    if let Mode::Smoke(args) = mode {
        reasons.extend(smoke_shortfalls(&results[0], &totals));
        if args.no_mutants {
            reasons.push("mutants skipped".into());
        }
    }
    if let Mode::Failover(_) = mode {
        reasons.extend(failover_target(results));
    }
    println!();
    let mutants: Vec<&ScenarioResult> = results
        .iter()
        .filter(|r| r.mutant != Mutant::None)
        .collect();
    reasons.extend(mutants.iter().filter_map(|r| mutant_passed(r)));
    let summary = summary(results, &totals, &mutants, &reasons, started);
    let pass = reasons.is_empty();
    write_report(mode, seed, dir, pass, &reasons, results);
    println!(
        "report: {}  pictures: {}/<scenario>/timeline.svg",
        dir.join("report.json").display(),
        dir.display()
    );
    if pass {
        println!("RESULT: PASS {summary}");
    } else {
        println!("RESULT: FAIL {}; {summary}", reasons.join("; "));
    }
    Ok(pass)
}

/// Scenarios without a mutant that broke an invariant or made no progress after the heal.
fn scenario_failures(results: &[ScenarioResult]) -> Vec<String> {
    let mut reasons = Vec::new();
    for r in results.iter().filter(|r| r.mutant == Mutant::None) {
        if !r.violations.is_empty() {
            reasons.push(format!(
                "{} invariant violation(s) in {}",
                r.violations.len(),
                r.name
            ));
        }
        if r.figures["liveness_after_heal"]["increments"]
            .as_u64()
            .unwrap_or(0)
            == 0
        {
            reasons.push(format!("no progress after the final heal in {}", r.name));
        }
    }
    reasons
}

/// Smoke needs at least 20 faults with 5 holder pauses past T in main, and 4 partitions
/// inside the ensemble in all.
fn smoke_shortfalls(main: &ScenarioResult, totals: &Totals) -> Vec<String> {
    let mut reasons = Vec::new();
    let (faults, main_pauses) = (
        count(main, "faults"),
        count(main, "holder_pauses_past_timeout"),
    );
    if faults < 20 || main_pauses < 5 {
        reasons.push(format!(
            "only {faults} faults / {main_pauses} holder pauses past T were injected in main (need 20 / 5)"
        ));
    }
    if totals.partitions < 4 {
        reasons.push(format!(
            "only {} partitions inside the ensemble were injected (need 4)",
            totals.partitions
        ));
    }
    reasons
}

/// Prints the failover table; the reason the run fails if the target is missed: with a grace
/// of T, a leader failover (killed or silent) or a rolling restart costs no needless cancel.
/// (Overlaps and stale writes accepted are invariants: they fail the run already.)
fn failover_target(results: &[ScenarioResult]) -> Option<String> {
    let scenarios: Vec<(&str, &serde_json::Value)> = results
        .iter()
        .map(|r| (r.name.as_str(), &r.figures["per_fault_kind"]))
        .collect();
    println!();
    println!("failover: per fault kind and scenario");
    print!("{}", report::failover_table(&scenarios));
    let (_, grace) = scenarios
        .iter()
        .find(|(name, _)| *name == "failover-grace")?;
    let missed: Vec<String> = FAILOVER_TARGET_KINDS
        .iter()
        .map(|k| (k, grace[k]["needless_cancels"].as_u64().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    (!missed.is_empty()).then(|| {
        format!(
            "target missed: needless cancels with a grace of T ({})",
            missed.join(", ")
        )
    })
}

/// The invariant a mutant attacks, which must catch it itself: the lease mutants
/// (sync-lease, resume-without-proof) the lease invariant, a lock-delay the election's failover
/// bound, a sequence for an epoch the grant order. `None`: any violation will do (fencing-off
/// and watchdog-off break the store's or the watchdog's invariants, whichever fires).
fn attacked(mutant: Mutant) -> Option<&'static str> {
    match mutant {
        Mutant::SyncLease | Mutant::ResumeWithoutProof => Some(checker::LEASE_INVARIANT),
        Mutant::LockDelay => Some(checker::FAILOVER_INVARIANT),
        Mutant::EpochSequence => Some(checker::GRANT_ORDER_INVARIANT),
        Mutant::InDoubtAsFailed => Some(checker::FAILED_WRITE_INVARIANT),
        Mutant::None | Mutant::FencingOff | Mutant::WatchdogOff => None,
    }
}

/// Prints how a mutant fared; the reason the run fails if it passed the checker, or if the
/// invariant it attacks ([`attacked`]) did not catch it.
fn mutant_passed(r: &ScenarioResult) -> Option<String> {
    // Its scenario's name says which workers it flaws: `mutant-election-fencing-off`.
    let name = r.name.strip_prefix("mutant-").unwrap_or(&r.name);
    let caught = match attacked(r.mutant) {
        Some(invariant) => r.violations.iter().any(|v| v.invariant == invariant),
        None => !r.violations.is_empty(),
    };
    if !caught {
        println!("mutant {name}: PASSED the checker, which it must not");
        return Some(format!("mutant {name} passed the checker"));
    }
    let kinds: std::collections::BTreeSet<&str> =
        r.violations.iter().map(|v| v.invariant).collect();
    println!(
        "mutant {name}: FAILED as required ({} violations: {})",
        r.violations.len(),
        kinds.into_iter().collect::<Vec<_>>().join("; ")
    );
    None
}

/// The RESULT line's figures (stale writes and double holders from the first scenario, main
/// in smoke and long runs), with the holds lost in each failover scenario.
fn summary(
    results: &[ScenarioResult],
    totals: &Totals,
    mutants: &[&ScenarioResult],
    reasons: &[String],
    started: i64,
) -> String {
    let main = &results[0];
    let st = &main.figures["stale_writes"];
    let mutants = if mutants.is_empty() {
        String::new()
    } else {
        format!(
            "{} of {} mutants failed as required, ",
            mutants.len() - reasons.iter().filter(|r| r.starts_with("mutant ")).count(),
            mutants.len()
        )
    };
    let losses: String = results
        .iter()
        .filter(|r| r.mutant == Mutant::None && r.name.starts_with("failover"))
        .map(|r| {
            let l = &r.figures["holds_lost"];
            format!(
                "{}: {} holds lost, {} needless, ",
                r.name, l["count"], l["needless"]
            )
        })
        .collect();
    format!(
        "{} faults ({} holder pauses past T, {} partitions inside the ensemble, {} of a store), {} increments, \
         {} writes in doubt ({} committed, {} not), \
         {} stale writes refused, {} accepted out of order, {} double-holder windows, {} valid-lease overlaps, {losses}{mutants}{:.0} s",
        totals.faults,
        totals.pauses,
        totals.partitions,
        totals.store_faults,
        totals.increments,
        totals.in_doubt,
        totals.in_doubt_committed,
        totals.in_doubt - totals.in_doubt_committed,
        st["refused"],
        st["accepted_out_of_order"],
        main.figures["double_holder_windows"]["count"],
        totals.overlaps,
        clock::ms(started, clock::now_ns()) / 1000.0
    )
}

/// Writes `report.json`: setup, verdict, and per scenario the faults, figures and violations.
fn write_report(
    mode: &Mode,
    seed: u64,
    dir: &Path,
    pass: bool,
    reasons: &[String],
    results: &[ScenarioResult],
) {
    let report = json!({
        "mode": mode.name(), "seed": seed,
        "result": if pass { "PASS" } else { "FAIL" }, "reasons": reasons,
        "scenarios": results.iter().map(|r| json!({
            "name": r.name, "mutant": r.mutant.name(),
            "violations": r.violations.iter().map(|v| json!({"invariant": v.invariant, "summary": v.summary, "evidence": v.evidence})).collect::<Vec<_>>(),
            "figures": r.figures, "faults": r.faults,
        })).collect::<Vec<_>>(),
    });
    let _ = std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    );
}
