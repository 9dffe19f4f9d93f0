//! [`StoreFaults`]: the faults a throwaway store server takes, the same for each of them.

use zkfence_testkit::LocalZooKeeper;

/// The faults a throwaway store server takes ([`LocalPostgres`](crate::LocalPostgres),
/// [`LocalMariaDb`](crate::LocalMariaDb), [`LocalRedis`](crate::LocalRedis), and the test
/// kit's [`LocalZooKeeper`] as the store of the ZooKeeper fence): stopped where it is, and
/// killed and started again on its data.
///
/// # Examples
///
/// ```no_run
/// use zkfence_harness::{LocalPostgres, StoreFaults};
///
/// let mut store: Box<dyn StoreFaults> = Box::new(LocalPostgres::start(std::path::Path::new("/tmp"))?);
/// store.pause(); // a store that stalls: nothing answers
/// std::thread::sleep(std::time::Duration::from_secs(4));
/// store.resume();
/// store.crash_and_restart()?; // a power loss, then recovery
/// # Ok::<(), String>(())
/// ```
pub trait StoreFaults: Send {
    /// `SIGSTOP` to every process of the server (PostgreSQL's postmaster first, then its
    /// backends): connections stay open and nothing answers until [`resume`](Self::resume).
    fn pause(&self);

    /// `SIGCONT` to every process of the server.
    fn resume(&self);

    /// `kill -9` to every process of the server at once (open transactions die unanswered),
    /// then the server started again on the same data and port; returns once it serves
    /// again, its recovery done: what it made durable stays (PostgreSQL's fsync and
    /// synchronous commit, InnoDB's log, a [durable](crate::LocalRedis::start_durable) Redis's
    /// append-only file, ZooKeeper's transaction log), the rest is gone.
    ///
    /// # Errors
    ///
    /// The restart's failure (see the server's log).
    fn crash_and_restart(&mut self) -> Result<(), String>;
}

/// A standalone ZooKeeper server as a store (the ZooKeeper fence's data on a server of its
/// own): `SIGSTOP`/`SIGCONT` to its JVM, and `kill -9` and a start on the same data and port.
impl StoreFaults for LocalZooKeeper {
    fn pause(&self) {
        LocalZooKeeper::pause(self);
    }

    fn resume(&self) {
        LocalZooKeeper::resume(self);
    }

    fn crash_and_restart(&mut self) -> Result<(), String> {
        self.kill();
        self.restart().map_err(|e| e.to_string())
    }
}
