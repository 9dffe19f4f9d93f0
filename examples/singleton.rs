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
use zkfence::fence::{FenceError, FenceTicket};
use zkfence::{FencedElection, LockOptions};
use zkfence_postgres::PostgresFence;

/// The worker's progress. Its fence (the greatest epoch that wrote it) is the fence table's row
/// for the election path.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS zkfence_example_progress (
    name  text PRIMARY KEY,
    steps bigint NOT NULL
)";

/// Terms to run before shutting down.
const TERMS: usize = 4;

type BoxError = Box<dyn Error + Send + Sync>;

/// One step under the leader's ticket (scope: the election path, token: the epoch); `None`
/// when the store refused it.
async fn step(db: &mut Postgres, ticket: &FenceTicket) -> Result<Option<i64>, BoxError> {
    let outcome = PostgresFence::new()
        .transaction(db, ticket, |tx| {
            Box::pin(async move {
                let row = tx
                    .query_one(
                        "UPDATE zkfence_example_progress SET steps = steps + 1 WHERE name = 'compaction' RETURNING steps",
                        &[],
                    )
                    .await?;
                Ok::<i64, tokio_postgres::Error>(row.get(0))
            })
        })
        .await;
    match outcome {
        Ok(steps) => Ok(Some(steps)),
        Err(FenceError::Refused { .. }) => Ok(None),
        Err(err) => Err(err.to_string().into()),
    }
}

async fn open(url: &str) -> Result<Postgres, BoxError> {
    let (db, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(connection);
    Ok(db)
}

/// A candidate on its own session (and database connection), leading until `shutdown`.
async fn candidate(
    name: &'static str,
    connect: String,
    database: String,
    terms: Arc<AtomicUsize>,
    tickets: Arc<std::sync::Mutex<Vec<FenceTicket>>>,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    let client = zookeeper_client::Client::connect(&connect).await?;
    let db = Arc::new(tokio::sync::Mutex::new(open(&database).await?));
    let election = FencedElection::new(client, path(), LockOptions::default())?;
    let stop = shutdown.clone();
    election
        .lead(name, shutdown, |leadership| {
            let (db, terms, tickets, stop) =
                (db.clone(), terms.clone(), tickets.clone(), stop.clone());
            async move {
                let epoch = leadership.epoch();
                let ticket = leadership.ticket(); // scope: the election path; token: the epoch
                tickets.lock().unwrap().push(ticket.detached());
                leadership.proclaim(format!("{name}: compacting")).await?;
                for _ in 0..3 {
                    // The fence checks the leadership just before each commit.
                    match step(&mut *db.lock().await, &ticket).await? {
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
    let mut db = open(&database).await?;
    PostgresFence::new().install(&db).await?; // the fence table and zkfence_claim(scope, token)
    db.batch_execute(SCHEMA).await?;
    db.execute(
        "INSERT INTO zkfence_example_progress VALUES ('compaction', 0) ON CONFLICT (name) DO NOTHING",
        &[],
    )
    .await?;

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

    let (terms, tickets) = (Arc::new(AtomicUsize::new(0)), Arc::default());
    let shutdown = CancellationToken::new();
    let candidates: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let run = candidate(
                name,
                connect.clone(),
                database.clone(),
                terms.clone(),
                Arc::clone(&tickets),
                shutdown.clone(),
            );
            tokio::spawn(run)
        })
        .collect();
    for candidate in candidates {
        candidate.await??;
    }

    let tickets: Vec<FenceTicket> = tickets.lock().unwrap().clone();
    if tickets.windows(2).any(|w| w[0].token() >= w[1].token()) {
        return Err(format!("epochs did not increase: {tickets:?}").into());
    }
    // The first leader, stalled through every later term, wakes and writes: refused.
    let (first, last) = (&tickets[0], &tickets[tickets.len() - 1]);
    let late = step(&mut db, first).await?;
    println!(
        "epoch {}: a late write after epoch {} {}",
        first.token(),
        last.token(),
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
