//! What only a ZooKeeper 3.9+ server exercises: the zxid that 3.9 puts on every watch event,
//! which the handoff compares to tell a marked release (the data change and the deletion in
//! one transaction) from a write into a node followed by its deletion later (the queue
//! module's "The handoff"). On 3.8 the events carry no zxid and the comparison is skipped, so
//! these tests skip there, saying so. Run them on 3.9 with Debian 13's package:
//!
//! ```text
//! ZOOKEEPER_HOME=$(scripts/zookeeper-3.9) cargo test -p zkfence --test zookeeper_39
//! ```

use std::time::Duration;
use zkfence::Acquire;

use zkfence::{FencedLock, LockOptions};
use zkfence_harness::{children, chroot, connect, shared, wait_until, watches};
use zkfence_testkit::{four_letter, CountingProxy};
use zookeeper_client as zk;

const LOCK: &str = "/locks/zxid";
const T: Duration = Duration::from_secs(10);
/// `getChildren2`'s op code: a listing, or a child watch on a node ahead.
const GET_CHILDREN: i32 = 12;
/// `getChildren`'s op code, which a listing or a child watch may use instead.
const GET_CHILDREN_OLD: i32 = 8;

/// The server's version (`3.9.3`) from `srvr`, for the first server of `hosts`.
fn server_version(hosts: &str) -> (u32, u32, String) {
    let server = hosts.split(['/', ',']).next().unwrap_or(hosts);
    let srvr = four_letter(server, "srvr").unwrap_or_default();
    let version = srvr
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version: "))
        .and_then(|v| v.split(['-', ',']).next())
        .unwrap_or_else(|| panic!("no version in srvr's answer: {srvr:?}"))
        .to_owned();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor, version)
}

/// Whether the shared server is 3.9 or later; if not, prints why the test skips.
fn on_3_9(test: &str) -> bool {
    let (major, minor, version) = server_version(shared());
    let new_enough = (major, minor) >= (3, 9);
    if new_enough {
        eprintln!("{test}: on ZooKeeper {version}");
    } else {
        eprintln!(
            "{test}: skipped: ZooKeeper {version} puts no zxid on watch events, so the handoff \
             does not compare them (run with ZOOKEEPER_HOME=$(scripts/zookeeper-3.9))"
        );
    }
    new_enough
}

/// A holder (zkfence), a waiting node (a raw `lock-` node, as Curator's `InterProcessMutex`
/// makes), and a zkfence waiter behind both, which watches the waiting node's deletion and
/// data (it queued behind more than one node). Then the waiting node is written and deleted:
/// in one transaction (`marked`, as a release does) or in two. Whether the waiter (built with
/// `options`) then took the lock, and how many listings and child watches it sent after the
/// deletion.
/// long because: one scenario read top to bottom, as the tests that call it are.
async fn write_then_delete_the_waiting_node(
    name: &str,
    marked: bool,
    options: LockOptions,
) -> (bool, u64) {
    let hosts = chroot(shared(), name).await;
    let admin = connect(&hosts, T).await;
    let holder = FencedLock::new(connect(&hosts, T).await, LOCK, LockOptions::default()).unwrap();
    let guard = holder.acquire().await.unwrap();
    // The waiting node: an ephemeral of a session of its own that only waits.
    let waiting = connect(&hosts, T).await;
    let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!(
        "{LOCK}/_c_7e57e57e-0039-4000-8000-{:012x}-lock-",
        std::process::id()
    );
    let (_, sequence) = waiting.create(&prefix, b"", &mode).await.unwrap();
    let middle = format!("{prefix}{sequence}");
    // The last waiter, through a proxy that counts its requests.
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = CountingProxy::start(server).await;
    let last = FencedLock::new(
        connect(&format!("{}{root}", proxy.addr), T).await,
        LOCK,
        options,
    )
    .unwrap();
    let session = last.client().session_id();
    let queued = tokio::spawn(async move { last.acquire().await.unwrap() });
    wait_until(T, "the last waiter to queue", || async {
        children(&hosts, LOCK).await.len() == 3
    })
    .await;
    // Its child watch on the waiting node goes out before its data watch, and only the data
    // watch shows in `wchp`: once that one is there, both are.
    wait_until(T, "the last waiter to watch the waiting node", || async {
        watches(&hosts, session, &middle)
    })
    .await;
    let listings = || {
        let counts = proxy.counts();
        [GET_CHILDREN, GET_CHILDREN_OLD]
            .iter()
            .map(|op| counts.get(op).copied().unwrap_or(0))
            .sum::<u64>()
    };
    let before = listings();
    if marked {
        // The holder goes first (a plain release, which the last waiter does not watch),
        // then the waiting node is released with the marker: one transaction, one zxid.
        guard.release().await.unwrap();
        let mut release = admin.new_multi_writer();
        release.add_set_data(&middle, b"released", None).unwrap();
        release.add_delete(&middle, None).unwrap();
        release.commit().await.unwrap();
        let next = tokio::time::timeout(T, queued)
            .await
            .expect("the marked release hands the lock on")
            .unwrap();
        let sent = listings() - before;
        next.release().await.unwrap();
        return (true, sent);
    }
    // Someone writes into the waiting node (Curator's `Revoker` aimed at a waiter), and the
    // waiter gives up later: two transactions, two zxids.
    admin.set_data(&middle, b"__REVOKE__", None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    waiting.delete(&middle, None).await.unwrap();
    // It lists the queue again and sets a child watch on the holder, or walks in beside it.
    wait_until(
        T,
        "the last waiter to list again or take the lock",
        || async { queued.is_finished() || listings() >= before + 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = queued.is_finished();
    let sent = listings() - before;
    let holder_token = guard.token();
    guard.release().await.unwrap();
    let next = tokio::time::timeout(T, queued)
        .await
        .expect("the holder's release hands the lock on")
        .unwrap();
    assert!(next.token() > holder_token);
    next.release().await.unwrap();
    (taken, sent)
}

/// A write into a waiting node, then its deletion: on 3.9 the two events carry different
/// zxids, so the waiter behind it does not take them for a marked release. It lists the queue
/// again and waits for the holder, which a waiter that skipped the comparison (as on 3.8)
/// would walk in beside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_into_a_waiting_node_then_its_deletion_is_no_release() {
    if !on_3_9("a_write_into_a_waiting_node_then_its_deletion_is_no_release") {
        return;
    }
    let (taken, sent) =
        write_then_delete_the_waiting_node("zxid-apart", false, LockOptions::default()).await;
    assert!(
        !taken,
        "the waiter took a write and a later deletion for a marked release: it holds beside \
         the holder"
    );
    assert!(sent >= 2, "the waiter did not list the queue again: {sent}");
}

/// The comparison is what the test above rests on: a waiter that skips it (the `ZxidBlind`
/// mutant) takes the write and the later deletion for a marked release and holds beside the
/// holder.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zxid_blind_mutant_is_caught() {
    if !on_3_9("the_zxid_blind_mutant_is_caught") {
        return;
    }
    let blind = LockOptions::default().with_mutant(zkfence::Mutant::ZxidBlind);
    let (taken, _) = write_then_delete_the_waiting_node("zxid-blind", false, blind).await;
    assert!(
        taken,
        "the zxid-blind waiter did not walk in beside the holder: the test above would pass \
         without the comparison"
    );
}

/// The other side: a marked release (the write and the deletion in one `multi`) carries one
/// zxid on both events, and the waiter behind it takes the lock with no listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_release_admits_with_no_listing() {
    if !on_3_9("a_marked_release_admits_with_no_listing") {
        return;
    }
    let (taken, sent) =
        write_then_delete_the_waiting_node("zxid-same", true, LockOptions::default()).await;
    assert!(taken);
    assert_eq!(
        sent, 0,
        "the waiter listed the queue after a marked release"
    );
}

/// What the handoff's comparison rests on: on 3.9+ a watch event carries the zxid of the
/// transaction that fired it (the write's `mzxid`); before 3.9 it carries none, and the
/// comparison is skipped. Runs on either, stating which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_carry_their_transaction_s_zxid_from_3_9_on() {
    let (major, minor, version) = server_version(shared());
    eprintln!("on ZooKeeper {version}");
    let hosts = chroot(shared(), "zxid-event").await;
    let client = connect(&hosts, T).await;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create("/node", b"", &options).await.unwrap();
    let (_, _, watcher) = client.get_and_watch_data("/node").await.unwrap();
    let stat = client.set_data("/node", b"written", None).await.unwrap();
    let event = tokio::time::timeout(T, watcher.changed()).await.unwrap();
    assert_eq!(event.event_type, zk::EventType::NodeDataChanged);
    if (major, minor) >= (3, 9) {
        assert_eq!(
            event.zxid, stat.mzxid,
            "the event's zxid is not its write's"
        );
    } else {
        assert_eq!(event.zxid, zk::WatchedEvent::NO_ZXID);
    }
}
