//! A user's service: it holds `/locks/ledger` and appends entries to `/ledger`, each write
//! fenced (refused once the service has lost its lock, even when it does not know yet).

use std::time::Duration;

use zkfence::fence::{FenceError, ZooKeeperFence};
use zkfence::{Acquire, FencedLock, LockOptions};
use zookeeper_client::{Acls, Client, CreateMode};

/// Holds the ledger's lock and appends `writes` entries (each carrying the lock's token),
/// calling `after_check` between the lease check and each write. Prints `holding <token>`
/// once it holds, and `refused` if a write was refused; returns the token.
pub async fn run(hosts: &str, writes: usize, after_check: impl Fn()) -> Result<i64, String> {
    let zk = Client::connector()
        .with_session_timeout(Duration::from_secs(2))
        .connect(hosts)
        .await
        .map_err(|e| e.to_string())?;
    let entry = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
    let _ = zk
        .create(
            "/ledger",
            &[],
            &CreateMode::Persistent.with_acls(Acls::anyone_all()),
        )
        .await;
    let lock = FencedLock::new(zk.clone(), "/locks/ledger", LockOptions::default())
        .map_err(|e| e.to_string())?;
    let guard = lock.acquire().await.map_err(|e| e.to_string())?;
    let token = guard.token().as_i64();
    println!("holding {token}");
    let fence = ZooKeeperFence::new(zk.clone());
    for _ in 0..writes {
        after_check();
        let data = token.to_string().into_bytes();
        match fence
            .write(&guard.ticket(), |ops| {
                ops.add_create("/ledger/entry-", &data, &entry)
            })
            .await
        {
            Ok(_) => {}
            Err(FenceError::Refused { .. } | FenceError::LockLost { .. }) => {
                println!("refused");
                return Ok(token);
            }
            Err(err) => return Err(err.to_string()),
        }
    }
    guard.release().await.map_err(|e| e.to_string())?;
    Ok(token)
}

/// The tokens of the ledger's entries, in the order ZooKeeper committed them.
pub async fn ledger(hosts: &str) -> Result<Vec<i64>, String> {
    let zk = Client::connect(hosts).await.map_err(|e| e.to_string())?;
    let mut entries = zk
        .list_children("/ledger")
        .await
        .map_err(|e| e.to_string())?;
    entries.sort(); // sequence numbers: commit order
    let mut tokens = Vec::new();
    for entry in entries {
        let (data, _) = zk
            .get_data(&format!("/ledger/{entry}"))
            .await
            .map_err(|e| e.to_string())?;
        tokens.push(
            String::from_utf8_lossy(&data)
                .parse()
                .map_err(|_| "a bad entry")?,
        );
    }
    Ok(tokens)
}
