//! The lease clock: the monotonic clock as tokio reads it, plus the time the machine has spent
//! suspended since the process started.
//!
//! `CLOCK_MONOTONIC` (behind `std` and tokio's `Instant`) stops while the machine sleeps. A
//! lease measured on it would still pass `check()` after a laptop or host wakes from a suspend
//! longer than the lease, while the servers, whose clocks ran on, have expired the session and
//! handed the lock on. Linux's `CLOCK_BOOTTIME` counts the suspend; the difference between the
//! two clocks grows by exactly the time spent suspended. So the lease reads tokio's `Instant`
//! (which keeps tests' paused time working) and adds that growth, in whole milliseconds.
//!
//! A guest VM that its hypervisor pauses stops both clocks: nothing inside it can tell, and that
//! case stays with the fencing token. On systems without `CLOCK_BOOTTIME` the correction is zero.
//!
//! Timers are still tokio's, on the monotonic clock: a timer set before a suspend fires late by
//! the suspend. The watchdog therefore never sleeps longer than [`LONGEST_SLEEP`] while it holds
//! guards, and `check()`, which reads this clock, fails at once after a wake-up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::time::Instant;

/// The longest the watchdog sleeps while guards are held, so that it notices a suspend (which
/// its monotonic timers do not count) within this long after the machine wakes.
pub(crate) const LONGEST_SLEEP: Duration = Duration::from_secs(1);

/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC` when the process first read the lease clock.
static BASE: LazyLock<i128> = LazyLock::new(boot_minus_mono);

/// The largest suspend seen so far, in milliseconds: the correction never goes back.
static SUSPENDED_MS: AtomicU64 = AtomicU64::new(0);

#[cfg(test)]
thread_local! {
    /// A suspend injected by a unit test, on its own thread (its paused-time runtime's).
    static INJECTED: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Now, on the lease clock.
pub(crate) fn now() -> Instant {
    Instant::now() + suspended()
}

/// The tokio (monotonic) instant at which the lease clock will read `at`, as far as is known
/// now: a suspend still to come makes the lease clock get there earlier.
pub(crate) fn timer(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or(at)
}

/// How long the machine has been suspended since the process first read the lease clock.
pub(crate) fn suspended() -> Duration {
    let grown = boot_minus_mono() - *BASE;
    // Whole milliseconds: the two clocks are read one after the other, so the difference
    // jitters by nanoseconds; rounding down keeps it at zero on a machine that never slept.
    let ms = u64::try_from(grown / 1_000_000).unwrap_or(0);
    let ms = SUSPENDED_MS.fetch_max(ms, Ordering::AcqRel).max(ms);
    let suspended = Duration::from_millis(ms);
    #[cfg(test)]
    let suspended = suspended + INJECTED.with(std::cell::Cell::get);
    suspended
}

/// `CLOCK_BOOTTIME − CLOCK_MONOTONIC`, in nanoseconds: the time the machine has spent
/// suspended since it booted (in a time namespace, plus the namespace's offsets).
pub(crate) fn boot_minus_mono() -> i128 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let read = |clock| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec, which lives on our stack.
            let ok = unsafe { libc::clock_gettime(clock, &mut ts) } == 0;
            ok.then(|| ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128)
        };
        let boot = read(libc::CLOCK_BOOTTIME);
        let mono = read(libc::CLOCK_MONOTONIC);
        match (boot, mono) {
            (Some(boot), Some(mono)) => boot - mono,
            _ => 0,
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        0
    }
}

/// Makes the lease clock run `by` ahead on this thread, as a suspend of that long would (unit
/// tests only).
#[cfg(test)]
pub(crate) fn inject_suspend(by: Duration) {
    INJECTED.with(|injected| injected.set(injected.get() + by));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_correction_is_zero_on_a_machine_that_did_not_sleep() {
        // Readings a few nanoseconds apart must not make the lease clock run ahead.
        let before = boot_minus_mono();
        for _ in 0..1000 {
            let _ = suspended();
        }
        let grown = boot_minus_mono() - before;
        assert!(
            grown < 1_000_000,
            "the machine slept during the test? {grown} ns"
        );
    }

    /// The kernel half of the clock, seen from a time namespace whose `CLOCK_BOOTTIME` runs a
    /// day ahead of its `CLOCK_MONOTONIC` (as after a day of suspend): this process reads the
    /// difference, and the test, re-run inside the namespace, must find the day in it.
    #[test]
    fn the_lease_clock_reads_boottime_and_not_only_the_monotonic_clock() {
        const DAY: i128 = 86_400 * 1_000_000_000;
        if let Ok(expected) = std::env::var("ZKFENCE_TIMENS_EXPECT") {
            // Inside the namespace.
            let expected: i128 = expected.parse().expect("a number");
            let seen = boot_minus_mono();
            assert!(
                (seen - expected).abs() < 1_000_000_000,
                "boottime − monotonic is {seen} ns here, {expected} expected"
            );
            return;
        }
        if !cfg!(target_os = "linux") || unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: time namespaces need Linux and root (CI runs as root)");
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let expected = boot_minus_mono() + DAY;
        let out = std::process::Command::new("unshare")
            .args(["--time", "--boottime", "86400", "--fork", "--"])
            .arg(exe)
            .args([
                "--exact",
                "watchdog::clock::tests::the_lease_clock_reads_boottime_and_not_only_the_monotonic_clock",
                "--nocapture",
            ])
            .env("ZKFENCE_TIMENS_EXPECT", expected.to_string())
            .output()
            .expect("unshare (util-linux) runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "inside a time namespace:\n{text}");
        assert!(
            text.contains("1 passed"),
            "the inner test did not run:\n{text}"
        );
    }
}
