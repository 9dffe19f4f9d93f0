//! The object store fence's own cases, against moto (started by the test kit): the
//! same-content rewrite (an ABA on the ETag) and its mutant, the probe on a store that
//! enforces preconditions, one that ignores them and the local filesystem, fenced deletes,
//! writes the S3 client resent after a lost reply, and objects the fence must not touch.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStoreExt as _, PutPayload};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_object_store::{Error, ObjectFence};
use zkfence_testkit::conformance::{ticket, Failure, Outcome};
use zkfence_testkit::RawProxy;

use support::{enforcing, fence, ignoring, s3, unique};

/// Tokens of one ZooKeeper epoch, as successive holders of a lock get them.
fn holder(scope: &str, n: i64) -> FenceTicket {
    ticket(scope, 0x1_0000_0000 + n)
}

fn text(fence_read: &zkfence_object_store::Snapshot) -> Option<String> {
    (fence_read.payload()).map(|p| String::from_utf8_lossy(p).into_owned())
}

/// A stale holder reads the manifest; a newer holder writes it, then writes the very payload
/// the stale holder read back; the stale holder's write, conditional on what it read, must be
/// refused. With the token in the bytes the newer holder's writes changed the ETag; an
/// ETag-only fence sees the same ETag again and lets the stale write through.
async fn same_content_rewrite(stale: &ObjectFence, newer: &ObjectFence, path: &Path) -> Outcome {
    let scope = "/locks/aba";
    let (old, new) = (holder(scope, 1), holder(scope, 2));
    let broken =
        |what: &str, err: &dyn std::fmt::Display| Failure::Broken(format!("{what}: {err}"));
    stale
        .put(path, &old, "P")
        .await
        .map_err(|e| broken("the first write", &e))?;
    let read = stale.read(path).await.map_err(|e| broken("the read", &e))?;
    newer
        .put(path, &new, "Q")
        .await
        .map_err(|e| broken("the newer holder's write", &e))?;
    let back = (newer.put(path, &new, "P").await).map_err(|e| broken("the rewrite", &e))?;
    let aba = back.e_tag() == read.e_tag();
    match stale.put_if(&read, &old, "stale").await {
        Err(FenceError::Refused { seen, .. }) if seen == new.token().as_i64() => Ok(()),
        Ok(_) => Err(Failure::Violation(format!(
            "the stale holder's write landed over the newer holder's same-content rewrite (the ETag came back: {aba})"
        ))),
        Err(err) => Err(Failure::Violation(format!(
            "the stale holder's write: expected a refusal naming the newer token, got: {err}"
        ))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_write_is_refused_after_a_same_content_rewrite() {
    let path = unique("aba", "manifest");
    let (stale, newer) = (fence().await, fence().await);
    same_content_rewrite(&stale, &newer, &path).await.unwrap();
    let now = newer.read(&path).await.unwrap();
    assert_eq!(text(&now).as_deref(), Some("P"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_ignores_preconditions_lets_the_stale_write_through() {
    // Why the probe exists: the same fence on moto 4 (which ignores If-Match).
    let store = s3(&ignoring().await.endpoint(), true);
    let (stale, newer) = (ObjectFence::new(store.clone()), ObjectFence::new(store));
    let path = unique("ignored", "manifest");
    let outcome = same_content_rewrite(&stale, &newer, &path).await;
    assert!(matches!(outcome, Err(Failure::Violation(_))), "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_passes_on_a_store_that_enforces_preconditions() {
    let fence = fence().await;
    let scratch = unique("probe", "scratch");
    fence.probe(&scratch).await.unwrap();
    // It cleans up after itself.
    let left = fence
        .store()
        .list_with_delimiter(Some(&scratch))
        .await
        .unwrap();
    assert!(left.objects.is_empty(), "{:?}", left.objects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_a_server_that_ignores_preconditions() {
    let fence = ObjectFence::new(s3(&ignoring().await.endpoint(), true));
    let err = fence
        .probe(&unique("probe-ignored", "scratch"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unfit { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("ignores `If-None-Match`"), "{message}");
    assert!(message.contains("412 Precondition Failed"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_the_local_filesystem() {
    let dir = std::env::temp_dir().join(format!("zkfence-objstore-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fence = ObjectFence::new(Arc::new(LocalFileSystem::new_with_prefix(&dir).unwrap()));
    let err = fence.probe(&Path::from("scratch")).await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::Unfit { .. }), "{err:?}");
    assert!(message.contains("no update-if-match"), "{message}");
    assert!(message.contains("local filesystems"), "{message}");
    // And a fenced update there fails without writing, rather than writing unconditionally.
    let ticket = holder("/locks/local", 1);
    let path = Path::from("data/manifest");
    fence.put(&path, &ticket, "one").await.unwrap(); // create-if-absent works there
    let err = fence.put(&path, &ticket, "two").await.unwrap_err();
    assert!(matches!(err, FenceError::Store(_)), "{err:?}");
    assert_eq!(
        text(&fence.read(&path).await.unwrap()).as_deref(),
        Some("one")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_delete_keeps_the_token_and_refuses_an_older_create() {
    let fence = fence().await;
    let path = unique("delete", "state");
    let scope = "/locks/delete";
    let (t1, t2, t3) = (holder(scope, 1), holder(scope, 2), holder(scope, 3));
    fence.put(&path, &t1, "a").await.unwrap();
    let tombstone = fence.delete(&path, &t2).await.unwrap();
    assert!(tombstone.is_empty());
    let read = ObjectFence::new(fence.store().clone())
        .read(&path)
        .await
        .unwrap();
    assert!(read.exists() && read.is_empty() && read.payload().is_none());
    assert_eq!(read.token(), Some(t2.token().as_i64()));
    // A plain delete would let this create-if-absent through.
    let stale = ObjectFence::new(fence.store().clone());
    let err = stale.put(&path, &t1, "stale").await.unwrap_err();
    assert!(matches!(err, FenceError::Refused { seen, .. } if seen == t2.token().as_i64()));
    // Deleting again is a no-op; a newer holder writes again.
    fence.delete(&path, &t2).await.unwrap();
    fence.put(&path, &t3, "c").await.unwrap();
    assert_eq!(
        text(&stale.read(&path).await.unwrap()).as_deref(),
        Some("c")
    );
    // Purged, the token goes with it.
    fence.purge(&path).await.unwrap();
    assert!(!stale.read(&path).await.unwrap().exists());
}

/// A fence whose requests go through a proxy that loses replies, with the S3 client's resends
/// on (as `object_store` ships them): it resends a conditional put whose connection closed
/// before the reply, and the resend meets our own write.
async fn resending() -> (ObjectFence, RawProxy) {
    let proxy = RawProxy::start(&enforcing().await.addr()).await.unwrap();
    let fence = ObjectFence::new(s3(&format!("http://{}", proxy.addr()), true));
    (fence, proxy)
}

/// Increments the counter at `path` (from 1) with the server's replies lost until the write
/// shows; then `meanwhile`, then the replies flow again. Returns the increment's outcome.
async fn increment_with_lost_reply(
    fence: &ObjectFence,
    proxy: &RawProxy,
    ticket: &FenceTicket,
    path: &Path,
    meanwhile: impl std::future::Future<Output = ()>,
) -> Result<zkfence_object_store::Snapshot, FenceError<Error>> {
    fence.put(path, ticket, "1").await.unwrap();
    let direct = support::fence().await;
    proxy.drop_replies(true);
    let add = fence.update(path, ticket, |current| {
        let n: u64 = std::str::from_utf8(current.ok_or("no counter")?)?.parse()?;
        Ok((n + 1).to_string())
    });
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while text(&direct.read(path).await.unwrap()).as_deref() != Some("2") {
            assert!(Instant::now() < deadline, "the increment never landed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        meanwhile.await;
        proxy.reset();
    };
    let (outcome, ()) = tokio::join!(add, watch);
    assert!(proxy.dropped() > 0, "no reply was lost");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_resent_after_a_lost_reply_is_recognised_by_its_write_id() {
    let (fence, proxy) = resending().await;
    let path = unique("resent", "counter");
    let t = holder("/locks/resent", 1);
    let written = increment_with_lost_reply(&fence, &proxy, &t, &path, async {}).await;
    // The resend failed its condition against our own write: landed, once.
    let written = written.unwrap();
    assert_eq!(text(&written).as_deref(), Some("2"));
    let now = support::fence().await.read(&path).await.unwrap();
    assert_eq!(text(&now).as_deref(), Some("2"), "applied twice?");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_write_overtaken_meanwhile_is_in_doubt_not_refused() {
    let (fence, proxy) = resending().await;
    let path = unique("overtaken", "counter");
    let (t1, t2) = (holder("/locks/overtaken", 1), holder("/locks/overtaken", 2));
    let newer = async {
        support::fence().await.put(&path, &t2, "9").await.unwrap();
    };
    let outcome = increment_with_lost_reply(&fence, &proxy, &t1, &path, newer).await;
    // Our write landed, then the newer holder's: "refused" would say nothing was written.
    assert!(
        matches!(outcome, Err(FenceError::InDoubt { .. })),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_neither_lose_nor_repeat_an_increment() {
    let path = unique("concurrent", "counter");
    let t = holder("/locks/concurrent", 1);
    let add = |fence: ObjectFence, t: FenceTicket, path: Path| async move {
        for _ in 0..10 {
            let outcome = fence.update(&path, &t, |current| {
                let n: u64 = match current {
                    Some(bytes) => std::str::from_utf8(bytes)?.parse()?,
                    None => 0,
                };
                Ok((n + 1).to_string())
            });
            outcome.await.unwrap();
        }
    };
    let a = tokio::spawn(add(fence().await, t.clone(), path.clone()));
    let b = tokio::spawn(add(fence().await, t.clone(), path.clone()));
    a.await.unwrap();
    b.await.unwrap();
    let now = fence().await.read(&path).await.unwrap();
    assert_eq!(text(&now).as_deref(), Some("20"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_written_without_the_fence_is_left_alone() {
    let fence = fence().await;
    let path = unique("unfenced", "data");
    let plain = PutPayload::from_static(b"not fenced");
    fence.store().put(&path, plain).await.unwrap();
    let err = fence
        .put(&path, &holder("/locks/x", 1), "fenced")
        .await
        .unwrap_err();
    assert!(
        matches!(err, FenceError::Store(Error::NotFenced { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("purge"), "{err}");
    let bytes = fence
        .store()
        .get(&path)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"not fenced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_fenced_for_another_scope_is_refused() {
    let fence = fence().await;
    let path = unique("scope", "data");
    fence.put(&path, &holder("/locks/a", 1), "a").await.unwrap();
    let err = fence
        .put(&path, &holder("/locks/b", 9), "b")
        .await
        .unwrap_err();
    assert!(
        matches!(err, FenceError::Store(Error::OtherScope { .. })),
        "{err:?}"
    );
}

/// The ETag-only mutant (the token in metadata, the bytes the same for the same payload),
/// caught by the same-content rewrite.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etag_only_mutant_is_caught_by_the_same_content_rewrite() {
    use zkfence::FenceMutant;
    let mutant = || async { fence().await.with_mutant(FenceMutant::EtagOnly) };
    let path = unique("aba-mutant", "manifest");
    let outcome = same_content_rewrite(&mutant().await, &mutant().await, &path).await;
    zkfence_testkit::conformance::expect_caught("EtagOnly", outcome);
}
