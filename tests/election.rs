//! Fenced leader election against real servers: campaign order and epochs, resign handing
//! over, proclaim fenced by the leader's node, an observer that misses no change a watch can
//! see (across a reconnect), `lead` campaigning again after an expired session, and a mixed
//! fleet with Curator's `LeaderLatch` with one leader at a time.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use zkfence::{Error, FencedElection, LockOptions};
use zkfence_harness::{chroot, connect, expire_session, shared, wait_until};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

const ELECTION: &str = "/elections/singleton";
const T: Duration = Duration::from_secs(10);

async fn candidate(hosts: &str) -> FencedElection {
    FencedElection::new(connect(hosts, T).await, ELECTION, LockOptions::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_lead_in_campaign_order_with_increasing_epochs_and_resign_hands_over() {
    let hosts = chroot(shared(), "election-order").await;
    let first = candidate(&hosts).await;
    let leading = first.campaign("first").await.unwrap();
    let mut waiting = Vec::new();
    for name in ["second", "third"] {
        let election = candidate(&hosts).await;
        waiting.push(tokio::spawn(async move {
            election.campaign(name).await.unwrap()
        }));
        let queued = waiting.len() + 1;
        wait_until(
            Duration::from_secs(10),
            "the candidate to queue",
            || async { zkfence_harness::children(&hosts, ELECTION).await.len() == queued },
        )
        .await;
    }
    let leader = first.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.epoch, leading.epoch());
    assert_eq!(leader.data, b"first");
    let mut epochs = vec![leading.epoch()];
    leading.resign().await.unwrap();
    for (waiter, name) in waiting.into_iter().zip(["second", "third"]) {
        let next = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the next candidate leads")
            .unwrap();
        let leader = first.leader().await.unwrap().expect("a leader");
        assert_eq!(leader.data, name.as_bytes());
        epochs.push(next.epoch());
        next.resign().await.unwrap();
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
    assert_eq!(first.leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_is_fenced_by_the_leaders_node() {
    let hosts = chroot(shared(), "election-proclaim").await;
    let election = candidate(&hosts).await;
    let leadership = election.campaign("identity").await.unwrap();
    leadership.proclaim("serving at 10.0.0.7").await.unwrap();
    assert_eq!(
        election.leader().await.unwrap().unwrap().data,
        b"serving at 10.0.0.7"
    );
    leadership.proclaim("serving at 10.0.0.8").await.unwrap();
    assert_eq!(
        election.leader().await.unwrap().unwrap().data,
        b"serving at 10.0.0.8"
    );
    // Deposed (its node deleted): the proclaim fails, and nobody sees a stale value.
    let admin = connect(&hosts, T).await;
    admin.delete(leadership.node_path(), None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), leadership.lost())
        .await
        .unwrap();
    assert!(matches!(
        leadership.proclaim("late").await,
        Err(Error::LockLost(_))
    ));
    let successor = candidate(&hosts).await;
    let next = successor.campaign("successor").await.unwrap();
    assert_eq!(election.leader().await.unwrap().unwrap().data, b"successor");
    next.resign().await.unwrap();
}

/// A resignation ends the term before it withdraws the proclamation: ZooKeeper delivers a
/// persistent watch's events in commit order, so the order of the two deletions is seen
/// exactly. The other order lets an observer see the term going on without its proclamation
/// (a leader that seems to serve as it did before it proclaimed), as `zkfence elect --observe`
/// printed once in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_deletes_the_node_before_the_proclamation() {
    let hosts = chroot(shared(), "election-resign-order").await;
    let election = candidate(&hosts).await;
    let leadership = election.campaign("identity").await.unwrap();
    leadership.proclaim("serving").await.unwrap();
    let node = leadership.node_path().to_owned();
    let watcher_client = connect(&hosts, T).await;
    let mut events = watcher_client
        .watch(
            ELECTION,
            zookeeper_client::AddWatchMode::PersistentRecursive,
        )
        .await
        .unwrap();
    leadership.resign().await.unwrap();
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.changed())
            .await
            .expect("both deletions within 10 s");
        if event.event_type == zookeeper_client::EventType::NodeDeleted {
            deleted.push(event.path);
        }
    }
    let value = format!("{ELECTION}/zkfence-leader-value");
    assert_eq!(deleted, [node, value], "the deletions in commit order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_leader_a_watch_can_see_across_a_reconnect() {
    let hosts = chroot(shared(), "election-observe").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = CountingProxy::start(server).await;
    let watched = FencedElection::new(
        connect(&format!("{}{root}", proxy.addr), T).await,
        ELECTION,
        LockOptions::default(),
    )
    .unwrap();
    let mut observer = watched.observe();
    assert_eq!(observer.next().await.unwrap(), None);
    let a = candidate(&hosts).await.campaign("a").await.unwrap();
    let seen = observer.next().await.unwrap().expect("a leads");
    assert_eq!((seen.epoch, seen.data.as_slice()), (a.epoch(), &b"a"[..]));
    // Candidates queueing behind the leader cost the observer nothing: no notification, no
    // request (pings aside).
    let asked =
        |proxy: &CountingProxy| proxy.total() - proxy.counts().get(&11).copied().unwrap_or(0);
    let (requests, notified) = (asked(&proxy), proxy.notifications());
    let mut queued = Vec::new();
    for n in 0..4 {
        let election = candidate(&hosts).await;
        queued.push(tokio::spawn(async move {
            election.campaign(format!("q{n}")).await
        }));
    }
    wait_until(
        Duration::from_secs(10),
        "four candidates to queue",
        || async { zkfence_harness::children(&hosts, ELECTION).await.len() == 5 },
    )
    .await;
    assert_eq!((asked(&proxy), proxy.notifications()), (requests, notified));
    queued.iter().for_each(|q| q.abort());
    wait_until(
        Duration::from_secs(10),
        "the queued candidates to leave",
        || async { zkfence_harness::children(&hosts, ELECTION).await.len() == 1 },
    )
    .await;
    // The leader changes three times while the observer is cut off and reconnects: it
    // reports the last, and never an older one.
    proxy.refuse(true);
    proxy.reset();
    a.resign().await.unwrap();
    let b = candidate(&hosts).await.campaign("b").await.unwrap();
    b.resign().await.unwrap();
    let c = candidate(&hosts).await.campaign("c").await.unwrap();
    proxy.refuse(false);
    let after = tokio::time::timeout(Duration::from_secs(15), observer.next())
        .await
        .expect("the observer reports the change")
        .unwrap()
        .expect("c leads");
    assert_eq!((after.epoch, after.data.as_slice()), (c.epoch(), &b"c"[..]));
    // A change while connected is seen too: the proclaimed value.
    c.proclaim("c, serving").await.unwrap();
    let proclaimed = observer.next().await.unwrap().unwrap();
    assert_eq!(proclaimed.data, b"c, serving");
    c.resign().await.unwrap();
    assert_eq!(observer.next().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_campaigns_again_on_a_new_session_after_its_session_expired() {
    let hosts = chroot(shared(), "election-lead").await;
    let sessions: Arc<std::sync::Mutex<Vec<zookeeper_client::Client>>> = Arc::default();
    let reconnect = {
        let (hosts, sessions) = (hosts.clone(), sessions.clone());
        move || {
            let (hosts, sessions) = (hosts.clone(), sessions.clone());
            async move {
                let client = connect(&hosts, T).await;
                sessions.lock().unwrap().push(client.clone());
                Ok(client)
            }
        }
    };
    let first = connect(&hosts, T).await;
    sessions.lock().unwrap().push(first.clone());
    let election = FencedElection::new(first, ELECTION, LockOptions::default())
        .unwrap()
        .with_reconnect(reconnect);
    let terms = Arc::new(AtomicUsize::new(0));
    // Each term's session: the attach that expires the first session also breaks its
    // connection, and a disconnect alone may end a term that the same session then campaigns
    // again for, before the expiry lands.
    let term_sessions = Arc::new(std::sync::Mutex::new(Vec::new()));
    let shutdown = CancellationToken::new();
    let leading = tokio::spawn({
        let (terms, shutdown, term_sessions) =
            (terms.clone(), shutdown.clone(), term_sessions.clone());
        async move {
            election
                .lead("worker", shutdown, |leadership| {
                    let (terms, term_sessions) = (terms.clone(), term_sessions.clone());
                    async move {
                        term_sessions.lock().unwrap().push(leadership.session_id());
                        terms.fetch_add(1, Ordering::SeqCst);
                        leadership.lost().await;
                        Ok::<(), Error>(())
                    }
                })
                .await
        }
    });
    wait_until(Duration::from_secs(10), "the first term", || async {
        terms.load(Ordering::SeqCst) == 1
    })
    .await;
    let victim = sessions.lock().unwrap()[0].clone();
    expire_session(&hosts, &victim).await;
    let first_session = victim.session_id();
    wait_until(
        Duration::from_secs(20),
        "a term on a new session",
        || async {
            (term_sessions.lock().unwrap().iter()).any(|session| *session != first_session)
        },
    )
    .await;
    assert!(sessions.lock().unwrap().len() >= 2, "no new session");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), leading)
        .await
        .expect("lead stops on shutdown")
        .unwrap()
        .unwrap();
    assert_eq!(
        candidate(&hosts).await.leader().await.unwrap(),
        None,
        "resigned"
    );
}

/// What a worker's own failure looks like to `lead`.
#[derive(Debug)]
enum WorkError {
    Lock(#[allow(dead_code)] Error),
    DiskFull,
}

impl From<Error> for WorkError {
    fn from(err: Error) -> Self {
        WorkError::Lock(err)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_campaigns_again_after_a_loss_and_ends_with_the_works_own_error() {
    let hosts = chroot(shared(), "election-lead-errors").await;
    let election = candidate(&hosts).await;
    let terms = Arc::new(AtomicUsize::new(0));
    let leading = tokio::spawn({
        let terms = terms.clone();
        async move {
            let work = |leadership: zkfence::Leadership| {
                let term = terms.fetch_add(1, Ordering::SeqCst);
                async move {
                    if term > 0 {
                        return Err(WorkError::DiskFull);
                    }
                    // The first term's error comes of the loss: lead campaigns again.
                    leadership.lost().await;
                    leadership.check()?;
                    Ok(())
                }
            };
            election
                .lead("worker", CancellationToken::new(), work)
                .await
        }
    });
    wait_until(Duration::from_secs(10), "the first term", || async {
        terms.load(Ordering::SeqCst) == 1
    })
    .await;
    let leader = candidate(&hosts)
        .await
        .leader()
        .await
        .unwrap()
        .expect("a leader");
    let admin = connect(&hosts, T).await;
    admin
        .delete(&format!("{ELECTION}/{}", leader.node), None)
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(20), leading)
        .await
        .expect("lead ends with the second term's error")
        .unwrap();
    assert!(matches!(ended, Err(WorkError::DiskFull)), "{ended:?}");
    assert_eq!(terms.load(Ordering::SeqCst), 2);
    assert_eq!(
        candidate(&hosts).await.leader().await.unwrap(),
        None,
        "resigned"
    );
}

fn curator_worker() -> String {
    let source = include_str!("curator/CuratorLatchWorker.java");
    zkfence_harness::curator::worker("CuratorLatchWorker", source)
        .unwrap_or_else(|err| panic!("{err}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_leader_latches_and_zkfence_candidates_have_one_leader_at_a_time() {
    let classes = curator_worker();
    let hosts = chroot(shared(), "election-curator").await;
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("latch-marker-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let seconds = 6;
    let java = tokio::process::Command::new("java")
        .args([
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            &classes,
            "CuratorLatchWorker",
        ])
        .args([
            &hosts,
            ELECTION,
            &marker.to_string_lossy(),
            &seconds.to_string(),
            "20",
        ])
        .output();
    let java = tokio::spawn(java);
    let election = candidate(&hosts).await;
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let (mut terms, mut violations) = (0, 0);
    while tokio::time::Instant::now() < until {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let Some(leadership) = election.campaign_timeout("zkfence", left).await.unwrap() else {
            break;
        };
        if std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&marker)
            .is_err()
        {
            violations += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = std::fs::remove_file(&marker);
        leadership.resign().await.unwrap();
        terms += 1;
    }
    let output = java.await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let field = |name: &str| -> usize {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no {name} in {stdout:?} {}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })
    };
    assert_eq!(violations, 0, "zkfence led beside another leader");
    assert_eq!(field("violations"), 0, "Curator led beside another leader");
    assert!(
        terms > 0 && field("terms") > 0,
        "zkfence {terms}, curator {stdout}"
    );
}

/// A new proclamation of the same leader costs an observer one read of the value (and its
/// watch again): no listing of the candidates, however many queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclamation_costs_an_observer_one_read_and_no_listing() {
    let hosts = chroot(shared(), "election-proclaim-cost").await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = CountingProxy::start(server).await;
    let watched = FencedElection::new(
        connect(&format!("{}{root}", proxy.addr), T).await,
        ELECTION,
        LockOptions::default(),
    )
    .unwrap();
    let leader = candidate(&hosts).await.campaign("a").await.unwrap();
    let mut observer = watched.observe();
    assert!(observer.next().await.unwrap().is_some());
    leader.proclaim("serving at 10.0.0.7").await.unwrap();
    let before = proxy.counts();
    leader.proclaim("serving at 10.0.0.8").await.unwrap();
    let seen = observer.next().await.unwrap().expect("still a leader");
    assert_eq!(seen.data, b"serving at 10.0.0.8");
    let after = proxy.counts();
    let delta = |op: i32| after.get(&op).unwrap_or(&0) - before.get(&op).unwrap_or(&0);
    // getChildren (8), getChildren2 (12): none; getData (4): the value, read once.
    assert_eq!(
        (delta(8), delta(12)),
        (0, 0),
        "the observer listed the candidates"
    );
    assert_eq!(delta(4), 1, "{after:?} after {before:?}");
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_node_we_may_not_read_is_an_access_error_not_a_hang() {
    let hosts = chroot(shared(), "election-acl").await;
    let path = "/elections/secret";
    let open = connect(&hosts, T).await;
    let anyone = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for parent in ["/elections", path] {
        open.create(parent, &[], &anyone).await.unwrap();
    }
    // The leader's node readable by its creator alone.
    let owner = zkfence::Connect::new(hosts.as_str())
        .with_auth("digest", b"owner:secret")
        .connect()
        .await
        .unwrap();
    let options = LockOptions::default().with_acls(&zk::Acls::creator_all());
    let leading = FencedElection::new(owner, path, options).unwrap();
    let leadership = leading.campaign("owner").await.unwrap();
    assert_eq!(
        leading.leader().await.unwrap().unwrap().epoch,
        leadership.epoch()
    );

    let outsider = FencedElection::new(open, path, LockOptions::default()).unwrap();
    let read = tokio::time::timeout(Duration::from_secs(10), outsider.leader())
        .await
        .expect("the read ends rather than listing again without end");
    assert!(
        matches!(&read, Err(Error::AccessDenied { op: "get", path: node })
            if node.starts_with("/elections/secret/")),
        "{read:?}"
    );
    leadership.resign().await.unwrap();
}
