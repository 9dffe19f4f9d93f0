//! The statistics the bench and the chaos suite report, with one definition of a percentile.

/// The nearest-rank percentile of `sorted` (ascending): the smallest sample with at least a
/// fraction `p` of the samples at or below it. `None` for no samples.
///
/// # Examples
///
/// ```
/// use zkfence_harness::stats::percentile;
/// let samples = [10.0, 20.0, 30.0, 40.0];
/// assert_eq!(percentile(&samples, 0.5), Some(20.0));
/// assert_eq!(percentile(&samples, 0.95), Some(40.0));
/// assert_eq!(percentile(&[], 0.5), None);
/// ```
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_takes_the_smallest_sample_covering_the_fraction() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 0.5), Some(50.0));
        assert_eq!(percentile(&xs, 0.99), Some(99.0));
        assert_eq!(percentile(&xs, 1.0), Some(100.0));
        assert_eq!(percentile(&xs, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 0.5), Some(7.0));
    }
}
