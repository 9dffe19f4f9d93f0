//! [`FencedLock`] itself: the type, how it is made, and what it is on.

use std::marker::PhantomData;
use std::sync::Arc;

use zookeeper_client as zk;

use crate::error::Result;
use crate::mode::{Exclusive, Mode};
use crate::options::LockOptions;
use crate::queue::kind::Kind;
use crate::queue::{Admission, Queue};
use crate::reentrancy::Key;

/// A fair, fenced distributed lock on one ZooKeeper path. Take it with the
/// [`Acquire`](crate::Acquire) methods (`acquire`, `try_acquire`, `acquire_timeout`, `run`,
/// `run_timeout`).
///
/// Contenders queue as ephemeral sequential nodes `_c_<uuid>-lock-<seq>` under the lock path
/// (Apache Curator's `InterProcessMutex` naming, so the two exclude each other); each waiter
/// watches only its predecessor. The holder's [`LockGuard`](crate::LockGuard) carries a
/// [`FencingToken`](crate::FencingToken) that strictly increases from holder to holder, and is
/// cancelled by the session's watchdog as soon as the lock may be lost.
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
    pub(super) queue: Arc<Queue>,
    /// Which lock this is among this process's holds (reentrancy): made once, since a
    /// client's session and chroot never change.
    pub(super) key: Key,
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
    /// [`Error::InvalidPath`](crate::Error::InvalidPath) for a path ZooKeeper would refuse
    /// (relative, trailing `/`, empty segments, under `/zookeeper`, ...);
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions) for an empty ACL list.
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
    /// [`Error::InvalidPath`](crate::Error::InvalidPath) saying what is wrong.
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

    /// A semaphore's count, when this is one.
    pub(super) fn permits(&self) -> Option<u32> {
        match self.queue.kind {
            Kind::Semaphore(n) => Some(n),
            _ => None,
        }
    }
}
