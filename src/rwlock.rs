//! [`FencedRwLock`]: readers share, writers exclude; one queue, Curator-compatible names.

use zookeeper_client as zk;

use crate::acquire::Acquire;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock::FencedLock;
use crate::mode::Shared;
use crate::options::LockOptions;
use crate::queue::kind::Kind;

/// A fair, fenced read/write lock on one ZooKeeper path.
///
/// Readers and writers queue together as ephemeral sequential nodes, `_c_<uuid>-__READ__<seq>`
/// and `_c_<uuid>-__WRIT__<seq>`: the names Apache Curator's `InterProcessReadWriteLock` uses,
/// so a mixed fleet of Curator and zkfence clients excludes each other. A writer waits for
/// every earlier node (readers included) and watches only its predecessor. A reader waits only
/// for earlier writers and watches only the **nearest earlier writer**; readers behind one
/// writer all proceed when it goes. The queue is FIFO, so a stream of readers cannot starve a
/// writer: readers that arrive after a waiting writer queue behind it.
///
/// Every guard is a [`LockGuard`], with the same token, cancellation, watchdog and
/// [`check`](crate::Held::check) as the mutex's: a read lock's is a `LockGuard<Shared>`, which
/// hands out no fence ticket. [`reader`](Self::reader) and [`writer`](Self::writer) give the
/// two sides as locks, for the whole [`Acquire`] family and `contenders`.
///
/// **What the token means here.** Tokens are the nodes' creation zxids, so they follow queue
/// order across both kinds: a writer's token exceeds the token of every reader and writer
/// that held before it, and a reader's token exceeds that of every writer before it. Storage
/// fences writes as with the mutex: the writer's [`ticket`](crate::Held::ticket) goes to a
/// fence. Readers never move the fence (their guards have no ticket); a reader that finds `fence > its token` in what it read is
/// looking at a writer that came after it, so its own lock has been lost. That is all a
/// reader's token lets storage do: several readers hold at once and none of them writes, so
/// nothing can be refused to a stale reader except its read itself, by reading conditionally
/// (`SELECT … WHERE fence <= $reader_token`: no row once a newer writer has written).
///
/// **Downgrade.** A task that holds the write lock may take the read lock (with or without
/// reentrancy), as Apache Curator allows: the read lock is granted at once, with a node and a
/// token of its own; release the write lock and you hold the read lock, shared with the
/// readers that queued behind your writer. One difference from Curator: when writers queued
/// behind your write lock before you took the read lock, releasing the write lock keeps its
/// node until the read lock ends (those writers were promised the lock before your read, and
/// Curator lets them write beside your reader). The reverse, a reader asking for the write lock,
/// fails at once with [`Error::WouldDeadlock`](crate::Error::WouldDeadlock): two readers
/// upgrading would wait for each other.
///
/// Writers (like the mutex) queue in-process first: clones of one `FencedRwLock` keep at most
/// one writer node per process. Readers each get their own node.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let rw = zkfence::FencedRwLock::new(client, "/locks/catalog", zkfence::LockOptions::default())?;
/// let read = rw.read().await?; // shared with other readers
/// println!("reading under token {}", read.token());
/// read.release().await?;
/// let write = rw.write().await?; // alone
/// write.check()?;
/// let ticket = write.ticket(); // for a fence: see zkfence::fence
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedRwLock {
    reader: FencedLock<Shared>,
    writer: FencedLock,
}

impl FencedRwLock {
    /// A read/write lock on `path`, using `client`'s session. Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::new`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let rw = zkfence::FencedRwLock::new(client, "/locks/catalog", zkfence::LockOptions::default())?;
    /// # let _ = rw; Ok(()) }
    /// ```
    pub fn new(
        client: zk::Client,
        path: impl Into<String>,
        options: LockOptions,
    ) -> Result<FencedRwLock> {
        let path = path.into();
        Ok(FencedRwLock {
            reader: FencedLock::with_kind(
                client.clone(),
                path.clone(),
                options.clone(),
                Kind::Read,
                None,
            )?,
            writer: FencedLock::with_kind(client, path, options, Kind::Write, None)?,
        })
    }

    /// The lock path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(rw: zkfence::FencedRwLock) {
    /// assert_eq!(rw.path(), "/locks/catalog");
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        self.writer.path()
    }

    /// The read side, a `FencedLock<Shared>`: the whole [`Acquire`] family for read locks
    /// (`acquire`, `try_acquire`, `acquire_timeout`, `run`, `run_timeout`), and its queue's
    /// [`holders`](FencedLock::holders).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence::Acquire;
    ///
    /// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
    /// let token = rw
    ///     .reader()
    ///     .run(|held| async move { Ok::<_, zkfence::Error>(held.token()) })
    ///     .await?;
    /// if let Some(read) = rw.reader().try_acquire().await? {
    ///     read.release().await?;
    /// }
    /// # let _ = token; Ok(()) }
    /// ```
    pub fn reader(&self) -> &FencedLock<Shared> {
        &self.reader
    }

    /// The write side, a [`FencedLock`]: the whole [`Acquire`] family for the write lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence::Acquire;
    ///
    /// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
    /// rw.writer()
    ///     .run(|held| async move {
    ///         held.check()?;
    ///         Ok::<_, zkfence::Error>(())
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn writer(&self) -> &FencedLock {
        &self.writer
    }

    /// Waits for a read lock: until no writer is ahead in the queue. The same as
    /// `self.reader().acquire()` (see [`Acquire::acquire`]).
    ///
    /// # Errors
    ///
    /// As [`Acquire::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Acquire::acquire`]: no node is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
    /// let guard = rw.read().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<LockGuard<Shared>> {
        self.reader.acquire().await
    }

    /// Waits for the write lock: until every earlier node, reader or writer, is gone. The same
    /// as `self.writer().acquire()` (see [`Acquire::acquire`]).
    ///
    /// # Errors
    ///
    /// As [`Acquire::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Acquire::acquire`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
    /// let guard = rw.write().await?;
    /// let ticket = guard.ticket(); // the writer's token fences storage
    /// # let _ = ticket;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<LockGuard> {
        self.writer.acquire().await
    }
}
