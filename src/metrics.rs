//! Metric names, in one place, and [`describe`] to register their help text.
//!
//! zkfence records through the [`metrics`] facade and never installs a recorder: install one
//! in your application (the `zkfence` CLI serves Prometheus text with `--metrics-addr`).
//! Labels are low-cardinality: `outcome`, `reason`, `store`, and `lock` (the optional name set
//! with [`LockOptions::with_metrics_label`](crate::LockOptions::with_metrics_label), never a node
//! path or a fence's scope).

/// Histogram, seconds: from an acquire call to its outcome; label `outcome` is `acquired`,
/// `timeout`, `busy` (a `try_acquire` that found the lock held) or `error`.
pub const ACQUIRE_DURATION_SECONDS: &str = "zkfence_acquire_duration_seconds";
/// Counter: acquisitions that returned a guard.
pub const ACQUISITIONS_TOTAL: &str = "zkfence_acquisitions_total";
/// Gauge: guards currently held by this process.
pub const HELD_LOCKS: &str = "zkfence_held_locks";
/// Histogram, seconds: from acquisition to release (or drop, or loss).
pub const HOLD_DURATION_SECONDS: &str = "zkfence_hold_duration_seconds";
/// Counter: releases whose delete failed (the node then goes with the session).
pub const RELEASE_ERRORS_TOTAL: &str = "zkfence_release_errors_total";
/// Counter: queue nodes deleted in the background after a cancelled acquire or a dropped
/// guard; label `outcome` is `deleted`, `absent` or `failed`.
pub const BACKGROUND_CLEANUPS_TOTAL: &str = "zkfence_background_cleanups_total";
/// Counter: held locks lost, by `reason` (see [`LossReason`](crate::LossReason)).
pub const LOCK_LOST_TOTAL: &str = "zkfence_lock_lost_total";
/// Histogram, seconds: from the moment a loss became observable (the disconnect seen, the
/// lease deadline passed, the node's deletion notified) to the guard's cancellation.
pub const LOSS_DETECTION_SECONDS: &str = "zkfence_loss_detection_seconds";
/// Counter: watchdog lease probes, by `outcome`: `committed` (a proof for the lease),
/// `refused` (a server answered with an error, e.g. the node is gone), `failed` (no answer).
pub const LEASE_PROBES_TOTAL: &str = "zkfence_lease_probes_total";
/// Histogram: how much lease a session had left right after each proof, in seconds (per
/// session, for its shortest budget). Values near zero mean proofs arrive barely in time.
pub const LEASE_REMAINING_SECONDS: &str = "zkfence_lease_remaining_seconds";
/// Gauge: sessions watched by a watchdog in this process.
pub const WATCHED_SESSIONS: &str = "zkfence_watched_sessions";
/// Gauge: tasks waiting in an in-process queue (behind this process's one contender).
pub const IN_PROCESS_WAITERS: &str = "zkfence_in_process_waiters";
/// Counter: jeopardy spells (a lapsed lease with no evidence of loss, under a grace period),
/// by `outcome`: `entered`, `resumed` (a committed probe found the node again).
pub const JEOPARDY_TOTAL: &str = "zkfence_jeopardy_total";
/// Histogram, seconds: how long each jeopardy spell lasted, by `outcome`: `resumed` or `lost`
/// (the grace ran out, or a loss came first).
pub const JEOPARDY_SECONDS: &str = "zkfence_jeopardy_seconds";
/// Counter: acquisitions held back by the lock-delay after a node ahead vanished without a
/// release.
pub const LOCK_DELAYS_TOTAL: &str = "zkfence_lock_delays_total";
/// Gauge: watches on nodes ahead that a waiter no longer needs (a semaphore waiter admitted by
/// one of the several it watched) left set to fire rather than removed with a request each.
/// Each ends when its node goes or the session ends.
pub const PARKED_WATCHES: &str = "zkfence_parked_watches";
/// Counter: grants by how their session's lease was proved, by `proof`: `held` (it held
/// already: the session holds other locks, or the wait was short), `warmed` (by a proof sent
/// while the acquire still waited, once a node a few places ahead of its own went), `at_grant` (by a
/// proof sent at the grant, a commit on the handoff's path).
pub const GRANT_PROOFS_TOTAL: &str = "zkfence_grant_proofs_total";
/// Counter: fenced writes and claims (see [`crate::fence`]), by `store` (`zookeeper`,
/// `postgres`, ...) and `outcome`: `committed`, `refused`, `lock_lost`, `in_doubt` or `error`.
pub const FENCE_WRITES_TOTAL: &str = "zkfence_fence_writes_total";
/// Histogram, seconds: a fenced write or claim from its call to its outcome, retries
/// included, by `store` and `outcome`.
pub const FENCE_WRITE_DURATION_SECONDS: &str = "zkfence_fence_write_duration_seconds";
/// Counter: fenced writes tried again, by `store` and `reason`: `raced` (the fence moved
/// between its read and the commit) or `serialization` (the database asked for a retry).
pub const FENCE_RETRIES_TOTAL: &str = "zkfence_fence_retries_total";

/// What a metric is, for [`describe`]: a counter, a gauge, or a histogram in seconds.
#[derive(Debug, Clone, Copy)]
enum MetricKind {
    /// A counter, with no unit.
    Counter,
    /// A gauge, with no unit.
    Gauge,
    /// A histogram of seconds.
    Seconds,
}

/// Every zkfence metric, its kind and its help text, in the order [`describe`] registers them.
const DESCRIPTIONS: &[(&str, MetricKind, &str)] = &[
    (
        ACQUIRE_DURATION_SECONDS,
        MetricKind::Seconds,
        "time from an acquire call to its outcome",
    ),
    (
        ACQUISITIONS_TOTAL,
        MetricKind::Counter,
        "acquisitions that returned a guard",
    ),
    (
        HELD_LOCKS,
        MetricKind::Gauge,
        "guards currently held by this process",
    ),
    (
        HOLD_DURATION_SECONDS,
        MetricKind::Seconds,
        "time from acquisition to release, drop or loss",
    ),
    (
        RELEASE_ERRORS_TOTAL,
        MetricKind::Counter,
        "releases whose delete failed",
    ),
    (
        BACKGROUND_CLEANUPS_TOTAL,
        MetricKind::Counter,
        "queue nodes deleted in the background",
    ),
    (
        LOCK_LOST_TOTAL,
        MetricKind::Counter,
        "held locks lost, by reason",
    ),
    (
        LOSS_DETECTION_SECONDS,
        MetricKind::Seconds,
        "time from an observable loss to the guard's cancellation",
    ),
    (
        LEASE_PROBES_TOTAL,
        MetricKind::Counter,
        "watchdog lease probes, by outcome",
    ),
    (
        LEASE_REMAINING_SECONDS,
        MetricKind::Seconds,
        "lease left right after each proof",
    ),
    (
        WATCHED_SESSIONS,
        MetricKind::Gauge,
        "sessions watched by a watchdog in this process",
    ),
    (
        IN_PROCESS_WAITERS,
        MetricKind::Gauge,
        "tasks waiting in an in-process queue",
    ),
    (
        JEOPARDY_TOTAL,
        MetricKind::Counter,
        "jeopardy spells entered and resumed",
    ),
    (
        JEOPARDY_SECONDS,
        MetricKind::Seconds,
        "how long each jeopardy spell lasted, by outcome",
    ),
    (
        LOCK_DELAYS_TOTAL,
        MetricKind::Counter,
        "acquisitions held back by the lock-delay after a failed holder",
    ),
    (
        GRANT_PROOFS_TOTAL,
        MetricKind::Counter,
        "grants by how their session's lease was proved: held, warmed while waiting, or at the grant",
    ),
    (
        PARKED_WATCHES,
        MetricKind::Gauge,
        "watches no longer needed, left to fire instead of removed",
    ),
    (
        FENCE_WRITES_TOTAL,
        MetricKind::Counter,
        "fenced writes and claims, by store and outcome",
    ),
    (
        FENCE_WRITE_DURATION_SECONDS,
        MetricKind::Seconds,
        "time from a fenced write's call to its outcome, retries included",
    ),
    (
        FENCE_RETRIES_TOTAL,
        MetricKind::Counter,
        "fenced writes tried again, by reason",
    ),
];

/// Registers units and help text for every zkfence metric with the installed recorder. Call
/// it once after installing your recorder; recording works without it.
///
/// # Examples
///
/// ```
/// // After installing a recorder (e.g. metrics-exporter-prometheus):
/// zkfence::metrics::describe();
/// ```
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    for &(name, kind, description) in DESCRIPTIONS {
        match kind {
            MetricKind::Counter => describe_counter!(name, description),
            MetricKind::Gauge => describe_gauge!(name, description),
            MetricKind::Seconds => describe_histogram!(name, Unit::Seconds, description),
        }
    }
}

/// Counts one task in [`IN_PROCESS_WAITERS`] while it lives (cancel safe).
pub(crate) struct InProcessWaiter(String);

impl InProcessWaiter {
    pub(crate) fn new(label: &str) -> InProcessWaiter {
        metrics::gauge!(IN_PROCESS_WAITERS, "lock" => label.to_owned()).increment(1.0);
        InProcessWaiter(label.to_owned())
    }
}

impl Drop for InProcessWaiter {
    fn drop(&mut self) {
        metrics::gauge!(IN_PROCESS_WAITERS, "lock" => std::mem::take(&mut self.0)).decrement(1.0);
    }
}

/// The `lock` label value: the configured name, or empty. Shared: every acquire and hold
/// of the lock labels its metrics with it, and a clone allocates nothing (nor does a lock
/// without a name: they share one empty label).
pub(crate) fn lock_label(label: &Option<std::sync::Arc<str>>) -> std::sync::Arc<str> {
    static UNNAMED: std::sync::LazyLock<std::sync::Arc<str>> =
        std::sync::LazyLock::new(|| std::sync::Arc::from(""));
    label.clone().unwrap_or_else(|| UNNAMED.clone())
}
