//! Fenced writes to PostgreSQL: every write carries the lock's fencing token, and the store
//! refuses a write whose token is older than the newest one it has seen.
//!
//! ```sh
//! ZKFENCE_CONNECT=127.0.0.1:2181 DATABASE_URL='host=127.0.0.1 user=postgres' \
//!     cargo run --example fenced_postgres
//! ```
//!
//! It increments a counter a few times under the lock, then shows what fencing is for: a
//! holder that stalled past its lease writes with its old token after a newer holder has
//! written, and the store refuses it. It prints one line per write and exits 0 when every
//! write landed as the fence says it should.

use std::error::Error;
use zkfence::Acquire;

use tokio_postgres::{Client as Postgres, NoTls};
use zkfence::{FencedLock, FencingToken, LockOptions};

/// One row per counter: its value and the highest token that has written it.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS fenced_counter (
    name  text PRIMARY KEY,
    value bigint NOT NULL,
    fence numeric(20) NOT NULL
)";

/// The fenced read-modify-write: applied only if no newer holder has written. The token is
/// passed as text and compared as `numeric(20)`, since `as_u64()` can exceed `bigint`.
const INCREMENT: &str = "UPDATE fenced_counter
    SET value = value + 1, fence = $2::text::numeric
    WHERE name = $1 AND fence <= $2::text::numeric
    RETURNING value";

/// Adds one to `name` with `token`'s authority: `Some(new value)`, or `None` when the store
/// has seen a newer token and refused the write.
async fn increment(
    db: &Postgres,
    name: &str,
    token: FencingToken,
) -> Result<Option<i64>, Box<dyn Error>> {
    let rows = db
        .query(INCREMENT, &[&name, &token.as_u64().to_string()])
        .await?;
    Ok(rows.first().map(|row| row.get(0)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let connect = std::env::var("ZKFENCE_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let database = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL to a tokio-postgres connection string, e.g. 'host=127.0.0.1 user=postgres'")?;
    let lock_path =
        std::env::var("ZKFENCE_LOCK").unwrap_or_else(|_| "/zkfence-examples/counter".into());

    let (db, connection) = tokio_postgres::connect(&database, NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(SCHEMA).await?;
    db.execute(
        "INSERT INTO fenced_counter VALUES ('example', 0, 0) ON CONFLICT (name) DO NOTHING",
        &[],
    )
    .await?;

    let client = zookeeper_client::Client::connect(&connect).await?;
    let options = LockOptions::default().with_create_parents(true);
    let lock = FencedLock::new(client, lock_path, options)?;

    // Ordinary use: acquire, write with the token, release.
    for _ in 0..3 {
        let guard = lock.acquire().await?;
        let value = increment(&db, "example", guard.token()).await?;
        println!(
            "token {}: increment accepted, value {value:?}",
            guard.token()
        );
        if value.is_none() {
            return Err("a current holder's write was refused".into());
        }
        guard.release().await?;
    }

    // The failure fencing exists for: a holder stalls (GC pause, SIGSTOP) while a newer holder
    // takes the lock and writes. Replayed here with the tokens of two consecutive holders.
    let stale = lock.acquire().await?;
    let old_token = stale.token();
    stale.release().await?;
    let newer = lock.acquire().await?;
    increment(&db, "example", newer.token()).await?;
    let late = increment(&db, "example", old_token).await?;
    println!(
        "token {old_token}: late write after token {} {}",
        newer.token(),
        if late.is_none() {
            "refused by the store"
        } else {
            "ACCEPTED"
        }
    );
    newer.release().await?;
    if late.is_some() {
        return Err("the store accepted a write with a stale token".into());
    }
    println!("fenced_postgres: ok");
    Ok(())
}
