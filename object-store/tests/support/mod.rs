//! What the object store fence's tests share: one moto server of each kind per test binary,
//! and S3 clients for them.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use object_store::path::Path;
use object_store::ObjectStore;
use zkfence_harness::{LocalS3, Preconditions};
use zkfence_object_store::ObjectFence;

/// The bucket every test writes to, each under a prefix of its own (versioned: the store's
/// version history is the conformance kit's commit log).
pub(crate) const BUCKET: &str = "zkfence-tests";

/// The moto that enforces conditional writes, shared by this test binary. Blocks while it
/// starts: call it through `spawn_blocking` ([`enforcing`]).
pub(crate) fn enforcing_server() -> &'static LocalS3 {
    static SERVER: OnceLock<LocalS3> = OnceLock::new();
    SERVER.get_or_init(|| start(Preconditions::Enforced))
}

/// The moto that ignores them.
pub(crate) fn ignoring_server() -> &'static LocalS3 {
    static SERVER: OnceLock<LocalS3> = OnceLock::new();
    SERVER.get_or_init(|| start(Preconditions::Ignored))
}

fn start(preconditions: Preconditions) -> LocalS3 {
    let s3 = LocalS3::start(preconditions).unwrap_or_else(|e| panic!("{e}"));
    s3.create_bucket(BUCKET, true)
        .unwrap_or_else(|e| panic!("{e}"));
    s3
}

/// [`enforcing_server`], from async code.
pub(crate) async fn enforcing() -> &'static LocalS3 {
    tokio::task::spawn_blocking(enforcing_server).await.unwrap()
}

/// [`ignoring_server`], from async code.
pub(crate) async fn ignoring() -> &'static LocalS3 {
    tokio::task::spawn_blocking(ignoring_server).await.unwrap()
}

/// An S3 client of [`BUCKET`] at `endpoint` (path-style, plain HTTP, conditional puts on).
/// With `resend` false it never sends a request twice: `object_store` resends a request whose
/// connection closed before the reply (a conditional put too), which turns the kit's lost
/// reply into a failed condition; the fence's own tests cover that path.
pub(crate) fn s3(endpoint: &str, resend: bool) -> Arc<dyn ObjectStore> {
    let retries = if resend { 10 } else { 0 };
    zkfence_harness::s3_client(endpoint, BUCKET, retries).unwrap_or_else(|e| panic!("{e}"))
}

/// A fence straight to the enforcing moto.
pub(crate) async fn fence() -> ObjectFence {
    ObjectFence::new(s3(&enforcing().await.endpoint(), true))
}

/// A path under a prefix of this test's own.
pub(crate) fn unique(test: &str, rest: &str) -> Path {
    Path::from(format!("{test}-{}/{rest}", std::process::id()))
}
