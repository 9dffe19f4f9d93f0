//! `--pin-server`: the throwaway ZooKeeper server on CPU 0 and everything else of the bench
//! (this process, the runs it starts, Curator's worker) on the other CPUs, so that the
//! server's work and the clients' do not compete for the same cores. On the two-core machine
//! the bench is written for, an uncontended lock is bound by the CPU the two share; pinned,
//! it is bound by the round trips, and the clients' own costs show.

use std::fs;

/// An affinity mask of the CPUs in `cpus`.
fn mask(cpus: impl IntoIterator<Item = usize>) -> libc::cpu_set_t {
    // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes within it for CPUs below
    // CPU_SETSIZE, which the caller's CPUs are (they come from the online count).
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

/// Pins the server's JVM, `server_pid`, to CPU 0, and this process to the others.
pub(super) fn pin(server_pid: i32) -> Result<(), String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return Err(format!(
            "--pin-server needs two CPUs or more (this process may use {cpus}); run without it"
        ));
    }
    let server = mask([0]);
    pin_process(server_pid, &server, "the ZooKeeper server")?;
    let own = mask(1..cpus);
    pin_process(std::process::id() as i32, &own, "the bench")?;
    eprintln!(
        "bench: the ZooKeeper server pinned to CPU 0, the clients to CPUs 1-{}",
        cpus - 1
    );
    Ok(())
}
