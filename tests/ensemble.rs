//! A 3-server ensemble: the leader killed under a holder and a waiter. The holder is told, the
//! lock stays exclusive, and work resumes once the remaining two elect a new leader.

use std::time::{Duration, Instant};
use zkfence::Acquire;

use zkfence::{Error, FencedLock, LockOptions, LossReason};
use zkfence_harness::{connect, wait_until};
use zkfence_testkit::{EnsembleOptions, LocalEnsemble};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_cancels_the_holder_keeps_exclusion_and_work_resumes() {
    let ensemble = LocalEnsemble::start().unwrap_or_else(|e| panic!("{e}"));
    let hosts = ensemble.addr();
    // A session long enough to outlive the election, so the holder's node survives it and
    // the waiter must wait for the holder's release (the interesting case).
    let timeout = Duration::from_secs(10);
    let holder = FencedLock::new(
        connect(&hosts, timeout).await,
        "/locks/ensemble",
        LockOptions::default(),
    )
    .unwrap();
    let waiter = FencedLock::new(
        connect(&hosts, timeout).await,
        "/locks/ensemble",
        LockOptions::default(),
    )
    .unwrap();
    let admin = connect(&hosts, timeout).await;
    let guard = holder.acquire().await.unwrap();
    let holder_token = guard.token();
    let waiting = tokio::spawn(async move {
        let guard = waiter.acquire().await?;
        let token = guard.token();
        guard.release().await?;
        Ok::<_, Error>(token)
    });
    wait_until(Duration::from_secs(10), "the waiter to queue", || async {
        admin
            .list_children("/locks/ensemble")
            .await
            .map(|c| c.len())
            .unwrap_or(0)
            == 2
    })
    .await;

    let leader = ensemble.leader().expect("a leader");
    let killed = Instant::now();
    ensemble.kill(leader);
    // Followers drop their clients when the leader goes: the holder's watchdog cancels.
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("holder cancelled");
    assert!(
        matches!(reason, LossReason::Disconnected | LossReason::LeaseExpired),
        "{reason:?}"
    );
    eprintln!(
        "DETECTION leader killed -> holder cancelled ({reason:?}) after {:?}",
        killed.elapsed()
    );
    assert!(
        !waiting.is_finished(),
        "the waiter got the lock while the holder's node exists"
    );

    // The release retries its delete until the new quorum answers; it reports the loss.
    let released = tokio::time::timeout(Duration::from_secs(30), guard.release())
        .await
        .expect("release finished");
    assert_eq!(released, Err(Error::LockLost(reason)));
    let next = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("waiter acquired")
        .unwrap()
        .unwrap();
    assert!(next > holder_token, "{next} after {holder_token}");
    eprintln!(
        "leader killed -> next holder acquired after {:?}",
        killed.elapsed()
    );

    // Two servers are a quorum: the lock keeps working, tokens keep increasing.
    let mut last = next;
    for _ in 0..3 {
        let guard = holder.acquire().await.unwrap();
        assert!(guard.token() > last);
        last = guard.token();
        guard.release().await.unwrap();
    }
    ensemble.restart(leader).unwrap();
}

/// A client allowed to go read-only, attached to a server in read-only mode (two of three
/// servers down), holds a read-only session whose id changes when it upgrades: the lock refuses
/// it up front with a clear error instead of leaving its watchdog on a dead id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_is_refused_with_a_clear_error() {
    // A read-only server can only hand out local sessions.
    let options = EnsembleOptions::default()
        .with_jvm_flag("-Dreadonlymode.enabled=true")
        .with_config("localSessionsEnabled", "true");
    let ensemble = tokio::task::spawn_blocking(move || LocalEnsemble::start_with(options))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let survivor = ensemble.server_addr(0);
    let ensemble = tokio::task::spawn_blocking(move || {
        ensemble.kill(1);
        ensemble.kill(2);
        ensemble
    })
    .await
    .unwrap();
    wait_until(
        Duration::from_secs(30),
        "the survivor to serve read-only",
        || {
            let survivor = survivor.clone();
            async move {
                zkfence_testkit::four_letter(&survivor, "srvr")
                    .is_some_and(|s| s.contains("Mode: read-only"))
            }
        },
    )
    .await;
    let client = zookeeper_client::Client::connector()
        .with_readonly(true)
        .with_session_timeout(Duration::from_secs(10))
        .connect(&survivor)
        .await
        .unwrap();
    assert!(client.session().is_readonly());
    let err = FencedLock::new(client, "/locks/ro", LockOptions::default()).unwrap_err();
    assert_eq!(err, Error::ReadOnlySession);
    assert!(err.to_string().contains("with_readonly"), "{err}");
    drop(ensemble);
}
