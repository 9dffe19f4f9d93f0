//! Multi-locks against real servers: opposite orders never deadlock nor overlap, all or
//! nothing on a timeout, a cancel or an error, tokens in the caller's order, a loss of any
//! lock cancels the guard, and overlapping paths refused before anything is created.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zkfence::Acquire;

use zkfence::{Error, FencedLock, FencedMultiLock, LockOptions, LossReason};
use zkfence_harness::{children, chroot, connect, shared, wait_until};

const T: Duration = Duration::from_secs(10);
const A: &str = "/locks/multi/a";
const B: &str = "/locks/multi/b";

async fn multi(hosts: &str, paths: [&str; 2]) -> FencedMultiLock {
    FencedMultiLock::new(connect(hosts, T).await, paths, LockOptions::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_by_two_sessions_never_deadlock_nor_overlap() {
    let hosts = chroot(shared(), "multi-opposite").await;
    let inside: Arc<[AtomicBool; 2]> = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let overlaps = Arc::new(AtomicUsize::new(0));
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut workers = Vec::new();
    for paths in [[A, B], [B, A]] {
        let locks = multi(&hosts, paths).await;
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        workers.push(tokio::spawn(async move {
            let mut taken = 0;
            while tokio::time::Instant::now() < until {
                let guard = tokio::time::timeout(Duration::from_secs(10), locks.acquire())
                    .await
                    .expect("a multi-lock deadlocked")
                    .unwrap();
                for flag in inside.iter() {
                    if flag.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::task::yield_now().await;
                for flag in inside.iter() {
                    flag.store(false, Ordering::SeqCst);
                }
                guard.release().await.unwrap();
                taken += 1;
            }
            taken
        }));
    }
    for worker in workers {
        assert!(worker.await.unwrap() > 0, "a multi-lock starved");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_order_would_deadlock_which_the_canonical_order_avoids() {
    // The counter-case: two sessions taking plain locks in opposite orders, as Curator's
    // InterProcessMultiLock does, each hold one and wait for the other.
    let hosts = chroot(shared(), "multi-naive").await;
    let lock = |path| {
        let hosts = hosts.clone();
        async move { FencedLock::new(connect(&hosts, T).await, path, LockOptions::default()).unwrap() }
    };
    let (a1, b1, a2, b2) = (lock(A).await, lock(B).await, lock(A).await, lock(B).await);
    let first = a1.acquire().await.unwrap();
    let second = b2.acquire().await.unwrap();
    let wait = Duration::from_millis(500);
    let (one, two) = tokio::join!(b1.acquire_timeout(wait), a2.acquire_timeout(wait));
    assert!(
        one.unwrap().is_none() && two.unwrap().is_none(),
        "no deadlock?"
    );
    drop((first, second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_or_a_cancel_leaves_no_node_on_any_path() {
    let hosts = chroot(shared(), "multi-nothing").await;
    let blocker = FencedLock::new(connect(&hosts, T).await, B, LockOptions::default()).unwrap();
    let held = blocker.acquire().await.unwrap();
    let locks = multi(&hosts, [B, A]).await;
    assert!(locks
        .acquire_timeout(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    assert!(locks.try_acquire().await.unwrap().is_none());
    assert!(children(&hosts, A).await.is_empty(), "a node left on A");
    // Cancelled while it holds A and waits for B.
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move { locks.acquire().await }
    });
    wait_until(Duration::from_secs(10), "A taken, B waited for", || async {
        children(&hosts, A).await.len() == 1 && children(&hosts, B).await.len() == 2
    })
    .await;
    waiting.abort();
    wait_until(Duration::from_secs(10), "nothing of ours left", || async {
        children(&hosts, A).await.is_empty() && children(&hosts, B).await.len() == 1
    })
    .await;
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_follow_the_callers_order_and_any_loss_cancels_the_guard() {
    let hosts = chroot(shared(), "multi-tokens").await;
    let locks = multi(&hosts, [B, A]).await;
    assert_eq!(locks.paths(), [B, A]);
    let guard = locks.acquire().await.unwrap();
    let tokens = guard.tokens();
    assert_eq!(guard.lock_paths(), [B, A]);
    // A was taken first (sorted order), so its token is the smaller.
    assert!(tokens[1] < tokens[0]);
    assert_eq!(tokens[0], guard.helds()[0].token());
    assert_eq!(guard.check(), Ok(()));
    let admin = connect(&hosts, T).await;
    admin
        .delete(guard.helds()[1].node_path(), None)
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the guard is cancelled");
    assert_eq!(reason, LossReason::NodeDeleted);
    assert!(guard.cancellation_token().is_cancelled());
    assert_eq!(guard.check(), Err(Error::LockLost(LossReason::NodeDeleted)));
    assert!(guard.release().await.is_err());
    let section = locks
        .run(|held| async move { Ok::<_, Error>(held.tokens().len()) })
        .await
        .unwrap();
    assert_eq!(section, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_paths_are_refused_before_anything_is_created() {
    let hosts = chroot(shared(), "multi-bad").await;
    let client = connect(&hosts, T).await;
    for paths in [[A, A], [A, "/locks/multi/a/inner"]] {
        let err = FencedMultiLock::new(client.clone(), paths, LockOptions::default()).unwrap_err();
        assert!(matches!(err, Error::OverlappingLocks { .. }), "{err}");
    }
    let empty: [&str; 0] = [];
    assert!(matches!(
        FencedMultiLock::new(client.clone(), empty, LockOptions::default()),
        Err(Error::InvalidOptions(_))
    ));
    assert!(matches!(
        FencedMultiLock::new(client.clone(), [A, "relative"], LockOptions::default()),
        Err(Error::InvalidPath { .. })
    ));
    assert!(client.check_stat("/locks/multi").await.unwrap().is_none());
}
