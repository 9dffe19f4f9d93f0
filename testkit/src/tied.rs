//! Children that die with this process ([`spawn_tied`]), whichever thread starts them.
//!
//! The kernel's parent-death signal (`PR_SET_PDEATHSIG`) follows the *thread* that forked the
//! child, not the process (prctl(2)): a server started from a pooled thread, as tokio's
//! `spawn_blocking` runs its closures, is signalled when that thread retires after 10 s idle,
//! while its owner still uses it. So the child is forked from a thread of its own that lives
//! as long as the returned [`Keeper`].

#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::sync::mpsc;

/// Keeps the thread that started a tied child alive; the child's owner holds it (and drops it
/// after stopping the child).
///
/// # Examples
///
/// See [`spawn_tied`].
#[derive(Debug)]
pub struct Keeper {
    _alive: mpsc::Sender<()>,
}

/// Makes the child `cmd` spawns get `signal` when the thread that spawns it ends (Linux's
/// parent-death signal, which follows the forking thread, not the process): spawned from a
/// thread that lives as long as the process (the main thread, or [`spawn_tied`]'s), the child
/// dies with the process, a stopped child too. A child whose parent died before it was tied is
/// not started. Elsewhere than Linux it does nothing: the child's owner must stop it.
///
/// # Examples
///
/// ```no_run
/// let mut cmd = std::process::Command::new("sleep");
/// cmd.arg("600");
/// zkfence_testkit::die_with_spawner(&mut cmd, libc::SIGKILL);
/// let child = cmd.spawn()?; // from the main thread: it dies with the process
/// # let _ = child; Ok::<(), std::io::Error>(())
/// ```
pub fn die_with_spawner(cmd: &mut Command, signal: i32) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: getpid only reads the process's identity.
        let parent = unsafe { libc::getpid() };
        // SAFETY: prctl and getppid are async-signal-safe, as between fork and exec they must
        // be; the death signal survives the exec of a non-setuid binary.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, signal);
                // The parent died between the fork and the prctl: the signal will never come.
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (cmd, signal);
}

/// Spawns `cmd` so that the kernel sends the child `signal` when this process dies (Linux:
/// the parent-death signal), from a thread that lives until the returned [`Keeper`] is
/// dropped: a server your test starts goes with the test, however the test dies.
///
/// # Errors
///
/// The spawn's error.
///
/// # Examples
///
/// ```no_run
/// let mut cmd = std::process::Command::new("redis-server");
/// cmd.args(["--port", "6390", "--save", ""]);
/// let (mut child, keeper) = zkfence_testkit::spawn_tied(cmd, libc::SIGKILL)?;
/// // ... the test ...
/// child.kill()?;
/// child.wait()?;
/// drop(keeper);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn_tied(mut cmd: Command, signal: i32) -> std::io::Result<(Child, Keeper)> {
    die_with_spawner(&mut cmd, signal);
    let (spawned_tx, spawned_rx) = mpsc::channel();
    let (alive, until_dropped) = mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("testkit-child".into())
        .spawn(move || {
            let _ = spawned_tx.send(cmd.spawn());
            // Returns once the Keeper (the only sender) is gone.
            let _ = until_dropped.recv();
        })?;
    let child = spawned_rx
        .recv()
        .map_err(|_| std::io::Error::other("the spawning thread ended early"))??;
    Ok((child, Keeper { _alive: alive }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tied_child_outlives_the_thread_that_asked_for_it_and_dies_with_its_keeper_gone() {
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let (mut child, keeper) = std::thread::spawn(move || spawn_tied(cmd, libc::SIGKILL))
            .join()
            .unwrap()
            .unwrap();
        // The thread that asked is gone; the child still runs.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none());
        // Its keeper gone, the starting thread ends and the kernel kills the child.
        drop(keeper);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
