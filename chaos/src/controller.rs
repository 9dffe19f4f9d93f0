//! The controller: orchestrates a run. It starts the cluster, then for each scenario starts
//! the workers, plays the schedule's faults through the nemesis, heals, collects the logs and
//! the store, and hands them to the checker and the report; last, the verdict.

use crate::clock::{self, ms, now_ns};
use crate::cluster::{self, Cluster, Collected, Mutant, Recipe, Scenario, Spec};
use crate::fault::FaultKind;
use crate::mode::Mode;
use crate::rng::Rng;
use crate::schedule::{self, Plan, ScenarioPlan};
use crate::timeline::Input;
use crate::verdict::{self, ScenarioResult};
use crate::{checker, report, store};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zkfence_testkit::{EnsembleOptions, LocalEnsemble};

/// Seconds since `t0`.
pub(crate) fn elapsed_s(t0: i64) -> f64 {
    ms(t0, now_ns()) / 1000.0
}

/// Runs every scenario of `mode` and prints the verdict; `Ok(true)` if the run passes.
pub(crate) async fn run(mode: Mode) -> Result<bool, String> {
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
    let (mut plans, partition_options) = schedule::plans(&mode, &mut rng);
    if !mode.only().is_empty() {
        plans.retain(|p| mode.only().iter().any(|o| o == p.name));
    }
    let servers = Servers::start(&dir, &plans, partition_options).await?;
    let mut results = Vec::new();
    if let Mode::Long(_) = mode {
        // Side by side: every long scenario with its faults. Main draws from the run's
        // generator; read-write and partition from the ones they always had (a seed replays
        // the same schedules); the others from their own (the seed and their name).
        let mut plans = plans.into_iter();
        let main = plans
            .next()
            .ok_or("the long run has a main scenario first")?;
        let rest: Vec<ScenarioPlan> = plans.collect();
        let mut rngs: Vec<Rng> = (rest.iter())
            .map(|p| match p.name {
                "read-write" => Rng::new(seed ^ 0x5851_F42D_4C95_7F2D),
                "partition" => Rng::new(seed ^ 0x9E37_79B9_7F4A_7C15),
                _ => p.own_rng(seed),
            })
            .collect();
        let others = (rest.into_iter().zip(rngs.iter_mut()))
            .map(|(plan, rng)| servers.scenario(plan, seed, rng, &dir));
        let (first, others) = tokio::join!(
            servers.scenario(main, seed, &mut rng, &dir),
            futures_util::future::join_all(others),
        );
        results.push(first?);
        for other in others {
            results.push(other?);
        }
    } else if let Mode::Smoke(_) = mode {
        results = servers.lanes(plans, seed, &dir).await?;
    } else {
        for group in schedule::side_by_side(plans) {
            results.extend(servers.group(group, seed, &mut rng, &dir).await?);
        }
    }
    verdict::verdict(&mode, seed, &dir, started, &results)
}

/// The run's servers: PostgreSQL and the main ensemble, and the partition ensemble if a
/// scenario needs it.
struct Servers {
    cluster: Cluster,
    main_options: EnsembleOptions,
    partition: Option<Arc<LocalEnsemble>>,
    partition_options: EnsembleOptions,
}

impl Servers {
    /// Starts them and prints the setup.
    async fn start(
        dir: &Path,
        plans: &[ScenarioPlan],
        partition_options: EnsembleOptions,
    ) -> Result<Servers, String> {
        let needs_main = plans.iter().any(|p| !p.partition);
        println!("starting PostgreSQL and the ZooKeeper ensembles (each server in a network namespace of its own) ...");
        let main_options = EnsembleOptions::default();
        let cluster = Cluster::start(dir, main_options.clone()).await?;
        let partition = if plans.iter().any(|p| p.partition) {
            Some(cluster::start_ensemble(&partition_options).await?)
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
        if let Some(p) = &partition {
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
        Ok(Servers {
            cluster,
            main_options,
            partition,
            partition_options,
        })
    }

    /// The ensemble a scenario runs on, and its settings.
    fn place(&self, p: &ScenarioPlan) -> (Arc<LocalEnsemble>, EnsembleOptions) {
        match (&self.partition, p.partition) {
            (Some(e), true) => (e.clone(), self.partition_options.clone()),
            _ => (self.cluster.ensemble.clone(), self.main_options.clone()),
        }
    }

    /// Runs a group of scenarios side by side ([`schedule::side_by_side`]), each drawing its
    /// gaps from a generator of its own (the seed and its name), so that the run's generator,
    /// and with it the replay of the scenarios run alone, is the same with them or without. A
    /// group of one is a scenario run alone, on the run's generator.
    async fn group(
        &self,
        mut group: Vec<ScenarioPlan>,
        seed: u64,
        rng: &mut Rng,
        dir: &Path,
    ) -> Result<Vec<ScenarioResult>, String> {
        if group.len() == 1 {
            let plan = group.remove(0);
            return Ok(vec![self.scenario(plan, seed, rng, dir).await?]);
        }
        let mut own: Vec<Rng> = group.iter().map(|p| p.own_rng(seed)).collect();
        let runs = (group.into_iter().zip(own.iter_mut()))
            .map(|(plan, rng)| self.scenario(plan, seed, rng, dir));
        futures_util::future::join_all(runs)
            .await
            .into_iter()
            .collect()
    }

    /// Runs the plans in two lanes side by side, one per ensemble ([`schedule::lanes`]): each
    /// lane's groups one after another, every scenario on a generator of its own (the seed and
    /// its name). The results in the plans' order.
    async fn lanes(
        &self,
        plans: Vec<ScenarioPlan>,
        seed: u64,
        dir: &Path,
    ) -> Result<Vec<ScenarioResult>, String> {
        let order: Vec<&'static str> = plans.iter().map(|p| p.name).collect();
        let lane = |groups: Vec<Vec<ScenarioPlan>>| async move {
            let mut results = Vec::new();
            for group in groups {
                let mut own: Vec<Rng> = group.iter().map(|p| p.own_rng(seed)).collect();
                let runs = (group.into_iter().zip(own.iter_mut()))
                    .map(|(plan, rng)| self.scenario(plan, seed, rng, dir));
                for result in futures_util::future::join_all(runs).await {
                    results.push(result?);
                }
            }
            Ok::<_, String>(results)
        };
        let (main, partition) = schedule::lanes(plans);
        let (main, partition) = tokio::join!(lane(main), lane(partition));
        let mut results: Vec<ScenarioResult> = main?.into_iter().chain(partition?).collect();
        results.sort_by_key(|r| order.iter().position(|name| *name == r.name));
        Ok(results)
    }

    /// Runs one scenario: starts its workers, plays its faults, heals, checks and reports.
    async fn scenario(
        &self,
        plan: ScenarioPlan,
        seed: u64,
        rng: &mut Rng,
        dir: &Path,
    ) -> Result<ScenarioResult, String> {
        let sc = Arc::new(self.start_scenario(&plan, seed, dir).await?);
        let done = Arc::new(AtomicBool::new(false));
        let ticker = ticker(sc.clone(), done.clone());
        play(&sc, plan.plan, rng).await;
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
        check_and_report(&sc, collected, heal_at).await
    }

    /// Sets the scenario up and starts its workers; fails if none makes progress within 60 s.
    async fn start_scenario(
        &self,
        plan: &ScenarioPlan,
        seed: u64,
        dir: &Path,
    ) -> Result<Scenario, String> {
        let (name, mutant) = (plan.name, plan.mutant);
        println!();
        println!("== scenario {name} (mutant: {}) ==", mutant.name());
        let workers: Vec<String> = plan.modes.iter().map(|m| m.describe()).collect();
        println!("  workers: {}", workers.join(", "));
        let (ensemble, options) = self.place(plan);
        let spec = Spec {
            name,
            mutant,
            recipe: plan.recipe,
            modes: plan.modes.clone(),
            long_ms: plan.long_ms,
            seed,
            dir: dir.join(name),
            ensemble,
            options,
            own_store: plan.own_store,
        };
        let sc = Scenario::new(&self.cluster, spec).await?;
        for id in 0..sc.workers() {
            sc.spawn_worker(id, None)?;
        }
        if !sc.progress(Duration::from_secs(60)).await {
            return Err(format!(
                "scenario {name}: no increment within 60 s of starting the workers; see {}",
                sc.dir.display()
            ));
        }
        Ok(sc)
    }
}

/// Prints the scenario's progress every 5 s until `done`.
fn ticker(sc: Arc<Scenario>, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !done.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(5)).await;
            let (oks, refused, cancels, faults, current) = sc.counts();
            println!(
                "  [{name_} {:>6.1} s] faults {faults}, increments {oks}, refused {refused}, cancels {cancels}{}",
                elapsed_s(sc.t0),
                if current.is_empty() { String::new() } else { format!(", now: {current}") },
                name_ = sc.name
            );
        }
    })
}

/// Plays the scenario's faults, one at a time with a seeded gap before each.
async fn play(sc: &Arc<Scenario>, plan: Plan, rng: &mut Rng) {
    match plan {
        Plan::Fixed(schedule) => {
            for kind in schedule {
                tokio::time::sleep(schedule::gap(rng)).await;
                inject(sc, kind).await;
            }
        }
        Plan::Timed { minutes, draw } => {
            let until = clock::now_ns() + (minutes * 60e9) as i64;
            while clock::now_ns() < until {
                tokio::time::sleep(schedule::short_gap(rng)).await;
                inject(sc, draw(rng)).await;
            }
        }
    }
}

/// Injects one fault and prints its line.
async fn inject(sc: &Arc<Scenario>, kind: FaultKind) {
    let t0 = sc.t0;
    match sc.inject(&kind).await {
        Some(f) => println!(
            "  [{}] +{:>6.1} s  {:<18} {}",
            sc.name,
            clock::ms(t0, f.start) / 1000.0,
            f.kind,
            f.detail
        ),
        None => println!(
            "  [{}] +{:>6.1} s  {:<18} skipped: no holder showed up",
            sc.name,
            elapsed_s(t0),
            kind.name()
        ),
    }
}

/// An election's election time E on an ensemble with `options` (see `crate::succession`):
/// two ticks (the server expires sessions in tick-sized buckets) and 1 s (the closing
/// commit, the successor's notification, a candidate's new session after an outage).
fn election_ms(options: &EnsembleOptions) -> u64 {
    2 * options.tick().as_millis() as u64 + 1000
}

/// Reads the store, checks the scenario, writes `store.jsonl` and `timeline.svg` and prints
/// the figures and any violations.
async fn check_and_report(
    sc: &Scenario,
    collected: Collected,
    heal_at: i64,
) -> Result<ScenarioResult, String> {
    let (name, mutant, t0) = (sc.name.as_str(), sc.mutant, sc.t0);
    let (rows, counters) = store::dump(sc.conninfo()).await?;
    // The store's commit order next to the workers' logs, so a run can be examined later.
    let lines: String = rows
        .iter()
        .map(|r| {
            format!(
                "{}\n",
                json!({"seq": r.seq, "op": r.op, "kind": r.kind, "worker": r.worker, "token": r.token, "value": r.value, "row": r.row})
            )
        })
        .collect();
    let _ = std::fs::write(sc.dir.join("store.jsonl"), lines);
    let input = Input {
        rows,
        counters,
        events: collected.events,
        faults: collected.faults,
        session_ms: sc.session_ms,
        t0,
        heal_at,
        end_at: collected.end_at,
        available: collected.available,
        election_ms: (sc.recipe == Recipe::Election).then(|| election_ms(&sc.options)),
    };
    let outcome = checker::check(&input);
    let title = format!(
        "zkfence chaos {name} (mutant: {}), seed {}, T up to {} ms",
        mutant.name(),
        sc.seed,
        sc.session_ms
    );
    let svg = report::timeline_svg(
        &title,
        sc.workers(),
        t0,
        collected.end_at,
        &outcome,
        &input.faults,
    );
    let _ = std::fs::write(sc.dir.join("timeline.svg"), svg);
    report::print_outcome(&outcome, mutant == Mutant::None);
    Ok(ScenarioResult {
        name: name.to_owned(),
        mutant,
        violations: outcome.violations,
        figures: outcome.figures,
        faults: input.faults.iter().map(|f| f.to_json(t0)).collect(),
    })
}
