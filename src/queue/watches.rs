//! The watches a waiter sets: armed back to back on the nodes ahead, its herald's, a
//! semaphore head's gate, a semaphore waiter's announcement of its admission, and the watches
//! left set to fire in their own time.
//!
//! # The semaphore's gate
//!
//! A semaphore of `n` admits a waiter once fewer than `n` nodes sort before it, and any node
//! ahead may go first, so no single node tells a waiter that its turn came. Watching its `n`
//! nearest, as each waiter once did, woke up to `n` waiters per release, one of which was
//! admitted. Instead:
//!
//! - **The head of the waiters** (exactly `n` nodes ahead) is the one waiter that may be
//!   admitted by the next release. It lists the queue with a child watch on the lock path (one
//!   request, the listing it needs anyway), and lists again whenever that fires: a release, or
//!   a node that came or went (a plain listing, and a second one setting the watch again if
//!   it still heads the waiters). It proceeds only on a listing that shows fewer than `n`
//!   ahead.
//! - **Every other waiter follows its predecessor**, a waiter too, with one data watch. It
//!   cannot be admitted before its predecessor is, and its predecessor's admission makes it the
//!   head; so it lists again when that node's data changes or the node goes.
//! - **An admitted waiter announces it** when its admitting listing showed a node behind its
//!   own, or when it was admitted on an event with no listing: it writes its node's data again,
//!   unchanged, before its hold's own watch is set. A node that queued behind ours after that
//!   listing listed the queue after our admission, so it heads the waiters or is admitted, and
//!   needs no announcement.
//! - **A follower whose watch came after the announcement** sees it in the version its watch
//!   reports: a node of ours is created at version 0, so a version it has not acted on means a
//!   write it did not see, and it lists again (a revocation request written into a waiting
//!   node is a write too: it costs the follower a listing or two).
//! - **With lock-delay**, which must see each holder's release marker, every semaphore waiter
//!   watches its `n` nearest as before, and nobody announces.
//!
//! A release then notifies the head, and its admission the next waiter: two notifications and
//! two listings however many permits and waiters, as Curator's `InterProcessSemaphoreV2` with
//! its one gate waiter. A node's arrival notifies the head as well. The announcement is a write:
//! one commit per admission behind which others wait. Missing one never breaks the count
//! (every admission is decided by a listing); it would leave the next waiter sitting out a free
//! permit until its predecessor goes, which `tests/kinds.rs` checks with the `SilentAdmission`
//! and `UnseenAnnouncement` mutants; the announcement is retried across reconnects, and needs
//! the node's ACL to let its creator write it. A waiter sets no watch on its own node (the
//! announcement would fire it): the head's listings find it gone, a follower its next listing
//! (when its predecessor is admitted or goes). The queue model leaves the gate out.
//!
//! Apache Curator's nodes never carry release markers: a Curator holder's release is a plain
//! deletion, after which a zkfence successor lists again; a Curator waiter woken by our marked
//! release lists again and finds the node gone. Server writes per contended acquisition: our
//! create and the release's one `multi` transaction.
//!

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::metrics::PARKED_WATCHES;
use crate::requests::nodes::child_path;
use crate::requests::retry::{await_reconnect, is_connection_error, retrying};
use crate::requests::watch::{watch_changed, NodeWatch};
use crate::watchdog::clock;

use super::handoff::{announced_before_watch, Ahead, Sense};
use super::kind::Position;
use super::state::{Attempt, Queued, Waited};

impl Attempt<'_> {
    /// Sets the watches [`Ahead`] asks for on the nodes the predicate names (a child watch for
    /// each node's deletion, a data watch where the release marker counts), and, when `own`
    /// and not yet set, an exists watch on our own node (kept in `waited`), all back to back:
    /// one round trip. Notes our herald in `children` in `waited` ([`Kind::herald`]; watched
    /// only if our lease lapses while we wait). None needs READ permission on others' nodes.
    /// On a missing node ahead it arms nothing (what it set is parked).
    pub(super) async fn arm(
        &self,
        position: &Position,
        ahead: &Ahead,
        children: &[String],
        node: &Queued,
        waited: &mut Waited,
        own: bool,
    ) -> Result<Armed> {
        let own_watch = &mut waited.own_watch;
        let client = self.client;
        let own = (own && own_watch.is_none() && self.watches_own())
            .then(|| client.check_and_watch_stat(&node.path));
        let targets: Vec<String> = (position.watch.iter().take(ahead.watched()))
            .map(|n| child_path(self.path, n))
            .collect();
        let sent = self.send_watches(&targets, ahead);
        waited.herald = self.queue.kind.herald(children, node.sequence);
        if let Some(own) = own {
            match own.await {
                Ok((Some(_), watcher)) => *own_watch = Some(Box::pin(watch_changed(watcher))),
                Ok((None, _)) => return Err(self.node_deleted(node).await),
                Err(err) => return self.watch_failed(&node.path, err).await,
            }
        }
        self.collect_watches(sent, &targets, position, ahead, waited)
            .await
    }

    /// Sends the watch requests [`Ahead`] asks for on `targets`, back to back: each request is
    /// sent here, when the client's method is called (not when its reply is awaited).
    fn send_watches<'t>(&'t self, targets: &'t [String], ahead: &Ahead) -> Vec<SentWatch<'t>> {
        let client = self.client;
        let mut sent = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            for &sense in ahead.senses(i) {
                let watch: Pin<Box<dyn Future<Output = WatchReply> + Send + 't>> = match sense {
                    Sense::Deletion => {
                        let reply = client.list_and_watch_children(target);
                        Box::pin(async move { reply.await.map(|(_, w)| (w, 0)) })
                    }
                    Sense::Data => {
                        let reply = client.get_and_watch_data(target);
                        Box::pin(async move { reply.await.map(|(_, stat, w)| (w, stat.version)) })
                    }
                };
                sent.push((i, sense, watch));
            }
        }
        sent
    }

    /// The watches `sent` on `targets` once their replies are in: what arming found.
    async fn collect_watches(
        &self,
        sent: Vec<SentWatch<'_>>,
        targets: &[String],
        position: &Position,
        ahead: &Ahead,
        waited: &mut Waited,
    ) -> Result<Armed> {
        let (mut watching, mut gone, mut failed) = (Vec::with_capacity(sent.len()), false, None);
        let mut late = false; // a follower's watch set after an announcement it did not see
        for (i, sense, reply) in sent {
            match reply.await {
                Ok((watcher, version)) => {
                    late |= ahead.follows() && self.late(&position.watch[i], version, waited);
                    watching.push(Watching {
                        target: i,
                        sense,
                        watch: Box::pin(watch_changed(watcher)),
                    });
                }
                // Gone between the listing and the watch (whether released or not is unknown:
                // no lock-delay).
                Err(zk::Error::NoNode) => gone = true,
                Err(err) => {
                    failed.get_or_insert((&targets[i], err));
                }
            }
        }
        if let Some((target, err)) = failed {
            return self.watch_failed(target, err).await;
        }
        if gone || late {
            park(std::mem::take(&mut watching));
        }
        Ok(if gone {
            Armed::Gone
        } else if late {
            Armed::Retry
        } else {
            Armed::Watching(watching)
        })
    }

    /// Whether a semaphore follower's watch on its predecessor `name`, set at data `version`,
    /// came after a write it has not seen (see `handoff::announced_before_watch`); then it
    /// notes that version as acted on, and lists again.
    pub(super) fn late(&self, name: &str, version: i32, waited: &mut Waited) -> bool {
        let flaw = self.queue.options.flaw;
        if !announced_before_watch(waited.acted.as_ref(), name, version, flaw) {
            return false;
        }
        waited.acted = Some((name.to_owned(), version));
        true
    }

    /// Our lease no longer vouches for a grant while we still wait: watches our herald (see
    /// [`Kind::herald`]), its watch joining `watching` at once, set while the other watches are
    /// polled (a hint never holds up a decision). `false` when the lease vouches after all
    /// (another hold of the session proved it meanwhile): nothing is watched yet.
    pub(super) fn watch_herald(&self, herald: Option<&str>, watching: &mut Vec<Watching>) -> bool {
        let (Some(herald), true) = (herald, self.lapse() <= clock::now()) else {
            return false;
        };
        watching.push(Watching {
            target: HERALD,
            sense: Sense::Deletion,
            watch: Box::pin(herald_gone(
                self.client.clone(),
                child_path(self.path, herald),
            )),
        });
        true
    }

    /// A watch that could not be set: after a reconnect the queue is listed again (its
    /// outcome is unknown: a repeat would set it twice); anything else is an error.
    pub(super) async fn watch_failed(&self, target: &str, err: zk::Error) -> Result<Armed> {
        if is_connection_error(&err) {
            await_reconnect(self.client, &mut 0).await?;
            return Ok(Armed::Retry);
        }
        Err(Error::from_request("watch", target, self.session, err))
    }

    /// When the lease stops vouching for a grant (see `LeaseCell::vouches_for`).
    pub(super) fn lapse(&self) -> Instant {
        let budget = self.budget();
        let deadline = self.lease().deadline(budget);
        deadline.checked_sub(budget / 16).unwrap_or(deadline)
    }
}

/// The `target` of the watch on the herald (see [`Kind::herald`]), which is not one of
/// `Position::watch`: its event only warms the lease.
pub(super) const HERALD: usize = usize::MAX;

/// The `target` of a semaphore head's child watch on the lock path (see "The semaphore's
/// gate"), which is not one of `Position::watch` either.
pub(super) const GATE: usize = usize::MAX - 1;

/// A semaphore head's gate (see "The semaphore's gate"): the child watch on the lock path
/// that our last listing set, if it set one, and whether the next listing sets one. A watch
/// still here, not waited on, is parked (see [`park`]) when the next listing comes or the gate
/// is dropped; one waited on goes as the other watches do.
#[derive(Default)]
pub(super) struct Gate {
    pub(super) watch: Option<NodeWatch>,
    pub(super) next: bool,
}

impl Gate {
    /// The watch to wait on at the head of the waiters; [`Armed::Ungated`] if our listing set
    /// none.
    pub(super) fn armed(&mut self) -> Armed {
        match self.watch.take() {
            Some(watch) => Armed::Watching(vec![Watching {
                target: GATE,
                sense: Sense::Deletion,
                watch,
            }]),
            None => Armed::Ungated,
        }
    }

    /// Leaves the watch, if one is set, to fire in its own time (see [`park`]).
    pub(super) fn park(&mut self) {
        if let Armed::Watching(watching) = self.armed() {
            park(watching);
        }
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.park();
    }
}

/// The rest of a semaphore waiter's announcement (see `Attempt::announce_admission`), once
/// `written` was sent: after a lost reply it writes again, across reconnects, until the
/// session ends; if someone wrote into our node while we waited (a revocation request), it
/// writes back what it finds there, so that the request stays and the follower still sees a
/// change. A node already gone needs nothing: its deletion fires the follower's watch too. A
/// node whose ACL refuses us its data leaves the follower to learn of our admission only when
/// we release: said in a warning, as the lock's docs say it.
pub(super) async fn announced(
    client: zk::Client,
    path: String,
    data: Vec<u8>,
    written: impl Future<Output = std::result::Result<zk::Stat, zk::Error>>,
) {
    let mut result = written.await;
    if result.as_ref().is_err_and(is_connection_error) {
        let Ok(again) = retrying(&client, || client.set_data(&path, &data, Some(0))).await else {
            return; // the session ended: so did the hold
        };
        result = again;
    }
    if let Err(zk::Error::BadVersion) = result {
        let write_back = || async {
            let (data, stat) = client.get_data(&path).await?;
            client.set_data(&path, &data, Some(stat.version)).await
        };
        let Ok(again) = retrying(&client, write_back).await else {
            return;
        };
        result = again;
    }
    match result {
        // Gone, or written by someone else between our read and our write (which fired the
        // follower's watch as ours would have).
        Ok(_) | Err(zk::Error::NoNode | zk::Error::BadVersion) => {}
        Err(err) => {
            tracing::warn!(node = %path, cause = %err, "could not announce a semaphore admission; the waiter behind learns of it when this lease ends");
        }
    }
}

/// Sets a child watch on the herald at `path` and waits for it: `NodeDeleted` when the herald
/// goes (or was gone when the watch was set), or a `NodeChildrenChanged` that means nothing
/// (an ephemeral node has no children) when the watch could not be set (a hint: a broken
/// connection shows on the watches that decide).
async fn herald_gone(client: zk::Client, path: String) -> zk::WatchedEvent {
    match client.list_and_watch_children(&path).await {
        Ok((_, watcher)) => watch_changed(watcher).await,
        Err(zk::Error::NoNode) => zk::WatchedEvent::new(zk::EventType::NodeDeleted, path),
        Err(_) => zk::WatchedEvent::new(zk::EventType::NodeChildrenChanged, path),
    }
}

/// A watch set on a node ahead: which one (its index in `Position::watch`, or [`HERALD`]),
/// which kind of watch, and its event.
pub(super) struct Watching {
    pub(super) target: usize,
    pub(super) sense: Sense,
    pub(super) watch: NodeWatch,
}

/// Leaves the watches still set on nodes ahead (a semaphore waiter admitted by one of its `n`,
/// a waiter that lists again) to fire in their own time. Dropped, each would cost a request:
/// `zookeeper-client` removes a dropped watcher's watch from the server (`removeWatches`), which
/// made an admitted semaphore waiter send `n - 1` requests. Left set, each costs at most a
/// notification when its node goes, or nothing if the session ends first; the task ends with
/// the last of them.
pub(super) fn park(watching: Vec<Watching>) {
    if watching.is_empty() {
        return;
    }
    // Outside a runtime (an acquire dropped after its runtime), the watches are dropped.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    metrics::gauge!(PARKED_WATCHES).increment(watching.len() as f64);
    runtime.spawn(async move {
        let watches = watching.into_iter().map(|w| async move {
            w.watch.await;
            metrics::gauge!(PARKED_WATCHES).decrement(1.0);
        });
        futures_util::future::join_all(watches).await;
    });
}

/// The events already there on the watches of `sense` on `target`, taken out of `watching`
/// (only those watches are polled).
pub(super) fn take_ready(
    watching: &mut Vec<Watching>,
    target: usize,
    sense: Sense,
) -> Vec<zk::WatchedEvent> {
    use futures_util::FutureExt as _;
    let mut ready = Vec::new();
    watching.retain_mut(|w| {
        if w.target != target || w.sense != sense {
            return true;
        }
        match (&mut w.watch).now_or_never() {
            Some(event) => {
                ready.push(event);
                false
            }
            None => true,
        }
    });
    ready
}

/// The reply to setting a watch, with the watched node's data version (0 for a child watch).
type WatchReply = std::result::Result<(zk::OneshotWatcher, i32), zk::Error>;

/// A watch request sent: the index of its target, its kind, and its reply.
type SentWatch<'t> = (
    usize,
    Sense,
    Pin<Box<dyn Future<Output = WatchReply> + Send + 't>>,
);

/// What arming the watches found.
pub(super) enum Armed {
    Watching(Vec<Watching>),
    /// A watched node was gone already.
    Gone,
    /// The connection broke, or a semaphore follower's watch came after an announcement it
    /// had not seen: list again.
    Retry,
    /// We head a semaphore's waiters, and the listing set no gate: list again, setting it.
    Ungated,
}
