//! Reentrancy against real servers: a task that holds a lock and acquires it again gets the
//! same token with no request (reentrant) or `WouldDeadlock` at once (the default), never a
//! hang; the node goes with the last nested hold; a loss cancels them all, and the task's next
//! acquire fails while a lost guard lives; a guard moved to another task; a writer's downgrade
//! to a reader, and the write lock kept while writers queued behind it; a reader never
//! upgrades; a semaphore lease holder asking for more leases.

use std::time::{Duration, Instant};
use zkfence::Acquire;

use zkfence::{Error, FencedLock, FencedRwLock, FencedSemaphore, LockOptions, LossReason};
use zkfence_harness::{children, chroot, connect, shared, wait_until};
use zkfence_testkit::CountingProxy;

const LOCK: &str = "/locks/again";
const T: Duration = Duration::from_secs(10);

fn reentrant() -> LockOptions {
    LockOptions::default().with_reentrant(true)
}

/// The requests a proxy counted, pings and the watchdog's probes (multi) left out.
fn requests(proxy: &CountingProxy) -> u64 {
    let counts = proxy.counts();
    counts
        .iter()
        .filter(|(op, _)| **op != 14)
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_acquire_gets_the_same_token_with_no_request_and_the_node_goes_with_the_last() {
    let hosts = chroot(shared(), "nested").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = CountingProxy::start(server).await;
    let client = connect(&format!("{}{root}", proxy.addr), T).await;
    let lock = FencedLock::new(client.clone(), LOCK, reentrant()).unwrap();
    // Another lock object on the same path and session, and a clone: the same holder.
    let same = FencedLock::new(client, LOCK, reentrant()).unwrap();
    let outer = lock.acquire().await.unwrap();
    let before = requests(&proxy);
    let by_clone = lock.clone().acquire().await.unwrap();
    let by_other = same.try_acquire().await.unwrap().expect("re-entered");
    let by_timeout = same.acquire_timeout(T).await.unwrap().expect("re-entered");
    let in_run = lock
        .run(|held| async move { Ok::<_, Error>(held.token()) })
        .await
        .unwrap();
    assert_eq!(requests(&proxy), before, "a nested acquire sent a request");
    for token in [
        by_clone.token(),
        by_other.token(),
        by_timeout.token(),
        in_run,
    ] {
        assert_eq!(token, outer.token());
    }
    assert_eq!(by_clone.node_path(), outer.node_path());
    // The outer hold ends first: the node stays while nested holds remain. The outer guard's
    // handles and its token (asked for before its end, or after) say it ended; the nested
    // guards' do not.
    let (outer_held, outer_token) = (outer.held(), outer.cancellation_token());
    let nested_token = by_clone.cancellation_token();
    outer.release().await.unwrap();
    by_other.release().await.unwrap();
    assert_eq!(children(&hosts, LOCK).await.len(), 1);
    assert_eq!(by_clone.check(), Ok(()));
    assert_eq!(
        outer_held.check(),
        Err(Error::LockLost(LossReason::Released))
    );
    assert!(outer_token.is_cancelled() && outer_held.cancellation_token().is_cancelled());
    assert_eq!(outer_held.lost().await, LossReason::Released);
    assert!(!nested_token.is_cancelled() && !by_timeout.cancellation_token().is_cancelled());
    drop(by_clone);
    assert!(
        nested_token.is_cancelled(),
        "a nested guard's end cancels its own token"
    );
    assert_eq!(children(&hosts, LOCK).await.len(), 1);
    by_timeout.release().await.unwrap();
    assert!(
        children(&hosts, LOCK).await.is_empty(),
        "the last hold left the node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_cancels_every_nested_hold() {
    let hosts = chroot(shared(), "nested-loss").await;
    let lock = FencedLock::new(connect(&hosts, T).await, LOCK, reentrant()).unwrap();
    let outer = lock.acquire().await.unwrap();
    let inner = lock.acquire().await.unwrap();
    let admin = connect(&hosts, T).await;
    admin.delete(outer.node_path(), None).await.unwrap();
    for guard in [&outer, &inner] {
        let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("cancelled");
        assert_eq!(reason, LossReason::NodeDeleted);
    }
    assert_eq!(
        inner.release().await,
        Err(Error::LockLost(LossReason::NodeDeleted))
    );
    // A lost hold has nothing to re-enter, and its node may still stand in the queue: while
    // the lost guard lives, the task's acquire fails at once rather than wait for it (through
    // this lock, whose in-process turn the lost guard keeps, and through another one).
    let other = FencedLock::new(admin.clone(), LOCK, reentrant()).unwrap();
    let same_session = FencedLock::new(lock.client().clone(), LOCK, reentrant()).unwrap();
    for again in [lock.acquire(), same_session.acquire()] {
        let failed = tokio::time::timeout(T, again).await.expect("no hang");
        assert_eq!(failed.err(), Some(Error::LockLost(LossReason::NodeDeleted)));
    }
    drop(outer);
    let afresh = tokio::time::timeout(T, lock.acquire())
        .await
        .expect("granted")
        .unwrap();
    assert_eq!(afresh.check(), Ok(()));
    assert!(other.try_acquire().await.unwrap().is_none());
    afresh.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reentrancy_a_nested_acquire_fails_at_once_and_other_tasks_still_queue() {
    let hosts = chroot(shared(), "would-deadlock").await;
    let client = connect(&hosts, T).await;
    let lock = FencedLock::new(client.clone(), LOCK, LockOptions::default()).unwrap();
    let same = FencedLock::new(client, LOCK, LockOptions::default()).unwrap();
    let guard = lock.acquire().await.unwrap();
    let started = Instant::now();
    let refused = [
        lock.acquire().await.err(),
        lock.clone().try_acquire().await.err(),
        same.acquire_timeout(T).await.err(),
        same.run(|_| async { Ok::<_, Error>(()) }).await.err(),
    ];
    let took = started.elapsed();
    assert!(took < Duration::from_millis(100), "took {took:?}");
    for err in refused {
        match err {
            Some(Error::WouldDeadlock { path, .. }) => assert_eq!(path, LOCK),
            other => panic!("expected WouldDeadlock, got {other:?}"),
        }
    }
    // Another task is another contender: it waits, as ever.
    let other = lock.clone();
    let waited =
        tokio::spawn(async move { other.acquire_timeout(Duration::from_millis(300)).await });
    assert!(waited.await.unwrap().unwrap().is_none());
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moved_to_another_task_belongs_to_it_once_adopted() {
    let hosts = chroot(shared(), "moved").await;
    let lock = FencedLock::new(connect(&hosts, T).await, LOCK, reentrant()).unwrap();
    let guard = lock.acquire().await.unwrap();
    let token = guard.token();
    let (to_task, from_test) = tokio::sync::oneshot::channel();
    let mover = lock.clone();
    let task = tokio::spawn(async move {
        // Not adopted yet: the acquiring task owns it, this one is a stranger that would wait.
        let stranger = mover.try_acquire().await.unwrap().is_none();
        guard.adopt();
        let nested = mover
            .try_acquire()
            .await
            .unwrap()
            .expect("re-entered after adopt");
        let _ = to_task.send(());
        (stranger, nested.token(), guard, nested)
    });
    from_test.await.unwrap();
    // The test's task gave the hold away: now it is the stranger.
    assert!(lock.try_acquire().await.unwrap().is_none());
    let (stranger, nested, guard, inner) = task.await.unwrap();
    assert!(stranger, "a stranger task re-entered a hold it did not own");
    assert_eq!(nested, token);
    drop(inner);
    guard.release().await.unwrap();
}

/// Our writer, a writer of another session queued behind it, then our read lock: whether the
/// other writer took the write lock while we still read.
async fn downgrade_behind_a_queued_writer(name: &str, options: LockOptions) -> bool {
    let hosts = chroot(shared(), name).await;
    let ours = FencedRwLock::new(connect(&hosts, T).await, LOCK, options).unwrap();
    let theirs = FencedRwLock::new(connect(&hosts, T).await, LOCK, LockOptions::default()).unwrap();
    let write = ours.write().await.unwrap();
    let writing = tokio::spawn(async move { theirs.write().await.unwrap() });
    wait_until(Duration::from_secs(10), "their writer to queue", || async {
        children(&hosts, LOCK).await.len() == 2
    })
    .await;
    let read = ours.read().await.unwrap();
    assert!(read.token() > write.token());
    write.release().await.unwrap();
    let overtaken = tokio::time::timeout(Duration::from_millis(700), async {
        while !writing.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .is_ok();
    read.release().await.unwrap();
    let theirs = tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .expect("their writer gets the lock")
        .unwrap();
    theirs.release().await.unwrap();
    overtaken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_keeps_the_write_lock_from_writers_queued_behind_it() {
    assert!(!downgrade_behind_a_queued_writer("downgrade-pinned", LockOptions::default()).await);
}

/// The mutant whose downgrade drops the write lock as Curator's does: the writer queued
/// behind it writes while we read.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unpinned_downgrade_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::UnpinnedDowngrade);
    assert!(
        downgrade_behind_a_queued_writer("downgrade-mutant", options).await,
        "the unpinned downgrade went unnoticed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_reader_shares_with_other_readers_and_never_upgrades() {
    let hosts = chroot(shared(), "downgrade").await;
    let ours = FencedRwLock::new(connect(&hosts, T).await, LOCK, reentrant()).unwrap();
    let theirs = FencedRwLock::new(connect(&hosts, T).await, LOCK, LockOptions::default()).unwrap();
    let write = ours.write().await.unwrap();
    // Nobody queued behind our writer: releasing it leaves a plain reader.
    let read = ours.read().await.unwrap();
    assert!(
        theirs.reader().try_acquire().await.unwrap().is_none(),
        "a reader beside a held write lock"
    );
    write.release().await.unwrap();
    let shared_read = tokio::time::timeout(Duration::from_secs(5), theirs.read())
        .await
        .expect("readers share with the downgraded reader")
        .unwrap();
    // A writer of another task waits for both readers.
    let writer = theirs.clone();
    let blocked =
        tokio::spawn(async move { writer.writer().try_acquire().await.unwrap().is_none() });
    assert!(blocked.await.unwrap(), "a writer beside two readers");
    // A reader asking for the write lock would wait for itself (and for the other reader).
    assert!(matches!(
        ours.write().await,
        Err(Error::WouldDeadlock { .. })
    ));
    shared_read.release().await.unwrap();
    read.release().await.unwrap();
    assert!(children(&hosts, LOCK).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_holder_gets_more_leases_until_it_would_wait_for_itself() {
    let hosts = chroot(shared(), "leases").await;
    let pool =
        FencedSemaphore::new(connect(&hosts, T).await, LOCK, 2, LockOptions::default()).unwrap();
    let first = pool.acquire().await.unwrap();
    let second = pool.acquire().await.unwrap();
    assert!(second.token() > first.token(), "a lease of its own");
    assert!(matches!(
        pool.acquire().await,
        Err(Error::WouldDeadlock { .. })
    ));
    first.release().await.unwrap();
    let third = pool.acquire().await.unwrap();
    third.release().await.unwrap();
    second.release().await.unwrap();
}
