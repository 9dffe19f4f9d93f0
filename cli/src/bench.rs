//! `zkfence bench`: acquire/release cycles and handoffs of zkfence, `zookeeper-client`'s own
//! `Client::lock`, and the raw ZooKeeper limits, measured in one process on one server.
//!
//! - cycle: one contender's acquire call start to its release call return;
//! - handoff: the holder's release call start to the next holder's acquire return;
//! - raw: a create(ephemeral sequential)+delete cycle (uncontended), and the notification
//!   latency, one client's delete call start to another's watch firing (contended).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use zkfence::{FencedLock, LockOptions};
use zkfence_testkit::CountingProxy;
use zookeeper_client as zk;

use crate::{EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Uncontended,
    Contended,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Impl {
    Zkfence,
    Zkclient,
    Raw,
}

impl Impl {
    fn name(self) -> &'static str {
        match self {
            Impl::Zkfence => "zkfence",
            Impl::Zkclient => "zkclient",
            Impl::Raw => "raw",
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  zkfence bench --connect 127.0.0.1:2181 --mode contended --contenders 8 --seconds 5
  zkfence bench --matrix                     # every impl and mode, on a throwaway local server
  scripts/bench                              # the same, as in the README")]
pub(crate) struct Args {
    /// ZooKeeper hosts. Required for single runs; `--matrix` starts a local server without it.
    #[arg(long)]
    connect: Option<String>,
    /// The lock path to benchmark on (each run uses a fresh path under it).
    #[arg(long, default_value = "/zkfence-bench")]
    lock: String,
    /// Contenders, each with its own session.
    #[arg(long, default_value_t = 1)]
    contenders: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    #[arg(long, value_enum, default_value = "uncontended")]
    mode: Mode,
    #[arg(long = "impl", value_enum, default_value = "zkfence")]
    implementation: Impl,
    /// Run the whole matrix (uncontended; contended with 2, 8, 32) for every impl, print ratios.
    #[arg(long)]
    matrix: bool,
    /// Measure scale instead: --waiters on one lock (requests and notifications per handoff) and
    /// --locks held by one process (memory per held lock, watchdog requests).
    #[arg(long)]
    scale: bool,
    /// With --scale: waiters queued on one lock, each with its own session.
    #[arg(long, default_value_t = 1000)]
    waiters: usize,
    /// With --scale: locks held at once by one session.
    #[arg(long, default_value_t = 10000)]
    locks: usize,
    /// With --matrix: where to write the chart.
    #[arg(long, default_value = "bench.svg")]
    chart: PathBuf,
    /// Measure the in-process queue instead: --tasks tasks of one process on one lock, sharing
    /// one FencedLock (clones: one ZooKeeper contender at a time) versus each with its own.
    #[arg(long)]
    in_process: bool,
    /// With --in-process: tasks in the process.
    #[arg(long, default_value_t = 64)]
    tasks: usize,
}

/// One run's figures, printed as one JSON line.
#[derive(Debug, Clone, Default)]
struct Report {
    implementation: &'static str,
    mode: &'static str,
    contenders: usize,
    seconds: f64,
    acquisitions: u64,
    cycle_p50_us: f64,
    cycle_p99_us: f64,
    handoff_p50_us: Option<f64>,
    handoff_p99_us: Option<f64>,
    read_p50_us: Option<f64>,
    violations: u64,
    errors: u64,
}

impl Report {
    fn acq_per_s(&self) -> f64 {
        self.acquisitions as f64 / self.seconds
    }

    fn json(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.1}"));
        let mut out = format!(
            "{{\"impl\":\"{}\",\"mode\":\"{}\",\"contenders\":{},\"seconds\":{},\"acquisitions\":{},\"acq_per_s\":{:.1},\
             \"cycle_p50_us\":{:.1},\"cycle_p99_us\":{:.1},\"handoff_p50_us\":{},\"handoff_p99_us\":{},\"violations\":{},\"errors\":{}",
            self.implementation,
            self.mode,
            self.contenders,
            self.seconds,
            self.acquisitions,
            self.acq_per_s(),
            self.cycle_p50_us,
            self.cycle_p99_us,
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            self.violations,
            self.errors
        );
        if let Some(read) = self.read_p50_us {
            let _ = write!(out, ",\"read_p50_us\":{read:.1}");
        }
        out.push('}');
        out
    }
}

fn percentile(samples: &mut [u64], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let i = ((samples.len() - 1) as f64 * p).round() as usize;
    samples[i] as f64 / 1000.0
}

pub(crate) async fn bench(args: Args) -> u8 {
    if args.matrix || args.scale || args.in_process {
        return with_server(&args).await;
    }
    let Some(hosts) = args.connect.clone() else {
        eprintln!(
            "zkfence: bench needs --connect HOSTS (or --matrix, which starts a local server)"
        );
        return EXIT_USAGE;
    };
    let run = Run {
        implementation: args.implementation,
        mode: args.mode,
        contenders: args.contenders,
        seconds: args.seconds,
        warmup: args.warmup,
    };
    match run.execute(&hosts, &args.lock).await {
        Ok(report) => {
            println!("{}", report.json());
            if report.violations > 0 {
                EXIT_FAILURE
            } else {
                0
            }
        }
        Err(err) => {
            eprintln!("zkfence: {err}");
            EXIT_UNAVAILABLE
        }
    }
}

async fn connect_raw(hosts: &str) -> Result<zk::Client, String> {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .with_fail_eagerly()
        .connect(hosts)
        .await
        .map_err(|e| format!("cannot reach ZooKeeper at {hosts}: {e}"))
}

/// One benchmark run's parameters.
#[derive(Debug, Clone, Copy)]
struct Run {
    implementation: Impl,
    mode: Mode,
    contenders: usize,
    seconds: f64,
    warmup: f64,
}

/// What the contenders of one run share.
#[derive(Debug, Default)]
struct Shared {
    holders: AtomicUsize,
    violations: AtomicU64,
    errors: AtomicU64,
    acquisitions: AtomicU64,
    measuring: AtomicBool,
    /// When the current holder started its release, for the next holder's handoff.
    release_started: Mutex<Option<Instant>>,
    cycles: Mutex<Vec<u64>>,
    handoffs: Mutex<Vec<u64>>,
    reads: Mutex<Vec<u64>>,
}

static RUN_ID: AtomicU64 = AtomicU64::new(0);

impl Run {
    async fn execute(self, hosts: &str, base: &str) -> Result<Report, String> {
        let path = format!(
            "{base}/run-{}-{}",
            std::process::id(),
            RUN_ID.fetch_add(1, Ordering::Relaxed)
        );
        let admin = connect_raw(hosts).await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        admin
            .mkdir(&path, &persistent)
            .await
            .map_err(|e| format!("cannot create {path}: {e}"))?;
        let shared = Arc::new(Shared::default());
        let start = Instant::now();
        let measure_from = start + Duration::from_secs_f64(self.warmup);
        let until = measure_from + Duration::from_secs_f64(self.seconds);
        let contenders = if self.implementation == Impl::Raw && self.mode == Mode::Contended {
            2
        } else {
            self.contenders
        };
        let mut tasks = Vec::new();
        for i in 0..contenders {
            let client = connect_raw(hosts).await?;
            let lock_path = match self.mode {
                Mode::Uncontended => format!("{path}/u{i}"),
                Mode::Contended => format!("{path}/lock"),
            };
            admin
                .mkdir(&lock_path, &persistent)
                .await
                .map_err(|e| format!("cannot create {lock_path}: {e}"))?;
            let shared = shared.clone();
            tasks.push(tokio::spawn(async move {
                match (self.implementation, self.mode) {
                    (Impl::Raw, Mode::Contended) => {
                        raw_notify(client, lock_path, i, shared, until).await
                    }
                    (Impl::Raw, Mode::Uncontended) => {
                        raw_cycle(client, lock_path, shared, until).await
                    }
                    (implementation, mode) => {
                        locker(implementation, mode, client, lock_path, shared, until).await
                    }
                }
            }));
        }
        tokio::time::sleep_until(measure_from).await;
        shared.measuring.store(true, Ordering::SeqCst);
        for task in tasks {
            let _ = task.await;
        }
        let cycles = &mut shared.cycles.lock().unwrap_or_else(|e| e.into_inner());
        let handoffs = &mut shared.handoffs.lock().unwrap_or_else(|e| e.into_inner());
        let reads = &mut shared.reads.lock().unwrap_or_else(|e| e.into_inner());
        let contended = self.mode == Mode::Contended;
        Ok(Report {
            implementation: self.implementation.name(),
            mode: if contended {
                "contended"
            } else {
                "uncontended"
            },
            contenders: self.contenders,
            seconds: self.seconds,
            acquisitions: shared.acquisitions.load(Ordering::SeqCst),
            cycle_p50_us: percentile(cycles, 0.5),
            cycle_p99_us: percentile(cycles, 0.99),
            handoff_p50_us: contended.then(|| percentile(handoffs, 0.5)),
            handoff_p99_us: contended.then(|| percentile(handoffs, 0.99)),
            read_p50_us: (!reads.is_empty()).then(|| percentile(reads, 0.5)),
            violations: shared.violations.load(Ordering::SeqCst),
            errors: shared.errors.load(Ordering::SeqCst),
        })
    }
}

fn record(into: &Mutex<Vec<u64>>, from: Instant, to: Instant) {
    into.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(to.duration_since(from).as_nanos() as u64);
}

/// A contender cycling acquire/release with zkfence or zookeeper-client's lock.
async fn locker(
    implementation: Impl,
    mode: Mode,
    client: zk::Client,
    path: String,
    shared: Arc<Shared>,
    until: Instant,
) {
    let lock = FencedLock::new(
        client.clone(),
        path.clone(),
        LockOptions::default().with_create_parents(false),
    );
    let Ok(lock) = lock else { return };
    while Instant::now() < until {
        let started = Instant::now();
        // Acquire.
        let held: Result<Held, ()> = match implementation {
            Impl::Zkfence => lock.acquire().await.map(Held::Zkfence).map_err(|_| ()),
            _ => {
                let Ok(prefix) = zk::LockPrefix::new_curator(&path, "lock-") else {
                    return;
                };
                match client.lock(prefix, b"", zk::Acls::anyone_all()).await {
                    Ok(lock_client) => {
                        let node = lock_client.lock_path().to_owned();
                        // Release below is the awaited delete; the lock client's own
                        // background delete on drop is skipped (it would be a second delete).
                        std::mem::forget(lock_client);
                        Ok(Held::Zkclient(node))
                    }
                    Err(_) => Err(()),
                }
            }
        };
        let Ok(held) = held else {
            shared.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let acquired = Instant::now();
        let measuring = shared.measuring.load(Ordering::Relaxed);
        if shared.holders.fetch_add(1, Ordering::SeqCst) != 0 && mode == Mode::Contended {
            shared.violations.fetch_add(1, Ordering::SeqCst);
        }
        if mode == Mode::Contended {
            if let Some(release_started) = shared
                .release_started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                if measuring {
                    record(&shared.handoffs, release_started, acquired);
                }
            }
        }
        shared.holders.fetch_sub(1, Ordering::SeqCst);
        let releasing = Instant::now();
        if mode == Mode::Contended {
            *shared
                .release_started
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(releasing);
        }
        let released = match held {
            Held::Zkfence(guard) => guard.release().await.is_ok(),
            Held::Zkclient(node) => client.delete(&node, None).await.is_ok(),
        };
        if !released {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        if measuring {
            shared.acquisitions.fetch_add(1, Ordering::Relaxed);
            record(&shared.cycles, started, Instant::now());
        }
    }
}

enum Held {
    Zkfence(zkfence::LockGuard),
    Zkclient(String),
}

/// The raw uncontended limit: create(ephemeral sequential) + delete, and one read round trip.
async fn raw_cycle(client: zk::Client, path: String, shared: Arc<Shared>, until: Instant) {
    let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let prefix = format!("{path}/n-");
    while Instant::now() < until {
        let started = Instant::now();
        let created = client.create(&prefix, b"", &options).await;
        let Ok((_, sequence)) = created else {
            shared.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let node = format!("{prefix}{sequence}");
        let deleted = client.delete(&node, None).await;
        let done = Instant::now();
        let read_started = Instant::now();
        let read = client.check_stat(&path).await;
        let read_done = Instant::now();
        if deleted.is_err() || read.is_err() {
            shared.errors.fetch_add(1, Ordering::Relaxed);
        }
        if shared.measuring.load(Ordering::Relaxed) {
            shared.acquisitions.fetch_add(1, Ordering::Relaxed);
            record(&shared.cycles, started, done);
            record(&shared.reads, read_started, read_done);
        }
    }
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
            let started = Instant::now();
            if client.create(&node, b"", &options).await.is_err() {
                shared.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
            // Wait until the watcher is armed (it sets `holders` to 1 once watching).
            while shared.holders.load(Ordering::SeqCst) == 0 && Instant::now() < until {
                tokio::task::yield_now().await;
            }
            *shared
                .release_started
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            if client.delete(&node, None).await.is_err() {
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
        } else {
            let watcher = match client.get_and_watch_data(&node).await {
                Ok((_, _, watcher)) => watcher,
                Err(_) => {
                    tokio::task::yield_now().await;
                    continue;
                }
            };
            shared.holders.store(1, Ordering::SeqCst);
            let event = tokio::select! {
                event = watcher.changed() => event,
                _ = tokio::time::sleep_until(until) => break,
            };
            let fired = Instant::now();
            if event.event_type == zk::EventType::NodeDeleted {
                if let Some(started) = shared
                    .release_started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take()
                {
                    if shared.measuring.load(Ordering::Relaxed) {
                        record(&shared.handoffs, started, fired);
                    }
                }
            }
            shared.holders.store(0, Ordering::SeqCst);
        }
    }
    shared.holders.store(0, Ordering::SeqCst);
}

/// Requests each impl sends per acquisition, through a counting proxy (pings excluded).
async fn requests_per_acquisition(
    hosts: &str,
    base: &str,
    implementation: Impl,
    mode: Mode,
    contenders: usize,
) -> Result<f64, String> {
    let proxy = CountingProxy::start(hosts).await;
    // No warmup: every request the run sends is divided by every acquisition it made.
    let run = Run {
        implementation,
        mode,
        contenders,
        seconds: 2.0,
        warmup: 0.0,
    };
    let report = run.execute(&proxy.addr, base).await?;
    if std::env::var_os("ZKFENCE_BENCH_OPCODES").is_some() {
        eprintln!(
            "{} {mode:?} x{contenders}: requests by opcode {:?} for {} acquisitions",
            implementation.name(),
            proxy.counts(),
            report.acquisitions
        );
    }
    Ok(proxy.total() as f64 / report.acquisitions.max(1) as f64)
}

const CONFIGS: [(Mode, usize); 4] = [
    (Mode::Uncontended, 1),
    (Mode::Contended, 2),
    (Mode::Contended, 8),
    (Mode::Contended, 32),
];
const IMPLS: [Impl; 3] = [Impl::Raw, Impl::Zkfence, Impl::Zkclient];

/// Runs the matrix or the scale measurements against `--connect`, or a throwaway local server.
async fn with_server(args: &Args) -> u8 {
    let local;
    let hosts = match &args.connect {
        Some(hosts) => hosts.clone(),
        None => {
            eprintln!("bench: starting a throwaway ZooKeeper (forceSync=no) on a loopback port...");
            local = match crate::start_local_zookeeper().await {
                Ok(zk) => zk,
                Err(code) => return code,
            };
            local.addr()
        }
    };
    let result = if args.in_process {
        in_process(args, &hosts).await
    } else if args.scale {
        scale(args, &hosts).await
    } else {
        matrix(args, &hosts).await
    };
    result.unwrap_or_else(|err| {
        eprintln!("zkfence: {err}");
        EXIT_UNAVAILABLE
    })
}

async fn matrix(args: &Args, hosts: &str) -> Result<u8, String> {
    let hosts = hosts.to_owned();
    let total = CONFIGS.len() * IMPLS.len();
    let mut reports: Vec<Report> = Vec::new();
    let mut n = 0;
    for (mode, contenders) in CONFIGS {
        // All impls back to back for each configuration, so drift hits them alike.
        for implementation in IMPLS {
            n += 1;
            eprintln!(
                "bench [{n}/{total}] {} {:?} x{contenders} ...",
                implementation.name(),
                mode
            );
            let run = Run {
                implementation,
                mode,
                contenders,
                seconds: args.seconds,
                warmup: args.warmup,
            };
            let report = run.execute(&hosts, &args.lock).await?;
            println!("{}", report.json());
            reports.push(report);
        }
    }
    eprintln!("bench: counting server requests per acquisition through a proxy ...");
    let mut requests = Vec::new();
    for (mode, contenders) in [(Mode::Uncontended, 1), (Mode::Contended, 8)] {
        for implementation in [Impl::Zkfence, Impl::Zkclient] {
            match requests_per_acquisition(&hosts, &args.lock, implementation, mode, contenders)
                .await
            {
                Ok(r) => requests.push((implementation, mode, contenders, r)),
                Err(err) => eprintln!("zkfence: {err}"),
            }
        }
    }
    println!();
    print!("{}", table(&reports, &requests));
    match std::fs::write(&args.chart, chart(&reports)) {
        Ok(()) => println!("\nchart: {}", args.chart.display()),
        Err(err) => eprintln!("zkfence: cannot write {}: {err}", args.chart.display()),
    }
    Ok(if reports.iter().any(|r| r.violations > 0) {
        EXIT_FAILURE
    } else {
        0
    })
}

/// Resident memory of this process, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64
}

/// 1. `--locks` locks held at once by one session: memory per held lock, tokio tasks, and the
///    watchdog's requests per second once everything is held.
/// 2. `--waiters` contenders queued on one lock, then released one after the other: server
///    requests and watch notifications per handoff, through the counting proxy.
async fn scale(args: &Args, hosts: &str) -> Result<u8, String> {
    let proxy = CountingProxy::start(hosts).await;
    let base = format!("{}/scale-{}", args.lock, std::process::id());
    let admin = connect_raw(hosts).await?;
    let lock_path = format!("{base}/queue");
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin
        .mkdir(&lock_path, &persistent)
        .await
        .map_err(|e| format!("cannot create {lock_path}: {e}"))?;

    eprintln!("bench: holding {} locks on one session ...", args.locks);
    let timeout = Duration::from_secs(3);
    let client = zk::Client::connector()
        .with_session_timeout(timeout)
        .connect(&proxy.addr)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    // Warm the allocator and the session's watchdog, so the baseline is not the cold process.
    for i in 0..100 {
        let lock = FencedLock::new(
            client.clone(),
            format!("{base}/warm/l{i}"),
            LockOptions::default(),
        )
        .map_err(|e| e.to_string())?;
        lock.acquire()
            .await
            .map_err(|e| e.to_string())?
            .release()
            .await
            .map_err(|e| e.to_string())?;
    }
    let tasks_before = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let rss_before = rss_bytes();
    let mut guards = Vec::with_capacity(args.locks);
    for chunk in (0..args.locks).collect::<Vec<_>>().chunks(64) {
        let mut pending = Vec::new();
        for i in chunk {
            let lock = FencedLock::new(
                client.clone(),
                format!("{base}/held/l{i}"),
                LockOptions::default(),
            )
            .map_err(|e| e.to_string())?;
            pending.push(tokio::spawn(async move { lock.acquire().await }));
        }
        for task in pending {
            guards.push(
                task.await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?,
            );
        }
    }
    // Every guard's node watch armed (one getData each) before anything is measured.
    let armed_by = Instant::now() + Duration::from_secs(120);
    while proxy.counts().get(&4).copied().unwrap_or(0) < args.locks as u64
        && Instant::now() < armed_by
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_bytes();
    let tasks_after = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let requests = proxy.total();
    let opcodes_before = proxy.counts();
    let window = timeout * 2;
    tokio::time::sleep(window).await;
    if std::env::var_os("ZKFENCE_BENCH_OPCODES").is_some() {
        eprintln!(
            "held-locks window: requests by opcode before {opcodes_before:?} after {:?}",
            proxy.counts()
        );
    }
    let watchdog_rate = (proxy.total() - requests) as f64 / window.as_secs_f64();
    let all_held = guards.iter().all(|g| g.check().is_ok());
    println!(
        "{{\"scale\":\"held_locks\",\"locks\":{},\"rss_bytes_per_lock\":{},\"tasks_before\":{tasks_before},\"tasks_after\":{tasks_after},\"watchdog_requests_per_s\":{watchdog_rate:.2},\"session_timeout_ms\":{},\"all_held\":{all_held}}}",
        args.locks,
        rss_after.saturating_sub(rss_before) / args.locks.max(1) as u64,
        timeout.as_millis()
    );
    for guard in guards {
        let _ = guard.release().await;
    }

    eprintln!("bench: queueing {} waiters on one lock ...", args.waiters);
    let holder = FencedLock::new(
        connect_raw(&proxy.addr).await?,
        lock_path.clone(),
        LockOptions::default(),
    )
    .map_err(|e| e.to_string())?;
    let guard = holder.acquire().await.map_err(|e| e.to_string())?;
    let mut tasks = Vec::new();
    for _ in 0..args.waiters {
        // Long sessions keep the watchdogs' time-based probes (2 requests per session per T/3)
        // out of the per-handoff count; their cost is measured with the held locks above.
        let client = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(&proxy.addr)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let lock = FencedLock::new(client, lock_path.clone(), LockOptions::default())
            .map_err(|e| e.to_string())?;
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await?;
            guard.release().await?;
            Ok::<_, zkfence::Error>(lock) // keep the session until all are done
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while admin
        .list_children(&lock_path)
        .await
        .map(|c| c.len())
        .unwrap_or(0)
        < args.waiters + 1
    {
        if Instant::now() > deadline {
            return Err("the waiters did not all queue within 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // let every waiter's watches land
    let (requests, notifications) = (proxy.total(), proxy.notifications());
    let started = Instant::now();
    guard.release().await.map_err(|e| e.to_string())?;
    let mut sessions = Vec::new();
    for task in tasks {
        sessions.push(
            task.await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?,
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    let handoffs = args.waiters as f64;
    println!(
        "{{\"scale\":\"waiters\",\"waiters\":{},\"seconds\":{elapsed:.3},\"handoffs_per_s\":{:.1},\"requests_per_handoff\":{:.2},\"notifications_per_handoff\":{:.2}}}",
        args.waiters,
        handoffs / elapsed,
        (proxy.total() - requests) as f64 / handoffs,
        (proxy.notifications() - notifications) as f64 / handoffs,
    );
    drop(sessions);

    Ok(0)
}

fn find(
    reports: &[Report],
    implementation: Impl,
    mode: Mode,
    contenders: usize,
) -> Option<&Report> {
    let mode = if mode == Mode::Contended {
        "contended"
    } else {
        "uncontended"
    };
    reports.iter().find(|r| {
        r.implementation == implementation.name() && r.mode == mode && r.contenders == contenders
    })
}

fn table(reports: &[Report], requests: &[(Impl, Mode, usize, f64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| run | zkfence cycle p50 | / zkclient | / raw create+delete | zkfence handoff p50 | / zkclient | / raw notification | acq/s zkfence / zkclient | violations |");
    let _ = writeln!(
        out,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let raw_cycle = find(reports, Impl::Raw, Mode::Uncontended, 1).map(|r| r.cycle_p50_us);
    for (mode, contenders) in CONFIGS {
        let (Some(ours), Some(theirs)) = (
            find(reports, Impl::Zkfence, mode, contenders),
            find(reports, Impl::Zkclient, mode, contenders),
        ) else {
            continue;
        };
        let raw = find(reports, Impl::Raw, mode, contenders);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        };
        let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.0} µs"));
        let name = if mode == Mode::Contended {
            format!("contended N={contenders}")
        } else {
            "uncontended".to_owned()
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
            us(Some(ours.cycle_p50_us)),
            ratio(Some(ours.cycle_p50_us), Some(theirs.cycle_p50_us)),
            if mode == Mode::Uncontended {
                ratio(Some(ours.cycle_p50_us), raw_cycle)
            } else {
                "-".to_owned()
            },
            us(ours.handoff_p50_us),
            ratio(ours.handoff_p50_us, theirs.handoff_p50_us),
            ratio(ours.handoff_p50_us, raw.and_then(|r| r.handoff_p50_us)),
            ratio(Some(ours.acq_per_s()), Some(theirs.acq_per_s())),
            ours.violations + theirs.violations,
        );
    }
    if let Some(read) = find(reports, Impl::Raw, Mode::Uncontended, 1).and_then(|r| r.read_p50_us) {
        let _ = writeln!(
            out,
            "\nraw limits in this run: create+delete p50 {:.0} µs, one read p50 {read:.0} µs",
            raw_cycle.unwrap_or(0.0)
        );
    }
    if !requests.is_empty() {
        let _ = writeln!(
            out,
            "\nserver requests per acquisition (counting proxy, pings excluded):"
        );
        for (implementation, mode, contenders, r) in requests {
            let _ = writeln!(
                out,
                "  {:<8} {:?} x{contenders}: {r:.2}",
                implementation.name(),
                mode
            );
        }
    }
    out
}

/// A grouped bar chart (SVG) of cycle and handoff p50 per configuration and impl.
fn chart(reports: &[Report]) -> String {
    let colors = [
        ("raw", "#999999"),
        ("zkfence", "#2b7bb9"),
        ("zkclient", "#e07b39"),
    ];
    let mut bars: Vec<(String, &'static str, f64)> = Vec::new();
    for (mode, contenders) in CONFIGS {
        let metric = if mode == Mode::Contended {
            "handoff"
        } else {
            "cycle"
        };
        let label = if mode == Mode::Contended {
            format!("handoff N={contenders}")
        } else {
            "uncontended cycle".to_owned()
        };
        for implementation in IMPLS {
            if let Some(r) = find(reports, implementation, mode, contenders) {
                let value = if metric == "handoff" {
                    r.handoff_p50_us.unwrap_or(0.0)
                } else {
                    r.cycle_p50_us
                };
                bars.push((label.clone(), implementation.name(), value));
            }
        }
    }
    let max = bars.iter().map(|b| b.2).fold(1.0, f64::max);
    let (width, height, left, bottom) = (760.0, 370.0, 40.0, 60.0);
    let plot_h = height - bottom - 55.0;
    let group_w = (width - left - 20.0) / CONFIGS.len() as f64;
    let bar_w = group_w / 4.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"16\" font-size=\"14\">p50 latency in µs, lower is better</text>\n\
         <text x=\"{left}\" y=\"32\" font-size=\"11\" fill=\"#555\">uncontended: acquire to release return (raw: create+delete); contended: release to next acquire (raw: delete to watch)</text>\n"
    );
    for (i, (label, implementation, value)) in bars.iter().enumerate() {
        let group = i / IMPLS.len();
        let k = i % IMPLS.len();
        let x = left + group as f64 * group_w + (k as f64 + 0.5) * bar_w;
        let h = value / max * plot_h;
        let y = height - bottom - h;
        let color = colors
            .iter()
            .find(|c| c.0 == *implementation)
            .map_or("#000", |c| c.1);
        let _ = writeln!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\"/>",
            bar_w * 0.9
        );
        let _ = writeln!(svg, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{value:.0}</text>", x + bar_w * 0.45, y - 3.0);
        if k == 0 {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
                left + group as f64 * group_w + group_w / 2.0,
                height - bottom + 18.0
            );
        }
    }
    for (i, (name, color)) in colors.iter().enumerate() {
        let x = left + i as f64 * 110.0;
        let _ = writeln!(svg, "<rect x=\"{x}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{name}</text>", height - 24.0, x + 16.0, height - 14.0);
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        height - bottom,
        width - 20.0,
        height - bottom
    );
    svg.push_str("</svg>\n");
    svg
}

/// One side of the in-process comparison.
#[derive(Debug, Default)]
struct InProcess {
    acquisitions: u64,
    seconds: f64,
    creates: u64,
    requests: u64,
    max_nodes: usize,
}

/// `--tasks` tasks of one process on one lock and one session: sharing one `FencedLock`
/// (clones queue in process; one node at a time) versus one `FencedLock` each (one node each).
async fn in_process(args: &Args, hosts: &str) -> Result<u8, String> {
    let server = hosts.split(',').next().unwrap_or(hosts).to_owned();
    let admin = connect_raw(&server).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match admin.create(&args.lock, &[], &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(err) => return Err(format!("create {}: {err}", args.lock)),
    }
    let mut sides = Vec::new();
    for shared in [true, false] {
        let proxy = CountingProxy::start(&server).await;
        let client = connect_raw(&proxy.addr).await?;
        let path = format!("{}/in-process-{shared}-{}", args.lock, std::process::id());
        let one = FencedLock::new(client.clone(), path.clone(), LockOptions::default())
            .map_err(|e| e.to_string())?;
        let counting = Arc::new(AtomicBool::new(false));
        let acquisitions = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let measure_from = start + Duration::from_secs_f64(args.warmup);
        let until = measure_from + Duration::from_secs_f64(args.seconds);
        let mut tasks = Vec::new();
        for _ in 0..args.tasks {
            let lock = if shared {
                one.clone()
            } else {
                FencedLock::new(client.clone(), path.clone(), LockOptions::default())
                    .map_err(|e| e.to_string())?
            };
            let (counting, acquisitions) = (counting.clone(), acquisitions.clone());
            tasks.push(tokio::spawn(async move {
                while Instant::now() < until {
                    let Ok(guard) = lock.acquire().await else {
                        continue;
                    };
                    if counting.load(Ordering::Relaxed) {
                        acquisitions.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = guard.release().await;
                }
            }));
        }
        tokio::time::sleep_until(measure_from).await;
        let (creates0, requests0) = (proxy.counts().get(&15).copied().unwrap_or(0), proxy.total());
        counting.store(true, Ordering::Relaxed);
        let mut max_nodes = 0;
        while Instant::now() < until {
            if let Ok(children) = admin.list_children(&path).await {
                max_nodes = max_nodes.max(children.len());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        counting.store(false, Ordering::Relaxed);
        let side = InProcess {
            acquisitions: acquisitions.load(Ordering::Relaxed),
            seconds: args.seconds,
            creates: proxy.counts().get(&15).copied().unwrap_or(0) - creates0,
            requests: proxy.total() - requests0,
            max_nodes,
        };
        for task in tasks {
            let _ = task.await;
        }
        let per = |n: u64| n as f64 / side.acquisitions.max(1) as f64;
        println!(
            "{{\"mode\":\"in-process\",\"shared_lock\":{shared},\"tasks\":{},\"seconds\":{},\"acquisitions\":{},\"acq_per_s\":{:.1},\"nodes_created_per_acq\":{:.3},\"requests_per_acq\":{:.2},\"max_queue_nodes\":{}}}",
            args.tasks,
            side.seconds,
            side.acquisitions,
            side.acquisitions as f64 / side.seconds,
            per(side.creates),
            per(side.requests),
            side.max_nodes
        );
        sides.push(side);
    }
    let (shared, separate) = (&sides[0], &sides[1]);
    let rate = |s: &InProcess| s.acquisitions as f64 / s.seconds;
    println!();
    println!("| {} tasks, one session | acq/s | nodes created / acq | requests / acq | most nodes queued |", args.tasks);
    println!("| --- | --- | --- | --- | --- |");
    for (name, side) in [
        ("one shared FencedLock (in-process queue)", shared),
        ("a FencedLock per task", separate),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} | {} |",
            rate(side),
            side.creates as f64 / side.acquisitions.max(1) as f64,
            side.requests as f64 / side.acquisitions.max(1) as f64,
            side.max_nodes
        );
    }
    println!(
        "in-process queue / separate contenders: throughput {:.2}x, queue nodes {} vs {}",
        rate(shared) / rate(separate).max(f64::MIN_POSITIVE),
        shared.max_nodes,
        separate.max_nodes
    );
    Ok(0)
}
