//! Your service as a process the test can freeze: [`Service`] runs one of the test binary's own
//! (ignored) tests as a child process, which [`pause`]s and [`resume`]s like a GC pause that
//! outlasts the session, stops itself at the worst moment ([`pause_point`]: right after its
//! lease check, right before its write), or dies (`kill -9`).

use std::io::{BufRead as _, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::tied::{spawn_tied, Keeper};

/// The variable that names the role a [`Service`] child plays (its test's name).
const ROLE: &str = "ZKFENCE_TESTKIT_SERVICE";
/// The variable that names the [`pause_point`] a child stops itself at.
const PAUSE_AT: &str = "ZKFENCE_TESTKIT_PAUSE_AT";

/// Stops process `pid` (SIGSTOP): nothing of it runs, its sockets stay open, its clock keeps
/// going; the closest thing to a GC pause, a VM freeze or a laptop lid.
///
/// # Errors
///
/// The OS error (no such process, not permitted).
///
/// # Examples
///
/// ```no_run
/// zkfence_testkit::pause(4242)?;
/// zkfence_testkit::resume(4242)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn pause(pid: u32) -> std::io::Result<()> {
    signal(pid, libc::SIGSTOP)
}

/// Lets a process [`pause`]d (or stopped at a [`pause_point`]) run again (SIGCONT).
///
/// # Errors
///
/// The OS error (no such process, not permitted).
///
/// # Examples
///
/// ```no_run
/// zkfence_testkit::resume(4242)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn resume(pid: u32) -> std::io::Result<()> {
    signal(pid, libc::SIGCONT)
}

/// Whether process `pid` is stopped (Linux: its state in `/proc`; elsewhere `ps`).
///
/// # Examples
///
/// ```
/// assert!(!zkfence_testkit::is_paused(std::process::id()));
/// ```
pub fn is_paused(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        return linux_state(pid) == Some('T');
    }
    Command::new("ps")
        .args(["-o", "state=", "-p", &pid.to_string()])
        .output()
        .is_ok_and(|out| {
            String::from_utf8_lossy(&out.stdout)
                .trim_start()
                .starts_with('T')
        })
}

/// Whether process `pid` exists and has not exited (Linux: not a zombie in `/proc`; elsewhere
/// `kill(pid, 0)`).
///
/// # Examples
///
/// ```
/// assert!(zkfence_testkit::is_alive(std::process::id()));
/// ```
pub fn is_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        return linux_state(pid).is_some_and(|state| state != 'Z');
    }
    signal(pid, 0).is_ok()
}

/// The state letter of process `pid` in `/proc/<pid>/stat` (`R`, `S`, `T`, `Z` …), `None` for
/// no such process.
pub(crate) fn linux_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) S ...: the state follows the last ')' (comm may hold one).
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

fn signal(pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    match unsafe { libc::kill(pid, signal) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// In a [`Service`] child started with [`ServiceOptions::pause_at`]`(name)`: stops the whole
/// process here, the first time it gets here, until the test resumes it; anywhere else a
/// no-op (one atomic load). Put it where a pause hurts most: right after the lease check
/// (`guard.check()?`), right before the write it allows.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(guard: zkfence::LockGuard, fence: zkfence::fence::ZooKeeperFence) -> Result<(), Box<dyn std::error::Error>> {
/// guard.check()?;
/// zkfence_testkit::pause_point("after-check");
/// fence
///     .write(&guard.ticket(), |ops| ops.add_set_data("/app/state", b"v2", None))
///     .await?; // refused if a successor got in meanwhile
/// # Ok(()) }
/// ```
pub fn pause_point(name: &str) {
    static FIRED: AtomicBool = AtomicBool::new(false);
    if FIRED.load(Ordering::Relaxed) {
        return;
    }
    if std::env::var(PAUSE_AT).is_ok_and(|at| at == name) && !FIRED.swap(true, Ordering::SeqCst) {
        // A stop signal stops every thread of the process. Sent to this thread, not to the
        // process: a signal sent to the process wakes its main thread to start the stop, and
        // this thread may run on (into the very write the pause should precede) until the stop
        // reaches it; sent to this thread, it is handled before `pthread_kill` returns.
        // SAFETY: pthread_kill(3) on the calling thread's own handle.
        let _ = unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGSTOP) };
    }
}

/// In a test binary: whether this process is the [`Service`] child running test `name`. The
/// child's test checks it first and returns at once otherwise, so that `cargo test --
/// --ignored` run by hand does not start the service on its own.
///
/// # Examples
///
/// ```no_run
/// #[test]
/// #[ignore = "the service role of a_frozen_holder_is_refused; started by it"]
/// fn service() {
///     if !zkfence_testkit::is_service("service") {
///         return;
///     }
///     // ... run the service, print lines the test waits for
/// }
/// ```
pub fn is_service(name: &str) -> bool {
    std::env::var(ROLE).is_ok_and(|role| role == name)
}

/// How a [`Service`] child starts.
///
/// # Examples
///
/// ```no_run
/// let options = zkfence_testkit::ServiceOptions::new("service")
///     .env("ZK", "127.0.0.1:2181")
///     .pause_at("after-check");
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    test: String,
    env: Vec<(String, String)>,
    pause_at: Option<String>,
}

impl ServiceOptions {
    /// Runs test `test` (its exact name, module path included) of this test binary.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::ServiceOptions::new("roles::service");
    /// # let _ = options;
    /// ```
    pub fn new(test: impl Into<String>) -> ServiceOptions {
        ServiceOptions {
            test: test.into(),
            env: Vec::new(),
            pause_at: None,
        }
    }

    /// Sets an environment variable of the child (a server address, say).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::ServiceOptions::new("service").env("ZK", "127.0.0.1:2181");
    /// # let _ = options;
    /// ```
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Makes the child stop itself the first time it reaches [`pause_point`]`(name)`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::ServiceOptions::new("service").pause_at("after-check");
    /// # let _ = options;
    /// ```
    pub fn pause_at(mut self, name: impl Into<String>) -> Self {
        self.pause_at = Some(name.into());
        self
    }
}

/// Why waiting on a [`Service`] failed.
///
/// # Examples
///
/// ```
/// let err = zkfence_testkit::ServiceError::Timeout("a line starting with holding".into());
/// assert!(err.to_string().contains("holding"));
/// ```
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// What was awaited did not happen in time.
    #[error("the service did not show {0} in time")]
    Timeout(String),
    /// The child ended before it happened (its exit status).
    #[error("the service exited ({0}) before it showed what the test waited for")]
    Exited(ExitStatus),
    /// Starting or signalling the child failed.
    #[error("service process: {0}")]
    Io(#[from] std::io::Error),
}

/// A child process running one of this test binary's tests as your service: freeze it, let it
/// stop at the worst moment, kill it, read what it prints. It dies with the test process,
/// however that dies.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence_testkit::ServiceError> {
/// use std::time::Duration;
/// use zkfence_testkit::{Service, ServiceOptions};
/// let mut service = Service::spawn(ServiceOptions::new("service").pause_at("after-check"))?;
/// service.wait_paused(Duration::from_secs(30)).await?;  // frozen right after its lease check
/// // ... let its session expire, let a successor write ...
/// service.resume()?;
/// let line = service.wait_line(|l| l.starts_with("refused"), Duration::from_secs(30)).await?;
/// # let _ = line; Ok(()) }
/// ```
#[derive(Debug)]
pub struct Service {
    child: std::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    /// Dropped after the child is killed (see [`crate::tied`]).
    _keeper: Keeper,
}

impl Service {
    /// Starts the child: this test binary, running only `options`' test, ignored tests
    /// included, its output not captured; its stdout read line by line.
    ///
    /// # Errors
    ///
    /// The OS error when the child cannot start.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let service = zkfence_testkit::Service::spawn(zkfence_testkit::ServiceOptions::new("service"))?;
    /// println!("service pid {}", service.pid());
    /// # Ok::<(), zkfence_testkit::ServiceError>(())
    /// ```
    pub fn spawn(options: ServiceOptions) -> Result<Service, ServiceError> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.args([options.test.as_str(), "--exact", "--ignored", "--nocapture"])
            .arg("--test-threads=1")
            .env(ROLE, &options.test)
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(at) = &options.pause_at {
            cmd.env(PAUSE_AT, at);
        }
        let (mut child, keeper) = spawn_tied(cmd, libc::SIGKILL)?;
        let (tx, lines) = mpsc::unbounded_channel();
        // libtest prints `test <name> ... ` and no newline before the test runs: the service's
        // first line follows it.
        let banner = format!("test {} ... ", options.test);
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let line = line
                        .strip_prefix(&banner)
                        .map(str::to_owned)
                        .unwrap_or(line);
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Service {
            child,
            lines,
            seen: Vec::new(),
            _keeper: keeper,
        })
    }

    /// The child's pid.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let service = zkfence_testkit::Service::spawn(zkfence_testkit::ServiceOptions::new("service"))?;
    /// assert!(service.pid() > 0);
    /// # Ok::<(), zkfence_testkit::ServiceError>(())
    /// ```
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Freezes the child ([`pause`]).
    ///
    /// # Errors
    ///
    /// The OS error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let service = zkfence_testkit::Service::spawn(zkfence_testkit::ServiceOptions::new("service"))?;
    /// service.pause()?;
    /// # Ok::<(), zkfence_testkit::ServiceError>(())
    /// ```
    pub fn pause(&self) -> Result<(), ServiceError> {
        Ok(pause(self.pid())?)
    }

    /// Lets the child run again ([`resume`]).
    ///
    /// # Errors
    ///
    /// The OS error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let service = zkfence_testkit::Service::spawn(zkfence_testkit::ServiceOptions::new("service"))?;
    /// service.resume()?;
    /// # Ok::<(), zkfence_testkit::ServiceError>(())
    /// ```
    pub fn resume(&self) -> Result<(), ServiceError> {
        Ok(resume(self.pid())?)
    }

    /// Kills the child (SIGKILL) and reaps it.
    ///
    /// # Errors
    ///
    /// The OS error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let mut service = zkfence_testkit::Service::spawn(zkfence_testkit::ServiceOptions::new("service"))?;
    /// service.kill()?;
    /// # Ok::<(), zkfence_testkit::ServiceError>(())
    /// ```
    pub fn kill(&mut self) -> Result<(), ServiceError> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// Waits until the child is stopped (by [`pause`], or by itself at its [`pause_point`]).
    ///
    /// # Errors
    ///
    /// [`ServiceError::Timeout`], or [`ServiceError::Exited`] if it ended first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only looks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut service: zkfence_testkit::Service) -> Result<(), zkfence_testkit::ServiceError> {
    /// service.wait_paused(std::time::Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_paused(&mut self, timeout: Duration) -> Result<(), ServiceError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Err(ServiceError::Exited(status));
            }
            if is_paused(self.pid()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(ServiceError::Timeout("a stopped process".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for a line of the child's stdout that `matches` (lines it printed before count
    /// too, once each) and returns it.
    ///
    /// # Errors
    ///
    /// [`ServiceError::Timeout`], or [`ServiceError::Exited`] when its output ends first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: lines read meanwhile are kept for the next call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut service: zkfence_testkit::Service) -> Result<(), zkfence_testkit::ServiceError> {
    /// let line = service.wait_line(|l| l.starts_with("holding"), std::time::Duration::from_secs(30)).await?;
    /// println!("{line}");
    /// # Ok(()) }
    /// ```
    pub async fn wait_line(
        &mut self,
        matches: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, ServiceError> {
        if let Some(at) = self.seen.iter().position(|l| matches(l)) {
            return Ok(self.seen.remove(at));
        }
        let deadline = Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Err(_) => return Err(ServiceError::Timeout("the line awaited".into())),
                Ok(None) => {
                    let status = self.child.wait()?;
                    return Err(ServiceError::Exited(status));
                }
                Ok(Some(line)) if matches(&line) => return Ok(line),
                Ok(Some(line)) => self.seen.push(line),
            }
        }
    }

    /// Waits for the child to exit, and returns its status.
    ///
    /// # Errors
    ///
    /// [`ServiceError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut service: zkfence_testkit::Service) -> Result<(), zkfence_testkit::ServiceError> {
    /// let status = service.wait_exit(std::time::Duration::from_secs(30)).await?;
    /// assert!(status.success());
    /// # Ok(()) }
    /// ```
    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, ServiceError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                return Err(ServiceError::Timeout("an exit".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
