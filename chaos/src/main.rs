//! `zkfence-chaos`: the fault-injection suite. See `chaos/README.md`.

mod checker;
mod clock;
mod controller;
mod report;
mod rng;
mod store;
mod worker;

use checker::{Input, Violation};
use clap::Parser;
use controller::{Cluster, FaultKind, Mutant, Scenario, WorkerMode};
use rng::Rng;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zkfence_testkit::{EnsembleOptions, LocalEnsemble};

#[derive(Parser)]
#[command(about = "zkfence's chaos suite: real ZooKeeper ensemble, real PostgreSQL, real faults")]
enum Cmd {
    /// The CI run (about 7 minutes): every fault kind, partitions inside the ensemble, then
    /// the three mutants, which must fail.
    Smoke(RunArgs),
    /// A soak run: faults drawn from every kind (clock skew included) for `--minutes`, with a
    /// partition scenario on a second ensemble running alongside.
    Long(RunArgs),
    /// The partition experiment of issue 11 with realistic server settings: the leader cut
    /// off from its followers (asymmetric and symmetric) and a one-way follower cut, `--runs`
    /// times per lease mode, then the same with the pre-issue-11 lease rule, which must fail.
    Partition(PartitionArgs),
    /// One worker process (started by the controller).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Seed of the fault schedule (default: from the clock; printed, so a run can be replayed).
    #[arg(long)]
    seed: Option<u64>,
    /// Minutes of faults (long runs).
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// ZooKeeper session timeout of the workers, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    session_ms: u64,
    /// Run directory (default: chaos/runs/<mode>-<seed>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Skip the mutants (smoke only; the result then cannot PASS).
    #[arg(long)]
    no_mutants: bool,
    /// Run only the scenarios with these names (for working on one; the result then cannot
    /// PASS a smoke run).
    #[arg(long)]
    only: Vec<String>,
}

#[derive(clap::Args, Clone)]
struct PartitionArgs {
    /// Seed of the fault order (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Runs of each fault per lease mode (default mode, ride-out mode, the mutant).
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// The servers' tickTime, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    tick_ms: u64,
    /// The servers' syncLimit, in ticks.
    #[arg(long, default_value_t = 5)]
    sync_limit: u32,
    /// The workers' session timeout, in milliseconds.
    #[arg(long, default_value_t = 4000)]
    session_ms: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    workers: u32,
    /// Run directory (default: chaos/runs/partition-<seed>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run only the scenarios with these names (partition-default, partition-ride-out,
    /// mutant-sync-lease).
    #[arg(long)]
    only: Vec<String>,
}

fn main() {
    match Cmd::parse() {
        Cmd::Worker(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(worker::run(args));
        }
        Cmd::Smoke(args) => std::process::exit(controller_main(Mode::Smoke(args))),
        Cmd::Long(args) => std::process::exit(controller_main(Mode::Long(args))),
        Cmd::Partition(args) => std::process::exit(controller_main(Mode::Partition(args))),
    }
}

enum Mode {
    Smoke(RunArgs),
    Long(RunArgs),
    Partition(PartitionArgs),
}

impl Mode {
    fn name(&self) -> &'static str {
        match self {
            Mode::Smoke(_) => "smoke",
            Mode::Long(_) => "long",
            Mode::Partition(_) => "partition",
        }
    }

    fn seed(&self) -> Option<u64> {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => a.seed,
            Mode::Partition(a) => a.seed,
        }
    }

    fn out(&self) -> Option<PathBuf> {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => a.out.clone(),
            Mode::Partition(a) => a.out.clone(),
        }
    }
}

fn controller_main(mode: Mode) -> i32 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(mode)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(err) => {
            println!("chaos: {err}");
            println!("RESULT: FAIL (the run could not complete: {err})");
            2
        }
    }
}

enum Plan {
    Fixed(Vec<FaultKind>),
    /// Faults drawn for `minutes` by `draw`.
    Timed {
        minutes: f64,
        draw: fn(&mut Rng) -> FaultKind,
    },
}

/// One scenario to run: its workers, the ensemble it runs on, its faults.
struct ScenarioPlan {
    name: &'static str,
    mutant: Mutant,
    rw: bool,
    modes: Vec<WorkerMode>,
    /// How far a holder is stretched (ms) when a partition is aimed at it: the hold must
    /// outlast the whole fault, so that a stale holder's checks are seen.
    long_ms: u64,
    /// On the partition ensemble rather than the main one.
    partition: bool,
    plan: Plan,
}

struct ScenarioResult {
    name: String,
    mutant: Mutant,
    violations: Vec<Violation>,
    figures: serde_json::Value,
    faults: serde_json::Value,
}

/// `n` workers with session timeout `ms`, every other one riding out disconnects if `mixed`.
fn modes(n: u32, ms: u64, mixed: bool) -> Vec<WorkerMode> {
    (0..n)
        .map(|i| WorkerMode {
            session_ms: ms,
            ride_out: mixed && i % 2 == 1,
        })
        .collect()
}

/// The partition ensemble of smoke and long runs: a 400 ms tick and `syncLimit=10`, so that a
/// leader cut off from its followers keeps leading (and answering its clients' syncs) for 4 s,
/// longer than a 2 s session takes to expire on the other side: the case the old lease rule
/// got wrong.
fn partition_ensemble() -> EnsembleOptions {
    EnsembleOptions::default()
        .with_tick(Duration::from_millis(400))
        .with_sync_limit(10)
}

/// The partition scenario's workers: session timeouts from 2 to 10 ticks of 400 ms (to 20 in
/// long runs), half of them riding out disconnects.
fn partition_modes(long: bool) -> Vec<WorkerMode> {
    let last = if long { 8000 } else { 4000 };
    [(800, false), (2000, true), (4000, false), (last, true)]
        .into_iter()
        .map(|(session_ms, ride_out)| WorkerMode {
            session_ms,
            ride_out,
        })
        .collect()
}

/// A stretch long enough for a hold to outlast a partition fault on `options` with sessions
/// up to `t_ms` (the fault lasts `syncLimit` ticks + T + 2 s).
fn long_hold_ms(options: &EnsembleOptions, t_ms: u64) -> u64 {
    (options.tick() * options.sync_limit()).as_millis() as u64 + t_ms + 4000
}

fn plans(mode: &Mode, rng: &mut Rng) -> (Vec<ScenarioPlan>, EnsembleOptions) {
    match mode {
        Mode::Smoke(args) => {
            let (schedule, head) = controller::smoke_schedule(rng);
            let rw = controller::rw_schedule(rng);
            let options = partition_ensemble();
            let long = long_hold_ms(&options, 4000);
            let mut plans = vec![
                ScenarioPlan {
                    name: "main",
                    mutant: Mutant::None,
                    rw: false,
                    modes: modes(args.workers, args.session_ms, false),
                    long_ms: 0,
                    partition: false,
                    plan: Plan::Fixed(schedule.clone()),
                },
                ScenarioPlan {
                    name: "read-write",
                    mutant: Mutant::None,
                    rw: true,
                    modes: modes(args.workers, args.session_ms, false),
                    long_ms: 0,
                    partition: false,
                    plan: Plan::Fixed(rw),
                },
                ScenarioPlan {
                    name: "partition",
                    mutant: Mutant::None,
                    rw: false,
                    modes: partition_modes(false),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(controller::partition_schedule(rng)),
                },
            ];
            if !args.no_mutants {
                let head = schedule[..head].to_vec();
                for (name, mutant) in [
                    ("mutant-fencing-off", Mutant::FencingOff),
                    ("mutant-watchdog-off", Mutant::WatchdogOff),
                ] {
                    plans.push(ScenarioPlan {
                        name,
                        mutant,
                        rw: false,
                        modes: modes(args.workers, args.session_ms, false),
                        long_ms: 0,
                        partition: false,
                        plan: Plan::Fixed(head.clone()),
                    });
                }
                plans.push(ScenarioPlan {
                    name: "mutant-sync-lease",
                    mutant: Mutant::SyncLease,
                    rw: false,
                    modes: modes(args.workers, 2000, true),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(vec![FaultKind::IsolateLeader { symmetric: false }; 2]),
                });
            }
            (plans, options)
        }
        Mode::Long(args) => {
            let options = partition_ensemble();
            let plans = vec![
                ScenarioPlan {
                    name: "main",
                    mutant: Mutant::None,
                    rw: false,
                    modes: modes(args.workers, args.session_ms, false),
                    // Long runs draw partitions here too: stretch their victims.
                    long_ms: long_hold_ms(&EnsembleOptions::default(), args.session_ms),
                    partition: false,
                    plan: Plan::Timed {
                        minutes: args.minutes,
                        draw: controller::long_fault,
                    },
                },
                ScenarioPlan {
                    name: "read-write",
                    mutant: Mutant::None,
                    rw: true,
                    modes: modes(args.workers, args.session_ms, false),
                    long_ms: 0,
                    partition: false,
                    plan: Plan::Timed {
                        minutes: args.minutes,
                        draw: controller::rw_fault,
                    },
                },
                ScenarioPlan {
                    name: "partition",
                    mutant: Mutant::None,
                    rw: false,
                    modes: partition_modes(true),
                    long_ms: long_hold_ms(&options, 8000),
                    partition: true,
                    plan: Plan::Timed {
                        minutes: args.minutes,
                        draw: controller::partition_fault,
                    },
                },
            ];
            (plans, options)
        }
        Mode::Partition(args) => {
            let options = EnsembleOptions::default()
                .with_tick(Duration::from_millis(args.tick_ms))
                .with_sync_limit(args.sync_limit);
            let long = long_hold_ms(&options, args.session_ms);
            let faults = |kinds: &[FaultKind], rng: &mut Rng| {
                let mut all: Vec<FaultKind> =
                    (0..args.runs).flat_map(|_| kinds.iter().cloned()).collect();
                rng.shuffle(&mut all);
                all
            };
            let kinds = [
                FaultKind::IsolateLeader { symmetric: false },
                FaultKind::OneWayFollower,
                FaultKind::IsolateLeader { symmetric: true },
            ];
            let plans = vec![
                ScenarioPlan {
                    name: "partition-default",
                    mutant: Mutant::None,
                    rw: false,
                    modes: modes(args.workers, args.session_ms, false),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(faults(&kinds, rng)),
                },
                ScenarioPlan {
                    name: "partition-ride-out",
                    mutant: Mutant::None,
                    rw: false,
                    modes: (0..args.workers)
                        .map(|_| WorkerMode {
                            session_ms: args.session_ms,
                            ride_out: true,
                        })
                        .collect(),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(faults(&kinds, rng)),
                },
                ScenarioPlan {
                    name: "mutant-sync-lease",
                    mutant: Mutant::SyncLease,
                    rw: false,
                    modes: modes(args.workers, args.session_ms, true),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(faults(&kinds, rng)),
                },
            ];
            // The pair gap's timing assumption under attack: a leader paused longer than the
            // gap while a holder sits on a follower. Only with `--only leader-pauses`.
            let mut plans = plans;
            if args.only.iter().any(|o| o == "leader-pauses") {
                plans.push(ScenarioPlan {
                    name: "leader-pauses",
                    mutant: Mutant::None,
                    rw: false,
                    modes: modes(args.workers, args.session_ms, true),
                    long_ms: long,
                    partition: true,
                    plan: Plan::Fixed(faults(
                        &[0.5, 0.75, 0.9].map(|factor| FaultKind::PauseLeader {
                            factor,
                            aimed: true,
                        }),
                        rng,
                    )),
                });
            }
            (plans, options)
        }
    }
}

async fn run(mode: Mode) -> Result<bool, String> {
    let name = mode.name();
    let seed = mode
        .seed()
        .unwrap_or_else(|| (clock::now_ns() as u64) % 1_000_000);
    let dir = mode.out().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("runs")
            .join(format!("{name}-{seed}"))
    });
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let started = clock::now_ns();
    println!(
        "zkfence chaos: {name} run, seed {seed}, run directory {}",
        dir.display()
    );
    let mut rng = Rng::new(seed);
    let (mut plans, partition_options) = plans(&mode, &mut rng);
    let only = match &mode {
        Mode::Smoke(args) | Mode::Long(args) => &args.only,
        Mode::Partition(args) => &args.only,
    };
    if !only.is_empty() {
        plans.retain(|p| only.iter().any(|o| o == p.name));
    }
    let needs_main = plans.iter().any(|p| !p.partition);
    println!("starting PostgreSQL and the ZooKeeper ensembles (each server in a network namespace of its own) ...");
    let main_options = EnsembleOptions::default();
    let cluster = Cluster::start(&dir, main_options.clone()).await?;
    let partition_ensemble = if plans.iter().any(|p| p.partition) {
        Some(controller::start_ensemble(&partition_options).await?)
    } else {
        None
    };
    let describe = |o: &EnsembleOptions| {
        format!(
            "tick {} ms, syncLimit {}",
            o.tick().as_millis(),
            o.sync_limit()
        )
    };
    if needs_main {
        println!(
            "setup: main ensemble {} ({}); ",
            cluster.ensemble.addr(),
            describe(&main_options)
        );
    }
    if let Some(p) = &partition_ensemble {
        println!(
            "setup: partition ensemble {} ({})",
            p.addr(),
            describe(&partition_options)
        );
    }
    println!(
        "setup: PostgreSQL on 127.0.0.1:{} (fsync on, synchronous commit), a database per scenario; every worker \
         behind its own TCP proxies to the three servers; default lease options unless a scenario says otherwise",
        cluster.pg.port()
    );

    let place = |p: &ScenarioPlan| match (&partition_ensemble, p.partition) {
        (Some(e), true) => (e.clone(), partition_options.clone()),
        _ => (cluster.ensemble.clone(), main_options.clone()),
    };
    let mut results = Vec::new();
    if let Mode::Long(_) = mode {
        // Side by side: the main, read/write and partition scenarios, each with its faults.
        let mut plans = plans.into_iter();
        let (Some(main), Some(rw), Some(part)) = (plans.next(), plans.next(), plans.next()) else {
            return Err("the long run has a main, a read/write and a partition scenario".into());
        };
        let ((e1, o1), (e2, o2), (e3, o3)) = (place(&main), place(&rw), place(&part));
        let mut rw_rng = Rng::new(seed ^ 0x5851_F42D_4C95_7F2D);
        let mut part_rng = Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15);
        let (a, b, c) = tokio::join!(
            scenario(&cluster, main, e1, o1, seed, &mut rng, &dir),
            scenario(&cluster, rw, e2, o2, seed, &mut rw_rng, &dir),
            scenario(&cluster, part, e3, o3, seed, &mut part_rng, &dir),
        );
        results.push(a?);
        results.push(b?);
        results.push(c?);
    } else {
        for p in plans {
            let (ensemble, options) = place(&p);
            results.push(scenario(&cluster, p, ensemble, options, seed, &mut rng, &dir).await?);
        }
    }
    verdict(&mode, seed, &dir, started, &results)
}

/// Whether the run passes: every scenario without a mutant holds every invariant and makes
/// progress after its heal; every mutant fails. Prints the report and the RESULT line.
fn verdict(
    mode: &Mode,
    seed: u64,
    dir: &std::path::Path,
    started: i64,
    results: &[ScenarioResult],
) -> Result<bool, String> {
    let mut reasons = Vec::new();
    for r in results.iter().filter(|r| r.mutant == Mutant::None) {
        if !r.violations.is_empty() {
            reasons.push(format!(
                "{} invariant violation(s) in {}",
                r.violations.len(),
                r.name
            ));
        }
        if r.figures["liveness_after_heal"]["increments"]
            .as_u64()
            .unwrap_or(0)
            == 0
        {
            reasons.push(format!("no progress after the final heal in {}", r.name));
        }
    }
    let count = |r: &ScenarioResult, key: &str| r.figures[key].as_u64().unwrap_or(0);
    let total_faults: u64 = results
        .iter()
        .filter(|r| r.mutant == Mutant::None)
        .map(|r| count(r, "faults"))
        .sum();
    let pauses: u64 = results
        .iter()
        .filter(|r| r.mutant == Mutant::None)
        .map(|r| count(r, "holder_pauses_past_timeout"))
        .sum();
    let partitions: u64 = results
        .iter()
        .filter(|r| r.mutant == Mutant::None)
        .map(|r| {
            r.faults.as_array().map_or(0, |f| {
                f.iter().filter(|f| is_partition(&f["kind"])).count() as u64
            })
        })
        .sum();
    if let Mode::Smoke(args) = mode {
        let main = &results[0];
        let (faults, main_pauses) = (
            count(main, "faults"),
            count(main, "holder_pauses_past_timeout"),
        );
        if faults < 20 || main_pauses < 5 {
            reasons.push(format!(
                "only {faults} faults / {main_pauses} holder pauses past T were injected in main (need 20 / 5)"
            ));
        }
        if partitions < 4 {
            reasons.push(format!(
                "only {partitions} partitions inside the ensemble were injected (need 4)"
            ));
        }
        if args.no_mutants {
            reasons.push("mutants skipped".into());
        }
    }
    println!();
    let mutants: Vec<&ScenarioResult> = results
        .iter()
        .filter(|r| r.mutant != Mutant::None)
        .collect();
    for r in &mutants {
        // The sync-lease mutant must be caught by the lease invariant itself.
        let caught = match r.mutant {
            Mutant::SyncLease => r
                .violations
                .iter()
                .any(|v| v.invariant == checker::LEASE_INVARIANT),
            _ => !r.violations.is_empty(),
        };
        if !caught {
            reasons.push(format!("mutant {} passed the checker", r.mutant.name()));
            println!(
                "mutant {}: PASSED the checker, which it must not",
                r.mutant.name()
            );
        } else {
            let kinds: std::collections::BTreeSet<&str> =
                r.violations.iter().map(|v| v.invariant).collect();
            println!(
                "mutant {}: FAILED as required ({} violations: {})",
                r.mutant.name(),
                r.violations.len(),
                kinds.into_iter().collect::<Vec<_>>().join("; ")
            );
        }
    }
    let overlaps: u64 = results
        .iter()
        .filter(|r| r.mutant == Mutant::None)
        .map(|r| r.figures["lease_overlaps"]["count"].as_u64().unwrap_or(0))
        .sum();
    let main = &results[0];
    let st = &main.figures["stale_writes"];
    let summary = format!(
        "{total_faults} faults ({pauses} holder pauses past T, {partitions} partitions inside the ensemble), {} increments, \
         {} stale writes refused, {} accepted out of order, {} double-holder windows, {overlaps} valid-lease overlaps, {}{:.0} s",
        results
            .iter()
            .filter(|r| r.mutant == Mutant::None)
            .map(|r| count(r, "increments_applied"))
            .sum::<u64>(),
        st["refused"],
        st["accepted_out_of_order"],
        main.figures["double_holder_windows"]["count"],
        if mutants.is_empty() {
            String::new()
        } else {
            format!(
                "{} of {} mutants failed as required, ",
                mutants.len() - reasons.iter().filter(|r| r.starts_with("mutant ")).count(),
                mutants.len()
            )
        },
        clock::ms(started, clock::now_ns()) / 1000.0
    );
    let pass = reasons.is_empty();
    let report = json!({
        "mode": mode.name(), "seed": seed,
        "result": if pass { "PASS" } else { "FAIL" }, "reasons": reasons,
        "scenarios": results.iter().map(|r| json!({
            "name": r.name, "mutant": r.mutant.name(),
            "violations": r.violations.iter().map(|v| json!({"invariant": v.invariant, "summary": v.summary, "evidence": v.evidence})).collect::<Vec<_>>(),
            "figures": r.figures, "faults": r.faults,
        })).collect::<Vec<_>>(),
    });
    let _ = std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    );
    println!(
        "report: {}  pictures: {}/<scenario>/timeline.svg",
        dir.join("report.json").display(),
        dir.display()
    );
    if pass {
        println!("RESULT: PASS {summary}");
    } else {
        println!("RESULT: FAIL {}; {summary}", reasons.join("; "));
    }
    Ok(pass)
}

fn is_partition(kind: &serde_json::Value) -> bool {
    kind.as_str()
        .is_some_and(|k| controller::PARTITION_KINDS.contains(&k))
}

async fn scenario(
    cluster: &Cluster,
    plan: ScenarioPlan,
    ensemble: Arc<LocalEnsemble>,
    options: EnsembleOptions,
    seed: u64,
    rng: &mut Rng,
    dir: &std::path::Path,
) -> Result<ScenarioResult, String> {
    let ScenarioPlan {
        name,
        mutant,
        rw,
        modes,
        long_ms,
        plan,
        ..
    } = plan;
    println!();
    println!("== scenario {name} (mutant: {}) ==", mutant.name());
    let workers: Vec<String> = modes
        .iter()
        .map(|m| {
            format!(
                "T={} ms{}",
                m.session_ms,
                if m.ride_out { " ride-out" } else { "" }
            )
        })
        .collect();
    println!("  workers: {}", workers.join(", "));
    let sc = Arc::new(
        Scenario::new(
            cluster,
            controller::Spec {
                name,
                mutant,
                rw,
                modes,
                long_ms,
                seed,
                dir: dir.join(name),
                ensemble,
                options,
            },
        )
        .await?,
    );
    for id in 0..sc.workers() {
        sc.spawn_worker(id, None)?;
    }
    if !sc.progress(Duration::from_secs(60)).await {
        return Err(format!(
            "scenario {name}: no increment within 60 s of starting the workers; see {}",
            sc.dir.display()
        ));
    }
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (sc, done) = (sc.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let (oks, refused, cancels, faults, current) = sc.counts();
                println!(
                    "  [{name_} {:>6.1} s] faults {faults}, increments {oks}, refused {refused}, cancels {cancels}{}",
                    controller::elapsed_s(sc.t0),
                    if current.is_empty() { String::new() } else { format!(", now: {current}") },
                    name_ = sc.name
                );
            }
        })
    };
    let t0 = sc.t0;
    let run_fault = |kind: FaultKind| {
        let sc = sc.clone();
        async move {
            match sc.inject(&kind).await {
                Some(f) => println!(
                    "  +{:>6.1} s  {:<18} {}",
                    clock::ms(t0, f.start) / 1000.0,
                    f.kind,
                    f.detail
                ),
                None => println!(
                    "  +{:>6.1} s  {:<18} skipped: no holder showed up",
                    controller::elapsed_s(t0),
                    kind.name()
                ),
            }
        }
    };
    match plan {
        Plan::Fixed(schedule) => {
            for kind in schedule {
                tokio::time::sleep(controller::gap(rng)).await;
                run_fault(kind).await;
            }
        }
        Plan::Timed { minutes, draw } => {
            let until = clock::now_ns() + (minutes * 60e9) as i64;
            while clock::now_ns() < until {
                tokio::time::sleep(controller::short_gap(rng)).await;
                run_fault(draw(rng)).await;
            }
        }
    }
    println!("  final heal: every worker and server running, links clear");
    let heal_at = clock::now_ns();
    sc.heal().await;
    let live = sc.progress(Duration::from_secs(30)).await;
    if live {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    done.store(true, Ordering::Relaxed);
    ticker.abort();
    let collected = sc.finish().await;
    let (rows, counter, _fence) = store::dump(sc.conninfo()).await?;
    // The store's commit order next to the workers' logs, so a run can be examined later.
    let lines: String = rows
        .iter()
        .map(|r| {
            format!(
                "{}\n",
                json!({"seq": r.seq, "op": r.op, "kind": r.kind, "worker": r.worker, "token": r.token, "value": r.value})
            )
        })
        .collect();
    let _ = std::fs::write(sc.dir.join("store.jsonl"), lines);
    let input = Input {
        rows,
        counter,
        events: collected.events,
        faults: collected.faults,
        session_ms: sc.session_ms,
        t0,
        heal_at,
        end_at: collected.end_at,
    };
    let outcome = checker::check(&input);
    let svg = report::timeline_svg(
        &format!(
            "zkfence chaos {name} (mutant: {}), seed {seed}, T up to {} ms",
            mutant.name(),
            sc.session_ms
        ),
        sc.workers(),
        t0,
        collected.end_at,
        &outcome,
        &input.faults,
    );
    let _ = std::fs::write(sc.dir.join("timeline.svg"), svg);
    println!("  figures:");
    print!("{}", report::figures_text(&outcome.figures));
    if outcome.violations.is_empty() {
        println!("  invariants: all hold");
    }
    for v in &outcome.violations {
        println!("  VIOLATION {}: {}", v.invariant, v.summary);
        if mutant == Mutant::None || outcome.violations.len() < 4 {
            for line in &v.evidence {
                println!("      {line}");
            }
        }
    }
    Ok(ScenarioResult {
        name: name.to_owned(),
        mutant,
        violations: outcome.violations,
        figures: outcome.figures,
        faults: input.faults.iter().map(|f| f.to_json(t0)).collect(),
    })
}
