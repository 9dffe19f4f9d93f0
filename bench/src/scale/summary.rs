//! The scale bench's summary: a table per measurement with zkfence and its peer side by side
//! (medians over the rounds) and their ratio per round (median and range), then issue 27's
//! targets, each with its figure and whether it is met.

use std::fmt::Write as _;

use super::bed::Bed;
use super::line::Line;
use crate::rounds::Spread;

/// One size of a measurement: (name, value) pairs a line's size must all have.
type Size = Vec<(&'static str, usize)>;

/// The summary of `lines`.
pub(super) fn summary(bed: &Bed<'_>, lines: &[Line]) -> String {
    let mut out = String::new();
    let rounds = lines.iter().map(|l| l.round).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\n{rounds} round(s); T = {:?} (every session), probe period {:.0} ms (the library's, for T); cells are medians over the rounds, ratios zkfence ÷ peer per round: median (min–max). Requests leave pings and session closes out; bytes are both ways, pings included.",
        bed.session_timeout(),
        bed.probe_period().as_secs_f64() * 1e3,
    );
    holds_table(&mut out, lines);
    waiters_table(&mut out, lines);
    recipe_table(&mut out, lines, "semaphore", "release");
    recipe_table(&mut out, lines, "rwlock", "writer release");
    election_table(&mut out, lines);
    targets(&mut out, lines);
    out
}

/// Whether `line` is `kind` by `implementation` at `size`.
fn is(line: &Line, kind: &str, implementation: &str, size: &[(&str, usize)]) -> bool {
    line.kind == kind
        && line.implementation == implementation
        && (size.iter()).all(|(name, value)| line.size_of(name) == Some(*value))
}

/// The median over the rounds of `figure` of `implementation`'s `kind` at `size`.
fn median(
    lines: &[Line],
    kind: &str,
    implementation: &str,
    size: &[(&str, usize)],
    figure: &str,
) -> Option<f64> {
    let values: Vec<f64> = (lines.iter())
        .filter(|l| is(l, kind, implementation, size))
        .filter_map(|l| l.get(figure))
        .collect();
    Spread::of(&values).map(|s| s.median)
}

/// Per round, `a`'s figure over `b`'s (each its own line of the round).
fn ratios(
    lines: &[Line],
    a: (&str, &[(&str, usize)]),
    b: (&str, &[(&str, usize)]),
    kind: (&str, &str),
    figure: (&str, &str),
) -> Vec<f64> {
    let rounds = lines.iter().map(|l| l.round).max().unwrap_or(0);
    (1..=rounds)
        .filter_map(|round| {
            let find =
                |(implementation, size): (&str, &[(&str, usize)]), kind: &str, figure: &str| {
                    (lines.iter())
                        .find(|l| l.round == round && is(l, kind, implementation, size))
                        .and_then(|l| l.get(figure))
                };
            let (x, y) = (find(a, kind.0, figure.0)?, find(b, kind.1, figure.1)?);
            (y > 0.0).then(|| x / y)
        })
        .collect()
}

/// A figure to a few significant digits; `-` without one.
fn show(value: Option<f64>) -> String {
    match value {
        None => "-".to_owned(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 0.1 || v == 0.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// A spread, or `-`.
fn spread(values: &[f64]) -> String {
    Spread::of(values).map_or("-".to_owned(), Spread::show)
}

/// The distinct sizes of `kind`'s lines, by the names given, in the order first measured.
fn sizes(lines: &[Line], kind: &str, names: &[&'static str]) -> Vec<Size> {
    let mut seen: Vec<Size> = Vec::new();
    for line in lines.iter().filter(|l| l.kind == kind) {
        let size: Size = (names.iter())
            .filter_map(|n| Some((*n, line.size_of(n)?)))
            .collect();
        if !seen.contains(&size) {
            seen.push(size);
        }
    }
    seen
}

/// A markdown table.
fn table(out: &mut String, title: &str, headers: &[&str], rows: &[Vec<String>]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}\n\n| {} |", headers.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(headers.len()));
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
}

/// zkfence's and the peer's medians of `figure`, and their per-round ratio.
fn side_by_side(
    lines: &[Line],
    kind: &str,
    peer: &str,
    size: &[(&str, usize)],
    figure: &str,
) -> [String; 3] {
    [
        show(median(lines, kind, "zkfence", size, figure)),
        show(median(lines, kind, peer, size, figure)),
        spread(&ratios(
            lines,
            ("zkfence", size),
            (peer, size),
            (kind, kind),
            (figure, figure),
        )),
    ]
}

/// The held locks' table, zkfence against zookeeper-client's `Client::lock` (no lease).
fn holds_table(out: &mut String, lines: &[Line]) {
    let rows: Vec<Vec<String>> = (sizes(lines, "holds", &["locks"]).iter())
        .map(|size| {
            let m = |figure: &str| show(median(lines, "holds", "zkfence", size, figure));
            let k = |figure| against(lines, "holds", size, figure, &["zkclient"]);
            let steady: Vec<f64> = (lines.iter())
                .filter(|l| is(l, "holds", "zkfence", size))
                .filter_map(|l| l.get("steady_after_up_periods"))
                .collect();
            let sessions = (lines.iter())
                .find(|l| is(l, "holds", "zkfence", size))
                .and_then(|l| l.size_of("sessions"));
            let mut row = vec![size[0].1.to_string(), show(sessions.map(|s| s as f64))];
            row.extend(k("acquire_all_s"));
            row.extend(k("acquire_requests_per_lock"));
            row.extend(k("rss_bytes_per_hold"));
            row.extend(k("heap_bytes_per_hold"));
            let watches = side_by_side(lines, "holds", "zkclient", size, "server_watches_per_hold");
            row.extend(watches.into_iter().take(2));
            row.extend(k("server_data_bytes_per_hold"));
            row.extend(
                [
                    "multis_per_period_per_session",
                    "multi_reads_per_period_per_session",
                    "bytes_per_s",
                    "server_writes_per_s",
                    "client_cpu_ms_per_s",
                    "restart_down_ms",
                    "in_jeopardy",
                    "steady_after_up_ms",
                ]
                .map(m),
            );
            row.extend([spread(&steady), m("lost_in_restart")]);
            row
        })
        .collect();
    let headers = [
        "locks held",
        "sessions",
        "acquire all s zkfence",
        "÷ zkclient",
        "requests/acquire zkfence",
        "÷ zkclient",
        "RSS B/hold zkfence",
        "÷ zkclient",
        "heap B/hold zkfence",
        "÷ zkclient",
        "server watches/hold zkfence",
        "zkclient",
        "server data B/hold zkfence",
        "÷ zkclient",
        "probes/period/session held",
        "reads/period/session held",
        "bytes/s held",
        "server writes/s held",
        "client CPU ms/s held",
        "restart: down ms",
        "in jeopardy",
        "steady after up ms",
        "÷ probe period",
        "lost",
    ];
    table(
        out,
        "Held locks (zkfence FencedLock with a grace of T, zookeeper-client Client::lock; the paths exist; the restart is the local server's, kill -9 and start, zkfence's alone):",
        &headers,
        &rows,
    );
}

/// zkfence's median of `figure`, then its per-round ratio to each of `peers` that measured it.
fn against(
    lines: &[Line],
    kind: &str,
    size: &[(&str, usize)],
    figure: &str,
    peers: &[&str],
) -> Vec<String> {
    let mut cells = vec![show(median(lines, kind, "zkfence", size, figure))];
    for peer in peers {
        let pair = ((figure, figure), (kind, kind));
        let per_round = ratios(lines, ("zkfence", size), (*peer, size), pair.1, pair.0);
        cells.push(spread(&per_round));
    }
    cells
}

/// The critical section the drains' waiters held for, as the lines say.
fn hold_text(lines: &[Line]) -> String {
    let held = (lines.iter()).find_map(|line| line.get("hold_ms"));
    match held {
        Some(ms) if ms > 0.0 => format!("{ms} ms"),
        _ => "nothing".to_owned(),
    }
}

/// The waiters' tables, after the raw notification rate: the drain, and the idle cost.
fn waiters_table(out: &mut String, lines: &[Line]) {
    let raw = median(lines, "raw", "raw", &[], "notifications_per_s");
    let raw_p50 = median(lines, "raw", "raw", &[], "notification_p50_us");
    let _ = writeln!(
        out,
        "\nraw delete→notification (one client's delete to another's watch, through a proxy as the drains): p50 {} µs, {} /s",
        show(raw_p50),
        show(raw)
    );
    let peers = ["zkclient", "curator"];
    let sizes: Vec<Size> = (sizes(lines, "waiters", &["waiters"]).into_iter())
        .filter(|s| s[0].1 > 0)
        .collect();
    let rows: Vec<Vec<String>> = (sizes.iter())
        .map(|size| {
            let k = |figure| against(lines, "waiters", size, figure, &peers);
            let mut row = vec![size[0].1.to_string()];
            row.extend(k("handoffs_per_s"));
            row.push(spread(&ratios(
                lines,
                ("zkfence", size),
                ("raw", &[]),
                ("waiters", "raw"),
                ("handoffs_per_s", "notifications_per_s"),
            )));
            row.extend(k("requests_per_handoff"));
            row.extend(k("server_writes_per_handoff"));
            row.extend(k("notifications_per_handoff"));
            row.extend(k("bytes_per_handoff"));
            row.extend(k("server_watches_per_waiter"));
            row
        })
        .collect();
    let headers = [
        "waiters",
        "drain handoffs/s zkfence",
        "÷ zkclient",
        "÷ Curator",
        "÷ raw rate",
        "requests/handoff zkfence",
        "÷ zkclient",
        "÷ Curator",
        "commits/handoff zkfence",
        "÷ zkclient",
        "÷ Curator",
        "notifications/handoff zkfence",
        "÷ zkclient",
        "÷ Curator",
        "bytes/handoff zkfence",
        "÷ zkclient",
        "÷ Curator",
        "server watches/waiter zkfence",
        "÷ zkclient",
        "÷ Curator",
    ];
    let title = format!("Waiters on one lock, each its own session (zkfence FencedLock, zookeeper-client Client::lock, Curator InterProcessMutex); the drain from the holder's release to the last waiter's, every waiter holding {} (--hold) then releasing:", hold_text(lines));
    table(out, &title, &headers, &rows);
    idle_table(out, lines);
}

/// The waiters' idle table: what they send while they wait, and the holder's probes beside.
fn idle_table(out: &mut String, lines: &[Line]) {
    let zero: Size = vec![("waiters", 0)];
    let rows: Vec<Vec<String>> = (sizes(lines, "waiters", &["waiters"]).iter())
        .map(|size| {
            let m = |implementation, figure| {
                show(median(lines, "waiters", implementation, size, figure))
            };
            let to_none = |figure| {
                let pair = (figure, figure);
                let waiting = ("zkfence", size.as_slice());
                let none = ("zkfence", zero.as_slice());
                spread(&ratios(lines, waiting, none, ("waiters", "waiters"), pair))
            };
            vec![
                size[0].1.to_string(),
                m("zkfence", "idle_waiter_writes_per_s"),
                m("zkclient", "idle_waiter_writes_per_s"),
                m("curator", "idle_waiter_writes_per_s"),
                m("zkfence", "idle_waiter_bytes_per_s"),
                m("zkfence", "idle_writes_per_s"),
                to_none("idle_writes_per_s"),
                m("zkfence", "idle_server_writes_per_s"),
                to_none("idle_server_writes_per_s"),
            ]
        })
        .collect();
    let headers = [
        "waiters",
        "waiters' writes/s zkfence",
        "zkclient",
        "Curator",
        "waiters' bytes/s zkfence",
        "holder's + waiters' writes/s zkfence",
        "÷ with none",
        "server writes/s (all)",
        "÷ with none",
    ];
    table(out, "Waiting, before the release (zkfence over whole probe periods of its holder, the peers as long; 0 = the holder alone):", &headers, &rows);
}

/// A recipe's table (`kind`: semaphore, rwlock), zkfence against Curator, per `unit`.
fn recipe_table(out: &mut String, lines: &[Line], kind: &str, unit: &str) {
    let names: &[&'static str] = match kind {
        "semaphore" => &["permits", "contenders"],
        _ => &["writers", "readers"],
    };
    let rows: Vec<Vec<String>> = (sizes(lines, kind, names).iter())
        .map(|size| {
            let k = |figure| side_by_side(lines, kind, "curator", size, figure);
            let mut row: Vec<String> = size.iter().map(|(_, v)| v.to_string()).collect();
            row.extend(k("requests_per_release"));
            row.extend(k("notifications_per_release"));
            row.extend(k("bytes_per_release"));
            row.extend(k("releases_per_s").into_iter().take(2));
            row.extend(k("server_writes_per_release").into_iter().take(2));
            row.extend(k("server_cpu_us_per_release").into_iter().take(2));
            row.extend(k("server_watches_per_contender").into_iter().take(2));
            row
        })
        .collect();
    let mut headers: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    headers.extend([
        format!("requests/{unit} zkfence"),
        "Curator".into(),
        "÷".into(),
        format!("notifications/{unit} zkfence"),
        "Curator".into(),
        "÷".into(),
        format!("bytes/{unit} zkfence"),
        "Curator".into(),
        "÷".into(),
        format!("{unit}s/s zkfence"),
        "Curator".into(),
        format!("server writes/{unit} zkfence"),
        "Curator".into(),
        format!("server CPU µs/{unit} zkfence"),
        "Curator".into(),
        "server watches/contender zkfence".into(),
        "Curator".into(),
    ]);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    let title = match kind {
        "semaphore" => "Semaphore (zkfence FencedSemaphore, Curator InterProcessSemaphoreV2), each contender its own session; the holders keep their leases until all have queued, then all drain:",
        _ => "Read/write lock (zkfence FencedRwLock, Curator InterProcessReadWriteLock): the first writer holds, the other writers queue behind it, the readers behind them; counted from the first writer's release to the last holder's:",
    };
    table(out, title, &headers, &rows);
}

/// The election's table.
fn election_table(out: &mut String, lines: &[Line]) {
    let rows: Vec<Vec<String>> = (sizes(lines, "election", &["candidates", "observers"]).iter())
        .map(|size| {
            let k = |figure| side_by_side(lines, "election", "curator", size, figure);
            let mut row: Vec<String> = size.iter().map(|(_, v)| v.to_string()).collect();
            row.extend(k("observer_requests_per_observer_change"));
            row.extend(k("observer_notifications_per_observer_change"));
            row.extend(k("observer_bytes_per_observer_change"));
            row.extend(k("candidate_requests_per_change"));
            row.extend(k("ms_per_change").into_iter().take(2));
            row
        })
        .collect();
    let headers = [
        "candidates",
        "observers",
        "observer requests/observer/change zkfence",
        "Curator",
        "÷",
        "observer notifications/observer/change zkfence",
        "Curator",
        "÷",
        "observer bytes/observer/change zkfence",
        "Curator",
        "÷",
        "candidate requests/change zkfence",
        "Curator",
        "÷",
        "ms/change zkfence",
        "Curator",
    ];
    table(out, "Election (zkfence FencedElection::observe; Curator LeaderLatch candidates, observers with a plain getChildren watch and a getData of the first node); the leader resigns (closes its latch), a change ends when every observer has seen the new leader:", &headers, &rows);
}

/// Issue 27's targets, each with its figure.
fn targets(out: &mut String, lines: &[Line]) {
    let _ = writeln!(out, "\nTargets (issue 27):");
    let verdict = |values: &[f64], limit: f64| match Spread::of(values) {
        Some(s) if s.median <= limit => format!("{} — met", s.show()),
        Some(s) => format!("{} — NOT met", s.show()),
        None => "not measured".to_owned(),
    };
    let waiting: Size = vec![("waiters", 1000)];
    let none: Size = vec![("waiters", 0)];
    let to_none = |figure| {
        let pair = (figure, figure);
        let kinds = ("waiters", "waiters");
        ratios(
            lines,
            ("zkfence", &waiting),
            ("zkfence", &none),
            kinds,
            pair,
        )
    };
    let _ = writeln!(
        out,
        "- writes/s with 1,000 waiting sessions ÷ with none (the holder's and the waiters', over whole probe periods of the holder; ≤ 1.1): {}",
        verdict(&to_none("idle_writes_per_s"), 1.1)
    );
    let _ = writeln!(
        out,
        "  the same by the server's zxid (every transaction: other sessions' closes too): {}",
        verdict(&to_none("idle_server_writes_per_s"), 1.1)
    );
    let steady: Vec<f64> = (lines.iter())
        .filter(|l| is(l, "holds", "zkfence", &[("locks", 1000)]))
        .filter_map(|l| l.get("steady_after_up_periods"))
        .collect();
    let _ = writeln!(out, "- all of K = 1,000 holds steady again after a restart with a grace, in probe periods after the server serves again (≤ 2): {}", verdict(&steady, 2.0));
    let ten: Size = vec![("locks", 10_000)];
    let of_ten = |figure: &str| -> Vec<f64> {
        (lines.iter())
            .filter(|l| is(l, "holds", "zkfence", &ten))
            .filter_map(|l| l.get(figure))
            .collect()
    };
    let _ = writeln!(out, "- all of 10,000 holds on one session steady again after a restart, in probe periods (≤ 2, issue 37): {}", verdict(&of_ten("steady_after_up_periods"), 2.0));
    let _ = writeln!(
        out,
        "- memory per hold at 10,000, bytes (≤ 1,024, issue 37): {}",
        verdict(&of_ten("rss_bytes_per_hold"), 1024.0)
    );
    let _ = writeln!(
        out,
        "- heap per hold at 10,000 (the allocator's bytes in use), bytes (≤ 1,024): {}",
        verdict(&of_ten("heap_bytes_per_hold"), 1024.0)
    );
    let n16: Size = vec![("permits", 16)];
    let requests = ("requests_per_release", "requests_per_release");
    let semaphore = ratios(
        lines,
        ("zkfence", &n16),
        ("curator", &n16),
        ("semaphore", "semaphore"),
        requests,
    );
    let _ = writeln!(
        out,
        "- semaphore requests per release at n = 16, zkfence ÷ Curator (≤ 1.5): {}",
        verdict(&semaphore, 1.5)
    );
}
