//! The controller: starts the ensemble, PostgreSQL and the workers, injects the seeded faults,
//! heals, collects the logs and the store, and hands them to the checker.

use crate::checker::{Event, Fault};
use crate::clock::{ms, now_ns};
use crate::rng::Rng;
use crate::store::Postgres;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use zkfence_testkit::{four_letter, CountingProxy, EnsembleOptions, LinkFault, LocalEnsemble};
use zookeeper_client as zk;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Where a holder is in its critical section, as its last event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Between the read and the lease check: a pause here is caught by `check()`.
    Think,
    /// After the check, before the write reaches the store: only the fence can stop it.
    Write,
    /// Any moment of the hold.
    Any,
    /// Early in a long critical section (so the hold outlasts the fault's detection).
    Long,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Think => "think",
            Phase::Write => "write",
            Phase::Any => "any",
            Phase::Long => "long",
        }
    }
}

/// One kind of fault, with its parameters.
#[derive(Debug, Clone)]
pub(crate) enum FaultKind {
    PauseHolder {
        factor: f64,
        phase: Phase,
    },
    KillHolder,
    ExpireHolder,
    PartitionHolder,
    SlowHolder,
    /// SIGSTOP the leader for `factor` × T; when `aimed`, with a holder on a follower
    /// stretched through it (its session's touches reach the leader only through pings).
    PauseLeader {
        factor: f64,
        aimed: bool,
    },
    KillLeader {
        down_ms: u64,
    },
    PauseAll,
    KillAll,
    DeleteParent,
    SkewWorker {
        rate: f64,
    },
    /// The leader cut off from both followers while a holder is connected to it:
    /// asymmetric (the followers' packets to it reset, its packets to them dropped) or
    /// symmetric (dropped both ways: a majority/minority split).
    IsolateLeader {
        symmetric: bool,
    },
    /// A holder's follower can no longer send to the leader (the leader still reaches it).
    OneWayFollower,
    /// A holder's follower cut off from both other servers, both ways (a minority of one).
    IsolateFollower,
    /// The links between the leader and the followers lose 30% of their packets for 2T.
    LossyLeaderLink,
}

impl FaultKind {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            FaultKind::PauseHolder { .. } => "pause-holder",
            FaultKind::KillHolder => "kill-holder",
            FaultKind::ExpireHolder => "expire-holder",
            FaultKind::PartitionHolder => "partition-holder",
            FaultKind::SlowHolder => "slow-link",
            FaultKind::PauseLeader { aimed: false, .. } => "pause-leader",
            FaultKind::PauseLeader { aimed: true, .. } => "pause-leader-aimed",
            FaultKind::KillLeader { down_ms: 0 } => "restart-leader",
            FaultKind::KillLeader { .. } => "kill-leader",
            FaultKind::PauseAll => "pause-all-servers",
            FaultKind::KillAll => "kill-all-servers",
            FaultKind::DeleteParent => "delete-parent",
            FaultKind::SkewWorker { .. } => "clock-skew-worker",
            FaultKind::IsolateLeader { symmetric: false } => "isolate-leader-asym",
            FaultKind::IsolateLeader { symmetric: true } => "isolate-leader-sym",
            FaultKind::OneWayFollower => "one-way-follower",
            FaultKind::IsolateFollower => "isolate-follower",
            FaultKind::LossyLeaderLink => "lossy-leader-link",
        }
    }
}

/// The names of the faults that cut links inside the ensemble.
pub(crate) const PARTITION_KINDS: [&str; 5] = [
    "isolate-leader-asym",
    "isolate-leader-sym",
    "one-way-follower",
    "isolate-follower",
    "lossy-leader-link",
];

/// Which variant of the worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutant {
    None,
    FencingOff,
    WatchdogOff,
    /// The lease rule before issue 11: sync replies extend the lease from their send time.
    SyncLease,
}

impl Mutant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mutant::None => "none",
            Mutant::FencingOff => "fencing-off",
            Mutant::WatchdogOff => "watchdog-off",
            Mutant::SyncLease => "sync-lease",
        }
    }
}

/// The servers every scenario of a run shares: the main ensemble (tick 200 ms, each server in
/// a network namespace of its own) and PostgreSQL.
pub(crate) struct Cluster {
    pub ensemble: Arc<LocalEnsemble>,
    pub pg: Postgres,
}

/// Starts a 3-server ensemble with each server in a network namespace of its own, so that the
/// links between servers can be cut.
pub(crate) async fn start_ensemble(
    options: &EnsembleOptions,
) -> Result<Arc<LocalEnsemble>, String> {
    let options = options.clone().with_own_network_namespaces(true);
    let ensemble = tokio::task::spawn_blocking(move || LocalEnsemble::start_with(options))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(ensemble))
}

impl Cluster {
    pub(crate) async fn start(run_dir: &Path, options: EnsembleOptions) -> Result<Cluster, String> {
        let ensemble = start_ensemble(&options).await?;
        // Started on this (runtime worker) thread, not a blocking-pool thread: the parent-death
        // signal follows the thread that forked, and pool threads exit when idle.
        let pg = Postgres::start(run_dir)?;
        Ok(Cluster { ensemble, pg })
    }
}

/// How one worker runs: its session timeout and whether it rides out disconnects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerMode {
    pub session_ms: u64,
    pub ride_out: bool,
}

#[derive(Default)]
struct Slot {
    pid: u32,
    alive: bool,
    paused: bool,
    session: i64,
    holding: Option<(u64, String)>,
    /// A long critical section that started at this time.
    long_since: Option<i64>,
    cancelled: bool,
    phase: Option<Phase>,
    skew: Option<f64>,
    /// The token of the hold the worker stretched on our SIGUSR1.
    extended: Option<u64>,
}

struct State {
    slots: Vec<Slot>,
    events: Vec<Event>,
    faults: Vec<Fault>,
    oks: u64,
    refused: u64,
    cancels: u64,
    current: String,
}

/// One scenario: a set of workers on one lock, a fault schedule, and what they logged.
pub(crate) struct Scenario {
    pub name: String,
    pub mutant: Mutant,
    /// Workers use a read/write lock.
    pub rw: bool,
    pub lock: String,
    /// The longest session timeout among the workers.
    pub session_ms: u64,
    pub seed: u64,
    pub dir: PathBuf,
    pub t0: i64,
    /// The ensemble this scenario runs on, and how it is set up.
    pub ensemble: Arc<LocalEnsemble>,
    pub options: EnsembleOptions,
    modes: Vec<WorkerMode>,
    long_ms: u64,
    proxies: Vec<Vec<CountingProxy>>,
    state: Arc<Mutex<State>>,
    hosts: String,
    pg: String,
    /// A client of this scenario's ensemble, for the controller's own reads and deletes.
    admin: zk::Client,
}

/// What a scenario returns to the report.
pub(crate) struct Collected {
    pub events: Vec<Event>,
    pub faults: Vec<Fault>,
    pub end_at: i64,
}

/// What one scenario runs.
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub mutant: Mutant,
    pub rw: bool,
    /// One per worker.
    pub modes: Vec<WorkerMode>,
    /// How far a holder is stretched (ms) when a partition is aimed at it.
    pub long_ms: u64,
    pub seed: u64,
    pub dir: PathBuf,
    pub ensemble: Arc<LocalEnsemble>,
    pub options: EnsembleOptions,
}

impl Scenario {
    pub(crate) async fn new(cluster: &Cluster, spec: Spec<'_>) -> Result<Scenario, String> {
        let Spec {
            name,
            mutant,
            rw,
            modes,
            long_ms,
            seed,
            dir,
            ensemble,
            options,
        } = spec;
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let pg = cluster.pg.database(name).await?;
        crate::store::reset(&pg).await?;
        let mut proxies = Vec::new();
        for _ in &modes {
            let mut mine = Vec::new();
            for i in 0..3 {
                mine.push(CountingProxy::start(&ensemble.server_addr(i)).await);
            }
            proxies.push(mine);
        }
        let state = State {
            slots: modes.iter().map(|_| Slot::default()).collect(),
            events: Vec::new(),
            faults: Vec::new(),
            oks: 0,
            refused: 0,
            cancels: 0,
            current: String::new(),
        };
        let admin = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&ensemble.addr())
            .await
            .map_err(|e| format!("connect to the ensemble: {e}"))?;
        Ok(Scenario {
            admin,
            name: name.to_owned(),
            mutant,
            rw,
            lock: format!("/chaos/{name}-{seed}/lock"),
            session_ms: modes.iter().map(|m| m.session_ms).max().unwrap_or(2000),
            seed,
            dir,
            t0: now_ns(),
            hosts: ensemble.addr(),
            ensemble,
            options,
            modes,
            long_ms,
            proxies,
            state: Arc::new(Mutex::new(state)),
            pg,
        })
    }

    pub(crate) fn workers(&self) -> u32 {
        self.modes.len() as u32
    }

    /// The scenario's own database.
    pub(crate) fn conninfo(&self) -> &str {
        &self.pg
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.session_ms)
    }

    /// Worker `id`'s session timeout.
    fn timeout_of(&self, id: usize) -> Duration {
        Duration::from_millis(self.modes[id].session_ms)
    }

    /// Starts worker `id` (again), under libfaketime at `skew` when given.
    pub(crate) fn spawn_worker(&self, id: u32, skew: Option<f64>) -> Result<(), String> {
        // Our own executable even if a rebuild has replaced the file on disk since we started
        // (then current_exe() names a deleted path); the child is a fork of us, so its
        // /proc/self/exe is this very binary.
        let exe = std::path::PathBuf::from("/proc/self/exe");
        let zk_hosts: Vec<&str> = self.proxies[id as usize]
            .iter()
            .map(|p| p.addr.as_str())
            .collect();
        let mode = self.modes[id as usize];
        let mut cmd = tokio::process::Command::new(exe);
        cmd.arg("worker")
            .args(["--id", &id.to_string()])
            .args(["--zk", &zk_hosts.join(",")])
            .args(["--pg", &self.pg])
            .args(["--lock", &self.lock])
            .args(["--session-ms", &mode.session_ms.to_string()])
            .args(["--mutant", self.mutant.name()])
            .args(["--seed", &self.seed.to_string()])
            .args(["--long-ms", &self.long_ms.to_string()])
            .args(self.rw.then_some("--rw"))
            .args(mode.ride_out.then_some("--ride-out"))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("worker-{id}.stderr")))
            .map_err(|e| e.to_string())?;
        cmd.stderr(stderr);
        if let Some(rate) = skew {
            // The worker's own clock runs at `rate`; its log timestamps do not (see clock.rs).
            cmd.env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME", format!("+0 x{rate}"))
                .env("FAKETIME_NO_CACHE", "1");
        }
        // SAFETY: prctl in the child before exec: workers die with the controller.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| format!("spawn worker: {e}"))?;
        let pid = child.id().unwrap_or(0);
        {
            let mut st = self.lock_state();
            st.slots[id as usize] = Slot {
                pid,
                alive: true,
                skew,
                ..Slot::default()
            };
        }
        let stdout = child.stdout.take();
        let state = self.state.clone();
        let path = self.dir.join(format!("worker-{id}.jsonl"));
        tokio::spawn(async move {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok();
            if let Some(stdout) = stdout {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(f) = file.as_mut() {
                        let _ = writeln!(f, "{line}");
                    }
                    let Ok(body) = serde_json::from_str(&line) else {
                        continue;
                    };
                    let Some(event) = Event::from_json(body) else {
                        continue;
                    };
                    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
                    apply(&mut st, id as usize, &event);
                    st.events.push(event);
                }
            }
            let _ = child.wait().await;
            let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
            let slot = &mut st.slots[id as usize];
            if slot.pid == pid {
                slot.alive = false;
                slot.holding = None;
            }
        });
        Ok(())
    }

    /// Restarts a worker after a fault; a failure is loud (the run then fails on progress).
    fn respawn(&self, id: u32, skew: Option<f64>) {
        if let Err(err) = self.spawn_worker(id, skew) {
            println!("  chaos: could not restart worker {id}: {err}");
        }
    }

    fn signal(&self, id: usize, signal: i32) {
        let pid = self.lock_state().slots[id].pid;
        if pid > 0 {
            // SAFETY: kill(2) on a worker we started.
            unsafe { libc::kill(pid as i32, signal) };
        }
    }

    /// Waits until some live, unpaused worker holds the lock (in `phase`, when not `Any`).
    async fn holder(&self, phase: Phase, wait: Duration) -> Option<(usize, u32, u64, String, i64)> {
        let deadline = now_ns() + wait.as_nanos() as i64;
        loop {
            {
                let st = self.lock_state();
                let found = st.slots.iter().enumerate().find(|(_, s)| {
                    s.alive
                        && !s.paused
                        && !s.cancelled
                        && s.holding.is_some()
                        && match phase {
                            Phase::Any => true,
                            Phase::Long => {
                                s.long_since.is_some_and(|t| now_ns() - t < 1_000_000_000)
                            }
                            _ => s.phase == Some(phase),
                        }
                });
                if let Some((i, s)) = found {
                    let (token, node) = s.holding.clone().unwrap_or_default();
                    return Some((i, s.pid, token, node, s.session));
                }
            }
            if now_ns() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A holder early in a long critical section, else any holder.
    async fn long_holder(&self) -> Option<(usize, u32, u64, String, i64)> {
        match self.holder(Phase::Long, Duration::from_secs(10)).await {
            Some(h) => Some(h),
            None => self.holder(Phase::Any, Duration::from_secs(8)).await,
        }
    }

    /// Waits (up to `wait`) for the first acknowledged increment from now on.
    pub(crate) async fn progress(&self, wait: Duration) -> bool {
        let before = self.lock_state().oks;
        let deadline = now_ns() + wait.as_nanos() as i64;
        while now_ns() < deadline {
            if self.lock_state().oks > before {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    pub(crate) fn counts(&self) -> (u64, u64, u64, usize, String) {
        let st = self.lock_state();
        (
            st.oks,
            st.refused,
            st.cancels,
            st.faults.len(),
            st.current.clone(),
        )
    }

    /// Injects one fault and heals it; returns `None` when no target showed up in time.
    pub(crate) async fn inject(&self, kind: &FaultKind) -> Option<Fault> {
        let t = self.timeout();
        let name = kind.name();
        self.lock_state().current = name.to_owned();
        // A fault from `start` to now, noticeable from `start`, aimed at nobody; the arms
        // below fill in what differs.
        let record = |detail: String, start: i64| Fault {
            kind: name.to_owned(),
            detail,
            start,
            end: now_ns(),
            reference: start,
            victim: None,
            expired_at: None,
            pause_past_timeout: false,
        };
        let fault = match kind {
            FaultKind::PauseHolder { factor, phase } => {
                let (id, pid, token, _, _) = match self.holder(*phase, Duration::from_secs(8)).await
                {
                    Some(h) => h,
                    None => self.holder(Phase::Any, Duration::from_secs(8)).await?,
                };
                let actual = self.lock_state().slots[id]
                    .phase
                    .map_or("held", Phase::name);
                self.signal(id, libc::SIGSTOP);
                let start = now_ns();
                self.lock_state().slots[id].paused = true;
                tokio::time::sleep(t.mul_f64(*factor)).await;
                self.signal(id, libc::SIGCONT);
                let end = now_ns();
                self.lock_state().slots[id].paused = false;
                Fault {
                    end,
                    reference: end,
                    victim: Some((id as u32, pid, token)),
                    pause_past_timeout: *factor > 1.0,
                    ..record(
                        format!(
                        "w{id} token {token} SIGSTOP {:.1} s ({factor}×T) in its {actual} phase",
                        t.as_secs_f64() * factor
                    ),
                        start,
                    )
                }
            }
            FaultKind::KillHolder => {
                let (id, pid, token, _, _) =
                    self.holder(Phase::Any, Duration::from_secs(8)).await?;
                self.signal(id, libc::SIGKILL);
                let start = now_ns();
                tokio::time::sleep(Duration::from_secs(1)).await;
                let skew = self.lock_state().slots[id].skew;
                self.respawn(id as u32, skew);
                Fault {
                    victim: Some((id as u32, pid, token)),
                    ..record(
                        format!("w{id} token {token} SIGKILL, restarted after 1 s"),
                        start,
                    )
                }
            }
            FaultKind::ExpireHolder => {
                let (id, pid, token, node, session) = self.long_holder().await?;
                let start = now_ns();
                let how =
                    zkfence_testkit::expire_session(&self.hosts, zk::SessionId(session)).await;
                let expired = wait_gone(&self.admin, &node, Duration::from_secs(5)).await;
                Fault {
                    victim: Some((id as u32, pid, token)),
                    expired_at: expired,
                    ..record(
                        format!(
                            "w{id} token {token} session {session:#x} closed from outside ({})",
                            how.unwrap_or_else(|e| e)
                        ),
                        start,
                    )
                }
            }
            FaultKind::PartitionHolder => {
                let (id, pid, token, node, _) = self.long_holder().await?;
                let start = now_ns();
                for p in &self.proxies[id] {
                    p.blackhole(true);
                }
                let expired = wait_gone(&self.admin, &node, t * 3).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                for p in &self.proxies[id] {
                    p.blackhole(false);
                }
                Fault { victim: Some((id as u32, pid, token)), expired_at: expired, ..record(format!("w{id} token {token} cut off from all three servers (it still reaches PostgreSQL)"), start) }
            }
            FaultKind::SlowHolder => {
                let (id, pid, token, _, _) = self.long_holder().await?;
                let start = now_ns();
                let delay = t / 8;
                for p in &self.proxies[id] {
                    p.delay(delay);
                }
                tokio::time::sleep(t * 2).await;
                for p in &self.proxies[id] {
                    p.delay(Duration::ZERO);
                }
                Fault {
                    victim: Some((id as u32, pid, token)),
                    ..record(
                        format!(
                            "w{id} token {token}: every ZooKeeper frame delayed {} ms for {:.1} s",
                            delay.as_millis(),
                            (t * 2).as_secs_f64()
                        ),
                        start,
                    )
                }
            }
            FaultKind::PauseLeader { factor, aimed } => {
                let leader = self.leader().await?;
                let victim = if *aimed {
                    let (id, pid, token, _, _, server) =
                        self.placed_holder(|s| s != leader).await?;
                    self.pin(id, server, &[]);
                    Some((id, pid, token, server))
                } else {
                    None
                };
                let start = now_ns();
                self.ensemble.pause(leader);
                tokio::time::sleep(t.mul_f64(*factor)).await;
                self.ensemble.resume(leader);
                if let Some((id, ..)) = victim {
                    // Long enough for the victim's session to expire, or not, and be seen.
                    tokio::time::sleep(self.timeout_of(id) + Duration::from_secs(2)).await;
                    for proxies in &self.proxies {
                        for p in proxies {
                            p.refuse(false);
                        }
                    }
                }
                Fault {
                    victim: victim.map(|(id, pid, token, _)| (id as u32, pid, token)),
                    ..record(
                        format!(
                            "server {leader} (leader) SIGSTOP {:.1} s ({factor}×T){}",
                            t.as_secs_f64() * factor,
                            victim.map_or(String::new(), |(id, _, token, server)| format!(
                                ", w{id} token {token} holding on follower {server}"
                            ))
                        ),
                        start,
                    )
                }
            }
            FaultKind::KillLeader { down_ms } => {
                let leader = self.leader().await?;
                let start = now_ns();
                let ensemble = self.ensemble.clone();
                let down = Duration::from_millis(*down_ms);
                let restarted = tokio::task::spawn_blocking(move || {
                    ensemble.kill(leader);
                    std::thread::sleep(down);
                    ensemble.restart(leader)
                })
                .await;
                let outcome = match restarted {
                    Ok(Ok(())) => "restarted".to_string(),
                    Ok(Err(e)) => format!("restart failed: {e}"),
                    Err(e) => format!("restart failed: {e}"),
                };
                record(
                    format!(
                        "server {leader} (leader) SIGKILL, down {} ms, {outcome}",
                        down.as_millis()
                    ),
                    start,
                )
            }
            FaultKind::PauseAll => {
                let start = now_ns();
                for i in 0..3 {
                    self.ensemble.pause(i);
                }
                tokio::time::sleep(t).await;
                for i in 0..3 {
                    self.ensemble.resume(i);
                }
                record(
                    format!("all three servers SIGSTOP {:.1} s", t.as_secs_f64()),
                    start,
                )
            }
            FaultKind::KillAll => {
                let start = now_ns();
                let ensemble = self.ensemble.clone();
                let restarted = tokio::task::spawn_blocking(move || {
                    for i in 0..3 {
                        ensemble.kill(i);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                    ensemble.restart_all()
                })
                .await;
                let outcome = match restarted {
                    Ok(Ok(())) => "restarted".to_string(),
                    Ok(Err(e)) => format!("restart failed: {e}"),
                    Err(e) => format!("restart failed: {e}"),
                };
                record(
                    format!("all three servers SIGKILL, down 1 s, {outcome}"),
                    start,
                )
            }
            FaultKind::DeleteParent => {
                let victim = self.long_holder().await;
                let start = now_ns();
                let deleted = delete_tree(&self.admin, &self.lock).await;
                Fault {
                    victim: victim.map(|(id, pid, token, _, _)| (id as u32, pid, token)),
                    expired_at: Some(start),
                    ..record(
                        format!(
                            "{} and its {} queue nodes deleted in one multi",
                            self.lock,
                            deleted.unwrap_or(0)
                        ),
                        start,
                    )
                }
            }
            FaultKind::IsolateLeader { symmetric } => {
                let leader = self.leader().await?;
                let (id, pid, token, node, _, _) = self.placed_holder(|s| s == leader).await?;
                let followers: Vec<usize> = (0..3).filter(|&f| f != leader).collect();
                self.pin(id, leader, &[leader]);
                let at = self.where_things_are(id).await;
                let start = now_ns();
                for &f in &followers {
                    let inbound = if *symmetric {
                        LinkFault::Drop
                    } else {
                        LinkFault::Reset
                    };
                    let _ = self.ensemble.cut(f, leader, inbound);
                    let _ = self.ensemble.cut(leader, f, LinkFault::Drop);
                }
                let expired = self.hold_partition(id, &node, &followers).await;
                Fault {
                    victim: Some((id as u32, pid, token)),
                    expired_at: expired,
                    ..record(
                        format!(
                            "w{id} token {token} on server {leader} (leader), cut off from both followers: {} {at}",
                            if *symmetric { "dropped both ways" } else { "their packets reset, its packets dropped" }
                        ),
                        start,
                    )
                }
            }
            FaultKind::OneWayFollower | FaultKind::IsolateFollower => {
                let leader = self.leader().await?;
                let (id, pid, token, node, _, server) = self.placed_holder(|s| s != leader).await?;
                let other = (0..3).find(|&o| o != leader && o != server)?;
                self.pin(id, server, &[server]);
                let at = self.where_things_are(id).await;
                let start = now_ns();
                let one_way = matches!(kind, FaultKind::OneWayFollower);
                let _ = self.ensemble.cut(server, leader, LinkFault::Drop);
                if !one_way {
                    let _ = self.ensemble.cut(leader, server, LinkFault::Drop);
                    let _ = self.ensemble.cut(server, other, LinkFault::Drop);
                    let _ = self.ensemble.cut(other, server, LinkFault::Drop);
                }
                let expired = self.hold_partition(id, &node, &[leader, other]).await;
                Fault {
                    victim: Some((id as u32, pid, token)),
                    expired_at: expired,
                    ..record(
                        if one_way {
                            format!("w{id} token {token} on server {server} (follower): its packets to the leader {leader} dropped, the leader's still arrive {at}")
                        } else {
                            format!("w{id} token {token} on server {server} (follower), cut off from both other servers both ways {at}")
                        },
                        start,
                    )
                }
            }
            FaultKind::LossyLeaderLink => {
                let leader = self.leader().await?;
                let holder = self.long_holder().await;
                let start = now_ns();
                for f in (0..3).filter(|&f| f != leader) {
                    let _ = self.ensemble.cut(leader, f, LinkFault::Lossy(0.3));
                    let _ = self.ensemble.cut(f, leader, LinkFault::Lossy(0.3));
                }
                tokio::time::sleep(t * 2).await;
                let _ = self.ensemble.heal();
                self.await_quorum().await;
                Fault {
                    victim: holder.map(|(id, pid, token, _, _)| (id as u32, pid, token)),
                    ..record(
                        format!(
                            "30% of the packets between the leader {leader} and the followers lost for {:.1} s",
                            (t * 2).as_secs_f64()
                        ),
                        start,
                    )
                }
            }
            FaultKind::SkewWorker { rate } => {
                let (id, pid, token, _, _) =
                    self.holder(Phase::Any, Duration::from_secs(8)).await?;
                self.signal(id, libc::SIGKILL);
                let start = now_ns();
                tokio::time::sleep(Duration::from_millis(200)).await;
                self.respawn(id as u32, Some(*rate));
                Fault { victim: Some((id as u32, pid, token)), ..record(format!("w{id} (token {token}) killed and restarted with its clock at {rate}× real time (libfaketime)"), start) }
            }
        };
        let mut st = self.lock_state();
        st.faults.push(fault.clone());
        st.current.clear();
        Some(fault)
    }

    /// Steers every other worker onto a server `on` accepts (the rest onto the others), then
    /// waits for a holder connected to such a server and stretches its hold (SIGUSR1) so that
    /// it lasts through the fault; returns it, with its server, once it acknowledged.
    async fn placed_holder(
        &self,
        on: impl Fn(usize) -> bool,
    ) -> Option<(usize, u32, u64, String, i64, usize)> {
        let good: Vec<usize> = (0..3).filter(|&s| on(s)).collect();
        let bad: Vec<usize> = (0..3).filter(|&s| !on(s)).collect();
        let mut sides = Vec::new();
        for (w, proxies) in self.proxies.iter().enumerate() {
            let side = if w % 2 == 0 || bad.is_empty() {
                good.clone()
            } else {
                bad.clone()
            };
            for (s, p) in proxies.iter().enumerate() {
                p.refuse(!side.contains(&s));
                if !side.contains(&s) {
                    p.reset();
                }
            }
            sides.push(side);
        }
        // Let the resets land: no worker keeps a connection where it is refused.
        let settled = now_ns() + 3_000_000_000;
        while now_ns() < settled
            && self.proxies.iter().zip(&sides).any(|(proxies, side)| {
                (0..3).any(|s| !side.contains(&s) && proxies[s].connections() > 0)
            })
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let deadline = now_ns() + 40_000_000_000;
        while now_ns() < deadline {
            let Some((id, pid, token, node, session)) =
                self.holder(Phase::Any, Duration::from_millis(500)).await
            else {
                continue;
            };
            let servers: Vec<usize> = (0..3)
                .filter(|&s| self.proxies[id][s].connections() > 0)
                .collect();
            let [server] = servers[..] else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            if !on(server) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            self.signal(id, libc::SIGUSR1);
            let acked = now_ns() + 500_000_000;
            while now_ns() < acked {
                if self.lock_state().slots[id].extended == Some(token) {
                    return Some((id, pid, token, node, session, server));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        None
    }

    /// The servers' modes and worker `id`'s open connections per server, for a fault's detail.
    async fn where_things_are(&self, id: usize) -> String {
        let ensemble = self.ensemble.clone();
        let modes = tokio::task::spawn_blocking(move || {
            (0..3)
                .map(|i| {
                    let mode = four_letter(&ensemble.server_addr(i), "srvr")
                        .and_then(|s| {
                            s.lines()
                                .find_map(|l| l.strip_prefix("Mode: ").map(str::to_owned))
                        })
                        .unwrap_or_else(|| "-".into());
                    format!("{i}:{mode}")
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .await
        .unwrap_or_default();
        let conns: Vec<String> = (0..3)
            .map(|s| self.proxies[id][s].connections().to_string())
            .collect();
        format!("[servers {modes}; w{id} connections {}]", conns.join("/"))
    }

    /// Keeps worker `id` on `server` (its other proxies refuse connections) and moves every
    /// other worker off `away` (refused and reset there), so that the victim stays on the cut
    /// side and its successors queue on the other.
    fn pin(&self, id: usize, server: usize, away: &[usize]) {
        for (s, p) in self.proxies[id].iter().enumerate() {
            p.refuse(s != server);
        }
        for (w, proxies) in self.proxies.iter().enumerate().filter(|(w, _)| *w != id) {
            let _ = w;
            for &s in away {
                proxies[s].refuse(true);
                proxies[s].reset();
            }
        }
    }

    /// Holds a partition long enough for the victim's session to expire on the majority side
    /// and for a stale leader to notice it lost its quorum (`syncLimit` ticks), plus 2 s; then
    /// heals the links and the proxies and waits for the ensemble to serve again. Returns when
    /// the majority deleted the victim's node, if it did.
    async fn hold_partition(&self, id: usize, node: &str, majority: &[usize]) -> Option<i64> {
        let start = now_ns();
        let span = self.options.tick() * self.options.sync_limit()
            + self.timeout_of(id)
            + Duration::from_secs(2);
        let hosts: Vec<String> = majority
            .iter()
            .map(|&s| self.ensemble.server_addr(s))
            .collect();
        let expired = match zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&hosts.join(","))
            .await
        {
            Ok(observer) => wait_gone(&observer, node, span).await,
            Err(_) => None,
        };
        let rest = span.saturating_sub(Duration::from_nanos((now_ns() - start).max(0) as u64));
        tokio::time::sleep(rest).await;
        let _ = self.ensemble.heal();
        for proxies in &self.proxies {
            for p in proxies {
                p.refuse(false);
            }
        }
        self.await_quorum().await;
        expired
    }

    /// Waits (up to 30 s) until all three servers serve again after a partition.
    async fn await_quorum(&self) {
        let deadline = now_ns() + 30_000_000_000;
        while now_ns() < deadline {
            let ensemble = self.ensemble.clone();
            let serving = tokio::task::spawn_blocking(move || {
                (0..3).all(|i| {
                    four_letter(&ensemble.server_addr(i), "srvr")
                        .is_some_and(|s| s.contains("Mode:"))
                })
            })
            .await
            .unwrap_or(false);
            if serving {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn leader(&self) -> Option<usize> {
        for _ in 0..100 {
            let ensemble = self.ensemble.clone();
            if let Ok(Some(i)) = tokio::task::spawn_blocking(move || ensemble.leader()).await {
                return Some(i);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// The final heal: every worker running and reachable, every server serving.
    pub(crate) async fn heal(&self) {
        let _ = self.ensemble.heal();
        for (id, proxies) in self.proxies.iter().enumerate() {
            for p in proxies {
                p.blackhole(false);
                p.delay(Duration::ZERO);
                p.refuse(false);
            }
            self.signal(id, libc::SIGCONT);
            let (alive, skew) = {
                let st = self.lock_state();
                (st.slots[id].alive, st.slots[id].skew)
            };
            if !alive || skew.is_some() {
                self.signal(id, libc::SIGKILL);
                self.respawn(id as u32, None);
            }
        }
        for i in 0..3 {
            self.ensemble.resume(i);
            let ensemble = self.ensemble.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let serving = four_letter(&ensemble.server_addr(i), "srvr")
                    .is_some_and(|s| s.contains("Mode:"));
                if !serving {
                    let _ = ensemble.restart(i);
                }
            })
            .await;
        }
    }

    /// Stops the workers and hands over what they logged.
    pub(crate) async fn finish(&self) -> Collected {
        for id in 0..self.proxies.len() {
            self.signal(id, libc::SIGCONT);
            self.signal(id, libc::SIGKILL);
        }
        let deadline = now_ns() + 5_000_000_000;
        while self.lock_state().slots.iter().any(|s| s.alive) && now_ns() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let end_at = now_ns();
        let mut st = self.lock_state();
        Collected {
            events: std::mem::take(&mut st.events),
            faults: std::mem::take(&mut st.faults),
            end_at,
        }
    }
}

fn apply(st: &mut State, id: usize, e: &Event) {
    let slot = &mut st.slots[id];
    if slot.pid != e.pid {
        return;
    }
    let token = e.body.get("token").and_then(serde_json::Value::as_u64);
    match e.ev.as_str() {
        "session" => {
            slot.session = e
                .body
                .get("session")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
        }
        "granted" if e.body.get("valid").and_then(serde_json::Value::as_bool) == Some(true) => {
            let node = e
                .body
                .get("node")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
                .to_owned();
            slot.holding = Some((token.unwrap_or(0), node));
            slot.long_since = (e.body.get("long").and_then(serde_json::Value::as_bool)
                == Some(true))
            .then_some(e.t);
            slot.cancelled = false;
            slot.phase = None;
        }
        "read" => slot.phase = Some(Phase::Think),
        "invoke" if e.body.get("kind").and_then(serde_json::Value::as_str) == Some("write") => {
            slot.phase = Some(Phase::Write)
        }
        "ok" => {
            slot.phase = None;
            if e.body.get("op").is_some() {
                st.oks += u64::from(st.slots[id].holding.is_some());
            }
        }
        "fail" => {
            slot.phase = None;
            st.refused += 1;
        }
        "cancel" => {
            slot.cancelled = true;
            st.cancels += 1;
        }
        "extended" => slot.extended = token,
        "release" | "check-failed" | "unknown" => {
            slot.holding = None;
            slot.long_since = None;
            slot.phase = None;
        }
        _ => {}
    }
}

/// Polls until `node` is gone (its session expired or it was deleted); returns when.
async fn wait_gone(admin: &zk::Client, node: &str, wait: Duration) -> Option<i64> {
    let deadline = now_ns() + wait.as_nanos() as i64;
    while now_ns() < deadline {
        if let Ok(None) = admin.check_stat(node).await {
            return Some(now_ns());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Deletes `path` and its children in one multi (retried when the queue changes under us).
async fn delete_tree(admin: &zk::Client, path: &str) -> Option<usize> {
    for _ in 0..50 {
        let children = match admin.list_children(path).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Some(0),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut multi = admin.new_multi_writer();
        for child in &children {
            let _ = multi.add_delete(&format!("{path}/{child}"), None);
        }
        let _ = multi.add_delete(path, None);
        if multi.commit().await.is_ok() {
            return Some(children.len());
        }
    }
    None
}

/// A holder pause of `factor` × T, aimed at `phase`.
fn pause(factor: f64, phase: Phase) -> FaultKind {
    FaultKind::PauseHolder { factor, phase }
}

/// The smoke schedule: the four holder pauses past T that the mutants replay come first, then
/// every other fault kind, each at least once, in seeded order.
pub(crate) fn smoke_schedule(rng: &mut Rng) -> (Vec<FaultKind>, usize) {
    use FaultKind::*;
    let mut head = vec![
        pause(2.0, Phase::Think),
        pause(2.0, Phase::Write),
        pause(4.0, Phase::Think),
        pause(2.0, Phase::Write),
    ];
    rng.shuffle(&mut head);
    let mut rest = vec![
        pause(4.0, Phase::Write),
        pause(2.0, Phase::Any),
        pause(0.5, Phase::Any),
        pause(0.5, Phase::Think),
        KillHolder,
        KillHolder,
        ExpireHolder,
        ExpireHolder,
        PartitionHolder,
        PartitionHolder,
        SlowHolder,
        PauseLeader {
            factor: 1.5,
            aimed: false,
        },
        KillLeader { down_ms: 2000 },
        KillLeader { down_ms: 0 },
        PauseAll,
        KillAll,
        DeleteParent,
        DeleteParent,
    ];
    rng.shuffle(&mut rest);
    let n = head.len();
    head.extend(rest);
    (head, n)
}

/// The read/write scenario: holders of either kind paused past T (readers included), killed,
/// expired and cut off, and a leader pause. No parent deletion: a reader's lease check cannot
/// see an operator's delete before its watch fires, so its reads would race the next writer.
pub(crate) fn rw_schedule(rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = vec![
        pause(2.0, Phase::Think),
        pause(2.0, Phase::Write),
        pause(2.0, Phase::Any),
        pause(4.0, Phase::Any),
        KillHolder,
        ExpireHolder,
        PartitionHolder,
        PauseLeader {
            factor: 1.5,
            aimed: false,
        },
    ];
    rng.shuffle(&mut faults);
    faults
}

/// The smoke run's partitions inside the ensemble: each kind once, in seeded order.
pub(crate) fn partition_schedule(rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = vec![
        IsolateLeader { symmetric: false },
        OneWayFollower,
        IsolateLeader { symmetric: true },
        IsolateFollower,
        LossyLeaderLink,
    ];
    rng.shuffle(&mut faults);
    faults
}

/// A partition inside the ensemble, for the long run's partition scenario, or a leader paused
/// longer than the pair gap under a holder on a follower (the gap's timing assumption).
pub(crate) fn partition_fault(rng: &mut Rng) -> FaultKind {
    use FaultKind::*;
    match rng.range(0, 5) {
        0 => IsolateLeader { symmetric: false },
        1 => IsolateLeader { symmetric: true },
        2 => OneWayFollower,
        3 => IsolateFollower,
        4 => PauseLeader {
            factor: 0.75,
            aimed: true,
        },
        _ => LossyLeaderLink,
    }
}

/// The long run's read/write scenario draws holder faults only (its servers are the main
/// scenario's, which pauses and kills them already): pauses of readers and writers, kills,
/// expiries, client partitions and slow links.
pub(crate) fn rw_fault(rng: &mut Rng) -> FaultKind {
    use FaultKind::*;
    let phases = [Phase::Think, Phase::Write, Phase::Any];
    match rng.range(0, 9) {
        0..=4 => PauseHolder {
            factor: [0.5, 2.0, 4.0][rng.range(0, 2) as usize],
            phase: phases[rng.range(0, 2) as usize],
        },
        5 => KillHolder,
        6 => ExpireHolder,
        7 => PartitionHolder,
        _ => SlowHolder,
    }
}

/// The long run draws each fault from every kind, skew included.
pub(crate) fn long_fault(rng: &mut Rng) -> FaultKind {
    use FaultKind::*;
    let phases = [Phase::Think, Phase::Write, Phase::Any];
    match rng.range(0, 16) {
        15 => partition_fault(rng),
        0..=4 => PauseHolder {
            factor: [0.5, 2.0, 4.0][rng.range(0, 2) as usize],
            phase: phases[rng.range(0, 2) as usize],
        },
        5 => KillHolder,
        6 => ExpireHolder,
        7 => PartitionHolder,
        8 => SlowHolder,
        9 => PauseLeader {
            factor: [0.75, 1.5][rng.range(0, 1) as usize],
            aimed: false,
        },
        10 => KillLeader {
            down_ms: [0, 2000][rng.range(0, 1) as usize],
        },
        11 => PauseAll,
        12 => KillAll,
        13 => DeleteParent,
        _ => SkewWorker {
            rate: [0.95, 1.05][rng.range(0, 1) as usize],
        },
    }
}

/// The pause between two faults of a fixed schedule.
pub(crate) fn gap(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.range(1000, 2500))
}

/// The pause between two faults of a timed (long) run: shorter, for more faults per minute.
pub(crate) fn short_gap(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.range(500, 1500))
}

pub(crate) fn elapsed_s(t0: i64) -> f64 {
    ms(t0, now_ns()) / 1000.0
}
