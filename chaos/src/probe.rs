//! The availability probe of an election scenario: when the ensemble could commit a write.
//! After an outage (the whole ensemble down, the leader killed, a partition) no candidate can
//! lead until a quorum commits again, so the checker measures a new leader's delay from then
//! ([`crate::checker`]'s failover bound).
//!
//! One client per server, each connected to that server alone, sets the data of a node of
//! the scenario's every 50 ms. A write that commits within [`QUICK`] of its sending proves
//! that a quorum committed during that time: its send and answer times are recorded
//! ([`Commit`]). A write that took longer (sent into a paused server, stuck behind an
//! election) proves nothing about when. A prober whose writes keep failing drops its client
//! and connects again, rather than wait for the client's own reconnect (which, after the whole
//! ensemble restarted, came after a new leader's grant: the stretch without commits it left
//! is what the nemesis's outage record now bounds, [`crate::outage`]).

use crate::clock::now_ns;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zkfence_testkit::LocalEnsemble;
use zookeeper_client as zk;

/// The longest round trip of a write that counts.
const QUICK: Duration = Duration::from_millis(250);

/// Failed writes in a row after which a prober connects again.
const FAILURES: u32 = 4;

/// A write of the probe's that committed within [`QUICK`]: a quorum committed between its
/// sending and its answer (ns, on the shared clock), under the leader of `epoch` (the high 32
/// bits of the write's zxid: a new epoch means a new leader, which gave every session a fresh
/// timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Commit {
    pub sent: i64,
    pub answered: i64,
    pub epoch: u32,
}

/// The probe's tasks and what they found.
#[derive(Debug)]
pub(crate) struct Probe {
    times: Arc<Mutex<Vec<Commit>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Probe {
    /// Creates `node` (its parents too) on `admin`, then starts a prober per server.
    pub(crate) async fn start(ensemble: &LocalEnsemble, admin: &zk::Client, node: &str) -> Probe {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let mut at = String::new();
        for segment in node.split('/').filter(|s| !s.is_empty()) {
            at = format!("{at}/{segment}");
            let _ = admin.create(&at, &[], &options).await;
        }
        let times = Arc::new(Mutex::new(Vec::new()));
        let tasks = (0..3)
            .map(|i| {
                let (server, node) = (ensemble.server_addr(i), node.to_owned());
                tokio::spawn(probe(server, node, times.clone()))
            })
            .collect();
        Probe { times, tasks }
    }

    /// Stops the probers; the quick commits, in the order they were sent.
    pub(crate) fn stop(&self) -> Vec<Commit> {
        for task in &self.tasks {
            task.abort();
        }
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner()).clone();
        times.sort_unstable_by_key(|c| c.sent);
        times
    }
}

/// Sets `node`'s data through `server` alone every 50 ms, recording the writes that committed
/// within [`QUICK`]; a new session when the old one ended or [`FAILURES`] writes in a row
/// failed.
async fn probe(server: String, node: String, times: Arc<Mutex<Vec<Commit>>>) {
    loop {
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&server);
        let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(1), connect).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let mut failed = 0;
        while !client.state().is_terminated() && failed < FAILURES {
            let sent = now_ns();
            let write = tokio::time::timeout(QUICK, client.set_data(&node, &[], None)).await;
            if let Ok(Ok(stat)) = write {
                let (answered, epoch) = (now_ns(), (stat.mzxid >> 32) as u32);
                let commit = Commit {
                    sent,
                    answered,
                    epoch,
                };
                times.lock().unwrap_or_else(|e| e.into_inner()).push(commit);
                failed = 0;
            } else {
                failed += 1;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
