//! `zkfence fence verify` through PgBouncer (Debian's 1.18), started by the harness in each
//! pool mode in front of the test binary's shared PostgreSQL, the fence installed direct: green
//! (exit 0) through transaction and session mode; red (exit 1) through statement mode, with a
//! line that names the mode and the fix.

mod common;

use std::time::{Duration, Instant};

use zkfence_harness::{shared_postgres, LocalPgBouncer, PoolMode};

use common::{postgres_database, run};

/// `zkfence fence install` direct to a database of the test's own, then `zkfence fence verify`
/// through a PgBouncer in `mode`: its (exit code, stdout, stderr), and how long it took.
async fn verify_through(mode: PoolMode) -> ((Option<i32>, String, String), Duration) {
    let name = format!("pgbouncer_{mode}_{}", std::process::id());
    let db = postgres_database(&name).await;
    let (code, out, err) = run(&["fence", "install", &db.url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let pooler = tokio::task::spawn_blocking(move || {
        LocalPgBouncer::start(shared_postgres(), mode).unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap();
    let started = Instant::now();
    let verified = run(&["fence", "verify", &pooler.url(&name)]).await;
    let took = started.elapsed();
    eprintln!("verify through PgBouncer in {mode} mode: {took:?}");
    // Its scratch scopes and schema are gone again, whatever the verdict.
    let (code, out, _) = run(&["fence", "show", &db.url]).await;
    assert_eq!((code, out.trim()), (Some(0), "no fence yet"), "{mode} mode");
    (verified, took)
}

/// Asserts that `verify` passed every case.
fn green((code, out, err): &(Option<i32>, String, String)) {
    assert_eq!(*code, Some(0), "{out}{err}");
    assert!(!out.contains("FAIL") && !out.contains("BROKEN"), "{out}");
    assert!(out.contains("cases passed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_through_pgbouncer_in_transaction_mode_is_green() {
    green(&verify_through(PoolMode::Transaction).await.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_through_pgbouncer_in_session_mode_is_green() {
    green(&verify_through(PoolMode::Session).await.0);
}

/// Statement mode splits every transaction: `verify` fails, and its first failed case says
/// why, naming the mode and the fix, rather than `db error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_through_pgbouncer_in_statement_mode_is_red_naming_the_mode() {
    let ((code, out, err), _) = verify_through(PoolMode::Statement).await;
    assert_eq!(code, Some(1), "{out}{err}");
    // The case's line, then its reason, indented.
    let mut lines = out
        .lines()
        .skip_while(|l| !l.starts_with("preconditions_enforced"));
    let (case, why) = (
        lines.next().unwrap_or_default(),
        lines.next().unwrap_or_default(),
    );
    assert!(case.contains("FAIL"), "{out}");
    assert!(
        why.contains("statement pooling mode")
            && why.contains("a pooler in statement mode splits the claim from your writes")
            && why.contains("use transaction or session mode"),
        "{out}"
    );
    assert!(err.contains("cases failed"), "{err}");
}
