//! The availability probe of an election scenario: when the ensemble could commit a write.
//! After an outage (the whole ensemble down, the leader killed, a partition) no candidate can
//! lead until a quorum commits again, so the checker measures a new leader's delay from then
//! ([`crate::checker`]'s failover bound).
//!
//! One client per server, each connected to that server alone, sets the data of a node of
//! the scenario's every 50 ms. A write that commits within [`QUICK`] of its sending proves
//! that a quorum committed during that time: its send time is recorded. A write that took
//! longer (sent into a paused server, stuck behind an election) proves nothing about when.

use crate::clock::now_ns;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zkfence_testkit::LocalEnsemble;
use zookeeper_client as zk;

/// The longest round trip of a write that counts.
const QUICK: Duration = Duration::from_millis(250);

/// The probe's tasks and what they found.
#[derive(Debug)]
pub(crate) struct Probe {
    times: Arc<Mutex<Vec<i64>>>,
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

    /// Stops the probers; the send times of the quick commits, in order.
    pub(crate) fn stop(&self) -> Vec<i64> {
        for task in &self.tasks {
            task.abort();
        }
        let mut times = self.times.lock().unwrap_or_else(|e| e.into_inner()).clone();
        times.sort_unstable();
        times
    }
}

/// Sets `node`'s data through `server` alone every 50 ms, recording the send times of the
/// writes that committed within [`QUICK`]; a new session when the old one ended.
async fn probe(server: String, node: String, times: Arc<Mutex<Vec<i64>>>) {
    loop {
        let connect = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&server);
        let Ok(Ok(client)) = tokio::time::timeout(Duration::from_secs(2), connect).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        while !client.state().is_terminated() {
            let sent = now_ns();
            let write = tokio::time::timeout(QUICK, client.set_data(&node, &[], None)).await;
            if matches!(write, Ok(Ok(_))) {
                times.lock().unwrap_or_else(|e| e.into_inner()).push(sent);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
