//! What starting a database server of Debian's packages takes, whichever server it is
//! ([`LocalPostgres`](crate::LocalPostgres), [`LocalMariaDb`](crate::LocalMariaDb)): a temp
//! dir, a port and a log file handed to the server's system user, its data directory
//! initialized as that user, the server started tied to this process, a wait until it serves,
//! and on drop a clean shutdown (then a kill) and the files removed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::run_as::{as_user, give, identity, Who};
use zkfence_testkit::{spawn_tied, Keeper};

/// A server being set up: where it lives and as whom it runs.
#[derive(Debug)]
pub(crate) struct Setup {
    /// The server's system user (when we are root), or ourselves.
    pub(crate) who: Who,
    /// Its temp dir (its data, socket, pid file), removed when the server goes.
    pub(crate) dir: PathBuf,
    /// Its loopback port.
    pub(crate) port: u16,
    /// Its log, `log_dir/<name>.log`, handed to its user.
    pub(crate) log: PathBuf,
    /// The server's name in messages.
    name: &'static str,
}

impl Setup {
    /// A temp dir of kind `name`, a free port and `log_dir/<name>.log`, all for `user` (a
    /// system user Debian's `package` creates) when we are root.
    pub(crate) fn new(
        name: &'static str,
        user: &str,
        package: &str,
        log_dir: &Path,
    ) -> Result<Setup, String> {
        let who = identity(user, package)?;
        let dir = zkfence_testkit::temp_dir(name).map_err(|e| format!("temp dir: {e}"))?;
        give(&dir, who);
        let port = zkfence_testkit::free_port().map_err(|e| format!("no free port: {e}"))?;
        let log = log_dir.join(format!("{name}.log"));
        std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        give(&log, who);
        Ok(Setup {
            who,
            dir,
            port,
            log,
            name,
        })
    }

    /// Runs `init` (which makes the data directory), as the server's user when `as_server`
    /// (else as ourselves: an init that switches user itself); its complaint on failure.
    pub(crate) fn init(&self, mut init: Command, as_server: bool) -> Result<(), String> {
        init.stdout(Stdio::null()).stderr(Stdio::piped());
        if as_server {
            as_user(&mut init, self.who);
        }
        let program = init.get_program().to_string_lossy().into_owned();
        let out = init.output().map_err(|e| format!("{program}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{program} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Starts `server` as the server's user, tied to this process (`stop` is the signal that
    /// shuts it down cleanly), and waits up to `wait` until `serves(port)`. The server keeps
    /// what it takes to start it again ([`Server::crash_and_restart`]).
    pub(crate) fn launch(
        self,
        server: Command,
        stop: i32,
        wait: Duration,
        serves: impl Fn(u16) -> bool + Send + Sync + 'static,
    ) -> Result<Server, String> {
        let again = Relaunch {
            program: server.get_program().to_owned(),
            args: server.get_args().map(ToOwned::to_owned).collect(),
            who: self.who,
            log: self.log,
            name: self.name,
            wait,
            serves: Box::new(serves),
        };
        let (child, keeper) = again.spawn(server, stop)?;
        let started = Server {
            child,
            dir: self.dir,
            port: self.port,
            stop,
            again,
            _keeper: keeper,
        };
        started.again.wait_serving(started.port)?;
        Ok(started)
    }
}

/// How a server was started, to start it again on its data after a crash.
struct Relaunch {
    program: OsString,
    args: Vec<OsString>,
    who: Who,
    /// Its log (a restarted server's stderr goes there too).
    log: PathBuf,
    name: &'static str,
    wait: Duration,
    serves: Box<dyn Fn(u16) -> bool + Send + Sync>,
}

impl std::fmt::Debug for Relaunch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relaunch")
            .field("program", &self.program)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Relaunch {
    /// Spawns `server` as the server's user, tied to this process.
    fn spawn(&self, mut server: Command, stop: i32) -> Result<(Child, Keeper), String> {
        server.stdout(Stdio::null());
        as_user(&mut server, self.who);
        spawn_tied(server, stop).map_err(|e| format!("start {}: {e}", self.name))
    }

    /// The command it was started with, its stderr appended to its log.
    fn command(&self) -> Result<Command, String> {
        let log = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let mut server = Command::new(&self.program);
        server.args(&self.args).stderr(log);
        Ok(server)
    }

    /// Waits up to its wait until it serves on `port`.
    fn wait_serving(&self, port: u16) -> Result<(), String> {
        let deadline = Instant::now() + self.wait;
        while !(self.serves)(port) {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not serve on port {port} within {:?}; see {}",
                    self.name,
                    self.wait,
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

/// A running server, stopped (a clean shutdown, a kill after 10 s) and its files removed when
/// dropped.
#[derive(Debug)]
pub(crate) struct Server {
    child: Child,
    dir: PathBuf,
    /// Its loopback port.
    pub(crate) port: u16,
    /// The signal of a clean shutdown.
    stop: i32,
    again: Relaunch,
    /// Dropped after the server is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

impl Server {
    /// The server's processes: its own and every live one it started (PostgreSQL's
    /// backends), parents before children.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let root = self.child.id() as i32;
        let parents = live_parents();
        let mut found = vec![root];
        let mut i = 0;
        while i < found.len() {
            let parent = found[i];
            found.extend(
                parents
                    .iter()
                    .filter(|&&(_, p)| p == parent)
                    .map(|&(pid, _)| pid),
            );
            i += 1;
        }
        found
    }

    /// Sends `signal` to each of its processes ([`Server::pids`]). SIGSTOP stops the first
    /// (the one that starts the others) before it lists the rest, so none starts unseen.
    pub(crate) fn signal_all(&self, signal: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        for pid in self.pids().into_iter().skip(1) {
            // SAFETY: kill(2) on a process our child started.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// `kill -9` to every process of the server, then the server started again on the same
    /// data and port (its crash recovery runs), and a wait until it serves.
    pub(crate) fn crash_and_restart(&mut self) -> Result<(), String> {
        let pids = self.pids();
        self.signal_all(libc::SIGKILL);
        let _ = self.child.wait();
        // The killed children are reparented and reaped elsewhere: wait until they are gone
        // (a server refuses to start while its old processes hold its shared memory).
        let deadline = Instant::now() + Duration::from_secs(10);
        let lingering = || {
            let live = live_parents();
            pids[1..]
                .iter()
                .any(|pid| live.iter().any(|(p, _)| p == pid))
        };
        while lingering() {
            if Instant::now() > deadline {
                return Err(format!("{}'s killed processes did not go", self.again.name));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let (child, keeper) = self.again.spawn(self.again.command()?, self.stop)?;
        self.child = child;
        self._keeper = keeper;
        self.again.wait_serving(self.port)
    }
}

/// [`StoreFaults`](crate::StoreFaults) for a store type whose `server` field is its [`Server`].
macro_rules! store_faults_by_server {
    ($store:ty) => {
        impl crate::StoreFaults for $store {
            fn pause(&self) {
                self.server.signal_all(libc::SIGSTOP);
            }

            fn resume(&self) {
                self.server.signal_all(libc::SIGCONT);
            }

            fn crash_and_restart(&mut self) -> Result<(), String> {
                self.server.crash_and_restart()
            }
        }
    };
}
pub(crate) use store_faults_by_server;

/// Every live (not zombie) process and its parent, from `/proc`.
fn live_parents() -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // "pid (comm) state ppid …": comm may hold spaces and parentheses.
            let mut rest = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
            let state = rest.next()?;
            let ppid = rest.next()?.parse().ok()?;
            (state != "Z").then_some((pid, ppid))
        })
        .collect()
}

impl Drop for Server {
    fn drop(&mut self) {
        // A paused server would never shut down.
        self.signal_all(libc::SIGCONT);
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, self.stop) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
