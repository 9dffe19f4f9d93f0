//! [`FencedLock`]: the mutex (and each side of a read/write lock, each semaphore lease), its
//! queue's contenders and holders, revocation.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;
use zookeeper_client as zk;

use crate::acquire::{sealed::Sealed, Acquire};
use crate::error::{Error, Result};
use crate::guard::{self, Held, LockGuard, NewHold};
use crate::metrics::{ACQUIRE_DURATION_SECONDS, ACQUISITIONS_TOTAL};
use crate::mode::{Exclusive, Mode};
use crate::options::LockOptions;
use crate::queue::kind::Kind;
use crate::queue::{self, Admission, Grant, Queue};
use crate::reentrancy::{self, Key, Owner, Reentry};
use crate::requests::nodes::{child_path, delete_node, Deleted};
use crate::requests::retry::retrying;
use crate::token::FencingToken;
use crate::wait::Wait;
use crate::watchdog::REVOKE;

/// One node in a lock's queue, as [`FencedLock::contenders`] reports it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// for (i, c) in lock.contenders().await?.iter().enumerate() {
///     let role = if i == 0 { "holder" } else { "waiting" };
///     println!("{role} {} token {} session {} ({})", c.node, c.token, c.session_id, c.identity());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The node's name under the lock path.
    pub node: String,
    /// Its fencing token (sequence and creation zxid).
    pub token: FencingToken,
    /// The session that owns the (ephemeral) node.
    pub session_id: zk::SessionId,
    /// The node's data: an identity such as `host:… pid:…`.
    pub data: Vec<u8>,
    /// When the node was created, in milliseconds since the Unix epoch (server clock).
    pub created_ms: i64,
}

impl Contender {
    /// The node data as text (lossy UTF-8).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     println!("held by {}", holder.identity());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn identity(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.data)
    }
}

/// A fair, fenced distributed lock on one ZooKeeper path. Take it with the [`Acquire`]
/// methods (`acquire`, `try_acquire`, `acquire_timeout`, `run`, `run_timeout`).
///
/// Contenders queue as ephemeral sequential nodes `_c_<uuid>-lock-<seq>` under the lock path
/// (Apache Curator's `InterProcessMutex` naming, so the two exclude each other); each waiter
/// watches only its predecessor. The holder's [`LockGuard`] carries a [`FencingToken`] that
/// strictly increases from holder to holder, and is cancelled by the session's watchdog as
/// soon as the lock may be lost.
///
/// `FencedLock` is cheap to clone, and clones share an **in-process queue**: tasks that acquire
/// through clones of one `FencedLock` first wait in a fair FIFO queue inside the process, and
/// only the task at its head contends in ZooKeeper. A busy process so keeps at most one node
/// in the lock's queue (not one per task), and every acquisition still gets its own node and
/// its own, strictly greater token. Separately created `FencedLock`s on one path are separate
/// contenders, each with its own node.
///
/// `M` is the [`Mode`] of its holds: a `FencedLock` is [`Exclusive`] (the default); a
/// read/write lock's [`reader`](crate::FencedRwLock::reader) is a `FencedLock<Shared>`, whose
/// guards hand out no fence ticket.
///
/// # Examples
///
/// ```no_run
/// use zkfence::Acquire;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let lock = zkfence::FencedLock::new(client.clone(), "/locks/orders", zkfence::LockOptions::default())?;
/// let guard = lock.acquire().await?;
/// println!("holding {} with token {}", guard.node_path(), guard.token());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub struct FencedLock<M: Mode = Exclusive> {
    queue: Arc<Queue>,
    /// Which lock this is among this process's holds (reentrancy): made once, since a
    /// client's session and chroot never change.
    key: Key,
    mode: PhantomData<fn() -> M>,
}

impl<M: Mode> Clone for FencedLock<M> {
    fn clone(&self) -> Self {
        FencedLock {
            queue: self.queue.clone(),
            key: self.key.clone(),
            mode: PhantomData,
        }
    }
}

impl<M: Mode> std::fmt::Debug for FencedLock<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedLock")
            .field("queue", &self.queue)
            .field("mode", &std::any::type_name::<M>())
            .finish()
    }
}

impl FencedLock<Exclusive> {
    /// A lock on `path`, using `client`'s session. Nothing is sent to ZooKeeper yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a path ZooKeeper would refuse (relative, trailing `/`,
    /// empty segments, under `/zookeeper`, ...); [`Error::InvalidOptions`] for an empty ACL
    /// list.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let lock = zkfence::FencedLock::new(client, "/locks/orders", zkfence::LockOptions::default())?;
    /// # let _ = lock; Ok(()) }
    /// ```
    pub fn new(
        client: zk::Client,
        path: impl Into<String>,
        options: LockOptions,
    ) -> Result<FencedLock> {
        FencedLock::with_kind(client, path.into(), options, Kind::Mutex, None)
    }

    /// Checks that `path` can be a lock path, without a client: what [`FencedLock::new`]
    /// checks first (absolute, not the root, not under `/zookeeper`, no empty, `.` or `..`
    /// segment, no character the server refuses). For tools that validate input before
    /// connecting.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] saying what is wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence::FencedLock::check_path("/locks/nightly").is_ok());
    /// assert!(zkfence::FencedLock::check_path("locks/nightly").is_err());
    /// ```
    pub fn check_path(path: &str) -> Result<()> {
        crate::queue::names::validate_lock_path(path)
    }
}

impl<M: Mode> FencedLock<M> {
    /// A contender of `kind` on `path`: the mutex, a reader or writer of a read/write lock, a
    /// semaphore lease, an election candidate. Each kind is the same queue with its own "may I
    /// proceed?" predicate; `M` must be the kind's mode.
    pub(crate) fn with_kind(
        client: zk::Client,
        path: String,
        options: LockOptions,
        kind: Kind,
        admission: Option<Box<dyn Admission>>,
    ) -> Result<FencedLock<M>> {
        // The kinds that exclude every other holder are the ones that queue in-process.
        debug_assert_eq!(M::EXCLUSIVE, kind.queues_in_process());
        let queue = Queue::new(client, path, options, kind, admission)?;
        let key = Key::new(
            queue.client.session_id().0,
            queue.client.path(),
            &queue.path,
        );
        Ok(FencedLock {
            queue: Arc::new(queue),
            key,
            mode: PhantomData,
        })
    }

    /// The lock path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: zkfence::FencedLock) {
    /// assert_eq!(lock.path(), "/locks/orders");
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        &self.queue.path
    }

    /// The client whose session contends for the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(lock: zkfence::FencedLock) {
    /// println!("session {}", lock.client().session_id());
    /// # }
    /// ```
    pub fn client(&self) -> &zk::Client {
        &self.queue.client
    }

    /// Asks the holder of `node` (its full path, as [`Held::node_path`] gives it) to let go:
    /// writes Apache Curator's revocation marker (`__REVOKE__`) into the node, as Curator's
    /// `Revoker.attemptRevoke` does. A zkfence holder learns of it through
    /// [`Held::revocation_requested`]; a Curator holder made revocable
    /// (`InterProcessMutex.makeRevocable`) through its listener. The holder decides: nothing
    /// is taken from it. Only a node that holds the lock is written to (a waiter is left
    /// alone: see the queue's handoff argument on data written into waiting nodes).
    ///
    /// Returns `true` when the marker was written, `false` when the node is gone or does not
    /// hold the lock (yet).
    ///
    /// # Errors
    ///
    /// [`Error::NotInQueue`] for a node that is not in this lock's queue;
    /// [`Error::AccessDenied`] when the node's ACL does not grant us WRITE (a `creator_all`
    /// node of another identity); ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a listing and one write, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     let node = format!("{}/{}", lock.path(), holder.node);
    ///     lock.request_revocation(&node).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn request_revocation(&self, node: &str) -> Result<bool> {
        let name = self.node_name(node)?;
        let (client, path) = (&self.queue.client, &*self.queue.path);
        let session = client.session_id();
        let children = match retrying(client, || client.list_children(path)).await? {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(err) => return Err(Error::from_request("list", path, session, err)),
        };
        if !Kind::holds(&children, name, self.permits()) {
            return Ok(false);
        }
        // A repeat after a lost reply writes the same marker again: harmless.
        let write = || client.set_data(node, REVOKE, None);
        match retrying(client, write).await? {
            Ok(_) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(err) => Err(Error::from_request("set", node, session, err)),
        }
    }

    /// Takes the lock from the holder of `node` (its full path): deletes the node. The
    /// holder's watchdog cancels it as for any deletion of its node
    /// ([`LossReason::NodeDeleted`](crate::LossReason::NodeDeleted)), and its successor
    /// proceeds. Work the holder still has in flight is stopped only by its fencing token at
    /// your storage, as always. Needs DELETE on the lock path.
    ///
    /// Returns `true` when the node was deleted, `false` when it was gone already.
    ///
    /// # Errors
    ///
    /// [`Error::NotInQueue`] for a node that is not in this lock's queue;
    /// [`Error::AccessDenied`]; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one delete, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     lock.force_revocation(&format!("{}/{}", lock.path(), holder.node)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_revocation(&self, node: &str) -> Result<bool> {
        self.node_name(node)?;
        let client = &self.queue.client;
        match delete_node(client, node, None).await? {
            Deleted::Absent => Ok(false),
            _ => Ok(true),
        }
    }

    /// The name of `node` if it is a queue node of this lock.
    fn node_name<'a>(&self, node: &'a str) -> Result<&'a str> {
        let path = &*self.queue.path;
        match node
            .strip_prefix(path)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            Some(name)
                if !name.contains('/') && crate::queue::names::parse_node(name).is_some() =>
            {
                Ok(name)
            }
            _ => Err(Error::NotInQueue {
                node: node.to_owned(),
                lock_path: path.to_owned(),
            }),
        }
    }

    /// The queue, in order: the holder first, then the waiters (for a read lock or a
    /// semaphore, several of the first nodes may hold). Includes Curator's and other clients'
    /// nodes named `…lock-<seq>`, `…__READ__<seq>`, `…__WRIT__<seq>` or `…lease-<seq>`.
    ///
    /// # Errors
    ///
    /// [`Error::NoParent`] when the lock path does not exist (nobody has used it, or it was
    /// reaped), ZooKeeper errors otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let queue = lock.contenders().await?;
    /// if let Some(holder) = queue.first() {
    ///     println!("holder {} token {}", holder.node, holder.token.as_i64());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        let ordered = self.queue_in_order().await?;
        self.read_contenders(&ordered).await
    }

    /// The lock path's queue nodes in queue order, with their sequences.
    async fn queue_in_order(&self) -> Result<Vec<(String, i32)>> {
        let client = &self.queue.client;
        let path = &*self.queue.path;
        let session = client.session_id();
        match retrying(client, || client.list_children(path)).await? {
            Ok(children) => Ok(crate::queue::names::queue_order(children)),
            Err(zk::Error::NoNode) => Err(Error::NoParent {
                path: path.to_owned(),
            }),
            Err(err) => Err(Error::from_request("list", path, session, err)),
        }
    }

    /// The data and `Stat` of `nodes` (in queue order), read in multi-reads of a few hundred
    /// (replies far below the server's 1 MiB `jute.maxbuffer`); a node gone meanwhile is left
    /// out (it is no longer queued). A node that cannot be read for another reason (its ACL
    /// refuses us) is an error naming that node: leaving it out would report a holder as gone
    /// and send the election's leader read round again without end.
    pub(crate) async fn read_contenders(&self, nodes: &[(String, i32)]) -> Result<Vec<Contender>> {
        let client = &self.queue.client;
        let path = &*self.queue.path;
        let session = client.session_id();
        let mut out = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(256) {
            let paths: Vec<String> = (chunk.iter())
                .map(|(name, _)| child_path(path, name))
                .collect();
            let results = match retrying(client, || read_all(client, &paths)).await? {
                Ok(results) => results,
                Err(err) => return Err(Error::from_request("get", path, session, err)),
            };
            for ((name, seq), result) in chunk.iter().zip(results) {
                match result {
                    zk::MultiReadResult::Data { data, stat } => out.push(Contender {
                        node: name.clone(),
                        token: FencingToken::of_node(*seq, stat.czxid),
                        session_id: zk::SessionId(stat.ephemeral_owner),
                        data,
                        created_ms: stat.ctime,
                    }),
                    zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    } => {}
                    zk::MultiReadResult::Error { err } => {
                        let node = child_path(path, name);
                        return Err(Error::from_request("get", &node, session, err));
                    }
                    // A children reply, which a get of data never gets.
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    /// The nodes that hold the lock now: those that nothing ahead blocks, by each node's own
    /// kind (the mutex's or a writer's one holder, the readers ahead of the first writer, a
    /// semaphore's first leases by this semaphore's count). Includes Curator's nodes.
    ///
    /// # Errors
    ///
    /// As [`contenders`](Self::contenders).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// for holder in lock.holders().await? {
    ///     lock.request_revocation(&format!("{}/{}", lock.path(), holder.node)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Contender>> {
        let holding = self.holding_nodes().await?;
        self.read_contenders(&holding).await
    }

    /// The nodes that hold the lock now, as one listing shows them (see
    /// [`holders`](Self::holders)), in queue order with their sequences: one pass over the
    /// listing in queue order, linear in the queue's length, whatever the number of waiters.
    /// [`read_contenders`](Self::read_contenders) reads them.
    pub(crate) async fn holding_nodes(&self) -> Result<Vec<(String, i32)>> {
        Ok(Kind::holders(self.queue_in_order().await?, self.permits()))
    }

    /// A semaphore's count, when this is one.
    fn permits(&self) -> Option<u32> {
        match self.queue.kind {
            Kind::Semaphore(n) => Some(n),
            _ => None,
        }
    }

    /// An acquire whose node carries `data` instead of the options' (an election candidate's).
    pub(crate) async fn acquire_as(
        &self,
        wait: Wait,
        data: Option<&[u8]>,
    ) -> Result<Option<LockGuard<M>>> {
        let client = &self.queue.client;
        let span = tracing::debug_span!(
            "acquire",
            lock_path = %self.queue.path,
            kind = self.queue.kind.name(),
            session_id = %client.session_id(),
            fencing_token = tracing::field::Empty,
            node = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = match self.reentry() {
            Ok(AcquirePath::Queue(pin)) => {
                let queued = self.queue_for(wait, pin, data);
                queued.instrument(span.clone()).await
            }
            Ok(AcquirePath::Nested(guard)) => Ok(Some(guard)),
            Err(err) => Err(err),
        };
        let outcome = match &result {
            Ok(Some(guard)) => {
                span.record("fencing_token", tracing::field::display(guard.token()));
                span.record("node", guard.node_path());
                metrics::counter!(ACQUISITIONS_TOTAL, "lock" => self.queue.label.clone())
                    .increment(1);
                tracing::debug!(parent: &span, waited_ms = started.elapsed().as_secs_f64() * 1e3, "acquired");
                "acquired"
            }
            Ok(None) if matches!(wait, Wait::Never) => "busy",
            Ok(None) => "timeout",
            Err(err) => {
                tracing::debug!(parent: &span, cause = %err, "acquire failed");
                "error"
            }
        };
        metrics::histogram!(ACQUIRE_DURATION_SECONDS, "outcome" => outcome, "lock" => self.queue.label.clone())
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Which lock this is, for the holds of this process.
    fn key(&self) -> Key {
        self.key.clone()
    }

    /// What an acquire by the calling task gets, given what it already holds on this lock
    /// (see [`crate::reentrancy::reentry`]).
    fn reentry(&self) -> Result<AcquirePath<M>> {
        let queue = &self.queue;
        let held = guard::owned_by(&self.key(), Owner::current());
        let kinds: Vec<Kind> = held.iter().map(|(kind, _)| *kind).collect();
        Ok(
            match reentrancy::reentry(&kinds, queue.kind, queue.options.reentrant) {
                Reentry::Queue => AcquirePath::Queue(None),
                Reentry::Nest(i) => LockGuard::<M>::nest(held[i].1.clone())?
                    .map_or(AcquirePath::Queue(None), AcquirePath::Nested),
                // The write lock stays held while the read lock is taken beside it.
                Reentry::Downgrade(i) => AcquirePath::Queue(LockGuard::nest(held[i].1.clone())?),
                Reentry::WouldDeadlock => {
                    return Err(Error::WouldDeadlock {
                        path: queue.path.to_string(),
                        held: reentrancy::describe(kinds[0]),
                        asked: reentrancy::describe(queue.kind),
                    })
                }
            },
        )
    }

    /// Queues for the lock; `pin`, a share of the write lock a read lock is taken under (a
    /// downgrade), admits the read lock at once and is kept while writers queued behind the
    /// write lock before it.
    async fn queue_for(
        &self,
        wait: Wait,
        pin: Option<LockGuard>,
        data: Option<&[u8]>,
    ) -> Result<Option<LockGuard<M>>> {
        let under = pin.as_ref().map(|write| write.node_path().to_owned());
        let request = queue::Request {
            wait,
            under: under.as_deref(),
            data,
        };
        let queued = queue::acquire(&self.queue, request);
        let granted = match wait {
            // The protocol honours the deadline itself and deletes our node before returning;
            // this bound only matters while ZooKeeper is unreachable (then the node, if any,
            // is deleted in the background).
            Wait::Until(deadline) => {
                tokio::time::timeout_at(deadline + Duration::from_secs(1), queued)
                    .await
                    .unwrap_or(Ok(None))
            }
            _ => queued.await,
        };
        Ok(granted?.map(|grant| {
            let behind_writers = grant.behind_writers;
            let mut guard = self.guard(grant);
            let unpinned = self
                .queue
                .options
                .flaw
                .is(crate::mutants::Mutant::UnpinnedDowngrade);
            if let Some(write) = pin.filter(|_| behind_writers && !unpinned) {
                guard.pin(write);
            }
            guard
        }))
    }

    /// The guard of a grant on this lock, held by the calling task.
    fn guard(&self, grant: Grant) -> LockGuard<M> {
        let queue = &self.queue;
        let holder = NewHold {
            key: self.key(),
            kind: queue.kind,
            owner: Owner::current(),
        };
        LockGuard::new(grant, &queue.options, queue.label.clone(), holder)
    }
}

impl<M: Mode> Sealed for FencedLock<M> {}

impl<M: Mode> Acquire for FencedLock<M> {
    type Guard = LockGuard<M>;
    type Handle = Held<M>;

    fn acquire_with(
        &self,
        wait: Wait,
    ) -> impl std::future::Future<Output = Result<Option<LockGuard<M>>>> + Send {
        self.acquire_as(wait, None)
    }
}

/// How an acquire goes on, given what the task already holds.
enum AcquirePath<M: Mode> {
    /// Through the queue; with a downgrade, the write lock's share to keep.
    Queue(Option<LockGuard>),
    /// A reentrant acquire's guard, no request sent.
    Nested(LockGuard<M>),
}

/// Reads the data of `nodes` in one multi-read (nodes gone by then come back as errors).
async fn read_all(
    client: &zk::Client,
    nodes: &[String],
) -> std::result::Result<Vec<zk::MultiReadResult>, zk::Error> {
    let mut reader = client.new_multi_reader();
    for node in nodes {
        reader.add_get_data(node)?;
    }
    reader.commit().await
}
