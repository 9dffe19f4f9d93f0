//! One worker process, and what every kind of worker shares ([`Worker`]): its arguments, its
//! store connection, the lease options, the work under a hold from its grant to its release,
//! and the loss verdict. The lock worker is here ([`run`]): acquire the lock, raise the store's
//! fence to the token, do token-checked read-modify-write increments, release, repeat. The
//! elected and multi-lock workers are [`crate::elected`] and [`crate::multi`]. Every step is one
//! JSON line on stdout with a `CLOCK_MONOTONIC` timestamp (see [`crate::clock`]); the controller
//! collects them.

use crate::clock::now_ns;
use crate::event::Ev;
use crate::hold::{listen_for_stretch, role, Hold, Log, Ticketed, EXTEND};
use crate::rng::Rng;
use crate::store::{Flaws, Store};
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use zkfence::Acquire;
use zkfence::{FencedLock, FencedRwLock, Held, LockOptions, LossReason, Mode, Shared};
use zookeeper_client as zk;

/// What a worker is told by the controller.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// Worker number.
    #[arg(long)]
    pub id: u32,
    /// ZooKeeper connect string (this worker's proxies).
    #[arg(long)]
    pub zk: String,
    /// PostgreSQL connection string.
    #[arg(long)]
    pub pg: String,
    /// The lock path.
    #[arg(long)]
    pub lock: String,
    /// Session timeout in milliseconds.
    #[arg(long)]
    pub session_ms: u64,
    /// `none`, `fencing-off`, `watchdog-off`, `sync-lease` (the earlier lease rule that trusted
    /// syncs), `resume-without-proof` (jeopardy ends on a sync's answer), `lock-delay` (a
    /// lock-delay of 2T: a dead leader's successor waits 2T more), `epoch-sequence` (an
    /// elected worker fences with its node's sequence number, not its epoch) or
    /// `in-doubt-as-failed` (a write in doubt is recorded as not applied).
    #[arg(long, default_value = "none")]
    pub mutant: String,
    /// Ride out disconnects until the lease ends (`LockOptions::with_ride_out_disconnects`).
    #[arg(long)]
    pub ride_out: bool,
    /// The grace period in milliseconds (`LockOptions::with_grace`; 0: none). With one, a
    /// check in jeopardy holds the write back until `steady()` returns.
    #[arg(long, default_value_t = 0)]
    pub grace_ms: u64,
    /// On SIGUSR1 the current hold goes on for at least this long (ms): the controller
    /// stretches a holder before it cuts its server off, so that the hold spans the fault.
    #[arg(long, default_value_t = 0)]
    pub long_ms: u64,
    /// Increments per hold.
    #[arg(long, default_value_t = 3)]
    pub increments: u32,
    /// Seed for think times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Use a read/write lock: most holds read (under the read lock), the rest write.
    #[arg(long)]
    pub rw: bool,
    /// What the worker holds: `lock` (a lock, or a read/write lock with `--rw`), `election`
    /// (it campaigns on `--lock` and works while it leads) or `multi` (reentrant holds and
    /// multi-locks on three paths under `--lock`).
    #[arg(long, default_value = "lock")]
    pub recipe: String,
    /// An elected worker that leads with `FencedElection::lead` rather than campaigning by
    /// hand.
    #[arg(long)]
    pub lead: bool,
}

/// The lock worker's process.
pub(crate) async fn run(args: WorkerArgs) {
    let mut worker = Worker::start(args).await;
    loop {
        let client = connect(&worker.args.zk, worker.timeout, &worker.log).await;
        let (writer, reader) = worker.locks(&client);
        while !client.state().is_terminated() {
            // In the read/write scenario, six holds in ten read.
            let read = reader.is_some() && worker.rng.range(0, 9) < 6;
            match (&reader, read) {
                (Some(reader), true) => worker.hold(&client, reader, true).await,
                _ => worker.hold(&client, &writer, false).await,
            }
        }
        worker.log.now(Ev::SessionEnded {
            state: format!("{:?}", client.state()),
        });
    }
}

/// One worker process's state across its sessions.
pub(crate) struct Worker {
    pub args: WorkerArgs,
    pub log: Log,
    pub store: Store,
    pub rng: Rng,
    /// Whether the worker checks its lease before each write (not in the watchdog-off mutant).
    pub heed_watchdog: bool,
    /// The session timeout.
    pub timeout: Duration,
}

impl Worker {
    /// Logs the start and connects to the store (retrying until it answers).
    pub(crate) async fn start(args: WorkerArgs) -> Worker {
        let log = Log {
            id: args.id,
            pid: std::process::id(),
        };
        listen_for_stretch();
        let rng = Rng::new(args.seed ^ (u64::from(std::process::id()) << 20));
        log.now(Ev::Start {
            mutant: args.mutant.clone(),
            ride_out: args.ride_out,
            session_ms: args.session_ms,
            grace_ms: args.grace_ms,
        });
        let flaws = Flaws {
            fencing: args.mutant != "fencing-off",
            doubt_as_failed: args.mutant == "in-doubt-as-failed",
        };
        let store = Store::connect_retrying(&args.pg, flaws, args.id).await;
        Worker {
            heed_watchdog: args.mutant != "watchdog-off",
            timeout: Duration::from_millis(args.session_ms),
            args,
            log,
            store,
            rng,
        }
    }

    /// The lease options every lock and election of this worker uses: parents created, ride
    /// out and grace as told, and the library mutant or the lock-delay the worker's mutant asks
    /// for.
    pub(crate) fn options(&self) -> LockOptions {
        let args = &self.args;
        let options = LockOptions::default()
            .with_create_parents(true)
            .with_ride_out_disconnects(args.ride_out)
            .with_grace(Duration::from_millis(args.grace_ms));
        match args.mutant.as_str() {
            "sync-lease" => options.with_mutant(zkfence::Mutant::SyncLease),
            "resume-without-proof" => options.with_mutant(zkfence::Mutant::ResumeWithoutProof),
            "lock-delay" => options.with_lock_delay(self.timeout * 2),
            _ => options,
        }
    }

    /// Logs that the lock or election could not be made, and exits.
    pub(crate) fn fatal(&self, err: zkfence::Error) -> ! {
        self.log.now(Ev::Fatal {
            error: err.to_string(),
        });
        std::process::exit(2);
    }

    /// The lock on `client` (the writer side and the reader side of a read/write lock, in the
    /// read/write scenario); exits if it cannot be made.
    fn locks(&self, client: &zk::Client) -> (FencedLock, Option<FencedLock<Shared>>) {
        let (args, options) = (&self.args, self.options());
        let locks = if args.rw {
            FencedRwLock::new(client.clone(), args.lock.clone(), options)
                .map(|rw| (rw.writer().clone(), Some(rw.reader().clone())))
        } else {
            FencedLock::new(client.clone(), args.lock.clone(), options).map(|lock| (lock, None))
        };
        locks.unwrap_or_else(|err| self.fatal(err))
    }

    /// What an acquire (waiting up to 3T: see [`Worker::wait`]) returned; `None` if it timed
    /// out or failed (logged).
    pub(crate) async fn acquired<T>(&self, result: zkfence::Result<Option<T>>) -> Option<T> {
        match result {
            Ok(Some(guard)) => Some(guard),
            Ok(None) => {
                self.log.now(Ev::AcquireFailed {
                    error: "timed out".into(),
                });
                None
            }
            Err(err) => {
                self.log.now(Ev::AcquireFailed {
                    error: err.to_string(),
                });
                if !err.is_session_terminal() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None
            }
        }
    }

    /// How long an acquire waits: 3T.
    pub(crate) fn wait(&self) -> Duration {
        self.timeout * 3
    }

    /// One hold: acquire `lock`, read (`read`) or write under it, release, think a moment.
    async fn hold<M: Mode>(&mut self, client: &zk::Client, lock: &FencedLock<M>, read: bool)
    where
        Held<M>: Ticketed,
    {
        EXTEND.store(false, std::sync::atomic::Ordering::SeqCst);
        self.log.now(Ev::Acquire { role: role(read) });
        let acquire = lock.acquire_timeout(self.wait()).await;
        let Some(guard) = self.acquired(acquire).await else {
            return;
        };
        let token = guard.token().as_u64();
        self.serve(Some(client), &guard, token, read).await;
        self.release(&[token], guard.release()).await;
    }

    /// The work under a hold of `held` (with `token`, on store row 1): a reader's reads or a
    /// writer's increments, one hold in four a long critical section. A hold that was lost
    /// then finds out, on `client` (if given), whether its node survived the loss.
    pub(crate) async fn serve<M: Mode>(
        &mut self,
        client: Option<&zk::Client>,
        held: &Held<M>,
        token: u64,
        read: bool,
    ) where
        Held<M>: Ticketed,
    {
        let hold = Hold {
            held,
            ticket: held.fence_ticket(),
            lease: held,
            token,
            row: 1,
            log: &self.log,
            heed_watchdog: self.heed_watchdog,
            read,
        };
        // One hold in four is a long critical section (a batch job): the faults aimed at
        // the watchdog (partitions, session expiry, slow links) pick those.
        let long = self.rng.range(0, 3) == 0;
        let increments = if long {
            self.args.increments * 20
        } else {
            self.args.increments
        };
        if read {
            hold.observe(&mut self.store, &mut self.rng, self.args.increments)
                .await;
        } else {
            let stretch = Duration::from_millis(self.args.long_ms);
            hold.work(&mut self.store, &mut self.rng, increments, long, stretch)
                .await;
        }
        if let Some(client) = client {
            self.verdict_if_lost(client, held, token).await;
        }
    }

    /// Before the release (which would delete the node itself): if the hold of `held` was lost,
    /// logs whether its node was still there afterwards ([`node_survived`]), a needless loss
    /// if it was (its session survived and nobody else can have held).
    pub(crate) async fn verdict_if_lost<M: Mode>(
        &self,
        client: &zk::Client,
        held: &Held<M>,
        token: u64,
    ) {
        let reason = match held.check() {
            Err(zkfence::Error::LockLost(reason)) if reason != LossReason::Released => reason,
            _ => return,
        };
        let started = now_ns();
        let survived = node_survived(client, held.node_path(), self.timeout * 3).await;
        self.log.now(Ev::LossVerdict {
            token,
            reason: reason.as_str().to_owned(),
            node_survived: survived,
            waited_ms: ((now_ns() - started).max(0) / 1_000_000) as u64,
        });
    }

    /// Logs the release of `tokens` (a multi-lock's, or one), awaits it, logs how it went,
    /// and thinks a moment.
    pub(crate) async fn release(
        &mut self,
        tokens: &[u64],
        release: impl Future<Output = zkfence::Result<()>>,
    ) {
        for &token in tokens {
            self.log.now(Ev::Release { token });
        }
        let error = release.await.err().map(|e| e.to_string());
        for &token in tokens {
            let error = error.clone();
            self.log.now(Ev::Released { token, error });
        }
        tokio::time::sleep(Duration::from_millis(self.rng.range(0, 20))).await;
    }
}

/// Whether `node` is still there, asked on `client`'s own session once it can answer: a
/// `sync` (so that a follower that fell behind the leader catches up), then `exists`, retried
/// across connection losses for up to `wait`. `Some(false)` once the session is over (its
/// ephemeral node went with it); `None` if no answer came in time.
async fn node_survived(client: &zk::Client, node: &str, wait: Duration) -> Option<bool> {
    let deadline = Instant::now() + wait;
    let attempt = || async {
        client.sync(node).await?;
        client.check_stat(node).await
    };
    while Instant::now() < deadline {
        if client.state().is_terminated() {
            return Some(false);
        }
        match tokio::time::timeout(Duration::from_secs(2), attempt()).await {
            Ok(Ok(stat)) => return Some(stat.is_some()),
            Ok(Err(
                zk::Error::NoNode
                | zk::Error::SessionExpired
                | zk::Error::ClientClosed
                | zk::Error::AuthFailed
                | zk::Error::NoHosts,
            )) => return Some(false),
            Ok(Err(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    None
}

/// A session on `hosts`, connecting until one is made (logging each attempt's failure and the
/// session).
pub(crate) async fn connect(hosts: &str, timeout: Duration, log: &Log) -> zk::Client {
    loop {
        let attempt = zkfence::Connect::new(hosts)
            .with_session_timeout(timeout)
            .connect();
        match tokio::time::timeout(timeout * 2, attempt).await {
            Ok(Ok(client)) => {
                log.now(Ev::Session {
                    session: client.session_id().0,
                    timeout_ms: client.session_timeout().as_millis() as u64,
                });
                return client;
            }
            Ok(Err(err)) => log.now(Ev::ConnectFailed {
                error: err.to_string(),
            }),
            Err(_) => log.now(Ev::ConnectFailed {
                error: "timed out".into(),
            }),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
