//! What the queue's steps share: the queue a lock's clones share, one acquire in progress
//! ([`Attempt`]), what each step hands the next, and what the acquire hands back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::metrics::lock_label;
use crate::options::LockOptions;
use crate::requests::server_path;
use crate::requests::watch::NodeWatch;
use crate::token::FencingToken;
use crate::wait::Wait;
use crate::watchdog::lease::LeaseCell;
use crate::watchdog::{Creating, WatchdogRef};

use super::cleanup::{PendingNode, Release};
use super::handoff::withdrawal_marked;
use super::in_process::InProcessQueue;
use super::kind::Kind;
use super::names;

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
    pub(super) admission: Option<Box<dyn Admission>>,
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
    pub(crate) watchdog_ref: WatchdogRef,
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

/// One acquire in progress: what its steps share.
pub(super) struct Attempt<'a> {
    pub(super) queue: &'a Queue,
    /// Our node's data.
    pub(super) data: &'a [u8],
    pub(super) client: &'a zk::Client,
    pub(super) path: &'a str,
    pub(super) session: zk::SessionId,
    pub(super) wait: Wait,
    /// The session's watchdog, running while we acquire (and then for the holder).
    pub(super) watchdog_ref: WatchdogRef,
    /// Our node until it is granted: removed on every other way out.
    pub(super) pending: PendingNode,
    /// While we create and until we wait: the session's watchdog probes meanwhile (a slow
    /// commit must not let the first lease lapse), not while we wait (only holds probe; a grant
    /// that the wait left without a lease is proved first, see [`Attempt::prove`]).
    pub(super) creating: Option<Creating>,
    /// A proof of our session sent while we still wait, once our herald went (see
    /// [`Kind::herald`]): the watchdog says here when the lease holds, so that the grant
    /// need not prove it on the handoff's path. A mutex, since the waits borrow `self`.
    pub(super) warming: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

/// What the create's round trip brought back.
pub(super) struct Created {
    pub(super) name: String,
    pub(super) stat: zk::Stat,
    /// The listing sent right behind the create, when it arrived.
    pub(super) listing: Option<Vec<String>>,
    /// The lock node's own data, for kinds that read it in that round trip.
    pub(super) lock_data: Option<(Vec<u8>, zk::Stat)>,
}

/// Our node in the queue.
pub(super) struct Queued {
    pub(super) name: String,
    pub(super) path: String,
    pub(super) sequence: i32,
    pub(super) token: FencingToken,
    pub(super) listing: Option<Vec<String>>,
}

/// How the wait for our turn ended, when it did not run out.
#[derive(Default)]
pub(super) struct Waited {
    /// A node we waited on vanished without a release (lock-delay applies).
    pub(super) vanished: bool,
    /// Taken under a write lock with writers queued between (see [`Grant::behind_writers`]).
    pub(super) behind_writers: bool,
    /// We waited in a queue of three nodes or more: a successor has likely queued behind more
    /// than us, so our release is marked (see "The handoff").
    pub(super) crowded: bool,
    /// The watch on our own node, if one was set while waiting; the watchdog takes it over.
    pub(super) own_watch: Option<NodeWatch>,
    /// Our herald in the last listing ([`Kind::herald`]), watched once our lease lapses.
    pub(super) herald: Option<String>,
    /// A semaphore follower's predecessor and the data version it listed again for (see
    /// `handoff::announced_before_watch`).
    pub(super) acted: Option<(String, i32)>,
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

impl<'a> Attempt<'a> {
    pub(super) fn new(
        queue: &'a Queue,
        wait: Wait,
        data: &'a [u8],
        watchdog_ref: WatchdogRef,
    ) -> Attempt<'a> {
        let client = &queue.client;
        let creating = Some(watchdog_ref.watch().start_creating());
        let root = watchdog_ref.watch().root_handle(client);
        Attempt {
            creating,
            warming: std::sync::Mutex::new(None),
            queue,
            data,
            client,
            path: &queue.path,
            session: client.session_id(),
            wait,
            watchdog_ref,
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

    pub(super) fn lease(&self) -> &LeaseCell {
        self.watchdog_ref.watch().lease()
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.wait.deadline()
    }

    /// Whether lock-delay is on for this acquire.
    pub(super) fn lock_delay_on(&self) -> bool {
        self.queue.options.lock_delay.is_some()
    }

    /// The lease budget of this acquire's hold.
    pub(super) fn budget(&self) -> std::time::Duration {
        let watch = self.watchdog_ref.watch();
        self.queue.options.lease.budget(watch.session_timeout())
    }
}
