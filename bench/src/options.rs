//! What the bench can be asked to measure: its command line ([`Args`]), the implementations
//! ([`Impl`]) and modes ([`Mode`]), the matrix's configurations, and one run's parameters
//! ([`Run`], which the workloads and the Curator driver execute).

use std::path::PathBuf;
use std::time::Duration;

/// One lock path for all contenders (contended), or one each (uncontended).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Uncontended,
    Contended,
}

impl Mode {
    /// The mode as the reports name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Uncontended => "uncontended",
            Mode::Contended => "contended",
        }
    }
}

/// What `--scale` measures (`all`: everything).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScaleWhat {
    /// Locks held at once by one session (or --hold-sessions).
    Holds,
    /// Waiters on one lock, each with its own session.
    Waiters,
    /// A semaphore's contenders against Curator's `InterProcessSemaphoreV2`.
    Semaphore,
    /// Readers behind writers against Curator's `InterProcessReadWriteLock`.
    Rwlock,
    /// An election's observers against watchers of Curator's `LeaderLatch`.
    Election,
    /// Every one of them.
    All,
}

/// What is measured: a lock, or the raw ZooKeeper limits.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Impl {
    Zkfence,
    Zkclient,
    /// Apache Curator's `InterProcessMutex`, in a JVM (Debian's jars, compiled at run time).
    Curator,
    /// A Redis lock (`SET NX PX`, compare-and-delete) whose waiters retry after 50–250 ms, as
    /// go-redsync's do.
    RedisRetry,
    /// A Redis lock whose waiters subscribe to the release's message, as Redisson's do.
    RedisPubsub,
    Raw,
}

impl Impl {
    /// The implementation as the reports name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Impl::Zkfence => "zkfence",
            Impl::Zkclient => "zkclient",
            Impl::Curator => "curator",
            Impl::RedisRetry => "redis-retry",
            Impl::RedisPubsub => "redis-pubsub",
            Impl::Raw => "raw",
        }
    }

    /// How a Redis peer's waiters wait; `None` for the ZooKeeper ones.
    pub(super) fn redis_waiting(self) -> Option<crate::redis_lock::Waiting> {
        match self {
            Impl::RedisRetry => Some(crate::redis_lock::Waiting::Retry),
            Impl::RedisPubsub => Some(crate::redis_lock::Waiting::Pubsub),
            _ => None,
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  zkfence-bench --connect 127.0.0.1:2181 --mode contended --contenders 8 --seconds 5
  zkfence-bench --matrix                     # every impl and mode, on a throwaway local server
  zkfence-bench --rounds 5                   # zkfence and its peers in turns, ratios with their spread
  zkfence-bench --rounds 3 --pin-server      # the same with the server on a CPU, the clients on the rest
  zkfence-bench --failover --rounds 5        # leader failover (kill -9, SIGSTOP) vs Curator's LeaderLatch
  zkfence-bench --fences --rounds 5          # fenced writes vs unfenced ones: PostgreSQL, ZooKeeper
  zkfence-bench --scale --rounds 2           # holds, waiters, semaphore, rwlock, election at scale
  zkfence-bench --scale --scale-what holds --locks 100000 --hold-sessions 10
  scripts/bench                              # the same, as in docs/performance.md
  scripts/bench-scale                        # the scale bench, as in docs/performance.md")]
pub(crate) struct Args {
    /// ZooKeeper hosts. Required for single runs; `--matrix` starts a local server without it.
    #[arg(long, env = "ZKFENCE_BENCH_CONNECT")]
    pub(super) connect: Option<String>,
    /// The lock path to benchmark on (each run uses a fresh path under it).
    #[arg(long, default_value = "/zkfence-bench", env = "ZKFENCE_BENCH_LOCK")]
    pub(super) lock: String,
    /// Contenders, each with its own session.
    #[arg(long, default_value_t = 1, env = "ZKFENCE_BENCH_CONTENDERS")]
    pub(super) contenders: usize,
    /// Measured seconds (5 by default; with --fences, per variant and round, 3 by default).
    #[arg(long, value_name = "S", env = "ZKFENCE_BENCH_SECONDS")]
    pub(super) seconds: Option<f64>,
    /// Seconds run first and not counted.
    #[arg(long, default_value_t = 1.0, env = "ZKFENCE_BENCH_WARMUP")]
    pub(super) warmup: f64,
    #[arg(
        long,
        value_enum,
        default_value = "uncontended",
        env = "ZKFENCE_BENCH_MODE"
    )]
    pub(super) mode: Mode,
    #[arg(
        long = "impl",
        value_enum,
        default_value = "zkfence",
        env = "ZKFENCE_BENCH_IMPLEMENTATION"
    )]
    pub(super) implementation: Impl,
    /// Count instead of timing: run through a counting proxy and report the requests (by
    /// operation) and watch notifications per acquisition. The proxy adds latency: its
    /// throughput and latencies are not comparable with an uncounted run's.
    #[arg(long, env = "ZKFENCE_BENCH_COUNT")]
    pub(super) count: bool,
    /// The Redis server the Redis peers (`--impl redis-retry|redis-pubsub`) lock on, e.g.
    /// `127.0.0.1:6379`; --rounds starts a throwaway one without it.
    #[arg(long, value_name = "HOST:PORT", env = "ZKFENCE_BENCH_REDIS")]
    pub(super) redis: Option<std::net::SocketAddr>,
    /// Measure zkfence and its peers in turns, this many rounds of every configuration (each
    /// round starting with another implementation), and summarise the ratios per round as
    /// their median and range; on a throwaway local server without --connect.
    #[arg(long, value_name = "R", env = "ZKFENCE_BENCH_ROUNDS")]
    pub(super) rounds: Option<usize>,
    /// Run the throwaway ZooKeeper server on the first CPU this process may use and the clients
    /// (this process, its runs, Curator's worker) on the others, so that they do not compete
    /// for cores; needs two CPUs or more, and no --connect.
    #[arg(long, env = "ZKFENCE_BENCH_PIN_SERVER")]
    pub(super) pin_server: bool,
    /// With --rounds: the configurations, as contender counts (1: uncontended).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,8,32",
        env = "ZKFENCE_BENCH_CONFIGS"
    )]
    pub(super) configs: Vec<usize>,
    /// With --rounds: the peers measured beside zkfence (the raw limits always are).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "zkclient,curator",
        env = "ZKFENCE_BENCH_PEERS"
    )]
    pub(super) peers: Vec<Impl>,
    /// Run the whole matrix (uncontended; contended with 2, 8, 32) for every impl, print ratios.
    #[arg(long, env = "ZKFENCE_BENCH_MATRIX")]
    pub(super) matrix: bool,
    /// Measure scale instead, on a throwaway local server without --connect, through counting
    /// proxies: locks held at once by one session, waiters on one lock, a semaphore, a
    /// read/write lock and an election at scale, against zookeeper-client and Curator
    /// (--peers), --rounds R times (1 without it); a JSON line per measurement, then the
    /// tables and the targets of issue 27.
    #[arg(long, env = "ZKFENCE_BENCH_SCALE")]
    pub(super) scale: bool,
    /// With --scale: what to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "all",
        env = "ZKFENCE_BENCH_SCALE_WHAT"
    )]
    pub(super) scale_what: Vec<ScaleWhat>,
    /// With --scale: waiters queued on one lock, each with its own session (one measurement per
    /// count).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,100,1000",
        env = "ZKFENCE_BENCH_WAITERS"
    )]
    pub(super) waiters: Vec<usize>,
    /// With --scale: locks held at once (one measurement per count), over --hold-sessions
    /// sessions.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,10,100,1000,10000",
        env = "ZKFENCE_BENCH_LOCKS"
    )]
    pub(super) locks: Vec<usize>,
    /// With --scale: the sessions the --locks are spread over (round robin).
    #[arg(long, default_value_t = 1, env = "ZKFENCE_BENCH_HOLD_SESSIONS")]
    pub(super) hold_sessions: usize,
    /// With --scale: the semaphore's permit counts (one measurement per count).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,16,64",
        env = "ZKFENCE_BENCH_PERMITS"
    )]
    pub(super) permits: Vec<u32>,
    /// With --scale: the semaphore's contenders, each with its own session.
    #[arg(
        long,
        default_value_t = 1000,
        env = "ZKFENCE_BENCH_SEMAPHORE_CONTENDERS"
    )]
    pub(super) semaphore_contenders: usize,
    /// With --scale: the read/write lock's writers, queued first (the first holds).
    #[arg(long, default_value_t = 2, env = "ZKFENCE_BENCH_WRITERS")]
    pub(super) writers: usize,
    /// With --scale: the read/write lock's readers, queued behind the writers.
    #[arg(long, default_value_t = 1000, env = "ZKFENCE_BENCH_READERS")]
    pub(super) readers: usize,
    /// With --scale: the election's candidate counts.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,100",
        env = "ZKFENCE_BENCH_CANDIDATES"
    )]
    pub(super) candidates: Vec<usize>,
    /// With --scale: the election's observer counts (each with every candidate count).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,100",
        env = "ZKFENCE_BENCH_OBSERVERS"
    )]
    pub(super) observers: Vec<usize>,
    /// With --scale: leader changes per election measurement (fewer than the candidates).
    #[arg(long, default_value_t = 5, env = "ZKFENCE_BENCH_CHANGES")]
    pub(super) changes: usize,
    /// With --scale: the session timeout T of every session (the grace of the held locks is T).
    #[arg(long, default_value = "10s", value_parser = crate::support::parse_duration, env = "ZKFENCE_BENCH_SCALE_SESSION_TIMEOUT")]
    pub(super) scale_session_timeout: Duration,
    /// With --scale: how long, in probe periods, the writes of idle holders and waiters are
    /// counted.
    #[arg(long, default_value_t = 4.0, env = "ZKFENCE_BENCH_SCALE_PERIODS")]
    pub(super) scale_periods: f64,
    /// The critical section: how long each holder holds before it releases (0: release at
    /// once). With a hold longer than a round trip, the next holder is already queued when
    /// the lock is released, and the handoff measures the notification path alone.
    #[arg(long, default_value = "0s", value_parser = crate::support::parse_duration, env = "ZKFENCE_BENCH_HOLD")]
    pub(super) hold: Duration,
    /// With --matrix: unmeasured seconds of load on each server before its first run.
    #[arg(long, default_value_t = 6.0, env = "ZKFENCE_BENCH_SERVER_WARMUP")]
    pub(super) server_warmup: f64,
    /// With --matrix on a local server: skip the second matrix on a forceSync=yes server.
    #[arg(long, env = "ZKFENCE_BENCH_SKIP_FORCE_SYNC")]
    pub(super) skip_force_sync: bool,
    /// With --matrix: where to write the chart.
    #[arg(long, default_value = "bench.svg", env = "ZKFENCE_BENCH_CHART")]
    pub(super) chart: PathBuf,
    /// Measure the in-process queue instead: --tasks tasks of one process on one lock, sharing
    /// one FencedLock (clones: one ZooKeeper contender at a time) versus each with its own.
    #[arg(long, env = "ZKFENCE_BENCH_IN_PROCESS")]
    pub(super) in_process: bool,
    /// With --in-process: tasks in the process.
    #[arg(long, default_value_t = 64, env = "ZKFENCE_BENCH_TASKS")]
    pub(super) tasks: usize,
    /// Measure what fencing costs a writer instead: a fenced PostgreSQL transaction
    /// (zkfence-postgres) against the same transaction unfenced, and a fenced ZooKeeper write
    /// (the holder's node checked; or a fence node too) against a plain set_data, interleaved in
    /// --rounds R (default 5) rounds of --seconds S (default 3) per variant; the per-round
    /// ratios' median and range. On a throwaway ZooKeeper without --connect, and always a
    /// throwaway PostgreSQL.
    #[arg(long, env = "ZKFENCE_BENCH_FENCES")]
    pub(super) fences: bool,
    /// With --fences: a round trip of this many milliseconds added to every link the variants
    /// write through, ZooKeeper's and each store's (a proxy that holds each byte half of it
    /// each way), where round trips show. 0, the default: loopback as it is.
    #[arg(long, default_value_t = 0.0, requires = "fences")]
    pub(super) latency_ms: f64,
    /// With --fences: writers per store, each with its own connection, lock and scope (a lock
    /// path, the row or key it writes), all writing at once; the throughputs are their sum.
    #[arg(long, default_value_t = 1, requires = "fences")]
    pub(super) fence_writers: usize,
    /// With --fences: the stores measured, of postgres, zookeeper, mysql, redis and
    /// object-store (all by default; the servers of all of them start either way).
    #[arg(long, value_delimiter = ',', requires = "fences")]
    pub(super) fence_stores: Vec<String>,
    /// `--failover` and its options: leader failover, zkfence against Curator's LeaderLatch.
    #[command(flatten)]
    pub(super) failover: super::failover::Options,
}

impl Args {
    /// The measured seconds of a run: `--seconds`, or 5.
    pub(super) fn seconds(&self) -> f64 {
        self.seconds.unwrap_or(DEFAULT_SECONDS)
    }

    /// Whether `--scale` measures `what` (asked for by name or by `all`).
    pub(super) fn scales(&self, what: ScaleWhat) -> bool {
        (self.scale_what.iter()).any(|w| *w == what || *w == ScaleWhat::All)
    }

    /// Whether `peer` is among `--peers`.
    pub(super) fn has_peer(&self, peer: Impl) -> bool {
        self.peers.contains(&peer)
    }
}

/// Measured seconds when `--seconds` is not given (but with --fences, which has its own).
const DEFAULT_SECONDS: f64 = 5.0;

/// The matrix's configurations: (mode, contenders).
pub(super) const CONFIGS: [(Mode, usize); 4] = [
    (Mode::Uncontended, 1),
    (Mode::Contended, 2),
    (Mode::Contended, 8),
    (Mode::Contended, 32),
];
/// What the matrix measures, in the order it runs them.
pub(super) const IMPLS: [Impl; 4] = [Impl::Raw, Impl::Zkfence, Impl::Zkclient, Impl::Curator];
/// The locks compared (every impl but the raw limits), zkfence first.
pub(super) const LOCKS: [Impl; 3] = [Impl::Zkfence, Impl::Zkclient, Impl::Curator];

/// One benchmark run's parameters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    /// Which lock (or the raw limits) to measure.
    pub(super) implementation: Impl,
    /// One lock path for all contenders, or one each.
    pub(super) mode: Mode,
    /// Contenders, each with its own session.
    pub(super) contenders: usize,
    /// Measured seconds.
    pub(super) seconds: f64,
    /// Seconds run first and not counted.
    pub(super) warmup: f64,
    /// The critical section: how long each holder holds.
    pub(super) hold: Duration,
    /// The server's process (ZooKeeper's, or Redis's for the Redis peers), when the bench
    /// started it: its CPU time is measured.
    pub(super) server_pid: Option<i32>,
    /// The Redis server, for the Redis peers.
    pub(super) redis: Option<std::net::SocketAddr>,
}

impl Run {
    /// A run of `implementation` in (`mode`, `contenders`) with `args`' durations.
    pub(super) fn new(args: &Args, implementation: Impl, mode: Mode, contenders: usize) -> Run {
        Run {
            implementation,
            mode,
            contenders,
            seconds: args.seconds(),
            warmup: args.warmup,
            hold: args.hold,
            server_pid: None,
            redis: args.redis,
        }
    }
}
