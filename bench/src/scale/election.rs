//! zkfence's side of the election at scale: candidates campaigning with `FencedElection`, each
//! on a session of its own through one counting proxy, and observers (`FencedElection::observe`)
//! on sessions of their own through another; the leader resigns `--changes` times, and each
//! change is over once every observer has seen the new leader. What the observers send per
//! observer and change is the figure; the candidates' is beside it. Curator's side, measured
//! alike, is in `curator`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use zkfence::{FencedElection, Leadership, LockOptions};

use super::bed::Bed;
use super::count::{await_nodes, sessions, Counts, Window};
use super::line::Line;

/// What an observer has seen while no leader has been: none.
const NO_LEADER: i64 = i64::MIN;

/// `candidates` candidates and `observers` observers, `changes` leader changes, in `round`.
pub(super) async fn election(
    bed: &Bed<'_>,
    round: usize,
    candidates: usize,
    observers: usize,
) -> Result<Line, String> {
    let changes = bed.args.changes.min(candidates.saturating_sub(1)).max(1);
    let path = bed.path(&format!("e{round}-{candidates}-{observers}-zkfence"));
    bed.mkdir(&path).await?;
    let proxies = [bed.server.proxy().await, bed.server.proxy().await];
    let t = bed.session_timeout();
    let (won, mut leaders) = tokio::sync::mpsc::unbounded_channel::<Leadership>();
    let mut campaigns = JoinSet::new();
    for (i, client) in (sessions(&bed.server.via(&proxies[0]), candidates, t).await?)
        .into_iter()
        .enumerate()
    {
        let election = FencedElection::new(client, path.clone(), LockOptions::default())
            .map_err(|e| e.to_string())?;
        let won = won.clone();
        campaigns.spawn(async move {
            if let Ok(leadership) = election.campaign(format!("c{i}")).await {
                let _ = won.send(leadership);
            }
        });
    }
    await_nodes(&bed.admin, &[&path], candidates).await?;
    let mut leader = leaders.recv().await.ok_or("no candidate led")?;
    let seen: Arc<Vec<AtomicI64>> =
        Arc::new((0..observers).map(|_| AtomicI64::new(NO_LEADER)).collect());
    let watching = observe(bed, &proxies[1], &path, &seen).await?;
    all_see(&seen, leader.epoch().as_i64()).await?;
    let candidates_before = Counts::of(&[&proxies[0]]);
    let window = Window::open(&bed.server, &[&proxies[1]]).await;
    for _ in 0..changes {
        leader.resign().await.map_err(|e| e.to_string())?;
        leader = leaders.recv().await.ok_or("no candidate led next")?;
        all_see(&seen, leader.epoch().as_i64()).await?;
    }
    let observed = window.close(&bed.server, &[&proxies[1]]).await;
    let campaigned = Counts::of(&[&proxies[0]]).since(&candidates_before);
    let mut line = Line::new(
        "election",
        "zkfence",
        round,
        &[("candidates", candidates), ("observers", observers)],
    );
    figures(&mut line, &observed, &campaigned, observers, changes);
    drop(watching);
    campaigns.abort_all();
    let _ = leader.resign().await;
    Ok(line)
}

/// The election's figures: the observers' requests and notifications per observer and change,
/// the candidates' per change, the time and the server's writes and CPU per change.
pub(super) fn figures(
    line: &mut Line,
    observed: &super::count::Seen,
    campaigned: &Counts,
    observers: usize,
    changes: usize,
) {
    observed.per(line, changes as f64, "change");
    let each = (observers * changes).max(1) as f64;
    line.set("changes", Some(changes as f64));
    line.set(
        "observer_requests_per_observer_change",
        Some(observed.counts.requests() as f64 / each),
    );
    line.set(
        "observer_notifications_per_observer_change",
        Some(observed.counts.notifications() as f64 / each),
    );
    line.set(
        "observer_bytes_per_observer_change",
        Some(observed.counts.bytes() as f64 / each),
    );
    line.set(
        "candidate_requests_per_change",
        Some(campaigned.requests() as f64 / changes as f64),
    );
    line.set(
        "ms_per_change",
        Some(observed.seconds * 1e3 / changes as f64),
    );
}

/// Starts the observers, one session each through `proxy`; each writes the epoch it last saw
/// into its slot of `seen`. Dropping the set stops them.
async fn observe(
    bed: &Bed<'_>,
    proxy: &super::proxy::Proxy,
    path: &str,
    seen: &Arc<Vec<AtomicI64>>,
) -> Result<JoinSet<()>, String> {
    let clients = sessions(&bed.server.via(proxy), seen.len(), bed.session_timeout()).await?;
    let mut watching = JoinSet::new();
    for (slot, client) in clients.into_iter().enumerate() {
        let election = FencedElection::new(client, path.to_owned(), LockOptions::default())
            .map_err(|e| e.to_string())?;
        let seen = seen.clone();
        watching.spawn(async move {
            let mut observer = election.observe();
            while let Ok(leader) = observer.next().await {
                let epoch = leader.map_or(NO_LEADER, |l| l.epoch.as_i64());
                seen[slot].store(epoch, Ordering::SeqCst);
            }
        });
    }
    Ok(watching)
}

/// Waits (up to a minute) until every observer has seen the leader of `epoch`.
async fn all_see(seen: &[AtomicI64], epoch: i64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.iter().any(|s| s.load(Ordering::SeqCst) != epoch) {
        if Instant::now() > deadline {
            return Err(format!(
                "not every observer saw epoch {epoch} within a minute"
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}
