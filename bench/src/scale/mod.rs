//! `zkfence-bench --scale`: zkfence at scale against its peers, on a throwaway local server (or
//! `--connect`), everything counted through counting proxies (`proxy`: requests by operation,
//! watch notifications, bytes both ways), with the server's `mntr` (watches, ephemerals, data
//! size), its zxid (its writes) and both ends' CPU:
//!
//! - `holds`: K locks held at once by one session: acquire-all time, memory and server state
//!   per hold, the watchdog's writes while holding, steady again after a server restart;
//! - `waiters`: W waiters on one lock: their writes while they wait, the drain against the raw
//!   notification rate, requests, notifications and bytes per handoff; zookeeper-client's
//!   `Client::lock` and Curator's `InterProcessMutex` beside;
//! - `semaphore`, `rwlock`, `election`: requests and notifications per release (per writer
//!   release, per observer and leader change) against Curator's recipes in a JVM.
//!
//! `--rounds R` repeats everything R times, zkfence and its peers in turns (each round starting
//! with the next); each measurement prints its JSON line as it ends, and the summary gives the
//! medians over the rounds, the per-round ratios' median and range, and issue 27's targets. A
//! measurement that fails is reported and skipped, not fatal.

mod bed;
mod count;
mod curator;
mod election;
mod holds;
mod line;
mod proxy;
mod recipes;
mod summary;
mod waiters;
mod zkclient;

use zkfence_testkit::LocalZooKeeper;

use self::bed::{Bed, Server};
use self::count::Pool;
use self::line::Line;
use self::waiters::Peer;
use super::measure;
use super::options::{Args, Impl, ScaleWhat};
use super::workload::connect_raw;

/// `--scale` on `hosts` (`local`: the throwaway server the bench started, which it may
/// restart): every measurement asked for, `--rounds` times, then the summary; the exit code.
pub(crate) async fn scale(
    args: &Args,
    hosts: &str,
    local: Option<&LocalZooKeeper>,
) -> Result<u8, String> {
    let server = Server::new(hosts, local);
    let admin = connect_raw(&server.direct()).await?;
    let base = format!("{}/scale-{}", args.lock, std::process::id());
    let bed = Bed {
        args,
        server,
        admin,
        base,
    };
    bed.mkdir(&bed.base).await?;
    let rounds = args.rounds.unwrap_or(1).max(1);
    let mut lines = Vec::new();
    for round in 1..=rounds {
        // Every round on a warm server: the first after its start, the others after the
        // restarts of the held locks' measurement.
        measure::warm_up(args, &bed.server.direct()).await?;
        if args.scales(ScaleWhat::Waiters) {
            waiters(&bed, round, &mut lines).await;
        }
        if args.scales(ScaleWhat::Semaphore) {
            semaphores(&bed, round, &mut lines).await;
        }
        if args.scales(ScaleWhat::Rwlock) {
            rwlocks(&bed, round, &mut lines).await;
        }
        if args.scales(ScaleWhat::Election) {
            elections(&bed, round, &mut lines).await;
        }
        // Last: its restarts leave the server's JIT cold.
        if args.scales(ScaleWhat::Holds) {
            holds(&bed, round, &mut lines).await;
        }
    }
    print!("{}", summary::summary(&bed, &lines));
    Ok(0)
}

/// Prints a measurement's JSON line and keeps it, or says why there is none.
fn keep(lines: &mut Vec<Line>, what: &str, measured: Result<Line, String>) {
    match measured {
        Ok(line) => {
            println!("{}", line.json());
            lines.push(line);
        }
        Err(err) => eprintln!("bench: {what}: failed, skipped: {err}"),
    }
}

/// zkfence and its peers in turns: round r starts with the (r − 1)th of them, round robin, so
/// that over as many rounds as sides each side goes first once (with one peer: zkfence first in
/// odd rounds, the peer in even ones).
fn in_turns<T: Copy>(round: usize, ours: T, peers: &[Option<T>]) -> Vec<T> {
    let mut order: Vec<T> = std::iter::once(ours)
        .chain(peers.iter().flatten().copied())
        .collect();
    let len = order.len();
    order.rotate_left(round.saturating_sub(1) % len);
    order
}

/// The held locks of every `--locks` count, zkfence and zookeeper-client in turns; zkfence's
/// restart of the server followed by a short warm-up of it.
async fn holds(bed: &Bed<'_>, round: usize, lines: &mut Vec<Line>) {
    let zkclient = bed.args.has_peer(Impl::Zkclient).then_some(Peer::Zkclient);
    for &locks in &bed.args.locks {
        for side in in_turns(round, Peer::Zkfence, &[zkclient]) {
            eprintln!(
                "bench round {round}: holding {locks} locks, {} ...",
                side.name()
            );
            if side == Peer::Zkclient {
                keep(lines, "holds", zkclient::holds(bed, round, locks).await);
                continue;
            }
            keep(lines, "holds", holds::holds(bed, round, locks).await);
            let warm = super::options::Run {
                seconds: 0.0,
                warmup: 2.0,
                ..super::options::Run::new(
                    bed.args,
                    Impl::Raw,
                    super::options::Mode::Uncontended,
                    1,
                )
            };
            if let Err(err) = warm.execute(&bed.server.direct(), &bed.args.lock).await {
                eprintln!("bench: warming the server up: {err}");
            }
        }
    }
}

/// The raw notification rate, then the holder alone (the idle baseline) and every `--waiters`
/// count, zkfence, zookeeper-client and Curator's `InterProcessMutex` in turns.
async fn waiters(bed: &Bed<'_>, round: usize, lines: &mut Vec<Line>) {
    keep(lines, "raw", waiters::raw(bed, round).await);
    let most = bed.args.waiters.iter().copied().max().unwrap_or(0);
    let mut worker = match bed.args.has_peer(Impl::Curator) && most > 0 {
        true => started(curator::Worker::start(bed, most + 1).await),
        false => None,
    };
    let zkclient = bed.args.has_peer(Impl::Zkclient).then_some(Peer::Zkclient);
    for &count in [0].iter().chain(&bed.args.waiters) {
        let curator = worker.as_ref().map(|_| Peer::Curator);
        let peers = [zkclient, curator].map(|peer| peer.filter(|_| count > 0));
        for implementation in in_turns(round, Peer::Zkfence, &peers) {
            eprintln!(
                "bench round {round}: {count} waiters, {} ...",
                implementation.name()
            );
            let measured = match (implementation, worker.as_mut()) {
                (Peer::Curator, Some(worker)) => curator::mutex(bed, worker, round, count).await,
                _ => waiters::waiters(bed, round, count, implementation).await,
            };
            keep(lines, "waiters", measured);
        }
    }
    if let Some(worker) = worker {
        worker.quit().await;
    }
}

/// The semaphore of every `--permits` count, zkfence and Curator in turns, each side's
/// contenders on sessions kept through the round.
async fn semaphores(bed: &Bed<'_>, round: usize, lines: &mut Vec<Line>) {
    let contenders = bed.args.semaphore_contenders;
    let Some((pool, mut worker)) = sides(bed, contenders).await else {
        return;
    };
    for &permits in &bed.args.permits {
        for curator in in_turns(round, false, &[worker.as_ref().map(|_| true)]) {
            eprintln!("bench round {round}: semaphore of {permits}, {contenders} contenders, curator={curator} ...");
            let measured = match (curator, worker.as_mut()) {
                (true, Some(worker)) => {
                    curator::semaphore(bed, worker, round, permits, contenders).await
                }
                _ => recipes::semaphore(bed, &pool, round, permits, contenders).await,
            };
            keep(lines, "semaphore", measured);
        }
    }
    if let Some(worker) = worker {
        worker.quit().await;
    }
}

/// The read/write lock, zkfence and Curator in turns.
async fn rwlocks(bed: &Bed<'_>, round: usize, lines: &mut Vec<Line>) {
    let (writers, readers) = (bed.args.writers.max(1), bed.args.readers);
    let Some((pool, mut worker)) = sides(bed, writers + readers).await else {
        return;
    };
    for curator in in_turns(round, false, &[worker.as_ref().map(|_| true)]) {
        eprintln!("bench round {round}: read/write lock, {writers} writers, {readers} readers, curator={curator} ...");
        let measured = match (curator, worker.as_mut()) {
            (true, Some(worker)) => curator::rwlock(bed, worker, round, writers, readers).await,
            _ => recipes::rwlock(bed, &pool, round, writers, readers).await,
        };
        keep(lines, "rwlock", measured);
    }
    if let Some(worker) = worker {
        worker.quit().await;
    }
}

/// The election of every candidate and observer count, zkfence and Curator in turns.
async fn elections(bed: &Bed<'_>, round: usize, lines: &mut Vec<Line>) {
    let most = bed.args.candidates.iter().copied().max().unwrap_or(0);
    let mut worker = match bed.args.has_peer(Impl::Curator) {
        true => started(curator::Worker::start(bed, most).await),
        false => None,
    };
    for &candidates in &bed.args.candidates {
        for &observers in &bed.args.observers {
            for curator in in_turns(round, false, &[worker.as_ref().map(|_| true)]) {
                eprintln!("bench round {round}: election, {candidates} candidates, {observers} observers, curator={curator} ...");
                let measured = match (curator, worker.as_mut()) {
                    (true, Some(worker)) => {
                        curator::election(bed, worker, round, candidates, observers).await
                    }
                    _ => election::election(bed, round, candidates, observers).await,
                };
                keep(lines, "election", measured);
            }
        }
    }
    if let Some(worker) = worker {
        worker.quit().await;
    }
}

/// zkfence's pool of `sessions` sessions, and Curator's worker with as many when Curator is
/// among the peers; `None` (said) if zkfence's pool cannot be opened.
async fn sides(bed: &Bed<'_>, sessions: usize) -> Option<(Pool, Option<curator::Worker>)> {
    let pool = match Pool::open(bed, sessions).await {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("bench: {sessions} sessions: {err}; skipped");
            return None;
        }
    };
    let worker = match bed.args.has_peer(Impl::Curator) {
        true => started(curator::Worker::start(bed, sessions).await),
        false => None,
    };
    Some((pool, worker))
}

/// The worker, or `None` (said): the measurements go on without Curator.
fn started(worker: Result<curator::Worker, String>) -> Option<curator::Worker> {
    worker
        .map_err(|err| eprintln!("bench: the Curator worker: {err}; Curator skipped"))
        .ok()
}
