//! `zkfence-bench`'s runs, black-box against the shared test server: functional, not timed.

mod common;

use common::{bench, text};
use zkfence_harness::{chroot, shared};

/// The bench tool's output is functional, not timed: one JSON line with every field, no
/// violations, for each impl and mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_one_json_line_per_run_for_every_impl() {
    let hosts = chroot(shared(), "cli-bench").await;
    for (implementation, mode, contenders) in [
        ("zkfence", "contended", "3"),
        ("zkclient", "contended", "3"),
        ("curator", "contended", "3"),
        ("raw", "contended", "2"),
        ("zkfence", "uncontended", "1"),
        ("raw", "uncontended", "1"),
    ] {
        let args = [
            "--connect",
            &hosts,
            "--lock",
            "/bench",
            "--impl",
            implementation,
            "--mode",
            mode,
            "--contenders",
            contenders,
            "--seconds",
            "0.5",
            "--warmup",
            "0.1",
        ];
        let output = bench(&args).output().unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        for field in [
            "impl",
            "mode",
            "contenders",
            "seconds",
            "acquisitions",
            "acq_per_s",
            "cycle_p50_us",
            "cycle_p99_us",
            "handoff_p50_us",
            "handoff_p99_us",
            "writes_per_acq",
            "violations",
            "errors",
        ] {
            assert!(report.get(field).is_some(), "{field} missing in {stdout}");
        }
        assert_eq!(report["impl"], implementation);
        assert_eq!(report["violations"], 0, "{stdout}");
        assert!(report["acquisitions"].as_u64().unwrap() > 0, "{stdout}");
        // Every acquisition commits at least its create (and its delete).
        assert!(
            report["writes_per_acq"].as_f64().unwrap() >= 1.0,
            "{stdout}"
        );
        assert_eq!(
            report["handoff_p50_us"].is_null(),
            mode == "uncontended",
            "{stdout}"
        );
    }
}

/// `bench --rounds`: a JSON line per run with its round, the counted lines, and the summary
/// of ratios with their spread; `--count` adds requests and notifications to a single run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rounds_interleave_the_peers_and_summarise_the_ratios() {
    let hosts = chroot(shared(), "cli-bench-rounds").await;
    let args = [
        "--connect",
        &hosts,
        "--lock",
        "/bench",
        "--rounds",
        "2",
        "--configs",
        "1,2",
        "--peers",
        "zkclient",
        "--seconds",
        "0.3",
        "--warmup",
        "0.1",
        "--server-warmup",
        "0",
    ];
    let output = bench(&args).output().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let lines: Vec<serde_json::Value> = (stdout.lines())
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 2 rounds x 2 configurations x (zkfence, zkclient, raw), then 2 x 2 counted runs.
    let timed: Vec<_> = lines.iter().filter(|l| l.get("round").is_some()).collect();
    assert_eq!(timed.len(), 12, "{stdout}");
    let firsts: Vec<&str> = (timed.iter())
        .filter(|l| l["contenders"] == 2)
        .map(|l| l["impl"].as_str().unwrap())
        .collect();
    assert_eq!(firsts[0], "zkfence");
    assert_eq!(
        firsts[3], "zkclient",
        "the second round starts with the next peer"
    );
    let counted: Vec<_> = lines.iter().filter(|l| l["counted"] == true).collect();
    assert_eq!(counted.len(), 4, "{stdout}");
    assert!(counted
        .iter()
        .all(|l| l["requests_per_acq"].as_f64().unwrap() >= 3.0));
    assert!(
        stdout.contains("| N=2 |") && stdout.contains("throughput ÷ zkclient"),
        "{stdout}"
    );

    let single = [
        "--connect",
        &hosts,
        "--lock",
        "/bench",
        "--mode",
        "contended",
        "--contenders",
        "2",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
        "--count",
    ];
    let output = bench(&single).output().unwrap();
    let report: serde_json::Value = serde_json::from_str(text(&output).0.trim()).unwrap();
    assert!(
        report["requests_by_op"]["create2"].as_f64().unwrap() > 0.9,
        "{report}"
    );
    assert!(
        report["notifications_per_acq"].as_f64().is_some(),
        "{report}"
    );
}

/// `--pin-server` pins the throwaway server: with `--connect` there is none to pin, and the
/// bench says so before it measures anything, with the usage exit status.
#[test]
fn pin_server_with_a_server_of_the_users_is_a_usage_error() {
    let args = [
        "--connect",
        "127.0.0.1:9",
        "--rounds",
        "1",
        "--configs",
        "1",
        "--pin-server",
    ];
    let output = bench(&args).output().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("--pin-server") && stderr.contains("--connect"),
        "{stderr}"
    );
    assert!(!stdout.contains('{'), "nothing measured: {stdout}");
}
