//! A worker that holds many locks on one session at once: the scenario's sixteen lock paths
//! (`<lock>/p00` … `/p15`; store rows 1 to 16), each taken by a `FencedLock` of its own on the
//! worker's session, in sorted order (so that two workers never wait for each other), held
//! together while the worker raises each path's fence and increments the rows in turn, then
//! released. A fault that puts the session's leases in jeopardy puts every hold in jeopardy
//! together, and a committed probe that checks all their nodes resumes them together; each
//! path's grant, writes and loss are logged under its own token and row, so that the checker
//! applies its invariants per path.

use std::sync::atomic::Ordering;
use std::time::Duration;

use zkfence::{Acquire, FencedLock, LockGuard, LockOptions};
use zookeeper_client as zk;

use crate::clock::now_ns;
use crate::event::{Ev, Role};
use crate::hold::{Hold, EXTEND};
use crate::multi::{hold, length, work_all};
use crate::worker::{connect, Worker, WorkerArgs};

/// How many locks a worker holds at once (and store rows the scenario has).
pub(crate) const PATHS: usize = 16;

/// The many-locks worker's process.
pub(crate) async fn run(args: WorkerArgs) {
    let mut worker = Worker::start(args).await;
    loop {
        let client = connect(&worker.args.zk, worker.timeout, &worker.log).await;
        let locks: Vec<FencedLock> = (0..PATHS)
            .map(|i| {
                let path = format!("{}/p{i:02}", worker.args.lock);
                FencedLock::new(client.clone(), path, options(&worker))
                    .unwrap_or_else(|err| worker.fatal(err))
            })
            .collect();
        while !client.state().is_terminated() {
            EXTEND.store(false, Ordering::SeqCst);
            hold_all(&mut worker, &client, &locks).await;
        }
        worker.log.now(Ev::SessionEnded {
            state: format!("{:?}", client.state()),
        });
    }
}

/// The worker's lease options (its grace included).
fn options(worker: &Worker) -> LockOptions {
    worker.options()
}

/// Takes every lock in order (giving up, and releasing what it took, when one does not come
/// within the worker's wait), works under all of them, releases them all.
async fn hold_all(worker: &mut Worker, client: &zk::Client, locks: &[FencedLock]) {
    let mut guards: Vec<LockGuard> = Vec::with_capacity(locks.len());
    for lock in locks {
        worker.log.now(Ev::Acquire { role: Role::Write });
        let acquire = lock.acquire_timeout(worker.wait()).await;
        match worker.acquired(acquire).await {
            Some(guard) => guards.push(guard),
            None => break,
        }
    }
    if guards.len() == locks.len() {
        serve_all(worker, &guards).await;
        for guard in &guards {
            worker
                .verdict_if_lost(client, guard, guard.token().as_u64())
                .await;
        }
    }
    let tokens: Vec<u64> = guards.iter().map(|g| g.token().as_u64()).collect();
    let release = async move {
        let mut outcome = Ok(());
        for guard in guards.into_iter().rev() {
            outcome = outcome.and(guard.release().await);
        }
        outcome
    };
    worker.release(&tokens, release).await;
}

/// Logs each grant (valid if its lease holds then), raises each path's fence and increments the
/// rows in turn, then polls the leases while the stretch lasts.
async fn serve_all(worker: &mut Worker, guards: &[LockGuard]) {
    let (increments, long) = length(worker);
    let stretch = Duration::from_millis(worker.args.long_ms);
    let (log, heed) = (&worker.log, worker.heed_watchdog);
    let holds: Vec<Hold<'_, zkfence::Held>> = (guards.iter().enumerate())
        .map(|(i, guard)| hold(log, heed, guard, &**guard, i))
        .collect();
    let now = now_ns();
    let mut watchers = Vec::with_capacity(holds.len());
    for hold in &holds {
        let granted_at = now - hold.held.held_for().as_nanos() as i64;
        match hold.granted(granted_at, long).await {
            Some(watcher) => watchers.push(watcher),
            None => return,
        }
    }
    let rounds = increments.div_ceil(PATHS as u32).max(1) * PATHS as u32;
    work_all(&mut worker.store, &mut worker.rng, &holds, rounds, stretch).await;
    drop(watchers);
}
