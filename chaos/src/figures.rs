//! The figures a scenario reports without failing on them: double-holder windows, stale
//! writes by outcome, the watchdog's detection latency and lease margins per fault kind,
//! failover after kills, false and spurious cancels, progress and liveness after the heal.
//!
//! They are expected to be non-zero under faults; the invariants are [`crate::checker`]'s.

use crate::clock::ms;
use crate::event::{Ev, Event, OpKind};
use crate::fault::Fault;
use crate::store::Row;
use crate::succession::{Judged, Succession};
use crate::timeline::{increments, Hold, Timeline};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};

/// A latency summary of `xs` (ms): `{n, p50_ms, p95_ms, max_ms, min_ms}`.
fn stats(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.total_cmp(b));
    if xs.is_empty() {
        return json!({"n": 0});
    }
    // The one percentile definition (nearest rank), shared with the bench.
    let percentile = |p| zkfence_harness::stats::percentile(&xs, p);
    json!({"n": xs.len(), "p50_ms": percentile(0.5), "p95_ms": percentile(0.95), "max_ms": xs[xs.len() - 1], "min_ms": xs[0]})
}

/// Latency summaries per fault kind.
fn stats_by<K: Eq + std::hash::Hash + serde::Serialize>(
    by: HashMap<K, Vec<f64>>,
) -> HashMap<K, Value> {
    by.into_iter().map(|(k, v)| (k, stats(v))).collect()
}

/// The overlaps the lease invariant found (the checker's invariant 7), as figures.
#[derive(Default)]
pub(crate) struct LeaseOverlaps {
    /// How long each overlap lasted (ms).
    pub durations: Vec<f64>,
    /// When each one began: the newer grant's time.
    pub grants: Vec<i64>,
    /// The same, by the fault under way at the newer grant.
    pub by_fault: HashMap<String, Vec<f64>>,
    /// Checks that passed late for holders an operator deleted behind their lease.
    pub exempt: usize,
}

/// What the checker found on each lock path that the figures report, merged over the paths
/// (a scenario of one lock has one).
#[derive(Default)]
pub(crate) struct PathFigures {
    pub holds: Vec<Hold>,
    /// The double-holder windows' lengths ([`double_holder_windows`]).
    pub double_ms: Vec<f64>,
    pub lease: LeaseOverlaps,
    pub stale: StaleWrites,
    /// An election's lost terms and their successors (`crate::succession`).
    pub successions: Vec<Succession>,
}

impl PathFigures {
    /// Adds another path's.
    pub(crate) fn add(&mut self, other: PathFigures) {
        self.holds.extend(other.holds);
        self.double_ms.extend(other.double_ms);
        let (lease, more) = (&mut self.lease, other.lease);
        lease.durations.extend(more.durations);
        lease.grants.extend(more.grants);
        for (kind, durations) in more.by_fault {
            lease.by_fault.entry(kind).or_default().extend(durations);
        }
        lease.exempt += more.exempt;
        self.stale.add(other.stale);
        self.successions.extend(other.successions);
    }
}

/// Double-holder windows: a hold that still believed itself current after a newer,
/// conflicting grant to another worker (readers do not conflict with readers), from that
/// grant to the moment the older holder stopped. Their lengths (ms).
pub(crate) fn double_holder_windows(holds: &[Hold]) -> Vec<f64> {
    let mut double_ms = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        if let Some(b) = holds[i + 1..]
            .iter()
            .take_while(|b| b.start < a.end)
            .find(|b| b.pid != a.pid && !(a.shared && b.shared))
        {
            double_ms.push(ms(b.start, a.end));
        }
    }
    double_ms
}

/// Writes whose outcome came after a newer writer's grant, by outcome.
#[derive(Default)]
pub(crate) struct StaleWrites {
    all: u64,
    refused_count: u64,
    out_of_order: u64,
    late_ack: u64,
    unknown: u64,
    /// Accepted rows whose token was below the fence at their commit.
    stale_rows: usize,
    /// Every refused write (stale or not), for the picture.
    pub refused: Vec<(u32, i64)>,
    /// Stale writes the store accepted out of order, for the picture.
    pub accepted: Vec<(u32, i64)>,
}

impl StaleWrites {
    /// Adds another path's.
    fn add(&mut self, other: StaleWrites) {
        self.all += other.all;
        self.refused_count += other.refused_count;
        self.out_of_order += other.out_of_order;
        self.late_ack += other.late_ack;
        self.unknown += other.unknown;
        self.stale_rows += other.stale_rows;
        self.refused.extend(other.refused);
        self.accepted.extend(other.accepted);
    }
}

/// Stale writes: completed (refused, acknowledged or unknown) after a newer grant than their
/// token, so they travelled while another worker held the lock. An acknowledged one is either
/// out of order in the store (also a violation of invariant 1) or was committed before the
/// newer holder raised the fence and only acknowledged late (its worker paused between the
/// commit and the reply): ordered before the newer holder, so harmless.
pub(crate) fn stale_writes(tl: &Timeline<'_>) -> StaleWrites {
    let out_of_order = out_of_order_ops(&tl.input.rows);
    let mut stale = StaleWrites {
        stale_rows: out_of_order.len(),
        ..StaleWrites::default()
    };
    let mut newest = 0u64;
    for e in tl.events {
        let (op, token) = match &e.ev {
            Ev::Granted { token, .. } if e.valid_grant() && !e.reader() => {
                newest = newest.max(*token);
                continue;
            }
            Ev::Fail { op, token, .. } => {
                stale.refused.push((e.w, e.t));
                (op, *token)
            }
            Ev::Ok { op, token } | Ev::Unknown { op, token, .. } => (op, *token),
            _ => continue,
        };
        if token >= newest {
            continue;
        }
        stale.all += 1;
        match e.ev {
            Ev::Fail { .. } => stale.refused_count += 1,
            Ev::Ok { .. } if out_of_order.contains(op.as_str()) => {
                stale.out_of_order += 1;
                stale.accepted.push((e.w, e.t));
            }
            Ev::Ok { .. } => stale.late_ack += 1,
            _ => stale.unknown += 1,
        }
    }
    stale
}

/// Writes whose worker could not learn their outcome (the store's connection died before the
/// reply), each resolved by the store's history: committed if its op is there, else not. The
/// invariants hold either way; this says how often the faults left a write in doubt.
fn in_doubt(tl: &Timeline<'_>) -> Value {
    let applied: HashSet<&str> = tl.input.rows.iter().map(|r| r.op.as_str()).collect();
    let ops: Vec<&str> = (tl.events.iter())
        .filter_map(|e| match &e.ev {
            Ev::Unknown { op, .. } => Some(op.as_str()),
            _ => None,
        })
        .collect();
    let committed = ops.iter().filter(|op| applied.contains(*op)).count();
    json!({"count": ops.len(), "committed": committed, "not_committed": ops.len() - committed})
}

/// Accepted rows whose token was below the fence at their commit: what fencing-off lets
/// through (each one also fails invariant 1).
fn out_of_order_ops(rows: &[Row]) -> HashSet<&str> {
    let mut max_token = i64::MIN;
    let mut out_of_order = HashSet::new();
    for row in rows {
        if row.token < max_token {
            out_of_order.insert(row.op.as_str());
        }
        max_token = max_token.max(row.token);
    }
    out_of_order
}

/// The watchdog against the faults aimed at a holder.
#[derive(Default)]
struct Detection {
    /// From when the victim could notice to its cancel, per fault kind (ms).
    latency: HashMap<String, Vec<f64>>,
    /// Faults whose victim saw no cancel, per kind.
    undetected: HashMap<String, u64>,
    /// How far the cancel came ahead of the server's expiry, per kind (ms).
    margins: HashMap<String, Vec<f64>>,
    /// From a kill to the next grant to another worker (ms).
    failover: Vec<f64>,
}

/// Detection latency per fault kind, lease margins for partitions, failover after kills.
fn detection(tl: &Timeline<'_>) -> Detection {
    let mut found = Detection::default();
    for f in &tl.input.faults {
        let Some((_, pid, token)) = f.victim else {
            continue;
        };
        if f.kind == "kill-holder" || f.kind == "clock-skew-worker" {
            if let Some(next) = tl.grants.iter().find(|g| g.t > f.start && g.pid != pid) {
                found.failover.push(ms(f.start, next.t));
            }
            continue;
        }
        let cancel = tl
            .cancels
            .iter()
            .find(|c| c.pid == pid && c.token() == Some(token) && c.t >= f.start);
        let Some(c) = cancel else {
            *found.undetected.entry(f.kind.clone()).or_default() += 1;
            continue;
        };
        let latency = ms(f.reference, c.t).max(0.0);
        found
            .latency
            .entry(f.kind.clone())
            .or_default()
            .push(latency);
        if let Some(expired) = f.expired_at.filter(|_| f.kind != "expire-holder") {
            let margin = ms(c.t, expired);
            found
                .margins
                .entry(f.kind.clone())
                .or_default()
                .push(margin);
        }
    }
    found
}

/// Cancels whose session went on: the worker was granted the lock again on the same session
/// (no new `session` event in between). Counted per lease mode: in the default mode every
/// disconnect cancels; in ride-out mode these are false cancels.
fn cancels_on_surviving_sessions(tl: &Timeline<'_>) -> HashMap<&'static str, u64> {
    let mut false_cancels: HashMap<&str, u64> = HashMap::new();
    let mut ride_out: HashMap<u32, bool> = HashMap::new();
    let mut pending: HashMap<u32, &Event> = HashMap::new();
    for e in tl.events {
        match e.ev {
            Ev::Start { ride_out: r, .. } => {
                ride_out.insert(e.pid, r);
            }
            Ev::Cancel { .. } => {
                pending.insert(e.pid, e);
            }
            Ev::Session { .. } | Ev::SessionEnded { .. } => {
                pending.remove(&e.pid);
            }
            Ev::Granted { .. } if pending.remove(&e.pid).is_some() => {
                let mode = if ride_out.get(&e.pid) == Some(&true) {
                    "ride_out"
                } else {
                    "default"
                };
                *false_cancels.entry(mode).or_default() += 1;
            }
            _ => {}
        }
    }
    false_cancels
}

/// How long after a fault ends a cancel is still put down to it (ns): 2T + 1 s.
fn slack(tl: &Timeline<'_>) -> i64 {
    2 * tl.input.session_ms as i64 * 1_000_000 + 1_000_000_000
}

/// The kind of the fault that moment `t` is put down to: the last one to start before it
/// (or within 0.1 s after), if `t` comes no later than `slack` after that fault ended; else
/// `none`. Faults run one at a time, so the one under way or the one just healed.
pub(crate) fn fault_at(faults: &[Fault], t: i64, slack: i64) -> String {
    faults
        .iter()
        .filter(|f| f.start - 100_000_000 <= t)
        .max_by_key(|f| f.start)
        .filter(|f| t <= f.end + slack)
        .map_or_else(|| "none".to_owned(), |f| f.kind.clone())
}

/// What a lost hold's node told afterwards, counted per fault kind or lease configuration.
#[derive(Default, serde::Serialize)]
struct LossCount {
    /// Holds lost (their token fired, or a check found them lost).
    lost: u64,
    /// Of those, the ones whose node was still there afterwards: needless.
    needless: u64,
    /// Of those, the ones with no verdict (none came in time, or the process ended first).
    unknown: u64,
}

/// A worker's lease configuration, as its `start` event gives it.
fn configuration(ev: &Ev) -> Option<String> {
    let Ev::Start {
        ride_out,
        session_ms,
        grace_ms,
        ..
    } = ev
    else {
        return None;
    };
    let mode = if *ride_out { "ride-out" } else { "default" };
    Some(format!("T={session_ms} ms {mode} grace {grace_ms} ms"))
}

/// Holds lost, needless ones (their node survived the loss: the session lived on and nobody
/// else held) and unknown ones, per fault kind ([`fault_at`] of the cancel, else of the
/// verdict's start) and per lease configuration; and the worker's jeopardy spells.
fn losses(tl: &Timeline<'_>) -> Value {
    let mut config: HashMap<u32, String> = HashMap::new();
    let mut lost_at: HashMap<(u32, u64), i64> = HashMap::new();
    let mut verdicts: HashMap<(u32, u64), Option<bool>> = HashMap::new();
    let (mut spells, mut steady) = (0u64, 0u64);
    for e in tl.events {
        match &e.ev {
            Ev::Start { .. } => {
                config.extend(configuration(&e.ev).map(|c| (e.pid, c)));
            }
            Ev::Cancel { token, .. } => {
                lost_at.entry((e.pid, *token)).or_insert(e.t);
            }
            Ev::LossVerdict {
                token,
                node_survived,
                waited_ms,
                ..
            } => {
                let began = e.t - *waited_ms as i64 * 1_000_000;
                lost_at.entry((e.pid, *token)).or_insert(began);
                verdicts.insert((e.pid, *token), *node_survived);
            }
            Ev::Jeopardy { .. } => spells += 1,
            Ev::Steady { .. } => steady += 1,
            _ => {}
        }
    }
    let mut by_fault: HashMap<String, LossCount> = HashMap::new();
    let mut by_config: HashMap<String, LossCount> = HashMap::new();
    let mut all = LossCount::default();
    for (key, &at) in &lost_at {
        let kind = fault_at(&tl.input.faults, at, slack(tl));
        let cfg = config.get(&key.0).cloned().unwrap_or_else(|| "?".into());
        let verdict = verdicts.get(key).copied().flatten();
        for count in [
            by_fault.entry(kind).or_default(),
            by_config.entry(cfg).or_default(),
            &mut all,
        ] {
            count.lost += 1;
            count.needless += u64::from(verdict == Some(true));
            count.unknown += u64::from(verdict.is_none());
        }
    }
    json!({
        "count": all.lost, "needless": all.needless, "verdict_unknown": all.unknown,
        "by_fault": by_fault, "by_config": by_config,
        "jeopardy": {"noticed": spells, "steady_again": steady},
    })
}

/// One row of the failover table: what is put down to one fault kind.
#[derive(Default, serde::Serialize)]
struct KindRow {
    faults: u64,
    holds_lost: u64,
    needless_cancels: u64,
    lease_overlaps: u64,
    stale_writes_accepted: u64,
}

/// Per fault kind: faults, holds lost, needless cancels, valid-lease overlaps and stale writes
/// accepted put down to it ([`fault_at`]; an overlap by its newer grant): the failover table.
fn per_fault_kind(
    tl: &Timeline<'_>,
    losses: &Value,
    lease: &LeaseOverlaps,
    stale: &StaleWrites,
) -> Value {
    let faults = &tl.input.faults;
    let mut kinds: HashMap<String, KindRow> = HashMap::new();
    for f in faults {
        kinds.entry(f.kind.clone()).or_default().faults += 1;
    }
    if let Some(by) = losses["by_fault"].as_object() {
        for (kind, count) in by {
            let row = kinds.entry(kind.clone()).or_default();
            row.holds_lost += count["lost"].as_u64().unwrap_or(0);
            row.needless_cancels += count["needless"].as_u64().unwrap_or(0);
        }
    }
    for &t in &lease.grants {
        let kind = fault_at(faults, t, slack(tl));
        kinds.entry(kind).or_default().lease_overlaps += 1;
    }
    for &(_, t) in &stale.accepted {
        let kind = fault_at(faults, t, slack(tl));
        kinds.entry(kind).or_default().stale_writes_accepted += 1;
    }
    serde_json::to_value(kinds).unwrap_or_default()
}

/// Spurious cancels: no fault from 0.1 s after to 2T + 1 s before.
fn spurious_cancels(tl: &Timeline<'_>) -> usize {
    let slack = slack(tl);
    tl.cancels
        .iter()
        .filter(|c| {
            !tl.input
                .faults
                .iter()
                .any(|f| c.t >= f.start - 100_000_000 && c.t <= f.end + slack)
        })
        .count()
}

/// Progress: the acknowledged increments over time.
struct Progress {
    /// The longest gap without one: (ms, from, to).
    gap: (f64, i64, i64),
    /// The kinds of the faults overlapping that gap.
    gap_faults: Vec<String>,
    /// Their times after the final heal.
    after_heal: Vec<i64>,
}

fn progress(tl: &Timeline<'_>) -> Progress {
    let (t0, input) = (tl.input.t0, tl.input);
    let oks: Vec<i64> = tl
        .events
        .iter()
        .filter(|e| match &e.ev {
            Ev::Ok { op, .. } => tl.invoked_at.get(op.as_str()).is_some_and(|i| {
                matches!(
                    i.ev,
                    Ev::Invoke {
                        kind: OpKind::Write,
                        ..
                    }
                )
            }),
            _ => false,
        })
        .map(|e| e.t)
        .collect();
    let mut gap = (0.0f64, t0, t0);
    let mut prev = tl.events.first().map_or(t0, |e| e.t);
    for &t in oks.iter().chain(std::iter::once(&input.end_at)) {
        if ms(prev, t) > gap.0 {
            gap = (ms(prev, t), prev, t);
        }
        prev = t;
    }
    Progress {
        gap,
        gap_faults: input
            .faults
            .iter()
            .filter(|f| f.start <= gap.2 && f.end >= gap.1)
            .map(|f| f.kind.clone())
            .collect(),
        after_heal: oks.into_iter().filter(|&t| t >= input.heal_at).collect(),
    }
}

/// The applied increments per lock path (store row).
fn increments_by_path(rows: &[Row]) -> std::collections::BTreeMap<i32, u64> {
    let mut by = std::collections::BTreeMap::new();
    for row in increments(rows) {
        *by.entry(row.row).or_default() += 1;
    }
    by
}

/// An election's failover gaps ([`Succession`]), each at its greatest (counted from the
/// earliest moment a leader was possible again): after losses per fault kind (the one under
/// way at the loss, or just ended: [`fault_at`]), after resignations (handoffs) apart; how many
/// the run proves over their bound, and the ones it cannot judge, each with its range.
fn failover_gaps(tl: &Timeline<'_>, successions: &[Succession]) -> Value {
    let mut by_fault: HashMap<String, Vec<f64>> = HashMap::new();
    let mut from_recovery: HashMap<String, u64> = HashMap::new();
    let (mut lost, mut handoffs) = (Vec::new(), Vec::new());
    let mut cannot_tell = Vec::new();
    for s in successions {
        let kind = fault_at(&tl.input.faults, s.loss, slack(tl));
        if s.judged() == Judged::CannotTell {
            cannot_tell.push(json!({
                "worker": s.w, "epoch": s.token, "fault": kind,
                "gap_ms": [s.gap_ms.0, s.gap_ms.1], "bound_ms": s.bound_ms,
            }));
        }
        if s.resigned {
            handoffs.push(s.gap_ms.1);
            continue;
        }
        lost.push(s.gap_ms.1);
        if s.possible.0 > s.loss {
            *from_recovery.entry(kind.clone()).or_default() += 1;
        }
        by_fault.entry(kind).or_default().push(s.gap_ms.1);
    }
    let bound = (successions.iter().map(|s| s.bound_ms))
        .fold(None, |b: Option<f64>, x| Some(b.map_or(x, |b| b.min(x))));
    let over = successions.iter().filter(|s| s.judged() == Judged::Over);
    json!({
        "count": successions.len(),
        "over_bound": over.count(),
        "cannot_tell": cannot_tell,
        "bound_ms": bound,
        "after_loss": stats(lost),
        "after_resignation": stats(handoffs),
        "by_fault": stats_by(by_fault),
        "measured_from_recovery_by_fault": from_recovery,
    })
}

/// The report's figures for one scenario (`found`: what each lock path's timeline found).
pub(crate) fn figures(tl: &Timeline<'_>, found: &PathFigures) -> Value {
    let (holds, lease, stale) = (&found.holds, &found.lease, &found.stale);
    let input = tl.input;
    let t0 = input.t0;
    let mut by_kind: HashMap<&str, u64> = HashMap::new();
    for f in &input.faults {
        *by_kind.entry(f.kind.as_str()).or_default() += 1;
    }
    let writes = increments(&input.rows).len();
    let double_ms = found.double_ms.clone();
    let detect = detection(tl);
    let progress = progress(tl);
    let gap = progress.gap;
    let losses = losses(tl);
    let per_kind = per_fault_kind(tl, &losses, lease, stale);
    json!({
        "faults": input.faults.len(),
        "faults_by_kind": by_kind,
        "holder_pauses_past_timeout": input.faults.iter().filter(|f| f.pause_past_timeout).count(),
        "holds": holds.len(),
        "read_holds": holds.iter().filter(|h| h.shared).count(),
        "reader_observations": tl.events.iter().filter(|e| matches!(e.ev, Ev::Observe { .. })).count(),
        "increments_applied": writes,
        "increments_by_path": increments_by_path(&input.rows),
        "nested_holds": tl.events.iter().filter(|e| matches!(e.ev, Ev::Nested { .. })).count(),
        "fence_raises_applied": input.rows.len() - writes,
        "final_counter": input.counter(),
        "double_holder_windows": {"count": double_ms.len(), "duration": stats(double_ms)},
        "stale_writes": {"in_flight_past_a_newer_grant": stale.all, "refused": stale.refused_count,
                          "accepted_out_of_order": stale.out_of_order, "acknowledged_late": stale.late_ack,
                          "unknown": stale.unknown, "stale_rows_in_store": stale.stale_rows},
        "refused_writes_total": stale.refused.len(),
        "writes_in_doubt": in_doubt(tl),
        "detection_latency_by_fault": stats_by(detect.latency),
        "faults_without_cancel": detect.undetected,
        "lease_margin_by_fault": stats_by(detect.margins),
        "lease_overlaps": {"count": lease.durations.len(), "duration": stats(lease.durations.clone()),
                           "exempt_operator_deletions": lease.exempt, "by_fault": stats_by(lease.by_fault.clone())},
        "cancels_on_surviving_sessions": cancels_on_surviving_sessions(tl),
        "holds_lost": losses,
        "failover_gaps": failover_gaps(tl, &found.successions),
        "per_fault_kind": per_kind,
        "failover_after_kill_ms": stats(detect.failover),
        "cancels": tl.cancels.len(),
        "spurious_cancels": spurious_cancels(tl),
        "longest_gap_without_progress": {"ms": gap.0, "from_ms": ms(t0, gap.1), "to_ms": ms(t0, gap.2),
                                         "faults": progress.gap_faults},
        "liveness_after_heal": {
            "increments": progress.after_heal.len(),
            "first_after_ms": progress.after_heal.first().map(|&t| ms(input.heal_at, t)),
        },
    })
}
