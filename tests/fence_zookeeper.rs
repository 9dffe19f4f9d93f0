//! The ZooKeeper fence against a real server: every case of the conformance kit, each fence
//! mutant caught by the case that attacks it, and the fence's own promises (the holder's node
//! checked in the same transaction, a ticket that only travelled as text, a scope's fence
//! node kept to its scope).

use std::sync::Arc;
use std::time::Duration;

use zkfence::fence::{FenceError, FenceTicket, ZooKeeperFence};
use zkfence::{Acquire, Error, FencedLock, LockOptions};
use zkfence_testkit::conformance::{self, BoxFuture, FenceStore, Hooks, ReplySwitch};
use zkfence_testkit::harness::{chroot, connect, shared};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

const T: Duration = Duration::from_secs(10);

/// The kit's store on ZooKeeper: counters in `/counters/<key>`, the commit log as sequential
/// nodes under `/logs/<key>`, a fence node per scope under `/fences`. The fence's client goes
/// through a proxy (to lose a commit's reply); reads go direct.
struct ZkStore {
    fenced: zk::Client,
    reader: zk::Client,
    proxy: Arc<CountingProxy>,
    #[cfg(feature = "mutants")]
    mutant: Option<zkfence::FenceMutant>,
}

impl ZkStore {
    async fn new(name: &str) -> ZkStore {
        let hosts = chroot(shared(), name).await;
        let (server, root) = hosts.split_at(hosts.find('/').unwrap());
        let proxy = Arc::new(CountingProxy::start(server).await);
        let fenced = connect(&format!("{}{root}", proxy.addr), T).await;
        let reader = connect(&hosts, T).await;
        for path in ["/counters", "/logs", "/fences"] {
            let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            reader.create(path, &[], &options).await.unwrap();
        }
        ZkStore {
            fenced,
            reader,
            proxy,
            #[cfg(feature = "mutants")]
            mutant: None,
        }
    }

    #[cfg(feature = "mutants")]
    async fn with_mutant(name: &str, mutant: zkfence::FenceMutant) -> ZkStore {
        ZkStore {
            mutant: Some(mutant),
            ..ZkStore::new(name).await
        }
    }

    fn fence(&self, scope: &str) -> ZooKeeperFence {
        let fence = ZooKeeperFence::with_fence_node(self.fenced.clone(), format!("/fences{scope}"))
            .unwrap();
        #[cfg(feature = "mutants")]
        let fence = match self.mutant {
            Some(mutant) => fence.with_mutant(mutant),
            None => fence,
        };
        fence
    }

    /// Creates `path` if missing (schema set-up, outside any fence).
    async fn ensure(&self, path: &str, data: &[u8]) {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.reader.create(path, data, &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => panic!("create {path}: {err}"),
        }
    }
}

impl FenceStore for ZkStore {
    type Error = Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<Error>>> {
        Box::pin(async move { self.fence(ticket.scope()).claim(ticket).await.map(|_| ()) })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        mut hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<Error>>> {
        Box::pin(async move {
            let (counter, log) = (format!("/counters/{key}"), format!("/logs/{key}"));
            self.ensure(&counter, b"0").await;
            self.ensure(&log, b"").await;
            let fence = self.fence(ticket.scope());
            // Raise the fence before reading (as a holder should), then read, think, write.
            fence.claim(ticket).await?;
            let (data, _) = self.fenced.get_data(&counter).await.map_err(|e| {
                FenceError::Store(Error::ZooKeeper {
                    op: "get",
                    path: counter.clone(),
                    source: e,
                })
            })?;
            let value = parse(&data) + 1;
            if let Some(between) = hooks.between.take() {
                between.await;
            }
            let token = ticket.token().as_i64().to_string();
            let options = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
            let mut before_commit = hooks.before_commit.take();
            fence
                .write(ticket, |ops| {
                    ops.add_set_data(&counter, value.to_string().as_bytes(), None)?;
                    ops.add_create(&format!("{log}/e-"), token.as_bytes(), &options)?;
                    if let Some(hook) = before_commit.take() {
                        hook();
                    }
                    Ok(())
                })
                .await?;
            Ok(value)
        })
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            match self.reader.get_data(&format!("/counters/{key}")).await {
                Ok((data, _)) => Ok(parse(&data)),
                Err(zk::Error::NoNode) => Ok(0),
                Err(err) => Err(err.to_string()),
            }
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let dir = format!("/logs/{key}");
            let mut entries = match self.reader.list_children(&dir).await {
                Ok(entries) => entries,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(err) => return Err(err.to_string()),
            };
            entries.sort();
            let mut tokens = Vec::new();
            for entry in entries {
                let (data, _) = (self.reader.get_data(&format!("{dir}/{entry}")).await)
                    .map_err(|e| e.to_string())?;
                tokens.push(parse(&data));
            }
            Ok(tokens)
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let fence =
                ZooKeeperFence::with_fence_node(self.reader.clone(), format!("/fences{scope}"))
                    .map_err(|e| e.to_string())?;
            let seen = fence.seen().await.map_err(|e| e.to_string())?;
            Ok(seen.map(|(token, _)| token))
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        // ZooKeeper's fence takes no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        let proxy = self.proxy.clone();
        Arc::new(move |on| proxy.drop_replies(on))
    }
}

fn parse(data: &[u8]) -> i64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

// Every case that needs nothing but the store (and the lost hold below, which takes a lock),
// but the lost claim reply: a ZooKeeper claim reads the fence node before its `multi`, and the
// kit, dropping replies before the claim, would hold that read back (the `multi`'s lost reply
// is the lost commit reply's case).
zkfence_testkit::conformance_tests!(ZkStore::new;
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
    let store = ZkStore::new("zk-fence-lost").await;
    let client = store.reader.clone();
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// The fence rules' mutants, each caught by the case the kit's table names for it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::FenceMutant;
    use zkfence_testkit::conformance::expect_caught;

    fn assert_caught(mutant: FenceMutant, outcome: zkfence_testkit::conformance::Outcome) {
        expect_caught(&format!("{mutant:?}"), outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_outside_the_transaction_is_caught_by_the_paused_stale_writer() {
        let m = FenceMutant::CheckOutsideTransaction;
        let store = ZkStore::with_mutant("zk-mutant-outside", m).await;
        assert_caught(
            m,
            conformance::stale_writer_paused_before_commit(&store).await,
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strictly_greater_is_caught_by_order() {
        let m = FenceMutant::StrictlyGreater;
        let store = ZkStore::with_mutant("zk-mutant-strict", m).await;
        assert_caught(m, conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn equality_is_caught_by_order() {
        let m = FenceMutant::Equality;
        let store = ZkStore::with_mutant("zk-mutant-equality", m).await;
        assert_caught(m, conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_string_compare_is_caught_by_the_edge_tokens() {
        let m = FenceMutant::StringCompare;
        let store = ZkStore::with_mutant("zk-mutant-string", m).await;
        assert_caught(m, conformance::edge_tokens(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_upsert_is_caught_by_order() {
        let m = FenceMutant::NoUpsert;
        let store = ZkStore::with_mutant("zk-mutant-upsert", m).await;
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
        fence.seen().await.unwrap(),
        Some((0x1_0000_0001, "/locks/rebase".into()))
    );
}
