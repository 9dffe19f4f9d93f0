//! The cluster: the processes a run drives. ZooKeeper ensembles (each server in a network
//! namespace of its own), PostgreSQL, and each scenario's worker processes behind their own
//! TCP proxies, with what the controller knows of every worker from its events.

use crate::clock::now_ns;
use crate::event::{Ev, Event, OpKind};
use crate::fault::{Fault, Phase};
use crate::probe::Probe;
use crate::store::{OwnStore, Postgres, StoreKind};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use zkfence_testkit::{four_letter, CountingProxy, EnsembleOptions, LocalEnsemble};
use zookeeper_client as zk;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Which variant of the worker runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutant {
    None,
    FencingOff,
    WatchdogOff,
    /// The earlier lease rule (`Mutant::SyncLease`): sync replies extend the lease from their send time.
    SyncLease,
    /// Jeopardy ends on a sync's answer rather than on a committed probe that finds the node
    /// (`Mutant::ResumeWithoutProof`); its workers have a grace.
    ResumeWithoutProof,
    /// Elected workers with a lock-delay of 2T (`LockOptions::with_lock_delay`): a dead
    /// leader's successor waits 2T more than the failover bound allows.
    LockDelay,
    /// Elected workers that fence with their node's sequence number, which restarts when the
    /// election's node is recreated, instead of the epoch.
    EpochSequence,
    /// Workers that record a write in doubt (`FenceError::InDoubt`) as not applied, as a
    /// fence that called a lost commit reply a failure would.
    InDoubtAsFailed,
}

impl Mutant {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mutant::None => "none",
            Mutant::FencingOff => "fencing-off",
            Mutant::WatchdogOff => "watchdog-off",
            Mutant::SyncLease => "sync-lease",
            Mutant::ResumeWithoutProof => "resume-without-proof",
            Mutant::LockDelay => "lock-delay",
            Mutant::EpochSequence => "epoch-sequence",
            Mutant::InDoubtAsFailed => "in-doubt-as-failed",
        }
    }
}

/// What a scenario's workers hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recipe {
    /// A lock: the double-holder scenario.
    Lock,
    /// A read/write lock: most holds read.
    ReadWrite,
    /// An election: the leader works, fenced by its epoch (`FencedElection`).
    Election,
    /// Reentrant holds and multi-locks on three lock paths (`FencedMultiLock`).
    Multi,
    /// Sixteen locks held at once on one session (`crate::many`).
    Many,
}

impl Recipe {
    /// The worker's `--recipe`.
    fn name(self) -> &'static str {
        match self {
            Recipe::Lock | Recipe::ReadWrite => "lock",
            Recipe::Election => "election",
            Recipe::Multi => "multi",
            Recipe::Many => "many",
        }
    }

    /// The store rows its lock paths write: one per path.
    fn rows(self) -> u32 {
        match self {
            Recipe::Multi => 3,
            Recipe::Many => crate::many::PATHS as u32,
            _ => 1,
        }
    }
}

/// How one worker runs: its session timeout, whether it rides out disconnects, its grace;
/// an elected worker, whether it leads with `FencedElection::lead`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerMode {
    pub session_ms: u64,
    pub ride_out: bool,
    /// The grace period (`LockOptions::with_grace`), 0 for none.
    pub grace_ms: u64,
    /// Leads with `FencedElection::lead` (else it campaigns by hand).
    pub lead: bool,
}

impl WorkerMode {
    /// How it shows in the setup lines: `T=2000 ms ride-out grace 2000 ms lead()`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "T={} ms{}{}{}",
            self.session_ms,
            if self.ride_out { " ride-out" } else { "" },
            if self.grace_ms > 0 {
                format!(" grace {} ms", self.grace_ms)
            } else {
                String::new()
            },
            if self.lead { " lead()" } else { "" }
        )
    }
}

/// The servers every scenario of a run shares: the main ensemble (tick 200 ms, each server in
/// a network namespace of its own) and PostgreSQL.
pub(crate) struct Cluster {
    pub ensemble: Arc<LocalEnsemble>,
    pub pg: Postgres,
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

/// The partition ensemble of smoke and long runs: a 400 ms tick and `syncLimit=10`, so that a
/// leader cut off from its followers keeps leading (and answering its clients' syncs) for 4 s,
/// longer than a 2 s session takes to expire on the other side: the case the old lease rule
/// got wrong.
pub(crate) fn partition_ensemble() -> EnsembleOptions {
    EnsembleOptions::default()
        .with_tick(Duration::from_millis(400))
        .with_sync_limit(10)
}

/// What the controller knows of one worker process, from its events.
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
    /// The token of the hold the worker last found in jeopardy, until it is steady again.
    jeopardy: Option<u64>,
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

/// A worker that holds the lock, as its events say.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    pub id: usize,
    pub pid: u32,
    pub token: u64,
    /// Its lock node.
    pub node: String,
    pub session: i64,
}

impl Holder {
    /// The holder as a fault's victim: (worker, pid, token).
    pub(crate) fn victim(&self) -> (u32, u32, u64) {
        (self.id as u32, self.pid, self.token)
    }
}

/// One scenario: a set of workers on one lock, a fault schedule, and what they logged.
pub(crate) struct Scenario {
    pub name: String,
    pub mutant: Mutant,
    /// What the workers hold.
    pub recipe: Recipe,
    pub lock: String,
    /// The longest session timeout among the workers.
    pub session_ms: u64,
    pub seed: u64,
    pub dir: PathBuf,
    pub t0: i64,
    /// The ensemble this scenario runs on, and how it is set up.
    pub ensemble: Arc<LocalEnsemble>,
    pub options: EnsembleOptions,
    /// Each worker's proxies, one per server.
    pub proxies: Vec<Vec<CountingProxy>>,
    /// The ensemble's connect string.
    pub hosts: String,
    /// A client of this scenario's ensemble, for the controller's own reads and deletes.
    pub admin: zk::Client,
    modes: Vec<WorkerMode>,
    long_ms: u64,
    state: Arc<Mutex<State>>,
    /// The scenario's database, as the controller reads it.
    pg: String,
    /// The same as the workers reach it (through the proxy of a store of its own).
    workers_pg: String,
    /// The scenario's store of its own, if it has one (the store faults' target).
    pub own_store: Option<OwnStore>,
    /// An election scenario's availability probe.
    probe: Option<Probe>,
}

/// What a scenario returns to the report.
pub(crate) struct Collected {
    pub events: Vec<Event>,
    pub faults: Vec<Fault>,
    pub end_at: i64,
    /// The availability probe's quick commits (an election scenario's).
    pub available: Vec<crate::probe::Commit>,
}

/// What one scenario runs.
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub mutant: Mutant,
    pub recipe: Recipe,
    /// One per worker.
    pub modes: Vec<WorkerMode>,
    /// How far a holder is stretched (ms) when a partition is aimed at it.
    pub long_ms: u64,
    pub seed: u64,
    pub dir: PathBuf,
    pub ensemble: Arc<LocalEnsemble>,
    pub options: EnsembleOptions,
    /// A store server of its own, behind a proxy, rather than the run's PostgreSQL.
    pub own_store: Option<StoreKind>,
}

impl Scenario {
    /// Makes the scenario's database and proxies and connects its admin client; starts no
    /// worker yet.
    pub(crate) async fn new(cluster: &Cluster, spec: Spec<'_>) -> Result<Scenario, String> {
        let Spec {
            name,
            mutant,
            recipe,
            modes,
            long_ms,
            seed,
            dir,
            ensemble,
            options,
            own_store,
        } = spec;
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let own_store = match own_store {
            Some(kind) => Some(OwnStore::start(kind, &dir, name).await?),
            None => None,
        };
        let (pg, workers_pg) = match &own_store {
            Some(own) => (own.direct.clone(), own.proxied.clone()),
            None => {
                let pg = cluster.pg.database(name).await?;
                (pg.clone(), pg)
            }
        };
        crate::store::reset(&pg, recipe.rows()).await?;
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
        let probe = match recipe {
            Recipe::Election => {
                Some(Probe::start(&ensemble, &admin, &format!("/chaos/{name}-{seed}-probe")).await)
            }
            _ => None,
        };
        Ok(Scenario {
            admin,
            name: name.to_owned(),
            mutant,
            recipe,
            probe,
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
            workers_pg,
            own_store,
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

    /// The longest session timeout among the workers.
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.session_ms)
    }

    /// Worker `id`'s session timeout.
    pub(crate) fn timeout_of(&self, id: usize) -> Duration {
        Duration::from_millis(self.modes[id].session_ms)
    }

    /// Worker `id`'s grace period (zero: none).
    pub(crate) fn grace_of(&self, id: usize) -> Duration {
        Duration::from_millis(self.modes[id].grace_ms)
    }

    /// Worker `id`'s command line: this executable's `worker` subcommand, with libfaketime at
    /// `skew` when given.
    fn worker_command(
        &self,
        id: u32,
        skew: Option<f64>,
    ) -> Result<tokio::process::Command, String> {
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
            .args(["--pg", &self.workers_pg])
            .args(["--lock", &self.lock])
            .args(["--session-ms", &mode.session_ms.to_string()])
            .args(["--mutant", self.mutant.name()])
            .args(["--seed", &self.seed.to_string()])
            .args(["--long-ms", &self.long_ms.to_string()])
            .args(["--grace-ms", &mode.grace_ms.to_string()])
            .args(["--recipe", self.recipe.name()])
            .args((self.recipe == Recipe::ReadWrite).then_some("--rw"))
            .args(mode.lead.then_some("--lead"))
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
        Ok(cmd)
    }

    /// Starts worker `id` (again), under libfaketime at `skew` when given.
    pub(crate) fn spawn_worker(&self, id: u32, skew: Option<f64>) -> Result<(), String> {
        let mut child = self
            .worker_command(id, skew)?
            .spawn()
            .map_err(|e| format!("spawn worker: {e}"))?;
        let pid = child.id().unwrap_or(0);
        self.lock_state().slots[id as usize] = Slot {
            pid,
            alive: true,
            skew,
            ..Slot::default()
        };
        let stdout = child.stdout.take();
        let state = self.state.clone();
        let path = self.dir.join(format!("worker-{id}.jsonl"));
        tokio::spawn(async move {
            if let Some(stdout) = stdout {
                follow(stdout, &path, &state, id as usize).await;
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
    pub(crate) fn respawn(&self, id: u32, skew: Option<f64>) {
        if let Err(err) = self.spawn_worker(id, skew) {
            println!("  chaos: could not restart worker {id}: {err}");
        }
    }

    pub(crate) fn signal(&self, id: usize, signal: i32) {
        let pid = self.lock_state().slots[id].pid;
        if pid > 0 {
            // SAFETY: kill(2) on a worker we started.
            unsafe { libc::kill(pid as i32, signal) };
        }
    }

    /// Waits until some live, unpaused worker holds the lock (in `phase`, when not `Any`).
    pub(crate) async fn holder(&self, phase: Phase, wait: Duration) -> Option<Holder> {
        let deadline = now_ns() + wait.as_nanos() as i64;
        loop {
            if let Some(holder) = self.find_holder(phase) {
                return Some(holder);
            }
            if now_ns() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A live, unpaused, uncancelled worker holding the lock in `phase`, if there is one now.
    fn find_holder(&self, phase: Phase) -> Option<Holder> {
        let st = self.lock_state();
        let (id, s) = st.slots.iter().enumerate().find(|(_, s)| {
            s.alive
                && !s.paused
                && !s.cancelled
                && s.holding.is_some()
                && match phase {
                    Phase::Any => true,
                    Phase::Long => s.long_since.is_some_and(|t| now_ns() - t < 1_000_000_000),
                    _ => s.phase == Some(phase),
                }
        })?;
        let (token, node) = s.holding.clone().unwrap_or_default();
        Some(Holder {
            id,
            pid: s.pid,
            token,
            node,
            session: s.session,
        })
    }

    /// Worker `id`'s phase, as its last event says.
    pub(crate) fn phase_of(&self, id: usize) -> Option<Phase> {
        self.lock_state().slots[id].phase
    }

    /// Marks worker `id` paused (SIGSTOPped) or not: a paused worker is no fault's target.
    pub(crate) fn set_paused(&self, id: usize, paused: bool) {
        self.lock_state().slots[id].paused = paused;
    }

    /// The clock rate worker `id` runs at under libfaketime, if skewed.
    pub(crate) fn skew_of(&self, id: usize) -> Option<f64> {
        self.lock_state().slots[id].skew
    }

    /// Whether worker `id`'s process is running.
    pub(crate) fn alive(&self, id: usize) -> bool {
        self.lock_state().slots[id].alive
    }

    /// The token of the hold worker `id` last stretched on SIGUSR1.
    pub(crate) fn extended(&self, id: usize) -> Option<u64> {
        self.lock_state().slots[id].extended
    }

    /// Whether worker `id`'s hold of `token` is in jeopardy or over (lost, released, or the
    /// process gone).
    pub(crate) fn suspended(&self, id: usize, token: u64) -> bool {
        let st = self.lock_state();
        let slot = &st.slots[id];
        slot.jeopardy == Some(token)
            || slot.cancelled
            || slot.holding.as_ref().map(|(t, _)| *t) != Some(token)
    }

    /// Notes the fault under way, for the progress line.
    pub(crate) fn fault_started(&self, name: &str) {
        self.lock_state().current = name.to_owned();
    }

    /// Records a fault that ended.
    pub(crate) fn fault_ended(&self, fault: Fault) {
        let mut st = self.lock_state();
        st.faults.push(fault);
        st.current.clear();
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

    /// (increments, refused writes, cancels, faults, the fault under way) so far.
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
        let available = self.probe.as_ref().map(Probe::stop).unwrap_or_default();
        let mut st = self.lock_state();
        Collected {
            events: std::mem::take(&mut st.events),
            faults: std::mem::take(&mut st.faults),
            end_at,
            available,
        }
    }

    /// The current leader, asked for up to 10 s.
    pub(crate) async fn leader(&self) -> Option<usize> {
        for _ in 0..100 {
            let ensemble = self.ensemble.clone();
            if let Ok(Some(i)) = tokio::task::spawn_blocking(move || ensemble.leader()).await {
                return Some(i);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Waits (up to 30 s) until all three servers serve again after a partition.
    pub(crate) async fn await_quorum(&self) {
        let deadline = now_ns() + 30_000_000_000;
        while now_ns() < deadline {
            let ensemble = self.ensemble.clone();
            let serving =
                tokio::task::spawn_blocking(move || (0..3).all(|i| serving(&ensemble, i)))
                    .await
                    .unwrap_or(false);
            if serving {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each server's mode (`0:follower 1:leader 2:follower`, `-` when it does not answer).
    pub(crate) async fn server_modes(&self) -> String {
        let ensemble = self.ensemble.clone();
        tokio::task::spawn_blocking(move || {
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
        .unwrap_or_default()
    }

    /// Resumes server `i` and restarts it if it does not serve.
    pub(crate) async fn revive_server(&self, i: usize) {
        self.ensemble.resume(i);
        let ensemble = self.ensemble.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if !serving(&ensemble, i) {
                let _ = ensemble.restart(i);
            }
        })
        .await;
    }
}

/// Whether server `i` answers `srvr` with a mode (it serves).
fn serving(ensemble: &LocalEnsemble, i: usize) -> bool {
    four_letter(&ensemble.server_addr(i), "srvr").is_some_and(|s| s.contains("Mode:"))
}

/// Copies a worker's stdout to its log file and applies each event to the state, until the
/// worker's stdout closes.
async fn follow(stdout: tokio::process::ChildStdout, path: &Path, state: &Mutex<State>, id: usize) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok();
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(f) = file.as_mut() {
            let _ = writeln!(f, "{line}");
        }
        let Ok(event) = serde_json::from_str::<Event>(&line) else {
            continue;
        };
        let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
        apply(&mut st, id, &event);
        st.events.push(event);
    }
}

/// What an event tells about its worker: its session, what it holds and in which phase, and
/// the scenario's counts.
fn apply(st: &mut State, id: usize, e: &Event) {
    let slot = &mut st.slots[id];
    if slot.pid != e.pid {
        return;
    }
    match &e.ev {
        Ev::Session { session, .. } => slot.session = *session,
        Ev::Granted {
            token,
            node,
            long,
            valid: true,
            ..
        } => {
            slot.holding = Some((*token, node.clone()));
            slot.long_since = long.then_some(e.t);
            slot.cancelled = false;
            slot.phase = None;
        }
        Ev::Read { .. } => slot.phase = Some(Phase::Think),
        Ev::Invoke {
            kind: OpKind::Write,
            ..
        } => slot.phase = Some(Phase::Write),
        Ev::Ok { .. } => {
            slot.phase = None;
            st.oks += u64::from(st.slots[id].holding.is_some());
        }
        Ev::Fail { .. } => {
            slot.phase = None;
            st.refused += 1;
        }
        Ev::Cancel { .. } => {
            slot.cancelled = true;
            st.cancels += 1;
        }
        Ev::Extended { token } => slot.extended = Some(*token),
        Ev::Jeopardy { token } => slot.jeopardy = Some(*token),
        Ev::Steady { .. } => slot.jeopardy = None,
        Ev::Release { .. }
        | Ev::CheckFailed { .. }
        | Ev::Unknown { .. }
        | Ev::NotApplied { .. } => {
            slot.holding = None;
            slot.long_since = None;
            slot.phase = None;
        }
        _ => {}
    }
}
