//! The PostgreSQL fence against a real server: every case of the conformance kit (under READ
//! COMMITTED and SERIALIZABLE), each fence mutant caught by the case that attacks it, the SQL
//! function from `psql`, and a refusal that points at a reset ensemble.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client, IsolationLevel, NoTls};
use zkfence::fence::conformance::{self, FenceStore};
use zkfence::fence::FenceError;
use zkfence::{Acquire, FencedLock, LockOptions};
use zkfence_harness::{chroot, connect, shared, shared_postgres};
use zkfence_postgres::{ConformanceStore, PostgresFence};
use zkfence_testkit::RawProxy;

type PgStore = ConformanceStore;

/// The shared server's connection string.
async fn direct() -> String {
    tokio::task::spawn_blocking(shared_postgres)
        .await
        .unwrap()
        .to_owned()
}

async fn open(conninfo: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {conninfo}: {e}"));
    tokio::spawn(connection);
    client
}

/// The kit's store on the shared server, in a schema of the test's own; the fence's
/// connections through a proxy (to lose a commit's reply), reads direct.
async fn build(name: &str, fence: PostgresFence) -> PgStore {
    let direct = direct().await;
    let port: u16 = direct
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .and_then(|p| p.parse().ok())
        .unwrap();
    let proxy = Arc::new(RawProxy::start(&format!("127.0.0.1:{port}")).await.unwrap());
    let proxied = direct.replace(&format!("port={port}"), &format!("port={}", proxy.port()));
    let switch: conformance::ReplySwitch = Arc::new(move |on| match on {
        true => proxy.drop_replies(true),
        false => proxy.reset(),
    });
    let name = format!("{name}_{}", std::process::id());
    ConformanceStore::create(
        &direct,
        fence,
        &name,
        conformance::Setup::Fresh,
        Some((proxied, switch)),
    )
    .await
    .unwrap_or_else(|e| panic!("the kit's store: {e}"))
}

async fn new_store(name: &str) -> PgStore {
    build(name, PostgresFence::new()).await
}

// Every case that needs nothing but the store (and the lost hold below, which takes a lock).
zkfence_testkit::conformance_tests!(new_store);

/// The same cases where isolation matters, with the fence's transactions SERIALIZABLE (every
/// claim writes the fence row, so a snapshot taken before another fenced commit fails and is
/// retried instead of reading around it).
async fn serializable(name: &str) -> PgStore {
    let fence = PostgresFence::new().with_isolation(IsolationLevel::Serializable);
    build(name, fence).await
}

async fn repeatable_read(name: &str) -> PgStore {
    let fence = PostgresFence::new().with_isolation(IsolationLevel::RepeatableRead);
    build(name, fence).await
}

zkfence_testkit::conformance_tests!(serializable;
    serializable_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    serializable_counter_equals_accepted_increments: counter_equals_accepted_increments,
);

zkfence_testkit::conformance_tests!(repeatable_read;
    repeatable_read_order: order,
    repeatable_read_counter_equals_accepted_increments: counter_equals_accepted_increments,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = new_store("lost_hold").await;
    let hosts = chroot(shared(), "pg-lost-hold").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// The fence rules' mutants, each caught by the case the kit's table names for it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::fence::conformance::{expect_caught, Outcome};
    use zkfence::FenceMutant;

    async fn store(name: &str, mutant: FenceMutant) -> PgStore {
        build(name, PostgresFence::new().with_mutant(mutant)).await
    }

    fn assert_caught(mutant: FenceMutant, outcome: Outcome) {
        expect_caught(&format!("{mutant:?}"), outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer() {
        let m = FenceMutant::CheckOutsideTransaction;
        let store = store("mutant_outside", m).await;
        assert_caught(
            m,
            conformance::stale_writer_paused_before_commit(&store).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strictly_greater_is_caught_by_order() {
        let m = FenceMutant::StrictlyGreater;
        assert_caught(
            m,
            conformance::order(&store("mutant_strict", m).await).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn equality_is_caught_by_order() {
        let m = FenceMutant::Equality;
        assert_caught(
            m,
            conformance::order(&store("mutant_equality", m).await).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_string_compare_is_caught_by_the_edge_tokens() {
        let m = FenceMutant::StringCompare;
        assert_caught(
            m,
            conformance::edge_tokens(&store("mutant_string", m).await).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_upsert_is_caught_by_order() {
        let m = FenceMutant::NoUpsert;
        assert_caught(
            m,
            conformance::order(&store("mutant_upsert", m).await).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_serialization_failure_taken_as_success_is_caught() {
        let m = FenceMutant::SerializationAsSuccess;
        let store = store("mutant_serialization", m).await;
        assert_caught(m, conformance::serialization_failure_retried(&store).await);
    }
}

/// Any client gets the same check from one statement: `psql` calling the function is refused
/// with SQLSTATE ZF001 once a newer token claimed, and its transaction writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_calling_the_function_is_refused_below_the_fence() {
    let store = new_store("psql").await;
    let schema = store.schema();
    let direct = direct().await;
    let psql = |token: i64| {
        let script = format!(
            "\\set ON_ERROR_STOP 1\nBEGIN;\nSELECT {schema}.zkfence_claim('/locks/psql', {token});\nINSERT INTO {schema}.kit_log (key, token) VALUES ('psql', {token});\nCOMMIT;\n"
        );
        let direct = direct.clone();
        async move {
            let mut args = Vec::new();
            for kv in direct.split_whitespace() {
                let (k, v) = kv.split_once('=').unwrap();
                match k {
                    "host" => args.extend(["-h".to_owned(), v.to_owned()]),
                    "port" => args.extend(["-p".to_owned(), v.to_owned()]),
                    "user" => args.extend(["-U".to_owned(), v.to_owned()]),
                    "dbname" => args.extend(["-d".to_owned(), v.to_owned()]),
                    _ => {}
                }
            }
            let mut child = tokio::process::Command::new("psql")
                .args(&args)
                .args(["-X", "-q", "-f", "-"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("psql (Debian's postgresql-client)");
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(script.as_bytes()).await.unwrap();
            drop(stdin);
            child.wait_with_output().await.unwrap()
        }
    };
    assert!(psql(0x2_0000_0001).await.status.success());
    let stale = psql(0x2_0000_0000).await;
    assert!(!stale.status.success(), "psql's stale claim succeeded");
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(
        stderr.contains("zkfence: refused") && stderr.contains("our token 8589934592"),
        "{stderr}"
    );
    assert_eq!(store.log("psql").await.unwrap(), vec![0x2_0000_0001]);
    let reader = open(&direct).await;
    let sqlstate = reader
        .query_one(
            &format!("SELECT {schema}.zkfence_claim('/locks/psql', 1)"),
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(sqlstate.code().unwrap().code(), zkfence_postgres::REFUSED);
}

/// A refusal of a hold that is still valid, by a fence holding a token of a later ZooKeeper
/// epoch, is the mark of a reset ensemble: the error says so and names the rebase command; the
/// rebase lets the holder in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_hold_refused_by_a_later_epoch_looks_reset_until_rebased() {
    let store = new_store("reset").await;
    let hosts = chroot(shared(), "pg-reset").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    let lock = FencedLock::new(client, "/locks/reset", LockOptions::default()).unwrap();
    let guard = lock.acquire().await.unwrap();
    let ticket = guard.ticket();
    // The old ensemble's holders got far: epoch 0x7fff_0000.
    let old = conformance::ticket("/locks/reset", 0x7FFF_0000_0000_0001);
    store.claim(&old).await.unwrap();
    let refused = store.claim(&ticket).await.unwrap_err();
    assert!(refused.looks_reset(), "{refused}");
    let message = refused.to_string();
    assert!(message.contains("looks reset"), "{message}");
    assert!(
        message.contains("zkfence fence rebase URL --scope SCOPE --to TOKEN"),
        "{message}"
    );
    let reader = open(&direct().await).await;
    let old_fence = store
        .fence()
        .rebase(&reader, "/locks/reset", ticket.token().as_i64())
        .await
        .unwrap();
    assert_eq!(old_fence, Some(0x7FFF_0000_0000_0001));
    store.claim(&ticket).await.unwrap();
    // A stale holder of the *same* ensemble is told plainly: a newer holder took over.
    guard.release().await.unwrap();
    let next = lock.acquire().await.unwrap();
    store.claim(&next.ticket()).await.unwrap();
    // (Its own check fails first: released. A service holding only its text is refused.)
    let stale = store.claim(&ticket.detached()).await.unwrap_err();
    assert!(!stale.looks_reset());
    assert!(stale.to_string().contains("a newer holder"), "{stale}");
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_is_idempotent_and_bad_claims_are_refused() {
    let store = new_store("install").await;
    let reader = open(&direct().await).await;
    store.fence().install(&reader).await.unwrap();
    store.fence().install(&reader).await.unwrap();
    let schema = store.schema();
    for (scope, token) in [("''", "1"), ("NULL", "1"), ("'/a'", "-1"), ("'/a'", "NULL")] {
        let err = reader
            .query_one(
                &format!("SELECT {schema}.zkfence_claim({scope}, {token})"),
                &[],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err.code().unwrap().code(),
            zkfence_postgres::BAD_CLAIM,
            "{scope}, {token}"
        );
    }
    let rows = store.fence().fences(&reader).await.unwrap();
    assert!(rows.is_empty(), "{rows:?}");
}

/// A transaction that an error aborted (here one the closure swallowed) is never reported
/// committed: PostgreSQL answers its COMMIT with a silent ROLLBACK, and the fence's commit
/// goes behind a SELECT that fails there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_transaction_is_not_reported_committed() {
    let store = new_store("aborted").await;
    let schema = store.schema().to_owned();
    let ticket = conformance::ticket("/locks/aborted", 0x1_0000_0001);
    let mut conn = store.connect().await.unwrap();
    let outcome = store
        .fence()
        .transaction(&mut conn, &ticket, |tx| {
            let schema = schema.clone();
            Box::pin(async move {
                let _ = tx.execute("SELECT 1 / 0", &[]).await; // swallowed
                tx.execute(
                    &format!("INSERT INTO {schema}.kit_log (key, token) VALUES ('aborted', 1)"),
                    &[],
                )
                .await
                .ok();
                Ok::<_, tokio_postgres::Error>("done")
            })
        })
        .await;
    match outcome {
        Err(FenceError::Store(err)) => {
            assert_eq!(err.code().map(|c| c.code()), Some("25P02"), "{err}")
        }
        other => panic!("an aborted transaction was reported as {other:?}"),
    }
    assert!(store.log("aborted").await.unwrap().is_empty());
}
