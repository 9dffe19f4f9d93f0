//! Revocation against real servers: a request reaches the holder and never the waiters behind
//! it (whose handoff must not take the request's data change for a release), a forced
//! revocation cancels the holder, the asker writes only into holders, and Apache Curator's
//! `Revoker` and revocable `InterProcessMutex` reach zkfence and are reached by it.

use std::process::Stdio;
use std::time::Duration;
use zkfence::Acquire;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use zkfence::{Error, FencedLock, LockOptions, LossReason};
use zkfence_harness::{children, chroot, connect, shared, wait_until, watches};
use zkfence_testkit::CountingProxy;

const LOCK: &str = "/locks/revoked";
const T: Duration = Duration::from_secs(10);

async fn lock_on(hosts: &str, options: LockOptions) -> FencedLock {
    FencedLock::new(connect(hosts, T).await, LOCK, options).unwrap()
}

async fn queued(hosts: &str, n: usize) {
    wait_until(Duration::from_secs(10), "the queue to fill", || async {
        children(hosts, LOCK).await.len() == n
    })
    .await;
}

/// Holder and `waiters` waiters (with `options`, through a counting proxy); the holder is
/// asked to let go once every waiter has set its watches. Whether a waiter took the lock while
/// the holder still held it.
async fn revoked_holder_with_waiters(name: &str, waiters: usize, options: LockOptions) -> bool {
    let hosts = chroot(shared(), name).await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = CountingProxy::start(server).await;
    let holder = lock_on(&hosts, LockOptions::default()).await;
    let asker = lock_on(&hosts, LockOptions::default()).await;
    let guard = holder.acquire().await.unwrap();
    let mut waiting = Vec::new();
    let mut sessions = Vec::new();
    for i in 0..waiters {
        let lock = lock_on(&format!("{}{root}", proxy.addr), options.clone()).await;
        sessions.push(lock.client().session_id());
        waiting.push(tokio::spawn(async move { lock.acquire().await.unwrap() }));
        queued(&hosts, i + 2).await;
    }
    // Each waiter lists the queue and sets a child watch (and an exists watch on its own
    // node): the request asks a holder its waiters already watch.
    let sent = |op: i32| proxy.counts().get(&op).copied().unwrap_or(0) as usize;
    wait_until(Duration::from_secs(10), "the waiters to watch", || async {
        sent(8) >= 2 * waiters && sent(3) >= waiters
    })
    .await;
    // Where a data watch is set on the holder (it shows in `wchp`; child watches do not),
    // wait for the server to hold it.
    let holder_node = guard.node_path().to_owned();
    if sent(4) > 0 {
        wait_until(
            Duration::from_secs(10),
            "the data watch on the holder",
            || async { watches(&hosts, sessions[0], &holder_node) },
        )
        .await;
    }
    assert!(asker.request_revocation(guard.node_path()).await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), guard.revocation_requested())
        .await
        .expect("the holder heard the request");
    assert!(guard.is_revocation_requested());
    assert_eq!(guard.check(), Ok(()), "a request takes nothing");
    // The request's data change reached the waiters' data watches, if any: none may go.
    let overtaken = tokio::time::timeout(Duration::from_millis(700), async {
        loop {
            if waiting.iter().any(|w| w.is_finished()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok();
    guard.release().await.unwrap();
    for waiter in waiting {
        let next = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiters get the lock in turn")
            .unwrap();
        next.release().await.unwrap();
    }
    overtaken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reaches_the_holder_and_never_the_waiter_behind_it() {
    assert!(!revoked_holder_with_waiters("revoke-one", 1, LockOptions::default()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lets_nobody_past_the_holder_of_a_longer_queue() {
    // The last waiter watches its predecessor's data (the release marker counts there), and
    // lock-delay makes every waiter watch data.
    let options = LockOptions::default().with_lock_delay(Duration::from_secs(1));
    assert!(!revoked_holder_with_waiters("revoke-three", 3, options).await);
}

/// The mutant whose waiter takes a data change of the node ahead for its release: the request
/// lets the waiter in beside the holder.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_change_admits_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::DataChangeAdmits);
    assert!(
        revoked_holder_with_waiters("revoke-mutant", 1, options).await,
        "a revocation request let nobody in: the mutant went unnoticed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_revocation_cancels_the_holder_and_hands_the_lock_on() {
    let hosts = chroot(shared(), "revoke-force").await;
    let holder = lock_on(&hosts, LockOptions::default()).await;
    let asker = lock_on(&hosts, LockOptions::default()).await;
    let waiter = lock_on(&hosts, LockOptions::default()).await;
    let guard = holder.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    queued(&hosts, 2).await;
    assert!(asker.force_revocation(guard.node_path()).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder is cancelled");
    assert_eq!(reason, LossReason::NodeDeleted);
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the lock is handed on")
        .unwrap();
    assert!(next.token() > guard.token());
    assert!(!asker.force_revocation(guard.node_path()).await.unwrap());
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asker_writes_only_into_holders_and_only_of_its_lock() {
    let hosts = chroot(shared(), "revoke-waiter").await;
    let holder = lock_on(&hosts, LockOptions::default()).await;
    let waiter = lock_on(&hosts, LockOptions::default()).await;
    let guard = holder.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await.unwrap() });
    queued(&hosts, 2).await;
    let queue = holder.contenders().await.unwrap();
    let waiter_node = format!("{LOCK}/{}", queue[1].node);
    assert!(!holder.request_revocation(&waiter_node).await.unwrap());
    let admin = connect(&hosts, T).await;
    let (data, _) = admin.get_data(&waiter_node).await.unwrap();
    assert!(
        !data.starts_with(b"__REVOKE__"),
        "a waiter's node was written"
    );
    for foreign in ["/elsewhere/_c_x-lock-0000000001", LOCK, "relative"] {
        assert!(matches!(
            holder.request_revocation(foreign).await,
            Err(Error::NotInQueue { .. })
        ));
    }
    guard.release().await.unwrap();
    waiting.await.unwrap().release().await.unwrap();
}

/// Compiles the Curator revocation worker; its class path.
fn curator_worker() -> String {
    let source = include_str!("curator/CuratorRevokeWorker.java");
    zkfence_harness::curator::worker("CuratorRevokeWorker", source)
        .unwrap_or_else(|err| panic!("{err}"))
}

/// The worker's next line, within 30 s.
async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the worker speaks")
        .unwrap()
        .unwrap_or_default()
}

fn java(classpath: &str, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new("java")
        .args(["-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath])
        .arg("CuratorRevokeWorker")
        .args(args)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkfence_asks_a_revocable_curator_holder_to_let_go() {
    let classes = curator_worker();
    let hosts = chroot(shared(), "revoke-curator-holder").await;
    let mut curator = java(&classes, &["hold", &hosts, LOCK, "30"]);
    let mut lines = BufReader::new(curator.stdout.take().unwrap()).lines();
    let holding = next_line(&mut lines).await;
    let node = holding.strip_prefix("HOLDING ").expect(&holding).to_owned();
    let asker = lock_on(&hosts, LockOptions::default()).await;
    assert!(asker.request_revocation(&node).await.unwrap());
    assert_eq!(next_line(&mut lines).await, "REVOKED");
    assert_eq!(next_line(&mut lines).await, "RELEASED");
    // Once Curator has let go, zkfence takes the lock.
    let guard = tokio::time::timeout(Duration::from_secs(10), asker.acquire())
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    assert!(curator.wait().await.unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curators_revoker_reaches_a_zkfence_holder() {
    let classes = curator_worker();
    let hosts = chroot(shared(), "revoke-curator-asker").await;
    let holder = lock_on(&hosts, LockOptions::default()).await;
    let guard = holder.acquire().await.unwrap();
    let asked = java(&classes, &["revoke", &hosts, guard.node_path()]);
    let output = asked.wait_with_output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "ASKED");
    tokio::time::timeout(Duration::from_secs(5), guard.revocation_requested())
        .await
        .expect("Curator's request reached the zkfence holder");
    guard.release().await.unwrap();
}
