//! `--pin-server`: the throwaway ZooKeeper server on one CPU (the first this process may use)
//! and everything else of the bench (this process, the runs it starts, Curator's worker) on
//! the others, so that the server's work and the clients' do not compete for the same cores. On the two-core machine
//! the bench is written for, an uncontended lock is bound by the CPU the two share; pinned,
//! it is bound by the round trips, and the clients' own costs show.

use std::fs;

/// An affinity mask of the CPUs in `cpus`.
fn mask(cpus: impl IntoIterator<Item = usize>) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes within it for CPUs below
    // CPU_SETSIZE, which the caller's CPUs are (they come from this process's own mask).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        set
    }
}

/// Sets the affinity of every thread of process `pid` (`/proc/<pid>/task`) to `set`; threads
/// they start later inherit it.
fn pin_process(pid: i32, set: &libc::cpu_set_t, what: &str) -> Result<(), String> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|e| format!("--pin-server: cannot list the threads of {what} (pid {pid}): {e}"))?;
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: sched_setaffinity reads `set`, of the size given; a thread that ended
        // meanwhile makes it fail with ESRCH, which is fine.
        let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(set), set) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::ESRCH) {
                return Err(format!(
                    "--pin-server: cannot set the CPU affinity of {what} (thread {tid}): {err}"
                ));
            }
        }
    }
    Ok(())
}

/// Why `--pin-server` could not pin: it cannot be used here (a usage error), or the system
/// refused.
pub(super) enum PinError {
    /// The option does not apply: fewer than two CPUs to share out.
    Usage(String),
    /// Reading or setting an affinity failed.
    Failed(String),
}

/// The CPUs this process may run on (its affinity, which a cpuset or `taskset` may have
/// narrowed), in order.
fn allowed_cpus() -> Result<Vec<usize>, PinError> {
    // SAFETY: an all-zero cpu_set_t is the empty set; sched_getaffinity fills it, of the size
    // given, and CPU_ISSET reads within it for CPUs below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            let err = std::io::Error::last_os_error();
            return Err(PinError::Failed(format!(
                "--pin-server: cannot read this process's CPU affinity: {err}"
            )));
        }
        let size = libc::CPU_SETSIZE as usize;
        Ok((0..size)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect())
    }
}

/// Pins the server's JVM, `server_pid`, to the first CPU this process may use, and this
/// process to the others.
pub(super) fn pin(server_pid: i32) -> Result<(), PinError> {
    let cpus = allowed_cpus()?;
    let Some((&first, rest)) = cpus.split_first().filter(|(_, rest)| !rest.is_empty()) else {
        return Err(PinError::Usage(format!(
            "--pin-server needs two CPUs or more (this process may use {cpus:?}); run without it"
        )));
    };
    pin_process(server_pid, &mask([first]), "the ZooKeeper server").map_err(PinError::Failed)?;
    let own = mask(rest.iter().copied());
    pin_process(std::process::id() as i32, &own, "the bench").map_err(PinError::Failed)?;
    eprintln!("bench: the ZooKeeper server pinned to CPU {first}, the clients to CPUs {rest:?}");
    Ok(())
}
