//! The MySQL/MariaDB fence against a real MariaDB server: every case of the conformance kit
//! (under READ COMMITTED and REPEATABLE READ), each fence mutant caught by the case that attacks
//! it, a deadlock the work swallows, the `mariadb` client calling the procedure, and a
//! connection left inside a transaction.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel};
use zkfence::conformance::{self, FenceStore};
use zkfence::fence::FenceError;
use zkfence_harness::{chroot, connect, shared, shared_mariadb};
use zkfence_mysql::{ConformanceStore, MySqlFence};

type MyStore = ConformanceStore;

/// The shared server's root URL.
async fn root() -> String {
    tokio::task::spawn_blocking(shared_mariadb)
        .await
        .unwrap()
        .to_owned()
}

async fn open(url: &str) -> Conn {
    let opts = mysql_async::Opts::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    // TCP always: mysql_async would switch a loopback connection to the server's Unix
    // socket, around the proxy.
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

zkfence_harness::proxied_kit_store!(build: MyStore, MySqlFence, root().await);

async fn new_store(name: &str) -> MyStore {
    build(name, MySqlFence::new()).await
}

// Every case that needs nothing but the store (and the lost hold below, which takes a lock).
zkfence_testkit::conformance_tests!(new_store);

async fn repeatable_read(name: &str) -> MyStore {
    let fence = MySqlFence::new().with_isolation(IsolationLevel::RepeatableRead);
    build(name, fence).await
}

zkfence_testkit::conformance_tests!(repeatable_read;
    repeatable_read_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    repeatable_read_concurrent_first_claims: concurrent_first_claims,
    repeatable_read_counter_equals_accepted_increments: counter_equals_accepted_increments,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = new_store("lost_hold").await;
    let hosts = chroot(shared(), "mysql-lost-hold").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// What a fenced transaction left behind when its work swallowed a deadlock.
#[derive(Debug, PartialEq, Eq)]
struct AfterDeadlock {
    attempts: u32,
    items: Vec<String>,
    log: Vec<i64>,
}

/// The work inserts item `first`, then meets a deadlock (its transaction is the one InnoDB
/// rolls back: the other side has changed more rows), swallows the error, and writes the log.
/// Sound: the seal finds the claim's transaction gone, nothing of the attempt commits, and the
/// second attempt commits both writes once.
async fn swallowed_deadlock(store: &MyStore, fence: &MySqlFence) -> AfterDeadlock {
    let ticket = conformance::ticket("/kit/deadlock", 0x1_0000_0001);
    let attempts = Arc::new(AtomicU32::new(0));
    let mut conn = store.connect().await.unwrap();
    let direct = root()
        .await
        .replace("/mysql", &format!("/{}", store.database()));
    // The deadlock tells the watcher below when the other side is sent off, and goes on once
    // the watcher saw it wait (the store is not the work's to borrow).
    let (sent_tx, sent) = tokio::sync::oneshot::channel::<()>();
    let (waits_tx, waits) = tokio::sync::oneshot::channel::<()>();
    let handshake = Arc::new(std::sync::Mutex::new(Some((sent_tx, waits))));
    let transaction = fence.transaction(&mut conn, &ticket, |conn| {
        let (attempts, direct, handshake) = (attempts.clone(), direct.clone(), handshake.clone());
        Box::pin(async move {
            let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
            conn.query_drop("INSERT INTO kit_items (k) VALUES ('first')")
                .await?;
            if attempt == 1 {
                let handshake = handshake.lock().unwrap().take();
                let (sent, waits) = handshake.expect("one deadlock");
                deadlock(conn, &direct, sent, waits).await;
            }
            conn.exec_drop(
                "INSERT INTO kit_log (k, token) VALUES ('deadlock', ?)",
                (7,),
            )
            .await?;
            Ok::<_, mysql_async::Error>(())
        })
    });
    let watcher = async {
        if sent.await.is_ok() {
            wait_for_lock_wait(store).await;
            let _ = waits_tx.send(());
        }
    };
    let (outcome, ()) = tokio::join!(transaction, watcher);
    outcome.unwrap_or_else(|e| panic!("the fenced transaction: {e}"));
    let mut reader = store.direct().await.unwrap();
    AfterDeadlock {
        attempts: attempts.load(Ordering::SeqCst),
        items: reader
            .query("SELECT k FROM kit_items ORDER BY k")
            .await
            .unwrap(),
        log: (reader.query("SELECT token FROM kit_log WHERE k = 'deadlock'"))
            .await
            .unwrap(),
    }
}

/// Runs `conn` into a deadlock it loses, and swallows the error (as careless work would).
/// Tells `sent` once the other side is on its way to our row, and goes on once `waits` says
/// it waits there.
async fn deadlock(
    conn: &mut Conn,
    direct: &str,
    sent: tokio::sync::oneshot::Sender<()>,
    waits: tokio::sync::oneshot::Receiver<()>,
) {
    let mut side = open(direct).await;
    // The other side changes a non-transactional table, which InnoDB weighs above any number of
    // rows, and many rows: InnoDB rolls back the lighter transaction, ours.
    side.query_drop("CREATE TEMPORARY TABLE side_count (n INT) ENGINE = MEMORY")
        .await
        .unwrap();
    side.query_drop("START TRANSACTION").await.unwrap();
    side.query_drop("INSERT INTO side_count VALUES (1)")
        .await
        .unwrap();
    for i in 0..50 {
        side.exec_drop(
            "INSERT INTO kit_items (k) VALUES (?)",
            (format!("side{i:02}"),),
        )
        .await
        .unwrap();
    }
    side.query_drop("INSERT INTO kit_items (k) VALUES ('b')")
        .await
        .unwrap();
    conn.query_drop("INSERT INTO kit_items (k) VALUES ('a')")
        .await
        .unwrap();
    let other = tokio::spawn(async move {
        // Waits for our row 'a'; once we are rolled back it gets it, then rolls back itself.
        let outcome = side
            .query_drop("INSERT INTO kit_items (k) VALUES ('a')")
            .await;
        side.query_drop("ROLLBACK").await.unwrap();
        outcome
    });
    let _ = sent.send(());
    waits.await.expect("the watcher saw the other side wait");
    let err = conn
        .query_drop("INSERT INTO kit_items (k) VALUES ('b')")
        .await;
    match err {
        Err(mysql_async::Error::Server(e)) if e.code == 1213 => {}
        other => panic!("expected our deadlock, got {other:?}"),
    }
    let side = tokio::time::timeout(Duration::from_secs(30), other)
        .await
        .expect("the other side finished")
        .unwrap();
    assert!(
        side.is_ok(),
        "the other side was the deadlock's victim: {side:?}"
    );
}

/// Until some transaction waits for a lock on the store's `kit_items` (the other side, for
/// our row).
async fn wait_for_lock_wait(store: &MyStore) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !store.lock_waits_on("kit_items").await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lock wait within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_the_work_swallows_commits_nothing_of_that_attempt() {
    let store = new_store("deadlock").await;
    let after = swallowed_deadlock(&store, store.fence()).await;
    assert_eq!(
        after,
        AfterDeadlock {
            attempts: 2,
            items: vec!["first".into()],
            log: vec![7],
        }
    );
}

/// The same with the token already on the fence (the holder's earlier transaction claimed
/// it): the claim finds its token there and still writes a claim id of its own, which the
/// deadlock's rollback takes back, so the seal refuses the attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_under_a_second_claim_of_the_token_commits_nothing_of_that_attempt() {
    let store = new_store("deadlock_again").await;
    let earlier = conformance::ticket("/kit/deadlock", 0x1_0000_0001);
    store.claim(&earlier).await.unwrap();
    let after = swallowed_deadlock(&store, store.fence()).await;
    assert_eq!(after.attempts, 2, "{after:?}");
    assert_eq!(after.items, ["first"], "{after:?}");
}

/// `mariadb` as a script of another language's service runs it, with `token` (as
/// `ZKFENCE_TOKEN` holds it) in `sql`, against the store's database; `--force` carries on after
/// errors.
async fn mariadb(store: &MyStore, sql: &str, force: bool) -> std::process::Output {
    let root = root().await;
    let port = (root.rsplit(':').next())
        .and_then(|p| p.split('/').next())
        .unwrap()
        .to_owned();
    let mut command = tokio::process::Command::new("mariadb");
    command.args([
        "--protocol=tcp",
        "-h",
        "127.0.0.1",
        "-u",
        "root",
        "-P",
        &port,
    ]);
    if force {
        command.arg("--force");
    }
    // The statements on stdin, as a script: `--force` carries on there (with `-e` it does not).
    let mut child = command
        .arg(store.database())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the mariadb client (Debian's mariadb-client)");
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(sql.as_bytes()).await.unwrap();
    drop(stdin);
    child.wait_with_output().await.unwrap()
}

/// The recipe (autocommit off, claim, write, seal, commit) from the `mariadb` client: refused
/// with SQLSTATE ZF001 once a newer token claimed, the message ending with that token; its
/// transaction writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mariadb_client_calling_the_procedure_is_refused_below_the_fence() {
    let store = new_store("cli").await;
    let recipe = |token: i64| {
        format!(
            "SET autocommit = 0; CALL zkfence_claim('/locks/cli', {token}); \
             INSERT INTO kit_log (k, token) VALUES ('cli', {token}); \
             CALL zkfence_seal('/locks/cli'); COMMIT;"
        )
    };
    assert!(mariadb(&store, &recipe(0x2_0000_0001), false)
        .await
        .status
        .success());
    let stale = mariadb(&store, &recipe(0x2_0000_0000), false).await;
    assert!(!stale.status.success(), "the stale claim succeeded");
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(
        stderr.contains("(ZF001)") && stderr.contains("the fence holds 8589934593"),
        "{stderr}"
    );
    assert_eq!(store.log("cli").await.unwrap(), vec![0x2_0000_0001]);
}

/// `mariadb --force` carries on after the refusal: its write and its COMMIT run, and nothing
/// commits (the refused claim rolled back and left the session read-only), in a transaction or
/// in autocommit after it; the same after a claim made in autocommit mode, which is refused
/// (ZF002) and dooms the session too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_force_after_a_refusal_commits_nothing() {
    let store = new_store("force").await;
    let newer = conformance::ticket("/locks/force", 0x2_0000_0002);
    store.claim(&newer).await.unwrap();
    let stale = "SET autocommit = 0; \
                 INSERT INTO kit_log (k, token) VALUES ('force', 1); \
                 CALL zkfence_claim('/locks/force', '8589934593'); \
                 INSERT INTO kit_log (k, token) VALUES ('force', 2); \
                 COMMIT; SET autocommit = 1; \
                 INSERT INTO kit_log (k, token) VALUES ('force', 3); \
                 CALL zkfence_seal('/locks/force'); COMMIT;";
    let out = mariadb(&store, stale, true).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(ZF001)"), "{stderr}");
    assert!(
        stderr.contains("(25006)"),
        "the writes after it must fail read-only: {stderr}"
    );
    let autocommit = "CALL zkfence_claim('/locks/force', '8589934594'); \
                      INSERT INTO kit_log (k, token) VALUES ('force', 4);";
    let out = mariadb(&store, autocommit, true).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("(ZF002)") && stderr.contains("autocommit"),
        "{stderr}"
    );
    assert!(store.log("force").await.unwrap().is_empty());
}

/// `zkfence_commit` commits only the transaction of its scope's claim, and only while that
/// claim's write stands (its savepoint): from the `mariadb` client, a rollback to a savepoint
/// set before the claim, a commit naming a scope the transaction never claimed, and a second
/// commit after the first each end in `ZF003` with nothing of theirs committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_commit_refuses_a_transaction_its_claim_does_not_cover() {
    let store = new_store("covered").await;
    let refused = |sql: &'static str| {
        let store = &store;
        async move {
            let out = mariadb(store, sql, true).await;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(stderr.contains("(ZF003)"), "{sql}: {stderr}");
        }
    };
    // The claim undone by a rollback to the caller's savepoint, the write after it kept.
    refused(
        "SET autocommit = 0; SAVEPOINT mine; CALL zkfence_begin('/locks/covered', '7'); \
         ROLLBACK TO SAVEPOINT mine; INSERT INTO kit_log (k, token) VALUES ('covered', 1); \
         CALL zkfence_commit('/locks/covered');",
    )
    .await;
    // Another scope's claim.
    refused(
        "CALL zkfence_begin('/locks/other', '7'); \
         INSERT INTO kit_log (k, token) VALUES ('covered', 2); \
         CALL zkfence_commit('/locks/covered');",
    )
    .await;
    // The sound transaction commits; a second commit, with no claim of its own, does not.
    refused(
        "CALL zkfence_begin('/locks/covered', '7'); \
         INSERT INTO kit_log (k, token) VALUES ('covered', 3); \
         CALL zkfence_commit('/locks/covered'); \
         SET SESSION TRANSACTION READ WRITE; SET autocommit = 0; \
         INSERT INTO kit_log (k, token) VALUES ('covered', 4); \
         CALL zkfence_commit('/locks/covered');",
    )
    .await;
    assert_eq!(store.log("covered").await.unwrap(), vec![3]);
}

/// `zkfence_begin` decides in one statement where it accepts, and reads the row otherwise; a
/// client that asks the server to count found rows rather than changed ones (as Connector/J
/// does by default) sees every claim decided as another client does: a scope's first claim
/// and an equal token accepted, a lower one refused naming the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_found_rows_client_is_decided_as_any_other() {
    let store = new_store("found_rows").await;
    let root = root().await;
    let url = root.replace("/mysql", &format!("/{}", store.database()));
    let opts = mysql_async::Opts::from_url(&url).unwrap();
    let opts = mysql_async::OptsBuilder::from_opts(opts)
        .prefer_socket(false)
        .client_found_rows(true);
    let mut conn = Conn::new(opts).await.unwrap();
    async fn claim(conn: &mut Conn, token: &str, value: i64) -> Result<(), String> {
        let sql = format!(
            "CALL zkfence_begin('/locks/found', '{token}'); \
             INSERT INTO kit_log (k, token) VALUES ('found', {value}); \
             CALL zkfence_commit('/locks/found')"
        );
        let outcome = conn.query_drop(sql).await;
        if outcome.is_err() {
            let reset = "ROLLBACK; SET SESSION TRANSACTION READ WRITE; SET autocommit = 1";
            conn.query_drop(reset).await.unwrap();
        }
        outcome.map_err(|e| e.to_string())
    }
    claim(&mut conn, "5", 1).await.expect("the first claim");
    claim(&mut conn, "5", 2).await.expect("an equal token");
    claim(&mut conn, "6", 3).await.expect("a higher token");
    let stale = claim(&mut conn, "5", 4).await.expect_err("a lower token");
    assert!(stale.contains("the fence holds 6"), "{stale}");
    assert_eq!(store.log("found").await.unwrap(), vec![1, 2, 3]);
    assert_eq!(store.seen("/locks/found").await.unwrap(), Some(6));
}

/// A fenced transaction refuses a connection inside a transaction (its own, left open by a
/// future dropped mid-way, or the caller's), with a message that says what to do; after a
/// rollback it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_left_inside_a_transaction_is_refused_until_rolled_back() {
    let store = new_store("left_open").await;
    let ticket = conformance::ticket("/kit/open", 0x1_0000_0001);
    let mut conn = store.direct().await.unwrap();
    let (entered_tx, entered) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = std::sync::Mutex::new(Some(entered_tx));
    let dropped = tokio::time::timeout(
        Duration::from_secs(5),
        store.fence().transaction(&mut conn, &ticket, |conn| {
            if let Some(tx) = entered_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            Box::pin(async move {
                conn.query_drop("INSERT INTO kit_items (k) VALUES ('dropped')")
                    .await?;
                std::future::pending::<()>().await;
                Ok::<_, mysql_async::Error>(())
            })
        }),
    )
    .await;
    assert!(
        dropped.is_err() && entered.await.is_ok(),
        "the work never ran"
    );
    let refused = store
        .fence()
        .transaction(&mut conn, &ticket, |_| {
            Box::pin(async { Ok::<_, mysql_async::Error>(()) })
        })
        .await;
    match refused {
        Err(FenceError::Invalid(err)) => {
            assert!(err.to_string().contains("ROLLBACK"), "{err}")
        }
        other => panic!("expected the open transaction's refusal, got {other:?}"),
    }
    conn.query_drop("ROLLBACK; SET autocommit = 1")
        .await
        .unwrap();
    let items: Vec<String> = conn.query("SELECT k FROM kit_items").await.unwrap();
    assert!(items.is_empty(), "the dropped work committed: {items:?}");
    store
        .fence()
        .transaction(&mut conn, &ticket, |conn| {
            Box::pin(async move {
                conn.query_drop("INSERT INTO kit_items (k) VALUES ('after')")
                    .await
            })
        })
        .await
        .unwrap();
}

/// A database of the test's own on the shared server with `fence` installed in it, as
/// `zkfence fence install` leaves a deployment; its URL.
async fn deployment(name: &str, fence: &MySqlFence) -> String {
    let root = root().await;
    let db = format!("deployed_{name}_{}", std::process::id());
    let mut conn = open(&root).await;
    conn.query_drop(format!(
        "DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}"
    ))
    .await
    .unwrap();
    let url = root.replace("/mysql", &format!("/{db}"));
    let mut conn = open(&url).await;
    fence.install(&mut conn).await.unwrap();
    url
}

zkfence_harness::deployed_kit_store!(deployed: MyStore, MySqlFence::new());

/// What `zkfence fence verify` runs, on a sound install: every case of the deployment passes
/// through the installed procedures (the carrying-on clients, the deadlock's victim, the
/// frozen holder included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_a_sound_install() {
    let url = deployment("sound", &MySqlFence::new()).await;
    let store = deployed(&url, "verify_sound").await;
    for case in conformance::DEPLOYMENT {
        let outcome = conformance::run(case, &store).await.unwrap();
        assert_eq!(outcome, Ok(()), "{case}");
    }
    store.remove().await.unwrap();
}

/// `installed_fence_is_current`: a database without the fence, and one whose claim was
/// edited (or is an older version's), fail with the procedure's name and the command to run;
/// an install with another idle bound is still current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_install_that_is_missing_or_edited_is_not_current() {
    let root = root().await;
    let mut conn = open(&root).await;
    let empty = format!("not_installed_{}", std::process::id());
    conn.query_drop(format!(
        "DROP DATABASE IF EXISTS {empty}; CREATE DATABASE {empty}"
    ))
    .await
    .unwrap();
    let missing = deployed(&root.replace("/mysql", &format!("/{empty}")), "missing").await;
    let why = match conformance::installed_fence_is_current(&missing).await {
        Err(conformance::Failure::Violation(why)) => why,
        other => panic!("a missing install passed: {other:?}"),
    };
    assert!(
        why.contains("not installed") && why.contains("zkfence fence install mysql://"),
        "{why}"
    );
    missing.remove().await.unwrap();

    let slow = MySqlFence::new().with_idle_timeout(Duration::from_secs(30));
    let url = deployment("edited", &slow).await;
    let store = deployed(&url, "edited").await;
    conformance::installed_fence_is_current(&store)
        .await
        .expect("an install with a bound of its own is current");
    assert_eq!(
        store.frozen_bound().await.unwrap(),
        Some(Duration::from_secs(30))
    );
    // A hand-edited claim: its compare changed, the rest as installed.
    let script = slow.install_sql();
    let claim = (script.split("\n//\n"))
        .find(|s| s.starts_with("CREATE PROCEDURE zkfence_claim"))
        .expect("the claim's statement");
    let edited = claim.replace("ELSEIF seen > p_token", "ELSEIF seen >= p_token");
    assert_ne!(edited, claim);
    let mut conn = open(&url).await;
    conn.query_drop("DROP PROCEDURE zkfence_claim")
        .await
        .unwrap();
    conn.query_drop(edited).await.unwrap();
    let why = match conformance::installed_fence_is_current(&store).await {
        Err(conformance::Failure::Violation(why)) => why,
        other => panic!("an edited install passed: {other:?}"),
    };
    assert!(
        why.contains("zkfence_claim") && why.contains("again"),
        "{why}"
    );
    // Installing again mends it.
    slow.install(&mut conn).await.unwrap();
    conformance::installed_fence_is_current(&store)
        .await
        .expect("installed again");
    // An install from before zkfence_begin and zkfence_commit: not current, and a fenced
    // transaction says what to run, not only the server's "does not exist".
    (conn
        .query_drop("DROP PROCEDURE zkfence_begin; DROP PROCEDURE zkfence_commit")
        .await)
        .unwrap();
    let why = match conformance::installed_fence_is_current(&store).await {
        Err(conformance::Failure::Violation(why)) => why,
        other => panic!("an install without zkfence_begin passed: {other:?}"),
    };
    assert!(why.contains("zkfence_begin is missing"), "{why}");
    let ticket = conformance::ticket("/kit/old-install", 5);
    let err = slow
        .transaction(&mut conn, &ticket, |c| Box::pin(c.query_drop("DO 1")))
        .await
        .unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("zkfence_begin") && err.contains("zkfence fence install"),
        "{err}"
    );
    slow.install(&mut conn).await.unwrap();
    (slow
        .transaction(&mut conn, &ticket, |c| Box::pin(c.query_drop("DO 1")))
        .await)
        .expect("a fenced transaction once installed again");
    // A fence table from before the claim ids: not current; installing again adds the column
    // and keeps the fences.
    let column = "ALTER TABLE zkfence_fence DROP COLUMN claim_id";
    conn.query_drop(column).await.unwrap();
    let why = match conformance::installed_fence_is_current(&store).await {
        Err(conformance::Failure::Violation(why)) => why,
        other => panic!("a table without claim_id passed: {other:?}"),
    };
    assert!(why.contains("not this version's"), "{why}");
    slow.install(&mut conn).await.unwrap();
    conformance::installed_fence_is_current(&store)
        .await
        .expect("the column added by the install");
    assert_eq!(
        slow.seen(&mut conn, "/kit/old-install").await.unwrap(),
        Some(5)
    );
    store.remove().await.unwrap();
}

/// The idle bound: a holder frozen right after its claim (its connection open and silent) is
/// cut off by the server at the installed bound, and its successor claims then, not after
/// `innodb_lock_wait_timeout` (50 s, measured before the bound: the successor failed with
/// 1205 after 50.0 s); a stricter value the session already had is kept, and the frozen
/// holder's transaction commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_is_cut_off_at_the_installed_bound() {
    let bound = Duration::from_secs(3);
    let store = build("idle_bound", MySqlFence::new().with_idle_timeout(bound)).await;
    assert_eq!(store.frozen_bound().await.unwrap(), Some(bound));
    let old = conformance::ticket("/kit/idle", 0x1_0000_0001);
    let frozen = store.frozen_claim(&old).unwrap().await.unwrap();
    let frozen_at = std::time::Instant::now();
    let new = conformance::ticket("/kit/idle", 0x1_0000_0002);
    store.claim(&new).await.unwrap();
    let waited = frozen_at.elapsed();
    eprintln!(
        "the successor claimed {} ms after the frozen holder's claim (bound {} ms)",
        waited.as_millis(),
        bound.as_millis()
    );
    assert!(
        waited >= bound - Duration::from_millis(500) && waited < bound + Duration::from_secs(5),
        "waited {waited:?} for a bound of {bound:?}"
    );
    drop(frozen);
    assert_eq!(store.seen("/kit/idle").await.unwrap(), Some(0x1_0000_0002));

    // A stricter value the session set is kept; the others are lowered to the bound.
    let mut conn = store.direct().await.unwrap();
    conn.query_drop("SET SESSION idle_write_transaction_timeout = 1; SET autocommit = 0")
        .await
        .unwrap();
    conn.query_drop("CALL zkfence_claim('/kit/idle-strict', '5'); CALL zkfence_seal('/kit/idle-strict'); COMMIT")
        .await
        .unwrap();
    let set: Option<(u64, u64, u64)> = conn
        .query_first("SELECT @@idle_transaction_timeout, @@idle_write_transaction_timeout, @@idle_readonly_transaction_timeout")
        .await
        .unwrap();
    assert_eq!(set, Some((3, 1, 3)));
}

/// A latin1 client and a utf8mb4 client name the same lock path: the server converts the
/// scope to utf8mb4 before the fence compares it, so the latin1 client's stale token is
/// refused on the one fence of `/locks/café`. Whether the latin1 client's 49 was accepted
/// after the utf8mb4 client's 50.
async fn latin1_after_utf8mb4(store: &MyStore) -> bool {
    let mut utf8 = store.direct().await.unwrap();
    utf8.query_drop("SET NAMES utf8mb4; SET autocommit = 0; CALL zkfence_claim('/locks/café', '50'); CALL zkfence_seal('/locks/café'); COMMIT")
        .await
        .unwrap();
    let mut latin1 = store.direct().await.unwrap();
    latin1
        .query_drop("SET NAMES latin1; SET autocommit = 0")
        .await
        .unwrap();
    // The statement in latin1 bytes, as a latin1 client sends it: é is one byte, 0xE9.
    let claim: &[u8] = b"CALL zkfence_claim('/locks/caf\xe9', '49')";
    match latin1.query_drop(claim).await {
        Ok(()) => {
            let seal: &[u8] = b"CALL zkfence_seal('/locks/caf\xe9'); COMMIT";
            latin1.query_drop(seal).await.unwrap();
            true
        }
        Err(mysql_async::Error::Server(e)) if e.state == "ZF001" => {
            assert!(e.message.ends_with(" 50"), "{}", e.message);
            false
        }
        Err(err) => panic!("the latin1 client's claim: {err}"),
    }
}

/// A stale holder's claim sent while a newer holder's claim of the scope is open (claimed, not
/// yet committed), which then commits: whether the stale claim was accepted. The sound claim's
/// locking read waits for the newer transaction and then reads its token; a claim that decided
/// from a plain read would have read the committed 10 and let the stale holder in.
async fn stale_claim_behind_an_open_newer_claim(store: &MyStore) -> bool {
    let mut first = store.direct().await.unwrap();
    let committed = "SET autocommit = 0; CALL zkfence_claim('/kit/behind', '10'); CALL zkfence_seal('/kit/behind'); COMMIT";
    first.query_drop(committed).await.unwrap();
    let mut newer = store.direct().await.unwrap();
    let open = "SET autocommit = 0; CALL zkfence_claim('/kit/behind', '20')";
    newer.query_drop(open).await.unwrap();
    let mut stale = store.direct().await.unwrap();
    stale.query_drop("SET autocommit = 0").await.unwrap();
    let claim = tokio::spawn(async move {
        let claimed = stale
            .query_drop("CALL zkfence_claim('/kit/behind', '10')")
            .await;
        (claimed, stale)
    });
    // The stale claim is under way once a transaction waits for the fence row, which the
    // newer one holds (the store's database is this test's alone).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
    while !claim.is_finished() && !store.lock_waits_on("zkfence_fence").await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stale claim never waited for the fence row"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    newer
        .query_drop("CALL zkfence_seal('/kit/behind'); COMMIT")
        .await
        .unwrap();
    let (claimed, mut stale) = claim.await.unwrap();
    match claimed {
        Ok(()) => {
            stale.query_drop("ROLLBACK").await.unwrap();
            true
        }
        Err(mysql_async::Error::Server(e)) if e.state == "ZF001" => {
            assert!(e.message.ends_with(" 20"), "{}", e.message);
            false
        }
        Err(err) => panic!("the stale claim: {err}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_claim_behind_an_open_newer_claim_is_refused() {
    let store = new_store("behind").await;
    assert!(
        !stale_claim_behind_an_open_newer_claim(&store).await,
        "the stale claim was accepted after the newer one committed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latin1_client_is_refused_on_the_utf8mb4_clients_fence() {
    let store = new_store("latin1").await;
    assert!(
        !latin1_after_utf8mb4(&store).await,
        "the latin1 client's stale 49 was accepted"
    );
    assert_eq!(store.seen("/locks/café").await.unwrap(), Some(50));
    let mut conn = store.direct().await.unwrap();
    let rows: Option<i64> = conn
        .query_first("SELECT COUNT(*) FROM zkfence_fence")
        .await
        .unwrap();
    assert_eq!(rows, Some(1), "one fence row for /locks/café");
}

/// The token must reach the procedure as text: a quoted `'4.2e1'` or `'42.0'` is an error
/// (ZF002), and so is an unquoted `42.0` (a DECIMAL literal, whose text the server passes on:
/// `'42.0'`); an unquoted `4.2e1` is a DOUBLE literal, which the server turns into the text
/// `'42'` before the procedure sees it, so it claims 42: the procedure cannot tell, and the
/// docs say to send the token quoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_read_from_the_text_the_procedure_receives() {
    let store = new_store("float_forms").await;
    let mut conn = store.direct().await.unwrap();
    let mut claim = async |token: &str| {
        conn.query_drop("ROLLBACK; SET SESSION TRANSACTION READ WRITE; SET autocommit = 0")
            .await
            .unwrap();
        let call = format!(
            "CALL zkfence_claim('/kit/float', {token}); CALL zkfence_seal('/kit/float'); COMMIT"
        );
        match conn.query_drop(call).await {
            Ok(()) => "accepted".to_owned(),
            Err(mysql_async::Error::Server(e)) => e.state,
            Err(err) => panic!("{token}: {err}"),
        }
    };
    assert_eq!(claim("'4.2e1'").await, "ZF002");
    assert_eq!(claim("'42.0'").await, "ZF002");
    assert_eq!(claim("42.0").await, "ZF002");
    assert_eq!(claim("4.2e1").await, "accepted");
    assert_eq!(claim("'41'").await, "ZF001");
    assert_eq!(store.seen("/kit/float").await.unwrap(), Some(42));
}

/// The fence rules' mutants, each caught by the case that attacks it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::conformance::expect_caught;
    use zkfence::FenceMutant;

    async fn store(name: &str, mutant: FenceMutant) -> MyStore {
        build(name, MySqlFence::new().with_mutant(mutant)).await
    }

    zkfence_harness::mutants_caught!(store;
        a_commit_after_a_refusal_is_caught_by_the_client_that_carries_on:
            CommitAfterRefusal by carrying_on_after_a_refusal_commits_nothing,
        a_no_op_seal_is_caught_by_the_deadlocks_victim_that_carries_on:
            NoOpSeal by carrying_on_after_a_rollback_under_work_commits_nothing,
        no_idle_bound_is_caught_by_the_frozen_holder: NoIdleBound by frozen_holder_does_not_block,
        a_gap_locking_first_claim_is_caught_by_the_frozen_holder:
            GapLockingFirstClaim by frozen_holder_does_not_block,
        rows_affected_is_caught_by_order: RowsAffected by order,
        the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer:
            CheckOutsideTransaction by stale_writer_paused_before_commit,
        strictly_greater_is_caught_by_order: StrictlyGreater by order,
        no_upsert_is_caught_by_order: NoUpsert by order,
    );

    /// The savepoint client alone (psql's `ON_ERROR_ROLLBACK`, an ORM's nested transaction)
    /// catches it too: the refused claim's savepoint rolled back, the write commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_after_a_refusal_is_caught_by_the_client_in_savepoints() {
        use zkfence::conformance::CarryOn;
        let store = store("mutant_savepoints", FenceMutant::CommitAfterRefusal).await;
        let newer = conformance::ticket("/kit/savepoints", 0x1_0000_0002);
        store.claim(&newer).await.unwrap();
        let landed = store
            .carry_on(
                "/kit/savepoints",
                "4294967297",
                "savepoints",
                CarryOn::InSavepoints,
            )
            .unwrap()
            .await
            .unwrap();
        assert!(landed, "CommitAfterRefusal was not caught in savepoints");
        let sound = new_store("sound_savepoints").await;
        sound.claim(&newer).await.unwrap();
        let landed = sound
            .carry_on(
                "/kit/savepoints",
                "4294967297",
                "savepoints",
                CarryOn::InSavepoints,
            )
            .unwrap()
            .await
            .unwrap();
        assert!(!landed, "the sound fence let the savepoint client commit");
    }

    /// Every claim writes its claim id on the fence row, so a claim that read without a lock
    /// still locks the row before it returns: a newer holder cannot commit between the stale
    /// claim and its work, and the paused stale writer no longer catches this mutant. What it
    /// still breaks is the claim behind an open newer claim: its plain read does not wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_locking_read_is_caught_behind_an_open_newer_claim() {
        let store = store("mutant_behind", FenceMutant::NoLockingRead).await;
        assert!(
            stale_claim_behind_an_open_newer_claim(&store).await,
            "NoLockingRead was not caught: the stale claim behind the open newer one was refused"
        );
        eprintln!("NoLockingRead caught: a stale claim accepted behind an open newer claim");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_client_charset_scope_is_caught_by_the_latin1_client() {
        let store = store("mutant_charset", FenceMutant::ClientCharsetScope).await;
        assert!(
            latin1_after_utf8mb4(&store).await,
            "ClientCharsetScope was not caught: the latin1 client's 49 was refused"
        );
        eprintln!("ClientCharsetScope caught: a latin1 client's 49 accepted after 50");
    }

    /// `zkfence fence verify` against installs of the mutants: the deployment's cases catch
    /// each through the installed procedures, and the install check names the procedure
    /// (the charset mutant's parameters).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn verify_fails_on_installs_of_the_seal_and_doom_mutants() {
        for (mutant, case) in [
            (
                FenceMutant::NoOpSeal,
                "carrying_on_after_a_rollback_under_work_commits_nothing",
            ),
            (
                FenceMutant::CommitAfterRefusal,
                "carrying_on_after_a_refusal_commits_nothing",
            ),
            (FenceMutant::NoIdleBound, "frozen_holder_does_not_block"),
            (
                FenceMutant::GapLockingFirstClaim,
                "frozen_holder_does_not_block",
            ),
            // No case of the kit speaks latin1: the install check catches it.
            (
                FenceMutant::ClientCharsetScope,
                "installed_fence_is_current",
            ),
        ] {
            let name = format!("{mutant:?}").to_lowercase();
            let url = deployment(&name, &MySqlFence::new().with_mutant(mutant)).await;
            let store = deployed(&url, &format!("verify_{name}")).await;
            let outcome = conformance::run(case, &store).await.unwrap();
            expect_caught(&format!("{mutant:?} (deployed, {case})"), outcome);
            let outcome = conformance::run("installed_fence_is_current", &store).await;
            expect_caught(&format!("{mutant:?} (deployed, install)"), outcome.unwrap());
            store.remove().await.unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unsealed_commit_is_caught_by_the_swallowed_deadlock() {
        let store = store("mutant_unsealed", FenceMutant::UnsealedCommit).await;
        let fence = store.fence().clone();
        let after = swallowed_deadlock(&store, &fence).await;
        // The first attempt commits its second half alone: the log without the item.
        assert_eq!(after.attempts, 1, "{after:?}");
        assert!(after.items.is_empty(), "{after:?}");
        eprintln!("UnsealedCommit caught: {after:?}");
    }
}
