//! The `zkfence_fence_*` metrics and logs of fenced writes, for every fence implementation.

use std::fmt;

use super::error::FenceError;

/// For fence implementations: records a fenced write's `outcome` in the `zkfence_fence_*`
/// metrics ([`FENCE_WRITES_TOTAL`](crate::metrics::FENCE_WRITES_TOTAL),
/// [`FENCE_WRITE_DURATION_SECONDS`](crate::metrics::FENCE_WRITE_DURATION_SECONDS)) under the
/// label `store`, and logs a refusal at `warn` (a newer holder exists, or the data looks
/// reset) and other failures at `debug`.
///
/// # Examples
///
/// ```
/// let started = std::time::Instant::now();
/// let outcome: Result<(), zkfence::fence::FenceError<std::io::Error>> = Ok(());
/// zkfence::fence::record("my-store", started, &outcome);
/// ```
pub fn record<T, E: fmt::Display>(
    store: &'static str,
    started: std::time::Instant,
    outcome: &Result<T, FenceError<E>>,
) {
    let label = match outcome {
        Ok(_) => "committed",
        Err(FenceError::Refused { .. }) => "refused",
        Err(FenceError::LockLost { .. }) => "lock_lost",
        Err(FenceError::InDoubt { .. }) => "in_doubt",
        Err(FenceError::Store(_) | FenceError::Invalid(_)) => "error",
    };
    let labels = [("store", store), ("outcome", label)];
    metrics::counter!(crate::metrics::FENCE_WRITES_TOTAL, &labels).increment(1);
    metrics::histogram!(crate::metrics::FENCE_WRITE_DURATION_SECONDS, &labels)
        .record(started.elapsed().as_secs_f64());
    match outcome {
        Err(err @ FenceError::Refused { .. }) => {
            tracing::warn!(store, cause = %err, "fenced write refused")
        }
        Err(err) => tracing::debug!(store, cause = %err, "fenced write failed"),
        Ok(_) => tracing::debug!(store, "fenced write committed"),
    }
}

/// For fence implementations: counts a retry of a fenced write in
/// [`FENCE_RETRIES_TOTAL`](crate::metrics::FENCE_RETRIES_TOTAL), by `store` and `reason`.
///
/// # Examples
///
/// ```
/// zkfence::fence::record_retry("my-store", "raced");
/// ```
pub fn record_retry(store: &'static str, reason: &'static str) {
    let labels = [("store", store), ("reason", reason)];
    metrics::counter!(crate::metrics::FENCE_RETRIES_TOTAL, &labels).increment(1);
}
