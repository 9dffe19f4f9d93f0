//! What starting a database server of Debian's packages takes, whichever server it is
//! ([`LocalPostgres`](crate::LocalPostgres), [`LocalMariaDb`](crate::LocalMariaDb)): a temp
//! dir, a port and a log file handed to the server's system user, its data directory
//! initialized as that user, the server started tied to this process, a wait until it serves,
//! and on drop a clean shutdown (then a kill) and the files removed.

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
    /// shuts it down cleanly), and waits up to `wait` until `serves(port)`.
    pub(crate) fn launch(
        self,
        mut server: Command,
        stop: i32,
        wait: Duration,
        serves: impl Fn(u16) -> bool,
    ) -> Result<Server, String> {
        server.stdout(Stdio::null());
        as_user(&mut server, self.who);
        let (child, keeper) =
            spawn_tied(server, stop).map_err(|e| format!("start {}: {e}", self.name))?;
        let started = Server {
            child,
            dir: self.dir,
            port: self.port,
            stop,
            _keeper: keeper,
        };
        let deadline = Instant::now() + wait;
        while !serves(started.port) {
            if Instant::now() > deadline {
                return Err(format!(
                    "{} did not serve on port {} within {wait:?}; see {}",
                    self.name,
                    started.port,
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(started)
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
    /// Dropped after the server is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

impl Drop for Server {
    fn drop(&mut self) {
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
