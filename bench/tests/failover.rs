//! `zkfence-bench --failover`, black-box against the shared test server: one JSON line per
//! trial, no failover faster than the server's session expiry allows, and zkfence leaders that
//! never take a step once their successor leads.

mod common;

use std::time::{Duration, Instant};

use common::run;
use zkfence_harness::{chroot, shared};

/// One round at T = 1 s (four trials: kill and pause, zkfence and Curator). A leader's session
/// expires no earlier than T after the server last heard from it, and every client here is
/// heard from at least every T/3 while connected (Curator's ZooKeeper client pings after T/3
/// idle, `zookeeper-client` after 3·T/20, zkfence's watchdog probes besides): a failover under
/// T/2 would be a standby that led before the leader's session could have expired, two leaders
/// at once. The bound is not T itself: expiry counts from the leader's last contact, which came
/// before the fault (measured: failovers of 1.46–2.21 s at T = 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_bench_prints_each_trial_and_no_zkfence_leader_steps_after_its_successor() {
    let hosts = chroot(shared(), "cli-failover").await;
    let args = [
        "--failover",
        "--rounds",
        "1",
        "--session-timeout",
        "1s",
        "--connect",
        &hosts,
        "--lock",
        "/bench",
    ];
    let started = Instant::now();
    let (code, stdout, stderr) = run(&args).await;
    assert_eq!(code, Some(0), "{args:?}: {stderr}\n{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    let trials: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(trials.len(), 4, "one line per trial: {stdout}");
    for fault in ["kill", "pause"] {
        for implementation in ["zkfence", "curator"] {
            let trial = trials
                .iter()
                .find(|t| t["fault"] == fault && t["impl"] == implementation)
                .unwrap_or_else(|| panic!("no {fault} trial of {implementation}: {stdout}"));
            check_trial(trial, fault == "pause", implementation == "zkfence");
        }
    }
    for table in [
        "kill -9 of the leader",
        "SIGSTOP of the leader",
        "zkfence ÷ Curator",
    ] {
        assert!(stdout.contains(table), "no {table:?} table: {stdout}");
    }
}

/// One trial's line: a failover no faster than expiry allows, a greater epoch, and for a
/// zkfence pause no stale step and a prompt `deposed`.
fn check_trial(trial: &serde_json::Value, pause: bool, zkfence: bool) {
    let granted = trial["granted_timeout_ms"].as_f64().unwrap();
    assert_eq!(granted, 1000.0, "{trial}");
    let failover = trial["failover_ms"].as_f64().unwrap();
    assert!(
        failover >= granted / 2.0,
        "a failover faster than expiry: {trial}"
    );
    assert!(
        trial["successor_epoch"].as_u64() > trial["leader_epoch"].as_u64(),
        "{trial}"
    );
    assert_eq!(trial["stale_steps"].is_null(), !pause, "{trial}");
    if pause && zkfence {
        assert_eq!(
            trial["stale_steps"], 0,
            "a zkfence leader stepped after its successor led: {trial}"
        );
        assert!(
            !trial["stale_window_ms"].is_null(),
            "never deposed: {trial}"
        );
    }
}
