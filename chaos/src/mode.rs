//! The run's mode (`smoke`, `long`, `partition`, `failover`, `election`, `multi`) and its
//! command-line arguments: what the controller, the schedule and the verdict read of the
//! command line.

use std::path::PathBuf;

/// The arguments of a smoke or long run.
#[derive(clap::Args, Clone)]
pub(crate) struct RunArgs {
    /// Seed of the fault schedule (default: from the clock; printed, so a run can be replayed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Minutes of faults (long runs).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// ZooKeeper session timeout of the workers, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub session_ms: u64,
    /// Run directory (default: chaos/runs/<mode>-<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip the mutants (smoke only; the result then cannot PASS).
    #[arg(long)]
    pub no_mutants: bool,
    /// Run only the scenarios with these names (for working on one; the result then cannot
    /// PASS a smoke run).
    #[arg(long)]
    pub only: Vec<String>,
}

/// The arguments of a partition run.
#[derive(clap::Args, Clone)]
pub(crate) struct PartitionArgs {
    /// Seed of the fault order (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs of each fault per lease mode (default mode, ride-out mode, the mutant).
    #[arg(long, default_value_t = 5)]
    pub runs: u32,
    /// The servers' tickTime, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub tick_ms: u64,
    /// The servers' syncLimit, in ticks.
    #[arg(long, default_value_t = 5)]
    pub sync_limit: u32,
    /// The workers' session timeout, in milliseconds.
    #[arg(long, default_value_t = 4000)]
    pub session_ms: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Run directory (default: chaos/runs/partition-<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only the scenarios with these names (partition-default, partition-ride-out,
    /// mutant-sync-lease).
    #[arg(long)]
    pub only: Vec<String>,
}

/// The arguments of a failover run.
#[derive(clap::Args, Clone)]
pub(crate) struct FailoverArgs {
    /// Seed of the fault order (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs of each fault kind per scenario (without a grace, with a grace of T).
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// The servers' tickTime, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub tick_ms: u64,
    /// The servers' syncLimit, in ticks.
    #[arg(long, default_value_t = 5)]
    pub sync_limit: u32,
    /// The workers' session timeout T, in milliseconds (the grace scenario's grace is T).
    #[arg(long, default_value_t = 10000)]
    pub session_ms: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Run directory (default: chaos/runs/failover-<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only the scenarios with these names (failover-no-grace, failover-grace).
    #[arg(long)]
    pub only: Vec<String>,
}

/// The arguments of an election or multi-lock run.
#[derive(clap::Args, Clone)]
pub(crate) struct RecipeArgs {
    /// Seed of the fault order (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs of each fault kind.
    #[arg(long, default_value_t = 2)]
    pub runs: u32,
    /// The workers' session timeout T, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub session_ms: u64,
    /// Worker processes.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Run directory (default: chaos/runs/<mode>-<seed>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only the scenarios with these names (election, multi, or a mutant's).
    #[arg(long)]
    pub only: Vec<String>,
}

/// The run the controller makes, with its arguments.
pub(crate) enum Mode {
    Smoke(RunArgs),
    Long(RunArgs),
    Partition(PartitionArgs),
    Failover(FailoverArgs),
    Election(RecipeArgs),
    Multi(RecipeArgs),
}

impl Mode {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Mode::Smoke(_) => "smoke",
            Mode::Long(_) => "long",
            Mode::Partition(_) => "partition",
            Mode::Failover(_) => "failover",
            Mode::Election(_) => "election",
            Mode::Multi(_) => "multi",
        }
    }

    pub(crate) fn seed(&self) -> Option<u64> {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => a.seed,
            Mode::Partition(a) => a.seed,
            Mode::Failover(a) => a.seed,
            Mode::Election(a) | Mode::Multi(a) => a.seed,
        }
    }

    pub(crate) fn out(&self) -> Option<PathBuf> {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => a.out.clone(),
            Mode::Partition(a) => a.out.clone(),
            Mode::Failover(a) => a.out.clone(),
            Mode::Election(a) | Mode::Multi(a) => a.out.clone(),
        }
    }

    /// The scenarios to run, if not all.
    pub(crate) fn only(&self) -> &[String] {
        match self {
            Mode::Smoke(a) | Mode::Long(a) => &a.only,
            Mode::Partition(a) => &a.only,
            Mode::Failover(a) => &a.only,
            Mode::Election(a) | Mode::Multi(a) => &a.only,
        }
    }
}
