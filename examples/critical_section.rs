//! A cancellable critical section: `FencedLock::run` polls the closure only while the lock
//! holds, and drops it the moment the watchdog says the lock may be lost (a disconnect, the
//! session's expiry, the lock node deleted, the lease running out).
//!
//! ```sh
//! ZKFENCE_CONNECT=127.0.0.1:2181 cargo run --example critical_section
//! ```
//!
//! The section below deletes its own lock node halfway through to show the cut: the work
//! after that point never runs, and `run` returns `Error::LockLost`.

use std::time::Duration;
use zkfence::Acquire;

use zkfence::{Error, FencedLock, LockOptions};

/// What a section may fail with: its own errors, and the lock's (`zkfence::Error` converts).
type SectionError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), SectionError> {
    let connect = std::env::var("ZKFENCE_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let lock_path =
        std::env::var("ZKFENCE_LOCK").unwrap_or_else(|_| "/zkfence-examples/section".into());
    let client = zookeeper_client::Client::connect(&connect).await?;
    let lock = FencedLock::new(
        client.clone(),
        lock_path,
        LockOptions::default().with_create_parents(true),
    )?;

    // A section that finishes: its value comes back, and the lock is released.
    let batches = lock
        .run(|held| async move {
            for batch in 0..3 {
                held.check()?; // cheap: compares the lease deadline, no request
                println!("token {}: batch {batch} done", held.token());
            }
            Ok::<_, SectionError>(3)
        })
        .await?;
    println!("section finished after {batches} batches");

    // A section whose lock goes away under it: it is dropped at its next await point.
    let outcome = lock
        .run(|held| {
            let client = client.clone();
            async move {
                println!("token {}: working", held.token());
                client.delete(held.node_path(), None).await?;
                tokio::time::sleep(Duration::from_secs(30)).await;
                println!("this line never prints: the section was cancelled");
                Ok::<_, SectionError>(())
            }
        })
        .await;
    match outcome.map_err(|err| err.downcast::<Error>()) {
        Err(Ok(lost)) if lost.is_lock_lost() => println!("section cancelled: {lost}"),
        other => return Err(format!("expected the section to be cancelled, got {other:?}").into()),
    }
    println!("critical_section: ok");
    Ok(())
}
