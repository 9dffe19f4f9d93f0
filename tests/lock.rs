//! The fenced lock against a real ZooKeeper server: exclusion, FIFO, tokens, cleanup on every
//! way out, faults, and bad input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zkfence::Acquire;

use zkfence::{Error, FencedLock, LockOptions};
use zkfence_harness::{
    children, chroot, connect, expire_session, shared, wait_until, watches, ZooKeeper,
};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

const T: Duration = Duration::from_secs(10);
const LOCK: &str = "/locks/orders";

async fn lock_on(hosts: &str, timeout: Duration) -> FencedLock {
    FencedLock::new(connect(hosts, timeout).await, LOCK, LockOptions::default()).unwrap()
}

async fn no_nodes_left(hosts: &str, expected: usize) {
    wait_until(
        Duration::from_secs(10),
        "leftover queue nodes to be deleted",
        || async { children(hosts, LOCK).await.len() == expected },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_contenders_exclude_each_other_and_tokens_increase() {
    let hosts = chroot(shared(), "exclusion").await;
    let holders = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let grants: Arc<Mutex<Vec<zkfence::FencingToken>>> = Arc::default();
    let until = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lock = lock_on(&hosts, T).await;
        let (holders, max_seen, grants) = (holders.clone(), max_seen.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            let mut acquired = 0;
            while tokio::time::Instant::now() < until {
                let guard = lock.acquire().await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                max_seen.fetch_max(now, Ordering::SeqCst);
                grants.lock().unwrap().push(guard.token());
                tokio::time::sleep(Duration::from_millis(2)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
                acquired += 1;
            }
            acquired
        }));
    }
    let mut per_contender = Vec::new();
    for task in tasks {
        per_contender.push(task.await.unwrap());
    }
    assert_eq!(max_seen.load(Ordering::SeqCst), 1, "two holders at once");
    let grants = grants.lock().unwrap().clone();
    assert!(
        grants.len() >= 40,
        "too few acquisitions to mean anything: {}",
        grants.len()
    );
    assert!(
        per_contender.iter().all(|&n| n > 0),
        "a contender starved: {per_contender:?}"
    );
    for pair in grants.windows(2) {
        assert!(
            pair[1] > pair[0],
            "tokens out of order in grant order: {} then {}",
            pair[0],
            pair[1]
        );
        assert!(pair[1].sequence() > pair[0].sequence());
    }
    no_nodes_left(&hosts, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_queue_order() {
    let hosts = chroot(shared(), "fifo").await;
    let first = lock_on(&hosts, T).await;
    let guard = first.acquire().await.unwrap();
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..5 {
        let lock = lock_on(&hosts, T).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            order.lock().unwrap().push(i);
            guard.release().await.unwrap();
        }));
        // Enqueue strictly one after the other.
        wait_until(Duration::from_secs(10), "the waiter to enqueue", || async {
            children(&hosts, LOCK).await.len() == i + 2
        })
        .await;
    }
    let queue = first.contenders().await.unwrap();
    assert_eq!(queue.len(), 6);
    assert_eq!(queue[0].node, guard.node_path().rsplit('/').next().unwrap());
    assert_eq!(queue[0].session_id, first.client().session_id());
    assert_eq!(guard.session_id(), first.client().session_id());
    assert!(
        queue[0].identity().starts_with("host:"),
        "identity data: {}",
        queue[0].identity()
    );
    assert!(queue.windows(2).all(|w| w[0].token < w[1].token));
    guard.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_leaving_the_middle_does_not_hand_over_the_lock() {
    let taken = leaving_middle("middle", LockOptions::default()).await;
    assert!(
        !taken,
        "the last waiter took the lock while the holder holds it"
    );
}

/// The mutant whose leaving waiter marks its deletion as a release: the suite must see the
/// last waiter walk past the holder.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_marked_withdrawal_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::MarkedWithdrawal);
    assert!(
        leaving_middle("middle-mutant", options).await,
        "a waiter's marked withdrawal went unnoticed"
    );
}

/// Holder, middle, last: the middle waiter gives up once the last one watches it. Whether the
/// last waiter then took the lock while the holder still held it (it must not); if not, the
/// holder's release hands it over.
async fn leaving_middle(name: &str, options: LockOptions) -> bool {
    let hosts = chroot(shared(), name).await;
    let lock_on = |hosts: String| {
        let options = options.clone();
        async move { FencedLock::new(connect(&hosts, T).await, LOCK, options).unwrap() }
    };
    let holder = lock_on(hosts.clone()).await;
    let guard = holder.acquire().await.unwrap();
    let middle = lock_on(hosts.clone()).await;
    let leaving = tokio::spawn(async move { middle.acquire().await.map(|g| g.token()) });
    no_nodes_left(&hosts, 2).await;
    // The last waiter goes through a proxy that counts its listings and child watches.
    let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let proxy = CountingProxy::start(server).await;
    let last = lock_on(format!("{}{root}", proxy.addr)).await;
    let last_session = last.client().session_id();
    let queued = tokio::spawn(async move { last.acquire().await.map(|g| g.token()) });
    no_nodes_left(&hosts, 3).await;
    let queue = holder.contenders().await.unwrap();
    let watched_by_last = |node: &str| watches(&hosts, last_session, &format!("{LOCK}/{node}"));
    // Only once the server holds the last waiter's watch on the middle node does its deletion
    // reach the last waiter as a notification (the path this test is about).
    wait_until(
        Duration::from_secs(10),
        "the last waiter to watch the middle one",
        || async { watched_by_last(&queue[1].node) },
    )
    .await;
    let get_children = || proxy.counts().get(&8).copied().unwrap_or(0);
    let before = get_children();
    leaving.abort();
    wait_until(Duration::from_secs(10), "the middle node to go", || async {
        children(&hosts, LOCK).await.len() <= 2
    })
    .await;
    // Its predecessor is gone, but the holder is still ahead: it lists the queue and sets a
    // child watch on the holder next (child watches do not show in `wchp`; their requests do).
    wait_until(
        Duration::from_secs(10),
        "the last waiter to list and watch the holder",
        || async { queued.is_finished() || get_children() >= before + 2 },
    )
    .await;
    if queued.is_finished() {
        return true;
    }
    let holder_token = guard.token();
    guard.release().await.unwrap();
    let token = tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(token > holder_token);
    false
}

/// The handoff protocol's point: a waiter that queued behind two nodes takes the lock on its
/// predecessor's marked release without listing the queue again or setting another watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_release_hands_the_lock_on_with_no_request() {
    let hosts = chroot(shared(), "marked-handoff").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let proxy = CountingProxy::start(server).await;
    let holder = lock_on(&hosts, T).await;
    let first = lock_on(&hosts, T).await;
    let second = lock_on(&format!("{}{root}", proxy.addr), T).await;
    let second_client = second.client().clone();
    let second_session = second_client.session_id();

    let guard = holder.acquire().await.unwrap();
    let first_waits = tokio::spawn(async move { first.acquire().await.unwrap() });
    no_nodes_left(&hosts, 2).await;
    let second_waits = tokio::spawn(async move { second.acquire().await.unwrap() });
    no_nodes_left(&hosts, 3).await;
    let queue = holder.contenders().await.unwrap();
    let first_node = format!("{LOCK}/{}", queue[1].node);
    wait_until(
        Duration::from_secs(10),
        "the second waiter to watch the first",
        || async { watches(&hosts, second_session, &first_node) },
    )
    .await;
    // The second also sets a data watch on the first (it queued behind two nodes) and, once
    // its wait has lasted, an exists watch on its own node: both must be in before the count
    // below starts, or a slow machine counts them against the handoff. Its session's requests
    // are answered in order, so a sync answered after both were sent finds both set.
    wait_until(
        Duration::from_secs(10),
        "the second waiter's data watch and own-node watch to be sent",
        || async {
            let counts = proxy.counts();
            counts.contains_key(&3) && counts.contains_key(&4)
        },
    )
    .await;
    second_client.sync(LOCK).await.unwrap();
    guard.release().await.unwrap();
    let first_guard = tokio::time::timeout(Duration::from_secs(10), first_waits)
        .await
        .unwrap()
        .unwrap();
    assert!(!second_waits.is_finished(), "two holders");

    let reads = |counts: std::collections::HashMap<i32, u64>| -> u64 {
        // exists 3, getData 4, getChildren 8, getChildren2 12
        [3, 4, 8, 12]
            .iter()
            .map(|op| counts.get(op).copied().unwrap_or(0))
            .sum()
    };
    let before = reads(proxy.counts());
    let first_token = first_guard.token();
    first_guard.release().await.unwrap();
    let second_guard = tokio::time::timeout(Duration::from_secs(10), second_waits)
        .await
        .unwrap()
        .unwrap();
    let after = reads(proxy.counts());
    assert!(second_guard.token() > first_token);
    assert_eq!(
        after - before,
        0,
        "the handoff listed or watched again: {:?}",
        proxy.counts()
    );
    second_guard.release().await.unwrap();
}

/// A waiter whose lease went cold while it waited proves it before its grant, once its herald
/// (here the holder's node, two ahead of its own) goes, so that the handoff to it commits
/// nothing on its path: the first waiter proves at its grant, the second sends its proof while
/// the first holds, and no write between the first's release and its own acquire returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_two_back_proves_its_lease_before_its_turn() {
    // T = 4 s with the test servers' 200 ms tick and a margin of 700 ms: a lease of about
    // 3.3 s, and a process may stall up to the margin without spoiling a cold proof.
    const T4: Duration = Duration::from_secs(4);
    let options = LockOptions::default()
        .with_tick_time(Duration::from_millis(200))
        .with_lease_margin(Duration::from_millis(700));
    let lock = |hosts: String| {
        let options = options.clone();
        async move { FencedLock::new(connect(&hosts, T4).await, LOCK, options).unwrap() }
    };
    let hosts = chroot(shared(), "warm-successor").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let proxy = CountingProxy::start(server).await;
    let holder = lock(hosts.clone()).await;
    let first = lock(hosts.clone()).await;
    let second = lock(format!("{}{root}", proxy.addr)).await;

    let guard = holder.acquire().await.unwrap();
    let first_waits = tokio::spawn(async move { first.acquire().await.unwrap() });
    no_nodes_left(&hosts, 2).await;
    let second_waits = tokio::spawn(async move { second.acquire().await.unwrap() });
    no_nodes_left(&hosts, 3).await;
    const EXISTS: i32 = 3;
    const MULTI: i32 = 14;
    let sent = |op: i32| proxy.counts().get(&op).copied().unwrap_or(0);
    let multis = || sent(MULTI);
    // Its exists watch on its own node goes once it waits: from then on it sends no write
    // (the watchdog may probe while an acquire creates its node, not while it waits).
    wait_until(
        Duration::from_secs(10),
        "the second waiter to wait",
        || async { sent(EXISTS) >= 1 },
    )
    .await;
    let waiting = multis();
    // Both waiters' leases lapse.
    tokio::time::sleep(T4).await;
    assert_eq!(multis(), waiting, "the second waiter wrote while it waited");
    guard.release().await.unwrap();
    let first_guard = tokio::time::timeout(Duration::from_secs(10), first_waits)
        .await
        .unwrap()
        .unwrap();
    // The holder's node was the second waiter's herald: it proves its session now.
    wait_until(
        Duration::from_secs(10),
        "the second waiter to prove its session while the first holds",
        || async { multis() > waiting },
    )
    .await;
    // Whether its reply is in yet or not, the grant waits for this proof rather than send one.
    let before = multis();
    first_guard.release().await.unwrap();
    let second_guard = tokio::time::timeout(Duration::from_secs(10), second_waits)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        multis(),
        before,
        "the second waiter proved its lease on the handoff's path: {:?}",
        proxy.counts()
    );
    second_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_and_acquire_timeout_leave_no_node() {
    let hosts = chroot(shared(), "try").await;
    let holder = lock_on(&hosts, T).await;
    let other = lock_on(&hosts, T).await;
    let free = other
        .try_acquire()
        .await
        .unwrap()
        .expect("free lock is taken");
    free.release().await.unwrap();
    let guard = holder.acquire().await.unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    assert_eq!(
        children(&hosts, LOCK).await.len(),
        1,
        "try_acquire left its node"
    );
    let started = std::time::Instant::now();
    assert!(other
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(
        children(&hosts, LOCK).await.len(),
        1,
        "acquire_timeout left its node"
    );
    let waiter = tokio::spawn(async move { other.acquire_timeout(Duration::from_secs(10)).await });
    no_nodes_left(&hosts, 2).await;
    guard.release().await.unwrap();
    let late = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("acquired within the timeout");
    late.release().await.unwrap();
    no_nodes_left(&hosts, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquire_leaves_no_node_at_any_await_point() {
    let hosts = chroot(shared(), "cancel").await;
    let holder = lock_on(&hosts, T).await;
    let guard = holder.acquire().await.unwrap();
    let waiter = lock_on(&hosts, T).await;
    // From "dropped right after the create was sent" through the listing, the watches and
    // the wait: each delay cancels at some await point of the protocol.
    for micros in [
        0u64, 20, 50, 100, 200, 400, 700, 1000, 1500, 2500, 5000, 20000,
    ] {
        let attempt = tokio::time::timeout(Duration::from_micros(micros), waiter.acquire()).await;
        assert!(attempt.is_err(), "acquired a held lock");
    }
    // A future polled once (create sent, reply not read) and dropped.
    let mut fut = Box::pin(waiter.acquire());
    assert!(futures_poll_once(fut.as_mut()).await.is_none());
    drop(fut);
    no_nodes_left(&hosts, 1).await;
    assert_eq!(
        holder.contenders().await.unwrap()[0].session_id,
        holder.client().session_id()
    );
    guard.release().await.unwrap();
    no_nodes_left(&hosts, 0).await;
}

async fn futures_poll_once<F: std::future::Future + Unpin>(mut fut: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| match std::pin::Pin::new(&mut fut).poll(cx) {
        std::task::Poll::Ready(out) => std::task::Poll::Ready(Some(out)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_during_server_restart_still_deletes() {
    let server = ZooKeeper::start();
    let lock = lock_on(&server.addr(), Duration::from_secs(20)).await;
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    server.kill();
    // The watchdog cancels the guard on the disconnect (the default)...
    tokio::time::timeout(
        Duration::from_secs(10),
        guard.cancellation_token().cancelled(),
    )
    .await
    .expect("cancelled");
    assert_eq!(
        guard.check(),
        Err(Error::LockLost(zkfence::LossReason::Disconnected))
    );
    // ...and the release, started while the server is down, keeps retrying its delete.
    let release = tokio::spawn(guard.release());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !release.is_finished(),
        "release returned while the server was down"
    );
    server.restart();
    let outcome = tokio::time::timeout(Duration::from_secs(30), release)
        .await
        .expect("release finished")
        .unwrap();
    assert_eq!(
        outcome,
        Err(Error::LockLost(zkfence::LossReason::Disconnected)),
        "release reports the loss"
    );
    let client = connect(&server.addr(), T).await;
    assert_eq!(
        client.check_stat(&node).await.unwrap(),
        None,
        "node survived the release"
    );
    let again = lock.acquire().await.unwrap();
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expired_while_queued_is_an_error_never_a_lock() {
    let hosts = chroot(shared(), "expire-queued").await;
    let holder = lock_on(&hosts, T).await;
    let guard = holder.acquire().await.unwrap();
    let waiter = lock_on(&hosts, Duration::from_secs(2)).await;
    let client = waiter.client().clone();
    let queued = tokio::spawn(async move { waiter.acquire().await.map(|g| g.token()) });
    no_nodes_left(&hosts, 2).await;
    expire_session(&hosts, &client).await;
    let result = tokio::time::timeout(Duration::from_secs(20), queued)
        .await
        .expect("no hang")
        .unwrap();
    assert!(
        matches!(result, Err(Error::SessionExpired { .. })),
        "{result:?}"
    );
    no_nodes_left(&hosts, 1).await;
    // A client whose session is over fails at once, never hangs.
    let dead = FencedLock::new(client, LOCK, LockOptions::default()).unwrap();
    let at_once = tokio::time::timeout(Duration::from_secs(1), dead.acquire())
        .await
        .expect("no hang");
    assert!(
        matches!(at_once, Err(Error::SessionExpired { .. })),
        "{at_once:?}"
    );
    assert!(at_once.unwrap_err().is_session_terminal());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_when_the_parent_is_deleted_and_recreated() {
    let hosts = chroot(shared(), "recreate").await;
    let lock = lock_on(&hosts, T).await;
    let admin = connect(&hosts, T).await;
    let mut last: Option<zkfence::FencingToken> = None;
    for round in 0..3 {
        for _ in 0..3 {
            let guard = lock.acquire().await.unwrap();
            if let Some(last) = last {
                assert!(
                    guard.token() > last,
                    "round {round}: {} after {}",
                    guard.token(),
                    last
                );
                assert!(guard.token().as_u64() > last.as_u64());
            }
            last = Some(guard.token());
            guard.release().await.unwrap();
        }
        admin.delete(LOCK, None).await.unwrap();
        // The next acquire recreates the parent; its sequence restarts at 0.
        let guard = lock.acquire().await.unwrap();
        assert_eq!(
            guard.token().sequence(),
            0,
            "sequence restarts in a new parent"
        );
        assert!(
            guard.token() > last.unwrap(),
            "token went backwards across parent recreation"
        );
        last = Some(guard.token());
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_release_never_deletes_another_sessions_node() {
    let hosts = chroot(shared(), "late-release").await;
    let stale = lock_on(&hosts, Duration::from_secs(2)).await;
    let guard = stale.acquire().await.unwrap();
    let stale_token = guard.token();
    expire_session(&hosts, stale.client()).await;
    let next = lock_on(&hosts, T).await;
    let next_guard = tokio::time::timeout(Duration::from_secs(10), next.acquire())
        .await
        .unwrap()
        .unwrap();
    assert!(next_guard.token() > stale_token);
    let late = guard.release().await;
    assert!(
        late.as_ref()
            .is_err_and(|e| e.is_lock_lost() || e.is_session_terminal()),
        "{late:?}"
    );
    let queue = next.contenders().await.unwrap();
    assert_eq!(queue.len(), 1);
    assert_eq!(
        queue[0].session_id,
        next.client().session_id(),
        "the late release touched the new holder"
    );
    next_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_moves_to_another_task_and_thread_and_releases_there() {
    let hosts = chroot(shared(), "move").await;
    let lock = lock_on(&hosts, T).await;
    let guard = lock.acquire().await.unwrap();
    let from_task = tokio::spawn(async move { guard.release().await })
        .await
        .unwrap();
    assert_eq!(from_task, Ok(()));
    let guard = lock.acquire().await.unwrap();
    let handle = tokio::runtime::Handle::current();
    let from_thread = std::thread::spawn(move || handle.block_on(guard.release()))
        .join()
        .unwrap();
    assert_eq!(from_thread, Ok(()));
    // Dropping instead of releasing deletes in the background.
    let guard = lock.acquire().await.unwrap();
    let token = guard.cancellation_token();
    drop(guard);
    assert!(token.is_cancelled());
    no_nodes_left(&hosts, 0).await;
}

/// A waiter that queued behind two nodes sets its child watch and its data watch on the node
/// ahead back to back: one round trip, not one per watch. Over a link that holds each frame
/// for `D`, one after another, the data watch reaches the server `D` after the child watch
/// when both are sent together, and `2·D` after it when the second waits for the first's
/// reply (the reply's `D` back, then its own `D` out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowded_waiter_sets_its_watches_in_one_round_trip() {
    const D: Duration = Duration::from_secs(1);
    let hosts = chroot(shared(), "arm-round-trip").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let proxy = CountingProxy::start(server).await;
    let (holder, middle) = (lock_on(&hosts, T).await, lock_on(&hosts, T).await);
    let waiter = lock_on(&format!("{}{root}", proxy.addr), T).await;
    let guard = holder.acquire().await.unwrap();
    let middle_waits = tokio::spawn(async move { middle.acquire().await.map(|g| g.token()) });
    no_nodes_left(&hosts, 2).await;
    proxy.delay(D);
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| g.token()) });
    let sent = |op: i32| proxy.counts().get(&op).copied().unwrap_or(0);
    // The listing rides behind the create; the child watch is the second getChildren.
    wait_until(Duration::from_secs(20), "the child watch", || async {
        sent(8) >= 2
    })
    .await;
    let child_watch = tokio::time::Instant::now();
    wait_until(Duration::from_secs(20), "the data watch", || async {
        sent(4) >= 1
    })
    .await;
    let after = child_watch.elapsed();
    assert!(
        after < D + D / 2,
        "the data watch went out {after:?} after the child watch: a round trip per watch"
    );
    proxy.delay(Duration::ZERO);
    guard.release().await.unwrap();
    middle_waits.await.unwrap().unwrap();
    waiting.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_waiters_cost_constant_requests_per_handoff() {
    let server = ZooKeeper::start();
    let proxy = CountingProxy::start(&server.addr()).await;
    let hosts = proxy.addr.clone();
    let baseline_watches = server.watch_count();
    let holder = lock_on(&hosts, T).await;
    let guard = holder.acquire().await.unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..50 {
        // A long session keeps the watchdogs' lease probes (every T/3) out of the count.
        let lock = lock_on(&hosts, Duration::from_secs(30)).await;
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            guard.release().await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
            lock // keep the session until the end, so its closeSession is not counted
        }));
    }
    let admin = connect(&server.addr(), T).await;
    wait_until(Duration::from_secs(30), "50 waiters queued", || async {
        admin
            .list_children(LOCK)
            .await
            .map(|c| c.len())
            .unwrap_or(0)
            == 51
    })
    .await;
    // Let every waiter's watches land, then count only the handoff cascade. The last request
    // a waiter sends before the handoff is the exists watch on its own node (once its wait has
    // lasted); it goes after or together with the watches on the node ahead.
    wait_until(Duration::from_secs(30), "the waiters' watches", || async {
        server.watch_count() >= 50 && proxy.counts().get(&3).copied().unwrap_or(0) >= 50
    })
    .await;
    let before = proxy.counts();
    guard.release().await.unwrap();
    let mut locks = Vec::new();
    for task in tasks {
        locks.push(task.await.unwrap());
    }
    assert_eq!(done.load(Ordering::SeqCst), 50);
    let after = proxy.counts();
    let spent: u64 = after
        .iter()
        .map(|(op, n)| n - before.get(op).copied().unwrap_or(0))
        .sum();
    let per_handoff = spent as f64 / 50.0;
    eprintln!("requests per handoff: {per_handoff:.2} ({spent} in all; by opcode before {before:?} after {after:?})");
    // Each handoff: the holder's delete and the next holder's one listing (its listing from
    // when it queued is stale). A herd would cost O(50) per handoff.
    assert!(per_handoff <= 3.0, "{per_handoff} requests per handoff");
    drop(locks);
    drop(holder);
    wait_until(
        Duration::from_secs(30),
        "server watches back to the baseline",
        || async { server.watch_count() <= baseline_watches },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_node_deleted_while_waiting_is_an_error() {
    let hosts = chroot(shared(), "node-deleted-waiting").await;
    let holder = lock_on(&hosts, T).await;
    let guard = holder.acquire().await.unwrap();
    let waiter = lock_on(&hosts, T).await;
    let queued = tokio::spawn(async move { waiter.acquire().await.map(|g| g.token()) });
    no_nodes_left(&hosts, 2).await;
    let admin = connect(&hosts, T).await;
    let queue = holder.contenders().await.unwrap();
    admin
        .delete(&format!("{LOCK}/{}", queue[1].node), None)
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .expect("no hang")
        .unwrap();
    assert!(
        matches!(result, Err(Error::NodeDeletedWhileWaiting { .. })),
        "{result:?}"
    );
    assert!(result.unwrap_err().is_retryable());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() {
    let hosts = chroot(shared(), "bad-input").await;
    let client = connect(&hosts, T).await;
    for path in ["locks", "/locks/", "/a//b", "/", "/zookeeper/x", ""] {
        let err = FencedLock::new(client.clone(), path, LockOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidPath { .. }), "{path:?}: {err}");
        assert!(err.to_string().contains("use an absolute path"), "{err}");
    }
    let err =
        FencedLock::new(client.clone(), LOCK, LockOptions::default().with_acls(&[])).unwrap_err();
    assert!(matches!(err, Error::InvalidOptions(_)));

    let no_parents = FencedLock::new(
        client.clone(),
        "/missing/lock",
        LockOptions::default().with_create_parents(false),
    )
    .unwrap();
    let err = no_parents.acquire().await.unwrap_err();
    assert_eq!(
        err,
        Error::NoParent {
            path: "/missing/lock".into()
        }
    );
    assert!(err.to_string().contains("with_create_parents"), "{err}");
    assert!(children(&hosts, "/missing").await.is_empty());

    // A lock path whose ACL lets us read but not create.
    let read_only = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read());
    client.create("/readonly", &[], &read_only).await.unwrap();
    let denied = FencedLock::new(client.clone(), "/readonly", LockOptions::default()).unwrap();
    let err = denied.acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::AccessDenied { op: "create", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("acl"), "{err}");
    assert!(denied.try_acquire().await.is_err());

    // Node data over ZooKeeper's default jute.maxbuffer: refused before anything is sent (the
    // server would drop the connection on every retry, cancelling the session's other locks).
    let held = FencedLock::new(client.clone(), "/held", LockOptions::default()).unwrap();
    let guard = held.acquire().await.unwrap();
    let huge = LockOptions::default().with_data(vec![b'x'; 2 << 20]);
    let err = FencedLock::new(client.clone(), LOCK, huge).unwrap_err();
    assert!(
        matches!(err, Error::RequestTooLarge { bytes, .. } if bytes > 2 << 20),
        "{err}"
    );
    assert!(err.to_string().contains("with_data"), "{err}");
    assert_eq!(
        guard.check(),
        Ok(()),
        "the session's other lock was disturbed"
    );
    // Just under the limit still works end to end.
    let big = LockOptions::default().with_data(vec![b'x'; 1_000_000]);
    let big = FencedLock::new(client.clone(), LOCK, big).unwrap();
    big.acquire().await.unwrap().release().await.unwrap();
    guard.release().await.unwrap();

    // A lease that could never be renewed: a declared tickTime as long as the session.
    let err = FencedLock::new(
        client.clone(),
        LOCK,
        LockOptions::default().with_tick_time(T),
    )
    .unwrap_err();
    match &err {
        Error::LeaseTooShort { needed, .. } => assert!(*needed > T, "{err}"),
        other => panic!("expected LeaseTooShort, got {other}"),
    }
}

/// A release whose delete is applied but whose reply is lost cannot tell its delete from
/// someone else's before it (after which a successor may have held the lock): it must report
/// a possible loss, never a clean release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_lost_its_reply_reports_the_hold_unconfirmed() {
    release_losing_its_reply("unconfirmed", LockOptions::default()).await;
}

/// The same with a marked release (lock-delay marks every release): the multi retried after
/// the reconnect fails on its setData with NoNode, which must read as the same unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_release_that_lost_its_reply_reports_the_hold_unconfirmed() {
    let options = LockOptions::default().with_lock_delay(Duration::from_secs(1));
    release_losing_its_reply("unconfirmed-marked", options).await;
}

/// A release whose reply the proxy drops after the server applied it, then a reconnect.
async fn release_losing_its_reply(name: &str, options: LockOptions) {
    let hosts = chroot(shared(), name).await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let server = server.split(',').next().unwrap_or(server).to_owned();
    let proxy = CountingProxy::start(&server).await;
    let client = connect(&format!("{}{root}", proxy.addr), T).await;
    let lock = FencedLock::new(client, LOCK, options).unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    let observer = connect(&hosts, T).await;

    proxy.drop_replies(true);
    let release = tokio::spawn(guard.release());
    wait_until(Duration::from_secs(10), "the delete to be applied", || {
        let observer = observer.clone();
        let node = node.clone();
        async move { observer.check_stat(&node).await.unwrap().is_none() }
    })
    .await;
    assert!(
        !release.is_finished(),
        "the release saw a reply it should not have"
    );
    proxy.drop_replies(false); // closes the connection: the client reconnects and retries
    let outcome = tokio::time::timeout(Duration::from_secs(20), release)
        .await
        .expect("the release finished after the reconnect")
        .unwrap();
    assert_eq!(
        outcome,
        Err(Error::LockLost(zkfence::LossReason::ReleaseUnconfirmed))
    );
    // The lock itself is fine: the next acquire works on the same session.
    lock.acquire().await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_ensemble_fails_the_acquire_instead_of_hanging() {
    let server = ZooKeeper::start();
    let lock = lock_on(&server.addr(), Duration::from_secs(2)).await;
    server.kill();
    let started = std::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), lock.acquire())
        .await
        .expect("acquire hung");
    let err = result.unwrap_err();
    assert!(err.is_session_terminal(), "{err}");
    assert!(err.to_string().contains("connect a new client"), "{err}");
    eprintln!(
        "unreachable ensemble: acquire failed after {:?}: {err}",
        started.elapsed()
    );
}

/// A session refuses one more waiting acquire once its waiters' watches could pass
/// `WAITING_WATCH_BYTES` of paths (past 128 KiB of watched paths the client could not set
/// them again after a disconnect), and takes one again once a waiter is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_refuses_waiters_past_its_watch_budget() {
    let hosts = chroot(shared(), "watch-budget").await;
    let holder = connect(&hosts, Duration::from_secs(10)).await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    // Long lock paths, so that a few dozen waiters fill the budget: each counts four times
    // its node's path on the server (the chroot, the lock path, `/`, 58 bytes of name).
    let path = format!("/watch-budget/{}", "w".repeat(400));
    let chroot = hosts[hosts.find('/').unwrap()..].len();
    let per_waiter = 4 * (chroot + path.len() + 1 + 58);
    let fit = zkfence::WAITING_WATCH_BYTES / per_waiter;
    let lock = |client: &zookeeper_client::Client| {
        FencedLock::new(client.clone(), path.as_str(), LockOptions::default()).unwrap()
    };
    let held = lock(&holder).acquire().await.unwrap();
    let mut waiters = tokio::task::JoinSet::new();
    for _ in 0..fit {
        let lock = lock(&client);
        waiters.spawn(async move { lock.acquire().await });
    }
    wait_until(Duration::from_secs(20), "every waiter queued", || async {
        children(&hosts, &path).await.len() == fit + 1
    })
    .await;
    let refused = tokio::time::timeout(Duration::from_secs(5), lock(&client).acquire())
        .await
        .expect("refused at once")
        .unwrap_err();
    let Error::SessionWatchBudget { waiting, limit, .. } = &refused else {
        panic!("expected the watch budget's error, got {refused:?}");
    };
    assert_eq!(*waiting as usize, fit);
    assert_eq!(*limit as usize, zkfence::WAITING_WATCH_BYTES);
    assert!(refused.to_string().contains("128 KiB"), "{refused}");
    assert!(refused.to_string().contains("spread"), "{refused}");
    assert_eq!(
        children(&hosts, &path).await.len(),
        fit + 1,
        "a node for the refused acquire"
    );
    // The first waiter's grant gives its reservation back: one more may wait.
    held.release().await.unwrap();
    let first = waiters.join_next().await.unwrap().unwrap().unwrap();
    let lock = lock(&client);
    waiters.spawn(async move { lock.acquire().await });
    wait_until(
        Duration::from_secs(10),
        "one more waiter queued",
        || async { children(&hosts, &path).await.len() == fit + 1 },
    )
    .await;
    first.release().await.unwrap();
    // Each is granted in turn, as the one before lets go.
    while let Some(next) = waiters.join_next().await {
        next.unwrap().unwrap().release().await.unwrap();
    }
}

/// ZOOKEEPER-4306: a session whose expiry would have to delete more lock node paths than its
/// budget refuses the next acquire at once, with an error that says how to spread the locks;
/// a release makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_refuses_locks_past_its_node_budget() {
    let hosts = chroot(shared(), "node-budget").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    // Each node costs 4 + the chroot + "/budget/n" + 1 + 58 bytes: three fit in 350.
    let chroot = hosts[hosts.find('/').unwrap()..].len();
    let per_node = 4 + chroot + "/budget/0".len() + 1 + 58;
    let options = LockOptions::default().with_session_node_bytes(3 * per_node + per_node / 2);
    let lock = |i: usize| FencedLock::new(client.clone(), format!("/budget/{i}"), options.clone());
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(lock(i).unwrap().acquire().await.unwrap());
    }
    let refused = lock(3).unwrap().acquire().await.unwrap_err();
    let Error::SessionNodeBudget { nodes, limit, .. } = &refused else {
        panic!("expected the node budget's error, got {refused:?}");
    };
    assert_eq!(*nodes, 3);
    assert_eq!(*limit as usize, 3 * per_node + per_node / 2);
    assert!(refused.to_string().contains("ZOOKEEPER-4306"), "{refused}");
    assert!(
        refused.to_string().contains("spread the locks"),
        "{refused}"
    );
    // Nothing was created for the refused acquire.
    assert!(children(&hosts, "/budget/3").await.is_empty());
    held.pop().unwrap().release().await.unwrap();
    lock(3)
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}
