//! The queue protocol every lock kind shares: take our turn in the in-process queue, create
//! our node (the listing pipelined behind it), wait on the nodes the kind's predicate names,
//! give a failed holder's stalled work its lock-delay, and hand back a [`Grant`]: the node,
//! its token, and what its release must do. The front types build their guards from it.
//!
//! [`kind`] holds the predicates, [`names`] the node names and their order, [`cleanup`] what
//! removes our node on every way out (the pending node, then the grant's release),
//! [`in_process`] the queue inside a process.
//!
//! # The handoff
//!
//! A watch says that a node changed, not why. A waiter whose last listing showed only its
//! predecessor ahead may proceed when that node goes (nothing new sorts before it). One that
//! queued behind more nodes would have to list the queue again, a read on the critical path of
//! every handoff, unless the event itself says that the predecessor held the lock. So:
//!
//! - **A waiter learns of a node's deletion from a child watch** on it. An ephemeral node has
//!   no children, so the watch fires only when the node is deleted, never when someone writes
//!   its data: a revocation request (zkfence's or Apache Curator's `Revoker`, which writes
//!   `__REVOKE__` into the holder's node) wakes nobody waiting behind the holder. An exists
//!   watch would fire on that write, and a waiter that took it for a release would walk in
//!   beside the holder (the `DataChangeAdmits` mutant).
//! - **A holder marks its release** when a successor is likely to need it: it deletes its node
//!   in a `multi` that first sets the node's data (`cleanup::RELEASED`). Only holders of
//!   the kinds that hold alone mark (mutex, writer; `Kind::marks_release`), and only if they
//!   waited in a crowded queue: their listing showed two other nodes or more, or the wait
//!   lasted long enough (`OWN_WATCH_DELAY`) for others to queue behind them. Two contenders
//!   passing the lock back and forth (an active and a standby) each queue behind the holder
//!   alone, proceed on its deletion, and a plain delete serves them at less cost. A successor
//!   that did queue behind more than one node and finds the deletion unmarked lists again, a
//!   round trip later, never sooner: marking only saves requests, and omitting it is always
//!   safe. With lock-delay on, every release is marked (it says "released, not failed").
//! - **A waiter that gives up never marks** its deletion as a lock node of a kind that holds
//!   alone. So a data change on a `lock-` or `__WRIT__` node followed by its deletion in the
//!   same transaction proves that its holder released it, and a holder took the lock only
//!   once everything sorted before it was gone.
//! - **A successor that queued behind more than one node** also sets a data watch on the node
//!   it watches (`handoff::Ahead::senses`). The release's transaction fires the data watch
//!   (the data change) and then the child watch (the deletion); on seeing both, the successor
//!   proceeds with no request when the node held alone (`Kind::admitted_by_release`): a mutex
//!   or writer watched its immediate predecessor, a reader the nearest exclusive node with
//!   only readers between. Nothing new can sort before us, and every node before ours was in
//!   our listing (it was sent after our create). A data change alone (a revocation request)
//!   makes it wait on; a deletion alone, or a reader's or a semaphore lease's release, sends it
//!   to list again. ZooKeeper 3.9+ gives both events the transaction's zxid, and they must
//!   match; before 3.9 a write of someone else's into a *waiting* node, followed by that
//!   waiter's failure, would pass for a release here (zkfence's own revocation requests go
//!   only to holders; Curator's `Revoker` aimed at waiters is the case to avoid).
//! - **A waiter proves its session before its turn.** A grant needs a lease that holds, and a
//!   waiting session writes nothing, so after a wait longer than its lease a grant would
//!   commit a proof between the release and the acquire's return: a second commit on the
//!   handoff's path. So a mutex or writer waiter that queued behind two nodes or more, and
//!   whose lease lapses while it still waits, sets one more child watch: on its *herald*
//!   ([`Kind::herald`]), the node four places ahead of its own, or the farthest of fewer. When
//!   the herald goes, the waiter's turn is a few handoffs away, and it asks the watchdog for a
//!   proof at once, as a grant would; by its own turn the lease holds, or the proof is on its
//!   way and the grant waits for it rather than send another. The herald decides nothing: its
//!   deletion only moves a proof earlier (a herald that withdrew, or critical sections that
//!   outlast the lease, cost one proof more). A wait that ends while the create's commit
//!   still keeps the lease costs nothing more. Draining a long queue, each handoff
//!   then commits the release and one proof, as before, but only the release is on its path;
//!   each node is watched by its successor and by the waiter whose herald it is, so a deletion
//!   notifies two sessions, not one. `zkfence_grant_proofs_total` counts grants by how their
//!   lease was proved.
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
//! # What the queue model checks
//!
//! The queue model (`model/src/queue/`, in the `zkfence-model` package) checks this argument
//! exhaustively for three contenders (a mutex's, or mixes of readers and writers, with
//! lock-delay on and off) on a linearizable server: creates in any order, each listing, the
//! watches the waiter asks for, events in the transactions' order, marked and plain
//! releases, waiters that give up, sessions that expire, revocation requests written into any
//! node, and waits that outlast the lease; and, with two of the contenders on one session,
//! both their nodes deleted in one transaction they are not told of. Every decision is this
//! module's: the kinds' `position`, the handoff's `Ahead`, `release_marked`,
//! `withdrawal_marked`, `rereads_after_delay` and the grant rule
//! (`LeaseCell::grants_at_once`). In every state no two holders exclude each other, a
//! holder's live predecessors that block its kind are all gone, a grant holds on a lease that
//! holds, a grant after a lock-delay never rests on a reply sent after its node went, and
//! tokens increase; and every schedule ends with every contender served. It assumes
//! of ZooKeeper what the argument above does: sequential nodes, an atomic `multi`, one-shot
//! watches that fire in the transactions' order, in order with replies, and a zxid shared by
//! a transaction's events. It leaves out connection loss (a lost reply, a watch set twice),
//! semaphores and elections (their own tests), the waiter's watch on its own node (a grant
//! that rests on no read made after its node went is that watch's and the watchdog's to
//! cancel), and time beyond whether a wait outlasted the lease (the lease model's).

pub(crate) mod cleanup;
mod handoff;
pub(crate) mod in_process;
pub(crate) mod kind;
#[cfg(feature = "model")]
pub mod model;
pub(crate) mod names;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::metrics::{lock_label, GRANT_PROOFS_TOTAL, LOCK_DELAYS_TOTAL, PARKED_WATCHES};
use crate::options::{LockOptions, ParentMode};
use crate::queue::in_process::InProcessQueue;
use crate::token::FencingToken;
use crate::wait::{sleep_until_opt, Wait};
use crate::watchdog::clock;
use crate::watchdog::lease::LeaseCell;
use crate::watchdog::{self, Creating, Event, Interest};
use crate::zk::nodes::{child_path, create_parents, delete_node, find_own_node};
use crate::zk::retry::{answered_by_server, await_reconnect, is_connection_error, retrying};
use crate::zk::watch::{watch_changed, NodeWatch};
use crate::zk::{chroot_prefix, server_path};

use self::cleanup::PendingNode;
pub(crate) use self::cleanup::Release;
use self::handoff::{
    announced_before_watch, release_marked, withdrawal_marked, Ahead, Sense, Verdict,
};
use self::in_process::InProcessTurn;
use self::kind::{Kind, Position};

/// One contender's queue: what the clones of a lock share.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) client: zk::Client,
    pub(crate) path: Arc<str>,
    pub(crate) options: LockOptions,
    /// The `lock` label of its metrics.
    pub(crate) label: Arc<str>,
    pub(crate) kind: Kind,
    /// The kind's admission check, if it has one (the semaphore's).
    admission: Option<Box<dyn Admission>>,
    /// The in-process queue of the kinds that exclude: its head is this process's one
    /// contender in ZooKeeper.
    pub(crate) in_process: Option<InProcessQueue>,
}

/// A kind's check on the lock node's own data, which the create's round trip reads (pipelined
/// behind the create) when the kind has one: the semaphore's agreement on its permit count.
/// An error withdraws our node.
pub(crate) trait Admission: Send + Sync + std::fmt::Debug {
    /// Admits our node, or says why not; `read` is the lock node's data and stat, if the
    /// pipelined read arrived (the check reads it again if not).
    fn admit<'a>(
        &'a self,
        client: &'a zk::Client,
        path: &'a str,
        read: Option<(Vec<u8>, zk::Stat)>,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

impl Queue {
    /// A queue of `kind` on `path`, checked: the path, the ACLs, the session (read-only ones
    /// cannot create), our create's size, and the lease against the session timeout.
    pub(crate) fn new(
        client: zk::Client,
        path: String,
        options: LockOptions,
        kind: Kind,
        admission: Option<Box<dyn Admission>>,
    ) -> Result<Queue> {
        names::validate_lock_path(&path)?;
        if options.acls.is_empty() {
            return Err(Error::InvalidOptions("the ACL list is empty; use zookeeper_client::Acls::anyone_all() or name at least one"));
        }
        if client.session().is_readonly() {
            return Err(Error::ReadOnlySession);
        }
        let bytes = create_request_bytes(client.path(), &path, &options);
        if bytes > MAX_REQUEST_BYTES {
            return Err(Error::RequestTooLarge {
                bytes,
                limit: MAX_REQUEST_BYTES,
            });
        }
        let t = client.session_timeout();
        if let Err(why) = options.lease.check_feasible(t) {
            return Err(Error::LeaseTooShort {
                session_timeout: t,
                tick: why.tick,
                needed: why.needed(&options.lease),
            });
        }
        Ok(Queue {
            label: lock_label(&options.metrics_label),
            in_process: kind
                .queues_in_process()
                .then(|| Arc::new(tokio::sync::Mutex::new(()))),
            client,
            path: path.into(),
            options,
            kind,
            admission,
        })
    }
}

/// What a successful acquire hands back: the front type builds its guard from it.
pub(crate) struct Grant {
    pub(crate) token: FencingToken,
    /// The session's watchdog, kept running for the holder.
    pub(crate) interest: Interest,
    /// The watch on our node set while we waited, if any: the watchdog takes it over.
    pub(crate) node_watch: Option<NodeWatch>,
    /// How long a prefix the client's chroot puts before its paths on the server: the
    /// release's node is such a path, and the holder's node path is what follows.
    pub(crate) chroot_len: usize,
    /// What the release must do; its node (its path on the server) is the holder's.
    pub(crate) release: Release,
    /// A read lock taken under a write lock (a downgrade): writers queued between the two
    /// nodes, so the write lock must be kept until the read lock ends.
    pub(crate) behind_writers: bool,
}

/// One acquire's particulars.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub(crate) wait: Wait,
    /// The full path of the write lock's node that this process holds and takes this read lock
    /// under (a downgrade): admitted at once, since nothing but that write lock can block it
    /// for good.
    pub(crate) under: Option<&'a str>,
    /// The node's data, when not the options' (an election candidate's).
    pub(crate) data: Option<&'a [u8]>,
}

/// The protocol, as its steps: our turn in the process, our node in the queue, our turn in
/// the queue, the lock-delay, the grant. `Ok(None)` when the wait ran out.
pub(crate) async fn acquire(queue: &Queue, request: Request<'_>) -> Result<Option<Grant>> {
    let Request { wait, under, data } = request;
    let client = &queue.client;
    if let Some(err) = Error::from_session_state(client.state(), client.session_id()) {
        return Err(err);
    }
    let Ok(turn) = in_process::take_turn(queue.in_process.as_ref(), &queue.label, wait).await
    else {
        return Ok(None);
    };
    let mut interest = watchdog::watch_session(client, &queue.options.lease, &queue.path);
    // An acquire that cannot wait (`try_acquire`, a downgrade's read lock) sets no watch.
    let waits = !matches!(wait, Wait::Never) && under.is_none();
    reserve_node(queue, &mut interest, waits)?;
    let data = data.unwrap_or(&queue.options.data);
    let mut attempt = Attempt::new(queue, wait, data, interest);
    let Some(created) = attempt.create().await? else {
        return Ok(None);
    };
    let node = attempt.verify(created).await?;
    let waited = match under {
        Some(write) => attempt.beside(&node, write).await?,
        None => attempt.wait_turn(&node).await?,
    };
    let Some(mut waited) = waited else {
        return Ok(None);
    };
    if !attempt.delay(waited.vanished).await? {
        return Ok(None);
    }
    if handoff::rereads_after_delay(waited.vanished, queue.options.flaw) {
        attempt.reread(&node).await?;
    }
    if !attempt.prove(&node).await? {
        return Ok(None);
    }
    // A session that ended while we waited (or during the lock-delay), or a node of ours whose
    // deletion came in behind the event we proceeded on, grants nothing.
    attempt.still_queued(&node, &mut waited.own_watch).await?;
    Ok(Some(attempt.into_grant(node, waited, turn)))
}

/// The longest name a lock node of ours gets: `_c_`, a UUID, `-`, the longest marker
/// (`__READ__`, `__WRIT__`) and ten digits.
const NODE_NAME_BYTES: u64 = 3 + 36 + 1 + 8 + 10;

/// Reserves what our node will add to the session's close-session transaction (4 bytes of
/// length and the node's full path on the server: the chroot, the lock path, `/`, its name),
/// and, for an acquire that `waits`, the paths its watches may take until its grant (see
/// [`waiting_watch_paths`]), each about as long as our node's path.
fn reserve_node(queue: &Queue, interest: &mut Interest, waits: bool) -> Result<()> {
    let client = &queue.client;
    let chroot = chroot_prefix(client.path()).len() as u64;
    let path = chroot + queue.path.len() as u64 + 1 + NODE_NAME_BYTES;
    let limit = queue.options.session_node_bytes as u64;
    let session = client.session_id();
    interest
        .reserve_node(4 + path, limit)
        .map_err(|(nodes, bytes)| Error::SessionNodeBudget {
            session,
            nodes,
            bytes,
            limit,
        })?;
    if !waits {
        return Ok(());
    }
    let limit = crate::WAITING_WATCH_BYTES as u64;
    let paths = waiting_watch_paths(queue.kind, queue.options.lock_delay.is_some());
    interest
        .reserve_waiting(paths * path, limit)
        .map_err(|(waiting, bytes)| Error::SessionWatchBudget {
            session,
            waiting,
            bytes,
            limit,
        })
}

/// How many paths a waiting acquire of `kind` may have watched at once, as the client sets
/// them again after a disconnect (a path watched for its data and its children counts twice):
/// its predecessor's two, its own node's and its herald's; a semaphore's waiter with lock-delay
/// watches its `n` nearest nodes both ways, and its herald.
fn waiting_watch_paths(kind: Kind, lock_delay: bool) -> u64 {
    match kind {
        Kind::Semaphore(n) if lock_delay => 2 * u64::from(n) + 2,
        _ => 4,
    }
}

/// One acquire in progress: what its steps share.
struct Attempt<'a> {
    queue: &'a Queue,
    /// Our node's data.
    data: &'a [u8],
    client: &'a zk::Client,
    path: &'a str,
    session: zk::SessionId,
    wait: Wait,
    /// The session's watchdog, running while we acquire (and then for the holder).
    interest: Interest,
    /// Our node until it is granted: removed on every other way out.
    pending: PendingNode,
    /// While we create and until we wait: the session's watchdog probes meanwhile (a slow
    /// commit must not let the first lease lapse), not while we wait (only holds probe; a grant
    /// that the wait left without a lease is proved first, see [`Attempt::prove`]).
    creating: Option<Creating>,
    /// A proof of our session sent while we still wait, once our herald went (see
    /// [`Kind::herald`]): the watchdog says here when the lease holds, so that the grant
    /// need not prove it on the handoff's path. A mutex, since the waits borrow `self`.
    warming: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

/// What the create's round trip brought back.
struct Created {
    name: String,
    stat: zk::Stat,
    /// The listing sent right behind the create, when it arrived.
    listing: Option<Vec<String>>,
    /// The lock node's own data, for kinds that read it in that round trip.
    lock_data: Option<(Vec<u8>, zk::Stat)>,
}

/// Our node in the queue.
struct Queued {
    name: String,
    path: String,
    sequence: i32,
    token: FencingToken,
    listing: Option<Vec<String>>,
}

/// How the wait for our turn ended, when it did not run out.
#[derive(Default)]
struct Waited {
    /// A node we waited on vanished without a release (lock-delay applies).
    vanished: bool,
    /// Taken under a write lock with writers queued between (see [`Grant::behind_writers`]).
    behind_writers: bool,
    /// We waited in a queue of three nodes or more: a successor has likely queued behind more
    /// than us, so our release is marked (see "The handoff").
    crowded: bool,
    /// The watch on our own node, if one was set while waiting; the watchdog takes it over.
    own_watch: Option<NodeWatch>,
    /// Our herald in the last listing ([`Kind::herald`]), watched once our lease lapses.
    herald: Option<String>,
    /// A semaphore follower's predecessor and the data version it listed again for (see
    /// `handoff::announced_before_watch`).
    acted: Option<(String, i32)>,
}

impl<'a> Attempt<'a> {
    fn new(queue: &'a Queue, wait: Wait, data: &'a [u8], interest: Interest) -> Attempt<'a> {
        let client = &queue.client;
        let creating = Some(interest.watch().start_creating());
        let root = interest.watch().root_handle(client);
        Attempt {
            creating,
            warming: std::sync::Mutex::new(None),
            queue,
            data,
            client,
            path: &queue.path,
            session: client.session_id(),
            wait,
            interest,
            pending: PendingNode::new(
                root,
                server_path(client, &queue.path),
                names::protected_prefix(&names::fresh_id(), queue.kind.marker()),
                withdrawal_marked(
                    queue.kind,
                    queue.options.lock_delay.is_some(),
                    queue.options.flaw,
                ),
            ),
        }
    }

    fn lease(&self) -> &LeaseCell {
        self.interest.watch().lease()
    }

    fn deadline(&self) -> Option<Instant> {
        self.wait.deadline()
    }

    /// Creates our node, with the listing (and the kind's own read) riding right behind it on
    /// the session: one round trip plus one commit. Creates missing parents; after a lost
    /// reply, finds our node by its UUID and our session. `Ok(None)`: the deadline passed.
    async fn create(&mut self) -> Result<Option<Created>> {
        let (client, path, options) = (self.client, self.path, &self.queue.options);
        let create_path = child_path(path, self.pending.prefix());
        let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&options.acls));
        let (mut attempt, mut parent_attempts) = (0, 0);
        loop {
            if self.deadline().is_some_and(|d| Instant::now() >= d) {
                return Ok(None); // `pending` cleans up whatever may have been created
            }
            self.pending.sending_create();
            let sent = clock::now();
            let create = client.create(&create_path, self.data, &mode);
            let list = client.list_children(path);
            let read = self
                .queue
                .admission
                .is_some()
                .then(|| client.get_data(path));
            let created = create.await;
            self.record(sent, &created);
            let listing = list.await.ok();
            let lock_data = match read {
                Some(read) => read.await.ok(),
                None => None,
            };
            let err = match created {
                Ok((stat, sequence)) => {
                    let name = format!("{}{sequence}", self.pending.prefix());
                    return Ok(Some(Created {
                        name,
                        stat,
                        listing,
                        lock_data,
                    }));
                }
                Err(err) => err,
            };
            match err {
                zk::Error::NoNode if options.create_parents && parent_attempts < 8 => {
                    parent_attempts += 1;
                    self.pending.refused();
                    self.create_parents().await?;
                }
                zk::Error::NoNode => {
                    self.pending.refused();
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    });
                }
                err if is_connection_error(&err) => {
                    // Its own loop rather than `retrying`: after a lost reply our node may
                    // exist, and is found rather than created twice.
                    await_reconnect(client, &mut attempt).await?;
                    let prefix = self.pending.prefix();
                    if let Some((name, stat)) = find_own_node(client, path, prefix).await? {
                        return Ok(Some(Created {
                            name,
                            stat,
                            listing: None,
                            lock_data: None,
                        }));
                    }
                }
                err => {
                    self.pending.refused();
                    return Err(Error::from_request("create", path, self.session, err));
                }
            }
        }
    }

    /// What the create's reply proves for the lease: a commit, or a refusal (a reply).
    fn record<T>(&self, sent: Instant, created: &std::result::Result<T, zk::Error>) {
        match created {
            // A committed write: a proof for the lease (see `crate::watchdog::lease`).
            Ok(_) => self.lease().committed(sent, clock::now()),
            // Refused by a server, which so saw the session: a reply for the lease.
            Err(err) if answered_by_server(err) => self.lease().replied(sent, clock::now()),
            Err(_) => {}
        }
    }

    /// Creates the lock path's missing parents (nothing of ours exists meanwhile).
    async fn create_parents(&self) -> Result<()> {
        let options = &self.queue.options;
        let mode = match options.parent_mode {
            ParentMode::Container => zk::CreateMode::Container,
            ParentMode::Persistent => zk::CreateMode::Persistent,
        };
        create_parents(self.client, self.path, mode, &options.acls).await
    }

    /// Our node's sequence and token, checked; then the kind's admission (a semaphore's
    /// agreement on its count, from the data read in the create's round trip).
    async fn verify(&mut self, created: Created) -> Result<Queued> {
        let Created {
            name,
            stat,
            listing,
            lock_data,
        } = created;
        let path = child_path(self.path, &name);
        self.pending.created(&name);
        let unexpected = |message: String| Error::ZooKeeper {
            op: "create",
            path: path.clone(),
            source: zk::Error::UnexpectedError(message),
        };
        let Some(sequence) = names::parse_sequence(&name) else {
            return Err(unexpected(format!(
                "the server named our node {name:?}, without a 32-bit sequence"
            )));
        };
        if stat.czxid <= 0 {
            self.pending.remove().await?;
            return Err(unexpected("the server returned no Stat for our node (ZooKeeper before 3.5?); zkfence needs it for the fencing token".into()));
        }
        tracing::Span::current().record("node", path.as_str());
        if let Some(admission) = &self.queue.admission {
            if let Err(err) = admission.admit(self.client, self.path, lock_data).await {
                self.pending.remove().await?;
                return Err(err);
            }
        }
        let token = FencingToken::of_node(sequence, stat.czxid);
        Ok(Queued {
            name,
            path,
            sequence,
            token,
            listing,
        })
    }

    /// Waits until the kind's predicate lets us proceed (see [`Self::wait_in_queue`]). A wait
    /// that lasted [`OWN_WATCH_DELAY`] counts as crowded: others may have queued behind us
    /// meanwhile, so our release is marked for them.
    async fn wait_turn(&mut self, node: &Queued) -> Result<Option<Waited>> {
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
    async fn wait_in_queue(&mut self, node: &Queued, own_due: Instant) -> Result<Option<Waited>> {
        let mut listing = node.listing.clone();
        let mut waited = Waited::default();
        // Whether we list again because a node we watched vanished without a release: if
        // nothing blocks us then, that node may have been a failed holder (lock-delay).
        let mut after_vanish = false;
        let mut gate = Gate::default();
        loop {
            let children = self.listing(node, &mut listing, &mut gate).await?;
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
                waited.vanished = after_vanish && self.lock_delay_on();
                return Ok(Some(waited));
            }
            waited.crowded |= position.crowded();
            self.creating = None; // we wait: no probes until granted
            if let Wait::Never = self.wait {
                self.pending.remove().await?;
                return Ok(None);
            }
            let flaw = self.queue.options.flaw;
            let mut ahead = Ahead::new(self.queue.kind, &position, self.lock_delay_on(), flaw);
            let armed = if self.gated(&position) {
                gate.armed()
            } else {
                let own_now = Instant::now() >= own_due;
                (self.arm(&position, &ahead, &children, node, &mut waited, own_now)).await?
            };
            let watching = match armed {
                Armed::Watching(watching) => watching,
                Armed::Gone if matches!(ahead.on_gone(), Verdict::Proceed { .. }) => {
                    self.announce_admission(node, None);
                    return Ok(Some(waited));
                }
                Armed::Gone | Armed::Retry => {
                    after_vanish = false;
                    continue;
                }
                Armed::Ungated => {
                    gate.next = true; // list again, setting the gate's watch
                    continue;
                }
            };
            match self
                .watch_ahead(watching, &mut ahead, node, &mut waited, own_due)
                .await?
            {
                Some(Verdict::Proceed { vanished }) => {
                    self.still_queued(node, &mut waited.own_watch).await?;
                    self.announce_admission(node, None);
                    waited.vanished = vanished;
                    return Ok(Some(waited));
                }
                Some(Verdict::Relist {
                    after_vanish: vanish,
                }) => {
                    after_vanish = vanish;
                    gate.next = self.heads_next(&ahead, &position, vanish);
                }
                Some(Verdict::Wait) | None => {
                    // The wait ran out.
                    self.withdraw().await?;
                    return Ok(None);
                }
            }
        }
    }

    /// Whether this acquire's waiters wait at a gate when they head the waiters: a semaphore's,
    /// with no lock-delay (which needs to see each holder's release marker, so its head
    /// watches its `n` nearest instead). See "The semaphore's gate".
    fn gates(&self) -> bool {
        matches!(self.queue.kind, Kind::Semaphore(_)) && !self.lock_delay_on()
    }

    /// Whether a semaphore follower at `position` that lists again (after a deletion if
    /// `vanish`) most likely heads the waiters now, so that its listing sets the gate: its
    /// predecessor announced its admission (a data change, not a deletion), or it was right
    /// behind the head.
    fn heads_next(&self, ahead: &Ahead, position: &Position, vanish: bool) -> bool {
        // A follower is a gated waiter already (a semaphore's, with no lock-delay).
        ahead.follows() && (!vanish || position.blocking == 2)
    }

    /// Whether we wait at the gate at `position`: we head a semaphore's waiters.
    fn gated(&self, position: &Position) -> bool {
        self.gates() && position.blocking == 1
    }

    /// Whether we watch our own node while we wait: not as a semaphore's waiter, whose own
    /// announcement of its admission would fire that watch (the gate's listing, or the next
    /// one, finds our node gone instead).
    fn watches_own(&self) -> bool {
        !matches!(self.queue.kind, Kind::Semaphore(_))
    }

    /// A semaphore waiter admitted by a listing that showed `behind` nodes after ours (`None`:
    /// on an event, with no listing) writes its node's data again, unchanged, so that the
    /// follower watching it learns that it may now head the waiters (see "The semaphore's
    /// gate"). Sent now, before the hold's own watch on the node, so that it cannot fire
    /// that watch; its reply is awaited aside, and the grant does not wait for it.
    fn announce_admission(&self, node: &Queued, behind: Option<usize>) {
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
    async fn watch_ahead(
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
            self.session_over(&event)?;
            match target {
                // The queue changed: a holder left, or a node came or went.
                GATE => {
                    return Ok(Some(Verdict::Relist {
                        after_vanish: false,
                    }))
                }
                // A hint, never a decision: prove our session now, off the path of the
                // handoffs to come.
                HERALD => {
                    if event.event_type == zk::EventType::NodeDeleted {
                        self.warm_up(node);
                    }
                    continue;
                }
                _ => {}
            }
            if sense == Sense::Deletion {
                // The release marker's event came first (zookeeper-client hands events over
                // in order), but both were ready when we polled: take it first.
                for marker in take_ready(&mut watching, target, Sense::Data) {
                    ahead.on_event(target, Sense::Data, &marker);
                }
            }
            match ahead.on_event(target, sense, &event) {
                Verdict::Wait => {}
                decided => {
                    park(watching);
                    return Ok(Some(decided));
                }
            }
        }
    }

    /// Asks the session's watchdog to prove the session now, checking our node, unless a proof
    /// asked for earlier is still on its way: our herald went (see [`Kind::herald`]), so our
    /// grant is a few handoffs away, and a lease that holds by then lets it return without a
    /// commit of its own (see [`Self::prove`]).
    fn warm_up(&self, node: &Queued) {
        use oneshot::error::TryRecvError;
        let mut warming = self.warming.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(proved) = warming.as_mut() {
            if matches!(proved.try_recv(), Err(TryRecvError::Empty)) {
                return;
            }
        }
        tracing::debug!(node = %node.path, "our herald went: proving the session before our turn");
        *warming = Some(self.ask_for_proof(node, self.budget()));
    }

    /// Asks the session's watchdog to prove the session, checking our node: the receiver is
    /// told once the lease vouches for a hold of `budget` (dropped: the node is gone, or the
    /// session over).
    fn ask_for_proof(&self, node: &Queued, budget: std::time::Duration) -> oneshot::Receiver<()> {
        let (done, proved) = oneshot::channel();
        // The watchdog reads paths on the server: the chroot included.
        self.interest.watch().send(Event::Prove {
            node: server_path(self.client, &node.path).into(),
            budget,
            done,
        });
        proved
    }

    /// Sets the watch on our own node, late in a wait that lasts. `Some(Relist)` when the
    /// connection broke meanwhile (the queue is listed again).
    async fn watch_own(
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
    async fn still_queued(&self, node: &Queued, own_watch: &mut Option<NodeWatch>) -> Result<()> {
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
    fn session_over(&self, event: &zk::WatchedEvent) -> Result<()> {
        match Error::from_session_state(event.session_state, self.session) {
            Some(err) if event.event_type == zk::EventType::Session => Err(err),
            _ => Ok(()),
        }
    }

    /// A read lock taken under our own write lock at `write` (a downgrade): admitted at once,
    /// with whether exclusive nodes queued between the two (then the write lock must be kept
    /// until the read lock ends: released now, it would let them in beside our reader). Waits
    /// as any reader if the write lock's node is gone.
    async fn beside(&mut self, node: &Queued, write: &str) -> Result<Option<Waited>> {
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

    /// Whether lock-delay is on for this acquire.
    fn lock_delay_on(&self) -> bool {
        self.queue.options.lock_delay.is_some()
    }

    /// Lists the queue. A listing is a read, which a follower cut off from the leader still
    /// answers: it proves nothing for the lease (committed writes do).
    async fn list(&self, node: &Queued) -> Result<Vec<String>> {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.list_children(path)).await? {
            Ok(children) => Ok(children),
            Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("list", path, self.session, err)),
        }
    }

    /// The listing to judge our position by: the one we have (the create's), or a new one,
    /// which sets the gate's watch when `gate` asks for it.
    async fn listing(
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
    async fn list_watched(&self, node: &Queued) -> Result<(Vec<String>, NodeWatch)> {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.list_and_watch_children(path)).await? {
            Ok((children, watcher)) => Ok((children, Box::pin(watch_changed(watcher)))),
            Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("list", path, self.session, err)),
        }
    }

    /// A create retried after a lost reply may have landed twice: any other node with our
    /// UUID is ours, and must not sort before us as if it were someone else's. Deletes them;
    /// `true` if there were any.
    async fn remove_duplicates(&self, children: &[String], node: &Queued) -> Result<bool> {
        let prefix = self.pending.prefix();
        let duplicates: Vec<&String> = children
            .iter()
            .filter(|c| c.starts_with(prefix) && **c != node.name)
            .collect();
        for duplicate in &duplicates {
            let path = child_path(self.path, duplicate);
            // A waiter's node: never marked as a release (see "The handoff").
            delete_node(self.client, &path, None).await?;
        }
        Ok(!duplicates.is_empty())
    }

    /// Sets the watches [`Ahead`] asks for on the nodes the predicate names (a child watch for
    /// each node's deletion, a data watch where the release marker counts), and, when `own`
    /// and not yet set, an exists watch on our own node (kept in `waited`), all back to back:
    /// one round trip. Notes our herald in `children` in `waited` ([`Kind::herald`]; watched
    /// only if our lease lapses while we wait). None needs READ permission on others' nodes.
    /// On a missing node ahead it arms nothing (what it set is parked).
    async fn arm(
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
        let mut sent = Vec::new();
        for (i, target) in targets.iter().enumerate() {
            for &sense in ahead.senses(i) {
                // Each request is sent here, when the client's method is called (not when its
                // reply is awaited below): so the requests go out back to back.
                let watch: Pin<Box<dyn Future<Output = WatchReply> + Send + '_>> = match sense {
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
        waited.herald = self.queue.kind.herald(children, node.sequence);
        if let Some(own) = own {
            match own.await {
                Ok((Some(_), watcher)) => *own_watch = Some(Box::pin(watch_changed(watcher))),
                Ok((None, _)) => return Err(self.node_deleted(node).await),
                Err(err) => return self.watch_failed(&node.path, err).await,
            }
        }
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
    fn late(&self, name: &str, version: i32, waited: &mut Waited) -> bool {
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
    fn watch_herald(&self, herald: Option<&str>, watching: &mut Vec<Watching>) -> bool {
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

    /// Removes our node when the wait runs out, dropping first our warm-up (if any) so that
    /// the watchdog's probes no longer check the node.
    async fn withdraw(&mut self) -> Result<()> {
        *self.warming.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        self.pending.remove().await
    }

    /// When the lease stops vouching for a grant (see `LeaseCell::vouches_for`).
    fn lapse(&self) -> Instant {
        let budget = self.budget();
        let deadline = self.lease().deadline(budget);
        deadline.checked_sub(budget / 16).unwrap_or(deadline)
    }

    /// The lease budget of this acquire's hold.
    fn budget(&self) -> std::time::Duration {
        let watch = self.interest.watch();
        self.queue.options.lease.budget(watch.session_timeout())
    }

    /// A watch that could not be set: after a reconnect the queue is listed again (its
    /// outcome is unknown: a repeat would set it twice); anything else is an error.
    async fn watch_failed(&self, target: &str, err: zk::Error) -> Result<Armed> {
        if is_connection_error(&err) {
            await_reconnect(self.client, &mut 0).await?;
            return Ok(Armed::Retry);
        }
        Err(Error::from_request("watch", target, self.session, err))
    }

    /// Waits for our node, a watched node (taken out of `watching`), the time to watch our
    /// own node or our herald, or the deadline.
    async fn next_change(
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
    async fn node_deleted(&self, node: &Queued) -> Error {
        let (client, path) = (self.client, self.path);
        match retrying(client, || client.sync(path)).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => Error::NodeDeletedWhileWaiting {
                node: node.path.clone(),
            },
            Ok(Err(err)) => Error::from_request("sync", path, client.session_id(), err),
            Err(err) => err,
        }
    }

    /// A holder ahead of us failed rather than released: gives its stalled work the
    /// lock-delay to end before ours starts, within our own deadline. `Ok(false)`: the
    /// deadline came first (our node is removed).
    async fn delay(&mut self, vanished: bool) -> Result<bool> {
        let Some(delay) = self.queue.options.lock_delay.filter(|_| vanished) else {
            return Ok(true);
        };
        let until = Instant::now() + delay;
        // If we give up during the delay, our node goes without the release marker, so our
        // successor inherits the delay instead of walking straight in.
        self.pending.set_mark(false);
        tracing::debug!(
            delay_ms = delay.as_millis() as u64,
            "lock-delay: a node ahead vanished without a release"
        );
        metrics::counter!(LOCK_DELAYS_TOTAL, "lock" => self.queue.label.clone()).increment(1);
        let deadline = self.deadline();
        if deadline.is_some_and(|d| d < until) {
            sleep_until_opt(deadline).await;
            self.withdraw().await?;
            return Ok(false);
        }
        tokio::time::sleep_until(until).await;
        Ok(true)
    }

    /// After a lock-delay: reads our node once more, so that the grant rests on a reply that
    /// came after the vanish. The node that vanished without a release was a session's that
    /// ended, and its deletion may have taken ours in the same transaction: a session closed
    /// from outside deletes all its nodes at once (it may have been ours, holding and
    /// waiting), as does an administrator's `multi`. Its notification may come behind the one
    /// we proceeded on, and a semaphore's waiter watches nothing of its own; a lease proved
    /// before the vanish vouches for the session, not for the node. Our server sent that
    /// notification after applying the transaction, so it answers this read from a state in
    /// which our node is gone (a reconnect reaches only a server at least as far along).
    /// One round trip, on a path that has just slept out the lock-delay.
    async fn reread(&self, node: &Queued) -> Result<()> {
        let (client, path) = (self.client, node.path.as_str());
        match retrying(client, || client.check_stat(path)).await? {
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("exists", path, self.session, err)),
        }
    }

    /// Makes sure the lease can vouch for the hold we were granted: a session that only waited
    /// sent no proof meanwhile (only holds probe), so after a long wait its last proof may be
    /// too old. Then the watchdog probes now, checking our node, and the grant waits for the
    /// commit (one round trip); a grant soon after our create needs none, nor one whose
    /// warm-up ([`Self::warm_up`]) proved the session while it waited, and one whose warm-up
    /// is still on its way waits for that. `Ok(false)`: the deadline passed first (our node is
    /// removed).
    async fn prove(&mut self, node: &Queued) -> Result<bool> {
        use oneshot::error::TryRecvError;
        let budget = self.budget();
        let early = (self.warming.get_mut())
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // What our warm-up came to: proved (its answer is in), still on its way, or nothing.
        let (warmed, pending) = match early {
            Some(mut proved) => match proved.try_recv() {
                Ok(()) => (true, None),
                Err(TryRecvError::Empty) => (false, Some(proved)),
                Err(TryRecvError::Closed) => (false, None),
            },
            None => (false, None),
        };
        if self.lease().grants_at_once(budget, clock::now()) {
            self.count_proof(if warmed { "warmed" } else { "held" });
            return Ok(true);
        }
        // A proof sent while we waited and still on its way is nearer than a new one.
        let (proved, how) = match pending {
            Some(proved) => (proved, "warmed"),
            None => (self.ask_for_proof(node, budget), "at_grant"),
        };
        let deadline = self.deadline();
        tokio::select! {
            proved = proved => match proved {
                Ok(()) => {
                    self.count_proof(how);
                    Ok(true)
                }
                // The watchdog found our node gone (or its session over) before the proof.
                Err(_) => Err(self.node_deleted(node).await),
            },
            _ = sleep_until_opt(deadline) => {
                self.pending.remove().await?;
                Ok(false)
            }
        }
    }

    /// Counts how a grant's lease was proved (see [`GRANT_PROOFS_TOTAL`]).
    fn count_proof(&self, proof: &'static str) {
        metrics::counter!(GRANT_PROOFS_TOTAL, "proof" => proof, "lock" => self.queue.label.clone())
            .increment(1);
    }

    /// Hands our node back as a grant, for the front type to build its guard from.
    fn into_grant(mut self, node: Queued, waited: Waited, turn: Option<InProcessTurn>) -> Grant {
        self.interest.granted();
        let mark = release_marked(self.queue.kind, self.lock_delay_on(), waited.crowded);
        Grant {
            token: node.token,
            interest: self.interest,
            node_watch: waited.own_watch,
            chroot_len: chroot_prefix(self.client.path()).len(),
            release: self.pending.into_release(&node.name, mark, turn),
            behind_writers: waited.behind_writers,
        }
    }
}

/// The `target` of the watch on the herald (see [`Kind::herald`]), which is not one of
/// `Position::watch`: its event only warms the lease.
const HERALD: usize = usize::MAX;

/// The `target` of a semaphore head's child watch on the lock path (see "The semaphore's
/// gate"), which is not one of `Position::watch` either.
const GATE: usize = usize::MAX - 1;

/// A semaphore head's gate (see "The semaphore's gate"): the child watch on the lock path
/// that our last listing set, if it set one, and whether the next listing sets one. A watch
/// still here, not waited on, is parked (see [`park`]) when the next listing comes or the gate
/// is dropped; one waited on goes as the other watches do.
#[derive(Default)]
struct Gate {
    watch: Option<NodeWatch>,
    next: bool,
}

impl Gate {
    /// The watch to wait on at the head of the waiters; [`Armed::Ungated`] if our listing set
    /// none.
    fn armed(&mut self) -> Armed {
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
    fn park(&mut self) {
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
async fn announced(
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
struct Watching {
    target: usize,
    sense: Sense,
    watch: NodeWatch,
}

/// Leaves the watches still set on nodes ahead (a semaphore waiter admitted by one of its `n`,
/// a waiter that lists again) to fire in their own time. Dropped, each would cost a request:
/// `zookeeper-client` removes a dropped watcher's watch from the server (`removeWatches`), which
/// made an admitted semaphore waiter send `n - 1` requests. Left set, each costs at most a
/// notification when its node goes, or nothing if the session ends first; the task ends with
/// the last of them.
fn park(watching: Vec<Watching>) {
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
fn take_ready(watching: &mut Vec<Watching>, target: usize, sense: Sense) -> Vec<zk::WatchedEvent> {
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

/// What arming the watches found.
enum Armed {
    Watching(Vec<Watching>),
    /// A watched node was gone already.
    Gone,
    /// The connection broke, or a semaphore follower's watch came after an announcement it
    /// had not seen: list again.
    Retry,
    /// We head a semaphore's waiters, and the listing set no gate: list again, setting it.
    Ungated,
}

/// The largest create request zkfence sends: ZooKeeper's default `jute.maxbuffer` (1 MiB − 1),
/// less room for what the leader adds when it turns the request into a transaction
/// (`TxnHeader`, the digest) and forwards it to its followers.
pub(crate) const MAX_REQUEST_BYTES: usize = 0xfffff - 1024;

/// The serialized size of our create request: header, path (chroot, lock path, protected
/// name), data, ACLs and flags, as jute writes them (a length before every string).
pub(crate) fn create_request_bytes(chroot: &str, path: &str, options: &LockOptions) -> usize {
    let name = "/_c_00000000-0000-0000-0000-000000000000-__WRIT__0000000000";
    let acls: usize = options
        .acls
        .iter()
        .map(|acl| 4 + 4 + acl.scheme().len() + 4 + acl.id().len())
        .sum();
    4 + 8 + (4 + chroot.len() + path.len() + name.len()) + (4 + options.data.len()) + 4 + acls + 4
}

enum Woke {
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
const OWN_WATCH_DELAY: std::time::Duration = std::time::Duration::from_millis(10);
