//! The checker: one pass over the store's commit order and one over the workers' events
//! (sorted by time), so O(n log n) for the sort and O(n) after it.
//!
//! It fails the run on a broken invariant, with a counterexample, and reports the figures that
//! are expected to be non-zero under faults (double holders, refused stale writes, detection
//! latencies, lease margins) without failing on them.

use crate::clock::ms;
use crate::store::Row;
use serde_json::{json, Value};
use std::collections::HashMap;

/// One worker event (a line of its log).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub t: i64,
    pub w: u32,
    pub pid: u32,
    pub ev: String,
    pub body: Value,
}

impl Event {
    pub(crate) fn from_json(body: Value) -> Option<Event> {
        Some(Event {
            t: body.get("t")?.as_i64()?,
            w: body.get("w")?.as_u64()? as u32,
            pid: body.get("pid")?.as_u64()? as u32,
            ev: body.get("ev")?.as_str()?.to_owned(),
            body,
        })
    }

    fn token(&self) -> Option<u64> {
        self.body.get("token").and_then(Value::as_u64)
    }

    fn op(&self) -> Option<&str> {
        self.body.get("op").and_then(Value::as_str)
    }

    fn kind(&self) -> Option<&str> {
        self.body.get("kind").and_then(Value::as_str)
    }

    /// A grant whose lease check passed right after `acquire` returned.
    fn valid_grant(&self) -> bool {
        self.ev == "granted" && self.body.get("valid").and_then(Value::as_bool) == Some(true)
    }

    /// A read lock's grant (readers share the lock with each other).
    fn reader(&self) -> bool {
        self.body.get("role").and_then(Value::as_str) == Some("read")
    }

    /// The worker passed a lease check at `t` (taken just before the check): a valid grant, an
    /// invoke after a check, a reader's checked observation. `Some(is_reader)` if so.
    fn passed_check(&self) -> Option<bool> {
        let flag = |key| self.body.get(key).and_then(Value::as_bool) == Some(true);
        match self.ev.as_str() {
            "granted" if flag("valid") => Some(self.reader()),
            "invoke" if flag("checked") => Some(false),
            "lease" => Some(false),
            "observe" if flag("valid") => Some(true),
            _ => None,
        }
    }

    pub(crate) fn line(&self, t0: i64) -> String {
        let mut fields = self.body.clone();
        if let Value::Object(map) = &mut fields {
            for key in ["t", "w", "pid", "ev"] {
                map.remove(key);
            }
        }
        format!(
            "{:>9.1} ms  w{} pid {} {} {}",
            ms(t0, self.t),
            self.w,
            self.pid,
            self.ev,
            fields
        )
    }
}

/// One injected fault, as the controller recorded it.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub kind: String,
    pub detail: String,
    pub start: i64,
    pub end: i64,
    /// From when the victim could notice: the SIGCONT for a pause, else the start.
    pub reference: i64,
    /// The holder the fault was aimed at: (worker, pid, token).
    pub victim: Option<(u32, u32, u64)>,
    /// When the server deleted the victim's lock node (its session expired), if observed.
    pub expired_at: Option<i64>,
    /// Whether it counts as a holder pause past the session timeout.
    pub pause_past_timeout: bool,
}

impl Fault {
    pub(crate) fn to_json(&self, t0: i64) -> Value {
        json!({
            "kind": self.kind, "detail": self.detail,
            "start_ms": ms(t0, self.start), "end_ms": ms(t0, self.end),
            "victim": self.victim.map(|(w, pid, token)| json!({"worker": w, "pid": pid, "token": token})),
            "expired_at_ms": self.expired_at.map(|t| ms(t0, t)),
        })
    }
}

/// Everything one scenario produced.
pub(crate) struct Input {
    pub rows: Vec<Row>,
    pub counter: i64,
    pub events: Vec<Event>,
    pub faults: Vec<Fault>,
    pub session_ms: u64,
    pub t0: i64,
    pub heal_at: i64,
    pub end_at: i64,
}

/// The lease invariant's name (guarantee 1, checked on the shared clock).
pub(crate) const LEASE_INVARIANT: &str = "no lease check passes after a newer conflicting grant";

/// A broken invariant and the evidence.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub invariant: &'static str,
    pub summary: String,
    pub evidence: Vec<String>,
}

/// A worker's hold of the lock, from its grant to the first sign it ended.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub w: u32,
    pub pid: u32,
    pub token: u64,
    pub seq: i64,
    pub start: i64,
    pub end: i64,
    pub how: String,
    /// A read lock's hold.
    pub shared: bool,
}

pub(crate) struct Outcome {
    pub violations: Vec<Violation>,
    pub holds: Vec<Hold>,
    pub figures: Value,
    /// Times of refused writes and of cancellations, for the picture.
    pub refused: Vec<(u32, i64)>,
    pub stale_accepted: Vec<(u32, i64)>,
    pub cancels: Vec<(u32, i64)>,
}

fn stats(mut xs: Vec<f64>) -> Value {
    xs.sort_by(|a, b| a.total_cmp(b));
    if xs.is_empty() {
        return json!({"n": 0});
    }
    // The one percentile definition (nearest rank), shared with the bench.
    let percentile = |p| zkfence_testkit::stats::percentile(&xs, p);
    json!({"n": xs.len(), "p50_ms": percentile(0.5), "p95_ms": percentile(0.95), "max_ms": xs[xs.len() - 1], "min_ms": xs[0]})
}

pub(crate) fn check(input: &Input) -> Outcome {
    let mut events = input.events.clone();
    events.sort_by_key(|e| e.t);
    let t0 = input.t0;
    let mut violations = Vec::new();
    let timeline = |workers: &[u32], at: i64| -> Vec<String> {
        let from = at - 3_000_000_000;
        let to = at + 500_000_000;
        let mut lines: Vec<String> = events
            .iter()
            .filter(|e| workers.contains(&e.w) && e.t >= from && e.t <= to && e.ev != "read")
            .map(|e| e.line(t0))
            .collect();
        if lines.len() > 40 {
            lines.drain(..lines.len() - 40);
        }
        lines.extend(
            input
                .faults
                .iter()
                .filter(|f| {
                    f.start <= to && f.end >= from - 2 * input.session_ms as i64 * 1_000_000
                })
                .map(|f| {
                    format!(
                        "fault {} ({}) from {:.1} ms to {:.1} ms",
                        f.kind,
                        f.detail,
                        ms(t0, f.start),
                        ms(t0, f.end)
                    )
                }),
        );
        lines
    };
    let row_line = |r: &Row| {
        format!(
            "store row seq {} op {} {} by w{} token {} value {}",
            r.seq, r.op, r.kind, r.worker, r.token, r.value
        )
    };
    let invoked_at: HashMap<&str, &Event> = events
        .iter()
        .filter(|e| e.ev == "invoke")
        .filter_map(|e| Some((e.op()?, e)))
        .collect();
    let at_of = |op: &str| invoked_at.get(op).map_or(input.end_at, |e| e.t);

    // 1. No stale token accepted: tokens never decrease in commit order.
    let mut max: Option<&Row> = None;
    for row in &input.rows {
        if let Some(prev) = max {
            if row.token < prev.token {
                violations.push(Violation {
                    invariant: "no stale token accepted",
                    summary: format!(
                        "store accepted token {} after token {}",
                        row.token, prev.token
                    ),
                    evidence: [
                        vec![row_line(prev), row_line(row)],
                        timeline(&[prev.worker as u32, row.worker as u32], at_of(&row.op)),
                    ]
                    .concat(),
                });
                continue;
            }
        }
        if max.is_none_or(|m| row.token >= m.token) {
            max = Some(row);
        }
    }

    // 2 and 3. Acknowledged writes are in the store; refused ones are not.
    let applied: HashMap<&str, &Row> = input.rows.iter().map(|r| (r.op.as_str(), r)).collect();
    for e in &events {
        match (e.ev.as_str(), e.op()) {
            ("ok", Some(op)) if !applied.contains_key(op) => violations.push(Violation {
                invariant: "no acknowledged write lost",
                summary: format!(
                    "op {op} was acknowledged to w{} but is not in the store",
                    e.w
                ),
                evidence: timeline(&[e.w], e.t),
            }),
            ("fail", Some(op)) if applied.contains_key(op) => violations.push(Violation {
                invariant: "no failed write applied",
                summary: format!("op {op} was refused to w{} but is in the store", e.w),
                evidence: [vec![row_line(applied[op])], timeline(&[e.w], e.t)].concat(),
            }),
            _ => {}
        }
    }

    // 4. Counter equals the applied increments, each one step above the last (a lost update
    //    shows as a repeated value).
    let writes: Vec<&Row> = input.rows.iter().filter(|r| r.kind == "write").collect();
    for (i, row) in writes.iter().enumerate() {
        let want = i as i64 + 1;
        if row.value != want {
            let prev = if i > 0 { Some(writes[i - 1]) } else { None };
            let mut workers = vec![row.worker as u32];
            workers.extend(prev.map(|p| p.worker as u32));
            violations.push(Violation {
                invariant: "counter = applied increments, no gaps",
                summary: format!(
                    "increment #{want} in commit order wrote {} (a lost update or a gap)",
                    row.value
                ),
                evidence: [
                    prev.map(&row_line)
                        .into_iter()
                        .chain([row_line(row)])
                        .collect(),
                    timeline(&workers, at_of(&row.op)),
                ]
                .concat(),
            });
            break;
        }
    }
    if input.counter != writes.len() as i64 {
        violations.push(Violation {
            invariant: "counter = applied increments, no gaps",
            summary: format!(
                "final counter {} but {} increments applied",
                input.counter,
                writes.len()
            ),
            evidence: Vec::new(),
        });
    }

    // 5. Tokens strictly increase in grant order: an exclusive grant's token exceeds every
    //    earlier grant's; a reader's exceeds every earlier exclusive grant's (readers that
    //    share may be granted in any order among themselves).
    let grants: Vec<&Event> = events.iter().filter(|e| e.valid_grant()).collect();
    let (mut last_any, mut last_writer): (Option<&Event>, Option<&Event>) = (None, None);
    for &g in &grants {
        let bound = if g.reader() { last_writer } else { last_any };
        if let Some(before) = bound.filter(|b| g.token() <= b.token()) {
            violations.push(Violation {
                invariant: "tokens strictly increase in grant order",
                summary: format!(
                    "w{} was granted token {:?} after w{} got {:?}",
                    g.w,
                    g.token(),
                    before.w,
                    before.token()
                ),
                evidence: timeline(&[before.w, g.w], g.t),
            });
        }
        if last_any.is_none_or(|a| g.token() > a.token()) {
            last_any = Some(g);
        }
        if !g.reader() && last_writer.is_none_or(|a| g.token() > a.token()) {
            last_writer = Some(g);
        }
    }

    // 5b. A reader whose lease held around a read never saw a newer writer's fence: no writer
    //     after it can have been granted while its node existed.
    for e in events.iter().filter(|e| e.ev == "observe") {
        let fence = e.body.get("fence").and_then(Value::as_u64).unwrap_or(0);
        let valid = e.body.get("valid").and_then(Value::as_bool) == Some(true);
        if valid && Some(fence) >= e.token() {
            violations.push(Violation {
                invariant: "a reader never sees a newer writer while its lease holds",
                summary: format!(
                    "w{} read fence {fence} under read token {:?}",
                    e.w,
                    e.token()
                ),
                evidence: timeline(&[e.w], e.t),
            });
        }
    }

    // 6. No write invoked after the worker's own cancellation or lease end.
    let mut cancelled: HashMap<(u32, u64), i64> = HashMap::new();
    for e in &events {
        match e.ev.as_str() {
            "cancel" => {
                if let Some(token) = e.token() {
                    cancelled.entry((e.pid, token)).or_insert(e.t);
                }
            }
            "invoke" => {
                let token = e.token().unwrap_or(0);
                let left = e
                    .body
                    .get("lease_left_ms")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let after_cancel = cancelled.get(&(e.pid, token)).copied();
                if after_cancel.is_some() || left < 0 {
                    violations.push(Violation {
                        invariant: "no write invoked after its own cancellation",
                        summary: match after_cancel {
                            Some(c) => format!(
                                "w{} invoked {} {:.1} ms after its token {token} was cancelled",
                                e.w,
                                e.op().unwrap_or("?"),
                                ms(c, e.t)
                            ),
                            None => format!(
                                "w{} invoked {} {} ms after its lease ended",
                                e.w,
                                e.op().unwrap_or("?"),
                                -left
                            ),
                        },
                        evidence: timeline(&[e.w], e.t),
                    });
                }
            }
            _ => {}
        }
    }

    // Figures. Holds: from a valid grant to the first sign the hold ended.
    let mut open: HashMap<u32, Hold> = HashMap::new();
    let mut holds = Vec::new();
    let mut last_seen: HashMap<u32, i64> = HashMap::new();
    for e in &events {
        last_seen.insert(e.pid, e.t);
        match e.ev.as_str() {
            "granted" if e.valid_grant() => {
                open.insert(
                    e.pid,
                    Hold {
                        w: e.w,
                        pid: e.pid,
                        token: e.token().unwrap_or(0),
                        seq: e.body.get("seq").and_then(Value::as_i64).unwrap_or(0),
                        start: e.t,
                        end: e.t,
                        how: String::new(),
                        shared: e.reader(),
                    },
                );
            }
            "cancel" | "check-failed" | "release" | "fail" | "unknown" | "session-ended"
                if open
                    .get(&e.pid)
                    .is_some_and(|h| Some(h.token) == e.token() || e.ev == "session-ended") =>
            {
                if let Some(mut hold) = open.remove(&e.pid) {
                    hold.end = e.t;
                    hold.how = e.ev.clone();
                    holds.push(hold);
                }
            }
            _ => {}
        }
    }
    for (pid, mut hold) in open {
        hold.end = last_seen.get(&pid).copied().unwrap_or(hold.start);
        hold.how = "process ended".into();
        holds.push(hold);
    }
    holds.sort_by_key(|h| h.start);

    // 7. No valid-lease overlap: no worker passes a lease check (every write is invoked
    //    right after one) after another worker was granted a conflicting hold with a greater
    //    token. This is guarantee 1, checked on the shared clock without the store. Holders
    //    whose node an operator deleted behind their lease (delete-parent, expire-holder) are
    //    exempt: no lease can see that before the node's watch fires.
    let mut exempt: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for f in &input.faults {
        match f.kind.as_str() {
            "expire-holder" => exempt.extend(f.victim.map(|(_, _, token)| token)),
            "delete-parent" => exempt.extend(
                holds
                    .iter()
                    .filter(|h| h.start <= f.start && h.end >= f.start)
                    .map(|h| h.token),
            ),
            _ => {}
        }
    }
    let conflicting = |g: &&Event, reader: bool| g.valid_grant() && !(reader && g.reader());
    let mut overlaps: HashMap<u64, (&Event, &Event, &Event)> = HashMap::new(); // token -> (grant, first, last)
    let mut exempt_overlaps = 0usize;
    let (mut top_writer, mut top_any): (Option<&Event>, Option<&Event>) = (None, None);
    for e in &events {
        if let Some(reader) = e.passed_check() {
            let token = e.token().unwrap_or(0);
            let bound = if reader { top_writer } else { top_any };
            if bound.is_some_and(|b| b.token() > Some(token) && b.pid != e.pid) {
                if exempt.contains(&token) {
                    exempt_overlaps += 1;
                } else {
                    overlaps
                        .entry(token)
                        .and_modify(|o| o.2 = e)
                        .or_insert_with(|| {
                            // The earliest conflicting grant above this token.
                            let first = grants
                                .iter()
                                .find(|g| {
                                    conflicting(g, reader)
                                        && g.token() > Some(token)
                                        && g.pid != e.pid
                                        && g.t < e.t
                                })
                                .copied()
                                .unwrap_or(e);
                            (first, e, e)
                        });
                }
            }
        }
        if e.valid_grant() {
            if top_any.is_none_or(|a| e.token() > a.token()) {
                top_any = Some(e);
            }
            if !e.reader() && top_writer.is_none_or(|a| e.token() > a.token()) {
                top_writer = Some(e);
            }
        }
    }
    let mut overlap_ms = Vec::new();
    let mut overlap_by_fault: HashMap<String, Vec<f64>> = HashMap::new();
    let mut overlaps: Vec<_> = overlaps.into_iter().collect();
    overlaps.sort_by_key(|(_, (g, _, _))| g.t);
    for (token, (grant, first, last)) in &overlaps {
        let lasted = ms(grant.t, last.t);
        overlap_ms.push(lasted);
        // The fault under way when the newer holder was granted, if any.
        let during = input
            .faults
            .iter()
            .filter(|f| f.start <= grant.t && grant.t <= f.end)
            .map(|f| f.kind.clone())
            .next()
            .unwrap_or_else(|| "none".into());
        overlap_by_fault.entry(during).or_default().push(lasted);
        violations.push(Violation {
            invariant: LEASE_INVARIANT,
            summary: format!(
                "w{} (token {token}) passed lease checks for {lasted:.1} ms after w{} was granted token {:?}",
                first.w,
                grant.w,
                grant.token()
            ),
            evidence: timeline(&[first.w, grant.w], last.t),
        });
    }
    // A double-holder window: a hold that still believed itself current after a newer,
    // conflicting grant to another worker (readers do not conflict with readers), from that
    // grant to the moment the older holder stopped.
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
    let double_windows = double_ms.len();

    // Accepted rows whose token was below the fence at their commit: what fencing-off lets
    // through (each one also fails invariant 1).
    let mut max_token = i64::MIN;
    let mut out_of_order: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for row in &input.rows {
        if row.token < max_token {
            out_of_order.insert(row.op.as_str());
        }
        max_token = max_token.max(row.token);
    }

    // Stale writes: completed (refused, acknowledged or unknown) after a newer grant than
    // their token, so they travelled while another worker held the lock. An acknowledged one
    // is either out of order in the store (a violation) or was committed before the newer
    // holder raised the fence and only acknowledged late (its worker paused between the
    // commit and the reply): ordered before the newer holder, so harmless.
    let mut newest = 0u64;
    let mut stale = (0u64, 0u64, 0u64, 0u64, 0u64); // all, refused, out of order, late ack, unknown
    let mut refused = Vec::new();
    let mut stale_accepted = Vec::new();
    for e in &events {
        let token = e.token().unwrap_or(0);
        match e.ev.as_str() {
            "granted" if e.valid_grant() && !e.reader() => {
                newest = newest.max(token);
            }
            "fail" | "ok" | "unknown" if e.op().is_some() => {
                if e.ev == "fail" {
                    refused.push((e.w, e.t));
                }
                if token < newest {
                    stale.0 += 1;
                    match e.ev.as_str() {
                        "fail" => stale.1 += 1,
                        "ok" if out_of_order.contains(e.op().unwrap_or("")) => {
                            stale.2 += 1;
                            stale_accepted.push((e.w, e.t));
                        }
                        "ok" => stale.3 += 1,
                        _ => stale.4 += 1,
                    }
                }
            }
            _ => {}
        }
    }

    // Detection latency per fault kind, lease margins for partitions, failover after kills.
    let cancels: Vec<&Event> = events.iter().filter(|e| e.ev == "cancel").collect();
    let mut detect: HashMap<String, Vec<f64>> = HashMap::new();
    let mut undetected: HashMap<String, u64> = HashMap::new();
    let mut margins: HashMap<String, Vec<f64>> = HashMap::new();
    let mut failover = Vec::new();
    for f in &input.faults {
        if let Some((_, pid, token)) = f.victim {
            if f.kind == "kill-holder" || f.kind == "clock-skew-worker" {
                if let Some(next) = grants.iter().find(|g| g.t > f.start && g.pid != pid) {
                    failover.push(ms(f.start, next.t));
                }
                continue;
            }
            match cancels
                .iter()
                .find(|c| c.pid == pid && c.token() == Some(token) && c.t >= f.start)
            {
                Some(c) => {
                    detect
                        .entry(f.kind.clone())
                        .or_default()
                        .push(ms(f.reference, c.t).max(0.0));
                    if let Some(expired) = f.expired_at.filter(|_| f.kind != "expire-holder") {
                        margins
                            .entry(f.kind.clone())
                            .or_default()
                            .push(ms(c.t, expired));
                    }
                }
                None => *undetected.entry(f.kind.clone()).or_default() += 1,
            }
        }
    }
    // A cancel is false when the session outlived it: the worker went on to be granted the
    // lock again on the same session (no new `session` event in between). Counted per mode.
    let mut false_cancels: HashMap<&str, u64> = HashMap::new();
    let mut ride_out: HashMap<u32, bool> = HashMap::new();
    let mut pending: HashMap<u32, &Event> = HashMap::new();
    for e in &events {
        match e.ev.as_str() {
            "start" => {
                ride_out.insert(
                    e.pid,
                    e.body.get("ride_out").and_then(Value::as_bool) == Some(true),
                );
            }
            "cancel" => {
                pending.insert(e.pid, e);
            }
            "session" | "session-ended" => {
                pending.remove(&e.pid);
            }
            "granted" if pending.remove(&e.pid).is_some() => {
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
    let slack = 2 * input.session_ms as i64 * 1_000_000 + 1_000_000_000;
    let spurious: Vec<&&Event> = cancels
        .iter()
        .filter(|c| {
            !input
                .faults
                .iter()
                .any(|f| c.t >= f.start - 100_000_000 && c.t <= f.end + slack)
        })
        .collect();

    // Progress: acknowledged increments over time.
    let oks: Vec<i64> = events
        .iter()
        .filter(|e| {
            e.ev == "ok"
                && invoked_at
                    .get(e.op().unwrap_or(""))
                    .is_some_and(|i| i.kind() == Some("write"))
        })
        .map(|e| e.t)
        .collect();
    let mut gap = (0.0f64, t0, t0);
    let mut prev = events.first().map_or(t0, |e| e.t);
    for &t in oks.iter().chain(std::iter::once(&input.end_at)) {
        if ms(prev, t) > gap.0 {
            gap = (ms(prev, t), prev, t);
        }
        prev = t;
    }
    let gap_faults: Vec<String> = input
        .faults
        .iter()
        .filter(|f| f.start <= gap.2 && f.end >= gap.1)
        .map(|f| f.kind.clone())
        .collect();
    let after_heal: Vec<i64> = oks
        .iter()
        .copied()
        .filter(|&t| t >= input.heal_at)
        .collect();

    let mut by_kind: HashMap<&str, u64> = HashMap::new();
    for f in &input.faults {
        *by_kind.entry(f.kind.as_str()).or_default() += 1;
    }
    let figures = json!({
        "faults": input.faults.len(),
        "faults_by_kind": by_kind,
        "holder_pauses_past_timeout": input.faults.iter().filter(|f| f.pause_past_timeout).count(),
        "holds": holds.len(),
        "read_holds": holds.iter().filter(|h| h.shared).count(),
        "reader_observations": events.iter().filter(|e| e.ev == "observe").count(),
        "increments_applied": writes.len(),
        "fence_raises_applied": input.rows.len() - writes.len(),
        "final_counter": input.counter,
        "double_holder_windows": {"count": double_windows, "duration": stats(double_ms)},
        "stale_writes": {"in_flight_past_a_newer_grant": stale.0, "refused": stale.1, "accepted_out_of_order": stale.2,
                          "acknowledged_late": stale.3, "unknown": stale.4, "stale_rows_in_store": out_of_order.len()},
        "refused_writes_total": refused.len(),
        "detection_latency_by_fault": detect.into_iter().map(|(k, v)| (k, stats(v))).collect::<HashMap<_, _>>(),
        "faults_without_cancel": undetected,
        "lease_margin_by_fault": margins.into_iter().map(|(k, v)| (k, stats(v))).collect::<HashMap<_, _>>(),
        "lease_overlaps": {"count": overlap_ms.len(), "duration": stats(overlap_ms), "exempt_operator_deletions": exempt_overlaps,
                           "by_fault": overlap_by_fault.into_iter().map(|(k, v)| (k, stats(v))).collect::<HashMap<_, _>>()},
        "cancels_on_surviving_sessions": false_cancels,
        "failover_after_kill_ms": stats(failover),
        "cancels": cancels.len(),
        "spurious_cancels": spurious.len(),
        "longest_gap_without_progress": {"ms": gap.0, "from_ms": ms(t0, gap.1), "to_ms": ms(t0, gap.2), "faults": gap_faults},
        "liveness_after_heal": {
            "increments": after_heal.len(),
            "first_after_ms": after_heal.first().map(|&t| ms(input.heal_at, t)),
        },
    });
    Outcome {
        violations,
        holds,
        figures,
        refused,
        stale_accepted,
        cancels: cancels.iter().map(|c| (c.w, c.t)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(t: i64, w: u32, ev: &str, extra: Value) -> Event {
        let mut body = extra;
        body["t"] = t.into();
        body["w"] = w.into();
        body["pid"] = (100 + w).into();
        body["ev"] = ev.into();
        Event::from_json(body).unwrap()
    }

    fn row(seq: i64, op: &str, kind: &str, worker: i64, token: i64, value: i64) -> Row {
        Row {
            seq,
            op: op.into(),
            kind: kind.into(),
            worker,
            token,
            value,
        }
    }

    fn input(rows: Vec<Row>, counter: i64, events: Vec<Event>) -> Input {
        Input {
            rows,
            counter,
            events,
            faults: Vec::new(),
            session_ms: 2000,
            t0: 0,
            heal_at: 0,
            end_at: 10_000_000_000,
        }
    }

    #[test]
    fn readers_may_be_granted_out_of_order_but_not_before_an_earlier_writer() {
        let mut history = clean_history();
        history.events.push(ev(
            11,
            3,
            "granted",
            json!({"token": 20, "valid": true, "role": "read"}),
        ));
        history.events.push(ev(
            12,
            4,
            "granted",
            json!({"token": 18, "valid": true, "role": "read"}),
        ));
        assert!(check(&history).violations.is_empty());
        history.events.push(ev(
            13,
            4,
            "granted",
            json!({"token": 11, "valid": true, "role": "read"}),
        ));
        // A grant is itself a passed check, after a newer writer's grant: both fail.
        assert_eq!(
            invariants(&check(&history)),
            ["tokens strictly increase in grant order", LEASE_INVARIANT]
        );
    }

    #[test]
    fn a_reader_seeing_a_newer_fence_under_its_lease_fails() {
        let mut history = clean_history();
        history.events.push(ev(
            11,
            3,
            "observe",
            json!({"token": 11, "fence": 12, "counter": 1, "valid": false}),
        ));
        assert!(
            check(&history).violations.is_empty(),
            "an invalid read is not held against it"
        );
        history.events.push(ev(
            12,
            3,
            "observe",
            json!({"token": 11, "fence": 12, "counter": 1, "valid": true}),
        ));
        assert_eq!(
            invariants(&check(&history)),
            [
                "a reader never sees a newer writer while its lease holds",
                LEASE_INVARIANT
            ]
        );
    }

    fn invariants(outcome: &Outcome) -> Vec<&'static str> {
        outcome.violations.iter().map(|v| v.invariant).collect()
    }

    fn clean_history() -> Input {
        let events = vec![
            ev(1, 1, "granted", json!({"token": 10, "valid": true})),
            ev(
                2,
                1,
                "invoke",
                json!({"op": "a", "kind": "fence", "token": 10, "lease_left_ms": 900}),
            ),
            ev(3, 1, "ok", json!({"op": "a", "token": 10})),
            ev(
                4,
                1,
                "invoke",
                json!({"op": "b", "kind": "write", "token": 10, "value": 1, "lease_left_ms": 800}),
            ),
            ev(5, 1, "ok", json!({"op": "b", "token": 10})),
            ev(6, 2, "granted", json!({"token": 12, "valid": true})),
            ev(
                7,
                2,
                "invoke",
                json!({"op": "c", "kind": "fence", "token": 12, "lease_left_ms": 900}),
            ),
            ev(8, 2, "ok", json!({"op": "c", "token": 12})),
            ev(
                9,
                1,
                "invoke",
                json!({"op": "d", "kind": "write", "token": 10, "value": 2, "lease_left_ms": 5}),
            ),
            ev(
                10,
                1,
                "fail",
                json!({"op": "d", "token": 10, "why": "refused"}),
            ),
        ];
        let rows = vec![
            row(1, "a", "fence", 1, 10, 0),
            row(2, "b", "write", 1, 10, 1),
            row(3, "c", "fence", 2, 12, 1),
        ];
        input(rows, 1, events)
    }

    #[test]
    fn a_clean_history_passes_and_counts_the_refused_stale_write() {
        let outcome = check(&clean_history());
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        assert_eq!(outcome.figures["stale_writes"]["refused"], 1);
        assert_eq!(outcome.figures["stale_writes"]["accepted_out_of_order"], 0);
        assert_eq!(outcome.figures["double_holder_windows"]["count"], 1);
    }

    #[test]
    fn a_stale_token_accepted_fails_with_both_rows() {
        let mut history = clean_history();
        history.events[9] = ev(10, 1, "ok", json!({"op": "d", "token": 10}));
        history.rows.push(row(4, "d", "write", 1, 10, 2));
        history.counter = 2;
        let outcome = check(&history);
        assert_eq!(invariants(&outcome), ["no stale token accepted"]);
        assert!(outcome.violations[0].evidence[1].contains("op d"));
    }

    #[test]
    fn a_lost_update_fails() {
        let mut history = clean_history();
        history.rows.push(row(4, "e", "write", 2, 12, 1));
        history.counter = 1;
        let outcome = check(&history);
        assert_eq!(
            invariants(&outcome),
            [
                "counter = applied increments, no gaps",
                "counter = applied increments, no gaps"
            ]
        );
    }

    #[test]
    fn lost_acknowledgements_and_applied_refusals_fail() {
        let mut history = clean_history();
        history.rows.remove(1);
        history.rows.push(row(4, "d", "write", 1, 10, 1));
        let outcome = check(&history);
        let found = invariants(&outcome);
        assert!(found.contains(&"no acknowledged write lost"), "{found:?}");
        assert!(found.contains(&"no failed write applied"), "{found:?}");
        assert!(found.contains(&"no stale token accepted"), "{found:?}");
    }

    #[test]
    fn a_grant_out_of_token_order_fails() {
        let mut history = clean_history();
        history
            .events
            .push(ev(11, 3, "granted", json!({"token": 11, "valid": true})));
        assert_eq!(
            invariants(&check(&history)),
            ["tokens strictly increase in grant order", LEASE_INVARIANT]
        );
    }

    #[test]
    fn a_lease_check_passing_after_a_newer_grant_fails_unless_an_operator_deleted_the_node() {
        // w1 (token 10) still passes its lease check at t=8, after w2 was granted 12 at t=6.
        let mut history = clean_history();
        history.events.push(ev(
            8,
            1,
            "lease",
            json!({"token": 10, "lease_left_ms": 700}),
        ));
        let outcome = check(&history);
        assert_eq!(invariants(&outcome), [LEASE_INVARIANT]);
        assert_eq!(outcome.figures["lease_overlaps"]["count"], 1);
        // The same after an operator deleted w1's node behind its lease: exempt, but counted.
        history.faults.push(Fault {
            kind: "delete-parent".into(),
            detail: String::new(),
            start: 5,
            end: 5,
            reference: 5,
            victim: None,
            expired_at: Some(5),
            pause_past_timeout: false,
        });
        let outcome = check(&history);
        assert!(outcome.violations.is_empty(), "{:?}", outcome.violations);
        assert_eq!(
            outcome.figures["lease_overlaps"]["exempt_operator_deletions"],
            1
        );
    }

    #[test]
    fn readers_sharing_a_lock_do_not_overlap_but_a_reader_after_a_writer_does() {
        let mut history = clean_history();
        history.events.push(ev(
            11,
            3,
            "granted",
            json!({"token": 20, "valid": true, "role": "read"}),
        ));
        history.events.push(ev(
            12,
            4,
            "granted",
            json!({"token": 21, "valid": true, "role": "read"}),
        ));
        history.events.push(ev(
            13,
            3,
            "observe",
            json!({"token": 20, "fence": 12, "counter": 1, "valid": true}),
        ));
        assert!(check(&history).violations.is_empty());
        history
            .events
            .push(ev(14, 5, "granted", json!({"token": 22, "valid": true})));
        history.events.push(ev(
            15,
            4,
            "observe",
            json!({"token": 21, "fence": 12, "counter": 1, "valid": true}),
        ));
        assert_eq!(invariants(&check(&history)), [LEASE_INVARIANT]);
    }

    #[test]
    fn a_write_after_cancellation_or_lease_end_fails() {
        let mut history = clean_history();
        history.events.insert(
            8,
            ev(
                8,
                1,
                "cancel",
                json!({"token": 10, "reason": "lease_expired"}),
            ),
        );
        assert_eq!(
            invariants(&check(&history)),
            ["no write invoked after its own cancellation"]
        );
        let mut history = clean_history();
        history.events[8].body["lease_left_ms"] = json!(-3000);
        assert_eq!(
            invariants(&check(&history)),
            ["no write invoked after its own cancellation"]
        );
    }
}
