//! The ZooKeeper fence against a real server: every case of the conformance kit, each fence
//! mutant caught by the case that attacks it, and the fence's own promises (the holder's node
//! checked in the same transaction, a ticket that only travelled as text, a scope's fence
//! node kept to its scope).

use std::sync::Arc;
use std::time::Duration;

use zkfence::conformance::{self, ZooKeeperStore};
use zkfence::fence::{FenceError, FenceTicket, ZooKeeperFence};
use zkfence::{Acquire, Error, FencedLock, LockOptions};
use zkfence_harness::{chroot, connect, shared};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

const T: Duration = Duration::from_secs(10);

/// The kit's store on ZooKeeper (the library's own, as `zkfence fence verify zk://` runs it),
/// in a chroot of the test's own; the fence's client through a proxy (to lose a commit's
/// reply), reads direct. With the client it reads with.
async fn store_and_client(name: &str) -> (ZooKeeperStore, zk::Client) {
    let hosts = chroot(shared(), name).await;
    let (server, root) = hosts.split_at(hosts.find('/').unwrap());
    let proxy = Arc::new(CountingProxy::start(server).await);
    let fenced = connect(&format!("{}{root}", proxy.addr), T).await;
    let reader = connect(&hosts, T).await;
    let switch: conformance::ReplySwitch = Arc::new(move |on| proxy.drop_replies(on));
    let store = ZooKeeperStore::create(reader.clone(), fenced, "/", "kit", Some(switch))
        .await
        .unwrap_or_else(|e| panic!("the kit's store: {e}"));
    (store, reader)
}

async fn new_store(name: &str) -> ZooKeeperStore {
    store_and_client(name).await.0
}

// Every case that needs nothing but the store (and the lost hold below, which takes a lock),
// but the lost claim reply: a ZooKeeper claim reads the fence node before its `multi`, and the
// kit, dropping replies before the claim, would hold that read back (the `multi`'s lost reply
// is the lost commit reply's case).
zkfence_testkit::conformance_tests!(new_store;
    conformance_order: order,
    conformance_edge_tokens: edge_tokens,
    conformance_concurrent_first_claims: concurrent_first_claims,
    conformance_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
    conformance_counter_equals_accepted_increments: counter_equals_accepted_increments,
    conformance_lost_reply_is_in_doubt: lost_reply_is_in_doubt,
    conformance_serialization_failure_retried: serialization_failure_retried,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let (store, client) = store_and_client("zk-fence-lost").await;
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// The fence rules' mutants, each caught by the case the kit's table names for it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::conformance::expect_caught;
    use zkfence::FenceMutant;

    fn assert_caught(mutant: FenceMutant, outcome: conformance::Outcome) {
        expect_caught(&format!("{mutant:?}"), outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer() {
        let m = FenceMutant::CheckOutsideTransaction;
        let store = new_store("zk-mutant-outside").await.with_mutant(m);
        assert_caught(
            m,
            conformance::stale_writer_paused_before_commit(&store).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strictly_greater_is_caught_by_order() {
        let m = FenceMutant::StrictlyGreater;
        let store = new_store("zk-mutant-strict").await.with_mutant(m);
        assert_caught(m, conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn equality_is_caught_by_order() {
        let m = FenceMutant::Equality;
        let store = new_store("zk-mutant-equality").await.with_mutant(m);
        assert_caught(m, conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_string_compare_is_caught_by_the_edge_tokens() {
        let m = FenceMutant::StringCompare;
        let store = new_store("zk-mutant-string").await.with_mutant(m);
        assert_caught(m, conformance::edge_tokens(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_upsert_is_caught_by_order() {
        let m = FenceMutant::NoUpsert;
        let store = new_store("zk-mutant-upsert").await.with_mutant(m);
        assert_caught(m, conformance::order(&store).await);
    }
}

/// A real holder: its write commits while it holds, and is refused by ZooKeeper itself (the
/// node check inside the `multi`) once its node is gone, even when the holder's own check
/// still passes (a ticket that travelled as text to a service with no hold to check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holders_node_is_checked_in_the_same_transaction() {
    let hosts = chroot(shared(), "zk-fence-node").await;
    let client = connect(&hosts, T).await;
    let lock = FencedLock::new(client.clone(), "/locks/node", LockOptions::default()).unwrap();
    let guard = lock.acquire().await.unwrap();
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create("/data", b"0", &options).await.unwrap();
    let fence = ZooKeeperFence::new(client.clone());
    fence
        .write(&guard.ticket(), |ops| ops.add_set_data("/data", b"1", None))
        .await
        .unwrap();
    // The text form carries the node: a service that only got the text is fenced by it.
    let remote: FenceTicket = guard.ticket().to_string().parse().unwrap();
    assert!(!remote.is_held());
    lock.force_revocation(guard.node_path()).await.unwrap();
    let late = fence
        .write(&remote, |ops| ops.add_set_data("/data", b"stale", None))
        .await;
    assert!(
        matches!(late, Err(FenceError::LockLost { .. })),
        "a write under a deleted node: {late:?}"
    );
    assert_eq!(client.get_data("/data").await.unwrap().0, b"1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_node_serves_one_scope_and_a_ticket_without_node_needs_one() {
    let hosts = chroot(shared(), "zk-fence-scope").await;
    let client = connect(&hosts, T).await;
    let fence = ZooKeeperFence::with_fence_node(client.clone(), "/fences/a").unwrap();
    fence
        .claim(&conformance::ticket("/locks/a", 10))
        .await
        .unwrap();
    let other = fence.claim(&conformance::ticket("/locks/b", 11)).await;
    assert!(
        matches!(&other, Err(FenceError::Store(Error::FenceScope { .. }))),
        "{other:?}"
    );
    let no_node = ZooKeeperFence::new(client.clone())
        .write(&conformance::ticket("/locks/a", 12), |_| Ok(()))
        .await;
    let Err(FenceError::Invalid(err @ Error::InvalidOptions(_))) = no_node else {
        panic!("a ticket without a node and a fence without a fence node: {no_node:?}");
    };
    assert!(err.to_string().contains("with_fence_node"), "{err}");
    // A node that is not a fence is refused with a clear error, not parsed as one.
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create("/config", b"hello", &options).await.unwrap();
    let not_fence = ZooKeeperFence::with_fence_node(client, "/config").unwrap();
    let err = not_fence
        .claim(&conformance::ticket("/locks/a", 13))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("not a zkfence fence node"),
        "{err}"
    );
}

/// A fence remembers the fence node its last commit left, and writes without reading it
/// first; when another writer moved the node meanwhile, the version check inside the `multi`
/// fails, and the fence reads, compares and refuses the now stale token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_that_remembers_its_node_is_refused_once_another_raised_it() {
    let hosts = chroot(shared(), "zk-fence-known").await;
    let client = connect(&hosts, T).await;
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    client.create("/data", b"0", &options).await.unwrap();
    let (old, new) = (
        conformance::ticket("/locks/known", 100),
        conformance::ticket("/locks/known", 200),
    );
    let remembering = ZooKeeperFence::with_fence_node(client.clone(), "/fences/known").unwrap();
    remembering
        .write(&old, |ops| ops.add_set_data("/data", b"1", None))
        .await
        .unwrap();
    let other = ZooKeeperFence::with_fence_node(connect(&hosts, T).await, "/fences/known").unwrap();
    other.claim(&new).await.unwrap();
    let late = remembering
        .write(&old, |ops| ops.add_set_data("/data", b"stale", None))
        .await;
    assert!(
        matches!(late, Err(FenceError::Refused { seen: 200, .. })),
        "{late:?}"
    );
    assert_eq!(client.get_data("/data").await.unwrap().0, b"1");
    // And it goes on for the newer holder, reading afresh.
    remembering
        .write(&new, |ops| ops.add_set_data("/data", b"2", None))
        .await
        .unwrap();
    assert_eq!(client.get_data("/data").await.unwrap().0, b"2");
}

/// The operator's way out of a reset ensemble: the fence node is set (never deleted), and
/// the holders of the new ensemble write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebase_sets_the_fence_node_and_lets_the_new_tokens_in() {
    let hosts = chroot(shared(), "zk-fence-rebase").await;
    let client = connect(&hosts, T).await;
    let fence = ZooKeeperFence::with_fence_node(client.clone(), "/fences/rebase").unwrap();
    assert_eq!(fence.rebase("/locks/rebase", 0).await.unwrap(), None);
    let old = conformance::ticket("/locks/rebase", 0x7_0000_0001);
    fence.claim(&old).await.unwrap();
    let new = conformance::ticket("/locks/rebase", 0x1_0000_0001);
    assert!(fence.claim(&new).await.unwrap_err().is_refused());
    assert!(
        fence.rebase("/locks/other", 0).await.is_err(),
        "another scope's node"
    );
    assert_eq!(
        fence.rebase("/locks/rebase", 0).await.unwrap(),
        Some(0x7_0000_0001)
    );
    fence.claim(&new).await.unwrap();
    assert_eq!(
        fence.seen("/locks/rebase").await.unwrap(),
        Some(0x1_0000_0001)
    );
}
