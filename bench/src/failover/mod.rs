//! `zkfence-bench --failover`: how long an election takes to replace a leader process that was
//! killed (kill -9) or paused (SIGSTOP) past its session timeout T, from the fault to the new
//! leader's first step, zkfence's `FencedElection` against Apache Curator's `LeaderLatch` in
//! the same run; and, for pauses, whether the old leader still believed it led once the new one
//! did (its *stale steps*) and how long it took to step down.
//!
//! Both wait for the server's session expiry (a standby cannot lead before the leader's
//! ephemeral node goes), so the failover is also reported beyond T. The server counts T from
//! the last time it heard from the leader, which came before the fault, so a failover may be
//! shorter than T, and shorter for a client heard from less often. The failover is therefore
//! also split where a third client (the bench's own session) is told that the leader's node is
//! gone: before it, the server's expiry; after it, the implementation's own handoff.
//!
//! Each trial runs two candidate processes of one implementation on a fresh path (`candidate`
//! for zkfence, `bench/java/CuratorLatchBench.java` for Curator, both started by `process`);
//! `trial` runs one trial, `table` prints the tables. Rounds interleave the faults and
//! implementations, with the implementations' order alternating from round to round, so that
//! drift hits both alike.

pub(crate) mod candidate;
mod process;
mod table;
mod trial;

use std::time::Duration;

pub(crate) use self::candidate::{candidate, CandidateArgs};
use self::process::{Setup, Side};
use self::trial::{Fault, Spec, Trial};
use crate::support::parse_session_timeout;
use crate::support::{EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};
use zkfence_testkit::start_local_zookeeper;

/// `zkfence-bench --failover`'s options (flattened into `bench`'s).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Options {
    /// Measure leader failover instead: a leader process killed (kill -9) or paused (SIGSTOP)
    /// past the session timeout, to the new leader's first step, zkfence's election against
    /// Curator's LeaderLatch; for pauses, the old leader's steps after the new one led.
    /// --rounds R (default 5) runs R rounds of one trial per fault and implementation. Runs
    /// against --connect, or a throwaway local server without it.
    #[arg(long = "failover", id = "failover", env = "ZKFENCE_BENCH_FAILOVER")]
    pub(crate) run: bool,
    /// With --failover: the session timeout T every candidate asks for (the server may grant
    /// another; the tables use what it granted).
    #[arg(long, default_value = "2s", value_parser = parse_session_timeout, env = "ZKFENCE_BENCH_SESSION_TIMEOUT")]
    pub(crate) session_timeout: Duration,
}

/// The faults, in each round's order.
const FAULTS: [Fault; 2] = [Fault::Kill, Fault::Pause];

/// The implementations in round `round`'s order: zkfence first in odd rounds, Curator first in
/// even ones.
fn order(round: usize) -> [Side; 2] {
    if round % 2 == 1 {
        [Side::Zkfence, Side::Curator]
    } else {
        [Side::Curator, Side::Zkfence]
    }
}

/// Rounds when `--rounds` is not given.
const DEFAULT_ROUNDS: usize = 5;

/// `zkfence-bench --failover`: `rounds` rounds against `connect` (a throwaway local server
/// without it), under the path `lock`; the exit code: 0, or 70 when a trial failed or a zkfence
/// leader took a step after its successor's first (two leaders at once).
pub(crate) async fn bench(
    connect: Option<&str>,
    lock: &str,
    rounds: Option<usize>,
    options: &Options,
) -> u8 {
    if let Err(err) = zkfence::FencedLock::check_path(lock) {
        eprintln!("zkfence: bad --lock {lock}: {err}");
        return EXIT_USAGE;
    }
    let local;
    let hosts = match connect {
        Some(hosts) => hosts.to_owned(),
        None => {
            eprintln!("bench: starting a throwaway ZooKeeper (forceSync=no) on a loopback port...");
            local = match start_local_zookeeper("zkfence-bench", || {
                zkfence_testkit::LocalZooKeeper::start_for_bench(false)
            })
            .await
            {
                Ok(zk) => zk,
                Err(code) => return code,
            };
            local.addr()
        }
    };
    eprintln!("bench: compiling the Curator candidate ...");
    if let Err(err) = process::prepare_curator().await {
        eprintln!("zkfence: {err}");
        return EXIT_UNAVAILABLE;
    }
    let admin = match crate::support::open(&hosts, Duration::from_secs(10)).await {
        Ok(admin) => admin,
        Err(code) => return code,
    };
    let setup = Setup {
        hosts,
        session_timeout: options.session_timeout,
    };
    let base = format!(
        "{}/failover-{}",
        lock.trim_end_matches('/'),
        std::process::id()
    );
    let rounds = rounds.unwrap_or(DEFAULT_ROUNDS);
    let (trials, failed) = run_rounds(&setup, &admin, &base, rounds).await;
    print!("{}", table::tables(&trials));
    verdict(&trials, failed)
}

/// Every round's trials, each printed as its JSON line as it ends; the trials and how many
/// failed (each failure said on stderr).
async fn run_rounds(
    setup: &Setup,
    admin: &zookeeper_client::Client,
    base: &str,
    rounds: usize,
) -> (Vec<Trial>, usize) {
    let total = rounds * FAULTS.len() * 2;
    let (mut trials, mut failed, mut n) = (Vec::new(), 0, 0);
    for round in 1..=rounds {
        for fault in FAULTS {
            for side in order(round) {
                n += 1;
                eprintln!(
                    "bench failover [{n}/{total}] round {round}: {} with {} ...",
                    fault.describe(),
                    side.name()
                );
                let spec = Spec {
                    round,
                    fault,
                    side,
                    path: format!("{base}/r{round}-{}-{}", fault.name(), side.name()),
                };
                match trial::run(setup, admin, &spec).await {
                    Ok(trial) => {
                        println!("{}", trial.json());
                        trials.push(trial);
                    }
                    Err(err) => {
                        eprintln!("zkfence: failover trial {}: {err}", spec.path);
                        failed += 1;
                    }
                }
            }
        }
    }
    (trials, failed)
}

/// The exit code: a failed trial, or a zkfence leader that still passed its check after its
/// successor led (guarantee 1 broken), fail the bench.
fn verdict(trials: &[Trial], failed: usize) -> u8 {
    let double = trials
        .iter()
        .filter(|t| t.side == Side::Zkfence)
        .filter_map(|t| t.stale.as_ref())
        .filter(|s| s.steps > 0)
        .count();
    if double > 0 {
        eprintln!("zkfence: in {double} pause trials a zkfence leader passed its check after its successor led");
    }
    if failed > 0 || double > 0 {
        EXIT_FAILURE
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_implementations_take_turns_going_first() {
        assert_eq!(order(1), [Side::Zkfence, Side::Curator]);
        assert_eq!(order(2), [Side::Curator, Side::Zkfence]);
        assert_eq!(order(3), order(1));
    }
}
