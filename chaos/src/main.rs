//! `zkfence-chaos`: the fault-injection suite's command line. See `chaos/README.md`.
//!
//! `smoke`, `long` and `partition` run the controller ([`controller`]); `worker` is one worker
//! process, which the controller starts.

mod checker;
mod clock;
mod cluster;
mod controller;
mod event;
mod figures;
mod nemesis;
mod report;
mod rng;
mod schedule;
mod store;
mod verdict;
mod worker;

use clap::Parser;
use std::path::PathBuf;

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

    /// The scenarios to run, if not all.
    fn only(&self) -> &[String] {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => &a.only,
            Mode::Partition(a) => &a.only,
        }
    }
}

fn controller_main(mode: Mode) -> i32 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match rt.block_on(controller::run(mode)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(err) => {
            println!("chaos: {err}");
            println!("RESULT: FAIL (the run could not complete: {err})");
            2
        }
    }
}
