//! What the nemesis knows of an outage it caused: from when no server could commit, and when
//! a leader served again. The election's failover bound counts a new leader's delay from the
//! end of an outage ([`crate::succession`]); this is the evidence it reads.
//!
//! A fault that disables the ensemble's leader (SIGKILL or SIGSTOP of servers, the leader cut
//! off from its followers) starts an [`OutageWatch`] as it strikes. The watch asks every server
//! the fault has not disabled for `srvr` every 25 ms:
//! - a round in which each of them answered, none as a serving leader (a refused connection is
//!   a dead or starting server), proves that nobody could commit at its start: the servers the
//!   fault disabled could not, and the others were not leading. The last such round is
//!   [`Outage::back_after`].
//! - the first answer `Mode: leader` proves a leader served again, hence a quorum behind it:
//!   ZooKeeper reports that mode only once the leader runs (`ZooKeeperServer.isRunning`), and a
//!   new leader starts its session tracker just before, giving every session a fresh timeout.
//!   Its arrival is [`Outage::back_by`].
//!
//! A round in which a server did not answer in time proves nothing either way. When the fault
//! stops disabling its servers (SIGCONT, links healed), [`OutageWatch::lift`] makes them count
//! again.

use crate::clock::now_ns;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zkfence_testkit::LocalEnsemble;

/// An outage the nemesis caused and watched, on the shared clock (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outage {
    /// When the fault disabled the leader: nothing commits from here.
    pub down: i64,
    /// The last moment the run proves nothing could commit (at least `down`).
    pub back_after: i64,
    /// When a server answered that it led and served: committing again by then. `None` if
    /// none did within the watch's wait.
    pub back_by: Option<i64>,
}

/// How long a server has to answer `srvr` in a round.
const ANSWER: Duration = Duration::from_millis(150);

/// The time between rounds.
const ROUND: Duration = Duration::from_millis(25);

/// What the watch has found so far, and which servers the fault still disables.
#[derive(Debug)]
struct Found {
    disabled: Vec<usize>,
    outage: Outage,
}

/// A watch over one fault's outage (see the module's docs).
#[derive(Debug)]
pub(crate) struct OutageWatch {
    found: Arc<Mutex<Found>>,
    task: tokio::task::JoinHandle<()>,
}

impl OutageWatch {
    /// Starts watching an outage that began at `down`, when the fault disabled `disabled` (the
    /// servers it paused or cut off from the others; killed servers need not be named: they
    /// refuse connections).
    pub(crate) fn start(ensemble: &LocalEnsemble, disabled: &[usize], down: i64) -> OutageWatch {
        let found = Arc::new(Mutex::new(Found {
            disabled: disabled.to_vec(),
            outage: Outage {
                down,
                back_after: down,
                back_by: None,
            },
        }));
        let servers: Vec<String> = (0..3).map(|i| ensemble.server_addr(i)).collect();
        let task = tokio::spawn(watch(servers, found.clone()));
        OutageWatch { found, task }
    }

    /// The fault stopped disabling its servers: from now they are asked too.
    pub(crate) fn lift(&self) {
        lock(&self.found).disabled.clear();
    }

    /// Waits (up to `wait`) until a leader served, and returns what the watch found.
    pub(crate) async fn finish(self, wait: Duration) -> Outage {
        let deadline = now_ns() + wait.as_nanos() as i64;
        while !self.task.is_finished() && now_ns() < deadline {
            tokio::time::sleep(ROUND).await;
        }
        self.task.abort();
        let outage = lock(&self.found).outage;
        outage
    }
}

fn lock(found: &Mutex<Found>) -> std::sync::MutexGuard<'_, Found> {
    found.lock().unwrap_or_else(|e| e.into_inner())
}

/// Rounds until a server answers that it leads.
async fn watch(servers: Vec<String>, found: Arc<Mutex<Found>>) {
    loop {
        let round = now_ns();
        let disabled = lock(&found).disabled.clone();
        let asked = (0..servers.len()).filter(|i| !disabled.contains(i));
        let answers =
            futures_util::future::join_all(asked.map(|i| leads(&servers[i], ANSWER))).await;
        if answers.contains(&Some(true)) {
            lock(&found).outage.back_by = Some(now_ns());
            return;
        }
        if answers.iter().all(|a| *a == Some(false)) {
            lock(&found).outage.back_after = round;
        }
        tokio::time::sleep(ROUND).await;
    }
}

/// Whether the server at `addr` says it leads and serves: `Some(false)` for a follower, a
/// server not serving, or one that refuses the connection (down); `None` if it did not answer
/// within `wait`.
async fn leads(addr: &str, wait: Duration) -> Option<bool> {
    let ask = async {
        let mut stream = match TcpStream::connect(addr).await {
            Ok(stream) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Some(false),
            Err(_) => return None,
        };
        stream.write_all(b"srvr").await.ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        Some(out.contains("Mode: leader"))
    };
    tokio::time::timeout(wait, ask).await.ok().flatten()
}
