//! The lifeline: a small process, started beside the command, that kills the command's whole
//! process group the moment zkfence dies, by any means (SIGKILL, the OOM killer, a crash), so
//! that a command never outlives its supervisor while the lock passes to someone else.
//!
//! It is zkfence itself (`zkfence lifeline`, hidden), reading a pipe whose write end only
//! zkfence holds: the kernel closes that end when zkfence dies, however it dies, and the read
//! returns end-of-file. zkfence writes `watch <pgid>` once the command runs and `done` once
//! the group is gone; end-of-file without `done` means zkfence died, and the lifeline sends
//! SIGKILL to the group, then exits. It runs in a process group of its own and ignores the
//! signals a terminal or a group-wide kill of zkfence's group would send.
//!
//! Why not only the parent-death signal: `PR_SET_PDEATHSIG` reaches the command's first
//! process alone (its children, forked from a shell script, say, are in the group but do not
//! get it), and it fires when the *thread* that forked the child exits, not the process. The
//! command's first process also gets it, as a second line (see `supervise`).

use std::io::{BufRead as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, ChildStdin, Command, Stdio};

/// The signals the lifeline ignores: what a terminal sends its foreground group, and what a
/// shell sends a job it stops or kills by group (anything but SIGKILL).
const IGNORED: [i32; 8] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGTSTP,
    libc::SIGTTIN,
    libc::SIGTTOU,
    libc::SIGPIPE,
];

/// A running lifeline; say [`done`](Lifeline::done) once the command's group is gone.
#[derive(Debug)]
pub(crate) struct Lifeline {
    process: Child,
    pipe: Option<ChildStdin>,
}

impl Lifeline {
    /// Starts the lifeline process.
    pub(crate) fn start() -> std::io::Result<Lifeline> {
        // /proc/self/exe runs this very binary, even if it was replaced or deleted since.
        let mut command = Command::new("/proc/self/exe");
        command
            .arg("lifeline")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0);
        // SAFETY: the closure runs between fork and exec and only calls signal(2), which is
        // async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                ignore_signals();
                Ok(())
            });
        }
        let mut process = command.spawn()?;
        let pipe = process.stdin.take();
        Ok(Lifeline { process, pipe })
    }

    /// Tells the lifeline which process group to kill if zkfence dies.
    pub(crate) fn watch(&mut self, pgid: i32) -> std::io::Result<()> {
        self.say(&format!("watch {pgid}\n"))
    }

    /// The command's group is gone: the lifeline exits without killing anything.
    pub(crate) fn done(mut self) {
        let _ = self.say("done\n");
        self.close();
    }

    fn say(&mut self, line: &str) -> std::io::Result<()> {
        match &mut self.pipe {
            Some(pipe) => pipe.write_all(line.as_bytes()),
            None => Ok(()),
        }
    }

    /// Closes the pipe and waits for the lifeline to exit.
    fn close(&mut self) {
        if self.pipe.take().is_some() {
            let _ = self.process.wait();
        }
    }
}

impl Drop for Lifeline {
    /// Without [`done`](Lifeline::done) (a panic unwinding, say), closing the pipe means what
    /// zkfence's death means: the lifeline kills the group it watches.
    fn drop(&mut self) {
        self.close();
    }
}

fn ignore_signals() {
    for signal in IGNORED {
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// The `zkfence lifeline` process: reads zkfence's lines until `done` (exit quietly) or
/// end-of-file (zkfence died: kill the group it named).
pub(crate) fn main() -> u8 {
    ignore_signals();
    let mut group: Option<i32> = None;
    let stdin = std::io::stdin();
    let mut line = String::new();
    loop {
        line.clear();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = line.trim();
        if line == "done" {
            return 0;
        }
        if let Some(pgid) = line.strip_prefix("watch ").and_then(|p| p.parse().ok()) {
            group = Some(pgid);
        }
    }
    if let Some(pgid) = group.filter(|&p| p > 1) {
        // SAFETY: kill(2) on the command's process group, which zkfence named.
        unsafe { libc::kill(-pgid, libc::SIGKILL) };
        eprintln!("zkfence lifeline: zkfence is gone; killed the command's process group {pgid}");
    }
    0
}
