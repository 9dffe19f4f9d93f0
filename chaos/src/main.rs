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
use controller::{Cluster, FaultKind, Mutant, Scenario};
use rng::Rng;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "zkfence's chaos suite: real ZooKeeper ensemble, real PostgreSQL, real faults")]
enum Cmd {
    /// The CI run (about 4 minutes): every fault kind, then the two mutants, which must fail.
    Smoke(RunArgs),
    /// A soak run: faults drawn from every kind (clock skew included) for `--minutes`.
    Long(RunArgs),
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
        Cmd::Smoke(args) => std::process::exit(controller_main("smoke", args)),
        Cmd::Long(args) => std::process::exit(controller_main("long", args)),
    }
}

fn controller_main(mode: &str, args: RunArgs) -> i32 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(run(mode, args)) {
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
    Timed { minutes: f64 },
}

struct ScenarioResult {
    name: String,
    mutant: Mutant,
    violations: Vec<Violation>,
    figures: serde_json::Value,
    faults: serde_json::Value,
}

async fn run(mode: &str, args: RunArgs) -> Result<bool, String> {
    let seed = args
        .seed
        .unwrap_or_else(|| (clock::now_ns() as u64) % 1_000_000);
    let dir = args.out.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("runs")
            .join(format!("{mode}-{seed}"))
    });
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let started = clock::now_ns();
    println!(
        "zkfence chaos: {mode} run, seed {seed}, run directory {}",
        dir.display()
    );
    println!("starting a 3-server ZooKeeper ensemble and PostgreSQL ...");
    let cluster = Cluster::start(&dir).await?;
    println!(
        "setup: ZooKeeper ensemble {} (Debian's package, QuorumPeerMain, tick 200 ms); PostgreSQL on 127.0.0.1:{} \
         (fsync on, synchronous commit); {} worker processes, each behind its own TCP proxies to the three servers; \
         session timeout T = {} ms; lease margin T/4 (the default)",
        cluster.ensemble.addr(),
        cluster.pg.port,
        args.workers,
        args.session_ms
    );
    let mut rng = Rng::new(seed);
    let mut scenarios = Vec::new();
    if mode == "smoke" {
        let (schedule, head) = controller::smoke_schedule(&mut rng);
        let rw = controller::rw_schedule(&mut rng);
        scenarios.push(("main", Mutant::None, false, Plan::Fixed(schedule.clone())));
        scenarios.push(("read-write", Mutant::None, true, Plan::Fixed(rw)));
        if !args.no_mutants {
            let head = schedule[..head].to_vec();
            scenarios.push((
                "mutant-fencing-off",
                Mutant::FencingOff,
                false,
                Plan::Fixed(head.clone()),
            ));
            scenarios.push((
                "mutant-watchdog-off",
                Mutant::WatchdogOff,
                false,
                Plan::Fixed(head),
            ));
        }
    } else {
        let minutes = args.minutes;
        scenarios.push(("main", Mutant::None, false, Plan::Timed { minutes }));
    }
    let mut results = Vec::new();
    for (name, mutant, rw, plan) in scenarios {
        results.push(
            scenario(
                &cluster, name, mutant, rw, plan, &args, seed, &mut rng, &dir,
            )
            .await?,
        );
    }

    // The verdict: every scenario without a mutant holds every invariant and makes progress
    // after its heal; every mutant fails.
    let mut reasons = Vec::new();
    let main = &results[0];
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
    let faults = main.figures["faults"].as_u64().unwrap_or(0);
    let pauses = main.figures["holder_pauses_past_timeout"]
        .as_u64()
        .unwrap_or(0);
    if mode == "smoke" && (faults < 20 || pauses < 5) {
        reasons.push(format!(
            "only {faults} faults / {pauses} holder pauses past T were injected (need 20 / 5)"
        ));
    }
    println!();
    let mutants: Vec<&ScenarioResult> = results
        .iter()
        .filter(|r| r.mutant != Mutant::None)
        .collect();
    for r in &mutants {
        if r.violations.is_empty() {
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
    if mode == "smoke" && args.no_mutants {
        reasons.push("mutants skipped".into());
    }
    let st = &main.figures["stale_writes"];
    let summary = format!(
        "{faults} faults ({pauses} holder pauses past T), {} increments, {} stale writes refused, {} accepted out of order, {} double-holder windows, {}{:.0} s",
        main.figures["increments_applied"],
        st["refused"],
        st["accepted_out_of_order"],
        main.figures["double_holder_windows"]["count"],
        if mutants.is_empty() {
            String::new()
        } else {
            format!(
                "{} of {} mutants failed as required, ",
                mutants.iter().filter(|r| !r.violations.is_empty()).count(),
                mutants.len()
            )
        },
        clock::ms(started, clock::now_ns()) / 1000.0
    );
    let pass = reasons.is_empty();
    let report = json!({
        "mode": mode, "seed": seed, "workers": args.workers, "session_timeout_ms": args.session_ms,
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
        "report: {}  picture: {}",
        dir.join("report.json").display(),
        dir.join("main").join("timeline.svg").display()
    );
    if pass {
        println!("RESULT: PASS {summary}");
    } else {
        println!("RESULT: FAIL {}; {summary}", reasons.join("; "));
    }
    Ok(pass)
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    cluster: &Cluster,
    name: &str,
    mutant: Mutant,
    rw: bool,
    plan: Plan,
    args: &RunArgs,
    seed: u64,
    rng: &mut Rng,
    dir: &std::path::Path,
) -> Result<ScenarioResult, String> {
    println!();
    println!("== scenario {name} (mutant: {}) ==", mutant.name());
    let sc = Arc::new(
        Scenario::new(
            cluster,
            controller::Spec {
                name,
                mutant,
                rw,
                workers: args.workers,
                session_ms: args.session_ms,
                seed,
                dir: dir.join(name),
            },
        )
        .await?,
    );
    for id in 0..args.workers {
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
            match sc.inject(cluster, &kind).await {
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
        Plan::Timed { minutes } => {
            let until = clock::now_ns() + (minutes * 60e9) as i64;
            while clock::now_ns() < until {
                tokio::time::sleep(controller::gap(rng)).await;
                run_fault(controller::long_fault(rng)).await;
            }
        }
    }
    println!("  final heal: every worker and server running, links clear");
    let heal_at = clock::now_ns();
    sc.heal(cluster).await;
    let live = sc.progress(Duration::from_secs(30)).await;
    if live {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    done.store(true, Ordering::Relaxed);
    ticker.abort();
    let collected = sc.finish().await;
    let (rows, counter, _fence) = store::dump(&cluster.pg.conninfo()).await?;
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
        session_ms: args.session_ms,
        t0,
        heal_at,
        end_at: collected.end_at,
    };
    let outcome = checker::check(&input);
    let svg = report::timeline_svg(
        &format!(
            "zkfence chaos {name} (mutant: {}), seed {seed}, T = {} ms",
            mutant.name(),
            args.session_ms
        ),
        args.workers,
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
