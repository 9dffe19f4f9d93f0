//! The PostgreSQL fence through PgBouncer (Debian's 1.18), started by the harness in each pool
//! mode: every connection of the kit's store goes through the pooler (its reads, its claims,
//! the clients of other languages it plays, the frozen holder), the fence's own behind a proxy
//! in front of the pooler (to lose a commit's reply). In transaction and session mode the kit's
//! cases pass; in statement mode a fenced transaction fails with an error that names the mode,
//! and commits nothing.
//!
//! Left out: `deployment_keeps_fences` and `carrying_on_after_a_rollback_under_work_commits_nothing`
//! (PostgreSQL has nothing for them to check: they pass at once), and `lost_hold_writes_nothing`
//! (it needs a ZooKeeper lock, and its check before the commit is the client's: the pooler
//! plays no part in it; tests/conformance.rs runs it direct).

use std::time::Duration;

use tokio_postgres::NoTls;

use zkfence::conformance::{self, FenceStore, Hooks, Setup};
use zkfence::fence::FenceError;
use zkfence_harness::{shared_postgres, wait_until, LocalPgBouncer, PoolMode};
use zkfence_postgres::{ConformanceStore, PostgresFence};

/// A PgBouncer in `mode` in front of the shared server.
async fn pooler(mode: PoolMode) -> LocalPgBouncer {
    tokio::task::spawn_blocking(move || {
        LocalPgBouncer::start(shared_postgres(), mode).unwrap_or_else(|e| panic!("{e}"))
    })
    .await
    .unwrap()
}

/// The kit's store in a schema of the test's own, every connection through a PgBouncer in
/// `mode` (the fence's through a proxy in front of it); the pooler lives as long as the store.
async fn build(name: &str, mode: PoolMode) -> (ConformanceStore, LocalPgBouncer) {
    let pooler = pooler(mode).await;
    let pooled = pooler.conninfo("postgres");
    let through = zkfence_harness::through_reply_proxy(&pooled).await;
    let name = format!("{name}_{}", std::process::id());
    let store = ConformanceStore::create(
        &pooled,
        PostgresFence::new(),
        &name,
        Setup::Fresh,
        Some(through),
    )
    .await
    .unwrap_or_else(|e| panic!("the kit's store through PgBouncer in {mode} mode: {e}"));
    (store, pooler)
}

/// One test per (mode, case): the case through a PgBouncer in that mode.
macro_rules! through {
    ($mode:ident; $($name:ident: $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (store, _pooler) = build(stringify!($name), PoolMode::$mode).await;
            conformance::$case(&store).await.unwrap();
            store.remove().await.unwrap();
        }
    )*};
}

through!(Transaction;
    transaction_installed_fence_is_current: installed_fence_is_current,
    transaction_preconditions_enforced: preconditions_enforced,
    transaction_order: order,
    transaction_edge_tokens: edge_tokens,
    transaction_concurrent_first_claims: concurrent_first_claims,
    transaction_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    transaction_counter_equals_accepted_increments: counter_equals_accepted_increments,
    transaction_lost_reply_is_in_doubt: lost_reply_is_in_doubt,
    transaction_lost_claim_reply_is_in_doubt: lost_claim_reply_is_in_doubt,
    transaction_serialization_failure_retried: serialization_failure_retried,
    transaction_tokens_in_any_text_form: tokens_in_any_text_form,
    transaction_carrying_on_after_a_refusal_commits_nothing: carrying_on_after_a_refusal_commits_nothing,
    transaction_frozen_holder_does_not_block: frozen_holder_does_not_block,
);

through!(Session;
    session_installed_fence_is_current: installed_fence_is_current,
    session_preconditions_enforced: preconditions_enforced,
    session_order: order,
    session_edge_tokens: edge_tokens,
    session_concurrent_first_claims: concurrent_first_claims,
    session_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    session_counter_equals_accepted_increments: counter_equals_accepted_increments,
    session_lost_reply_is_in_doubt: lost_reply_is_in_doubt,
    session_lost_claim_reply_is_in_doubt: lost_claim_reply_is_in_doubt,
    session_serialization_failure_retried: serialization_failure_retried,
    session_tokens_in_any_text_form: tokens_in_any_text_form,
    session_carrying_on_after_a_refusal_commits_nothing: carrying_on_after_a_refusal_commits_nothing,
    session_frozen_holder_does_not_block: frozen_holder_does_not_block,
);

/// In statement mode PgBouncer ends a client's connection at its transaction's first
/// statement: the fenced transaction fails with an error that names the mode, never commits,
/// and the fence is not raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_fails_the_fenced_transaction_and_commits_nothing() {
    let (store, _pooler) = build("statement_tx", PoolMode::Statement).await;
    let ticket = conformance::ticket("/kit/statement", 0x1_0000_0001);
    let outcome = store
        .increment(&ticket, "statement", Hooks::default())
        .await;
    let err = match outcome {
        Err(FenceError::Store(err)) => err,
        other => panic!("a fenced transaction in statement mode came back {other:?}"),
    };
    let said = conformance::error_chain(&err);
    eprintln!("statement mode: {said}");
    assert!(said.contains("statement pooling mode"), "{said}");
    assert!(store.log("statement").await.unwrap().is_empty());
    assert_eq!(store.value("statement").await.unwrap(), 0);
    store.remove().await.unwrap();
}

/// The kit's first check of a deployment says what is wrong with statement mode, in words that
/// name the mode and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_mode_fails_the_preconditions_naming_the_mode() {
    let (store, _pooler) = build("statement_pre", PoolMode::Statement).await;
    let outcome = conformance::preconditions_enforced(&store).await;
    let Err(conformance::Failure::Violation(why)) = outcome else {
        panic!("statement mode passed the preconditions: {outcome:?}");
    };
    assert!(
        why.contains("statement pooling mode") && why.contains("use transaction or session mode"),
        "{why}"
    );
    store.remove().await.unwrap();
}

/// A claim refused inside a savepoint ends its server connection (the installed function
/// terminates its own backend); through PgBouncer in transaction mode the client reads the
/// refusal, then finds its connection closed, and nothing of the transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_in_a_savepoint_through_transaction_mode_closes_the_client_and_commits_nothing() {
    let (store, pooler) = build("savepoint", PoolMode::Transaction).await;
    let schema = store.schema().to_owned();
    let newer = conformance::ticket("/kit/savepoint", 20);
    store.claim(&newer).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&pooler.conninfo("postgres"), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    let claim = format!("SELECT {schema}.zkfence_claim('/kit/savepoint', 19)");
    let refused = client.simple_query(&claim).await.unwrap_err();
    assert_eq!(
        refused.code().map(|c| c.code()),
        Some(zkfence_postgres::REFUSED),
        "{refused}"
    );
    let insert = format!(
        "ROLLBACK TO SAVEPOINT s; INSERT INTO {schema}.kit_log (key, token) VALUES ('savepoint', 19); COMMIT"
    );
    let after = client.batch_execute(&insert).await;
    assert!(after.is_err(), "the transaction went on after its refusal");
    wait_until(
        Duration::from_secs(10),
        "the client's connection to close",
        || async { client.is_closed() },
    )
    .await;
    assert!(store.log("savepoint").await.unwrap().is_empty());
    assert_eq!(store.seen("/kit/savepoint").await.unwrap(), Some(20));
    store.remove().await.unwrap();
}
