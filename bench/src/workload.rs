//! The bench's workloads: each implementation's acquire/release cycle and handoff drivers
//! (zkfence, `zookeeper-client`'s lock, the raw ZooKeeper limits) and the in-process throughput
//! sides. The scale measurements are in `scale`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zkfence::Acquire;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use zkfence::{FencedLock, LockGuard, LockOptions};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

use super::contention::{self, enter, leave, locked, record, Shared};
use super::options::{Args, Impl, Mode, Run};
use super::report::Report;
use super::stats::writes_per_acquisition;
use crate::redis_lock as redis;

/// ZooKeeper's create2 opcode, as the counting proxy keys its counts.
const OP_CREATE2: i32 = 15;

/// A session to `hosts` for one contender (or the bench's admin work): 10 s, failing eagerly.
pub(super) async fn connect_raw(hosts: &str) -> Result<zk::Client, String> {
    zkfence::Connect::new(hosts)
        .with_session_timeout(Duration::from_secs(10))
        .with_fail_eagerly()
        .connect()
        .await
        .map_err(|e| format!("cannot reach ZooKeeper at {hosts}: {e}"))
}

static RUN_ID: AtomicU64 = AtomicU64::new(0);

impl Run {
    /// Runs the contenders on a fresh path under `base` through warmup and the measured
    /// seconds, and summarises what they measured.
    pub(super) async fn execute(self, hosts: &str, base: &str) -> Result<Report, String> {
        if let Some(waiting) = self.implementation.redis_waiting() {
            let addr = (self.redis).ok_or(
                "the Redis peers need a Redis server: --redis HOST:PORT (--rounds starts one)",
            )?;
            return redis_run(self, waiting, addr.to_string()).await;
        }
        let path = format!(
            "{base}/run-{}-{}",
            std::process::id(),
            RUN_ID.fetch_add(1, Ordering::Relaxed)
        );
        let admin = connect_raw(hosts).await?;
        let probe = format!("{path}/zxid");
        admin
            .mkdir(&probe, &persistent())
            .await
            .map_err(|e| format!("cannot create {probe}: {e}"))?;
        if self.implementation == Impl::Curator {
            return super::curator::run(self, hosts, &path).await;
        }
        let shared = Arc::new(Shared::default());
        let start = Instant::now();
        let measure_from = start + Duration::from_secs_f64(self.warmup);
        let until = measure_from + Duration::from_secs_f64(self.seconds);
        let tasks = self
            .spawn_contenders(hosts, &admin, &path, &shared, until)
            .await?;
        tokio::time::sleep_until(measure_from).await;
        let first = zxid(&admin, &probe).await?;
        let cpu = contention::measure(&shared, until, self.server_pid).await;
        let last = zxid(&admin, &probe).await?;
        for task in tasks {
            let _ = task.await;
        }
        let mut report = contention::report(self, &shared, cpu);
        report.writes_per_acq = Some(writes_per_acquisition(first, last, report.acquisitions));
        Ok(report)
    }

    /// The contenders this run starts: the raw notification latency takes exactly two.
    fn contender_count(self) -> usize {
        if self.implementation == Impl::Raw && self.mode == Mode::Contended {
            2
        } else {
            self.contenders
        }
    }

    /// Connects each contender, creates its lock path and starts its driver.
    async fn spawn_contenders(
        self,
        hosts: &str,
        admin: &zk::Client,
        path: &str,
        shared: &Arc<Shared>,
        until: Instant,
    ) -> Result<Vec<JoinHandle<()>>, String> {
        let mut tasks = Vec::new();
        for i in 0..self.contender_count() {
            let client = connect_raw(hosts).await?;
            let lock_path = match self.mode {
                Mode::Uncontended => format!("{path}/u{i}"),
                Mode::Contended => format!("{path}/lock"),
            };
            admin
                .mkdir(&lock_path, &persistent())
                .await
                .map_err(|e| format!("cannot create {lock_path}: {e}"))?;
            tasks.push(tokio::spawn(self.drive(
                client,
                lock_path,
                i,
                shared.clone(),
                until,
            )));
        }
        Ok(tasks)
    }

    /// Contender `i`'s driver for this run's implementation and mode.
    async fn drive(
        self,
        client: zk::Client,
        lock_path: String,
        i: usize,
        shared: Arc<Shared>,
        until: Instant,
    ) {
        match (self.implementation, self.mode) {
            (Impl::Raw, Mode::Contended) => raw_notify(client, lock_path, i, shared, until).await,
            (Impl::Raw, Mode::Uncontended) => raw_cycle(client, lock_path, shared, until).await,
            (implementation, _) => {
                locker(self, implementation, client, lock_path, shared, until).await
            }
        }
    }
}

/// The server's latest zxid, as the transaction of a setData on `probe` (a node of the run's
/// own) numbers it.
async fn zxid(admin: &zk::Client, probe: &str) -> Result<i64, String> {
    admin
        .set_data(probe, b"", None)
        .await
        .map(|stat| stat.mzxid)
        .map_err(|e| format!("cannot write {probe}: {e}"))
}

/// Persistent nodes anyone may use: the bench's run and lock paths.
fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// A contender cycling acquire/release with zkfence or zookeeper-client's lock.
async fn locker(
    run: Run,
    implementation: Impl,
    client: zk::Client,
    path: String,
    shared: Arc<Shared>,
    until: Instant,
) {
    let lock = match implementation {
        Impl::Zkfence => {
            let options = LockOptions::default().with_create_parents(false);
            match FencedLock::new(client, path, options) {
                Ok(lock) => Lock::Zkfence(lock),
                Err(_) => return,
            }
        }
        _ => Lock::Zkclient { client, path },
    };
    cycle(run, lock, shared, until).await;
}

/// Acquires and releases `lock` until `until`, recording each measured cycle and handoff, and
/// then this contender's share of the acquisitions.
async fn cycle(run: Run, mut lock: Lock, shared: Arc<Shared>, until: Instant) {
    let mut mine = 0;
    while Instant::now() < until {
        let started = Instant::now();
        let held = match lock.acquire().await {
            Attempt::Held(held) => held,
            Attempt::Failed => {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Attempt::Unusable => break,
        };
        let acquired = Instant::now();
        let measuring = shared.measuring.load(Ordering::Relaxed);
        enter(run.mode, &shared, acquired, measuring);
        if !run.hold.is_zero() {
            tokio::time::sleep(run.hold).await;
        }
        leave(run.mode, &shared);
        if !lock.release(held).await {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        if measuring {
            mine += 1;
            shared.acquisitions.fetch_add(1, Ordering::Relaxed);
            record(&shared.cycles, started, Instant::now());
        }
    }
    locked(&shared.shares).push(mine);
}

/// One contender's lock.
enum Lock {
    Zkfence(FencedLock),
    /// `zookeeper-client`'s `Client::lock` on `path`.
    Zkclient {
        client: zk::Client,
        path: String,
    },
    Redis(redis::Contender),
}

/// What one acquire call gave.
enum Attempt {
    Held(Held),
    Failed,
    /// The lock path makes no `zookeeper-client` lock prefix: the contender stops.
    Unusable,
}

enum Held {
    Zkfence(LockGuard),
    Zkclient(String),
    /// The value our Redis lock holds.
    Redis(Vec<u8>),
}

impl Lock {
    /// One acquire call.
    async fn acquire(&mut self) -> Attempt {
        match self {
            Lock::Zkfence(lock) => match lock.acquire().await {
                Ok(guard) => Attempt::Held(Held::Zkfence(guard)),
                Err(_) => Attempt::Failed,
            },
            Lock::Zkclient { client, path } => zkclient_acquire(client, path).await,
            Lock::Redis(contender) => match contender.acquire().await {
                Ok(value) => Attempt::Held(Held::Redis(value)),
                Err(_) => Attempt::Failed,
            },
        }
    }

    /// The release, awaited; whether it succeeded.
    async fn release(&mut self, held: Held) -> bool {
        match (self, held) {
            (_, Held::Zkfence(guard)) => guard.release().await.is_ok(),
            (Lock::Zkclient { client, .. }, Held::Zkclient(node)) => {
                client.delete(&node, None).await.is_ok()
            }
            (Lock::Redis(contender), Held::Redis(value)) => {
                contender.release(&value).await.unwrap_or(false)
            }
            _ => false,
        }
    }
}

/// One acquire call with zookeeper-client's lock.
async fn zkclient_acquire(client: &zk::Client, path: &str) -> Attempt {
    let Ok(prefix) = zk::LockPrefix::new_curator(path, "lock-") else {
        return Attempt::Unusable;
    };
    match client.lock(prefix, b"", zk::Acls::anyone_all()).await {
        Ok(lock_client) => {
            let node = lock_client.lock_path().to_owned();
            // Release below is the awaited delete; the lock client's own
            // background delete on drop is skipped (it would be a second delete).
            std::mem::forget(lock_client);
            Attempt::Held(Held::Zkclient(node))
        }
        Err(_) => Attempt::Failed,
    }
}

/// The Redis peers' runs: each contender with connections of its own to the Redis server at
/// `addr`, on one key (contended) or a key each; then the report, as the ZooKeeper runs make
/// it (no server writes to count).
async fn redis_run(run: Run, waiting: redis::Waiting, addr: String) -> Result<Report, String> {
    let id = RUN_ID.fetch_add(1, Ordering::Relaxed);
    let shared = Arc::new(Shared::default());
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(run.warmup);
    let until = measure_from + Duration::from_secs_f64(run.seconds);
    let mut tasks = Vec::new();
    for i in 0..run.contenders {
        let key = match run.mode {
            Mode::Uncontended => format!("zkfence-bench:{}:{id}:u{i}", std::process::id()),
            Mode::Contended => format!("zkfence-bench:{}:{id}:lock", std::process::id()),
        };
        let contender = redis::Contender::connect(&addr, &key, waiting, redis::TTL)
            .await
            .map_err(|e| format!("cannot reach Redis at {addr}: {e}"))?;
        tasks.push(tokio::spawn(cycle(
            run,
            Lock::Redis(contender),
            shared.clone(),
            until,
        )));
    }
    tokio::time::sleep_until(measure_from).await;
    let cpu = contention::measure(&shared, until, run.server_pid).await;
    for task in tasks {
        let _ = task.await;
    }
    Ok(contention::report(run, &shared, cpu))
}

/// The raw uncontended limits: create(ephemeral sequential) + delete; one read round trip; and
/// the least a lock that learns its place in one round trip can do, a create with the
/// children listing pipelined behind it + delete.
async fn raw_cycle(client: zk::Client, path: String, shared: Arc<Shared>, until: Instant) {
    let prefix = format!("{path}/n-");
    while Instant::now() < until {
        let started = Instant::now();
        let cycle = raw_create_delete(&client, &path, &prefix, false).await;
        let done = Instant::now();
        let read = client.check_stat(&path).await;
        let read_done = Instant::now();
        let listed = raw_create_delete(&client, &path, &prefix, true).await;
        let listed_done = Instant::now();
        if !cycle || read.is_err() || !listed {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        if shared.measuring.load(Ordering::Relaxed) {
            shared.acquisitions.fetch_add(1, Ordering::Relaxed);
            record(&shared.cycles, started, done);
            record(&shared.reads, done, read_done);
            record(&shared.listed_cycles, read_done, listed_done);
        }
    }
}

/// One raw create + delete under `prefix`, with the listing of `path` pipelined behind the
/// create when `listing`; whether every request succeeded.
async fn raw_create_delete(client: &zk::Client, path: &str, prefix: &str, listing: bool) -> bool {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let create = client.create(prefix, b"", &options);
    let list = listing.then(|| client.list_children(path));
    let Ok((_, sequence)) = create.await else {
        return false;
    };
    let listed = match list {
        Some(list) => list.await.is_ok(),
        None => true,
    };
    let deleted = client.delete(&format!("{prefix}{sequence}"), None).await;
    listed && deleted.is_ok()
}

/// The raw notification latency: contender 0 creates and deletes a node, contender 1 watches
/// it; from the delete call's start to the watch firing.
async fn raw_notify(
    client: zk::Client,
    path: String,
    role: usize,
    shared: Arc<Shared>,
    until: Instant,
) {
    let node = format!("{path}/watched");
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    // Rendezvous through the shared state: 0 creates, 1 watches, 0 deletes, 1 records.
    while Instant::now() < until {
        if role == 0 {
            create_and_delete(&client, &node, &options, &shared, until).await;
        } else if !watch_deletion(&client, &node, &shared, until).await {
            break;
        }
    }
    shared.holders.store(0, Ordering::SeqCst);
}

/// Contender 0's round of the notification rendezvous: create the node, wait for the watcher,
/// delete it, wait for the watcher to record the notification.
async fn create_and_delete(
    client: &zk::Client,
    node: &str,
    options: &zk::CreateOptions<'_>,
    shared: &Shared,
    until: Instant,
) {
    let started = Instant::now();
    if client.create(node, b"", options).await.is_err() {
        shared.errors.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1)).await;
        return;
    }
    // Wait until the watcher is armed (it sets `holders` to 1 once watching).
    while shared.holders.load(Ordering::SeqCst) == 0 && Instant::now() < until {
        tokio::task::yield_now().await;
    }
    *locked(&shared.release_started) = Some(Instant::now());
    if client.delete(node, None).await.is_err() {
        shared.errors.fetch_add(1, Ordering::Relaxed);
    }
    // Wait until the watcher has recorded the notification.
    while shared.holders.load(Ordering::SeqCst) != 0 && Instant::now() < until {
        tokio::task::yield_now().await;
    }
    if shared.measuring.load(Ordering::Relaxed) {
        shared.acquisitions.fetch_add(1, Ordering::Relaxed);
        record(&shared.cycles, started, Instant::now());
    }
}

/// Contender 1's round of the notification rendezvous: watch the node and record the delay from
/// the delete call's start to the deletion's notification. False once the run is over.
async fn watch_deletion(client: &zk::Client, node: &str, shared: &Shared, until: Instant) -> bool {
    let watcher = match client.get_and_watch_data(node).await {
        Ok((_, _, watcher)) => watcher,
        Err(_) => {
            tokio::task::yield_now().await;
            return true;
        }
    };
    shared.holders.store(1, Ordering::SeqCst);
    let event = tokio::select! {
        event = watcher.changed() => event,
        _ = tokio::time::sleep_until(until) => return false,
    };
    let fired = Instant::now();
    if event.event_type == zk::EventType::NodeDeleted {
        if let Some(started) = locked(&shared.release_started).take() {
            if shared.measuring.load(Ordering::Relaxed) {
                record(&shared.handoffs, started, fired);
            }
        }
    }
    shared.holders.store(0, Ordering::SeqCst);
    true
}

/// One side of the in-process comparison.
#[derive(Debug, Default)]
pub(super) struct InProcess {
    /// Acquisitions in the measured seconds, all tasks together.
    pub(super) acquisitions: u64,
    /// Measured seconds.
    pub(super) seconds: f64,
    /// Nodes created (create2 requests) in the measured seconds.
    pub(super) creates: u64,
    /// Server requests in the measured seconds (pings excluded).
    pub(super) requests: u64,
    /// The most nodes seen queued on the lock at once.
    pub(super) max_nodes: usize,
}

/// The in-process tasks' acquisitions, counted while `counting` is set.
#[derive(Debug, Default)]
struct Tally {
    counting: AtomicBool,
    acquisitions: AtomicU64,
}

/// One side of `--in-process`: `--tasks` tasks on one lock and one session (through a counting
/// proxy to `server`), sharing one `FencedLock` if `shared`, else one `FencedLock` each.
pub(super) async fn in_process_side(
    args: &Args,
    server: &str,
    admin: &zk::Client,
    shared: bool,
) -> Result<InProcess, String> {
    let proxy = CountingProxy::start(server).await;
    let client = connect_raw(&proxy.addr).await?;
    let path = format!("{}/in-process-{shared}-{}", args.lock, std::process::id());
    let one = FencedLock::new(client.clone(), path.clone(), LockOptions::default())
        .map_err(|e| e.to_string())?;
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let until = measure_from + Duration::from_secs_f64(args.seconds());
    let mut tasks = Vec::new();
    for _ in 0..args.tasks {
        let lock = if shared {
            one.clone()
        } else {
            FencedLock::new(client.clone(), path.clone(), LockOptions::default())
                .map_err(|e| e.to_string())?
        };
        tasks.push(tokio::spawn(cycle_in_process(lock, tally.clone(), until)));
    }
    tokio::time::sleep_until(measure_from).await;
    let (creates0, requests0) = (count(&proxy, OP_CREATE2), proxy.total());
    tally.counting.store(true, Ordering::Relaxed);
    let max_nodes = most_queued(admin, &path, until).await;
    tally.counting.store(false, Ordering::Relaxed);
    let side = InProcess {
        acquisitions: tally.acquisitions.load(Ordering::Relaxed),
        seconds: args.seconds(),
        creates: count(&proxy, OP_CREATE2) - creates0,
        requests: proxy.total() - requests0,
        max_nodes,
    };
    for task in tasks {
        let _ = task.await;
    }
    Ok(side)
}

/// The requests with `opcode` the proxy has passed on so far.
fn count(proxy: &CountingProxy, opcode: i32) -> u64 {
    proxy.counts().get(&opcode).copied().unwrap_or(0)
}

/// One in-process task: acquire and release until `until`, counting acquisitions.
async fn cycle_in_process(lock: FencedLock, tally: Arc<Tally>, until: Instant) {
    while Instant::now() < until {
        let Ok(guard) = lock.acquire().await else {
            continue;
        };
        if tally.counting.load(Ordering::Relaxed) {
            tally.acquisitions.fetch_add(1, Ordering::Relaxed);
        }
        let _ = guard.release().await;
    }
}

/// The most nodes queued under `path`, sampled every 10 ms until `until`.
async fn most_queued(admin: &zk::Client, path: &str, until: Instant) -> usize {
    let mut max_nodes = 0;
    while Instant::now() < until {
        if let Ok(children) = admin.list_children(path).await {
            max_nodes = max_nodes.max(children.len());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    max_nodes
}
