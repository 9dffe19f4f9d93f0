//! The PostgreSQL fence against a real server: every case of the conformance kit (under READ
//! COMMITTED and SERIALIZABLE), each fence mutant caught by the case that attacks it, the SQL
//! function from `psql`, and a refusal that points at a reset ensemble.

use std::time::Duration;

use tokio_postgres::{Client, IsolationLevel, NoTls};
use zkfence::conformance::{self, FenceStore};
use zkfence::fence::FenceError;
use zkfence::{Acquire, FencedLock, LockOptions};
use zkfence_harness::{chroot, connect, shared, shared_postgres};
use zkfence_postgres::{ConformanceStore, PostgresFence};

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

zkfence_harness::proxied_kit_store!(build: PgStore, PostgresFence, direct().await);

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
    use zkfence::FenceMutant;

    async fn store(name: &str, mutant: FenceMutant) -> PgStore {
        build(name, PostgresFence::new().with_mutant(mutant)).await
    }

    zkfence_harness::mutants_caught!(store;
        the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer:
            CheckOutsideTransaction by stale_writer_paused_before_commit,
        strictly_greater_is_caught_by_order: StrictlyGreater by order,
        equality_is_caught_by_order: Equality by order,
        a_string_compare_is_caught_by_the_edge_tokens: StringCompare by edge_tokens,
        no_upsert_is_caught_by_order: NoUpsert by order,
        a_refusal_a_savepoint_undoes_is_caught_by_carrying_on:
            RefusalInSavepoint by carrying_on_after_a_refusal_commits_nothing,
        no_idle_bound_is_caught_by_the_frozen_holder: NoIdleBound by frozen_holder_does_not_block,
        a_mutant_install_is_not_the_installed_fence_of_this_version:
            RefusalInSavepoint by installed_fence_is_current,
        a_serialization_failure_taken_as_success_is_caught:
            SerializationAsSuccess by serialization_failure_retried,
    );
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
            let args = psql_args(&direct);
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

/// `psql`'s connection options for the conninfo `direct`.
fn psql_args(direct: &str) -> Vec<String> {
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
    args
}

/// The fence of `store` at `token` for `/orders`, claimed and committed.
async fn fence_at(store: &PgStore, token: i64) {
    let reader = open(&direct().await).await;
    let schema = store.schema();
    reader
        .query_one(
            &format!("SELECT {schema}.zkfence_claim('/orders', {token})"),
            &[],
        )
        .await
        .unwrap();
}

/// Issue 51's first finding, as it was run: `psql -v ON_ERROR_ROLLBACK=on` wraps every
/// statement in a savepoint and rolls back to it after an error, so the refused claim's error
/// was undone and the stale write committed. The refusal inside a savepoint now ends the
/// session: psql prints the refusal, then loses its connection, and nothing commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_on_error_rollback_commits_nothing_after_a_refusal() {
    let store = new_store("psql_rollback").await;
    let schema = store.schema();
    fence_at(&store, 20).await;
    let out = tokio::process::Command::new("psql")
        .args(psql_args(&direct().await))
        .args(["-X", "-v", "ON_ERROR_ROLLBACK=on", "-c", "BEGIN", "-c"])
        .arg(format!("SELECT {schema}.zkfence_claim('/orders', 19)"))
        .arg("-c")
        .arg(format!(
            "INSERT INTO {schema}.kit_log (key, token) VALUES ('orders', 19)"
        ))
        .args(["-c", "COMMIT"])
        .output()
        .await
        .expect("psql (Debian's postgresql-client)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "psql went on: {stderr}");
    assert!(
        stderr.contains("zkfence: refused") && stderr.contains("inside a savepoint"),
        "{stderr}"
    );
    assert!(store.log("orders").await.unwrap().is_empty(), "{stderr}");
    assert_eq!(store.seen("/orders").await.unwrap(), Some(20));
}

/// psycopg 3's nested `conn.transaction()` around the claim (Django's nested `atomic()` is
/// the same savepoint): the refusal is caught inside, the write goes on in the outer block,
/// which commits. Nothing of it may commit; the refusal is the error the inner block sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_psycopg_transaction_commits_nothing_after_a_refusal() {
    let store = new_store("psycopg_nested").await;
    let schema = store.schema().to_owned();
    fence_at(&store, 20).await;
    let python = tokio::task::spawn_blocking(zkfence_harness::python_clients)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let script = r#"
import sys, psycopg
dsn, schema = sys.argv[1], sys.argv[2]
conn = psycopg.connect(dsn)
said = []
try:
    with conn.transaction():
        try:
            with conn.transaction():
                conn.execute(f"SELECT {schema}.zkfence_claim(%s, %s)", ("/orders", "19"))
        except psycopg.Error as e:
            said.append(f"claim {e.sqlstate}")
        conn.execute(f"INSERT INTO {schema}.kit_log (key, token) VALUES ('orders', 19)")
    said.append("committed")
except psycopg.Error as e:
    said.append(f"then {type(e).__name__}")
print(" ".join(said))
"#;
    let out = tokio::process::Command::new(python)
        .args(["-c", script, &direct().await, &schema])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.starts_with("claim ZF001 then "), "{stdout}{stderr}");
    assert!(!stdout.contains("committed"), "{stdout}{stderr}");
    assert!(store.log("orders").await.unwrap().is_empty());
}

/// A holder frozen (SIGSTOP) inside its open fenced transaction, right after its claim: its
/// successor's claim and write go through once the installed idle bound ends the frozen
/// transaction, not when the frozen process wakes; woken, its write and COMMIT land nowhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_psql_holder_lets_its_successor_through_within_the_idle_bound() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let bound = Duration::from_secs(2);
    let store = build("frozen_psql", PostgresFence::new().with_idle_timeout(bound)).await;
    let schema = store.schema().to_owned();
    let mut psql = tokio::process::Command::new("psql")
        .args(psql_args(&direct().await))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql (Debian's postgresql-client)");
    let mut stdin = psql.stdin.take().unwrap();
    let claim = format!("BEGIN;\nSELECT {schema}.zkfence_claim('/frozen', 1);\n\\echo claimed\n");
    stdin.write_all(claim.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    let mut lines = BufReader::new(psql.stdout.take().unwrap()).lines();
    let claimed = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.trim() == "claimed" {
                return true;
            }
        }
        false
    });
    assert!(claimed.await.unwrap(), "psql never claimed");
    let pid = psql.id().unwrap().to_string();
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} {pid}");
    };
    signal("-STOP");
    let started = std::time::Instant::now();
    let ticket = conformance::ticket("/frozen", 2);
    let mut conn = store.connect().await.unwrap();
    let log = format!("INSERT INTO {schema}.kit_log (key, token) VALUES ('frozen', 2)");
    let wrote = tokio::time::timeout(
        bound + Duration::from_secs(10),
        store.fence().transaction(&mut conn, &ticket, |tx| {
            let log = log.clone();
            Box::pin(async move { tx.execute(&log, &[]).await })
        }),
    )
    .await;
    let waited = started.elapsed();
    signal("-CONT");
    wrote
        .unwrap_or_else(|_| panic!("the successor still waits after {waited:?}"))
        .unwrap();
    eprintln!("the successor waited {waited:?} behind the frozen holder (bound {bound:?})");
    assert!(waited >= bound - Duration::from_millis(500), "{waited:?}");
    let late =
        format!("INSERT INTO {schema}.kit_log (key, token) VALUES ('frozen', 1);\nCOMMIT;\n");
    let _ = stdin.write_all(late.as_bytes()).await;
    drop(stdin);
    let out = psql.wait_with_output().await.unwrap();
    assert!(
        !out.status.success(),
        "the woken holder's COMMIT went through"
    );
    assert_eq!(store.log("frozen").await.unwrap(), vec![2]);
}

/// The claim costs no round trip of its own: `work` starts, and sends its first statement,
/// before the claim is answered. Here the claim waits for the fence row, which another
/// transaction holds; `work` has already begun, and its write lands behind the claim once the
/// row is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_is_pipelined_with_the_work() {
    let store = new_store("pipelined").await;
    let schema = store.schema().to_owned();
    let ticket = conformance::ticket("/locks/pipelined", 0x1_0000_0001);
    store.claim(&ticket).await.unwrap();
    let mut blocker = open(&direct().await).await;
    let hold = blocker.transaction().await.unwrap();
    hold.execute(
        &format!(
            "SELECT token FROM {schema}.zkfence_fence WHERE scope = '/locks/pipelined' FOR UPDATE"
        ),
        &[],
    )
    .await
    .unwrap();
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let mut started_tx = Some(started_tx);
    let fence = store.fence().clone();
    let mut conn = store.connect().await.unwrap();
    let insert = format!("INSERT INTO {schema}.kit_log (key, token) VALUES ('pipelined', 1)");
    let fenced = tokio::spawn(async move {
        (fence.transaction(&mut conn, &ticket, |tx| {
            let started = started_tx.take();
            let insert = insert.clone();
            Box::pin(async move {
                // Polled: about to send its statement.
                if let Some(started) = started {
                    let _ = started.send(());
                }
                tx.execute(insert.as_str(), &[]).await
            })
        }))
        .await
    });
    // `work` runs while the claim still waits for the row.
    tokio::time::timeout(Duration::from_secs(10), started)
        .await
        .expect("work never started while the claim waited: the claim was not pipelined")
        .unwrap();
    assert!(
        !fenced.is_finished(),
        "the claim did not wait for the fence row"
    );
    assert!(store.log("pipelined").await.unwrap().is_empty());
    hold.rollback().await.unwrap();
    let rows = tokio::time::timeout(Duration::from_secs(10), fenced)
        .await
        .expect("the fenced transaction never ended")
        .unwrap()
        .unwrap();
    assert_eq!(rows, 1);
    assert_eq!(store.log("pipelined").await.unwrap().len(), 1);
}
