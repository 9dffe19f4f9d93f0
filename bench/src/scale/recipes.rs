//! zkfence's side of the recipes at scale, each contender on a session of its own from a pool
//! (through one counting proxy): a `FencedSemaphore` whose holders keep their leases until
//! every contender has queued, then all drain (requests and notifications per release); a
//! `FencedRwLock` with readers queued behind writers (per writer release). Curator's side,
//! measured alike, is in `curator`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use zkfence::{Acquire, FencedRwLock, FencedSemaphore, LockOptions};

use super::bed::{Bed, Mntr};
use super::count::{await_nodes, settle, Pool, Window};
use super::line::Line;

/// A semaphore of `permits` with `contenders` contenders from `pool`, in `round`: the line.
pub(super) async fn semaphore(
    bed: &Bed<'_>,
    pool: &Pool,
    round: usize,
    permits: u32,
    contenders: usize,
) -> Result<Line, String> {
    let path = bed.path(&format!("s{round}-{permits}-zkfence"));
    let baseline = bed.server.mntr().await;
    let (gate, opened) = tokio::sync::watch::channel(false);
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for client in &pool.clients[..contenders] {
        let options = LockOptions::default();
        let semaphore = FencedSemaphore::new(client.clone(), path.clone(), permits, options)
            .map_err(|e| e.to_string())?;
        let (mut opened, granted) = (opened.clone(), granted.clone());
        tasks.spawn(async move {
            let lease = semaphore.acquire().await?;
            granted.fetch_add(1, Ordering::SeqCst);
            let _ = opened.wait_for(|open| *open).await;
            lease.release().await
        });
    }
    await_nodes(&bed.admin, &[&path], contenders).await?;
    let holders = (permits as usize).min(contenders);
    while granted.load(Ordering::SeqCst) < holders {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    settle(&pool.proxy, contenders).await; // every waiter's watches land
    let mut line = Line::new(
        "semaphore",
        "zkfence",
        round,
        &[("permits", permits as usize), ("contenders", contenders)],
    );
    queued(bed, &baseline, &mut line, contenders).await;
    let window = Window::open(&bed.server, &[&pool.proxy]).await;
    let _ = gate.send(true);
    drain(tasks).await?;
    let seen = window.close(&bed.server, &[&pool.proxy]).await;
    seen.per(&mut line, contenders as f64, "release");
    Ok(line)
}

/// The server's watches per queued contender, against `baseline` (taken before they queued).
pub(super) async fn queued(bed: &Bed<'_>, baseline: &Mntr, line: &mut Line, contenders: usize) {
    let now = bed.server.mntr().await;
    let watches = baseline.grown(&now, "zk_watch_count");
    line.set(
        "server_watches_per_contender",
        watches.map(|w| w / contenders.max(1) as f64),
    );
}

/// Waits for every contender's task; the first failure.
async fn drain(mut tasks: JoinSet<zkfence::Result<()>>) -> Result<(), String> {
    let mut first = None;
    while let Some(done) = tasks.join_next().await {
        let failed = match done {
            Ok(Ok(())) => None,
            Ok(Err(err)) => Some(err.to_string()),
            Err(err) => Some(err.to_string()),
        };
        first = first.or(failed);
    }
    first.map_or(Ok(()), Err)
}

/// A read/write lock with `writers` writers queued first (the first holding) and `readers`
/// readers behind them, each on a session of its own from `pool`, in `round`; counted from the
/// first writer's release to the last holder's: the line, per writer release.
pub(super) async fn rwlock(
    bed: &Bed<'_>,
    pool: &Pool,
    round: usize,
    writers: usize,
    readers: usize,
) -> Result<Line, String> {
    let path = bed.path(&format!("rw{round}-zkfence"));
    let baseline = bed.server.mntr().await;
    let mut locks = Vec::with_capacity(writers + readers);
    for client in &pool.clients[..writers + readers] {
        let options = LockOptions::default();
        let rw = FencedRwLock::new(client.clone(), path.clone(), options);
        locks.push(rw.map_err(|e| e.to_string())?);
    }
    let first = locks[0].write().await.map_err(|e| e.to_string())?;
    let mut tasks = JoinSet::new();
    for (i, rw) in locks.into_iter().enumerate().skip(1) {
        if i < writers {
            tasks.spawn(async move { rw.write().await?.release().await });
            await_nodes(&bed.admin, &[&path], i + 1).await?; // writers queue in order
        } else {
            tasks.spawn(async move { rw.read().await?.release().await });
        }
    }
    await_nodes(&bed.admin, &[&path], writers + readers).await?;
    settle(&pool.proxy, writers + readers).await;
    let mut line = Line::new(
        "rwlock",
        "zkfence",
        round,
        &[("writers", writers), ("readers", readers)],
    );
    queued(bed, &baseline, &mut line, writers + readers).await;
    let window = Window::open(&bed.server, &[&pool.proxy]).await;
    first.release().await.map_err(|e| e.to_string())?;
    drain(tasks).await?;
    let seen = window.close(&bed.server, &[&pool.proxy]).await;
    seen.per(&mut line, writers as f64, "release");
    Ok(line)
}
