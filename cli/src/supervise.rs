//! The supervisor of a command that runs under a hold: `run` hands it the guard it acquired
//! (one lock's, or a multi-lock's), `elect` each term's leadership.
//!
//! - The command runs in a process group of its own, with the hold's variables, the terminal's
//!   foreground when stdin is one, and a [`Lifeline`] that kills the group if zkfence dies.
//! - When the hold is lost: SIGTERM to the group (and SIGCONT, should it be stopped), SIGKILL
//!   after `--kill-after`, then the release; exit 76.
//! - In jeopardy (with `--grace`): SIGSTOP to the group until the hold is steady again
//!   (`--on-jeopardy stop`, the default), or nothing (`keep`).
//! - Asked to let go (a revocation request): SIGTERM, then SIGKILL after `--kill-after`, then
//!   the release; exit 79 (`--on-revoke term`, the default), or nothing (`ignore`).
//! - When the command exits: what is left of its group is stopped the same way, then the
//!   release; the command's code stands only behind a confirmed release (see [`finish`]).

use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use std::future::Future;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use zkfence::{Leadership, LockGuard, LockOptions, LossReason, MultiGuard};

use crate::duration::parse_duration;
use crate::exit::{
    EXIT_CANNOT_RUN, EXIT_FAILURE, EXIT_LOCK_LOST, EXIT_NOT_EXECUTABLE, EXIT_REVOKED,
};
use crate::lifeline::Lifeline;
use crate::terminal::Terminal;

/// What the supervisor does to a command in jeopardy.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnJeopardy {
    /// SIGSTOP its process group while in jeopardy, SIGCONT when the hold is steady again.
    Stop,
    /// Let it run (its writes must be fenced: the lease does not vouch for them then).
    Keep,
}

/// What the supervisor does to a command whose lock someone asks to let go.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnRevoke {
    /// SIGTERM (SIGKILL after --kill-after), release the lock, exit 79.
    Term,
    /// Let it run; the request is only logged.
    Ignore,
}

/// What the supervisor holds: one lock's guard or a multi-lock's.
pub(crate) trait Hold: Send + Sync {
    /// Until the hold is lost (or released), and why.
    fn lost(&self) -> impl Future<Output = LossReason> + Send;
    /// `true` while in jeopardy.
    fn jeopardy(&self) -> watch::Receiver<bool>;
    /// Until someone asks the holder to let go.
    fn revocation_requested(&self) -> impl Future<Output = ()> + Send;
    /// The synchronous check.
    fn check(&self) -> zkfence::Result<()>;
    /// The release.
    fn release(self) -> impl Future<Output = zkfence::Result<()>> + Send;
    /// The lock node(s), for messages.
    fn nodes(&self) -> String;
}

impl<M: zkfence::Mode> Hold for LockGuard<M> {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        zkfence::Held::lost(self)
    }
    fn jeopardy(&self) -> watch::Receiver<bool> {
        zkfence::Held::jeopardy(self)
    }
    fn revocation_requested(&self) -> impl Future<Output = ()> + Send {
        zkfence::Held::revocation_requested(self)
    }
    fn check(&self) -> zkfence::Result<()> {
        zkfence::Held::check(self)
    }
    fn release(self) -> impl Future<Output = zkfence::Result<()>> + Send {
        LockGuard::release(self)
    }
    fn nodes(&self) -> String {
        self.node_path().to_owned()
    }
}

impl Hold for MultiGuard {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        zkfence::MultiHeld::lost(self)
    }
    fn jeopardy(&self) -> watch::Receiver<bool> {
        zkfence::MultiHeld::jeopardy(self)
    }
    fn revocation_requested(&self) -> impl Future<Output = ()> + Send {
        zkfence::MultiHeld::revocation_requested(self)
    }
    fn check(&self) -> zkfence::Result<()> {
        zkfence::MultiHeld::check(self)
    }
    fn release(self) -> impl Future<Output = zkfence::Result<()>> + Send {
        MultiGuard::release(self)
    }
    fn nodes(&self) -> String {
        let nodes: Vec<&str> = self.helds().iter().map(|h| h.node_path()).collect();
        nodes.join(", ")
    }
}

impl Hold for Leadership {
    fn lost(&self) -> impl Future<Output = LossReason> + Send {
        zkfence::Held::lost(self)
    }
    fn jeopardy(&self) -> watch::Receiver<bool> {
        zkfence::Held::jeopardy(self)
    }
    /// A leader is never asked to let go through its node (a write into it would strand the
    /// Curator `LeaderLatch` behind it, which watches only for its deletion).
    fn revocation_requested(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    fn check(&self) -> zkfence::Result<()> {
        zkfence::Held::check(self)
    }
    fn release(self) -> impl Future<Output = zkfence::Result<()>> + Send {
        Leadership::resign(self)
    }
    fn nodes(&self) -> String {
        self.node_path().to_owned()
    }
}

/// The flags of every subcommand that supervises a command (`run`, `elect`): how the hold
/// rides out trouble and how the command is stopped.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Options {
    /// After SIGTERM on lock loss, how long before SIGKILL.
    #[arg(long, env = "ZKFENCE_KILL_AFTER", value_parser = parse_duration, default_value = "5s")]
    kill_after: Duration,
    /// How long the lock may stay in jeopardy (its lease lapsed with no evidence of loss, as
    /// while the ensemble elects a leader) before it counts as lost; zero: a lapse is a loss.
    /// A grace of the session timeout rides out leader failovers and rolling restarts.
    #[arg(long, env = "ZKFENCE_GRACE", value_parser = parse_duration, default_value = "0s")]
    grace: Duration,
    /// What the command does while the lock is in jeopardy: `stop` (SIGSTOP to its process
    /// group, SIGCONT when the lock holds again) or `keep` (it runs on; only fenced writes are
    /// then safe).
    #[arg(long, env = "ZKFENCE_ON_JEOPARDY", value_enum, default_value = "stop")]
    on_jeopardy: OnJeopardy,
    /// How long the final release may take before zkfence exits anyway (the node then goes
    /// with the session, within the session timeout).
    #[arg(long, env = "ZKFENCE_RELEASE_TIMEOUT", value_parser = parse_duration, default_value = "3s")]
    pub(crate) release_timeout: Duration,
    /// Ride out short disconnects until the lease ends, instead of stopping the command at once.
    #[arg(long, env = "ZKFENCE_RIDE_OUT")]
    ride_out: bool,
}

impl Options {
    /// The lock options these flags set.
    pub(crate) fn lock_options(&self) -> LockOptions {
        LockOptions::default()
            .with_ride_out_disconnects(self.ride_out)
            .with_grace(self.grace)
    }

    /// The supervisor's policy, with what it does on a revocation request.
    pub(crate) fn policy(&self, on_revoke: OnRevoke) -> Policy {
        Policy {
            kill_after: self.kill_after,
            release_timeout: self.release_timeout,
            on_jeopardy: self.on_jeopardy,
            on_revoke,
        }
    }
}

/// How the supervisor treats its command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// From SIGTERM to SIGKILL, on a loss and for what a command leaves behind.
    kill_after: Duration,
    /// How long the final release may take.
    release_timeout: Duration,
    on_jeopardy: OnJeopardy,
    on_revoke: OnRevoke,
}

/// How a supervised command's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The command exited; the code to exit with ([`EXIT_LOCK_LOST`] when the hold was found
    /// lost, or its release unconfirmed, after the exit).
    Exited(u8),
    /// The hold was lost while the command ran; the command was stopped.
    Lost,
    /// Someone asked the holder to let go; the command was stopped, and the code says whether
    /// the release was confirmed.
    Revoked(u8),
    /// The command could not be started (the hold was released).
    NotStarted(u8),
}

impl Outcome {
    /// The exit code this outcome stands for.
    pub(crate) fn code(self) -> u8 {
        match self {
            Outcome::Exited(code) | Outcome::Revoked(code) | Outcome::NotStarted(code) => code,
            Outcome::Lost => EXIT_LOCK_LOST,
        }
    }
}

/// Runs `command` with `env` while `guard` holds `lock`, and releases it: how that ended
/// (see [`Outcome`]).
pub(crate) async fn supervise<H: Hold>(
    command: &[String],
    env: &[(String, String)],
    guard: H,
    lock: &str,
    policy: &Policy,
) -> Outcome {
    let mut running = match Running::start(command, env) {
        Ok(running) => running,
        Err(code) => {
            release_bounded(guard, policy.release_timeout).await.ok();
            return Outcome::NotStarted(code);
        }
    };
    match running.watch(&guard, policy).await {
        Ended::Exited(code) => {
            running.clear_group(policy.kill_after).await;
            running.lifeline.done();
            Outcome::Exited(finish(lock, guard, code, policy.release_timeout).await)
        }
        Ended::Lost(reason) => {
            eprintln!(
                "zkfence: lock {lock} lost ({reason}); sent SIGTERM to the command (SIGKILL in {:?})",
                policy.kill_after
            );
            running.stop_group(policy.kill_after).await;
            running.lifeline.done();
            // Best effort: the node may still be ours (a disconnect we did not ride out).
            release_bounded(guard, policy.release_timeout).await.ok();
            Outcome::Lost
        }
        Ended::Revoked => {
            eprintln!(
                "zkfence: asked to let go of lock {lock}; sent SIGTERM to the command (SIGKILL in {:?})",
                policy.kill_after
            );
            running.stop_group(policy.kill_after).await;
            running.lifeline.done();
            Outcome::Revoked(finish(lock, guard, EXIT_REVOKED, policy.release_timeout).await)
        }
    }
}

/// How the command's run ended.
enum Ended {
    /// It exited with this code (128+signal if a signal ended it).
    Exited(u8),
    /// The hold was lost first.
    Lost(LossReason),
    /// Someone asked the holder to let go (`--on-revoke term`).
    Revoked,
}

/// The command, its group and its lifeline.
struct Running {
    child: tokio::process::Child,
    pgid: i32,
    lifeline: Lifeline,
    /// Given back to zkfence's group when this is dropped.
    _terminal: Option<Terminal>,
    interrupts: Signal,
    terminations: Signal,
    /// Whether the group is stopped (SIGSTOP) for jeopardy.
    stopped: bool,
}

impl Running {
    /// Starts the lifeline, then the command; `Err` is an exit code after a message.
    fn start(command: &[String], env: &[(String, String)]) -> Result<Running, u8> {
        let (Ok(interrupts), Ok(terminations)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            eprintln!("zkfence: cannot install signal handlers");
            return Err(EXIT_FAILURE);
        };
        let mut lifeline = Lifeline::start().map_err(|err| {
            eprintln!("zkfence: cannot start the lifeline that stops the command should zkfence die: {err}");
            EXIT_FAILURE
        })?;
        let terminal = Terminal::on_stdin();
        let mut spawn = tokio::process::Command::new(&command[0]);
        spawn
            .args(&command[1..])
            .envs(env.iter().map(|(k, v)| (k, v)));
        Terminal::prepare(terminal.as_ref(), &mut spawn);
        die_with_zkfence(&mut spawn);
        let child = spawn.spawn().map_err(|err| {
            eprintln!("zkfence: cannot run {:?}: {err}", command[0]);
            match err.kind() {
                std::io::ErrorKind::NotFound => EXIT_CANNOT_RUN,
                _ => EXIT_NOT_EXECUTABLE,
            }
        })?;
        let pgid = child.id().map(|id| id as i32).ok_or(EXIT_CANNOT_RUN)?;
        if let Err(err) = lifeline.watch(pgid) {
            eprintln!("zkfence: the lifeline is gone ({err}); stopping the command");
            signal_group(pgid, libc::SIGKILL);
            return Err(EXIT_FAILURE);
        }
        if let Some(terminal) = &terminal {
            terminal.give_to(pgid);
        }
        Ok(Running {
            child,
            pgid,
            lifeline,
            _terminal: terminal,
            interrupts,
            terminations,
            stopped: false,
        })
    }

    /// Waits for the command's exit or the hold's loss, forwarding SIGINT and SIGTERM, and
    /// stopping the command while the hold is in jeopardy if the policy says so.
    async fn watch<H: Hold>(&mut self, guard: &H, policy: &Policy) -> Ended {
        let mut jeopardy = guard.jeopardy();
        let mut watching = policy.on_jeopardy == OnJeopardy::Stop;
        let revoked = guard.revocation_requested();
        tokio::pin!(revoked);
        let mut heeding = true;
        loop {
            tokio::select! {
                status = self.child.wait() => {
                    let code = match status {
                        Ok(status) => status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)) as u8,
                        Err(_) => EXIT_FAILURE,
                    };
                    return Ended::Exited(code);
                }
                reason = guard.lost() => return Ended::Lost(reason),
                () = &mut revoked, if heeding => {
                    if policy.on_revoke == OnRevoke::Term {
                        return Ended::Revoked;
                    }
                    eprintln!("zkfence: asked to let go of the lock; --on-revoke ignore: the command goes on");
                    heeding = false;
                }
                changed = jeopardy.changed(), if watching => match changed {
                    Ok(()) => {
                        let now = *jeopardy.borrow_and_update();
                        self.suspend(now);
                    }
                    Err(_) => watching = false,
                },
                _ = self.interrupts.recv() => signal_group(self.pgid, libc::SIGINT),
                _ = self.terminations.recv() => signal_group(self.pgid, libc::SIGTERM),
            }
        }
    }

    /// Stops the group (`true`) or lets it go on (`false`), once per change.
    fn suspend(&mut self, stop: bool) {
        if stop == self.stopped {
            return;
        }
        self.stopped = stop;
        if stop {
            signal_group(self.pgid, libc::SIGSTOP);
            eprintln!("zkfence: the lock is in jeopardy (its lease lapsed, not lost); stopped the command until it holds again");
        } else {
            signal_group(self.pgid, libc::SIGCONT);
            eprintln!("zkfence: the lock holds again; the command goes on");
        }
    }

    /// SIGTERM to the group (SIGCONT too, so a stopped one can act on it), SIGKILL after
    /// `kill_after`; returns once the command has exited.
    async fn stop_group(&mut self, kill_after: Duration) {
        signal_group(self.pgid, libc::SIGTERM);
        signal_group(self.pgid, libc::SIGCONT);
        if tokio::time::timeout(kill_after, self.child.wait())
            .await
            .is_err()
        {
            signal_group(self.pgid, libc::SIGKILL);
            eprintln!("zkfence: the command outlived --kill-after; sent SIGKILL");
            let _ = self.child.wait().await;
        }
        self.clear_group(kill_after).await;
    }

    /// Once the command has exited: stops what is left of its process group (processes it
    /// started in the background), SIGTERM then SIGKILL, and waits until none is left, so that
    /// nothing of the command runs when the lock passes on.
    async fn clear_group(&mut self, kill_after: Duration) {
        if !group_alive(self.pgid) {
            return;
        }
        eprintln!("zkfence: the command exited, but processes of its group remain; stopping them before the release");
        signal_group(self.pgid, libc::SIGTERM);
        signal_group(self.pgid, libc::SIGCONT);
        if !group_gone_within(self.pgid, kill_after).await {
            signal_group(self.pgid, libc::SIGKILL);
            group_gone_within(self.pgid, Duration::from_secs(2)).await;
        }
    }
}

/// Asks the kernel to kill the command's first process if zkfence dies (`PR_SET_PDEATHSIG`):
/// a second line behind the lifeline. The signal follows the *thread* that forks, so it is set
/// only when the command is spawned from the main thread (the runtime's `block_on` runs there;
/// a worker thread could exit under the command).
pub(crate) fn die_with_zkfence(command: &mut tokio::process::Command) {
    // SAFETY: getpid and gettid only read the process's identity.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    if pid != tid {
        return;
    }
    // SAFETY: the closure runs between fork and exec and calls only prctl and getppid, which
    // are async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            // zkfence died between the fork and the prctl: the signal will never come.
            if libc::getppid() != pid {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Whether any process of group `pgid` is alive (zombies, already dead, do not count).
fn group_alive(pgid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks for the group's existence.
    if unsafe { libc::kill(-pgid, 0) } != 0 {
        return false;
    }
    // kill(0) also counts zombies that nobody has reaped yet: look for a live member.
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid pgrp ...: the fields after the last ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

/// Waits until no process of group `pgid` is alive, at most `within`; whether it got there.
async fn group_gone_within(pgid: i32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while group_alive(pgid) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) on the process group we created for the command.
    unsafe { libc::kill(-pgid, signal) };
}

/// Releases within `limit`; past it, says so and gives up (the session's end removes the node).
pub(crate) async fn release_bounded<H: Hold>(
    guard: H,
    limit: Duration,
) -> Result<zkfence::Result<()>, ()> {
    let node = guard.nodes();
    match tokio::time::timeout(limit, guard.release()).await {
        Ok(released) => Ok(released),
        Err(_) => {
            eprintln!("zkfence: the release of {node} was not confirmed within {limit:?}; the node goes when the session ends");
            Err(())
        }
    }
}

/// The exit code once the command has exited (and been reaped) with `code`, and its group is
/// gone: `code` if the lock was held all along, [`EXIT_LOCK_LOST`] if it was lost at any point
/// before its release was confirmed, or if the release was not confirmed (it failed, or took
/// longer than `limit`), whatever the command returned.
///
/// The exit and the loss can arrive together (and the `select!` above then takes either), or
/// the loss can still be on its way (a `NodeDeleted` notification in flight) when the exit is
/// seen. So this is the one place that decides, from the guard's own state: first by
/// [`check`](zkfence::Held::check), synchronously, with nothing awaited since the exit (the
/// watchdog's verdict and the lease deadline by the lease clock); then by the release, which
/// reports [`LockLost`](zkfence::Error::LockLost) for a loss recorded before it and for a node
/// that was already gone.
///
/// A passing check rules out the session's end (the lease) but not a deletion of our node by
/// someone else whose notification is still on its way: only the confirmed delete, which
/// finds the node, rules that out. A release that fails or times out therefore reports the
/// loss too, as the library's [`ReleaseUnconfirmed`](LossReason::ReleaseUnconfirmed) does. A
/// hold in jeopardy at the exit (not lost) is decided the same way: a confirmed delete found
/// the node, so nobody else held the lock while the command ran.
async fn finish<H: Hold>(lock: &str, guard: H, code: u8, limit: Duration) -> u8 {
    let checked = guard.check().err().as_ref().and_then(loss);
    let released = release_bounded(guard, limit).await;
    let lost = checked.or_else(|| released.as_ref().ok()?.as_ref().err().and_then(loss));
    if let Some(reason) = lost {
        eprintln!(
            "zkfence: the command exited with {code}, but lock {lock} was lost before it was released ({reason})"
        );
        return EXIT_LOCK_LOST;
    }
    let why = match released {
        Ok(Ok(())) => return code,
        Ok(Err(err)) => format!("it failed: {err}"),
        Err(()) => format!("it took longer than {limit:?}"),
    };
    eprintln!(
        "zkfence: the command exited with {code}, but the release of lock {lock} was not confirmed ({why}), so a deletion of its node before the exit cannot be ruled out; treat the work as possibly overlapped (fenced writes are safe)"
    );
    EXIT_LOCK_LOST
}

/// The reason, when `err` says the lock was lost (not merely released).
fn loss(err: &zkfence::Error) -> Option<LossReason> {
    match err {
        zkfence::Error::LockLost(reason) if *reason != LossReason::Released => Some(*reason),
        _ => None,
    }
}
