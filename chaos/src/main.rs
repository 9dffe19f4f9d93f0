//! `zkfence-chaos`: the fault-injection suite's command line. See `chaos/README.md`.
//!
//! `smoke`, `long`, `partition`, `failover`, `election` and `multi` run the controller
//! ([`controller`]); `worker` is one worker process (a lock's, an elected one, or a multi-lock
//! one), which the controller starts.

mod checker;
mod clock;
mod cluster;
mod controller;
mod elected;
mod event;
mod fault;
mod figures;
mod hijack;
mod hold;
mod many;
mod mode;
mod multi;
mod nemesis;
mod outage;
mod probe;
mod report;
mod rng;
mod schedule;
mod store;
mod succession;
mod timeline;
mod verdict;
mod worker;

use clap::Parser;
use mode::{FailoverArgs, Mode, PartitionArgs, RecipeArgs, RunArgs};

#[derive(Parser)]
#[command(about = "zkfence's chaos suite: real ZooKeeper ensemble, real PostgreSQL, real faults")]
enum Cmd {
    /// The CI run (about 8 minutes): every fault kind, partitions inside the ensemble, a short
    /// failover scenario, elected workers and multi-locks, then nine mutants, which must fail;
    /// last, one store of its own (PostgreSQL, MariaDB, Redis, ZooKeeper or an object store,
    /// by the seed) paused, killed (or, the object store, answering errors) and cut off under
    /// writes, and its mutant.
    Smoke(RunArgs),
    /// A soak run: faults drawn from every kind (clock skew included) for `--minutes`, with a
    /// partition scenario on a second ensemble, a many-locks scenario and each store of its
    /// own under its own faults running alongside.
    Long(RunArgs),
    /// The partition experiment behind the lease rule, with realistic server settings: the leader cut
    /// off from its followers (asymmetric and symmetric) and a one-way follower cut, `--runs`
    /// times per lease mode, then the same with the earlier lease rule that trusted syncs, which must fail.
    Partition(PartitionArgs),
    /// The failover experiment: the faults operators cause every week (rolling restarts,
    /// leader failovers, GC pauses, fsync stalls, client suspends) under stock server settings
    /// and T = 10 s, `--runs` times each, without a grace and with a grace of T; the needless
    /// cancels per fault kind.
    Failover(FailoverArgs),
    /// The election experiment: elected singleton workers (`FencedElection`, by hand and with
    /// `lead()`) writing under their epoch, under every fault kind `--runs` times; then the
    /// election mutants, which must fail.
    Election(RecipeArgs),
    /// The multi-lock experiment: reentrant holds and multi-locks over three lock paths,
    /// under every fault kind `--runs` times, checked per path; then its mutant, which must
    /// fail.
    Multi(RecipeArgs),
    /// One worker process (started by the controller).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Gets what a run takes from the network, before `chaos/run` enters a network namespace
    /// without one: the object store scenario's moto (from PyPI, once), started and stopped.
    #[command(hide = true)]
    Prepare,
}

fn main() {
    match Cmd::parse() {
        Cmd::Worker(args) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime");
            rt.block_on(async {
                match args.recipe.as_str() {
                    "election" => elected::run(args).await,
                    "multi" => multi::run(args).await,
                    "many" => many::run(args).await,
                    _ => worker::run(args).await,
                }
            });
        }
        Cmd::Prepare => {
            let s3 = zkfence_harness::LocalS3::start(zkfence_harness::Preconditions::Enforced);
            if let Err(err) = s3 {
                eprintln!("chaos: the object store scenario's S3 server: {err}");
                std::process::exit(1);
            }
        }
        Cmd::Smoke(args) => std::process::exit(controller_main(Mode::Smoke(args))),
        Cmd::Long(args) => std::process::exit(controller_main(Mode::Long(args))),
        Cmd::Partition(args) => std::process::exit(controller_main(Mode::Partition(args))),
        Cmd::Failover(args) => std::process::exit(controller_main(Mode::Failover(args))),
        Cmd::Election(args) => std::process::exit(controller_main(Mode::Election(args))),
        Cmd::Multi(args) => std::process::exit(controller_main(Mode::Multi(args))),
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
