//! The guards' own nodes: each watched while the session's watch share allows, and past it
//! read back once a probe period.
//!
//! # Why a share
//!
//! After a reconnect `zookeeper-client` 0.11 sets a session's watches again in `SetWatches`
//! requests of up to 128 KiB of paths each, all sent with one xid. It keeps its pending
//! requests by xid, so when it needs two, the second reply finds nothing pending, the
//! connection drops, and the next attempt does the same until the session expires: a session
//! whose watched paths pass 128 KiB loses every hold at its first disconnect. So the holds of
//! one session keep at most [`HOLD_WATCH_BYTES`] of node paths watched (the rest of the
//! 128 KiB is for the waiters' watches, [`WAITING_WATCH_BYTES`](crate::WAITING_WATCH_BYTES),
//! and the application's).
//!
//! A hold past the share has no watch: once a probe period its node is read back with the
//! others past it, in `multi` reads of [`MOST_READ_BYTES`] of paths (a read each, no commit).
//! A node gone is [`LossReason::NodeDeleted`](crate::LossReason::NodeDeleted), Curator's
//! revocation marker in its data a revocation request: both as for a watched node, but found
//! within a probe period instead of at once. A watched hold that ends hands its share to the
//! oldest hold without one.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::core::{Core, NodeToWatch};
use super::state::GuardState;
use crate::mutants::Mutant;
use crate::requests::retry::{await_reconnect, is_connection_error};
use crate::requests::watch::watch_changed;

/// How long a guard must be held before the watchdog arms its own watch on the guard's node.
/// Most holds are shorter than this and then cost no request beyond create, list and delete.
/// A node deleted by someone else within this window is caught when the watch is armed (the
/// read finds it gone), so detection takes at most this delay plus one round trip.
/// A guard that waited long in the queue already has its watch from the acquire.
pub(super) const NODE_WATCH_DELAY: Duration = Duration::from_millis(10);

/// The most bytes of held nodes' paths one session keeps watched (see
/// [`WAITING_WATCH_BYTES`](crate::WAITING_WATCH_BYTES) for why): about 550 holds of 30-byte lock paths. A hold past it has
/// no watch; the watchdog reads its node back once a probe period (a `multi` read with the
/// others past it), so an outside deletion of its node, or a revocation request, is found
/// within a probe period instead of at once. A watched hold that ends hands its watch to the
/// oldest hold without one.
///
/// # Examples
///
/// ```
/// assert_eq!(zkfence::HOLD_WATCH_BYTES, 48 * 1024);
/// ```
pub const HOLD_WATCH_BYTES: usize = 48 * 1024;

/// What a revocation request writes into a holder's node: Apache Curator's marker
/// (`LockInternals.REVOKE_MESSAGE`), so that Curator's `Revoker` and zkfence reach each other's
/// holders. A guard's node watch, or the read of a node past the share, finds it;
/// `FencedLock::request_revocation` writes it.
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// The most bytes of paths one `multi` read of unwatched holds carries: about 370 nodes of
/// 90-byte paths, whose reply (each node's data and stat) stays far below the servers'
/// `jute.maxbuffer` even with a kilobyte of data in each.
const MOST_READ_BYTES: usize = 32 * 1024;

/// A guard's node watched until it is deleted (`true`) or the session ends.
pub(super) type WatchTask = Pin<Box<dyn Future<Output = (u64, bool)> + Send>>;

/// A read of unwatched holds' nodes: what it read, and per node whether it is gone.
pub(super) type ReadTask = Pin<Box<dyn Future<Output = Vec<(u64, bool)>> + Send>>;

/// The guards' nodes of one session: watched, waiting to be, or read back.
pub(super) struct Nodes {
    /// The armed watches, until they fire or the session ends.
    pub(super) watches: FuturesUnordered<WatchTask>,
    /// The reads of unwatched holds in flight (one round at a time).
    pub(super) reads: FuturesUnordered<ReadTask>,
    /// The bytes each armed watch's path counts against the share, by guard.
    watched: HashMap<u64, usize>,
    watched_bytes: usize,
    /// Guards' nodes to watch once they have been held for [`NODE_WATCH_DELAY`], in the
    /// order they were registered (so by when they are due).
    deferred: VecDeque<(Instant, NodeToWatch)>,
    /// Held guards past the share, oldest first: their ids alone, as [`Core`] has their nodes
    /// and states (most holds of a session with thousands are here).
    unwatched: BTreeSet<u64>,
    /// When the last round of reads went.
    read_at: Option<Instant>,
}

impl Nodes {
    pub(super) fn new() -> Nodes {
        Nodes {
            watches: FuturesUnordered::new(),
            reads: FuturesUnordered::new(),
            watched: HashMap::new(),
            watched_bytes: 0,
            deferred: VecDeque::new(),
            unwatched: BTreeSet::new(),
            read_at: None,
        }
    }

    /// A registered guard's node: watched now if the acquire set a watch on it and it fits
    /// within the share (one past it is dropped, which has the client remove it, and the hold
    /// read back), else once the guard has been held for [`NODE_WATCH_DELAY`] since
    /// `registered`.
    pub(super) fn add(
        &mut self,
        node: NodeToWatch,
        registered: Instant,
        core: &Core,
        client: Option<&Arc<zk::Client>>,
    ) {
        match client.filter(|_| node.pending.is_some()) {
            Some(client) if self.fits(core, &node.node) => self.arm(client, node),
            Some(_) => {
                // Its watch goes (the client removes it) with the node handed over here.
                self.unwatched.insert(node.id);
            }
            None => (self.deferred).push_back((registered + NODE_WATCH_DELAY, node)),
        }
    }

    /// When the first deferred watch is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.deferred.front().map(|(due, _)| *due)
    }

    pub(super) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// Arms the watches that are due, on the nodes of guards still held, within the share;
    /// the guards past it wait for their turn unwatched.
    pub(super) fn sweep(&mut self, core: &Core, client: Option<&Arc<zk::Client>>) {
        let now = Instant::now();
        while self.deferred.front().is_some_and(|(due, _)| *due <= now) {
            let Some((_, node)) = self.deferred.pop_front() else {
                break;
            };
            if ended(core, &node) {
                continue; // released (or lost) before its watch was due: none needed
            }
            match client.filter(|_| self.fits(core, &node.node)) {
                Some(client) => self.arm(client, node),
                // Past the share (or no client now): read back. A watch the acquire set goes
                // with the node handed over here (the client removes it), as no budget
                // counts it.
                None => drop(self.unwatched.insert(node.id)),
            }
        }
    }

    /// A watch ended (its guard's node deleted, or the session over): its share goes to the
    /// oldest unwatched holds.
    pub(super) fn watch_ended(&mut self, id: u64, core: &Core, client: Option<&Arc<zk::Client>>) {
        if let Some(bytes) = self.watched.remove(&id) {
            self.watched_bytes -= bytes;
        }
        let Some(client) = client else {
            return;
        };
        while let Some(&id) = self.unwatched.first() {
            let live = core.live_node(id);
            if live.is_some_and(|(node, _)| !self.fits(core, node)) {
                break;
            }
            self.unwatched.remove(&id);
            if let Some((node, state)) = live {
                let (node, state) = (node.clone(), state.clone());
                let pending = None;
                self.arm(
                    client,
                    NodeToWatch {
                        id,
                        node,
                        state,
                        pending,
                    },
                );
            }
        }
    }

    /// A guard was released or dropped: it needs no read any more.
    pub(super) fn forget(&mut self, id: u64) {
        self.unwatched.remove(&id);
    }

    /// Sends a round of reads of the unwatched holds' nodes, if there are any and none went
    /// within `period`; a read not answered within `limit` (the session timeout) is given up.
    pub(super) fn read_if_due(
        &mut self,
        core: &Core,
        client: &Arc<zk::Client>,
        now: Instant,
        period: Duration,
        limit: Duration,
    ) {
        let due = self.read_at.is_none_or(|at| at + period <= now);
        if self.unwatched.is_empty() || !self.reads.is_empty() || !due {
            return;
        }
        // A hold that ended (lost, or released and not yet unregistered) needs no read.
        self.unwatched.retain(|id| core.live_node(*id).is_some());
        self.read_at = Some(now);
        let nodes: Vec<(u64, Arc<str>, Arc<GuardState>)> = (self.unwatched.iter())
            .filter_map(|id| {
                let (node, state) = core.live_node(*id)?;
                Some((*id, node.clone(), state.clone()))
            })
            .collect();
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for node in nodes {
            bytes += node.1.len();
            chunk.push(node);
            if bytes >= MOST_READ_BYTES {
                let full = std::mem::take(&mut chunk);
                self.reads
                    .push(Box::pin(read_nodes(client.clone(), full, limit)));
                bytes = 0;
            }
        }
        if !chunk.is_empty() {
            self.reads
                .push(Box::pin(read_nodes(client.clone(), chunk, limit)));
        }
    }

    /// The guards whose nodes a read found gone and that are still unwatched holds.
    pub(super) fn gone(&self, read: Vec<(u64, bool)>) -> Vec<u64> {
        (read.into_iter())
            .filter(|(id, gone)| *gone && self.unwatched.contains(id))
            .map(|(id, _)| id)
            .collect()
    }

    /// The client handle went (the session idle): nothing more is read with it.
    pub(super) fn detach(&mut self) {
        self.reads = FuturesUnordered::new();
    }

    /// Whether `node`'s watch fits within the share: its path on the server counts once.
    fn fits(&self, core: &Core, node: &str) -> bool {
        // The mutant's flaw: every hold watched, whatever the client can re-arm.
        let share = match core.lease.flaw().is(Mutant::WatchEveryHold) {
            true => usize::MAX,
            false => HOLD_WATCH_BYTES,
        };
        self.watched_bytes.saturating_add(node.len()) <= share
    }

    fn arm(&mut self, client: &Arc<zk::Client>, node: NodeToWatch) {
        let bytes = node.node.len();
        if let Some(old) = self.watched.insert(node.id, bytes) {
            self.watched_bytes -= old;
        }
        self.watched_bytes += bytes;
        self.watches
            .push(Box::pin(watch_node(client.clone(), node)));
    }
}

/// Whether `node`'s guard ended (released or lost) or left the watchdog.
fn ended(core: &Core, node: &NodeToWatch) -> bool {
    node.state.is_cancelled() || !core.holds(node.id)
}

/// Reads `nodes` in one `multi` read: which are gone, and a revocation request told to each
/// guard whose node carries the marker. A failed request, or one not answered within `limit`
/// (a reply lost on a live connection never comes), finds nothing: the next round reads them
/// again.
async fn read_nodes(
    client: Arc<zk::Client>,
    nodes: Vec<(u64, Arc<str>, Arc<GuardState>)>,
    limit: Duration,
) -> Vec<(u64, bool)> {
    let mut reader = client.new_multi_reader();
    for (_, path, _) in &nodes {
        if reader.add_get_data(path).is_err() {
            return Vec::new();
        }
    }
    let results = match tokio::time::timeout(limit, reader.commit()).await {
        Ok(Ok(results)) => results,
        Ok(Err(err)) => {
            tracing::debug!(cause = %err, nodes = nodes.len(), "a read of held nodes past the watch share failed");
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    (nodes.into_iter().zip(results))
        .map(|((id, _, state), result)| match result {
            zk::MultiReadResult::Data { data, .. } => {
                if data == REVOKE {
                    state.revocation_requested();
                }
                (id, false)
            }
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            } => (id, true),
            _ => (id, false),
        })
        .collect()
}

/// Watches one guard's node until it is deleted (`true`) or the session ends (`false`),
/// starting from the acquire's pending watch when there is one. Each (re)arm reads the node's
/// data: Curator's revocation marker there is told to the guard (a revocation request costs
/// the one read its data change causes, and nothing per hold).
///
/// Once armed, a released guard's watch is not dropped early: dropping a pending watcher makes
/// the client send a removeWatches request, while the release's own delete is about to fire it
/// anyway. The result for an unregistered guard is ignored by [`Core`].
async fn watch_node(client: Arc<zk::Client>, node: NodeToWatch) -> (u64, bool) {
    let NodeToWatch {
        id,
        node,
        state,
        mut pending,
    } = node;
    let mut attempt = 0;
    loop {
        let event = match pending.take() {
            Some(pending) => pending.await,
            // getData, not exists: on a missing node it arms no watch (exists would arm a
            // creation watch that we would then have to remove).
            // The request's future is boxed, and so is the reconnect's: this task lasts as long
            // as the hold, and its size is that of the largest future it awaits, which would
            // otherwise be one of these (a watch costs its hold about 500 bytes more).
            None => match Box::pin(client.get_and_watch_data(&node)).await {
                Ok((data, _, watcher)) => {
                    if data == REVOKE {
                        state.revocation_requested();
                    }
                    watch_changed(watcher).await
                }
                Err(zk::Error::NoNode) => return (id, true),
                Err(err) if is_connection_error(&err) => {
                    if Box::pin(await_reconnect(&client, &mut attempt))
                        .await
                        .is_err()
                    {
                        return (id, false);
                    }
                    continue;
                }
                Err(_) => return (id, false),
            },
        };
        match event.event_type {
            zk::EventType::NodeDeleted => return (id, true),
            zk::EventType::Session => return (id, false),
            // The guard is over (released, our own marked release fires this, or lost):
            // watching again would cost a request for nothing.
            _ if state.is_cancelled() => return (id, false),
            _ => {} // data changed under a live guard: watch again
        }
    }
}
