//! The schedule: which scenarios a run has, their workers, and the faults each one gets,
//! drawn from the run's seeded generator (the same seed gives the same schedule).

use crate::cluster::{partition_ensemble, Mutant, Recipe, WorkerMode};
use crate::fault::{FaultKind, Phase};
use crate::mode::{FailoverArgs, Mode, PartitionArgs, RecipeArgs, RunArgs};
use crate::rng::Rng;
use crate::store::StoreKind;
use std::time::Duration;
use zkfence_testkit::EnsembleOptions;

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
        StaleLeaderReconnect,
    ];
    rng.shuffle(&mut faults);
    faults
}

/// Smoke's election scenario: the leader paused past T in its think and its write phase and
/// killed, the ZooKeeper leader paused past T, the elected leader on a ZooKeeper leader cut
/// off from its followers, every server killed; in seeded order.
pub(crate) fn election_schedule(rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = vec![
        pause(2.0, Phase::Think),
        pause(2.0, Phase::Write),
        KillHolder,
        PauseLeader {
            factor: 1.5,
            aimed: false,
        },
        IsolateLeader { symmetric: false },
        KillAll,
    ];
    rng.shuffle(&mut faults);
    faults
}

/// Smoke's multi-lock scenario: its holders (of a nested hold, a multi-lock, or both) paused
/// past T in either phase, killed, expired, cut off, and the lock paths' parent deleted under
/// them; in seeded order.
pub(crate) fn multi_schedule(rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = vec![
        pause(2.0, Phase::Write),
        pause(4.0, Phase::Think),
        KillHolder,
        ExpireHolder,
        PartitionHolder,
        DeleteParent,
    ];
    rng.shuffle(&mut faults);
    faults
}

/// Smoke's store scenario, on a store server of its own: the store paused for 2T, killed and
/// restarted, and its reply to a commit cut twice, with a holder paused for 2T in its write
/// phase among them; in seeded order. A store that loses everything in a restart
/// ([`for_store`]) answers server errors in its stead.
pub(crate) fn store_schedule(rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = vec![
        StorePause { factor: 2.0 },
        StoreRestart,
        StoreCut,
        StoreCut,
        pause(2.0, Phase::Write),
    ];
    rng.shuffle(&mut faults);
    faults
}

/// `faults` for a `kind` store: as they are, but for a store that loses everything in a
/// restart (moto), whose restart becomes two server errors, one after its write applied and
/// one before it was sent.
pub(crate) fn for_store(kind: StoreKind, faults: &[FaultKind]) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut mapped = Vec::new();
    for fault in faults {
        match fault {
            StoreRestart if !kind.survives_restart() => {
                mapped.extend([StoreError { applied: true }, StoreError { applied: false }])
            }
            fault => mapped.push(fault.clone()),
        }
    }
    mapped
}

/// Every fault kind but clock skew, each once: what `chaos/run election` and `chaos/run
/// multi` put their scenario through, `--runs` times. Holder faults (pauses of 0.5, 2 and
/// 4 T, kills, expiries, cut-offs, slow links, suspends, slow commits), server faults (the
/// leader paused, killed or restarted, all of them paused or killed, the parent deleted),
/// every partition inside the ensemble, and the failover faults.
pub(crate) fn every_kind() -> Vec<FaultKind> {
    use FaultKind::*;
    vec![
        pause(0.5, Phase::Any),
        pause(2.0, Phase::Think),
        pause(2.0, Phase::Write),
        pause(4.0, Phase::Any),
        KillHolder,
        ExpireHolder,
        PartitionHolder,
        SlowHolder,
        ClientSuspend,
        FsyncStall,
        PauseLeader {
            factor: 1.5,
            aimed: false,
        },
        PauseLeader {
            factor: 0.75,
            aimed: true,
        },
        LeaderGcPause { factor: 0.8 },
        KillLeader { down_ms: 2000 },
        KillLeader { down_ms: 0 },
        KillLeaderFollowers,
        RollingRestart,
        PauseAll,
        KillAll,
        DeleteParent,
        IsolateLeader { symmetric: false },
        IsolateLeader { symmetric: true },
        OneWayFollower,
        IsolateFollower,
        LossyLeaderLink,
        StaleLeaderReconnect,
        LeaderSilent,
    ]
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

/// The long run's store scenarios draw the store's faults (the store paused for 0.5 or 2 T,
/// killed and restarted, its replies cut under a write) and the holder faults a store meets
/// with them (a holder paused for 2T in its write phase, or killed).
pub(crate) fn store_fault(rng: &mut Rng) -> FaultKind {
    use FaultKind::*;
    match rng.range(0, 5) {
        0 => StorePause {
            factor: [0.5, 2.0][rng.range(0, 1) as usize],
        },
        1 => StoreRestart,
        2 | 3 => StoreCut,
        4 => pause(2.0, Phase::Write),
        _ => KillHolder,
    }
}

/// The long run's object store scenario draws as [`store_fault`] does, with a server error
/// (after the write applied, or before it was sent) where a restart would lose the store.
pub(crate) fn object_store_fault(rng: &mut Rng) -> FaultKind {
    match store_fault(rng) {
        FaultKind::StoreRestart => FaultKind::StoreError {
            applied: rng.range(0, 1) == 0,
        },
        fault => fault,
    }
}

/// A leader GC pause of 0.6–1.0 × T (in tenths).
fn gc_pause(rng: &mut Rng) -> FaultKind {
    FaultKind::LeaderGcPause {
        factor: 0.6 + 0.1 * rng.range(0, 4) as f64,
    }
}

/// The failover experiment's faults: each kind `runs` times, in seeded order.
pub(crate) fn failover_schedule(runs: u32, rng: &mut Rng) -> Vec<FaultKind> {
    use FaultKind::*;
    let mut faults = Vec::new();
    for _ in 0..runs {
        faults.extend([
            RollingRestart,
            KillLeaderFollowers,
            LeaderSilent,
            gc_pause(rng),
            FsyncStall,
            ClientSuspend,
        ]);
    }
    rng.shuffle(&mut faults);
    faults
}

/// The pause between two faults of a fixed schedule.
pub(crate) fn gap(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.range(1000, 2500))
}

/// The pause between two faults of a timed (long) run: shorter, for more faults per minute.
pub(crate) fn short_gap(rng: &mut Rng) -> Duration {
    Duration::from_millis(rng.range(500, 1500))
}

/// A scenario's faults: a fixed list, or drawn for a while.
pub(crate) enum Plan {
    Fixed(Vec<FaultKind>),
    /// Faults drawn for `minutes` by `draw`.
    Timed {
        minutes: f64,
        draw: fn(&mut Rng) -> FaultKind,
    },
}

/// One scenario to run: its workers, the ensemble it runs on, its faults.
pub(crate) struct ScenarioPlan {
    pub name: &'static str,
    pub mutant: Mutant,
    /// What its workers hold.
    pub recipe: Recipe,
    pub modes: Vec<WorkerMode>,
    /// How far a holder is stretched (ms) when a partition is aimed at it: the hold must
    /// outlast the whole fault, so that a stale holder's checks are seen.
    pub long_ms: u64,
    /// On the partition ensemble rather than the main one.
    pub partition: bool,
    pub plan: Plan,
    /// Runs side by side with the scenario before it (its gaps drawn from a generator of its
    /// own): see [`side_by_side`].
    pub alongside: bool,
    /// Writes to a store server of its own, which the store faults pause, crash and cut off;
    /// to the run's PostgreSQL otherwise.
    pub own_store: Option<StoreKind>,
}

impl ScenarioPlan {
    /// The generator of a scenario that runs alongside another: the run's seed and its name.
    pub(crate) fn own_rng(&self, seed: u64) -> Rng {
        let salt = (self.name.bytes()).fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
        });
        Rng::new(seed ^ salt)
    }
}

/// The plans in groups that run side by side: a plan `alongside` joins the group of the one
/// before it. Scenarios side by side share the machine (and, on one ensemble, its faults):
/// the smoke run's election and multi-lock scenarios, each on an ensemble of its own, and its
/// mutants of them, which must fail whatever runs beside them.
pub(crate) fn side_by_side(plans: Vec<ScenarioPlan>) -> Vec<Vec<ScenarioPlan>> {
    let mut groups: Vec<Vec<ScenarioPlan>> = Vec::new();
    for plan in plans {
        match groups.last_mut() {
            Some(group) if plan.alongside => group.push(plan),
            _ => groups.push(vec![plan]),
        }
    }
    groups
}

/// The smoke run's plans in two lanes, one per ensemble: the groups of [`side_by_side`], each
/// split into its scenarios on the main ensemble and those on the partition one. The two
/// lanes run side by side: no fault of one reaches the other's ensemble, and each store
/// scenario has a server of its own.
pub(crate) fn lanes(plans: Vec<ScenarioPlan>) -> (Vec<Vec<ScenarioPlan>>, Vec<Vec<ScenarioPlan>>) {
    let (mut main, mut partition) = (Vec::new(), Vec::new());
    for group in side_by_side(plans) {
        let (on_partition, on_main): (Vec<_>, Vec<_>) =
            group.into_iter().partition(|p| p.partition);
        for (lane, part) in [(&mut main, on_main), (&mut partition, on_partition)] {
            if !part.is_empty() {
                lane.push(part);
            }
        }
    }
    (main, partition)
}

/// A scenario on the main ensemble with a plain lock, no mutant and no stretching, run alone;
/// the callers change what differs.
fn scenario(name: &'static str, modes: Vec<WorkerMode>, plan: Plan) -> ScenarioPlan {
    ScenarioPlan {
        name,
        mutant: Mutant::None,
        recipe: Recipe::Lock,
        modes,
        long_ms: 0,
        partition: false,
        plan,
        alongside: false,
        own_store: None,
    }
}

/// A worker with session timeout `session_ms`, riding out disconnects or not, without a grace.
fn worker(session_ms: u64, ride_out: bool) -> WorkerMode {
    WorkerMode {
        session_ms,
        ride_out,
        grace_ms: 0,
        lead: false,
    }
}

/// `n` workers with session timeout `ms`, every other one riding out disconnects if `mixed`.
fn modes(n: u32, ms: u64, mixed: bool) -> Vec<WorkerMode> {
    (0..n).map(|i| worker(ms, mixed && i % 2 == 1)).collect()
}

/// The same workers, those that ride out disconnects with a grace as long as their session
/// timeout.
fn with_grace_when_riding_out(modes: Vec<WorkerMode>) -> Vec<WorkerMode> {
    modes
        .into_iter()
        .map(|m| WorkerMode {
            grace_ms: if m.ride_out { m.session_ms } else { 0 },
            ..m
        })
        .collect()
}

/// The same workers, each with a grace as long as its session timeout.
fn with_grace_of_t(modes: Vec<WorkerMode>) -> Vec<WorkerMode> {
    modes
        .into_iter()
        .map(|m| WorkerMode {
            grace_ms: m.session_ms,
            ..m
        })
        .collect()
}

/// The partition scenario's workers: session timeouts from 2 to 10 ticks of 400 ms (to 20 in
/// long runs), half of them riding out disconnects.
fn partition_modes(long: bool) -> Vec<WorkerMode> {
    let last = if long { 8000 } else { 4000 };
    [(800, false), (2000, true), (4000, false), (last, true)]
        .into_iter()
        .map(|(session_ms, ride_out)| worker(session_ms, ride_out))
        .collect()
}

/// A stretch long enough for a hold to outlast a partition fault on `options` with sessions
/// up to `t_ms` (the fault lasts `syncLimit` ticks + T + 2 s).
fn long_hold_ms(options: &EnsembleOptions, t_ms: u64) -> u64 {
    (options.tick() * options.sync_limit()).as_millis() as u64 + t_ms + 4000
}

/// The run's scenarios, and the partition ensemble's settings.
pub(crate) fn plans(mode: &Mode, rng: &mut Rng) -> (Vec<ScenarioPlan>, EnsembleOptions) {
    match mode {
        Mode::Smoke(args) => (smoke_plans(args, rng), partition_ensemble()),
        Mode::Long(args) => (long_plans(args, rng), partition_ensemble()),
        Mode::Partition(args) => partition_plans(args, rng),
        Mode::Failover(args) => failover_plans(args, rng),
        Mode::Election(args) => (election_plans(args, rng), partition_ensemble()),
        Mode::Multi(args) => (multi_plans(args, rng), partition_ensemble()),
    }
}

/// Smoke: the main, read/write, partition and failover scenarios with fixed schedules, the
/// election and multi-lock scenarios side by side (each on an ensemble of its own), then the
/// mutants in pairs side by side: fencing-off and watchdog-off replay the main schedule's head
/// on the main ensemble, beside sync-lease (two asymmetric leader isolations) and
/// resume-without-proof (two stale-leader reconnects) on the partition ensemble; then the
/// election and multi-lock mutants side by side ([`recipe_mutants`]); last a store scenario
/// and its mutant. The run plays them in two lanes side by side, one per ensemble
/// ([`lanes`]).
fn smoke_plans(args: &RunArgs, rng: &mut Rng) -> Vec<ScenarioPlan> {
    let mut plans = lock_smoke_plans(args, rng);
    let election = election_schedule(rng);
    let multi = multi_schedule(rng);
    let recipes = [
        election_scenario(args.workers, args.session_ms, Plan::Fixed(election)),
        ScenarioPlan {
            alongside: true,
            ..multi_scenario(args.workers, args.session_ms, true, Plan::Fixed(multi))
        },
    ];
    // Before the lock mutants, which are last unless skipped.
    let at = plans.len() - if args.no_mutants { 0 } else { 4 };
    plans.splice(at..at, recipes);
    if !args.no_mutants {
        plans.extend(recipe_mutants(3, args.session_ms, true, true));
    }
    // Last, and drawn last: the other scenarios' schedules and gaps are what they were. One
    // store of its own, drawn by the seed (or those `--only` names): the smoke run keeps its
    // time by choosing, the long run has them all.
    let kinds = StoreKind::ALL;
    let drawn = kinds[rng.range(0, kinds.len() as u64 - 1) as usize];
    let mut named: Vec<StoreKind> = (kinds.into_iter())
        .filter(|k| args.only.iter().any(|o| o == k.scenario()))
        .collect();
    if named.is_empty() {
        named.push(drawn);
    }
    // On the partition ensemble, whose lane ([`lanes`]) is the shorter one: the store
    // scenarios' faults are the store's, and T = 2 s is 5 of its ticks.
    let faults = store_schedule(rng);
    for &kind in &named {
        let plan = Plan::Fixed(for_store(kind, &faults));
        plans.push(ScenarioPlan {
            partition: true,
            ..store_scenario(args.workers, args.session_ms, kind, plan)
        });
    }
    if !args.no_mutants {
        // Writes in doubt recorded as not applied: three reply cuts land commits in doubt on
        // the same store, each applied, and each then fails "no failed write applied".
        let cuts = Plan::Fixed(vec![FaultKind::StoreCut; 3]);
        plans.push(ScenarioPlan {
            name: "mutant-in-doubt-as-failed",
            mutant: Mutant::InDoubtAsFailed,
            partition: true,
            ..store_scenario(args.workers, args.session_ms, named[0], cuts)
        });
    }
    plans
}

/// The store scenario: `n` lock workers with T = `ms` on a `kind` server of its own (the store
/// faults' target), on the main ensemble.
fn store_scenario(n: u32, ms: u64, kind: StoreKind, plan: Plan) -> ScenarioPlan {
    ScenarioPlan {
        own_store: Some(kind),
        ..scenario(kind.scenario(), modes(n, ms, false), plan)
    }
}

/// The election scenario: `n` elected workers with T = `ms` (every other one leading with
/// `lead()`), on the main ensemble, stretched through partitions.
fn election_scenario(n: u32, ms: u64, plan: Plan) -> ScenarioPlan {
    ScenarioPlan {
        recipe: Recipe::Election,
        long_ms: long_hold_ms(&EnsembleOptions::default(), ms),
        ..scenario("election", electors(n, ms, true), plan)
    }
}

/// The multi-lock scenario: `n` workers with T = `ms` taking reentrant holds and multi-locks,
/// on the main ensemble or the partition one, stretched through partitions.
fn multi_scenario(n: u32, ms: u64, partition: bool, plan: Plan) -> ScenarioPlan {
    let options = if partition {
        partition_ensemble()
    } else {
        EnsembleOptions::default()
    };
    ScenarioPlan {
        recipe: Recipe::Multi,
        partition,
        long_ms: long_hold_ms(&options, ms),
        ..scenario("multi", modes(n, ms, false), plan)
    }
}

/// `n` elected workers with session timeout `ms`; every other one leads with `lead()` if
/// `lead`, the others campaign by hand.
fn electors(n: u32, ms: u64, lead: bool) -> Vec<WorkerMode> {
    (0..n)
        .map(|i| WorkerMode {
            lead: lead && i % 2 == 1,
            ..worker(ms, false)
        })
        .collect()
}

/// The mutants of the election and multi-lock scenarios, side by side, `n` workers each with
/// T = `ms`; each must fail on the invariant it attacks:
/// - `mutant-election-fencing-off`: elected workers (by hand) whose store statements drop the
///   epoch comparison, two leaders paused past T in their write phase: a stale epoch accepted;
/// - `mutant-lock-delay`: elected workers with a lock-delay of 2T, two leaders killed: the
///   failover bound;
/// - `mutant-epoch-sequence`: elected workers that fence with their node's sequence number,
///   the election's node deleted and recreated: epochs do not increase;
/// - `mutant-election-sync-lease` (on the partition ensemble): elected workers with the earlier
///   lease rule, two elected leaders on a ZooKeeper leader cut off from its followers: two
///   leaders passing their checks at once;
/// - with `multi`, `mutant-multi-fencing-off` (on the partition ensemble): multi-lock workers
///   without the fence, four holders paused for 3T in their write phase: a stale token
///   accepted on a lock path.
fn recipe_mutants(n: u32, ms: u64, multi: bool, sync_lease: bool) -> Vec<ScenarioPlan> {
    let elected = |name, mutant, lead, faults| {
        ScenarioPlan {
            mutant,
            alongside: true,
            ..election_scenario(n, ms, Plan::Fixed(faults))
        }
        .named(name, electors(n, ms, lead))
    };
    let write_pauses = || vec![pause(2.0, Phase::Write); 2];
    let mut plans = vec![
        elected(
            "mutant-election-fencing-off",
            Mutant::FencingOff,
            false,
            write_pauses(),
        ),
        elected(
            "mutant-lock-delay",
            Mutant::LockDelay,
            true,
            vec![FaultKind::KillHolder; 2],
        ),
        elected(
            "mutant-epoch-sequence",
            Mutant::EpochSequence,
            false,
            vec![FaultKind::DeleteParent],
        ),
    ];
    if sync_lease {
        let isolations = vec![FaultKind::IsolateLeader { symmetric: false }; 2];
        plans.push(ScenarioPlan {
            partition: true,
            long_ms: long_hold_ms(&partition_ensemble(), 2000),
            modes: (0..n).map(|i| worker(2000, i % 2 == 1)).collect(),
            ..elected(
                "mutant-election-sync-lease",
                Mutant::SyncLease,
                false,
                isolations,
            )
        });
    }
    if multi {
        // Four pauses of 3T, not two of 2T: a multi-lock worker writes one of three paths, so a successor
        // may not write the paused holder's path before it wakes (the stale write then lands
        // in order, and the mutant goes uncaught: seed 707274, one smoke run in eight).
        let faults = Plan::Fixed(vec![pause(3.0, Phase::Write); 4]);
        plans.push(ScenarioPlan {
            mutant: Mutant::FencingOff,
            alongside: true,
            ..multi_scenario(n, ms, true, faults)
                .named("mutant-multi-fencing-off", modes(n, ms, false))
        });
    }
    plans[0].alongside = false;
    plans
}

impl ScenarioPlan {
    /// The same plan under another name, with other workers.
    fn named(self, name: &'static str, modes: Vec<WorkerMode>) -> ScenarioPlan {
        ScenarioPlan {
            name,
            modes,
            ..self
        }
    }
}

/// Election: the election scenario (four elected workers, two leading with `lead()`, T =
/// `--session-ms`) under every fault kind `--runs` times in seeded order, on the main
/// ensemble; then the election mutants side by side.
fn election_plans(args: &RecipeArgs, rng: &mut Rng) -> Vec<ScenarioPlan> {
    let faults = repeated(args.runs, rng);
    let mut plans = vec![election_scenario(
        args.workers,
        args.session_ms,
        Plan::Fixed(faults),
    )];
    plans.extend(recipe_mutants(args.workers, args.session_ms, false, true));
    plans
}

/// Multi: the multi-lock scenario under every fault kind `--runs` times in seeded order, on
/// the main ensemble; then its mutant.
fn multi_plans(args: &RecipeArgs, rng: &mut Rng) -> Vec<ScenarioPlan> {
    let faults = repeated(args.runs, rng);
    let (n, ms) = (args.workers, args.session_ms);
    let multi = multi_scenario(n, ms, false, Plan::Fixed(faults));
    let mutant = ScenarioPlan {
        mutant: Mutant::FencingOff,
        ..multi_scenario(n, ms, false, Plan::Fixed(vec![pause(3.0, Phase::Write); 4]))
    }
    .named("mutant-multi-fencing-off", modes(n, ms, false));
    vec![multi, mutant]
}

/// Every fault kind ([`every_kind`]) `runs` times, in seeded order.
fn repeated(runs: u32, rng: &mut Rng) -> Vec<FaultKind> {
    let mut faults: Vec<FaultKind> = (0..runs).flat_map(|_| every_kind()).collect();
    rng.shuffle(&mut faults);
    faults
}

/// Smoke's scenarios of the lock and the read/write lock: main, read-write, partition and
/// failover, and (unless skipped) their four mutants.
fn lock_smoke_plans(args: &RunArgs, rng: &mut Rng) -> Vec<ScenarioPlan> {
    let (schedule, head) = smoke_schedule(rng);
    let rw = rw_schedule(rng);
    let long = long_hold_ms(&partition_ensemble(), 4000);
    let workers = || modes(args.workers, args.session_ms, false);
    let mut plans = vec![
        scenario("main", workers(), Plan::Fixed(schedule.clone())),
        ScenarioPlan {
            recipe: Recipe::ReadWrite,
            ..scenario("read-write", workers(), Plan::Fixed(rw))
        },
        ScenarioPlan {
            long_ms: long,
            partition: true,
            ..scenario(
                "partition",
                with_grace_when_riding_out(partition_modes(false)),
                Plan::Fixed(partition_schedule(rng)),
            )
        },
        smoke_failover(args, rng),
    ];
    if args.no_mutants {
        return plans;
    }
    // The lock mutants in two pairs, each pair side by side on the two ensembles (a mutant must
    // fail whatever runs beside it): fencing-off with sync-lease, watchdog-off with
    // resume-without-proof.
    let head = schedule[..head].to_vec();
    let on_main = |name, mutant| ScenarioPlan {
        mutant,
        ..scenario(name, workers(), Plan::Fixed(head.clone()))
    };
    let isolations = vec![FaultKind::IsolateLeader { symmetric: false }; 2];
    let sync_lease = ScenarioPlan {
        mutant: Mutant::SyncLease,
        long_ms: long,
        partition: true,
        alongside: true,
        ..scenario(
            "mutant-sync-lease",
            modes(args.workers, 2000, true),
            Plan::Fixed(isolations),
        )
    };
    // Jeopardy that ends on a sync's answer: a holder that reaches a stale leader while in
    // jeopardy (isolate-leader-asym cannot show it: there the holder's last probe, a write, is
    // stuck on that leader, and its session's later requests wait behind it). Workers that
    // ride out disconnects, T = 4 s and a grace of T.
    let riding = (0..args.workers).map(|_| worker(4000, true)).collect();
    let resume = ScenarioPlan {
        mutant: Mutant::ResumeWithoutProof,
        long_ms: long,
        partition: true,
        alongside: true,
        ..scenario(
            "mutant-resume-without-proof",
            with_grace_of_t(riding),
            Plan::Fixed(vec![FaultKind::StaleLeaderReconnect; 2]),
        )
    };
    plans.extend([
        on_main("mutant-fencing-off", Mutant::FencingOff),
        sync_lease,
        on_main("mutant-watchdog-off", Mutant::WatchdogOff),
        resume,
    ]);
    plans
}

/// Smoke's failover scenario, on the main ensemble: a rolling restart and a leader killed
/// under a holder on a follower, in seeded order, against workers with a grace of T that ride
/// out disconnects.
fn smoke_failover(args: &RunArgs, rng: &mut Rng) -> ScenarioPlan {
    let mut faults = vec![FaultKind::RollingRestart, FaultKind::KillLeaderFollowers];
    rng.shuffle(&mut faults);
    let workers = (0..args.workers)
        .map(|_| worker(args.session_ms, true))
        .collect();
    ScenarioPlan {
        long_ms: long_hold_ms(&EnsembleOptions::default(), args.session_ms),
        ..scenario("failover", with_grace_of_t(workers), Plan::Fixed(faults))
    }
}

/// Long: the main, read/write, partition and many-locks scenarios side by side, each drawing
/// its faults for `--minutes`, and each worker its lease configuration: riding out disconnects
/// or not, and a grace of none, T or 2T, so that holds go into jeopardy and out of it.
fn long_plans(args: &RunArgs, rng: &mut Rng) -> Vec<ScenarioPlan> {
    let timed = |draw| Plan::Timed {
        minutes: args.minutes,
        draw,
    };
    let (n, ms) = (args.workers, args.session_ms);
    let partition_workers = (partition_modes(true).into_iter())
        .map(|m| WorkerMode {
            grace_ms: draw_grace(m.session_ms, rng),
            ..m
        })
        .collect();
    vec![
        ScenarioPlan {
            // Long runs draw partitions here too: stretch their victims.
            long_ms: long_hold_ms(&EnsembleOptions::default(), ms),
            ..scenario("main", drawn_modes(n, ms, rng), timed(long_fault))
        },
        ScenarioPlan {
            recipe: Recipe::ReadWrite,
            ..scenario("read-write", drawn_modes(n, ms, rng), timed(rw_fault))
        },
        ScenarioPlan {
            long_ms: long_hold_ms(&partition_ensemble(), 8000),
            partition: true,
            ..scenario("partition", partition_workers, timed(partition_fault))
        },
        ScenarioPlan {
            recipe: Recipe::Many,
            long_ms: long_hold_ms(&EnsembleOptions::default(), ms),
            ..scenario("many", drawn_modes(n.min(3), ms, rng), timed(long_fault))
        },
        // Every store of its own, each under its store's faults and holder faults.
        store_scenario(n.min(3), ms, StoreKind::Postgres, timed(store_fault)),
        store_scenario(n.min(3), ms, StoreKind::MariaDb, timed(store_fault)),
        store_scenario(n.min(3), ms, StoreKind::Redis, timed(store_fault)),
        store_scenario(n.min(3), ms, StoreKind::ZooKeeper, timed(store_fault)),
        store_scenario(
            n.min(3),
            ms,
            StoreKind::ObjectStore,
            timed(object_store_fault),
        ),
    ]
}

/// `n` workers with session timeout `ms`, each drawing whether it rides out disconnects and
/// its grace (see [`draw_grace`]).
fn drawn_modes(n: u32, ms: u64, rng: &mut Rng) -> Vec<WorkerMode> {
    (0..n)
        .map(|_| WorkerMode {
            ride_out: rng.range(0, 1) == 1,
            grace_ms: draw_grace(ms, rng),
            ..worker(ms, false)
        })
        .collect()
}

/// A grace of none, T or 2T, for a worker with session timeout `ms`.
fn draw_grace(ms: u64, rng: &mut Rng) -> u64 {
    [0, ms, 2 * ms][rng.range(0, 2) as usize]
}

/// Partition: each partition kind `--runs` times in seeded order, in the default lease mode,
/// in ride-out mode, and against the sync-lease mutant; and with `--only leader-pauses`, the
/// leader paused under a holder on a follower.
fn partition_plans(args: &PartitionArgs, rng: &mut Rng) -> (Vec<ScenarioPlan>, EnsembleOptions) {
    let options = EnsembleOptions::default()
        .with_tick(Duration::from_millis(args.tick_ms))
        .with_sync_limit(args.sync_limit);
    let long = long_hold_ms(&options, args.session_ms);
    let faults = |kinds: &[FaultKind], rng: &mut Rng| {
        let mut all: Vec<FaultKind> = (0..args.runs).flat_map(|_| kinds.iter().cloned()).collect();
        rng.shuffle(&mut all);
        Plan::Fixed(all)
    };
    let kinds = [
        FaultKind::IsolateLeader { symmetric: false },
        FaultKind::OneWayFollower,
        FaultKind::IsolateLeader { symmetric: true },
    ];
    let partitioned = |plan: ScenarioPlan| ScenarioPlan {
        long_ms: long,
        partition: true,
        ..plan
    };
    let (n, ms) = (args.workers, args.session_ms);
    let default = faults(&kinds, rng);
    let ride_out_all = (0..n).map(|_| worker(ms, true)).collect();
    let ride_out = faults(&kinds, rng);
    let mut plans = vec![
        partitioned(scenario("partition-default", modes(n, ms, false), default)),
        partitioned(scenario("partition-ride-out", ride_out_all, ride_out)),
        partitioned(ScenarioPlan {
            mutant: Mutant::SyncLease,
            ..scenario("mutant-sync-lease", modes(n, ms, true), faults(&kinds, rng))
        }),
    ];
    // The pair gap's timing assumption under attack: a leader paused longer than the gap
    // while a holder sits on a follower. Only with `--only leader-pauses`.
    if args.only.iter().any(|o| o == "leader-pauses") {
        let pauses = [0.5, 0.75, 0.9].map(|factor| FaultKind::PauseLeader {
            factor,
            aimed: true,
        });
        let plan = faults(&pauses, rng);
        plans.push(partitioned(scenario(
            "leader-pauses",
            modes(n, ms, true),
            plan,
        )));
    }
    (plans, options)
}

/// Failover: the faults operators cause every week, each `--runs` times in seeded order, on
/// an ensemble with stock settings, against workers with T = 10 s that ride out disconnects:
/// without a grace, and with a grace of T. Both get the same schedule, so that each fault
/// compares with its twin.
fn failover_plans(args: &FailoverArgs, rng: &mut Rng) -> (Vec<ScenarioPlan>, EnsembleOptions) {
    let options = EnsembleOptions::default()
        .with_tick(Duration::from_millis(args.tick_ms))
        .with_sync_limit(args.sync_limit);
    let long = long_hold_ms(&options, args.session_ms);
    let schedule = failover_schedule(args.runs, rng);
    let ride_out = || {
        (0..args.workers)
            .map(|_| worker(args.session_ms, true))
            .collect()
    };
    let plans = [
        ("failover-no-grace", ride_out()),
        ("failover-grace", with_grace_of_t(ride_out())),
    ]
    .into_iter()
    .map(|(name, workers)| ScenarioPlan {
        long_ms: long,
        partition: true,
        ..scenario(name, workers, Plan::Fixed(schedule.clone()))
    })
    .collect();
    (plans, options)
}
