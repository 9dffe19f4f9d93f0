//! An elected worker: a candidate in the scenario's election (`--lock` is the election path)
//! that, while it leads, does what a lock holder does ([`Worker::serve`]): it raises the store's
//! fence to its epoch and does epoch-checked increments, logging its leadership as a grant
//! (the epoch as the token), each passing check, and its loss.
//!
//! Two ways to lead, as users do: by hand ([`zkfence::FencedElection::campaign_timeout`], work,
//! `resign`, campaign again), or with [`zkfence::FencedElection::lead`], which runs the work while
//! the leadership holds, drops it the moment it is lost, resigns and campaigns again (on a new
//! session after an expiry). A `lead` worker's work is checked by the library before every
//! poll, so its late writes never leave it; the hand-driven workers' can, and the fence refuses
//! them.

use crate::event::{Ev, Role};
use crate::hold::{Log, EXTEND};
use crate::worker::{connect, Worker, WorkerArgs};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use zkfence::{FencedElection, Leadership};
use zookeeper_client as zk;

/// The elected worker's process.
pub(crate) async fn run(args: WorkerArgs) {
    let lead = args.lead;
    let worker = Worker::start(args).await;
    if lead {
        leading(worker).await;
    } else {
        by_hand(worker).await;
    }
}

/// What the candidate's node carries: who it is.
fn identity(log: &Log) -> String {
    format!("w{} pid {}", log.id, log.pid)
}

/// The election on `client`; exits if it cannot be made.
fn election(worker: &Worker, client: &zk::Client) -> FencedElection {
    let path = worker.args.lock.clone();
    FencedElection::new(client.clone(), path, worker.options())
        .unwrap_or_else(|err| worker.fatal(err))
}

/// The epoch the worker fences with: the leadership's, or (the epoch-sequence mutant) the
/// number in its node's name, which restarts when the election's node is recreated.
fn epoch(worker: &Worker, leadership: &Leadership) -> u64 {
    if worker.args.mutant == "epoch-sequence" {
        u64::from(leadership.epoch().sequence().unsigned_abs())
    } else {
        leadership.epoch().as_u64()
    }
}

/// Campaigns by hand: campaign (up to 3T), work while leading, resign, again; a new session
/// when the old one ended.
async fn by_hand(mut worker: Worker) {
    loop {
        let client = connect(&worker.args.zk, worker.timeout, &worker.log).await;
        let election = election(&worker, &client);
        while !client.state().is_terminated() {
            term(&mut worker, &client, &election).await;
        }
        worker.log.now(Ev::SessionEnded {
            state: format!("{:?}", client.state()),
        });
    }
}

/// One term by hand: campaign, work while leading (the loss verdict if it was lost), resign.
async fn term(worker: &mut Worker, client: &zk::Client, election: &FencedElection) {
    EXTEND.store(false, Ordering::SeqCst);
    worker.log.now(Ev::Acquire { role: Role::Write });
    let campaign = election
        .campaign_timeout(identity(&worker.log), worker.wait())
        .await;
    let Some(leadership) = worker.acquired(campaign).await else {
        return;
    };
    let token = epoch(worker, &leadership);
    worker.serve(Some(client), &leadership, token, false).await;
    worker.release(&[token], leadership.resign()).await;
}

/// Leads with `FencedElection::lead` until the process ends: each term does the same work as
/// by hand (no loss verdict: a lost term's work is dropped at once and `lead` resigns), then
/// logs its release and returns, and `lead` resigns and campaigns again. A new session after
/// an expiry comes from `with_reconnect`, logged as the first one is. Should `lead` itself
/// end (an error no campaign can mend), the worker starts over on a new session.
async fn leading(worker: Worker) {
    let (hosts, timeout, log) = (worker.args.zk.clone(), worker.timeout, worker.log);
    let shared = tokio::sync::Mutex::new(worker);
    loop {
        let client = connect(&hosts, timeout, &log).await;
        let reconnect_to = hosts.clone();
        let election = {
            let worker = shared.lock().await;
            election(&worker, &client)
        }
        .with_reconnect(move || {
            let hosts = reconnect_to.clone();
            async move { Ok(connect(&hosts, timeout, &log).await) }
        });
        let shared = &shared;
        let ended = election
            .lead(
                identity(&log),
                CancellationToken::new(),
                |leadership| async move {
                    let mut worker = shared.lock().await;
                    EXTEND.store(false, Ordering::SeqCst);
                    let token = epoch(&worker, &leadership);
                    worker.serve(None, &leadership, token, false).await;
                    worker.log.now(Ev::Release { token });
                    Ok::<(), zkfence::Error>(())
                },
            )
            .await;
        log.now(Ev::SessionEnded {
            state: match ended {
                Ok(()) => "lead returned".into(),
                Err(err) => format!("lead failed: {err}"),
            },
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
