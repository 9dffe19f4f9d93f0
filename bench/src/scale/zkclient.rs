//! zookeeper-client's side of the held locks: `Client::lock` (Curator's recipe, no lease)
//! holding K locks at once on one session, measured as zkfence's are in `holds` (the same
//! paths, created beforehand; the same proxy and footprint), so that the acquire-all time, the
//! memory and the server's state per hold have a peer to be held against. Its holds send
//! nothing while held (no probe); the window while holding is as long as zkfence's.

use tokio::task::JoinSet;
use zookeeper_client as zk;

use super::bed::Bed;
use super::count::{sessions, Window};
use super::holds::{acquisition, paths, remove, Footprint};
use super::line::Line;

/// Acquires and releases in flight at once (as zkfence's, per session).
const IN_FLIGHT: usize = 64;

/// `locks` locks held at once on one session of zookeeper-client in `round`: the line.
pub(super) async fn holds(bed: &Bed<'_>, round: usize, locks: usize) -> Result<Line, String> {
    let parent = bed.path(&format!("h{round}-{locks}-zkclient"));
    bed.mkdir(&parent).await?;
    paths(&bed.admin, &parent, locks).await?;
    let proxy = bed.server.proxy().await;
    let t = bed.session_timeout();
    let client = (sessions(&bed.server.via(&proxy), 1, t).await?).remove(0);
    // As zkfence's warm-up: the memory baseline is not the cold process's.
    let warm = lock_all(&client, &parent, locks.clamp(1, 100)).await?;
    unlock_all(&client, warm).await;
    let mut line = Line::new(
        "holds",
        "zkclient",
        round,
        &[("locks", locks), ("sessions", 1)],
    );
    let before = Footprint::now(bed).await;
    let window = Window::open(&bed.server, &[&proxy]).await;
    let nodes = lock_all(&client, &parent, locks).await?;
    let acquired = window.close(&bed.server, &[&proxy]).await;
    let after = Footprint::now(bed).await;
    acquisition(&mut line, &acquired, locks);
    before.per_hold(&after, &mut line, locks);
    let window = Window::open(&bed.server, &[&proxy]).await;
    tokio::time::sleep(bed.probe_period().mul_f64(bed.args.scale_periods.max(1.0))).await;
    let idle = window.close(&bed.server, &[&proxy]).await;
    let seconds = idle.seconds.max(1e-9);
    line.set("held_seconds", Some(seconds));
    line.set("multis_per_s", Some(0.0));
    line.set(
        "requests_per_s",
        Some(idle.counts.requests() as f64 / seconds),
    );
    let writes = idle.server_writes.map(|w| w as f64 / seconds);
    line.set("server_writes_per_s", writes);
    let released = tokio::time::Instant::now();
    unlock_all(&client, nodes).await;
    line.set("release_all_s", Some(released.elapsed().as_secs_f64()));
    remove(&bed.admin, &parent, locks).await;
    Ok(line)
}

/// Locks `<parent>/0` .. `<parent>/<locks − 1>` on `client`, `IN_FLIGHT` at once: the lock
/// nodes. What a hold keeps is its node's path (the lock client only borrows the session), so
/// that is what is kept, and released by an awaited delete.
async fn lock_all(client: &zk::Client, parent: &str, locks: usize) -> Result<Vec<String>, String> {
    let mut nodes = Vec::with_capacity(locks);
    let mut pending = JoinSet::new();
    for i in 0..locks {
        let (client, path) = (client.clone(), format!("{parent}/{i}"));
        pending.spawn(async move {
            let prefix = zk::LockPrefix::new_curator(&path, "lock-").map_err(|e| e.to_string())?;
            let locked = client.lock(prefix, b"", zk::Acls::anyone_all()).await;
            let locked = locked.map_err(|e| format!("locking {path}: {e}"))?;
            let node = locked.lock_path().to_owned();
            // The lock client's drop would delete in the background: released below.
            std::mem::forget(locked);
            Ok::<_, String>(node)
        });
        if pending.len() >= IN_FLIGHT {
            if let Some(done) = pending.join_next().await {
                nodes.push(done.map_err(|e| e.to_string())??);
            }
        }
    }
    while let Some(done) = pending.join_next().await {
        nodes.push(done.map_err(|e| e.to_string())??);
    }
    Ok(nodes)
}

/// Deletes every lock node of `nodes`, `IN_FLIGHT` at once.
async fn unlock_all(client: &zk::Client, nodes: Vec<String>) {
    let mut pending = JoinSet::new();
    for node in nodes {
        let client = client.clone();
        pending.spawn(async move {
            let _ = client.delete(&node, None).await;
        });
        if pending.len() >= IN_FLIGHT {
            pending.join_next().await;
        }
    }
    while pending.join_next().await.is_some() {}
}
