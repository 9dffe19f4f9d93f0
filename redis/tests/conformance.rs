//! The Redis fence against a real `redis-server`: every case of the conformance kit, each
//! fence mutant caught by the case that attacks it, and the hash slot rule.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_redis::{Commands, RedisFence};
use zkfence_testkit::conformance::{self, BoxFuture, FenceStore, Hooks, ReplySwitch};
use zkfence_testkit::harness::{chroot, connect, shared};
use zkfence_testkit::{LocalRedis, RawProxy};

/// The Redis server this test binary shares.
fn server() -> &'static str {
    static SERVER: OnceLock<(LocalRedis, String)> = OnceLock::new();
    &SERVER
        .get_or_init(|| {
            let redis = LocalRedis::start().unwrap_or_else(|e| panic!("{e}"));
            let addr = redis.addr();
            (redis, addr)
        })
        .1
}

async fn open(addr: &str) -> MultiplexedConnection {
    let client = redis::Client::open(format!("redis://{addr}/")).unwrap();
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to redis at {addr}: {e}"))
}

/// The kit's store on Redis: for each key the kit names, a counter `<ns>{<scope>}:counter:<key>`
/// and a log list `<ns>{<scope>}:log:<key>` (in the fence key's slot: tagged with the scope),
/// fence keys `<ns>fence:{<scope>}`. The fence's connection goes through a proxy.
struct RedisStore {
    fence: RedisFence,
    ns: String,
    fenced: tokio::sync::Mutex<MultiplexedConnection>,
    reader: tokio::sync::Mutex<MultiplexedConnection>,
    proxy: Arc<RawProxy>,
    /// The scope each key was written under (the kit names keys and scopes apart).
    scopes: Mutex<HashMap<String, String>>,
}

impl RedisStore {
    async fn new(name: &str) -> RedisStore {
        RedisStore::build(name, RedisFence::new()).await
    }

    async fn build(name: &str, fence: RedisFence) -> RedisStore {
        let addr = tokio::task::spawn_blocking(server).await.unwrap();
        let proxy = Arc::new(RawProxy::start(addr).await.unwrap());
        let ns = format!("kit:{name}:{}:", std::process::id());
        RedisStore {
            fence: fence.with_prefix(format!("{ns}fence:")),
            fenced: tokio::sync::Mutex::new(open(proxy.addr()).await),
            reader: tokio::sync::Mutex::new(open(addr).await),
            proxy,
            scopes: Mutex::default(),
            ns,
        }
    }

    fn keys(&self, scope: &str, key: &str) -> (String, String) {
        let (ns, tag) = (&self.ns, format!("{{{scope}}}"));
        (
            format!("{ns}{tag}:counter:{key}"),
            format!("{ns}{tag}:log:{key}"),
        )
    }

    fn scope_of(&self, key: &str) -> Option<String> {
        self.scopes.lock().unwrap().get(key).cloned()
    }
}

impl FenceStore for RedisStore {
    type Error = redis::RedisError;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<redis::RedisError>>> {
        Box::pin(async move {
            let mut conn = self.fenced.lock().await;
            self.fence.claim(&mut *conn, ticket).await.map(|_| ())
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        mut hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<redis::RedisError>>> {
        Box::pin(async move {
            (self.scopes.lock().unwrap()).insert(key.to_owned(), ticket.scope().to_owned());
            let (counter, log) = self.keys(ticket.scope(), key);
            // A connection of its own: the kit runs a stale and a current writer at once.
            let mut conn = open(self.proxy.addr()).await;
            self.fence.claim(&mut conn, ticket).await?; // before the read
            let value: Option<i64> = redis::cmd("GET")
                .arg(&counter)
                .query_async(&mut conn)
                .await
                .map_err(FenceError::Store)?;
            let value = value.unwrap_or(0) + 1;
            if let Some(between) = hooks.between.take() {
                between.await;
            }
            let token = ticket.token().as_i64();
            let commands = Commands::new()
                .command(|c| c.arg("SET").key(&counter).arg(value))
                .command(|c| c.arg("RPUSH").key(&log).arg(token));
            if let Some(hook) = hooks.before_commit.take() {
                hook();
            }
            self.fence.write(&mut conn, ticket, &commands).await?;
            Ok(value)
        })
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(0);
            };
            let (counter, _) = self.keys(&scope, key);
            let mut conn = self.reader.lock().await;
            let value: Option<i64> = (redis::cmd("GET").arg(counter).query_async(&mut *conn))
                .await
                .map_err(|e| e.to_string())?;
            Ok(value.unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(Vec::new());
            };
            let (_, log) = self.keys(&scope, key);
            let mut conn = self.reader.lock().await;
            (redis::cmd("LRANGE")
                .arg(log)
                .arg(0)
                .arg(-1)
                .query_async(&mut *conn))
            .await
            .map_err(|e| e.to_string())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let mut conn = self.reader.lock().await;
            self.fence
                .seen(&mut *conn, scope)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        // The fence takes no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        let proxy = self.proxy.clone();
        Arc::new(move |on| match on {
            true => proxy.drop_replies(true),
            false => proxy.reset(),
        })
    }
}

zkfence_testkit::conformance_tests!(RedisStore::new);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_lost_hold_writes_nothing() {
    let store = RedisStore::new("lost_hold").await;
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
    let store = RedisStore::new("slot").await;
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
    let key = format!("{}untagged", store.ns);
    let commands = Commands::new().command(|c| c.arg("SET").key(&key).arg(1));
    let mut conn = store.fenced.lock().await;
    match store.fence.write(&mut *conn, &ticket, &commands).await {
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
    use zkfence_testkit::conformance::expect_caught;

    async fn store(name: &str, mutant: FenceMutant) -> RedisStore {
        RedisStore::build(name, RedisFence::new().with_mutant(mutant)).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_double_compare_is_caught_by_the_edge_tokens() {
        let store = store("mutant_double", FenceMutant::DoubleCompare).await;
        expect_caught("DoubleCompare", conformance::edge_tokens(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_check_outside_the_script_is_caught_by_the_paused_stale_writer() {
        let store = store("mutant_outside", FenceMutant::CheckOutsideTransaction).await;
        let outcome = conformance::stale_writer_paused_before_commit(&store).await;
        expect_caught("CheckOutsideTransaction", outcome);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn strictly_greater_is_caught_by_order() {
        let store = store("mutant_strict", FenceMutant::StrictlyGreater).await;
        expect_caught("StrictlyGreater", conformance::order(&store).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_upsert_is_caught_by_order() {
        let store = store("mutant_upsert", FenceMutant::NoUpsert).await;
        expect_caught("NoUpsert", conformance::order(&store).await);
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
