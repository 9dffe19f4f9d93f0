//! `zkfence-bench --scale`, black-box against the shared test server at tiny sizes (a couple
//! of locks, waiters and contenders; zookeeper-client as the only peer, so no JVM): every
//! measurement prints its JSON line, and the summary its tables and issue 27's targets.
//! Functional, not timed: about ten seconds.

mod common;

use common::{bench, run_with};
use zkfence_harness::{chroot, shared};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_bench_prints_a_line_per_measurement_and_the_summary() {
    let hosts = chroot(shared(), "cli-bench-scale").await;
    let line = format!(
        "--scale --connect {hosts} --peers zkclient --locks 2 --waiters 2 --permits 1 \
         --semaphore-contenders 3 --writers 2 --readers 2 --candidates 3 --observers 2 \
         --changes 1 --server-warmup 0 --seconds 0.3 --scale-session-timeout 2s \
         --scale-periods 1"
    );
    let args: Vec<&str> = line.split_whitespace().collect();
    let mut command = bench(&args);
    // Deaf to the bench's settings in the environment (a --rounds or --locks there would
    // change what is measured); the command line sets what the test needs.
    for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("ZKFENCE_BENCH")) {
        command.env_remove(name);
    }
    let (code, stdout, stderr) = run_with(command).await;
    assert_eq!(code, Some(0), "{args:?}: {stderr}\n{stdout}");
    // A measurement that fails is skipped and says why on stderr: in every message below.
    let output = format!("{stdout}\nstderr:\n{stderr}");
    let lines: Vec<serde_json::Value> = (stdout.lines())
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let measured = |kind: &str, implementation: &str| {
        (lines.iter())
            .filter(|l| l["scale"] == kind && l["impl"] == implementation)
            .count()
    };
    assert_eq!(measured("holds", "zkfence"), 1, "{output}");
    assert_eq!(measured("raw", "raw"), 1, "{output}");
    // The holder alone (the idle baseline), then 2 waiters.
    assert_eq!(measured("waiters", "zkfence"), 2, "{output}");
    assert_eq!(measured("waiters", "zkclient"), 1, "{output}");
    for kind in ["semaphore", "rwlock", "election"] {
        assert_eq!(measured(kind, "zkfence"), 1, "{kind}: {output}");
    }
    let holds = lines.iter().find(|l| l["scale"] == "holds").unwrap();
    assert!(holds["multis_per_s"].as_f64().is_some(), "{holds}");
    // One probe per period per session while holding, whatever the count (one period
    // counted: a probe more or less is the window's edge).
    let per_period = holds["multis_per_period_per_session"].as_f64().unwrap();
    assert!((0.5..=1.5).contains(&per_period), "{holds}");
    let waiting = (lines.iter())
        .find(|l| l["scale"] == "waiters" && l["impl"] == "zkfence" && l["waiters"] == 2)
        .unwrap();
    for figure in ["requests_per_handoff", "bytes_per_handoff"] {
        assert!(waiting[figure].as_f64().is_some(), "{figure}: {waiting}");
    }
    assert_eq!(
        waiting["idle_waiter_writes_per_s"].as_f64(),
        Some(0.0),
        "{waiting}"
    );
    for heading in [
        "Held locks",
        "Waiters on one lock",
        "Semaphore",
        "Read/write lock",
        "Election",
        "Targets (issue 27):",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(heading)),
            "{heading}: {output}"
        );
    }
}
