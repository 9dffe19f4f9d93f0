//! [`ZooKeeperFence`]: the type, how one is built, and its fenced operations (`claim`,
//! `write`) and contract.

use std::sync::{Arc, Mutex};

use zookeeper_client as zk;

use crate::error::Error;
use crate::fence::contract::{BoxError, BoxFuture, Fence, FenceState};
use crate::fence::error::FenceError;
use crate::fence::ticket::FenceTicket;
use crate::mutants::FenceFlaw;
#[cfg(feature = "mutants")]
use crate::mutants::FenceMutant;

/// Fenced writes to ZooKeeper data: the caller's operations go in one `multi` transaction
/// behind the fence's own checks, so they commit only while the hold stands.
///
/// - **The holder's node.** When the ticket carries its lock node (every ticket from a hold,
///   and one rebuilt from text that kept it), the first operation is a `check` that the node
///   still exists. ZooKeeper applies a `multi` atomically at one zxid, so the write commits
///   only if, at that zxid, the holder's node stood: the holder had not released, its session
///   had not expired, nobody had deleted its node. That is the ownership check
///   `zookeeper-client`'s `LockClient` makes, and that Apache Curator leaves to its users
///   (CURATOR-689).
/// - **A fence node** ([`with_fence_node`](Self::with_fence_node)) for data that other
///   clients also write, or whose fence must outlive any one holder's node: it keeps the highest
///   token accepted for the ticket's scope (`<token>\n<scope>`), compared when read and raised
///   (or version-checked, for an equal token) in the same `multi`, so a fence moved by someone
///   else between the read and the commit fails the commit, which is then read and compared
///   again. The fence remembers the node as its last commit left it and writes without reading
///   first (one round trip: 0.94× a plain `set_data` in `zkfence-bench --fences`); the version
///   check makes a stale memory cost a retry, never a stale write. A ticket rebuilt from its
///   text without its node is fenced by the fence node alone.
///
/// Before sending, the ticket's [`check`](FenceTicket::check) runs: a hold that is lost, in
/// jeopardy or past its lease writes nothing.
///
/// **Never delete a fence node.** A node deleted and created again starts its version over,
/// and a version check can no longer tell it from the old one: a writer that read (or
/// remembers) the old node could commit against the new one. To lower a fence (a rebuilt
/// ensemble: see [`FenceError::looks_reset`]), use [`rebase`](Self::rebase), which sets it.
///
/// # Examples
///
/// ```no_run
/// use zkfence::{Acquire, FencedLock, LockOptions};
/// use zkfence::fence::ZooKeeperFence;
///
/// # async fn demo(client: zookeeper_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let lock = FencedLock::new(client.clone(), "/locks/shard-7", LockOptions::default())?;
/// let fence = ZooKeeperFence::new(client.clone());
/// let guard = lock.acquire().await?;
/// // Committed only while our lock node exists:
/// fence.write(&guard.ticket(), |ops| ops.add_set_data("/shards/7/owner", b"host-a", None)).await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ZooKeeperFence {
    pub(super) client: zk::Client,
    /// The fence node, if any.
    pub(super) node: Option<String>,
    /// The ACLs of the fence node (and its missing parents) when it is created.
    pub(super) acls: Vec<zk::Acl>,
    pub(super) flaw: FenceFlaw,
    /// The fence node as this fence's last commit left it (for that commit's scope): the next
    /// write tries with it instead of reading first (shared by clones).
    pub(super) known: Known,
}

/// The fence node as a fence's last commit left it, with that commit's scope.
pub(super) type Known = Arc<Mutex<Option<(Arc<str>, Seen)>>>;

/// A fence node as read: the token it holds and its version.
#[derive(Debug)]
pub(super) struct Seen {
    /// `None` for a fence node that exists but is empty (created as a parent of other nodes,
    /// or by hand): a fence node with no fence yet, which the first claim sets.
    pub(super) token: Option<i64>,
    pub(super) version: i32,
}

impl ZooKeeperFence {
    /// A fence that commits writes only while the ticket's lock node exists. Tickets without a
    /// node (rebuilt from text without it) need a [fence node](Self::with_fence_node).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) {
    /// let fence = zkfence::fence::ZooKeeperFence::new(client);
    /// # let _ = fence; }
    /// ```
    pub fn new(client: zk::Client) -> ZooKeeperFence {
        ZooKeeperFence {
            client,
            node: None,
            acls: zk::Acls::anyone_all().to_vec(),
            flaw: FenceFlaw::default(),
            known: Arc::default(),
        }
    }

    /// A fence that also keeps the highest token accepted in the persistent node `path`
    /// (created, with its parents, by the first claim). Use one fence node per scope.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] for a path ZooKeeper would refuse.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let fence = zkfence::fence::ZooKeeperFence::with_fence_node(client, "/app/config-fence")?;
    /// # let _ = fence; Ok(()) }
    /// ```
    pub fn with_fence_node(client: zk::Client, path: impl Into<String>) -> crate::Result<Self> {
        let path = path.into();
        crate::queue::names::validate_lock_path(&path)?;
        Ok(ZooKeeperFence {
            node: Some(path),
            ..ZooKeeperFence::new(client)
        })
    }

    /// The ACLs the fence node (and its missing parents) are created with; world:anyone by
    /// default.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// use zookeeper_client::Acls;
    /// let fence = zkfence::fence::ZooKeeperFence::with_fence_node(client, "/app/fence")?
    ///     .with_acls(&Acls::creator_all());
    /// # let _ = fence; Ok(()) }
    /// ```
    pub fn with_acls(mut self, acls: &[zk::Acl]) -> Self {
        self.acls = acls.to_vec();
        self
    }

    /// **For zkfence's own tests**: a fence built with a deliberate flaw.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: FenceMutant) -> Self {
        self.flaw = FenceFlaw::of(mutant);
        self
    }

    /// The fence node's path, if the fence keeps one.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(fence: zkfence::fence::ZooKeeperFence) {
    /// println!("{:?}", fence.fence_node());
    /// # }
    /// ```
    pub fn fence_node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Raises the fence node to the ticket's token, refusing an older one: from then on every
    /// older holder's fenced write is refused. Returns the token the fence held before (`None`
    /// for a scope's first claim). Two first claims at once: the higher token wins, and the
    /// lower is refused if it comes second.
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`], [`FenceError::LockLost`], [`FenceError::InDoubt`]; and
    /// [`FenceError::Invalid`] when the fence has no fence node; [`FenceError::Store`] with
    /// [`Error::FenceScope`] when the fence node belongs to another scope, or the ZooKeeper
    /// error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that a `multi` already sent may commit after the future
    /// is dropped: the claim then stands, which only refuses older holders.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence, lock: zkfence::FencedLock) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence::Acquire;
    /// let guard = lock.acquire().await?;
    /// let before = fence.claim(&guard.ticket()).await?;
    /// println!("raised the fence from {before:?} to {}", guard.token().as_i64());
    /// # Ok(()) }
    /// ```
    pub async fn claim(&self, ticket: &FenceTicket) -> Result<Option<i64>, FenceError<Error>> {
        if self.node.is_none() {
            return Err(FenceError::Invalid(Error::InvalidOptions(
                "a claim needs a fence node: build the fence with ZooKeeperFence::with_fence_node",
            )));
        }
        self.commit(ticket, true, &mut |_| Ok(()))
            .await
            .map(|(seen, _)| seen)
    }

    /// Commits the operations `ops` adds, in one `multi` behind the fence's checks: the
    /// holder's node exists (when the ticket names it), and the fence node, if any, holds no
    /// newer token (raised to ours in the same transaction). Returns the results of `ops`'s
    /// operations, in their order. `ops` may be called again when another writer moved the
    /// fence node before the commit.
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`] (the fence node holds a newer token), [`FenceError::LockLost`]
    /// (the check before sending failed, or the holder's node was gone at the commit),
    /// [`FenceError::InDoubt`] (the connection broke with the `multi` sent); and
    /// [`FenceError::Store`]: an error of one of `ops`'s operations (nothing committed);
    /// [`FenceError::Invalid`] for a ticket that names no node given to a fence without a fence
    /// node.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that a `multi` already sent may commit after the future
    /// is dropped; it still commits only behind the fence's checks.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use zookeeper_client::{Acls, CreateMode};
    /// let results = fence
    ///     .write(&ticket, |ops| {
    ///         ops.add_set_data("/app/config", b"v2", None)?;
    ///         ops.add_create("/app/history/v2", b"", &CreateMode::Persistent.with_acls(Acls::anyone_all()))
    ///     })
    ///     .await?;
    /// assert_eq!(results.len(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn write<F>(
        &self,
        ticket: &FenceTicket,
        mut ops: F,
    ) -> Result<Vec<zk::MultiWriteResult>, FenceError<Error>>
    where
        F: FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send,
    {
        if self.node.is_none() && ticket.node_path().is_none() {
            return Err(FenceError::Invalid(Error::InvalidOptions(
                "this ticket names no lock node (rebuilt from text without one), so only a fence node can fence its writes: build the fence with ZooKeeperFence::with_fence_node",
            )));
        }
        self.commit(ticket, false, &mut ops)
            .await
            .map(|(_, out)| out)
    }
}

impl Fence for ZooKeeperFence {
    fn store(&self) -> &'static str {
        "zookeeper"
    }

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<Option<i64>, FenceError<BoxError>>> {
        Box::pin(async move {
            let outcome = ZooKeeperFence::claim(self, ticket).await;
            outcome.map_err(|e| e.map_store(|e| Box::new(e) as BoxError))
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::seen(self, scope).await?) })
    }

    fn rebase<'a>(
        &'a self,
        scope: &'a str,
        to: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::rebase(self, scope, to).await?) })
    }

    fn fences(&self) -> BoxFuture<'_, Result<Vec<FenceState>, BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::fences(self).await?) })
    }
}
