//! CPU time, for the bench's CPU per acquisition: this process's (every thread of it, from
//! `getrusage`) and a server's (from `/proc/<pid>/stat`, user plus system time).

use std::time::Duration;

/// The CPU time this process has used so far, user plus system, every thread.
pub(super) fn own() -> Duration {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The CPU time process `pid` has used so far, user plus system; `None` if it is gone or its
/// stat unreadable.
pub(super) fn of(pid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: utime and stime are the 12th and 13th fields after ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / per_second))
}

/// CPU time at the two ends of a measured window: this process's, and the server's if known.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sample {
    pub(super) own: Duration,
    pub(super) server: Option<Duration>,
}

impl Sample {
    /// Now, with the server `pid` if there is one.
    pub(super) fn now(server: Option<i32>) -> Sample {
        Sample {
            own: own(),
            server: server.and_then(of),
        }
    }

    /// Microseconds per acquisition between `self` and `later`: (this process, the server).
    pub(super) fn per_acquisition(self, later: Sample, acquisitions: u64) -> (f64, Option<f64>) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / acquisitions.max(1) as f64;
        let server = match (self.server, later.server) {
            (Some(a), Some(b)) => Some(per(b.saturating_sub(a))),
            _ => None,
        };
        (per(later.own.saturating_sub(self.own)), server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_cpu_time_grows_and_a_missing_process_has_none() {
        let before = own();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(own() > before);
        assert!(of(std::process::id() as i32).is_some());
        assert_eq!(of(-1), None);
    }
}
