//! The candidate processes of `bench --failover`: started (zkfence-bench's `candidate`, or
//! `CuratorLatchBench` in a JVM of its own), their protocol lines read as they come, and the
//! signals the trials send them (SIGKILL, SIGSTOP, SIGCONT), always by pid.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncReadExt as _, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::support::die_with_bench;

/// Which election implementation a candidate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// zkfence's `FencedElection`, in `zkfence-bench candidate`.
    Zkfence,
    /// Apache Curator's `LeaderLatch`, in `CuratorLatchBench`.
    Curator,
}

impl Side {
    /// The implementation as the reports name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Side::Zkfence => "zkfence",
            Side::Curator => "curator",
        }
    }
}

/// One protocol line of a candidate (see `candidate.rs`); times are unix nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Line {
    /// Connected, with this session timeout granted (ms).
    Session(u64),
    /// Leading since `at`: its first step. `epoch` is zkfence's epoch, LeaderLatch's sequence.
    Lead {
        /// The leader's epoch (zkfence) or node sequence (Curator).
        epoch: u64,
        /// When `campaign` or `await()` returned.
        at: u64,
    },
    /// Still leading at a moment after this time.
    Step(u64),
    /// No longer leading, as of this time; the candidate exits.
    Deposed(u64),
}

impl Line {
    /// A protocol line, or `None` for anything else a candidate may print.
    pub(super) fn parse(line: &str) -> Option<Line> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let mut number = || words.next()?.parse::<u64>().ok();
        let parsed = match kind {
            "session" => Line::Session(number()?),
            "lead" => Line::Lead {
                epoch: number()?,
                at: number()?,
            },
            "step" => Line::Step(number()?),
            "deposed" => Line::Deposed(number()?),
            _ => return None,
        };
        Some(parsed)
    }
}

/// What a trial needs to start candidates: where, and with which session timeout.
#[derive(Debug, Clone)]
pub(super) struct Setup {
    /// ZooKeeper hosts, with a chroot if any.
    pub(super) hosts: String,
    /// The session timeout every candidate asks for.
    pub(super) session_timeout: Duration,
}

/// A running candidate process: its protocol lines as they come, its stderr kept for errors,
/// and its stdin, whose closing ends it (so that it never outlives the bench).
#[derive(Debug)]
pub(super) struct Candidate {
    child: Child,
    pid: libc::pid_t,
    /// Held open for the candidate's life: the candidate exits when it closes.
    _lifeline: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Line>,
    stderr: Arc<Mutex<String>>,
    side: Side,
}

/// The class path that runs the Curator candidate (`bench/java/CuratorLatchBench.java`),
/// compiled on first use.
fn curator_classpath() -> Result<String, String> {
    let source = include_str!("../../java/CuratorLatchBench.java");
    zkfence_harness::curator::worker("CuratorLatchBench", source)
}

/// Compiles the Curator candidate now (off the runtime), so that no trial pays for it.
pub(super) async fn prepare_curator() -> Result<(), String> {
    tokio::task::spawn_blocking(curator_classpath)
        .await
        .map_err(|e| format!("compiling the Curator candidate: {e}"))?
        .map(drop)
}

/// The command that runs one candidate of `side` on `path`.
fn command(side: Side, setup: &Setup, path: &str) -> Result<Command, String> {
    let timeout_ms = setup.session_timeout.as_millis().to_string();
    let mut command = match side {
        Side::Zkfence => {
            let exe =
                std::env::current_exe().map_err(|e| format!("cannot find zkfence-bench: {e}"))?;
            let mut command = Command::new(exe);
            command
                .args(["candidate", "--connect", &setup.hosts, "--election"])
                .arg(path)
                .args(["--session-timeout", &format!("{timeout_ms}ms")]);
            command
        }
        Side::Curator => {
            let classpath = curator_classpath()?;
            let mut command = Command::new("java");
            command
                .args(["-Xmx256m", "-cp", &classpath, "CuratorLatchBench"])
                .args([&setup.hosts, path, &timeout_ms]);
            command
        }
    };
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A candidate's stdin closing ends it, unless it is stopped (SIGSTOP): the parent-death
    // signal (SIGKILL) reaches a stopped process too, should the bench die mid-pause.
    die_with_bench(&mut command);
    Ok(command)
}

impl Candidate {
    /// Starts a candidate of `side` campaigning on `path`.
    pub(super) fn start(side: Side, setup: &Setup, path: &str) -> Result<Candidate, String> {
        let mut child = command(side, setup, path)?
            .spawn()
            .map_err(|e| format!("cannot start the {} candidate: {e}", side.name()))?;
        let pid = child
            .id()
            .and_then(|id| libc::pid_t::try_from(id).ok())
            .ok_or("a candidate exited before it could be signalled")?;
        let (send, lines) = mpsc::unbounded_channel();
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(async move {
                let mut reader = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    if let Some(line) = Line::parse(&line) {
                        let _ = send.send(line);
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(keep_text(pipe, stderr.clone()));
        }
        Ok(Candidate {
            _lifeline: child.stdin.take(),
            child,
            pid,
            lines,
            stderr,
            side,
        })
    }

    /// Its process id.
    pub(super) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Sends it `signal` (SIGKILL, SIGSTOP, SIGCONT), by pid.
    pub(super) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours; the pid is a
        // process this bench started and has not waited for yet.
        unsafe { libc::kill(self.pid, signal) };
    }

    /// The next protocol line within `timeout`: `Ok(None)` on timeout, an error (with what it
    /// printed on stderr) once the candidate has exited.
    pub(super) async fn next(&mut self, timeout: Duration) -> Result<Option<Line>, String> {
        match tokio::time::timeout(timeout, self.lines.recv()).await {
            Ok(Some(line)) => Ok(Some(line)),
            Ok(None) => Err(self.ended().await),
            Err(_) => Ok(None),
        }
    }

    /// Waits up to `timeout` for its `session` and `lead` lines: (granted session timeout in
    /// ms, epoch, lead time); skips the steps of nothing (none come before `lead`).
    pub(super) async fn lead(&mut self, timeout: Duration) -> Result<(u64, u64, u64), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut granted = 0;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await? {
                Some(Line::Session(ms)) => granted = ms,
                Some(Line::Lead { epoch, at }) => return Ok((granted, epoch, at)),
                Some(_) => {}
                None => {
                    return Err(format!(
                        "the {} candidate did not lead within {timeout:?}",
                        self.side.name()
                    ))
                }
            }
        }
    }

    /// The step times it reports until `deposed` or `timeout` (whichever is first), and the
    /// `deposed` time if it came. An exit without `deposed` ends the wait too.
    pub(super) async fn until_deposed(&mut self, timeout: Duration) -> (Vec<u64>, Option<u64>) {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut steps = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Ok(Some(Line::Step(at))) => steps.push(at),
                Ok(Some(Line::Deposed(at))) => return (steps, Some(at)),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return (steps, None),
            }
        }
    }

    /// Whether it is still running (it has not exited and its lines still come).
    pub(super) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL (which ends a stopped process too), then reaps it.
    pub(super) async fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait().await;
    }

    /// Why it ended: its exit status and the end of its stderr.
    pub(super) async fn ended(&mut self) -> String {
        let status = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let tail: String = {
            let start = stderr.len().saturating_sub(2000);
            let start = (start..=stderr.len())
                .find(|&i| stderr.is_char_boundary(i))
                .unwrap_or(stderr.len());
            stderr[start..].to_owned()
        };
        format!(
            "the {} candidate (pid {}) ended ({}): {}",
            self.side.name(),
            self.pid,
            match status {
                Ok(Ok(status)) => status.to_string(),
                _ => "still running".to_owned(),
            },
            tail.trim()
        )
    }
}

/// Appends what `pipe` carries to `text`, until it closes.
async fn keep_text(mut pipe: impl AsyncRead + Unpin, text: Arc<Mutex<String>>) {
    let mut buffer = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        if let Ok(mut text) = text.lock() {
            text.push_str(&String::from_utf8_lossy(&buffer[..n]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_protocol_and_ignores_anything_else() {
        assert_eq!(Line::parse("session 2000"), Some(Line::Session(2000)));
        assert_eq!(
            Line::parse("lead 42 1700000000000000000"),
            Some(Line::Lead {
                epoch: 42,
                at: 1_700_000_000_000_000_000
            })
        );
        assert_eq!(Line::parse("step 5"), Some(Line::Step(5)));
        assert_eq!(Line::parse("deposed 6"), Some(Line::Deposed(6)));
        assert_eq!(Line::parse("lead 42"), None);
        assert_eq!(Line::parse("SLF4J: no binding"), None);
        assert_eq!(Line::parse(""), None);
    }
}
