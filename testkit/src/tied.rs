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
#[derive(Debug)]
pub(crate) struct Keeper {
    _alive: mpsc::Sender<()>,
}

/// Spawns `cmd` so that the kernel sends the child `signal` when this process dies, from a
/// thread that lives until the returned [`Keeper`] is dropped.
pub(crate) fn spawn_tied(mut cmd: Command, signal: i32) -> std::io::Result<(Child, Keeper)> {
    // SAFETY: prctl in the child before exec; the death signal survives the exec of a
    // non-setuid binary. (Elsewhere than Linux there is no such signal: the child's owner
    // stops it when dropped, and a crash of this process leaves it running.)
    #[cfg(any(target_os = "linux", target_os = "android"))]
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, signal);
            Ok(())
        });
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = signal;
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
