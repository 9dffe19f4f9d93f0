//! The read/write lock: readers share, a writer excludes everyone, on one fair queue whose
//! node names Apache Curator's `InterProcessReadWriteLock` also uses.
//!
//! ```sh
//! ZKFENCE_CONNECT=127.0.0.1:2181 cargo run --example rwlock
//! ```
//!
//! Two readers hold at once; a writer queued behind them gets the lock when both have gone,
//! with a token greater than theirs.

use std::time::Duration;

use zkfence::{FencedRwLock, LockOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::var("ZKFENCE_CONNECT").unwrap_or_else(|_| "127.0.0.1:2181".into());
    let lock_path =
        std::env::var("ZKFENCE_LOCK").unwrap_or_else(|_| "/zkfence-examples/config".into());
    let options = LockOptions::default().with_create_parents(true);
    // Separate sessions, as separate processes would have.
    let session = || zookeeper_client::Client::connect(&connect);
    let first = FencedRwLock::new(session().await?, lock_path.clone(), options.clone())?;
    let second = FencedRwLock::new(session().await?, lock_path.clone(), options.clone())?;
    let writer = FencedRwLock::new(session().await?, lock_path, options)?;

    let reader_a = first.read().await?;
    let reader_b = second.read().await?;
    println!(
        "two readers hold at once: tokens {} and {}",
        reader_a.token(),
        reader_b.token()
    );

    let write = tokio::spawn(async move { writer.write().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    if write.is_finished() {
        return Err("the writer got the lock while readers held it".into());
    }
    println!("the writer waits while the readers hold");
    let newest_reader = reader_a.token().max(reader_b.token());
    reader_a.release().await?;
    reader_b.release().await?;

    let guard = tokio::time::timeout(Duration::from_secs(10), write)
        .await??
        .map_err(Box::new)?;
    println!(
        "writer holds with token {} (readers had up to {newest_reader})",
        guard.token()
    );
    if guard.token() <= newest_reader {
        return Err("the writer's token does not order after the readers'".into());
    }
    guard.release().await?;
    println!("rwlock: ok");
    Ok(())
}
