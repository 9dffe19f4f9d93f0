//! `zkfence fence verify`'s run against a Redis deployment ([`Setup::Deployed`]), each on a
//! `redis-server` of the test's own: it passes a sound, durable one, and fails every one that
//! can lose or misjudge a fence: no append-only file, `appendfsync everysec`, an `allkeys-*`
//! eviction policy, a replica, `CONFIG GET` refused, the library missing or edited. Every case
//! goes through the library the server has loaded (`FCALL`), never a script of this version's.

use zkfence::conformance::{self, Outcome, DEPLOYMENT};
use zkfence_harness::LocalRedis;
use zkfence_redis::{ConformanceStore, RedisFence};

/// A server with an append-only file synced on every write (the deployment to pass).
async fn durable() -> (LocalRedis, String) {
    let redis = tokio::task::spawn_blocking(LocalRedis::start_durable)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!("redis://{}/", redis.addr());
    (redis, url)
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// `args` as one command on a new connection to `url`.
async fn command<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    (cmd.query_async(&mut conn(url).await).await).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

zkfence_harness::deployed_kit_store!(deployed: ConformanceStore, RedisFence::new());

/// Every case of [`DEPLOYMENT`], as `zkfence fence verify` runs them.
async fn verify(store: &ConformanceStore) -> Vec<(&'static str, Outcome)> {
    let mut outcomes = Vec::new();
    for case in DEPLOYMENT {
        outcomes.push((case, conformance::run(case, store).await.unwrap()));
    }
    outcomes
}

/// `outcome` must be a violation that says `words`.
fn fails_saying(outcome: Outcome, words: &[&str]) -> String {
    match outcome {
        Err(conformance::Failure::Violation(why)) => {
            for word in words {
                assert!(why.contains(word), "{word:?} not in: {why}");
            }
            eprintln!("failed as it must: {why}");
            why
        }
        other => panic!("expected a violation saying {words:?}, got {other:?}"),
    }
}

/// A durable server with the library installed passes every case of the deployment's, every
/// claim and write through `FCALL` (the server counts no `EVAL`), and the scratch keys go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sound_durable_deployment_passes_every_case() {
    let (_redis, url) = durable().await;
    RedisFence::new()
        .install(&mut conn(&url).await)
        .await
        .unwrap();
    let _: () = command(&url, &["CONFIG", "RESETSTAT"]).await;
    let store = deployed(&url, "sound").await;
    let failed: Vec<_> = (verify(&store).await.into_iter())
        .filter(|(_, outcome)| outcome.is_err())
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    let stats: String = command(&url, &["INFO", "commandstats"]).await;
    let calls = |name: &str| {
        (stats.lines())
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert!(calls("fcall") > 20, "{stats}");
    assert_eq!((calls("eval"), calls("evalsha")), (0, 0), "{stats}");
    store.clear().await.unwrap();
    let left: i64 = command(&url, &["DBSIZE"]).await;
    assert_eq!(left, 0, "the scratch keys are removed");
}

/// Without an append-only file a restart forgets every fence: the deployment fails, saying
/// what to set, unless its owner accepts a volatile store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_an_append_only_file_fails_unless_accepted() {
    let (_redis, url) = durable().await;
    RedisFence::new()
        .install(&mut conn(&url).await)
        .await
        .unwrap();
    let _: () = command(&url, &["CONFIG", "SET", "appendonly", "no"]).await;
    let store = deployed(&url, "no_aof").await;
    let outcome = conformance::deployment_keeps_fences(&store).await;
    let why = fails_saying(outcome, &["appendonly is no", "set appendonly yes"]);
    assert!(!why.contains('\n'), "one line: {why}");
    let store = store.accept_volatile(true);
    conformance::deployment_keeps_fences(&store).await.unwrap();
    let others = verify(&store).await;
    assert!(others.iter().all(|(_, o)| o.is_ok()), "{others:#?}");
    store.clear().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appendfsync_everysec_fails_the_deployment() {
    let (_redis, url) = durable().await;
    let _: () = command(&url, &["CONFIG", "SET", "appendfsync", "everysec"]).await;
    let store = deployed(&url, "everysec").await;
    let outcome = conformance::deployment_keeps_fences(&store).await;
    fails_saying(outcome, &["appendfsync is everysec", "appendfsync always"]);
}

/// `allkeys-lru` evicts fence keys (they carry no TTL): the deployment fails; and under
/// memory pressure the fence really goes, and a stale token is accepted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allkeys_lru_fails_the_deployment_and_does_evict_a_fence() {
    let (_redis, url) = durable().await;
    RedisFence::new()
        .install(&mut conn(&url).await)
        .await
        .unwrap();
    let _: () = command(&url, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).await;
    let store = deployed(&url, "lru").await;
    let outcome = conformance::deployment_keeps_fences(&store).await;
    fails_saying(outcome, &["maxmemory-policy is allkeys-lru", "noeviction"]);
    // volatile-* policies only evict keys with a TTL, which a fence key never has.
    let _: () = command(&url, &["CONFIG", "SET", "maxmemory-policy", "volatile-lru"]).await;
    conformance::deployment_keeps_fences(&store).await.unwrap();
    store.clear().await.unwrap();

    let _: () = command(&url, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).await;
    let key = RedisFence::new().fence_key("/locks/evicted");
    let claimed: redis::Value = command(&url, &["FCALL", "zkfence_claim", "1", &key, "10"]).await;
    assert!(format!("{claimed:?}").contains("ok"), "{claimed:?}");
    let info: String = command(&url, &["INFO", "memory"]).await;
    let used: u64 = (info.lines())
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    let limit = (used + 1024 * 1024).to_string();
    let _: () = command(&url, &["CONFIG", "SET", "maxmemory", &limit]).await;
    let mut conn = conn(&url).await;
    let filler = "x".repeat(10_000);
    let mut batches = 0;
    loop {
        let exists: bool = (redis::cmd("EXISTS").arg(&key))
            .query_async(&mut conn)
            .await
            .unwrap();
        if !exists {
            break;
        }
        assert!(batches < 2_000, "the fence key outlived 100 MB of writes");
        let mut pipe = redis::pipe();
        for i in 0..50 {
            pipe.cmd("SET")
                .arg(format!("filler:{batches}:{i}"))
                .arg(&filler)
                .ignore();
        }
        let _: () = pipe.query_async(&mut conn).await.unwrap();
        batches += 1;
    }
    eprintln!("the fence key was evicted after {batches} batches of 50 × 10 kB");
    let stale: redis::Value = command(&url, &["FCALL", "zkfence_claim", "1", &key, "9"]).await;
    assert!(
        format!("{stale:?}").contains("ok"),
        "the stale token is accepted once the fence is evicted: {stale:?}"
    );
}

/// A replica loses its own writes when it resyncs, and fences are claimed on the primary:
/// the deployment fails, accepted as volatile or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_fails_the_deployment() {
    let (primary, _) = durable().await;
    let (_replica, url) = durable().await;
    let port = primary.port().to_string();
    let _: () = command(&url, &["REPLICAOF", "127.0.0.1", &port]).await;
    let store = deployed(&url, "replica").await.accept_volatile(true);
    let outcome = conformance::deployment_keeps_fences(&store).await;
    fails_saying(outcome, &["is a replica", "primary"]);
}

/// `CONFIG GET` refused (an ACL without it, as a renamed command would): the deployment
/// fails saying so; the advice names the URL without its password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_get_refused_is_said_and_the_password_never_shown() {
    let (redis, url) = durable().await;
    let acl = [
        "ACL", "SETUSER", "verifier", "on", ">s3cret", "~*", "&*", "+@all", "-config",
    ];
    let _: () = command(&url, &acl).await;
    let as_verifier = format!("redis://verifier:s3cret@{}/", redis.addr());
    let store = deployed(&as_verifier, "acl").await;
    let outcome = conformance::deployment_keeps_fences(&store).await;
    let why = fails_saying(outcome, &["CONFIG GET", "is refused", "allow CONFIG GET"]);
    assert!(!why.contains("s3cret"), "{why}");
    let outcome = conformance::installed_fence_is_current(&store).await;
    let mend = format!("zkfence fence install redis://verifier@{}/", redis.addr());
    let why = fails_saying(outcome, &["is not loaded", &mend]);
    assert!(!why.contains("s3cret"), "{why}");
}

/// With no library loaded, the deployment fails with the command that loads it, and the
/// claims fail too (through `FCALL`: nothing of this version's runs in its place).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_library_fails_the_deployment_with_the_command_that_mends_it() {
    let (redis, url) = durable().await;
    let store = deployed(&url, "missing").await;
    let outcome = conformance::installed_fence_is_current(&store).await;
    let install = format!("run `zkfence fence install redis://{}/`", redis.addr());
    fails_saying(
        outcome,
        &["the function library `zkfence` is not loaded", &install],
    );
    let outcomes = verify(&store).await;
    let passed: Vec<_> = (outcomes.iter())
        .filter(|(_, o)| o.is_ok())
        .map(|(case, _)| *case)
        .collect();
    for case in ["order", "edge_tokens", "tokens_in_any_text_form"] {
        assert!(!passed.contains(&case), "{case} passed with no library");
    }
    let (_, order) = outcomes.iter().find(|(case, _)| *case == "order").unwrap();
    assert!(format!("{order:?}").contains("fence install"), "{order:?}");
}

/// A library edited to compare tokens as doubles (the `DoubleCompare` mutant's, loaded as the
/// deployment's `zkfence`): the deployment fails, on the install's compare and on the edge
/// tokens run through it; `zkfence fence install` (`FUNCTION LOAD REPLACE`) mends it.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_library_that_compares_as_doubles_fails_the_deployment() {
    use zkfence::FenceMutant;
    let (_redis, url) = durable().await;
    let edited = RedisFence::new().with_mutant(FenceMutant::DoubleCompare);
    edited.install(&mut conn(&url).await).await.unwrap();
    let store = deployed(&url, "edited").await;
    let outcome = conformance::installed_fence_is_current(&store).await;
    fails_saying(
        outcome,
        &["differs from this version's", "zkfence fence install"],
    );
    let outcome = conformance::edge_tokens(&store).await;
    conformance::expect_caught("DoubleCompare, installed", outcome);
    store.clear().await.unwrap();

    RedisFence::new()
        .install(&mut conn(&url).await)
        .await
        .unwrap();
    let store = deployed(&url, "mended").await;
    conformance::installed_fence_is_current(&store)
        .await
        .unwrap();
    conformance::edge_tokens(&store).await.unwrap();
    store.clear().await.unwrap();
}
