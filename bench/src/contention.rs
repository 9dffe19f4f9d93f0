//! What the contenders of one run share and record, whatever they contend with (ZooKeeper
//! locks, Redis locks, the raw limits): the holder count that catches a second holder, the
//! measured window, the samples, each contender's share; and the run's report built from them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use super::cpu;
use super::options::{Mode, Run};
use super::report::Report;
use super::stats::Latencies;

/// The value behind a mutex, even if a contender panicked while holding it.
pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the contenders of one run share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) holders: AtomicUsize,
    pub(super) violations: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) acquisitions: AtomicU64,
    pub(super) measuring: AtomicBool,
    /// When the current holder started its release, for the next holder's handoff.
    pub(super) release_started: Mutex<Option<Instant>>,
    pub(super) cycles: Mutex<Vec<u64>>,
    pub(super) handoffs: Mutex<Vec<u64>>,
    pub(super) reads: Mutex<Vec<u64>>,
    /// Raw create (with a children listing pipelined behind it) + delete cycles.
    pub(super) listed_cycles: Mutex<Vec<u64>>,
    /// Each contender's measured acquisitions, pushed as it ends.
    pub(super) shares: Mutex<Vec<u64>>,
}

/// Records the time from `from` to `to`, in nanoseconds.
pub(super) fn record(into: &Mutex<Vec<u64>>, from: Instant, to: Instant) {
    locked(into).push(to.duration_since(from).as_nanos() as u64);
}

/// The holder's turn, just acquired: counts a second holder as a violation and records the
/// handoff from the previous holder's release.
pub(super) fn enter(mode: Mode, shared: &Shared, acquired: Instant, measuring: bool) {
    if shared.holders.fetch_add(1, Ordering::SeqCst) != 0 && mode == Mode::Contended {
        shared.violations.fetch_add(1, Ordering::SeqCst);
    }
    if mode == Mode::Contended {
        if let Some(release_started) = locked(&shared.release_started).take() {
            if measuring {
                record(&shared.handoffs, release_started, acquired);
            }
        }
    }
}

/// The holder's turn ends: (contended) marks the start of its release.
pub(super) fn leave(mode: Mode, shared: &Shared) {
    shared.holders.fetch_sub(1, Ordering::SeqCst);
    let releasing = Instant::now();
    if mode == Mode::Contended {
        *locked(&shared.release_started) = Some(releasing);
    }
}

/// The measured window, opened now and closed at `until`: the CPU time at both ends (this
/// process's, and the server `pid`'s if known).
pub(super) async fn measure(
    shared: &Shared,
    until: Instant,
    server: Option<i32>,
) -> [cpu::Sample; 2] {
    let from = cpu::Sample::now(server);
    shared.measuring.store(true, Ordering::SeqCst);
    tokio::time::sleep_until(until).await;
    shared.measuring.store(false, Ordering::SeqCst);
    [from, cpu::Sample::now(server)]
}

/// The run's figures from what its contenders recorded, with the CPU per acquisition over the
/// measured window `cpu`.
pub(super) fn report(run: Run, shared: &Shared, cpu: [cpu::Sample; 2]) -> Report {
    let cycles = Latencies::from_nanos(&locked(&shared.cycles));
    let handoffs = Latencies::from_nanos(&locked(&shared.handoffs));
    let reads = Latencies::from_nanos(&locked(&shared.reads));
    let listed = Latencies::from_nanos(&locked(&shared.listed_cycles));
    let contended = run.mode == Mode::Contended;
    let acquisitions = shared.acquisitions.load(Ordering::SeqCst);
    let (client_cpu, server_cpu) = cpu[0].per_acquisition(cpu[1], acquisitions);
    Report {
        read_p50_us: reads.percentile(0.5),
        listed_cycle_p50_us: listed.percentile(0.5),
        violations: shared.violations.load(Ordering::SeqCst),
        errors: shared.errors.load(Ordering::SeqCst),
        client_cpu_us: Some(client_cpu),
        server_cpu_us: server_cpu,
        max_share: contended
            .then(|| max_share(&locked(&shared.shares)))
            .flatten(),
        ..Report::of(run, acquisitions, &cycles, &handoffs)
    }
}

/// The largest share of the acquisitions one contender made (a fair lock's is about 1/N).
fn max_share(shares: &[u64]) -> Option<f64> {
    let total: u64 = shares.iter().sum();
    let most = shares.iter().max()?;
    (total > 0).then(|| *most as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_share_of_the_acquisitions() {
        assert_eq!(max_share(&[1, 3]), Some(0.75));
        assert_eq!(max_share(&[]), None);
        assert_eq!(max_share(&[0, 0]), None);
    }
}
