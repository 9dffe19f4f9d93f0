//! The Redis fence on a real Redis Cluster (three primaries, a replica each, every node
//! durable), reached through one node's URL: the library installed on every primary, claims
//! and fenced writes on scopes of several slots and primaries, stale tokens refused, every
//! primary's fences listed, a fence acknowledged through `WAIT` kept across `CLUSTER FAILOVER`,
//! and the deployment's checks run on every node, failing one primary that lacks the library.
//!
//! One cluster for the whole binary (it takes seconds to form). The tests that change it for
//! everyone (a failover, a library deleted, a setting changed) hold [`GATE`] for writing; the
//! others for reading.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::RwLock;
use zkfence::conformance::{self, Setup, DEPLOYMENT};
use zkfence::fence::{Fence, FenceError};
use zkfence_harness::{wait_until, LocalRedisCluster};
use zkfence_redis::{Commands, ConformanceStore, Connected, Link, RedisFence};

/// The tests that change the cluster for everyone take it for writing.
static GATE: RwLock<()> = RwLock::const_new(());

/// The cluster this binary shares, formed on first use.
async fn cluster() -> &'static LocalRedisCluster {
    static CLUSTER: OnceLock<LocalRedisCluster> = OnceLock::new();
    tokio::task::spawn_blocking(|| {
        CLUSTER.get_or_init(|| {
            let started = std::time::Instant::now();
            let cluster = LocalRedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
            eprintln!("the cluster formed in {:?}", started.elapsed());
            cluster
        })
    })
    .await
    .unwrap()
}

/// The primaries now.
fn primaries(cluster: &LocalRedisCluster) -> Vec<String> {
    cluster.primaries().unwrap_or_else(|e| panic!("{e}"))
}

/// The keys matching `pattern` on the primary at `addr` alone (`SCAN` there).
fn keys_on(cluster: &LocalRedisCluster, addr: &str, pattern: &str) -> BTreeSet<String> {
    let out = cluster
        .command(addr, &["--scan", "--pattern", pattern])
        .unwrap_or_else(|e| panic!("{e}"));
    out.lines().map(str::to_owned).collect()
}

/// The primary that holds `key`.
fn primary_of(cluster: &LocalRedisCluster, key: &str) -> String {
    let holds = |addr: &String| keys_on(cluster, addr, key).contains(key);
    (primaries(cluster).into_iter().find(holds)).unwrap_or_else(|| panic!("no primary holds {key}"))
}

/// A library of this version on every primary, through any node's URL.
async fn install(cluster: &LocalRedisCluster) -> Vec<String> {
    let fence = Connected::connect(&cluster.url(), RedisFence::new())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(fence.is_cluster());
    fence
        .install()
        .await
        .unwrap_or_else(|e| panic!("install: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_loads_the_library_on_every_primary() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    let loaded = install(cluster).await;
    assert_eq!(loaded, primaries(cluster));
    assert_eq!(loaded.len(), 3);
    let ours = RedisFence::new().library();
    let line = ours.lines().nth(3).unwrap();
    let listed = |addr: &String| {
        cluster
            .command(
                addr,
                &["FUNCTION", "LIST", "LIBRARYNAME", "zkfence", "WITHCODE"],
            )
            .unwrap()
    };
    for addr in primaries(cluster) {
        assert!(listed(&addr).contains(line), "{addr}: {}", listed(&addr));
    }
    // A replica has it once its primary's replication stream brought it.
    for addr in cluster.replicas().unwrap() {
        let what = format!("the library on the replica {addr}");
        zkfence_harness::wait_until(Duration::from_secs(10), &what, || async {
            listed(&addr).contains(line)
        })
        .await;
    }
    // A replica's URL reaches the same cluster, and installs on the primaries alone.
    let replica = cluster.node_url(&cluster.replicas().unwrap()[0]);
    let fence = Connected::connect(&replica, RedisFence::new())
        .await
        .unwrap();
    assert_eq!(fence.install().await.unwrap(), primaries(cluster));
}

/// Twelve scopes; the keys of a data key under each, tagged with its scope.
fn scopes(test: &str) -> Vec<(String, String)> {
    (0..12)
        .map(|i| {
            let scope = format!("/cluster/{test}/{i}");
            let data = format!("{{{scope}}}:balance");
            (scope, data)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_on_several_primaries_refuse_stale_tokens() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    install(cluster).await;
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let fences = [
        ("scripts", RedisFence::new()),
        ("functions", RedisFence::new().through_functions()),
    ];
    for (how, fence) in fences {
        for (scope, data) in scopes(&format!("claims-{how}")) {
            let (old, new) = (
                conformance::ticket(&scope, 3),
                conformance::ticket(&scope, 5),
            );
            let write = |value: &str| {
                let value = value.to_owned();
                Commands::new().command(|c| c.arg("SET").key(&data).arg(value))
            };
            fence.claim(&mut redis, &new).await.unwrap();
            fence.write(&mut redis, &new, &write("new")).await.unwrap();
            let refused = fence.claim(&mut redis, &old).await.unwrap_err();
            assert!(refused.is_refused(), "{refused}");
            let refused = fence.write(&mut redis, &old, &write("stale")).await;
            assert!(refused.unwrap_err().is_refused());
            let value: String = redis::cmd("GET")
                .arg(&data)
                .query_async(&mut redis)
                .await
                .unwrap();
            assert_eq!(value, "new", "{scope}: the stale write landed");
        }
    }
    let placed: BTreeSet<String> = (scopes("claims-scripts").iter())
        .map(|(scope, _)| primary_of(cluster, &RedisFence::new().fence_key(scope)))
        .collect();
    assert!(placed.len() >= 2, "the scopes fell on {placed:?} alone");
}

/// A key of another slot than the fence key's is refused before anything is sent, with advice
/// (not Redis's CROSSSLOT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_without_the_scopes_tag_is_refused_with_advice() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let ticket = conformance::ticket("/cluster/untagged", 7);
    let commands = Commands::new().command(|c| c.arg("SET").key("balance").arg(1));
    match RedisFence::new()
        .write(&mut redis, &ticket, &commands)
        .await
    {
        Err(FenceError::Store(err)) => {
            let text = err.to_string();
            assert!(
                text.contains("hash tag") && !text.contains("CROSSSLOT"),
                "{text}"
            );
        }
        other => panic!("expected the client's refusal, got {other:?}"),
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg("balance")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_lists_the_fences_of_every_primary() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    let fence = RedisFence::new().with_prefix("listed:fence:");
    let connected = Connected::connect(&cluster.url(), fence.clone())
        .await
        .unwrap();
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let scopes: Vec<String> = (0..12).map(|i| format!("/cluster/listed/{i}")).collect();
    for (i, scope) in scopes.iter().enumerate() {
        let ticket = conformance::ticket(scope, 100 + i as i64);
        fence.claim(&mut redis, &ticket).await.unwrap();
    }
    let listed = connected.fences().await.unwrap();
    let listed: Vec<(String, i64)> = listed.into_iter().map(|s| (s.scope, s.token)).collect();
    let mut want: Vec<(String, i64)> = (scopes.iter().enumerate())
        .map(|(i, s)| {
            (
                s.clone(),
                conformance::ticket(s, 100 + i as i64).token().as_i64(),
            )
        })
        .collect();
    want.sort();
    assert_eq!(listed, want);
    let holders: BTreeSet<String> = (primaries(cluster).into_iter())
        .filter(|addr| !keys_on(cluster, addr, "listed:fence:*").is_empty())
        .collect();
    assert!(holders.len() >= 2, "the fences are on {holders:?} alone");
}

/// A claim acknowledged through `WAIT 1` is on the replica: promoted by `CLUSTER FAILOVER`, it
/// holds the fence and refuses the stale token; asking more replicas than there are is in
/// doubt, the claim applied all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_acknowledged_by_wait_survives_a_failover() {
    let cluster = cluster().await;
    let _gate = GATE.write().await;
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let fence = RedisFence::new().with_wait(1, Duration::from_secs(5));
    let scope = "/cluster/failover";
    let key = fence.fence_key(scope);
    let (old, held, newer) = (
        conformance::ticket(scope, 0x1_0000_0003),
        conformance::ticket(scope, 0x1_0000_0007),
        conformance::ticket(scope, 0x1_0000_0009),
    );
    fence.claim(&mut redis, &old).await.unwrap();
    fence.claim(&mut redis, &held).await.unwrap();
    let primary = primary_of(cluster, &key);
    let replica = cluster
        .replica_of(&primary)
        .unwrap()
        .expect("a replica each");
    cluster.failover(&replica).unwrap_or_else(|e| panic!("{e}"));
    assert!(primaries(cluster).contains(&replica));
    let stored = cluster.command(&replica, &["GET", &key]).unwrap();
    assert_eq!(stored.trim().parse::<i64>().unwrap(), held.token().as_i64());
    // Through the same connection: the client follows the slot to its new primary.
    let refused = fence.claim(&mut redis, &old).await.unwrap_err();
    match refused {
        FenceError::Refused { seen, .. } => assert_eq!(seen, held.token().as_i64()),
        other => panic!("expected a refusal, got {other}"),
    }
    // Two replicas asked of a primary with one: in doubt, and applied on the primary.
    let greedy = RedisFence::new().with_wait(2, Duration::from_millis(100));
    let doubt = greedy.claim(&mut redis, &newer).await.unwrap_err();
    assert!(doubt.is_in_doubt(), "{doubt}");
    assert!(doubt.to_string().contains("WAIT saw 1 of the 2"), "{doubt}");
    let seen = RedisFence::new().seen(&mut redis, scope).await.unwrap();
    assert_eq!(seen, Some(newer.token().as_i64()));
}

/// Resumes a paused node when dropped (a failed assertion included).
struct Paused(u32);

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = zkfence_testkit::resume(self.0);
    }
}

/// A replica that stops acknowledging (paused): a claim with `WAIT 1` is in doubt, applied on
/// the primary; once it is back, the next claim is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_a_paused_replica_does_not_acknowledge_is_in_doubt() {
    let cluster = cluster().await;
    let _gate = GATE.write().await;
    let mut redis = Link::open(&cluster.url()).await.unwrap();
    let fence = RedisFence::new().with_wait(1, Duration::from_millis(300));
    // The claims a live replica acknowledges wait longer: under a loaded CI machine a replica's
    // acknowledgement once took more than 300 ms.
    let patient = RedisFence::new().with_wait(1, Duration::from_secs(3));
    let scope = "/cluster/lagging";
    let first = conformance::ticket(scope, 0x1_0000_0001);
    patient.claim(&mut redis, &first).await.unwrap();
    let primary = primary_of(cluster, &fence.fence_key(scope));
    let replica = cluster
        .replica_of(&primary)
        .unwrap()
        .expect("a replica each");
    let paused = Paused(cluster.pid(&replica).unwrap());
    zkfence_testkit::pause(paused.0).unwrap();
    let second = conformance::ticket(scope, 0x1_0000_0002);
    let doubt = fence.claim(&mut redis, &second).await.unwrap_err();
    assert!(doubt.is_in_doubt(), "{doubt}");
    assert!(doubt.to_string().contains("WAIT saw 0 of the 1"), "{doubt}");
    let seen = RedisFence::new().seen(&mut redis, scope).await.unwrap();
    assert_eq!(
        seen,
        Some(second.token().as_i64()),
        "applied on the primary"
    );
    drop(paused);
    let third = conformance::ticket(scope, 0x1_0000_0003);
    patient.claim(&mut redis, &third).await.unwrap();
}

zkfence_harness::deployed_kit_store!(deployed: ConformanceStore, RedisFence::new());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_deployment_case_passes_on_several_primaries() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    install(cluster).await;
    let store = deployed(&cluster.url(), "cluster_sound").await;
    let mut failed = Vec::new();
    for case in DEPLOYMENT {
        if let Err(e) = conformance::run(case, &store).await.unwrap() {
            failed.push((case, e));
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
    let placement = store.placement().await.unwrap().expect("a cluster");
    eprintln!("{placement}");
    let on: usize = placement
        .split(" on ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(on >= 2, "{placement}");
    store.clear().await.unwrap();
    for primary in primaries(cluster) {
        let left = keys_on(cluster, &primary, "*zkfence-verify*");
        assert!(left.is_empty(), "{primary} keeps {left:?}");
    }
}

/// One primary without the library: the installed check fails naming it, and only it; once
/// installed again, it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_without_the_library_fails_the_check_naming_it() {
    let cluster = cluster().await;
    let _gate = GATE.write().await;
    install(cluster).await;
    let all = primaries(cluster);
    let bare = &all[1];
    let out = cluster
        .command(bare, &["FUNCTION", "DELETE", "zkfence"])
        .unwrap();
    assert_eq!(out.trim(), "OK");
    let store = deployed(&cluster.url(), "cluster_bare").await;
    let checked = conformance::installed_fence_is_current(&store).await;
    // The library back before anything is asserted: the tests after this one need it.
    install(cluster).await;
    let why = match checked {
        Err(conformance::Failure::Violation(why)) => why,
        other => panic!("expected a violation, got {other:?}"),
    };
    assert!(
        why.contains(&format!(
            "on the primary {bare}: the function library `zkfence` is not loaded"
        )),
        "{why}"
    );
    assert!(
        why.contains("not on 1 of the cluster's 3 primaries"),
        "{why}"
    );
    for other in all.iter().filter(|a| *a != bare) {
        assert!(!why.contains(&format!("primary {other}")), "{why}");
    }
    conformance::installed_fence_is_current(&store)
        .await
        .unwrap();
    store.clear().await.unwrap();
}

/// A replica that would lose fences once promoted fails the durability check, named; so does a
/// primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_durability_check_looks_at_every_node() {
    let cluster = cluster().await;
    let _gate = GATE.write().await;
    let store = deployed(&cluster.url(), "cluster_durable").await;
    conformance::deployment_keeps_fences(&store).await.unwrap();
    let (primary, replica) = (
        primaries(cluster).remove(2),
        cluster.replicas().unwrap().remove(0),
    );
    for (role, addr) in [("replica", &replica), ("primary", &primary)] {
        cluster
            .command(addr, &["CONFIG", "SET", "appendfsync", "everysec"])
            .unwrap();
        let outcome = conformance::deployment_keeps_fences(&store).await;
        cluster
            .command(addr, &["CONFIG", "SET", "appendfsync", "always"])
            .unwrap();
        match outcome {
            Err(conformance::Failure::Violation(why)) => {
                let named = format!("on the {role} {addr}: appendfsync is everysec");
                assert!(why.contains(&named), "{why}");
            }
            other => panic!("expected a violation, got {other:?}"),
        }
    }
    wait_until(Duration::from_secs(10), "the settings back", || async {
        conformance::deployment_keeps_fences(&store).await.is_ok()
    })
    .await;
    store.clear().await.unwrap();
}

/// The kit's cases with the fence's own scripts (`EVALSHA`) and a library of the store's own,
/// loaded on every primary and unloaded from every primary afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cases_pass_with_the_fences_own_scripts() {
    let cluster = cluster().await;
    let _gate = GATE.read().await;
    let name = format!("cluster_fresh_{}", std::process::id());
    let store =
        ConformanceStore::create(&cluster.url(), RedisFence::new(), &name, Setup::Fresh, None)
            .await
            .unwrap_or_else(|e| panic!("the kit's store: {e}"));
    let (claim, _) = store.fence().functions();
    let library = claim.trim_end_matches("_claim").to_owned();
    for case in DEPLOYMENT {
        let outcome = conformance::run(case, &store).await.unwrap();
        assert!(outcome.is_ok(), "{case}: {outcome:?}");
    }
    store.clear().await.unwrap();
    for primary in primaries(cluster) {
        let listed = cluster
            .command(&primary, &["FUNCTION", "LIST", "LIBRARYNAME", &library])
            .unwrap();
        assert!(!listed.contains(&library), "{primary} keeps {listed}");
    }
}
