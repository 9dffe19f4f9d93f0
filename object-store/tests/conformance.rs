//! The object store fence against a real S3-compatible server (moto, started by the test kit):
//! every case of the conformance kit, each fence mutant caught by the case that attacks it.
//!
//! The kit's store is the manifest pattern: per scope, **one fenced manifest object** holds
//! every counter of the scope and names the increment that wrote it. The kit's commit log is
//! the store's own: the bucket is versioned, and a key's log is the tokens of the manifest's
//! versions that incremented it, oldest first, as S3 accepted them. So a stale write that
//! replaces the whole manifest (a lost update, which leaves the last version self-consistent)
//! still shows, as the token going down.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{Attribute, GetOptions, ObjectStore};
use serde_json::{json, Value};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_harness::{chroot, connect, shared};
use zkfence_object_store::{Error, ObjectFence};
use zkfence_testkit::conformance::{self, BoxFuture, FenceStore, Hooks, ReplySwitch};
use zkfence_testkit::RawProxy;

use support::{enforcing, s3, BUCKET};
use zkfence_harness::LocalS3;

/// The kit's store: a fence whose requests go through a proxy that can lose replies, and one
/// straight to the server for the kit's reads.
struct S3Store {
    /// The moto the store is on (the enforcing one, but for the probe's tests).
    server: &'static LocalS3,
    fence: ObjectFence,
    direct: ObjectFence,
    raw: Arc<dyn ObjectStore>,
    ns: String,
    proxy: Arc<RawProxy>,
    /// The scope each key was incremented under (the kit names keys and scopes apart).
    scopes: Mutex<HashMap<String, String>>,
    /// What each manifest version read so far holds (versions never change).
    versions: Mutex<HashMap<String, Version>>,
}

/// One version of a manifest: its token, and the increment that wrote it (key, id), if any.
#[derive(Debug, Clone)]
struct Version {
    token: i64,
    increment: Option<(String, String)>,
}

impl S3Store {
    async fn new(name: &str) -> S3Store {
        S3Store::build(name, |fence| fence).await
    }

    async fn build(name: &str, flaw: impl Fn(ObjectFence) -> ObjectFence) -> S3Store {
        S3Store::build_on(enforcing().await, name, flaw).await
    }

    async fn build_on(
        server: &'static LocalS3,
        name: &str,
        flaw: impl Fn(ObjectFence) -> ObjectFence,
    ) -> S3Store {
        let proxy = Arc::new(RawProxy::start(&server.addr()).await.unwrap());
        let raw = s3(&server.endpoint(), true);
        S3Store {
            server,
            fence: flaw(ObjectFence::new(s3(
                &format!("http://{}", proxy.addr()),
                false,
            ))),
            direct: flaw(ObjectFence::new(raw.clone())),
            raw,
            ns: format!("{name}-{}", std::process::id()),
            proxy,
            scopes: Mutex::default(),
            versions: Mutex::default(),
        }
    }

    fn manifest(&self, scope: &str) -> Path {
        Path::from(format!(
            "{}/{}/manifest",
            self.ns,
            scope.trim_start_matches('/')
        ))
    }

    fn scope_of(&self, key: &str) -> Option<String> {
        self.scopes.lock().unwrap().get(key).cloned()
    }

    /// The manifest version `id` of `path`, read once.
    async fn version(&self, path: &Path, id: &str) -> Result<Version, String> {
        if let Some(known) = self.versions.lock().unwrap().get(id) {
            return Ok(known.clone());
        }
        let options = GetOptions {
            version: Some(id.to_owned()),
            ..GetOptions::default()
        };
        let got = (self.raw.get_opts(path, options).await).map_err(|e| e.to_string())?;
        let in_metadata = (got.attributes)
            .get(&Attribute::Metadata("zkfence-token".into()))
            .and_then(|v| v.as_ref().parse::<i64>().ok());
        let bytes = got.bytes().await.map_err(|e| e.to_string())?;
        let version = parse_version(&bytes, in_metadata)?;
        (self.versions.lock().unwrap()).insert(id.to_owned(), version.clone());
        Ok(version)
    }
}

/// A manifest version's header (`zkfence-fence 1 <token> <write id> <state> <scope>`, as the
/// crate docs give it) and payload.
fn parse_version(bytes: &[u8], in_metadata: Option<i64>) -> Result<Version, String> {
    let end = (bytes.iter().position(|&b| b == b'\n')).ok_or("a version without a header")?;
    let header = String::from_utf8_lossy(&bytes[..end]).into_owned();
    let fields: Vec<&str> = header.split(' ').collect();
    let token = match (
        in_metadata,
        fields.get(2).and_then(|t| t.parse::<i64>().ok()),
    ) {
        (Some(token), _) | (None, Some(token)) => token,
        _ => return Err(format!("a header without a token: {header}")),
    };
    let increment = match fields.get(4) {
        Some(&"value") => {
            let manifest: Value =
                serde_json::from_slice(&bytes[end + 1..]).map_err(|e| e.to_string())?;
            let field = |name| manifest["last"][name].as_str().map(str::to_owned);
            field("key").zip(field("id"))
        }
        _ => None,
    };
    Ok(Version { token, increment })
}

/// The manifest in a payload (none yet: no counters).
fn manifest_of(payload: Option<&Bytes>) -> Result<Value, Error> {
    match payload {
        None => Ok(json!({ "counters": {}, "last": null })),
        Some(bytes) => serde_json::from_slice(bytes).map_err(|e| Error::Aborted(e.into())),
    }
}

impl FenceStore for S3Store {
    type Error = Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<Error>>> {
        Box::pin(async move {
            let path = self.manifest(ticket.scope());
            self.fence.claim(&path, ticket).await.map(|_| ())
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        mut hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<Error>>> {
        Box::pin(async move {
            (self.scopes.lock().unwrap()).insert(key.to_owned(), ticket.scope().to_owned());
            let path = self.manifest(ticket.scope());
            loop {
                let base = self.fence.read(&path).await.map_err(FenceError::Store)?;
                let mut manifest = manifest_of(base.payload()).map_err(FenceError::Store)?;
                let value = manifest["counters"][key].as_i64().unwrap_or(0) + 1;
                manifest["counters"][key] = json!(value);
                let id = uuid::Uuid::new_v4().simple().to_string();
                manifest["last"] = json!({ "key": key, "id": id });
                if let Some(between) = hooks.between.take() {
                    between.await;
                }
                if let Some(hook) = hooks.before_commit.take() {
                    hook();
                }
                let payload = serde_json::to_vec(&manifest).expect("json");
                match self.fence.put_if(&base, ticket, payload).await {
                    Ok(_) => return Ok(value),
                    // Moved by a write of no newer token: read and add again.
                    Err(FenceError::Store(Error::Changed { .. })) => continue,
                    Err(err) => return Err(err),
                }
            }
        })
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(0);
            };
            let read = self.direct.read(&self.manifest(&scope)).await;
            let manifest = manifest_of(read.map_err(|e| e.to_string())?.payload());
            Ok(manifest.map_err(|e| e.to_string())?["counters"][key]
                .as_i64()
                .unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(Vec::new());
            };
            let path = self.manifest(&scope);
            let name = path.to_string();
            let server = self.server;
            let ids = tokio::task::spawn_blocking(move || server.object_versions(BUCKET, &name));
            let ids = ids.await.map_err(|e| e.to_string())??;
            let (mut log, mut previous) = (Vec::new(), None);
            for id in ids {
                let version = self.version(&path, &id).await?;
                // A claim rewrites the manifest as it was: the same increment, not a new one.
                if let Some((of, op)) = version.increment {
                    if previous.as_ref() != Some(&op) && of == key {
                        log.push(version.token);
                    }
                    previous = Some(op);
                }
            }
            Ok(log)
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let path = self.manifest(scope);
            self.direct.seen(&path).await.map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        // Conditional writes take no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        zkfence_harness::reply_switch(self.proxy.clone())
    }

    /// The fence's probe of the store, on a scratch object under this store's prefix.
    fn preconditions(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        Some(Box::pin(async move {
            let scratch = Path::from(format!("{}/probe", self.ns));
            (self.direct.probe(&scratch).await).map_err(|e| e.to_string())
        }))
    }
}

zkfence_testkit::conformance_tests!(S3Store::new);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = S3Store::new("lost_hold").await;
    let hosts = chroot(shared(), "object-store-lost-hold").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// The fence rules' mutants, each caught by the case the kit's table names for it. (The
/// ETag-only mutant is caught by the fence's own test, in `tests/fence.rs`.)
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use crate::support::ignoring;
    use zkfence::FenceMutant;
    use zkfence_testkit::conformance::expect_caught;

    async fn store(name: &str, mutant: FenceMutant) -> S3Store {
        S3Store::build(name, |fence| fence.with_mutant(mutant)).await
    }

    zkfence_harness::mutants_caught!(store;
        the_check_outside_the_condition_is_caught_by_the_paused_stale_writer:
            CheckOutsideTransaction by stale_writer_paused_before_commit,
        strictly_greater_is_caught_by_order: StrictlyGreater by order,
        equality_is_caught_by_order: Equality by order,
        no_upsert_is_caught_by_order: NoUpsert by order,
        a_string_compare_is_caught_by_the_edge_tokens: StringCompare by edge_tokens,
    );

    /// The probe skipped: on a store that ignores conditional writes (moto 4) the probe's case
    /// passes, and the stale writer paused before its commit is what the kit catches; the same
    /// store without the mutant fails the probe's case.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_skipped_probe_is_caught_by_the_paused_stale_writer_on_a_store_that_ignores_conditions(
    ) {
        let sound = S3Store::build_on(ignoring().await, "probe_sound", |fence| fence).await;
        let refused = conformance::preconditions_enforced(&sound).await;
        assert!(
            matches!(&refused, Err(f) if f.is_violation() && f.to_string().contains("If-")),
            "{refused:?}"
        );
        let trusting = |fence: ObjectFence| fence.with_mutant(FenceMutant::NoProbe);
        let store = S3Store::build_on(ignoring().await, "mutant_no_probe", trusting).await;
        assert_eq!(conformance::preconditions_enforced(&store).await, Ok(()));
        let outcome = conformance::stale_writer_paused_before_commit(&store).await;
        expect_caught("NoProbe", outcome);
    }
}
