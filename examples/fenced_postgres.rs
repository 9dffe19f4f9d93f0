//! Fenced writes to PostgreSQL through `zkfence-postgres`: every transaction under the lock
//! raises the fence first, so the store refuses a holder that lost the lock without knowing it.
//!
//! ```sh
//! ZKFENCE_CONNECT=127.0.0.1:2181 DATABASE_URL='host=127.0.0.1 user=postgres' \
//!     cargo run --example fenced_postgres
//! ```
//!
//! It increments a counter a few times under the lock (a read-modify-write: the fence is
//! raised before the read), then shows what fencing is for: a holder that stalled past its lease
//! writes with its old ticket after a newer holder has written, and the store refuses it. It
//! prints one line per write and exits 0 when every write landed as the fence says it should.

use std::error::Error;

use tokio_postgres::{Client as Postgres, NoTls};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence::{Acquire, FencedLock, LockOptions};
use zkfence_postgres::PostgresFence;

/// One row per counter. The fence lives in the fence's own table (`zkfence_fence`), one row
/// per lock path.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS zkfence_example_counter (
    name  text PRIMARY KEY,
    value bigint NOT NULL
)";

/// Adds one to `name` under `ticket`: read, then write, in one fenced transaction (the fence
/// raised as its first statement). `Ok(None)` when the store refused the ticket.
async fn increment(
    fence: &PostgresFence,
    db: &mut Postgres,
    name: &str,
    ticket: &FenceTicket,
) -> Result<Option<i64>, Box<dyn Error>> {
    let name = name.to_owned();
    let outcome = fence
        .transaction(db, ticket, |tx| {
            let name = name.clone();
            Box::pin(async move {
                let read = tx
                    .query_one(
                        "SELECT value FROM zkfence_example_counter WHERE name = $1",
                        &[&name],
                    )
                    .await?;
                let value: i64 = read.get::<_, i64>(0) + 1;
                tx.execute(
                    "UPDATE zkfence_example_counter SET value = $2 WHERE name = $1",
                    &[&name, &value],
                )
                .await?;
                Ok::<_, tokio_postgres::Error>(value)
            })
        })
        .await;
    match outcome {
        Ok(value) => Ok(Some(value)),
        Err(FenceError::Refused { .. }) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let connect = std::env::var("ZKFENCE_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let database = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL to a tokio-postgres connection string, e.g. 'host=127.0.0.1 user=postgres'")?;
    let lock_path =
        std::env::var("ZKFENCE_LOCK").unwrap_or_else(|_| "/zkfence-examples/counter".into());

    let (mut db, connection) = tokio_postgres::connect(&database, NoTls).await?;
    tokio::spawn(connection);
    let fence = PostgresFence::new();
    fence.install(&db).await?; // the fence table and zkfence_claim(scope, token)
    db.batch_execute(SCHEMA).await?;
    db.execute(
        "INSERT INTO zkfence_example_counter VALUES ('example', 0) ON CONFLICT (name) DO NOTHING",
        &[],
    )
    .await?;

    let client = zookeeper_client::Client::connect(&connect).await?;
    let options = LockOptions::default().with_create_parents(true);
    let lock = FencedLock::new(client, lock_path, options)?;

    // Ordinary use: acquire, write under the ticket, release.
    for _ in 0..3 {
        let guard = lock.acquire().await?;
        let ticket = guard.ticket();
        let value = increment(&fence, &mut db, "example", &ticket).await?;
        println!("ticket {ticket}: increment accepted, value {value:?}");
        if value.is_none() {
            return Err("a current holder's write was refused".into());
        }
        guard.release().await?;
    }

    // The failure fencing exists for: a holder stalls (GC pause, SIGSTOP) with a write in
    // flight while a newer holder takes the lock and writes. Replayed with two consecutive
    // holders' tickets; the stale one as a write in flight carries it, with no hold left to
    // check (its own check would stop it first if it could still run).
    let stale = lock.acquire().await?;
    let old = stale.ticket().detached();
    stale.release().await?;
    let newer = lock.acquire().await?;
    increment(&fence, &mut db, "example", &newer.ticket()).await?;
    let late = increment(&fence, &mut db, "example", &old).await?;
    println!(
        "token {}: late write after token {} {}",
        old.token(),
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
