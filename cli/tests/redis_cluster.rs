//! `zkfence fence` against a real Redis Cluster (three primaries, a replica each, every node
//! durable), given one node's URL: `install` loads the library on every primary and names
//! them, `verify` passes and says where its scopes fell, and fails naming the one primary that
//! lacks the library, `show` lists the fences of every primary. Over TLS alone (client
//! certificates required), with the certificates in the URL: the same, and refused without a
//! client certificate or with another CA's.
//!
//! One cluster for the whole binary; the test that deletes a primary's library holds [`GATE`]
//! for writing, the others for reading. A second cluster, over TLS, is formed on first use,
//! which only the TLS test makes.

mod common;

use std::collections::BTreeSet;
use std::sync::OnceLock;

use tokio::sync::RwLock;
use zkfence::conformance;
use zkfence_harness::{LocalRedisCluster, TestCa};
use zkfence_redis::{Link, RedisFence};

use common::run;

/// The test that changes the cluster for everyone takes it for writing.
static GATE: RwLock<()> = RwLock::const_new(());

/// The cluster this binary shares, formed on first use.
async fn cluster() -> &'static LocalRedisCluster {
    static CLUSTER: OnceLock<LocalRedisCluster> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| LocalRedisCluster::start().unwrap_or_else(|e| panic!("{e}")))
    })
    .await
    .unwrap()
}

/// The TLS cluster this binary shares (every node serving TLS alone, requiring a client
/// certificate), formed on first use, and the CA of its certificates.
async fn tls_cluster() -> &'static (TestCa, LocalRedisCluster) {
    static CLUSTER: OnceLock<(TestCa, LocalRedisCluster)> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| {
            let ca = TestCa::new().unwrap_or_else(|e| panic!("{e}"));
            let cluster = LocalRedisCluster::start_tls(&ca).unwrap_or_else(|e| panic!("{e}"));
            (ca, cluster)
        })
    })
    .await
    .unwrap()
}

/// `zkfence fence install <url>`, which must pass; its output.
async fn install(url: &str) -> String {
    let (code, out, err) = run(&["fence", "install", url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_names_every_primary() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    // A replica's URL: the cluster is reached all the same, and the primaries get the library.
    let replica = cluster.node_url(&cluster.replicas().unwrap()[0]);
    let out = install(&replica).await;
    eprintln!("{out}");
    let primaries = cluster.primaries().unwrap();
    let named = format!("loaded on 3 primaries: {}", primaries.join(", "));
    assert!(out.contains(&named), "{out}");
    for primary in &primaries {
        let listed = cluster
            .command(primary, &["FUNCTION", "LIST", "LIBRARYNAME", "zkfence"])
            .unwrap();
        assert!(listed.contains("zkfence_claim"), "{primary}: {listed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_on_several_primaries() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    install(&cluster.url()).await;
    let (code, out, err) = run(&["fence", "verify", &cluster.url()]).await;
    eprintln!("{out}{err}");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("cases passed"), "{out}");
    let line = (out.lines())
        .find(|l| l.contains("on a Redis Cluster, the cases'"))
        .unwrap_or_else(|| panic!("no placement said: {out}"));
    let on: usize = (line.split(" slots on ").nth(1))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(on >= 2, "{line}");
    // Its scratch keys are gone from every primary.
    for primary in cluster.primaries().unwrap() {
        let left = cluster
            .command(&primary, &["--scan", "--pattern", "*zkfence-verify*"])
            .unwrap();
        assert!(left.trim().is_empty(), "{primary} keeps {left}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_fails_naming_the_primary_without_the_library() {
    let cluster = cluster().await;
    let _gate = GATE.write().await;
    install(&cluster.url()).await;
    let bare = cluster.primaries().unwrap().remove(2);
    let deleted = cluster
        .command(&bare, &["FUNCTION", "DELETE", "zkfence"])
        .unwrap();
    assert_eq!(deleted.trim(), "OK");
    let (code, out, err) = run(&["fence", "verify", &cluster.url()]).await;
    eprintln!("{out}{err}");
    install(&cluster.url()).await;
    assert_eq!(code, Some(1), "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("installed_fence_is_current"));
    assert!(line.is_some_and(|l| l.contains("FAIL")), "{out}");
    let named = format!("on the primary {bare}: the function library `zkfence` is not loaded");
    assert!(out.contains(&named), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_lists_the_fences_of_every_primary() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    let fence = RedisFence::new().with_prefix("shown:fence:");
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let scopes: Vec<String> = (0..12).map(|i| format!("/cli/shown/{i}")).collect();
    for scope in &scopes {
        let ticket = conformance::ticket(scope, 0x2_0000_0005);
        fence.claim(&mut redis, &ticket).await.unwrap();
    }
    let (code, out, err) =
        run(&["fence", "show", &cluster.url(), "--prefix", "shown:fence:"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    for scope in &scopes {
        let line = out.lines().find(|l| l.ends_with(&format!(" {scope}")));
        assert!(
            line.is_some_and(|l| l.starts_with("8589934597 ")),
            "{scope}:\n{out}"
        );
    }
    let holders: BTreeSet<String> = (cluster.primaries().unwrap().into_iter())
        .filter(|addr| {
            let keys = cluster.command(addr, &["--scan", "--pattern", "shown:fence:*"]);
            !keys.unwrap().trim().is_empty()
        })
        .collect();
    assert!(holders.len() >= 2, "the fences are on {holders:?} alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_with_client_certificates() {
    let (ca, cluster) = tls_cluster().await;
    let checked = format!("{}?ssl_ca_certs={}", cluster.url(), ca.ca_cert().display());
    let with = |cert: std::path::PathBuf, key: std::path::PathBuf| {
        let (cert, key) = (cert.display(), key.display());
        format!("{checked}&ssl_certfile={cert}&ssl_keyfile={key}")
    };
    let mine = with(ca.client_cert(), ca.client_key());
    let out = install(&mine).await;
    let primaries = cluster.primaries().unwrap();
    let named = format!("loaded on 3 primaries: {}", primaries.join(", "));
    assert!(out.contains(&named), "{out}");
    // Durable nodes: verify passes without --accept-volatile.
    let (code, out, err) = run(&["fence", "verify", &mine]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("cases passed") && !out.contains("FAIL"),
        "{out}"
    );
    let (code, out, err) = run(&["fence", "show", &mine]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    // Without a client certificate the handshake fails: the store could not be reached.
    let (code, out, err) = run(&["fence", "show", &checked]).await;
    eprintln!("without a client certificate: {err}");
    assert_eq!(code, Some(69), "{out}{err}");
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // Another CA's client certificate: the nodes refuse it.
    let other = with(ca.other_client_cert(), ca.other_client_key());
    let (code, out, err) = run(&["fence", "show", &other]).await;
    eprintln!("with another CA's: {err}");
    assert_eq!(code, Some(69), "{out}{err}");
    assert!(err.to_lowercase().contains("unknownca"), "{err}");
}
