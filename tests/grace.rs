//! Dependable holds against real servers: jeopardy entered and left across a leader kill, a
//! grace that runs out, a section suspended (not dropped) in jeopardy, and a first lease that
//! survives slow commits.

use std::time::{Duration, Instant};
use zkfence::Acquire;

use zkfence::{Error, FencedLock, LockOptions, LossReason};
use zkfence_harness::{chroot, connect, shared, wait_until};
use zkfence_testkit::{CountingProxy, LocalEnsemble};

const LOCK: &str = "/locks/grace";

/// Waits until `jeopardy` reads `value`, within `within`.
async fn jeopardy_becomes(
    jeopardy: &mut tokio::sync::watch::Receiver<bool>,
    value: bool,
    within: Duration,
) {
    tokio::time::timeout(within, jeopardy.wait_for(|v| *v == value))
        .await
        .unwrap_or_else(|_| panic!("jeopardy did not become {value} within {within:?}"))
        .expect("the guard's state is alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_kill_puts_the_holder_in_jeopardy_and_it_resumes_with_its_lock() {
    let ensemble = LocalEnsemble::start().unwrap_or_else(|e| panic!("{e}"));
    let hosts = ensemble.addr();
    let t = Duration::from_secs(10);
    // Without ride-out a disconnect suspends the hold; the grace keeps it through the election.
    let options = LockOptions::default().with_grace(t);
    let holder = FencedLock::new(connect(&hosts, t).await, LOCK, options).unwrap();
    let waiter = FencedLock::new(connect(&hosts, t).await, LOCK, LockOptions::default()).unwrap();
    let guard = holder.acquire().await.unwrap();
    let waiting = tokio::spawn(async move { waiter.acquire().await.map(|g| g.token()) });
    let admin = connect(&hosts, t).await;
    wait_until(Duration::from_secs(10), "the waiter to queue", || async {
        admin.list_children(LOCK).await.map_or(0, |c| c.len()) == 2
    })
    .await;

    let mut jeopardy = guard.jeopardy();
    ensemble.kill(ensemble.leader().expect("a leader"));
    // Every client loses its server (followers drop theirs when the leader goes).
    jeopardy_becomes(&mut jeopardy, true, Duration::from_secs(10)).await;
    assert_eq!(guard.check(), Err(Error::Jeopardy));
    assert!(!guard.cancellation_token().is_cancelled());
    // After the election a committed probe finds the node: steady, the token never fired.
    tokio::time::timeout(Duration::from_secs(30), guard.steady())
        .await
        .expect("steady again after the election")
        .expect("not lost");
    assert_eq!(guard.check(), Ok(()));
    assert!(!guard.cancellation_token().is_cancelled());
    assert!(!waiting.is_finished(), "the waiter holds while we do");
    let ours = guard.token();
    // The hold was never lost, and the release proves it: it deletes our node.
    guard.release().await.expect("a confirmed release");
    let next = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter acquires")
        .unwrap()
        .unwrap();
    assert!(next > ours);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_runs_out_ends_the_hold_and_fires_the_token() {
    let hosts = chroot(shared(), "grace-runs-out").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let grace = Duration::from_secs(2);
    let options = LockOptions::default().with_grace(grace);
    let client = connect(&format!("{}{chroot}", proxy.addr), Duration::from_secs(4)).await;
    let lock = FencedLock::new(client, LOCK, options).unwrap();
    let guard = lock.acquire().await.unwrap();
    let mut jeopardy = guard.jeopardy();
    proxy.blackhole(true);
    // The client gives the silent connection up (2T/5) and cannot reach the server again.
    jeopardy_becomes(&mut jeopardy, true, Duration::from_secs(5)).await;
    let suspended = Instant::now();
    assert_eq!(guard.check(), Err(Error::Jeopardy));
    // Half the grace later it is still only suspended...
    let early = tokio::time::timeout(grace / 2, guard.lost()).await;
    assert!(early.is_err(), "lost before the grace ran out: {early:?}");
    // ...and once the grace runs out it is lost, for what began the jeopardy: the disconnect,
    // or the lease's lapse if that came first (a fresh lock's lease is the shorter).
    let reason = tokio::time::timeout(grace * 2, guard.lost())
        .await
        .expect("lost once the grace ran out");
    assert!(
        matches!(reason, LossReason::Disconnected | LossReason::LeaseExpired),
        "{reason:?}"
    );
    assert!(guard.cancellation_token().is_cancelled());
    assert!(suspended.elapsed() >= grace / 2);
    assert_eq!(guard.check(), Err(Error::LockLost(reason)));
    proxy.blackhole(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_section_is_not_polled_in_jeopardy_and_goes_on_when_steady() {
    let hosts = chroot(shared(), "grace-section").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let options = LockOptions::default().with_grace(Duration::from_secs(20));
    let client = connect(&format!("{}{chroot}", proxy.addr), Duration::from_secs(10)).await;
    let lock = FencedLock::new(client, LOCK, options).unwrap();
    let (held_tx, held_rx) = tokio::sync::oneshot::channel();
    let (steps_tx, mut steps) = tokio::sync::mpsc::unbounded_channel();
    let section = tokio::spawn(async move {
        lock.run(|held| async move {
            let _ = held_tx.send(held.clone());
            for step in 0u32..1000 {
                // A step is taken only while the section is polled.
                let _ = steps_tx.send((step, held.check()));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<_, Error>(())
        })
        .await
    });
    let held = held_rx.await.expect("the section started");
    let mut jeopardy = held.jeopardy();
    // The server goes away at once (connections reset and refused): jeopardy, not a loss.
    proxy.refuse(true);
    proxy.reset();
    jeopardy_becomes(&mut jeopardy, true, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    while steps.try_recv().is_ok() {}
    // Suspended: no step for many times the section's own 20 ms sleeps.
    let quiet = tokio::time::timeout(Duration::from_millis(500), steps.recv()).await;
    assert!(
        quiet.is_err(),
        "the section took a step in jeopardy: {quiet:?}"
    );
    assert!(!held.cancellation_token().is_cancelled());
    proxy.refuse(false);
    let (_, checked) = tokio::time::timeout(Duration::from_secs(15), steps.recv())
        .await
        .expect("the section goes on once steady")
        .expect("a step");
    assert_eq!(checked, Ok(()), "a step ran while the hold was not steady");
    assert!(!section.is_finished());
    section.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_acquire_whose_create_and_first_probe_commit_slowly_keeps_its_lock() {
    let hosts = chroot(shared(), "cold-slow-commits").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let t = Duration::from_secs(4);
    let client = connect(&format!("{}{chroot}", proxy.addr), t).await;
    // The parent exists, so the first write is the create itself.
    let lock = FencedLock::new(client.clone(), LOCK, LockOptions::default()).unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    // Let the watchdog go idle, so the next acquire starts a cold lease.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The create and the first probe each take a quarter of the session timeout.
    proxy.delay_writes(t / 4, 2);
    let guard = lock.acquire().await.unwrap();
    // Two session timeouts without a loss, and a lease that holds at the end.
    let lost = tokio::time::timeout(2 * t, guard.lost()).await;
    assert!(lost.is_err(), "the fresh lock was lost: {lost:?}");
    assert_eq!(guard.check(), Ok(()));
    assert!(guard.lease_deadline() > tokio::time::Instant::now());
    guard.release().await.unwrap();
}

/// Forty holds on one session go into jeopardy together (the server unreachable past the
/// lease, not past the session timeout) and come out together: one probe checks every node in
/// jeopardy in one `multi`, so they are steady again within a few probe periods of the server
/// coming back, not one probe period per hold (which took about forty here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jeopardy_watch_taken_late_reports_the_jeopardy_under_way() {
    // `zkfence run` takes its watch once the command has started: a disconnect between the
    // grant and that moment must still stop the command (a CI run once missed it).
    let hosts = chroot(shared(), "jeopardy-late-watch").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let client = connect(&format!("{}{chroot}", proxy.addr), Duration::from_secs(10)).await;
    let options = LockOptions::default().with_grace(Duration::from_secs(30));
    let guard = FencedLock::new(client, LOCK, options)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    proxy.refuse(true);
    proxy.reset();
    // Without ride-out the disconnect is jeopardy at once.
    wait_until(Duration::from_secs(10), "the hold in jeopardy", || async {
        guard.check() == Err(Error::Jeopardy)
    })
    .await;
    let mut late = guard.jeopardy();
    tokio::time::timeout(Duration::from_secs(1), late.changed())
        .await
        .expect("the first changed() of a late watch resolves at once")
        .expect("the guard's state is alive");
    assert!(*late.borrow_and_update());
    proxy.refuse(false);
    tokio::time::timeout(Duration::from_secs(30), guard.steady())
        .await
        .expect("steady again")
        .expect("not lost");
    guard.release().await.expect("released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hold_of_a_session_resumes_together_after_jeopardy() {
    const HOLDS: usize = 40;
    let hosts = chroot(shared(), "resume-together").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let t = Duration::from_secs(4);
    let client = connect(&format!("{}{chroot}", proxy.addr), t).await;
    let options = LockOptions::default()
        .with_grace(Duration::from_secs(60))
        .with_ride_out_disconnects(true);
    let mut guards = Vec::new();
    for i in 0..HOLDS {
        let lock = FencedLock::new(client.clone(), format!("/locks/many/{i}"), options.clone());
        guards.push(lock.unwrap().acquire().await.unwrap());
    }
    // A paired proof first: the lease then ends about G before the server could expire the
    // session (a first lease anchored at the connect ends only the margin before it, too
    // close for a partition that must outlast the lease and not the session).
    let first = guards[HOLDS - 1].lease_deadline();
    wait_until(Duration::from_secs(10), "a paired proof", || async {
        guards[0].lease_deadline() > first + Duration::from_millis(500)
    })
    .await;
    // The server goes silent (a partition): every lease lapses, the session survives.
    proxy.blackhole(true);
    for guard in &guards {
        jeopardy_becomes(&mut guard.jeopardy(), true, Duration::from_secs(10)).await;
    }
    proxy.blackhole(false);
    let healed = Instant::now();
    // The application's traffic resumes at once (its client would ping within 3T/20).
    client
        .check_stat("/")
        .await
        .expect("the server answers again");
    for guard in &guards {
        tokio::time::timeout(Duration::from_secs(30), guard.steady())
            .await
            .expect("steady again")
            .expect("not lost");
    }
    let took = healed.elapsed();
    // A probe period is about G = T/2 here; one per hold would take about 40 × 2 s.
    assert!(
        took < Duration::from_secs(8),
        "{HOLDS} holds took {took:?} to be steady again"
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}

/// Locks held on one session in [`holds_through_a_reconnect`]: their node paths (about 250
/// bytes each, with the test's chroot) come to about 175 KB, past the 128 KiB of watched paths
/// that `zookeeper-client` 0.11 can set again after a disconnect. The first [`UNCONTENDED`]
/// are taken at once (the watchdog arms their watches 10 ms in), the rest after a wait (each
/// acquire arms a watch on its own node, which its hold takes over).
const MANY_HOLDS: usize = 700;
const UNCONTENDED: usize = 300;

/// The requests' opcodes counted here: `getData` (a hold's watch being armed), `multiRead`
/// (the watchdog reading back the holds past its watch share) and `removeWatches` (a waiter's
/// own watch dropped at its grant, past the share).
const OP_GET_DATA: i32 = 4;
const OP_MULTI_READ: i32 = 22;
const OP_REMOVE_WATCHES: i32 = 18;

/// What [`holds_through_a_reconnect`] leaves for the test to look at.
struct ManyHolds {
    hosts: String,
    proxy: CountingProxy,
    client: zookeeper_client::Client,
    /// In the order they were granted (the waited ones in no order of their paths).
    guards: Vec<zkfence::LockGuard>,
    /// Whether the client answered again within the deadline after its connection was cut.
    reconnected: bool,
}

/// Takes [`MANY_HOLDS`] locks on one session behind a proxy (with a grace, riding out
/// disconnects), lets the watchdog arm their watches, cuts the connection, and sees whether
/// the client comes back within 8 s.
async fn holds_through_a_reconnect(name: &str, options: LockOptions) -> ManyHolds {
    let hosts = chroot(shared(), name).await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let chroot = &hosts[hosts.find('/').unwrap()..];
    let client = connect(&format!("{}{chroot}", proxy.addr), Duration::from_secs(10)).await;
    let options = options
        .with_grace(Duration::from_secs(60))
        .with_ride_out_disconnects(true);
    let long = "x".repeat(150);
    let paths: Vec<String> = (0..MANY_HOLDS)
        .map(|i| format!("/locks/{long}/{i}"))
        .collect();
    let mut guards = Vec::new();
    for path in &paths[..UNCONTENDED] {
        let lock = FencedLock::new(client.clone(), path.as_str(), options.clone()).unwrap();
        guards.push(lock.acquire().await.unwrap());
    }
    let other = connect(&hosts, Duration::from_secs(10)).await;
    for batch in paths[UNCONTENDED..].chunks(50) {
        guards.extend(after_a_wait(&proxy, &client, &other, batch, &options).await);
    }
    // The watches are armed 10 ms into each hold: wait until no more are being armed.
    let mut armed = 0;
    wait_until(Duration::from_secs(20), "the holds' watches armed", || {
        let now = proxy.counts().get(&OP_GET_DATA).copied().unwrap_or(0);
        let settled = now == armed && now > 0;
        armed = now;
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            settled
        }
    })
    .await;
    proxy.reset();
    let reconnected = tokio::time::timeout(Duration::from_secs(8), async {
        while client.check_stat("/").await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .is_ok();
    ManyHolds {
        hosts,
        proxy,
        client,
        guards,
        reconnected,
    }
}

/// Takes the locks on `paths` on `client` after another session held each: every acquire
/// waits, and arms a watch on its own node (an `exists`) before it is granted.
async fn after_a_wait(
    proxy: &CountingProxy,
    client: &zookeeper_client::Client,
    other: &zookeeper_client::Client,
    paths: &[String],
    options: &LockOptions,
) -> Vec<zkfence::LockGuard> {
    const OP_EXISTS: i32 = 3;
    let mut held = Vec::new();
    for path in paths {
        let lock = FencedLock::new(other.clone(), path.as_str(), LockOptions::default());
        held.push(lock.unwrap().acquire().await.unwrap());
    }
    let exists = || proxy.counts().get(&OP_EXISTS).copied().unwrap_or(0);
    let before = exists();
    let mut waiting = tokio::task::JoinSet::new();
    for path in paths {
        let lock = FencedLock::new(client.clone(), path.as_str(), options.clone()).unwrap();
        waiting.spawn(async move { lock.acquire().await });
    }
    wait_until(Duration::from_secs(20), "every waiter's own watch", || {
        let armed = exists() >= before + paths.len() as u64;
        async move { armed }
    })
    .await;
    for guard in held {
        guard.release().await.unwrap();
    }
    let mut guards = Vec::new();
    while let Some(guard) = waiting.join_next().await {
        guards.push(guard.unwrap().unwrap());
    }
    guards
}

/// Holds past the watchdog's watch share are read back, not watched, so a session with more
/// than 128 KiB of held node paths still sets its watches again in one request after a
/// disconnect and keeps every hold; the holds without a watch still hear of their node's
/// deletion and of a revocation request, within a probe period. Both ways a hold gets its
/// watch count against the share: the watchdog's, and the one a waiting acquire hands over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_past_the_watch_share_ride_out_a_reconnect_and_are_read_back() {
    let many = holds_through_a_reconnect("watch-share", LockOptions::default()).await;
    assert!(many.reconnected, "the client never came back after the cut");
    let count = |op| many.proxy.counts().get(&op).copied().unwrap_or(0);
    // About 48 KiB of 250-byte paths: the uncontended holds fill the share, and every waiter's
    // own watch is dropped at its grant.
    let watched = count(OP_GET_DATA);
    assert!(
        watched < UNCONTENDED as u64,
        "{watched} node watches armed for {UNCONTENDED} uncontended holds"
    );
    let dropped = count(OP_REMOVE_WATCHES);
    assert!(
        dropped >= (MANY_HOLDS - UNCONTENDED) as u64,
        "{dropped} waiters' watches dropped past the share"
    );
    for (i, guard) in many.guards.iter().enumerate() {
        tokio::time::timeout(Duration::from_secs(30), guard.steady())
            .await
            .unwrap_or_else(|_| panic!("hold {i} not steady again"))
            .unwrap_or_else(|e| panic!("hold {i} lost: {e}"));
    }
    // The newest holds are past the share: read back once a probe period (3 s here), also
    // after the cut.
    let reads = count(OP_MULTI_READ);
    wait_until(
        Duration::from_secs(10),
        "a read of the unwatched holds",
        || {
            let now = count(OP_MULTI_READ);
            async move { now > reads }
        },
    )
    .await;
    let admin = connect(&many.hosts, Duration::from_secs(10)).await;
    let last = many.guards.last().unwrap();
    admin.delete(last.node_path(), None).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(10), last.lost())
        .await
        .expect("the unwatched hold heard of its node's deletion");
    assert_eq!(reason, LossReason::NodeDeleted);
    // The guard's own lock path: the waited holds come back in the order they were granted,
    // not in `paths`' order.
    let asked = &many.guards[MANY_HOLDS - 2];
    let lock = FencedLock::new(
        many.client.clone(),
        asked.lock_path(),
        LockOptions::default(),
    )
    .unwrap();
    assert!(lock.request_revocation(asked.node_path()).await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), asked.revocation_requested())
        .await
        .expect("the unwatched hold heard of the revocation request");
    assert_eq!(asked.check(), Ok(()));
    for guard in many.guards {
        let _ = guard.release().await;
    }
}

/// The mutant that watches every held node: past 128 KiB of watched paths the client cannot
/// set them again after the cut, and never answers again.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watch_every_hold_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::WatchEveryHold);
    let many = holds_through_a_reconnect("watch-every-hold", options).await;
    assert!(
        !many.reconnected,
        "the client came back with every hold watched: the mutant went unnoticed"
    );
}
