//! One worker process: acquire the lock, raise the store's fence to the token, do token-checked
//! read-modify-write increments, release, repeat. Every step is one JSON line on stdout with a
//! `CLOCK_MONOTONIC` timestamp (see [`crate::clock`]); the controller collects them.

use crate::clock::now_ns;
use crate::event::{Ev, Event, OpKind, Role};
use crate::rng::Rng;
use crate::store::{Outcome, Store};
use std::io::Write;
use std::time::Duration;
use tokio::time::Instant;
use zkfence::{FencedLock, FencedRwLock, LockGuard, LockOptions, LossReason};
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
    /// syncs) or `resume-without-proof` (jeopardy ends on a sync's answer).
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
}

struct Log {
    id: u32,
    pid: u32,
}

impl Log {
    /// Writes one event; `t` is taken by the caller where the event's time matters.
    fn at(&self, t: i64, ev: Ev) {
        let event = Event {
            t,
            w: self.id,
            pid: self.pid,
            ev,
        };
        let mut out = std::io::stdout().lock();
        // One write per line: a SIGKILL loses at most the line being written.
        let _ = out.write_all(format!("{}\n", event.to_json_line()).as_bytes());
        let _ = out.flush();
    }

    fn now(&self, ev: Ev) {
        self.at(now_ns(), ev);
    }
}

/// Set by SIGUSR1: the controller wants the current hold stretched to `--long-ms` from now
/// (a partition is about to be aimed at it).
static EXTEND: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets [`EXTEND`] on every SIGUSR1.
fn listen_for_stretch() {
    if let Ok(mut usr1) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
    {
        tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                EXTEND.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
    }
}

pub(crate) async fn run(args: WorkerArgs) {
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
    let fencing = args.mutant != "fencing-off";
    let store = Store::connect_retrying(&args.pg, fencing).await;
    let mut worker = Worker {
        heed_watchdog: args.mutant != "watchdog-off",
        timeout: Duration::from_millis(args.session_ms),
        args,
        log,
        store,
        rng,
        ops: 0,
    };
    loop {
        let client = connect(&worker.args.zk, worker.timeout, &worker.log).await;
        let (writer, reader) = worker.locks(&client);
        while !client.state().is_terminated() {
            // In the read/write scenario, six holds in ten read.
            let read = reader.is_some() && worker.rng.range(0, 9) < 6;
            let lock = match (&reader, read) {
                (Some(reader), true) => reader,
                _ => &writer,
            };
            worker.hold(&client, lock, read).await;
        }
        worker.log.now(Ev::SessionEnded {
            state: format!("{:?}", client.state()),
        });
    }
}

/// One worker process's state across its sessions.
struct Worker {
    args: WorkerArgs,
    log: Log,
    store: Store,
    rng: Rng,
    /// Ops invoked so far (for op ids).
    ops: u64,
    /// Whether the worker checks its lease before each write (not in the watchdog-off mutant).
    heed_watchdog: bool,
    /// The session timeout.
    timeout: Duration,
}

impl Worker {
    /// The lock on `client` (the writer side and the reader side of a read/write lock, in the
    /// read/write scenario); exits if it cannot be made.
    fn locks(&self, client: &zk::Client) -> (FencedLock, Option<FencedLock>) {
        let args = &self.args;
        let mut options = LockOptions::default()
            .with_create_parents(true)
            .with_ride_out_disconnects(args.ride_out)
            .with_grace(Duration::from_millis(args.grace_ms));
        match args.mutant.as_str() {
            "sync-lease" => options = options.with_mutant(zkfence::Mutant::SyncLease),
            "resume-without-proof" => {
                options = options.with_mutant(zkfence::Mutant::ResumeWithoutProof);
            }
            _ => {}
        }
        let locks = if args.rw {
            FencedRwLock::new(client.clone(), args.lock.clone(), options)
                .map(|rw| (rw.writer().clone(), Some(rw.reader().clone())))
        } else {
            FencedLock::new(client.clone(), args.lock.clone(), options).map(|lock| (lock, None))
        };
        match locks {
            Ok(locks) => locks,
            Err(err) => {
                self.log.now(Ev::Fatal {
                    error: err.to_string(),
                });
                std::process::exit(2);
            }
        }
    }

    /// Acquires `lock` (waiting up to 3T); `None` if that failed (logged).
    async fn acquire(&self, lock: &FencedLock) -> Option<LockGuard> {
        match lock.acquire_timeout(self.timeout * 3).await {
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

    /// One hold: acquire `lock`, read (`read`) or write under it, release, think a moment. A
    /// hold that was lost first finds out, on `client`, whether its node survived the loss.
    async fn hold(&mut self, client: &zk::Client, lock: &FencedLock, read: bool) {
        EXTEND.store(false, std::sync::atomic::Ordering::SeqCst);
        self.log.now(Ev::Acquire { role: role(read) });
        let Some(guard) = self.acquire(lock).await else {
            return;
        };
        let mut hold = Hold {
            guard: &guard,
            log: &self.log,
            heed_watchdog: self.heed_watchdog,
            ops: &mut self.ops,
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
        let token = guard.token().as_u64();
        // Before the release, which would delete the node itself.
        match guard.check() {
            Err(zkfence::Error::LockLost(reason)) if reason != LossReason::Released => {
                self.loss_verdict(client, &guard, reason).await;
            }
            _ => {}
        }
        self.log.now(Ev::Release { token });
        let result = guard.release().await;
        self.log.now(Ev::Released {
            token,
            error: result.err().map(|e| e.to_string()),
        });
        tokio::time::sleep(Duration::from_millis(self.rng.range(0, 20))).await;
    }

    /// Logs whether the lost hold's node was still there afterwards ([`node_survived`]): a
    /// needless loss if it was (its session survived and nobody else can have held).
    async fn loss_verdict(&self, client: &zk::Client, guard: &LockGuard, reason: LossReason) {
        let started = now_ns();
        let survived = node_survived(client, guard.node_path(), self.timeout * 3).await;
        self.log.now(Ev::LossVerdict {
            token: guard.token().as_u64(),
            reason: reason.as_str().to_owned(),
            node_survived: survived,
            waited_ms: ((now_ns() - started).max(0) / 1_000_000) as u64,
        });
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

/// The role a hold logs.
fn role(read: bool) -> Role {
    if read {
        Role::Read
    } else {
        Role::Write
    }
}

async fn connect(hosts: &str, timeout: Duration, log: &Log) -> zk::Client {
    loop {
        let attempt = zk::Client::connector()
            .with_session_timeout(timeout)
            .connect(hosts);
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

struct Hold<'a> {
    guard: &'a LockGuard,
    log: &'a Log,
    heed_watchdog: bool,
    ops: &'a mut u64,
    read: bool,
}

impl Hold<'_> {
    fn token(&self) -> u64 {
        self.guard.token().as_u64()
    }

    /// Takes the time first, then checks the lease, then reads the deadline: if the check passed,
    /// the logged time is before the cancellation and the lease left is positive. The
    /// watchdog-off mutant skips the check and so logs a negative lease left after a pause.
    fn try_gate(&self) -> zkfence::Result<(i64, i64)> {
        let t = now_ns();
        let at = Instant::now();
        if self.heed_watchdog {
            self.guard.check()?;
        }
        let deadline = self.guard.lease_deadline();
        let left_ms = if deadline >= at {
            (deadline - at).as_millis() as i64
        } else {
            -((at - deadline).as_millis() as i64)
        };
        Ok((t, left_ms))
    }

    /// The lease gate before a side effect ([`Hold::try_gate`]). In jeopardy (a grace runs) it
    /// does not pass: it logs `jeopardy`, awaits `steady()` (logging `steady`), then checks
    /// again with a time of its own; a loss, or the grace running out, fails it.
    async fn gate(&self) -> Result<(i64, i64), String> {
        loop {
            match self.try_gate() {
                Err(zkfence::Error::Jeopardy) => self.sit_out_jeopardy().await?,
                result => return result.map_err(|e| e.to_string()),
            }
        }
    }

    /// Waits until the hold is steady again, or lost.
    async fn sit_out_jeopardy(&self) -> Result<(), String> {
        let token = self.token();
        let since = now_ns();
        self.log.at(since, Ev::Jeopardy { token });
        self.guard.steady().await.map_err(|e| e.to_string())?;
        let waited_ms = ((now_ns() - since).max(0) / 1_000_000) as u64;
        self.log.now(Ev::Steady { token, waited_ms });
        Ok(())
    }

    fn next_op(&mut self) -> String {
        *self.ops += 1;
        format!("w{}-{}-{}", self.log.id, self.log.pid, self.ops)
    }

    /// Logs the grant (valid if the lease check passes right after it) and starts the task
    /// that logs a watchdog cancellation. `None`: the grant was already stale. A grant in
    /// jeopardy (the lease lapsed while it queued) goes on only once `steady()` returned and a
    /// check passed; it is logged valid but `jeopardy`, which is not a passing check.
    async fn granted(&self, long: bool) -> Option<tokio::task::JoinHandle<()>> {
        let token = self.token();
        let seq = self.guard.token().sequence();
        let t = now_ns();
        let (ok, jeopardy) = match self.heed_watchdog.then(|| self.guard.check()) {
            None | Some(Ok(())) => (true, false),
            Some(Err(zkfence::Error::Jeopardy)) => {
                let steady = self.sit_out_jeopardy().await.is_ok();
                (steady && self.guard.check().is_ok(), true)
            }
            Some(Err(_)) => (false, false),
        };
        self.log.at(
            t,
            Ev::Granted {
                token,
                seq: i64::from(seq),
                node: self.guard.node_path().to_owned(),
                session: self.guard.session_id().0,
                valid: ok,
                long,
                role: role(self.read),
                jeopardy,
            },
        );
        if !ok {
            return None;
        }
        let observer = self.guard.held();
        let (id, pid) = (self.log.id, self.log.pid);
        Some(tokio::spawn(async move {
            let reason = observer.lost().await;
            if reason != zkfence::LossReason::Released {
                Log { id, pid }.now(Ev::Cancel {
                    token,
                    reason: reason.as_str().to_owned(),
                });
            }
        }))
    }

    /// A reader's hold: reads of the counter and the fence, each between two lease checks.
    /// While the lease holds, no writer after us can have been granted, so the fence (the
    /// newest writer's token the store accepted) must be below our token.
    async fn observe(&mut self, store: &mut Store, rng: &mut Rng, reads: u32) {
        let Some(watcher) = self.granted(false).await else {
            return;
        };
        let token = self.token();
        for _ in 0..reads {
            if let Err(why) = self.gate().await {
                self.log.now(Ev::CheckFailed { token, error: why });
                break;
            }
            let Ok((counter, fence)) = store.peek().await else {
                break;
            };
            // The time logged is the one taken before this second check; in jeopardy the read
            // is not vouched for.
            let (t, valid) = match self.try_gate() {
                Ok((t, _)) => (t, true),
                Err(_) => (now_ns(), false),
            };
            self.log.at(
                t,
                Ev::Observe {
                    token,
                    counter,
                    fence,
                    valid,
                },
            );
            if !valid {
                break;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(10, 40))).await;
        }
        drop(watcher);
    }

    /// A writer's hold: raise the fence, then `increments` read-modify-write increments (and
    /// more for `stretch` once the controller asks for it with SIGUSR1).
    async fn work(
        &mut self,
        store: &mut Store,
        rng: &mut Rng,
        increments: u32,
        long: bool,
        stretch: Duration,
    ) {
        let Some(watcher) = self.granted(long).await else {
            return;
        };
        let token = self.token();
        let mut until = Instant::now();
        // First raise the fence: from here on every older holder is refused.
        if self.step(store, OpKind::Fence, None).await.is_some() {
            let mut done = 0;
            while done < increments || Instant::now() < until {
                done += 1;
                if EXTEND.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    until = until.max(Instant::now() + stretch);
                    self.log.now(Ev::Extended { token });
                }
                self.log.now(Ev::Read { token });
                let Ok(counter) = store.read().await else {
                    break;
                };
                tokio::time::sleep(Duration::from_millis(rng.range(10, 40))).await;
                if self
                    .step(store, OpKind::Write, Some(counter + 1))
                    .await
                    .is_none()
                {
                    break;
                }
            }
        }
        // A stretched hold (a partition is aimed at it) that the store stopped still asks its
        // lease, as a holder polling `check()` would: how long it stays valid after a newer
        // holder took over is what the lease invariant measures.
        self.poll_lease(until).await;
        drop(watcher); // detaches: it still reports a loss during release
    }

    /// Calls `check()` every 10 ms until it fails or `until` passes (sitting out jeopardy, see
    /// [`Hold::gate`]), logging a `lease` event (with the time taken before the check) for
    /// each pass, at most every 20 ms.
    async fn poll_lease(&self, until: Instant) {
        let token = self.token();
        let mut logged = None;
        while Instant::now() < until {
            match self.gate().await {
                Ok((t, left_ms)) => {
                    if logged.is_none_or(|at: i64| t - at >= 20_000_000) {
                        self.log.at(
                            t,
                            Ev::Lease {
                                token,
                                lease_left_ms: left_ms,
                            },
                        );
                        logged = Some(t);
                    }
                }
                Err(why) => {
                    self.log.now(Ev::CheckFailed { token, error: why });
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// One fenced write; `None` ends the hold (refused, unknown, or the lease gate closed).
    async fn step(&mut self, store: &mut Store, kind: OpKind, value: Option<i64>) -> Option<()> {
        let token = self.token();
        let (t, left_ms) = match self.gate().await {
            Ok(gate) => gate,
            Err(why) => {
                self.log.now(Ev::CheckFailed { token, error: why });
                return None;
            }
        };
        let op = self.next_op();
        self.log.at(
            t,
            Ev::Invoke {
                op: op.clone(),
                kind,
                token,
                value,
                lease_left_ms: left_ms,
                checked: self.heed_watchdog,
            },
        );
        if kind == OpKind::Write {
            // Preparing the write (serialising a payload, a slow disk): a pause here lands after
            // the check, so only the fence can stop the write.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let outcome = match value {
            Some(value) => store.write(&op, self.log.id, token, value).await,
            None => store.raise_fence(&op, self.log.id, token).await,
        };
        match outcome {
            Outcome::Ok => {
                self.log.now(Ev::Ok { op, token });
                Some(())
            }
            Outcome::Refused => {
                self.log.now(Ev::Fail {
                    op,
                    token,
                    why: "refused".into(),
                });
                None
            }
            Outcome::Unknown(err) => {
                self.log.now(Ev::Unknown {
                    op,
                    token,
                    error: err,
                });
                None
            }
        }
    }
}
