//! The Redis lock of the demo's third run (`demo --redis`), built with the `redis` feature.

use std::time::Duration;

/// The Redis lock Redis lock libraries use (Redlock on one server): `SET key value NX PX ttl` to
/// acquire, retried every 50 ms while another holds it; release deletes the key only if it
/// still holds our value.
pub(super) struct RedisLock {
    conn: redis::aio::MultiplexedConnection,
    ttl: Duration,
}

impl RedisLock {
    /// The demo's key on the server at `addr`.
    const KEY: &'static str = "zkfence-demo:lock";

    pub(super) async fn connect(addr: &str, ttl: Duration) -> redis::RedisResult<RedisLock> {
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(RedisLock { conn, ttl })
    }

    /// Waits for the lock; the value that marks it ours.
    pub(super) async fn acquire(&mut self) -> redis::RedisResult<String> {
        let value = uuid::Uuid::new_v4().to_string();
        loop {
            let set: Option<String> = redis::cmd("SET")
                .arg(Self::KEY)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl.as_millis() as u64)
                .query_async(&mut self.conn)
                .await?;
            if set.is_some() {
                return Ok(value);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Deletes the key if it still holds `value`; whether it did.
    pub(super) async fn release(&mut self, value: &str) -> redis::RedisResult<bool> {
        let deleted: i64 = redis::Script::new(
            "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
        )
        .key(Self::KEY)
        .arg(value)
        .invoke_async(&mut self.conn)
        .await?;
        Ok(deleted == 1)
    }
}
