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

/// For fence implementations: the pause before retrying a fenced write for the `attempt`th
/// time (1 for the first retry): 5 ms doubling up to 160 ms, plus a random part of as much
/// again, so that writers that conflicted do not retry in step.
///
/// # Examples
///
/// ```
/// let pause = zkfence::fence::retry_backoff(1);
/// assert!(pause >= std::time::Duration::from_millis(10) && pause < std::time::Duration::from_millis(20));
/// ```
pub fn retry_backoff(attempt: u32) -> std::time::Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let base = 5u64 << attempt.min(5);
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(attempt);
    std::time::Duration::from_millis(base + random.finish() % base)
}

/// For fence implementations: the first error of type `T` in `err`'s `source()` chain,
/// `err` itself included; how a fence finds its store's error (a serialization failure to
/// retry) inside the error type of a caller's closure.
///
/// # Examples
///
/// ```
/// #[derive(Debug)]
/// struct Mine(std::io::Error);
/// impl std::fmt::Display for Mine {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("mine") }
/// }
/// impl std::error::Error for Mine {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> { Some(&self.0) }
/// }
/// let err = Mine(std::io::Error::other("deep"));
/// assert!(zkfence::fence::find_cause::<std::io::Error>(&err).is_some());
/// ```
pub fn find_cause<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}
