//! The MySQL/MariaDB fence against a real MariaDB server: every case of the conformance kit
//! (under READ COMMITTED and REPEATABLE READ), each fence mutant caught by the case that attacks
//! it, a deadlock the work swallows, the `mariadb` client calling the procedure, and a
//! connection left inside a transaction.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, IsolationLevel, Opts};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_mysql::MySqlFence;
use zkfence_testkit::conformance::{self, BoxFuture, FenceStore, Hooks, ReplySwitch};
use zkfence_testkit::harness::{chroot, connect, shared, shared_mariadb};
use zkfence_testkit::RawProxy;

/// The kit's store on MariaDB: a database per test with the fence, `kit_counter`, `kit_log`
/// (a row per accepted increment, inserted in the same transaction) and `kit_items`. The
/// fence's connections go through a proxy (to lose a commit's reply); reads go direct.
struct MyStore {
    fence: MySqlFence,
    db: String,
    /// The claims' connections (kept open: a claim is sent on one opened before its replies
    /// are dropped); `None` once broken.
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    proxied: String,
    direct: String,
    proxy: Arc<RawProxy>,
}

async fn open(url: &str) -> Conn {
    let opts = Opts::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    // TCP always: mysql_async would switch a loopback connection to the server's Unix
    // socket, around the proxy.
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    Conn::new(opts)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

impl MyStore {
    async fn new(name: &str) -> MyStore {
        MyStore::build(name, MySqlFence::new()).await
    }

    async fn build(name: &str, fence: MySqlFence) -> MyStore {
        let root = tokio::task::spawn_blocking(shared_mariadb)
            .await
            .unwrap()
            .to_owned();
        let db = format!("kit_{name}_{}", std::process::id()).replace('-', "_");
        let fence = fence.with_database(&db).unwrap();
        let mut conn = open(&root).await;
        fence.install(&mut conn).await.unwrap();
        conn.query_drop(format!(
            "CREATE TABLE `{db}`.kit_counter (k VARCHAR(200) PRIMARY KEY, value BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(200) NOT NULL, token BIGINT NOT NULL) ENGINE = InnoDB;
             CREATE TABLE `{db}`.kit_items (k VARCHAR(200) PRIMARY KEY) ENGINE = InnoDB"
        ))
        .await
        .unwrap();
        let direct = root.replace("/mysql", &format!("/{db}"));
        let port: u16 = (root.rsplit(':').next())
            .and_then(|p| p.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap();
        let proxy = Arc::new(RawProxy::start(&format!("127.0.0.1:{port}")).await.unwrap());
        let proxied = direct.replace(&format!(":{port}/"), &format!(":{}/", proxy.port()));
        let mut conns = Vec::new();
        for _ in 0..3 {
            conns.push(tokio::sync::Mutex::new(Some(open(&proxied).await)));
        }
        MyStore {
            fence,
            db,
            conns,
            proxied,
            direct,
            proxy,
        }
    }

    async fn increment_with(
        &self,
        fence: &MySqlFence,
        ticket: &FenceTicket,
        key: &str,
        hooks: Hooks,
    ) -> Result<i64, FenceError<mysql_async::Error>> {
        let hooks = Arc::new(std::sync::Mutex::new(hooks));
        let token = ticket.token().as_i64();
        // A connection of its own: the kit runs a stale and a current writer at once.
        let mut conn = open(&self.proxied).await;
        fence
            .transaction(&mut conn, ticket, |conn| {
                let (hooks, key) = (hooks.clone(), key.to_owned());
                Box::pin(async move {
                    let value: Option<i64> = conn
                        .exec_first("SELECT value FROM kit_counter WHERE k = ?", (&key,))
                        .await?;
                    let value = value.unwrap_or(0) + 1;
                    let between = hooks.lock().unwrap().between.take();
                    if let Some(between) = between {
                        between.await;
                    }
                    conn.exec_drop(
                        "INSERT INTO kit_counter (k, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)",
                        (&key, value),
                    )
                    .await?;
                    conn.exec_drop("INSERT INTO kit_log (k, token) VALUES (?, ?)", (&key, token))
                        .await?;
                    let hook = hooks.lock().unwrap().before_commit.take();
                    if let Some(hook) = hook {
                        hook();
                    }
                    Ok(value)
                })
            })
            .await
    }
}

impl FenceStore for MyStore {
    type Error = mysql_async::Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<mysql_async::Error>>> {
        Box::pin(async move {
            let mut slot = match self.conns.iter().find_map(|c| c.try_lock().ok()) {
                Some(slot) => slot,
                None => self.conns[0].lock().await,
            };
            let mut conn = match slot.take() {
                Some(conn) => conn,
                None => open(&self.proxied).await,
            };
            let outcome = self.fence.claim(&mut conn, ticket).await.map(|_| ());
            if !matches!(outcome, Err(FenceError::InDoubt { .. })) {
                *slot = Some(conn);
            }
            outcome
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<mysql_async::Error>>> {
        Box::pin(self.increment_with(&self.fence, ticket, key, hooks))
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let mut conn = open(&self.direct).await;
            let value: Option<i64> = conn
                .exec_first("SELECT value FROM kit_counter WHERE k = ?", (key,))
                .await
                .map_err(|e| e.to_string())?;
            Ok(value.unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let mut conn = open(&self.direct).await;
            conn.exec("SELECT token FROM kit_log WHERE k = ? ORDER BY seq", (key,))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let mut conn = open(&self.direct).await;
            (self.fence.seen(&mut conn, scope).await).map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            // A lock wait on this store's fence table alone (other tests share the server).
            let mut conn = open(&self.direct).await;
            let waits: Option<i64> = conn
                .exec_first(
                    "SELECT COUNT(*) FROM information_schema.INNODB_TRX
                     WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%zkfence_fence%')",
                    (&self.db,),
                )
                .await
                .map_err(|e| e.to_string())?;
            Ok(waits.unwrap_or(0) > 0)
        })
    }

    fn reply_switch(&self) -> ReplySwitch {
        let proxy = self.proxy.clone();
        Arc::new(move |on| match on {
            true => proxy.drop_replies(true),
            false => proxy.reset(),
        })
    }
}

// Every case that needs nothing but the store (and the lost hold below, which takes a lock).
zkfence_testkit::conformance_tests!(MyStore::new);

async fn repeatable_read(name: &str) -> MyStore {
    let fence = MySqlFence::new().with_isolation(IsolationLevel::RepeatableRead);
    MyStore::build(name, fence).await
}

zkfence_testkit::conformance_tests!(repeatable_read;
    repeatable_read_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    repeatable_read_concurrent_first_claims: concurrent_first_claims,
    repeatable_read_counter_equals_accepted_increments: counter_equals_accepted_increments,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = MyStore::new("lost_hold").await;
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
    let mut conn = open(&store.proxied).await;
    let direct = store.direct.clone();
    let outcome = fence
        .transaction(&mut conn, &ticket, |conn| {
            let (attempts, direct) = (attempts.clone(), direct.clone());
            Box::pin(async move {
                let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
                conn.query_drop("INSERT INTO kit_items (k) VALUES ('first')")
                    .await?;
                if attempt == 1 {
                    deadlock(conn, &direct).await;
                }
                conn.exec_drop(
                    "INSERT INTO kit_log (k, token) VALUES ('deadlock', ?)",
                    (7,),
                )
                .await?;
                Ok::<_, mysql_async::Error>(())
            })
        })
        .await;
    outcome.unwrap_or_else(|e| panic!("the fenced transaction: {e}"));
    let mut reader = open(&store.direct).await;
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
async fn deadlock(conn: &mut Conn, direct: &str) {
    let mut side = open(direct).await;
    // The other side changes many rows first: InnoDB rolls back the lighter transaction, ours.
    side.query_drop("START TRANSACTION").await.unwrap();
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
    wait_for_lock_wait(direct).await;
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

/// Until some transaction waits for a lock (the other side, for our row).
async fn wait_for_lock_wait(direct: &str) {
    let mut conn = open(direct).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waits: Option<i64> = conn
            .query_first(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
            )
            .await
            .unwrap();
        if waits.unwrap_or(0) > 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no lock wait within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_the_work_swallows_commits_nothing_of_that_attempt() {
    let store = MyStore::new("deadlock").await;
    let after = swallowed_deadlock(&store, &store.fence).await;
    assert_eq!(
        after,
        AfterDeadlock {
            attempts: 2,
            items: vec!["first".into()],
            log: vec![7],
        }
    );
}

/// Any client gets the same check from one statement: the `mariadb` client calling the
/// procedure is refused with SQLSTATE ZF001 once a newer token claimed, and its transaction
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mariadb_client_calling_the_procedure_is_refused_below_the_fence() {
    let store = MyStore::new("cli").await;
    let port = (store.direct.rsplit(':').next())
        .and_then(|p| p.split('/').next())
        .unwrap()
        .to_owned();
    let client = |token: i64| {
        let sql = format!(
            "START TRANSACTION; CALL zkfence_claim('/locks/cli', {token}); \
             INSERT INTO kit_log (k, token) VALUES ('cli', {token}); COMMIT;"
        );
        let (port, db) = (port.clone(), store.db.clone());
        async move {
            tokio::process::Command::new("mariadb")
                .args([
                    "--protocol=tcp",
                    "-h",
                    "127.0.0.1",
                    "-u",
                    "root",
                    "-P",
                    &port,
                    &db,
                ])
                .args(["-e", &sql])
                .output()
                .await
                .expect("the mariadb client (Debian's mariadb-client)")
        }
    };
    assert!(client(0x2_0000_0001).await.status.success());
    let stale = client(0x2_0000_0000).await;
    assert!(!stale.status.success(), "the stale claim succeeded");
    let stderr = String::from_utf8_lossy(&stale.stderr);
    assert!(
        stderr.contains("(ZF001)") && stderr.contains("8589934593"),
        "{stderr}"
    );
    assert_eq!(store.log("cli").await.unwrap(), vec![0x2_0000_0001]);
}

/// A fenced transaction refuses a connection inside a transaction (its own, left open by a
/// future dropped mid-way, or the caller's), with a message that says what to do; after a
/// rollback it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_left_inside_a_transaction_is_refused_until_rolled_back() {
    let store = MyStore::new("left_open").await;
    let ticket = conformance::ticket("/kit/open", 0x1_0000_0001);
    let mut conn = open(&store.direct).await;
    let (entered_tx, entered) = tokio::sync::oneshot::channel::<()>();
    let entered_tx = std::sync::Mutex::new(Some(entered_tx));
    let dropped = tokio::time::timeout(
        Duration::from_secs(5),
        store.fence.transaction(&mut conn, &ticket, |conn| {
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
        .fence
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
        .fence
        .transaction(&mut conn, &ticket, |conn| {
            Box::pin(async move {
                conn.query_drop("INSERT INTO kit_items (k) VALUES ('after')")
                    .await
            })
        })
        .await
        .unwrap();
}

/// The fence rules' mutants, each caught by the case that attacks it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::FenceMutant;
    use zkfence_testkit::conformance::expect_caught;

    async fn store(name: &str, mutant: FenceMutant) -> MyStore {
        MyStore::build(name, MySqlFence::new().with_mutant(mutant)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_affected_is_caught_by_order() {
        let store = store("mutant_rows", FenceMutant::RowsAffected).await;
        expect_caught("RowsAffected", conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_locking_read_is_caught_by_the_paused_stale_writer() {
        let store = store("mutant_nolock", FenceMutant::NoLockingRead).await;
        let outcome = conformance::stale_writer_paused_before_commit(&store).await;
        expect_caught("NoLockingRead", outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer() {
        let store = store("mutant_outside", FenceMutant::CheckOutsideTransaction).await;
        let outcome = conformance::stale_writer_paused_before_commit(&store).await;
        expect_caught("CheckOutsideTransaction", outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strictly_greater_is_caught_by_order() {
        let store = store("mutant_strict", FenceMutant::StrictlyGreater).await;
        expect_caught("StrictlyGreater", conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_upsert_is_caught_by_order() {
        let store = store("mutant_upsert", FenceMutant::NoUpsert).await;
        expect_caught("NoUpsert", conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unsealed_commit_is_caught_by_the_swallowed_deadlock() {
        let store = store("mutant_unsealed", FenceMutant::UnsealedCommit).await;
        let fence = store.fence.clone();
        let after = swallowed_deadlock(&store, &fence).await;
        // The first attempt commits its second half alone: the log without the item.
        assert_eq!(after.attempts, 1, "{after:?}");
        assert!(after.items.is_empty(), "{after:?}");
        eprintln!("UnsealedCommit caught: {after:?}");
    }
}
