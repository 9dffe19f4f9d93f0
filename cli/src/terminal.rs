//! Sharing the terminal with the command, as a shell does: the command runs in a process group
//! of its own (so that zkfence alone decides when to signal it), and when stdin is a terminal
//! that group is made the terminal's foreground for as long as the command runs, so it can read
//! the terminal (instead of being stopped by SIGTTIN) and gets the keyboard's ^C and ^Z.

use std::os::fd::AsRawFd as _;

/// The terminal on stdin, if stdin is one, and the foreground group to give it back to.
#[derive(Debug)]
pub(crate) struct Terminal {
    fd: i32,
    ours: libc::pid_t,
}

/// The signals a shell's job control makes zkfence ignore or catch, reset to their defaults in
/// the command (dispositions set to "ignore" survive exec).
const RESET_IN_CHILD: [i32; 6] = [
    libc::SIGTTOU,
    libc::SIGTTIN,
    libc::SIGTSTP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGPIPE,
];

impl Terminal {
    /// The controlling terminal on stdin when zkfence is its foreground job; `None` otherwise
    /// (a pipe, a file, or zkfence started in the background).
    pub(crate) fn on_stdin() -> Option<Terminal> {
        let fd = std::io::stdin().as_raw_fd();
        // SAFETY: isatty, tcgetpgrp and getpgrp only read process and terminal state.
        let (tty, foreground, ours) =
            unsafe { (libc::isatty(fd) == 1, libc::tcgetpgrp(fd), libc::getpgrp()) };
        if !tty || foreground != ours {
            return None;
        }
        // Taking the terminal back later happens from a background group: without this, the
        // kernel would stop zkfence with SIGTTOU. The command gets the default back.
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        Some(Terminal { fd, ours })
    }

    /// Prepares `command` to run in its own process group, made the terminal's foreground
    /// before it execs when there is a terminal, with job-control signals at their defaults.
    pub(crate) fn prepare(terminal: Option<&Terminal>, command: &mut tokio::process::Command) {
        let fd = terminal.map(|t| t.fd);
        command.process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // async-signal-safe functions (setpgid, getpid, tcsetpgrp, signal, sigprocmask).
        unsafe {
            command.pre_exec(move || {
                let me = libc::getpid();
                libc::setpgid(0, 0);
                if let Some(fd) = fd {
                    // SIGTTOU is still ignored here (inherited), so this cannot stop us.
                    libc::tcsetpgrp(fd, me);
                }
                for signal in RESET_IN_CHILD {
                    libc::signal(signal, libc::SIG_DFL);
                }
                let mut none: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
                Ok(())
            });
        }
    }

    /// Gives the terminal to the command's group `pgid` (the child does it too; whichever runs
    /// first wins the race harmlessly, as in a shell).
    pub(crate) fn give_to(&self, pgid: libc::pid_t) {
        // SAFETY: tcsetpgrp on our terminal; SIGTTOU is ignored.
        unsafe { libc::tcsetpgrp(self.fd, pgid) };
    }

    /// Takes the terminal back for zkfence's own group.
    pub(crate) fn take_back(&self) {
        // SAFETY: as in `give_to`.
        unsafe { libc::tcsetpgrp(self.fd, self.ours) };
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.take_back();
    }
}
