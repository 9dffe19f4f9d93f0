//! A singleton worker: candidates elect one leader at a time with [`FencedElection::lead`], and
//! the leader's every write to PostgreSQL carries its epoch, so the store refuses a deposed
//! leader's late write.
//!
//! ```sh
//! ZKFENCE_CONNECT=127.0.0.1:2181 DATABASE_URL='host=127.0.0.1 user=postgres' \
//!     cargo run --example singleton
//! ```
//!
//! Two candidates, each on its own session, take turns: each term proclaims what the leader
//! is doing, does three fenced steps and resigns, and the other candidate leads next with a
//! greater epoch. An observer prints each leader change. Then a write with the first term's
//! epoch, as a leader that stalled through its successors' terms would send it: refused.

use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::{Client as Postgres, NoTls};
use tokio_util::sync::CancellationToken;
use zkfence::{FencedElection, FencingToken, LockOptions};

/// The worker's progress and the greatest epoch that has written it.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS singleton_progress (
    name  text PRIMARY KEY,
    steps bigint NOT NULL,
    epoch numeric(20) NOT NULL
)";

/// One step, applied only if no later leader has written (the epoch as text: `as_u64()` can
/// exceed `bigint`).
const STEP: &str = "UPDATE singleton_progress
    SET steps = steps + 1, epoch = $2::text::numeric
    WHERE name = $1 AND epoch <= $2::text::numeric
    RETURNING steps";

/// Terms to run before shutting down.
const TERMS: usize = 4;

type BoxError = Box<dyn Error + Send + Sync>;

async fn step(db: &Postgres, epoch: FencingToken) -> Result<Option<i64>, BoxError> {
    let rows = db
        .query(STEP, &[&"compaction", &epoch.as_u64().to_string()])
        .await?;
    Ok(rows.first().map(|row| row.get(0)))
}

/// A candidate on its own session, leading until `shutdown`.
async fn candidate(
    name: &'static str,
    connect: String,
    db: Arc<Postgres>,
    terms: Arc<AtomicUsize>,
    epochs: Arc<std::sync::Mutex<Vec<FencingToken>>>,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    let client = zookeeper_client::Client::connect(&connect).await?;
    let election = FencedElection::new(client, path(), LockOptions::default())?;
    let stop = shutdown.clone();
    election
        .lead(name, shutdown, |leadership| {
            let (db, terms, epochs, stop) =
                (db.clone(), terms.clone(), epochs.clone(), stop.clone());
            async move {
                let epoch = leadership.epoch();
                epochs.lock().unwrap().push(epoch);
                leadership.proclaim(format!("{name}: compacting")).await?;
                for _ in 0..3 {
                    leadership.check()?; // before each side effect
                    match step(&db, epoch).await? {
                        Some(steps) => {
                            println!("{name} leads in epoch {epoch}: step accepted, {steps} steps")
                        }
                        None => return Err("a current leader's step was refused".into()),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if terms.fetch_add(1, Ordering::SeqCst) + 1 == TERMS {
                    stop.cancel();
                }
                Ok::<(), BoxError>(()) // the term is over: resign, and campaign again
            }
        })
        .await
}

fn path() -> String {
    std::env::var("ZKFENCE_ELECTION").unwrap_or_else(|_| "/zkfence-examples/compactor".into())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let connect = std::env::var("ZKFENCE_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let database = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL to a tokio-postgres connection string, e.g. 'host=127.0.0.1 user=postgres'")?;
    let (db, connection) = tokio_postgres::connect(&database, NoTls).await?;
    tokio::spawn(connection);
    db.batch_execute(SCHEMA).await?;
    db.execute(
        "INSERT INTO singleton_progress VALUES ('compaction', 0, 0) ON CONFLICT (name) DO NOTHING",
        &[],
    )
    .await?;
    let db = Arc::new(db);

    // An observer: the leader and each change, as `zkfence elect --observe` prints them.
    let client = zookeeper_client::Client::connect(&connect).await?;
    let mut observer = FencedElection::new(client, path(), LockOptions::default())?.observe();
    tokio::spawn(async move {
        while let Ok(leader) = observer.next().await {
            match leader {
                Some(l) => println!(
                    "observer: epoch {} led by {}",
                    l.epoch,
                    String::from_utf8_lossy(&l.data)
                ),
                None => println!("observer: no leader"),
            }
        }
    });

    let (terms, epochs) = (Arc::new(AtomicUsize::new(0)), Arc::default());
    let shutdown = CancellationToken::new();
    let candidates: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let run = candidate(
                name,
                connect.clone(),
                db.clone(),
                terms.clone(),
                Arc::clone(&epochs),
                shutdown.clone(),
            );
            tokio::spawn(run)
        })
        .collect();
    for candidate in candidates {
        candidate.await??;
    }

    let epochs = epochs.lock().unwrap().clone();
    if epochs.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("epochs did not increase: {epochs:?}").into());
    }
    // The first leader, stalled through every later term, wakes and writes: refused.
    let late = step(&db, epochs[0]).await?;
    println!(
        "epoch {}: a late write after epoch {} {}",
        epochs[0],
        epochs[epochs.len() - 1],
        if late.is_none() {
            "refused by the store"
        } else {
            "ACCEPTED"
        }
    );
    if late.is_some() {
        return Err("the store accepted a deposed leader's write".into());
    }
    println!("singleton: ok");
    Ok(())
}
