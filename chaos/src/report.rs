//! The report: a scenario's figures and violations as text for the terminal, and its timeline
//! picture (SVG). The run's `report.json` is the verdict's ([`crate::verdict`]).

use crate::checker::Outcome;
use crate::clock::ms;
use crate::fault::{Fault, FAILOVER_KINDS};
use std::fmt::Write;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const COLORS: [&str; 6] = [
    "#4e79a7", "#59a14f", "#9c755f", "#b07aa1", "#76b7b2", "#edc948",
];

/// Where things go in the picture: a lane per worker, time along x.
struct Canvas {
    t0: i64,
    workers: u32,
    width: f64,
    height: f64,
    span: f64,
}

impl Canvas {
    const LEFT: f64 = 70.0;
    const LANE: f64 = 46.0;
    const TOP: f64 = 60.0;

    fn new(workers: u32, t0: i64, end: i64) -> Canvas {
        Canvas {
            t0,
            workers,
            // About 4 px per second (at least 1400, at most 8000), so long runs stay readable.
            width: (ms(t0, end) / 250.0).clamp(1400.0, 8000.0),
            height: Self::TOP + Self::LANE * f64::from(workers) + 70.0,
            span: ms(t0, end).max(1.0),
        }
    }

    /// The x of time `t`.
    fn x(&self, t: i64) -> f64 {
        Self::LEFT + (self.width - Self::LEFT - 20.0) * ms(self.t0, t) / self.span
    }

    /// The top of worker `w`'s lane.
    fn y(&self, w: u32) -> f64 {
        Self::TOP + Self::LANE * f64::from(w)
    }

    /// The height of all the lanes.
    fn lanes(&self) -> f64 {
        Self::LANE * f64::from(self.workers)
    }
}

/// Holders as bars over time (labelled with the token's sequence), faults shaded, refused
/// writes as red ticks, cancellations as black diamonds, accepted stale writes as red crosses.
pub(crate) fn timeline_svg(
    title: &str,
    workers: u32,
    t0: i64,
    end: i64,
    outcome: &Outcome,
    faults: &[Fault],
) -> String {
    let c = Canvas::new(workers, t0, end);
    let mut s = String::new();
    header(&mut s, &c, title);
    fault_bands(&mut s, &c, faults);
    for w in 0..workers {
        let _ = writeln!(
            s,
            r##"<text x="8" y="{:.1}">worker {w}</text><line x1="{}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#ddd"/>"##,
            c.y(w) + 18.0,
            Canvas::LEFT,
            c.width - 20.0,
            c.y(w) + 30.0,
            c.y(w) + 30.0
        );
    }
    hold_bars(&mut s, &c, outcome);
    marks(&mut s, &c, outcome);
    axis(&mut s, &c);
    s.push_str("</svg>\n");
    s
}

/// The opening tag, the title and the legend.
fn header(s: &mut String, c: &Canvas, title: &str) {
    let (width, height, left) = (c.width, c.height, Canvas::LEFT);
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="white"/><text x="{left}" y="20" font-size="15">{}</text>"##,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="38" fill="#555">bars: lock holds (label: token sequence; pale R: read lock); shaded: faults; red tick: refused write; black diamond: watchdog cancel; red X: stale write accepted</text>"##
    );
}

/// A shaded band per fault (darker for server faults), named under the lanes if they fit.
fn fault_bands(s: &mut String, c: &Canvas, faults: &[Fault]) {
    for (i, f) in faults.iter().enumerate() {
        let (a, b) = (c.x(f.start), c.x(f.end).max(c.x(f.start) + 2.0));
        let fill = if f.kind.contains("server") || f.kind.contains("leader") {
            "#f4a582"
        } else {
            "#fddbc7"
        };
        let _ = writeln!(
            s,
            r##"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.6"><title>{}</title></rect>"##,
            Canvas::TOP - 8.0,
            b - a,
            c.lanes() + 8.0,
            escape(&format!("{}: {}", f.kind, f.detail))
        );
        let label_y = Canvas::TOP + c.lanes() + 14.0 + 12.0 * (i % 3) as f64;
        // Named under the lanes when they fit; always in the band's tooltip.
        if faults.len() as f64 > c.width / 40.0 {
            continue;
        }
        let _ = writeln!(
            s,
            r##"<text x="{a:.1}" y="{label_y:.1}" font-size="9" fill="#a33">{}</text>"##,
            escape(&f.kind)
        );
    }
}

/// A bar per hold, coloured by its token's sequence and labelled with it when wide enough.
fn hold_bars(s: &mut String, c: &Canvas, outcome: &Outcome) {
    for h in &outcome.holds {
        let (a, b) = (c.x(h.start), c.x(h.end).max(c.x(h.start) + 1.5));
        let color = COLORS[(h.seq.unsigned_abs() % COLORS.len() as u64) as usize];
        // Read-lock holds are hatched-light and labelled R<seq>: they may overlap each other.
        let (opacity, role) = if h.shared {
            (0.45, "read")
        } else {
            (1.0, "write")
        };
        let _ = writeln!(
            s,
            r##"<rect x="{a:.1}" y="{:.1}" width="{:.1}" height="22" fill="{color}" fill-opacity="{opacity}"><title>{role} token {} (seq {}), {:.0} ms, ended by {}</title></rect>"##,
            c.y(h.w) + 6.0,
            b - a,
            h.token,
            h.seq,
            ms(h.start, h.end),
            escape(&h.how)
        );
        if b - a > 22.0 {
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" fill="{}" font-size="9">{}{}</text>"##,
                a + 2.0,
                c.y(h.w) + 21.0,
                if h.shared { "black" } else { "white" },
                if h.shared { "R" } else { "" },
                h.seq
            );
        }
    }
}

/// Refused writes (red ticks), cancellations (black diamonds), accepted stale writes (red
/// crosses).
fn marks(s: &mut String, c: &Canvas, outcome: &Outcome) {
    for &(w, t) in &outcome.refused {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="red" stroke-width="2"/>"##,
            c.x(t),
            c.y(w) + 2.0,
            c.y(w) + 32.0
        );
    }
    for &(w, t) in &outcome.cancels {
        let (cx, cy) = (c.x(t), c.y(w) + 17.0);
        let _ = writeln!(
            s,
            r##"<path d="M{:.1} {cy:.1} L{cx:.1} {:.1} L{:.1} {cy:.1} L{cx:.1} {:.1} Z" fill="black"/>"##,
            cx - 4.0,
            cy - 5.0,
            cx + 4.0,
            cy + 5.0
        );
    }
    for &(w, t) in &outcome.stale_accepted {
        let (cx, cy) = (c.x(t), c.y(w) + 17.0);
        let _ = writeln!(
            s,
            r##"<path d="M{:.1} {:.1} L{:.1} {:.1} M{:.1} {:.1} L{:.1} {:.1}" stroke="red" stroke-width="3"/>"##,
            cx - 7.0,
            cy - 7.0,
            cx + 7.0,
            cy + 7.0,
            cx - 7.0,
            cy + 7.0,
            cx + 7.0,
            cy - 7.0
        );
    }
}

/// Seconds along the bottom, every 10, 20 or 60 s depending on the span.
fn axis(s: &mut String, c: &Canvas) {
    let axis_y = c.height - 12.0;
    let span = c.span;
    let step = if span > 600_000.0 {
        60_000.0
    } else if span > 120_000.0 {
        20_000.0
    } else {
        10_000.0
    };
    let mut tick = 0.0;
    while tick <= span {
        let px = Canvas::LEFT + (c.width - Canvas::LEFT - 20.0) * tick / span;
        let _ = writeln!(
            s,
            r##"<text x="{px:.1}" y="{axis_y}" fill="#555">{:.0} s</text>"##,
            tick / 1000.0
        );
        tick += step;
    }
}

/// Formats a latency summary `{n, p50_ms, p95_ms, max_ms}`.
pub(crate) fn latency(v: &serde_json::Value) -> String {
    match v.get("n").and_then(serde_json::Value::as_u64) {
        Some(0) | None => "none".into(),
        Some(n) => format!(
            "n={n} p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            v["p50_ms"].as_f64().unwrap_or(f64::NAN),
            v["p95_ms"].as_f64().unwrap_or(f64::NAN),
            v["max_ms"].as_f64().unwrap_or(f64::NAN)
        ),
    }
}

/// The figures as indented text.
pub(crate) fn figures_text(f: &serde_json::Value) -> String {
    let mut s = String::new();
    counts_text(&mut s, f);
    watchdog_text(&mut s, f);
    progress_text(&mut s, f);
    s
}

/// Prints a scenario's figures and verdict; a violation's evidence when `always_evidence` (a
/// scenario without a mutant) or when there are fewer than four.
pub(crate) fn print_outcome(outcome: &Outcome, always_evidence: bool) {
    println!("  figures:");
    print!("{}", figures_text(&outcome.figures));
    if outcome.violations.is_empty() {
        println!("  invariants: all hold");
    }
    for v in &outcome.violations {
        println!("  VIOLATION {}: {}", v.invariant, v.summary);
        if always_evidence || outcome.violations.len() < 4 {
            for line in &v.evidence {
                println!("      {line}");
            }
        }
    }
}

/// One line per key of `by` (sorted), with its latency summary: `    {prefix}{key} {summary}`,
/// the key padded to `width`.
fn by_key(s: &mut String, by: &serde_json::Value, prefix: &str, width: usize) {
    if let Some(by) = by.as_object() {
        let mut by: Vec<_> = by.iter().collect();
        by.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in by {
            let _ = writeln!(s, "    {prefix}{k:<width$} {}", latency(v));
        }
    }
}

/// Faults, holds, increments, stale and refused writes, double holders.
fn counts_text(s: &mut String, f: &serde_json::Value) {
    let _ = writeln!(
        s,
        "  faults injected: {} ({} holder pauses past the session timeout)",
        f["faults"], f["holder_pauses_past_timeout"]
    );
    if let Some(kinds) = f["faults_by_kind"].as_object() {
        let mut kinds: Vec<_> = kinds.iter().collect();
        kinds.sort_by(|a, b| a.0.cmp(b.0));
        let list: Vec<String> = kinds.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(s, "    by kind: {}", list.join(", "));
    }
    let _ = writeln!(
        s,
        "  holds: {} ({} under a read lock, {} reads checked), increments applied: {}, final counter: {}",
        f["holds"], f["read_holds"], f["reader_observations"], f["increments_applied"], f["final_counter"]
    );
    if f["increments_by_path"]
        .as_object()
        .is_some_and(|by| by.len() > 1)
    {
        let _ = writeln!(
            s,
            "  per lock path (store row): increments {}; nested (reentrant) holds: {}",
            f["increments_by_path"], f["nested_holds"]
        );
    }
    let st = &f["stale_writes"];
    let _ = writeln!(
        s,
        "  stale writes (outcome after a newer grant): {}; refused by the store {}; accepted out of order {}; \
         acknowledged late but committed before the newer holder's fence {}; outcome unknown {}",
        st["in_flight_past_a_newer_grant"], st["refused"], st["accepted_out_of_order"], st["acknowledged_late"], st["unknown"]
    );
    let _ = writeln!(s, "  refused writes in all: {}", f["refused_writes_total"]);
    let d = &f["double_holder_windows"];
    let _ = writeln!(s, "  double-holder windows (an older holder still running after a newer grant; expected under pauses): {}, length {}", d["count"], latency(&d["duration"]));
}

/// Detection latencies, faults without a cancel, lease margins and overlaps, false cancels.
fn watchdog_text(s: &mut String, f: &serde_json::Value) {
    let _ = writeln!(
        s,
        "  watchdog detection latency (from SIGCONT for pauses, from the fault otherwise):"
    );
    by_key(s, &f["detection_latency_by_fault"], "", 18);
    let _ = writeln!(
        s,
        "  faults whose victim saw no cancel (lease held, or the victim had already let go): {}",
        f["faults_without_cancel"]
    );
    let _ = writeln!(
        s,
        "  cancel ahead of the server's expiry (partitions), by fault:"
    );
    by_key(s, &f["lease_margin_by_fault"], "", 20);
    let o = &f["lease_overlaps"];
    let _ = writeln!(
        s,
        "  valid-lease overlaps (a check passed after a newer conflicting grant): {}, length {}; exempt (operator deleted the node): {}",
        o["count"], latency(&o["duration"]), o["exempt_operator_deletions"]
    );
    by_key(s, &o["by_fault"], "during ", 20);
    let _ = writeln!(
        s,
        "  cancels whose session went on (false cancels), by mode: {}",
        f["cancels_on_surviving_sessions"]
    );
    losses_text(s, &f["holds_lost"]);
}

/// Holds lost and the needless ones (their node survived), by fault and by configuration;
/// jeopardy spells.
fn losses_text(s: &mut String, l: &serde_json::Value) {
    let _ = writeln!(
        s,
        "  holds lost: {}, needless (the node was still there afterwards) {}, no verdict {}; jeopardy noticed {} times, steady again {}",
        l["count"], l["needless"], l["verdict_unknown"], l["jeopardy"]["noticed"], l["jeopardy"]["steady_again"]
    );
    for (title, key) in [
        ("by fault", "by_fault"),
        ("by lease configuration", "by_config"),
    ] {
        let Some(by) = l[key].as_object().filter(|by| !by.is_empty()) else {
            continue;
        };
        let mut by: Vec<_> = by.iter().collect();
        by.sort_by(|a, b| a.0.cmp(b.0));
        let list: Vec<String> = by
            .iter()
            .map(|(k, c)| format!("{k} {} ({} needless)", c["lost"], c["needless"]))
            .collect();
        let _ = writeln!(s, "    {title}: {}", list.join(", "));
    }
}

/// The failover table, in Markdown: per fault kind (the failover kinds first, then any other,
/// `none` for losses with no fault nearby) and scenario, the faults, holds lost, needless
/// cancels, valid-lease overlaps and stale writes accepted. `scenarios` pairs each scenario's
/// name with its `per_fault_kind` figure.
pub(crate) fn failover_table(scenarios: &[(&str, &serde_json::Value)]) -> String {
    let mut kinds: Vec<String> = FAILOVER_KINDS.iter().map(|k| k.to_string()).collect();
    let mut others: Vec<String> = scenarios
        .iter()
        .filter_map(|(_, by)| by.as_object())
        .flat_map(|by| by.keys().cloned())
        .filter(|k| !kinds.contains(k))
        .collect();
    others.sort();
    others.dedup();
    kinds.extend(others);
    let mut s = String::new();
    let _ = writeln!(s, "| fault kind | scenario | faults | holds lost | needless cancels | valid-lease overlaps | stale writes accepted |");
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for kind in &kinds {
        for (i, (name, by)) in scenarios.iter().enumerate() {
            let row = &by[kind.as_str()];
            let n = |key: &str| row[key].as_u64().unwrap_or(0);
            let _ = writeln!(
                s,
                "| {} | {name} | {} | {} | {} | {} | {} |",
                if i == 0 { kind.as_str() } else { "" },
                n("faults"),
                n("holds_lost"),
                n("needless_cancels"),
                n("lease_overlaps"),
                n("stale_writes_accepted")
            );
        }
    }
    s
}

/// An election's failover gaps: from a leader's loss (or from when a leader was possible
/// again) to its successor's grant, against the bound T + E.
fn succession_text(s: &mut String, g: &serde_json::Value) {
    if g["count"].as_u64().unwrap_or(0) == 0 {
        return;
    }
    let none = Vec::new();
    let unjudged = g["cannot_tell"].as_array().unwrap_or(&none);
    let _ = writeln!(
        s,
        "  new leader after a loss (at most, from the loss or from the earliest a leader was possible again): {}; after a resignation: {}; bound T + E = {} ms, {} proven over it, {} that the run cannot judge",
        latency(&g["after_loss"]),
        latency(&g["after_resignation"]),
        g["bound_ms"],
        g["over_bound"],
        unjudged.len()
    );
    by_key(s, &g["by_fault"], "after ", 20);
    let _ = writeln!(
        s,
        "    measured from recovery (the nemesis proved an outage after the loss), by fault: {}",
        g["measured_from_recovery_by_fault"]
    );
    for u in unjudged {
        let _ = writeln!(
            s,
            "    cannot tell: w{} (epoch {}) during {}: the gap is {:.0} to {:.0} ms, the bound {} ms",
            u["worker"],
            u["epoch"],
            u["fault"].as_str().unwrap_or("?"),
            u["gap_ms"][0].as_f64().unwrap_or(0.0),
            u["gap_ms"][1].as_f64().unwrap_or(0.0),
            u["bound_ms"]
        );
    }
}

/// Failover, cancels, the longest gap without progress, liveness after the heal.
fn progress_text(s: &mut String, f: &serde_json::Value) {
    succession_text(s, &f["failover_gaps"]);
    let _ = writeln!(
        s,
        "  kill -9: next grant to another worker after {}",
        latency(&f["failover_after_kill_ms"])
    );
    let _ = writeln!(
        s,
        "  cancels: {}, of which spurious (no fault nearby): {}",
        f["cancels"], f["spurious_cancels"]
    );
    let g = &f["longest_gap_without_progress"];
    let _ = writeln!(
        s,
        "  longest gap without an acknowledged increment: {:.0} ms (at {:.1} s, during {})",
        g["ms"].as_f64().unwrap_or(0.0),
        g["from_ms"].as_f64().unwrap_or(0.0) / 1000.0,
        g["faults"]
    );
    let l = &f["liveness_after_heal"];
    let _ = writeln!(
        s,
        "  after the final heal: first increment after {} ms, {} increments",
        l["first_after_ms"]
            .as_f64()
            .map_or("(none)".into(), |v| format!("{v:.0}")),
        l["increments"]
    );
}
