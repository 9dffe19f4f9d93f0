//! The bench's statistics: latency samples summarised with the test kit's one percentile
//! definition (nearest rank, `zkfence_harness::stats::percentile`), and the rates it reports.

use zkfence_harness::stats::percentile;

/// One kind of latency sample of a run (cycles, handoffs or reads), in microseconds, sorted
/// ascending.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Latencies {
    sorted_us: Vec<f64>,
}

impl Latencies {
    /// The samples, recorded in nanoseconds, as sorted microseconds.
    pub(super) fn from_nanos(samples: &[u64]) -> Self {
        let mut sorted_us: Vec<f64> = samples.iter().map(|&ns| ns as f64 / 1000.0).collect();
        sorted_us.sort_unstable_by(f64::total_cmp);
        Latencies { sorted_us }
    }

    /// The nearest-rank percentile `p` (a fraction, 0 to 1) in microseconds; `None` without
    /// samples.
    pub(super) fn percentile(&self, p: f64) -> Option<f64> {
        percentile(&self.sorted_us, p)
    }

    /// The nearest-rank percentile `p` in microseconds, 0 without samples (a run that measured
    /// nothing reports 0, as the bench always has).
    pub(super) fn percentile_or_zero(&self, p: f64) -> f64 {
        self.percentile(p).unwrap_or(0.0)
    }
}

/// `n` (requests, created nodes) per acquisition; a side without acquisitions divides by 1.
pub(super) fn per_acquisition(n: u64, acquisitions: u64) -> f64 {
    n as f64 / acquisitions.max(1) as f64
}

/// `n` per second of a measured window of `seconds`.
pub(super) fn per_second(n: u64, seconds: f64) -> f64 {
    n as f64 / seconds
}

/// The server's writes (transactions) per acquisition between two zxid probes: those strictly
/// between them (the probes themselves are two). Both probes fall in one leader epoch.
pub(super) fn writes_per_acquisition(first: i64, last: i64, acquisitions: u64) -> f64 {
    per_acquisition((last - first - 1).max(0) as u64, acquisitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_are_microseconds_at_the_nearest_rank() {
        // Unsorted nanoseconds in, sorted microseconds out.
        let latencies = Latencies::from_nanos(&[4000, 1000, 3000, 2000]);
        assert_eq!(latencies.percentile(0.5), Some(2.0));
        assert_eq!(latencies.percentile(0.99), Some(4.0));
        assert_eq!(latencies.percentile(0.0), Some(1.0));
        assert_eq!(latencies.percentile_or_zero(0.5), 2.0);
    }

    #[test]
    fn no_samples_give_no_percentile_and_a_zero_report() {
        let none = Latencies::from_nanos(&[]);
        assert_eq!(none.percentile(0.5), None);
        assert_eq!(none.percentile_or_zero(0.99), 0.0);
    }

    #[test]
    fn rates_divide_by_at_least_one_acquisition() {
        assert_eq!(per_acquisition(9, 3), 3.0);
        assert_eq!(per_acquisition(9, 0), 9.0);
        assert_eq!(per_second(10, 4.0), 2.5);
    }
}
