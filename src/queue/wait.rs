//! Waiting for our turn: the listing, our position in it, the watches on the nodes ahead and
//! on our own, and what their events decide (see [`super::handoff`]).

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::requests::retry::retrying;
use crate::requests::watch::{watch_changed, NodeWatch};
use crate::wait::{sleep_until_opt, Wait};
use crate::watchdog::clock;

use super::handoff::{self, Ahead, Sense, Verdict};
use super::kind::{Kind, Position};
use super::names;
use super::state::{Attempt, Queued, Waited};
use super::watches::{announced, park, take_ready, Armed, Gate, Watching, GATE, HERALD};

impl Attempt<'_> {
    /// Waits until the kind's predicate lets us proceed (see [`Self::wait_in_queue`]). A wait
    /// that lasted [`OWN_WATCH_DELAY`] counts as crowded: others may have queued behind us
    /// meanwhile, so our release is marked for them.
    pub(super) async fn wait_turn(&mut self, node: &Queued) -> Result<Option<Waited>> {
        let own_due = Instant::now() + OWN_WATCH_DELAY;
        let waited = self.wait_in_queue(node, own_due).await?;
        Ok(waited.map(|mut waited| {
            waited.crowded |= Instant::now() >= own_due;
            waited
        }))
    }

    /// Waits until the kind's predicate lets us proceed, watching the nodes it names and, from
    /// `own_due` on, our own node (if someone deletes it, we fail instead of taking a lock we
    /// no longer queue for). `Ok(None)`: the wait ran out (our node is removed).
    pub(super) async fn wait_in_queue(
        &mut self,
        node: &Queued,
        own_due: Instant,
    ) -> Result<Option<Waited>> {
        let mut listing = node.listing.clone();
        let mut waited = Waited::default();
        let mut next = Waiting {
            after_vanish: false,
            gate: Gate::default(),
            own_due,
        };
        loop {
            let children = self.listing(node, &mut listing, &mut next.gate).await?;
            if self.remove_duplicates(&children, node).await? {
                continue; // list again without them
            }
            let position = self
                .queue
                .kind
                .position(&children, &node.name, node.sequence);
            if !position.present {
                return Err(self.node_deleted(node).await);
            }
            if position.blocking == 0 {
                self.announce_admission(node, Some(position.behind));
                waited.vanished = next.after_vanish && self.lock_delay_on();
                return Ok(Some(waited));
            }
            waited.crowded |= position.crowded();
            self.creating = None; // we wait: no probes until granted
            if let Wait::Never = self.wait {
                self.pending.remove().await?;
                return Ok(None);
            }
            let round =
                (self.watch_round(&position, &children, node, &mut waited, &mut next)).await?;
            match round {
                Some(Verdict::Proceed { vanished }) => {
                    waited.vanished = vanished;
                    return Ok(Some(waited));
                }
                Some(Verdict::Relist { after_vanish }) => next.after_vanish = after_vanish,
                // The wait ran out (our node is removed).
                Some(Verdict::Wait) | None => return Ok(None),
            }
        }
    }

    /// One round of the wait at `position`: the watches it calls for set (or the gate's taken),
    /// then their events awaited until one decides; `None` when the wait ran out (our node is
    /// removed). Notes in `next` whether the next listing sets the gate's watch.
    async fn watch_round(
        &mut self,
        position: &Position,
        children: &[String],
        node: &Queued,
        waited: &mut Waited,
        next: &mut Waiting,
    ) -> Result<Option<Verdict>> {
        let flaw = self.queue.options.flaw;
        let mut ahead = Ahead::new(self.queue.kind, position, self.lock_delay_on(), flaw);
        let armed = if self.gated(position) {
            next.gate.armed()
        } else {
            let own_now = Instant::now() >= next.own_due;
            (self.arm(position, &ahead, children, node, waited, own_now)).await?
        };
        let watching = match armed {
            Armed::Watching(watching) => watching,
            Armed::Gone if matches!(ahead.on_gone(), Verdict::Proceed { .. }) => {
                self.announce_admission(node, None);
                return Ok(Some(Verdict::Proceed { vanished: false }));
            }
            // Only a gated waiter meets `Ungated`, and it has no lock-delay, the one thing
            // `after_vanish` counts for.
            Armed::Gone | Armed::Retry | Armed::Ungated => {
                // List again; `Ungated`: setting the gate's watch.
                next.gate.next = matches!(armed, Armed::Ungated);
                return Ok(Some(Verdict::Relist {
                    after_vanish: false,
                }));
            }
        };
        let own_due = next.own_due;
        match (self.watch_ahead(watching, &mut ahead, node, waited, own_due)).await? {
            Some(Verdict::Proceed { vanished }) => {
                self.still_queued(node, &mut waited.own_watch).await?;
                self.announce_admission(node, None);
                Ok(Some(Verdict::Proceed { vanished }))
            }
            Some(relist @ Verdict::Relist { after_vanish }) => {
                next.gate.next = self.heads_next(&ahead, position, after_vanish);
                Ok(Some(relist))
            }
            Some(Verdict::Wait) | None => {
                // The wait ran out.
                self.withdraw().await?;
                Ok(None)
            }
        }
    }

    /// Whether this acquire's waiters wait at a gate when they head the waiters: a semaphore's,
    /// with no lock-delay (which needs to see each holder's release marker, so its head
    /// watches its `n` nearest instead). See "The semaphore's gate".
    pub(super) fn gates(&self) -> bool {
        matches!(self.queue.kind, Kind::Semaphore(_)) && !self.lock_delay_on()
    }

    /// Whether a semaphore follower at `position` that lists again (after a deletion if
    /// `vanish`) most likely heads the waiters now, so that its listing sets the gate: its
    /// predecessor announced its admission (a data change, not a deletion), or it was right
    /// behind the head.
    pub(super) fn heads_next(&self, ahead: &Ahead, position: &Position, vanish: bool) -> bool {
        // A follower is a gated waiter already (a semaphore's, with no lock-delay).
        ahead.follows() && (!vanish || position.blocking == 2)
    }

    /// Whether we wait at the gate at `position`: we head a semaphore's waiters.
    pub(super) fn gated(&self, position: &Position) -> bool {
        self.gates() && position.blocking == 1
    }

    /// Whether we watch our own node while we wait: not as a semaphore's waiter, whose own
    /// announcement of its admission would fire that watch (the gate's listing, or the next
    /// one, finds our node gone instead).
    pub(super) fn watches_own(&self) -> bool {
        !matches!(self.queue.kind, Kind::Semaphore(_))
    }

    /// A semaphore waiter admitted by a listing that showed `behind` nodes after ours (`None`:
    /// on an event, with no listing) writes its node's data again, unchanged, so that the
    /// follower watching it learns that it may now head the waiters (see "The semaphore's
    /// gate"). Sent now, before the hold's own watch on the node, so that it cannot fire
    /// that watch; its reply is awaited aside, and the grant does not wait for it.
    pub(super) fn announce_admission(&self, node: &Queued, behind: Option<usize>) {
        let (kind, flaw) = (self.queue.kind, self.queue.options.flaw);
        if !handoff::announces_admission(kind, self.lock_delay_on(), behind, flaw) {
            return;
        }
        // Only if nobody wrote into our node meanwhile (version 0): else a revocation request
        // there would be overwritten.
        let written = self.client.set_data(&node.path, self.data, Some(0));
        let (client, path) = (self.client.clone(), node.path.clone());
        tokio::spawn(announced(client, path, self.data.to_vec(), written));
    }

    /// Waits on the watches set on the nodes ahead until an event decides (see
    /// [`handoff`]), setting the watch on our own node at `own_due` if it is not set yet, and
    /// the one on our herald once our lease lapses (see "The handoff"); `None` when the
    /// deadline came first.
    pub(super) async fn watch_ahead(
        &self,
        mut watching: Vec<Watching>,
        ahead: &mut Ahead,
        node: &Queued,
        waited: &mut Waited,
        own_due: Instant,
    ) -> Result<Option<Verdict>> {
        let mut herald_watched = false;
        loop {
            let herald_due =
                (!herald_watched && waited.herald.is_some()).then(|| clock::timer(self.lapse()));
            let own_watch = &mut waited.own_watch;
            let (event, target, sense) =
                match (self.next_change(&mut watching, own_watch, own_due, herald_due)).await {
                    Woke::Timeout => return Ok(None),
                    Woke::OwnDue => {
                        if let Some(retry) = self.watch_own(node, own_watch).await? {
                            return Ok(Some(retry));
                        }
                        continue;
                    }
                    Woke::HeraldDue => {
                        herald_watched = self.watch_herald(waited.herald.as_deref(), &mut watching);
                        continue;
                    }
                    Woke::Own(event) if event.event_type == zk::EventType::NodeDeleted => {
                        return Err(self.node_deleted(node).await);
                    }
                    Woke::Own(event) => {
                        self.session_over(&event)?;
                        // Our own node's data (a revocation request aimed at a waiter): list again.
                        return Ok(Some(Verdict::Relist {
                            after_vanish: false,
                        }));
                    }
                    Woke::Blocker {
                        event,
                        target,
                        sense,
                    } => (event, target, sense),
                };
            if let Some(decided) =
                self.on_blocker(node, ahead, &mut watching, event, target, sense)?
            {
                return Ok(Some(decided));
            }
        }
    }

    /// What the event on a watch ahead (on `target`, of `sense`) decides; `None`: wait on. A
    /// decision parks the watches still set.
    fn on_blocker(
        &self,
        node: &Queued,
        ahead: &mut Ahead,
        watching: &mut Vec<Watching>,
        event: zk::WatchedEvent,
        target: usize,
        sense: Sense,
    ) -> Result<Option<Verdict>> {
        self.session_over(&event)?;
        match target {
            // The queue changed: a holder left, or a node came or went.
            GATE => {
                return Ok(Some(Verdict::Relist {
                    after_vanish: false,
                }))
            }
            // A hint, never a decision: prove our session now, off the path of the handoffs
            // to come.
            HERALD => {
                if event.event_type == zk::EventType::NodeDeleted {
                    self.warm_up(node);
                }
                return Ok(None);
            }
            _ => {}
        }
        if sense == Sense::Deletion {
            // The release marker's event came first (zookeeper-client hands events over in
            // order), but both were ready when we polled: take it first.
            for marker in take_ready(watching, target, Sense::Data) {
                ahead.on_event(target, Sense::Data, &marker);
            }
        }
        match ahead.on_event(target, sense, &event) {
            Verdict::Wait => Ok(None),
            decided => {
                park(std::mem::take(watching));
                Ok(Some(decided))
            }
        }
    }

    /// Sets the watch on our own node, late in a wait that lasts. `Some(Relist)` when the
    /// connection broke meanwhile (the queue is listed again).
    pub(super) async fn watch_own(
        &self,
        node: &Queued,
        own_watch: &mut Option<NodeWatch>,
    ) -> Result<Option<Verdict>> {
        match self.client.check_and_watch_stat(&node.path).await {
            Ok((Some(_), watcher)) => {
                *own_watch = Some(Box::pin(watch_changed(watcher)));
                Ok(None)
            }
            Ok((None, _)) => Err(self.node_deleted(node).await),
            Err(err) => {
                // After a reconnect: list again (and set the watch with that round's).
                self.watch_failed(&node.path, err).await?;
                Ok(Some(Verdict::Relist {
                    after_vanish: false,
                }))
            }
        }
    }

    /// Before we proceed on the deletion of the node ahead, and again at the grant: our own
    /// node's deletion may have come in the same transaction (a session closed from outside
    /// deletes all its nodes), its notification right behind. Without a request: the own
    /// watch has fired, or the client knows its session is over. At the grant, for a waiter
    /// that watches its own node, it is exact whenever the grant rests on a reply that came
    /// after the deletion that let us in (a node ahead found gone while arming, a listing, the
    /// read after a lock-delay): the server sends a transaction's notifications before its
    /// replies to later requests, and `zookeeper-client` hands them on in that order.
    pub(super) async fn still_queued(
        &self,
        node: &Queued,
        own_watch: &mut Option<NodeWatch>,
    ) -> Result<()> {
        use futures_util::FutureExt as _;
        if let Some(event) = own_watch.as_mut().and_then(|w| w.now_or_never()) {
            *own_watch = None;
            if event.event_type == zk::EventType::NodeDeleted {
                return Err(self.node_deleted(node).await);
            }
        }
        match Error::from_session_state(self.client.state(), self.session) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// The session's error, for a terminal session event.
    pub(super) fn session_over(&self, event: &zk::WatchedEvent) -> Result<()> {
        match Error::from_session_state(event.session_state, self.session) {
            Some(err) if event.event_type == zk::EventType::Session => Err(err),
            _ => Ok(()),
        }
    }

    /// A read lock taken under our own write lock at `write` (a downgrade): admitted at once,
    /// with whether exclusive nodes queued between the two (then the write lock must be kept
    /// until the read lock ends: released now, it would let them in beside our reader). Waits
    /// as any reader if the write lock's node is gone.
    pub(super) async fn beside(&mut self, node: &Queued, write: &str) -> Result<Option<Waited>> {
        let children = match node.listing.clone() {
            Some(children) => children,
            None => self.list(node).await?,
        };
        let write_name = write.rsplit('/').next().unwrap_or(write);
        let Some(write_seq) = children
            .iter()
            .find(|c| *c == write_name)
            .and_then(|c| names::parse_sequence(c))
        else {
            return self.wait_turn(node).await;
        };
        let between = children
            .iter()
            .filter_map(|c| names::parse_node(c))
            .any(|(seq, role)| {
                role == names::Role::Exclusive
                    && names::distance(write_seq, seq) > 0
                    && names::distance(seq, node.sequence) > 0
            });
        Ok(Some(Waited {
            behind_writers: between,
            ..Waited::default()
        }))
    }

    /// Lists the queue. A listing is a read, which a follower cut off from the leader still
    /// answers: it proves nothing for the lease (committed writes do).
    pub(super) async fn list(&self, node: &Queued) -> Result<Vec<String>> {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.list_children(path)).await? {
            Ok(children) => Ok(children),
            Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("list", path, self.session, err)),
        }
    }

    /// The listing to judge our position by: the one we have (the create's), or a new one,
    /// which sets the gate's watch when `gate` asks for it.
    pub(super) async fn listing(
        &self,
        node: &Queued,
        listing: &mut Option<Vec<String>>,
        gate: &mut Gate,
    ) -> Result<Vec<String>> {
        if let Some(children) = listing.take() {
            return Ok(children);
        }
        gate.park(); // a watch the last listing set and nothing waited on
        if !std::mem::take(&mut gate.next) {
            return self.list(node).await;
        }
        let (children, watch) = self.list_watched(node).await?;
        gate.watch = Some(watch);
        Ok(children)
    }

    /// Lists the queue and sets a child watch on the lock path in the same request: the gate
    /// of a semaphore's head of the waiters (see "The semaphore's gate").
    pub(super) async fn list_watched(&self, node: &Queued) -> Result<(Vec<String>, NodeWatch)> {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.list_and_watch_children(path)).await? {
            Ok((children, watcher)) => Ok((children, Box::pin(watch_changed(watcher)))),
            Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("list", path, self.session, err)),
        }
    }

    /// Removes our node when the wait runs out, dropping first our warm-up (if any) so that
    /// the watchdog's probes no longer check the node.
    pub(super) async fn withdraw(&mut self) -> Result<()> {
        *self.warming.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        self.pending.remove().await
    }

    /// Waits for our node, a watched node (taken out of `watching`), the time to watch our
    /// own node or our herald, or the deadline.
    pub(super) async fn next_change(
        &self,
        watching: &mut Vec<Watching>,
        own_watch: &mut Option<NodeWatch>,
        own_due: Instant,
        herald_due: Option<Instant>,
    ) -> Woke {
        let unarmed = own_watch.is_none() && self.watches_own();
        let own_changed = async {
            match own_watch.as_mut() {
                Some(watch) => watch.await,
                None => std::future::pending().await,
            }
        };
        let fired = tokio::select! {
            biased;
            event = own_changed => Err(Woke::Own(event)),
            (event, i, _) = futures_util::future::select_all(watching.iter_mut().map(|w| &mut w.watch)) => Ok((event, i)),
            _ = tokio::time::sleep_until(own_due), if unarmed => Err(Woke::OwnDue),
            _ = sleep_until_opt(herald_due) => Err(Woke::HeraldDue),
            _ = sleep_until_opt(self.deadline()) => Err(Woke::Timeout),
        };
        match fired {
            Ok((event, i)) => {
                let Watching { target, sense, .. } = watching.swap_remove(i);
                Woke::Blocker {
                    event,
                    target,
                    sense,
                }
            }
            Err(woke) => {
                if let Woke::Own(_) = woke {
                    *own_watch = None;
                }
                woke
            }
        }
    }

    /// The error for our queue node gone while waiting: the session's own error if the
    /// deletion was its expiry, [`Error::NodeDeletedWhileWaiting`] if someone deleted it.
    ///
    /// A session closed from outside deletes its ephemeral nodes, and fires their watches,
    /// before its connection is closed, so a node's deletion can be the first sign of an
    /// expiry. One `sync` tells the two apart.
    pub(super) async fn node_deleted(&self, node: &Queued) -> Error {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.sync(path)).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => Error::NodeDeletedWhileWaiting {
                node: node.path.clone(),
            },
            Ok(Err(err)) => Error::from_request("sync", path, client.session_id(), err),
            Err(err) => err,
        }
    }
}

/// A wait in progress: what it carries from one listing to the next.
struct Waiting {
    /// We list again because a node we watched vanished without a release: if nothing blocks
    /// us then, that node may have been a failed holder (lock-delay).
    after_vanish: bool,
    /// A semaphore head's gate: the watch the last listing set, and whether the next sets one.
    gate: Gate,
    /// When we watch our own node, if the wait lasts.
    own_due: Instant,
}

pub(super) enum Woke {
    Own(zk::WatchedEvent),
    /// Time to watch our own node: the wait lasts.
    OwnDue,
    /// Time to watch our herald: our lease lapses while we wait.
    HeraldDue,
    /// The event of a watch on a node ahead (taken out of the watches still set).
    Blocker {
        event: zk::WatchedEvent,
        target: usize,
        sense: Sense,
    },
    Timeout,
}

/// How long a waiter waits before it watches its own node. A handoff sooner than this costs
/// no request and no notification for it (the commonest wait, behind one holder with a short
/// critical section); the holder's watchdog then arms the watch (see
/// `crate::watchdog::nodes::NODE_WATCH_DELAY`). A deletion of our node by someone else in
/// this window is caught when either watch is armed, its read finding the node gone: a loss
/// within this delay plus one round trip, as for a holder that never waited. Session expiry
/// needs no watch: the lease covers it, and a session's events stop with it.
pub(super) const OWN_WATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(10);
