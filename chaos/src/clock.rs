//! One clock for every process of a run: `CLOCK_MONOTONIC` read with the raw system call.
//!
//! All workers and the controller run on one machine, so their readings are comparable. The
//! system call bypasses libfaketime (which interposes the libc `clock_gettime`), so a worker
//! whose clock rate is skewed still logs true times while its lock library sees the skewed
//! clock.

/// Nanoseconds of `CLOCK_MONOTONIC`.
pub(crate) fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer we pass.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_MONOTONIC,
            &mut ts as *mut libc::timespec,
        )
    };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// Milliseconds between two readings.
pub(crate) fn ms(from: i64, to: i64) -> f64 {
    (to - from) as f64 / 1e6
}
