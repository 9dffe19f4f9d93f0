//! The lease clock's instants as signed nanoseconds from its zero, so that the lease keeps them
//! in atomics and `check()` never takes a lock.

use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

use crate::watchdog::clock;

/// The zero of the lease clock. Instants are stored as signed nanoseconds from it, so they fit
/// an atomic and `check()` never takes a lock; instants before it (a cold proof anchors up to
/// `T` before the process's first acquire) are negative, never clamped up to it.
static EPOCH: LazyLock<Instant> = LazyLock::new(clock::now);

/// "No proof yet": a lease anchored here has ended long ago.
pub(super) const NO_PROOF: i64 = i64::MIN;

/// Starts the lease clock; it must predate every instant the lease is asked to record.
pub(crate) fn start_clock() {
    LazyLock::force(&EPOCH);
}

pub(super) fn to_nanos(at: Instant) -> i64 {
    match at.checked_duration_since(*EPOCH) {
        Some(after) => after.as_nanos() as i64,
        None => -((*EPOCH - at).as_nanos() as i64),
    }
}

/// The instant `nanos` from the epoch. One the clock cannot represent (before the machine
/// started counting) can only be a deadline long past: the epoch stands in for it, which is
/// past too.
pub(super) fn from_nanos(nanos: i64) -> Instant {
    if nanos >= 0 {
        *EPOCH + Duration::from_nanos(nanos as u64)
    } else {
        EPOCH
            .checked_sub(Duration::from_nanos(nanos.unsigned_abs()))
            .unwrap_or(*EPOCH)
    }
}

pub(super) fn nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}
