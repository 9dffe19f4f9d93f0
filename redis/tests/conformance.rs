//! The Redis fence against a real `redis-server`: every case of the conformance kit, each
//! fence mutant caught by the case that attacks it, and the hash slot rule.

use std::sync::OnceLock;
use std::time::Duration;

use zkfence::conformance::{self, FenceStore};
use zkfence::fence::FenceError;
use zkfence_harness::LocalRedis;
use zkfence_harness::{chroot, connect, shared};
use zkfence_redis::{Commands, ConformanceStore, RedisFence};

type RedisStore = ConformanceStore;

/// The Redis server this test binary shares: durable (an append-only file synced on every
/// write), as a fence needs (`deployment_keeps_fences`).
fn server() -> &'static str {
    static SERVER: OnceLock<(LocalRedis, String)> = OnceLock::new();
    &SERVER
        .get_or_init(|| {
            let redis = LocalRedis::start_durable().unwrap_or_else(|e| panic!("{e}"));
            let addr = redis.addr();
            (redis, addr)
        })
        .1
}

zkfence_harness::proxied_kit_store!(build: RedisStore, RedisFence, redis_url().await);

/// The shared server's URL.
async fn redis_url() -> String {
    let addr = tokio::task::spawn_blocking(server).await.unwrap();
    format!("redis://{addr}/")
}

async fn new_store(name: &str) -> RedisStore {
    build(name, RedisFence::new()).await
}

zkfence_testkit::conformance_tests!(new_store);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = new_store("lost_hold").await;
    let hosts = chroot(shared(), "redis-lost-hold").await;
    let client = connect(&hosts, Duration::from_secs(10)).await;
    conformance::lost_hold_writes_nothing(&store, &client)
        .await
        .unwrap();
}

/// Every key written under a fence shares the fence key's hash slot (what Redis Cluster
/// needs of a script): one outside it is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_outside_the_fence_slot_is_refused() {
    let store = new_store("slot").await;
    assert_eq!(outside_the_slot(&store).await, Outside::Refused);
}

#[derive(Debug, PartialEq)]
enum Outside {
    Refused,
    Written,
}

/// Writes a key without the scope's hash tag: refused (its client error says to put the tag
/// in), or written.
async fn outside_the_slot(store: &RedisStore) -> Outside {
    let ticket = conformance::ticket("/kit/slot", 0x1_0000_0001);
    let key = format!("{}untagged", store.fence().fence_key("x"));
    let commands = Commands::new().command(|c| c.arg("SET").key(&key).arg(1));
    let mut conn = store.connect().await.unwrap();
    match store.fence().write(&mut conn, &ticket, &commands).await {
        Err(FenceError::Store(err)) => {
            assert!(err.to_string().contains("hash tag"), "{err}");
            Outside::Refused
        }
        Ok(_) => Outside::Written,
        Err(err) => panic!("{err}"),
    }
}

/// The fence rules' mutants, each caught by the case the kit's table names for it.
#[cfg(feature = "mutants")]
mod mutants {
    use super::*;
    use zkfence::FenceMutant;

    async fn store(name: &str, mutant: FenceMutant) -> RedisStore {
        build(name, RedisFence::new().with_mutant(mutant)).await
    }

    zkfence_harness::mutants_caught!(store;
        the_scripts_without_the_form_check_are_caught_by_the_text_forms:
            NoFormCheck by tokens_in_any_text_form,
        a_double_compare_is_caught_by_the_edge_tokens: DoubleCompare by edge_tokens,
        the_check_outside_the_script_is_caught_by_the_paused_stale_writer:
            CheckOutsideTransaction by stale_writer_paused_before_commit,
        strictly_greater_is_caught_by_order: StrictlyGreater by order,
        no_upsert_is_caught_by_order: NoUpsert by order,
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn any_key_claim_is_caught_by_the_claim_on_a_counter() {
        let store = store("mutant_any_key", FenceMutant::AnyKeyClaim).await;
        match claim_on_a_counter(&store).await {
            PlainKey::Overwritten(now) => {
                eprintln!("AnyKeyClaim caught: the claim overwrote the counter's 7 with {now}")
            }
            PlainKey::Refused => panic!("AnyKeyClaim was not caught"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_outside_the_slot_is_caught() {
        let store = store("mutant_slot", FenceMutant::KeyOutsideSlot).await;
        assert_eq!(
            outside_the_slot(&store).await,
            Outside::Written,
            "the mutant must let the key through"
        );
        eprintln!("KeyOutsideSlot caught: a key outside the fence key's slot was written");
    }
}

/// `redis-cli -e` as a shell recipe runs it against the shared server; its exit status and
/// output.
async fn redis_cli(args: &[&str]) -> std::process::Output {
    let addr = tokio::task::spawn_blocking(server).await.unwrap();
    let (host, port) = addr.rsplit_once(':').unwrap();
    tokio::process::Command::new("redis-cli")
        .args(["-e", "-h", host, "-p", port])
        .args(args)
        .output()
        .await
        .expect("redis-cli (Debian's redis-tools)")
}

/// The cases the issue found from `redis-cli`, each now answered right: a lower token refused
/// with an error (exit status 1), whatever its text form; a newer token never locked out by an
/// older one of more digits; an untagged value refused, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_is_refused_below_the_fence_in_every_text_form() {
    let store = new_store("cli").await;
    let key = store.fence().fence_key("/locks/cli");
    let (claim_fn, write_fn) = store.fence().functions();
    let claim = |token: &'static str| {
        let (key, claim_fn) = (key.clone(), claim_fn.clone());
        async move { redis_cli(&["FCALL", &claim_fn, "1", &key, token]).await }
    };
    assert!(claim("10").await.status.success());
    let nine = claim("9").await;
    assert_eq!(nine.status.code(), Some(1), "{nine:?}");
    // redis-cli -e prints an error reply on stderr.
    let said = String::from_utf8_lossy(&nine.stderr);
    assert!(
        said.contains("ZF001") && said.trim_end().ends_with("the fence holds 10"),
        "{said}"
    );
    assert!(claim("10000000000").await.status.success());
    assert_eq!(claim("9999999999").await.status.code(), Some(1));
    assert!(claim("00010000000001").await.status.success());
    assert_eq!(
        store.seen("/locks/cli").await.unwrap(),
        Some(10_000_000_001)
    );
    let (counter, _) = store.keys("/locks/cli", "v");
    let untagged = redis_cli(&[
        "FCALL",
        &write_fn,
        "2",
        &key,
        &counter,
        "10000000001",
        "1",
        "3",
        "vSET",
        "k2",
        "42",
    ])
    .await;
    assert_eq!(untagged.status.code(), Some(1), "{untagged:?}");
    assert!(String::from_utf8_lossy(&untagged.stderr).contains("ZF002"));
    let written = redis_cli(&["GET", &counter]).await;
    assert_eq!(String::from_utf8_lossy(&written.stdout).trim(), "");
}

/// One command in its shape form from `redis-cli` (`vkv SET 2 42`): written under the current
/// token, refused under a lower one (`ZF001`), and refused (`ZF002`) with nothing written for
/// a shape that does not match its arguments, a key given as the fence key's index or as
/// none, or a shape that is not only `k` and `v`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_in_its_shape_form_is_fenced_and_checked() {
    let store = new_store("shape").await;
    let key = store.fence().fence_key("/locks/shape");
    let (_, write_fn) = store.fence().functions();
    let (counter, _) = store.keys("/locks/shape", "v");
    let write = |tail: &'static [&'static str]| {
        let (key, counter, write_fn) = (key.clone(), counter.clone(), write_fn.clone());
        async move {
            let mut args = vec!["FCALL", &write_fn, "2", &key, &counter];
            args.extend_from_slice(tail);
            redis_cli(&args).await
        }
    };
    let get = || async {
        String::from_utf8_lossy(&redis_cli(&["GET", &counter]).await.stdout)
            .trim()
            .to_owned()
    };
    let ok = write(&["7", "vkv", "SET", "2", "42"]).await;
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(get().await, "42");
    for bad in [
        &["7", "vkv", "SET", "2"][..],
        &["7", "vkv", "SET", "2", "1", "x"][..],
        &["7", "vkv", "SET", "1", "43"][..],
        &["7", "vkv", "SET", "k2", "43"][..],
        &["7", "vkv", "SET", "3", "43"][..],
        &["7", "vxv", "SET", "2", "43"][..],
    ] {
        let out = write(bad).await;
        assert_eq!(out.status.code(), Some(1), "{bad:?}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(said.contains("ZF002"), "{bad:?}: {said}");
        assert_eq!(get().await, "42", "{bad:?} wrote");
    }
    let stale = write(&["6", "vkv", "SET", "2", "stale"]).await;
    assert_eq!(stale.status.code(), Some(1), "{stale:?}");
    assert!(String::from_utf8_lossy(&stale.stderr).contains("ZF001"));
    assert_eq!(get().await, "42");
}

/// `redis-cli -e` reading its commands from `input`, one a line, as a shell recipe piping them
/// does; its exit status and output.
async fn redis_cli_reading(input: &str) -> std::process::Output {
    use tokio::io::AsyncWriteExt as _;
    let addr = tokio::task::spawn_blocking(server).await.unwrap();
    let (host, port) = addr.rsplit_once(':').unwrap();
    let mut child = tokio::process::Command::new("redis-cli")
        .args(["-e", "-h", host, "-p", port])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("redis-cli (Debian's redis-tools)");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    child.wait_with_output().await.unwrap()
}

/// What a claim on a key that is no fence key comes to.
#[derive(Debug, PartialEq)]
enum PlainKey {
    /// Refused with `ZF002`, the key as it was.
    Refused,
    /// The key now holds this.
    Overwritten(String),
}

/// `FCALL <claim> 1 <counter> 10` and `FCALL <write> 1 <counter> 10 0` from `redis-cli` on an
/// application's counter holding `7` (a number, which reads as a token below 10).
async fn claim_on_a_counter(store: &RedisStore) -> PlainKey {
    let (counter, _) = store.keys("/kit/plain", "counter");
    assert!(redis_cli(&["SET", &counter, "7"]).await.status.success());
    let (claim_fn, write_fn) = store.fence().functions();
    let claim = redis_cli(&["FCALL", &claim_fn, "1", &counter, "10"]).await;
    let write = redis_cli(&["FCALL", &write_fn, "1", &counter, "10", "0"]).await;
    let now = redis_cli(&["GET", &counter]).await;
    let now = String::from_utf8_lossy(&now.stdout).trim().to_owned();
    if now != "7" {
        return PlainKey::Overwritten(now);
    }
    for call in [claim, write] {
        assert_eq!(call.status.code(), Some(1), "{call:?}");
        let said = String::from_utf8_lossy(&call.stderr);
        assert!(
            said.contains("ZF002") && said.contains("is not a fence key"),
            "{said}"
        );
    }
    PlainKey::Refused
}

/// A claim whose KEYS[1] is not a fence key `<prefix>{<scope>}` is a `ZF002` error: on an
/// application's counter holding 7 it leaves 7 (a claim used to raise it to the token), and
/// on a key with the fence prefix but no `{<scope>}` it writes nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_key_that_is_no_fence_key_is_refused() {
    let store = new_store("plain_key").await;
    assert_eq!(claim_on_a_counter(&store).await, PlainKey::Refused);
    let braced = store.fence().fence_key("x");
    let bare = format!("{}x", braced.trim_end_matches("{x}"));
    let (claim_fn, _) = store.fence().functions();
    for key in [
        bare.as_str(),
        &format!("{braced}:more"),
        &braced.replace("{x}", "{}"),
    ] {
        let claim = redis_cli(&["FCALL", &claim_fn, "1", key, "10"]).await;
        assert_eq!(claim.status.code(), Some(1), "{key}: {claim:?}");
        assert!(String::from_utf8_lossy(&claim.stderr).contains("ZF002"));
        let exists = redis_cli(&["EXISTS", key]).await;
        assert_eq!(String::from_utf8_lossy(&exists.stdout).trim(), "0", "{key}");
    }
    assert!(
        (redis_cli(&["FCALL", &claim_fn, "1", &braced, "10"]).await)
            .status
            .success(),
        "the fence key itself is claimed"
    );
}

/// The trap docs/fences.md names: Redis does not stop a `MULTI` (nor a pipeline) at a
/// refused claim, and `redis-cli -e` exits 0 on its `EXEC`, so a stale holder's claim-then-SET
/// lands; the documented way, the compare and the write in one `FCALL zkfence_write`, is
/// refused whole (exit 1, nothing written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_claim_stops_one_fcall_but_not_a_multi_or_a_pipeline() {
    let store = new_store("multi").await;
    let scope = "/locks/multi";
    let key = store.fence().fence_key(scope);
    let (claim_fn, write_fn) = store.fence().functions();
    let (in_multi, _) = store.keys(scope, "in-multi");
    let (in_pipe, _) = store.keys(scope, "in-pipeline");
    let (in_call, _) = store.keys(scope, "in-one-call");
    // The newer holder claimed 10; the stale holder has 9.
    assert!((redis_cli(&["FCALL", &claim_fn, "1", &key, "10"]).await)
        .status
        .success());

    let multi = redis_cli_reading(&format!(
        "MULTI\nFCALL {claim_fn} 1 \"{key}\" 9\nSET \"{in_multi}\" stale\nEXEC\n"
    ))
    .await;
    let said = String::from_utf8_lossy(&multi.stdout);
    assert!(said.contains("ZF001"), "{multi:?}");
    assert_eq!(
        multi.status.code(),
        Some(0),
        "redis-cli -e on EXEC: {multi:?}"
    );
    let landed = redis_cli(&["GET", &in_multi]).await;
    assert_eq!(String::from_utf8_lossy(&landed.stdout).trim(), "stale");

    let mut conn = store.connect().await.unwrap();
    let piped = redis::pipe()
        .cmd("FCALL")
        .arg(&claim_fn)
        .arg(1)
        .arg(&key)
        .arg(9)
        .cmd("SET")
        .arg(&in_pipe)
        .arg("stale")
        .query_async::<redis::Value>(&mut conn)
        .await;
    assert!(
        format!("{piped:?}").contains("ZF001"),
        "the pipeline's claim: {piped:?}"
    );
    let landed = redis_cli(&["GET", &in_pipe]).await;
    assert_eq!(String::from_utf8_lossy(&landed.stdout).trim(), "stale");

    let one_call = redis_cli(&[
        "FCALL", &write_fn, "2", &key, &in_call, "9", "1", "3", "vSET", "k2", "vstale",
    ])
    .await;
    assert_eq!(one_call.status.code(), Some(1), "{one_call:?}");
    assert!(String::from_utf8_lossy(&one_call.stderr).contains("ZF001"));
    let landed = redis_cli(&["EXISTS", &in_call]).await;
    assert_eq!(String::from_utf8_lossy(&landed.stdout).trim(), "0");
    assert_eq!(store.seen(scope).await.unwrap(), Some(10));
}
