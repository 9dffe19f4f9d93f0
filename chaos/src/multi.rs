//! A worker of reentrant holds and multi-locks on the scenario's three lock paths (`<lock>/a`,
//! `/b`, `/c`; store rows 1, 2 and 3), with reentrant lease options. Each hold is one of:
//! - **nested**: a path's lock, then the same path again through a second `FencedLock` on the
//!   same session in the same task (the nested hold has the outer hold's token and node, and
//!   no request), writes under both, the nested hold released first, then a write under the
//!   outer hold (its node must have stayed);
//! - **several**: a `FencedMultiLock` over two or three paths, given in a random order (the
//!   library takes them in sorted order), each path's row fenced by that path's token
//!   (`MultiHeld::tokens`), every write behind the multi-lock's check;
//! - **nested and several**: a path's lock, then a multi-lock over it and a path that sorts
//!   after it (so that no two workers wait for each other's outer hold): the outer path nests
//!   into the multi-lock, the other is granted.
//!
//! Each path's grant, writes, checks and loss are logged under that path's token and row, so
//! that the checker applies its invariants per path.

use crate::clock::now_ns;
use crate::event::{Ev, Role};
use crate::hold::{poll_lease, stretch_asked, Hold, Lease, Log, EXTEND};
use crate::rng::Rng;
use crate::store::Store;
use crate::worker::{connect, Worker, WorkerArgs};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;
use zkfence::Acquire;
use zkfence::{FencedLock, FencedMultiLock, Held, LockOptions, MultiHeld};
use zookeeper_client as zk;

/// The lock paths' last segments; path `i` writes store row `i + 1`.
const PATHS: [&str; 3] = ["a", "b", "c"];

impl Lease for MultiHeld {
    fn check(&self) -> zkfence::Result<()> {
        MultiHeld::check(self)
    }

    /// The earliest of its locks' lease deadlines.
    fn deadline(&self) -> Instant {
        (self.helds().iter().map(Held::lease_deadline).min()).unwrap_or_else(Instant::now)
    }

    async fn steady(&self) -> zkfence::Result<()> {
        MultiHeld::steady(self).await
    }
}

/// The multi-lock worker's process.
pub(crate) async fn run(args: WorkerArgs) {
    let mut worker = Worker::start(args).await;
    loop {
        let client = connect(&worker.args.zk, worker.timeout, &worker.log).await;
        while !client.state().is_terminated() {
            EXTEND.store(false, Ordering::SeqCst);
            match worker.rng.range(0, 2) {
                0 => nested(&mut worker, &client).await,
                1 => several(&mut worker, &client).await,
                _ => nested_and_several(&mut worker, &client).await,
            }
        }
        worker.log.now(Ev::SessionEnded {
            state: format!("{:?}", client.state()),
        });
    }
}

/// The worker's lease options, reentrant.
fn options(worker: &Worker) -> LockOptions {
    worker.options().with_reentrant(true)
}

/// Path `i`'s lock path.
fn path(worker: &Worker, i: usize) -> String {
    format!("{}/{}", worker.args.lock, PATHS[i])
}

/// A lock on path `i` on `client`'s session; exits if it cannot be made.
fn lock(worker: &Worker, client: &zk::Client, i: usize) -> FencedLock {
    FencedLock::new(client.clone(), path(worker, i), options(worker))
        .unwrap_or_else(|err| worker.fatal(err))
}

/// A hold of `held` on path `i`, checked through `lease`, logging to `log` (`heed`: whether
/// it checks its lease before each write).
pub(crate) fn hold<'a, L>(
    log: &'a Log,
    heed: bool,
    held: &'a Held,
    lease: &'a L,
    i: usize,
) -> Hold<'a, L> {
    Hold {
        held,
        ticket: Some(held.ticket()),
        lease,
        token: held.token().as_u64(),
        row: i as i32 + 1,
        log,
        heed_watchdog: heed,
        read: false,
    }
}

/// How many increments a hold does: one hold in four is a long critical section (20 times
/// as many), which the faults aimed at the watchdog pick. `(increments, long)`.
pub(crate) fn length(worker: &mut Worker) -> (u32, bool) {
    let long = worker.rng.range(0, 3) == 0;
    let n = worker.args.increments;
    (if long { n * 20 } else { n }, long)
}

/// Raises each hold's fence, then `increments` read-modify-write increments over the holds in
/// turn (and on while the stretch the controller asks for lasts), then polls the lease until
/// that stretch ends. `false` if a step ended the hold.
pub(crate) async fn work_all<L: Lease>(
    store: &mut Store,
    rng: &mut Rng,
    holds: &[Hold<'_, L>],
    increments: u32,
    stretch: Duration,
) -> bool {
    let mut until = Instant::now();
    let mut ok = true;
    for hold in holds {
        ok = ok && hold.fence(store).await.is_some();
    }
    let mut done = 0;
    'work: while ok && (done < increments || Instant::now() < until) {
        if stretch_asked() {
            until = until.max(Instant::now() + stretch);
            let token = holds[0].token;
            holds[0].log.now(Ev::Extended { token });
        }
        for hold in holds {
            done += 1;
            if hold.increment(store, rng).await.is_none() {
                ok = false;
                break 'work;
            }
        }
    }
    poll_lease(holds, until).await;
    ok
}

/// Logs a nested acquire's outcome: its token beside the outer hold's, or its failure.
fn nested_acquired(log: &Log, token: u64, inner: &zkfence::Result<Option<zkfence::LockGuard>>) {
    match inner {
        Ok(Some(guard)) => log.now(Ev::Nested {
            token,
            inner: guard.token().as_u64(),
        }),
        Ok(None) => log.now(Ev::AcquireFailed {
            error: "a nested acquire timed out".into(),
        }),
        Err(err) => log.now(Ev::AcquireFailed {
            error: format!("a nested acquire failed: {err}"),
        }),
    }
}

/// A path's lock, then the same path again (nested, through a second lock on the session),
/// writes under each; the nested hold released first, then one more write under the outer one.
async fn nested(worker: &mut Worker, client: &zk::Client) {
    let i = worker.rng.range(0, 2) as usize;
    let (outer_lock, inner_lock) = (lock(worker, client, i), lock(worker, client, i));
    worker.log.now(Ev::Acquire { role: Role::Write });
    let acquire = outer_lock.acquire_timeout(worker.wait()).await;
    let Some(outer) = worker.acquired(acquire).await else {
        return;
    };
    let (increments, long) = length(worker);
    let stretch = Duration::from_millis(worker.args.long_ms);
    let token = outer.token().as_u64();
    let (log, heed) = (&worker.log, worker.heed_watchdog);
    let held = hold(log, heed, &outer, &*outer, i);
    if let Some(watcher) = held.granted(now_ns(), long).await {
        let holds = std::slice::from_ref(&held);
        if work_all(
            &mut worker.store,
            &mut worker.rng,
            holds,
            increments,
            stretch,
        )
        .await
        {
            let inner = inner_lock.acquire_timeout(worker.timeout * 3).await;
            nested_acquired(log, token, &inner);
            if let Ok(Some(inner)) = inner {
                let nested = [hold(log, heed, &inner, &*inner, i)];
                let n = worker.args.increments;
                work_all(
                    &mut worker.store,
                    &mut worker.rng,
                    &nested,
                    n,
                    Duration::ZERO,
                )
                .await;
                let _ = inner.release().await;
                log.now(Ev::Unnested { token });
                let _ = held.increment(&mut worker.store, &mut worker.rng).await;
            }
        }
        drop(watcher);
    }
    worker.verdict_if_lost(client, &outer, token).await;
    worker.release(&[token], outer.release()).await;
}

/// `count` distinct paths in a random order.
fn pick(rng: &mut Rng, count: usize) -> Vec<usize> {
    let mut all = vec![0, 1, 2];
    rng.shuffle(&mut all);
    all.truncate(count);
    all
}

/// A multi-lock on `client`'s session over the paths `order` names, in that order; exits if
/// it cannot be made.
fn multi_lock(worker: &Worker, client: &zk::Client, order: &[usize]) -> FencedMultiLock {
    let paths: Vec<String> = order.iter().map(|&i| path(worker, i)).collect();
    FencedMultiLock::new(client.clone(), paths, options(worker))
        .unwrap_or_else(|err| worker.fatal(err))
}

/// Logs the grant of each of `holds` (a multi-lock's paths), at the moment that path was
/// granted: the multi-lock took them one by one. The cancellation watchers, if every grant
/// was valid.
async fn granted_all(
    holds: &[Hold<'_, MultiHeld>],
    long: bool,
) -> Option<Vec<tokio::task::JoinHandle<()>>> {
    let now = now_ns();
    let mut watchers = Vec::new();
    for hold in holds {
        let t = now - hold.held.held_for().as_nanos() as i64;
        watchers.push(hold.granted(t, long).await?);
    }
    Some(watchers)
}

/// A multi-lock over two or three paths, given in a random order; each path's row fenced by
/// its own token.
async fn several(worker: &mut Worker, client: &zk::Client) {
    let count = worker.rng.range(2, 3) as usize;
    let order = pick(&mut worker.rng, count);
    let multi = multi_lock(worker, client, &order);
    worker.log.now(Ev::Acquire { role: Role::Write });
    let acquire = multi.acquire_timeout(worker.wait()).await;
    let Some(guard) = worker.acquired(acquire).await else {
        return;
    };
    let held = guard.held();
    let (increments, long) = length(worker);
    let stretch = Duration::from_millis(worker.args.long_ms);
    let (log, heed) = (&worker.log, worker.heed_watchdog);
    let holds: Vec<Hold<'_, MultiHeld>> = (held.helds().iter().zip(&order))
        .map(|(h, &i)| hold(log, heed, h, &held, i))
        .collect();
    if let Some(watchers) = granted_all(&holds, long).await {
        work_all(
            &mut worker.store,
            &mut worker.rng,
            &holds,
            increments,
            stretch,
        )
        .await;
        drop(watchers);
    }
    let tokens: Vec<u64> = holds.iter().map(|h| h.token).collect();
    for h in held.helds() {
        worker.verdict_if_lost(client, h, h.token().as_u64()).await;
    }
    worker.release(&tokens, guard.release()).await;
}

/// A path's lock, then a multi-lock over it and a path that sorts after it, given in a random
/// order: the first path nests into the multi-lock (its token and node), the second is
/// granted. The multi-lock released, one more write under the outer hold.
async fn nested_and_several(worker: &mut Worker, client: &zk::Client) {
    let first = worker.rng.range(0, 1) as usize;
    let second = worker.rng.range(first as u64 + 1, 2) as usize;
    let mut order = [first, second];
    worker.rng.shuffle(&mut order);
    let outer_lock = lock(worker, client, first);
    let multi = multi_lock(worker, client, &order);
    worker.log.now(Ev::Acquire { role: Role::Write });
    let acquire = outer_lock.acquire_timeout(worker.wait()).await;
    let Some(outer) = worker.acquired(acquire).await else {
        return;
    };
    let token = outer.token().as_u64();
    let n = worker.args.increments;
    let heed = worker.heed_watchdog;
    let held = hold(&worker.log, heed, &outer, &*outer, first);
    let Some(watcher) = held.granted(now_ns(), false).await else {
        return worker.release(&[token], outer.release()).await;
    };
    let holds = std::slice::from_ref(&held);
    if work_all(&mut worker.store, &mut worker.rng, holds, n, Duration::ZERO).await {
        let acquire = multi.acquire_timeout(worker.timeout * 3).await;
        nested_multi(worker, client, token, &order, acquire).await;
        let held = hold(&worker.log, heed, &outer, &*outer, first);
        let _ = held.increment(&mut worker.store, &mut worker.rng).await;
    }
    drop(watcher);
    worker.verdict_if_lost(client, &outer, token).await;
    worker.release(&[token], outer.release()).await;
}

/// The multi-lock of [`nested_and_several`] over the paths `order` names, taken (`acquire`)
/// under the outer hold of `token` on the one that sorts first: logs that path as nested (its
/// token beside the outer hold's) and the other one's grant, writes both paths' rows, and
/// releases the multi-lock (the outer hold's node stays).
async fn nested_multi(
    worker: &mut Worker,
    client: &zk::Client,
    token: u64,
    order: &[usize; 2],
    acquire: zkfence::Result<Option<zkfence::MultiGuard>>,
) {
    let guard = match acquire {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            let error = "a multi-lock over a held path timed out".into();
            return worker.log.now(Ev::AcquireFailed { error });
        }
        Err(err) => {
            let error = format!("a multi-lock over a held path failed: {err}");
            return worker.log.now(Ev::AcquireFailed { error });
        }
    };
    let held = guard.held();
    // The outer path sorts first: it is the one taken under the outer hold.
    let (inner, other) = if order[0] < order[1] { (0, 1) } else { (1, 0) };
    let helds = held.helds();
    let inner_token = helds[inner].token().as_u64();
    worker.log.now(Ev::Nested {
        token,
        inner: inner_token,
    });
    let (log, heed) = (&worker.log, worker.heed_watchdog);
    let holds = [
        hold(log, heed, &helds[inner], &held, order[inner]),
        hold(log, heed, &helds[other], &held, order[other]),
    ];
    let n = worker.args.increments;
    if let Some(watchers) = granted_all(&holds[1..], false).await {
        work_all(
            &mut worker.store,
            &mut worker.rng,
            &holds,
            n,
            Duration::ZERO,
        )
        .await;
        drop(watchers);
    }
    let other_token = holds[1].token;
    worker
        .verdict_if_lost(client, &helds[other], other_token)
        .await;
    worker.log.now(Ev::Unnested { token });
    worker.release(&[other_token], guard.release()).await;
}
