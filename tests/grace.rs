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
