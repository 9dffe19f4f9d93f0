//! `zkfence-bench --fences`, black-box against the shared test server (and the throwaway
//! PostgreSQL, MariaDB, Redis and S3 servers the bench always starts): a JSON line per round
//! with every variant and ratio, and the summary's six ratio lines. Functional, not timed.

mod common;

use common::run;
use zkfence_harness::{chroot, shared};

/// The variants every round's line reports.
const VARIANTS: [&str; 11] = [
    "postgres_unfenced",
    "postgres_fenced",
    "zookeeper_set_data",
    "zookeeper_fenced_node_check",
    "zookeeper_fenced_fence_node",
    "mysql_unfenced",
    "mysql_fenced",
    "redis_set",
    "redis_fenced",
    "object_store_put",
    "object_store_fenced",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_bench_prints_a_line_per_round_and_the_six_ratios() {
    let hosts = chroot(shared(), "cli-bench-fences").await;
    let args = [
        "--fences",
        "--connect",
        &hosts,
        "--rounds",
        "1",
        "--seconds",
        "0.3",
        "--warmup",
        "0",
    ];
    let (code, stdout, stderr) = run(&args).await;
    assert_eq!(code, Some(0), "{args:?}: {stderr}\n{stdout}");
    let rounds: Vec<serde_json::Value> = (stdout.lines())
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(rounds.len(), 1, "one line per round: {stdout}");
    let round = &rounds[0];
    assert_eq!(
        (&round["round"], &round["mode"]),
        (&1.into(), &"fences".into())
    );
    for variant in VARIANTS {
        let ops = round[variant]["ops"].as_u64();
        assert!(ops.is_some_and(|ops| ops > 0), "{variant}: {round}");
    }
    for ratio in [
        "postgres_fenced_per_unfenced",
        "zookeeper_node_check_per_set_data",
        "zookeeper_fence_node_per_set_data",
        "mysql_fenced_per_unfenced",
        "redis_fenced_per_set",
        "object_store_fenced_per_put",
    ] {
        let value = round["ratios"][ratio].as_f64();
        assert!(value.is_some_and(|v| v > 0.0), "{ratio}: {round}");
    }
    for line in [
        "postgres  fenced tx ÷ unfenced tx",
        "zookeeper fenced write (node check) ÷ set_data",
        "zookeeper fenced write (fence node) ÷ set_data",
        "mysql     fenced tx ÷ unfenced tx",
        "redis     fenced write ÷ SET",
        "object store fenced put ÷ put",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(line) && l.contains("/s")),
            "{line}: {stdout}"
        );
    }
}
