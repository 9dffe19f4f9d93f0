//! [`ZooKeeperFence`]: writes to ZooKeeper data, committed only while the hold stands.

use std::sync::{Arc, Mutex};

use zookeeper_client as zk;

use super::error::FenceError;
use super::ticket::FenceTicket;
use crate::error::Error;
use crate::loss::LossReason;
use crate::mutants::{FenceFlaw, FenceMutant};
use crate::requests::nodes::create_parents;
use crate::requests::retry::{is_connection_error, retrying};

/// How often a fenced write re-reads the fence node when other writers keep moving it between
/// its read and its commit, before it gives up.
const MAX_RACES: u32 = 32;

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
    client: zk::Client,
    /// The fence node, if any.
    node: Option<String>,
    /// The ACLs of the fence node (and its missing parents) when it is created.
    acls: Vec<zk::Acl>,
    flaw: FenceFlaw,
    /// The fence node as this fence's last commit left it (for that commit's scope): the next
    /// write tries with it instead of reading first (shared by clones).
    known: Known,
}

/// The fence node as a fence's last commit left it, with that commit's scope.
type Known = Arc<Mutex<Option<(Arc<str>, Seen)>>>;

/// A fence node as read: the token it holds and its version.
#[derive(Debug)]
struct Seen {
    /// `None` for a fence node that exists but is empty (created as a parent of other nodes,
    /// or by hand): a fence node with no fence yet, which the first claim sets.
    token: Option<i64>,
    version: i32,
}

/// How one attempt at a fenced commit ended, short of success.
enum CommitFailure {
    /// The fence node moved between our read and our commit: read and compare again.
    Raced,
    /// The fence node's parent is missing: create it, then try again.
    NoParent,
    Failed(FenceError<Error>),
}

/// Which of the fence's own checks lead a `multi`, ahead of the caller's operations.
#[derive(Debug, Clone, Copy)]
struct FenceChecks {
    /// The holder's node `check`, first.
    holder: bool,
    /// The fence node's create, raise or check, after the holder's check if there is one.
    fence: bool,
}

impl FenceChecks {
    /// How many operations they are: the results to leave out of the caller's.
    fn len(self) -> usize {
        usize::from(self.holder) + usize::from(self.fence)
    }
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

    /// Sets the fence node of `scope` to `to`, whatever it holds, and returns what it held
    /// (`None` when there is no fence node yet: nothing to rebase): the operator's way out
    /// after the ensemble's data was reset (every new token is below the old fence). Only once
    /// no holder of the old ensemble can write any more: a fence set lower lets their late
    /// writes in. The node is set (one version on), never deleted.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node or for a negative `to`;
    /// [`Error::FenceScope`] for a fence node of another scope; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one versioned write, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// if let Some(old) = fence.rebase("/locks/config", 0).await? {
    ///     println!("the fence moved from {old} to 0");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rebase(&self, scope: &str, to: i64) -> crate::Result<Option<i64>> {
        let Some(node) = &self.node else {
            return Err(Error::InvalidOptions("this fence keeps no fence node"));
        };
        if to < 0 {
            return Err(Error::InvalidOptions("a fence holds a token from 0"));
        }
        self.forget();
        let client = &self.client;
        let failed = |op, err| Error::from_request(op, node, client.session_id(), err);
        loop {
            let (data, stat) = match retrying(client, || client.get_data(node)).await? {
                Ok(read) => read,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(err) => return Err(failed("get", err)),
            };
            if data.is_empty() {
                return Ok(None);
            }
            let (old, fenced) = parse_fence(node, &data)?;
            if fenced != scope {
                return Err(Error::FenceScope {
                    node: node.clone(),
                    fenced,
                    asked: scope.to_owned(),
                });
            }
            let data = format!("{to}\n{scope}");
            let set = || client.set_data(node, data.as_bytes(), Some(stat.version));
            match retrying(client, set).await? {
                Ok(_) => {
                    tracing::warn!(scope, from = old, to, "fence rebased");
                    return Ok(Some(old));
                }
                // Moved meanwhile (or our own set, repeated after a lost reply): read again.
                Err(zk::Error::BadVersion) => continue,
                Err(err) => return Err(failed("set", err)),
            }
        }
    }

    /// The token the fence node holds for `scope`; `None` before the first claim (the node
    /// missing, or empty).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node; [`Error::FenceScope`] when the node
    /// fences another scope; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// if let Some(token) = fence.seen("/locks/config").await? {
    ///     println!("fenced at {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn seen(&self, scope: &str) -> crate::Result<Option<i64>> {
        match self.fences().await?.pop() {
            Some(state) if state.scope == scope => Ok(Some(state.token)),
            Some(state) => Err(Error::FenceScope {
                node: state.at.unwrap_or_default(),
                fenced: state.scope,
                asked: scope.to_owned(),
            }),
            None => Ok(None),
        }
    }

    /// The fence node's fence, if it holds one: its scope and token, the node's path in `at`;
    /// none when the node is missing or empty (an empty node is a fence node with no fence yet,
    /// which the first claim sets).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// for state in fence.fences().await? {
    ///     println!("{}: {}", state.scope, state.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fences(&self) -> crate::Result<Vec<super::FenceState>> {
        let Some(node) = &self.node else {
            return Err(Error::InvalidOptions("this fence keeps no fence node"));
        };
        let client = &self.client;
        match retrying(client, || client.get_data(node)).await? {
            // An empty node (created as another node's parent, or by hand): no fence yet.
            Ok((data, _)) if data.is_empty() => Ok(Vec::new()),
            Ok((data, _)) => {
                let (token, scope) = parse_fence(node, &data)?;
                Ok(vec![super::FenceState::new(scope, token).at(node.clone())])
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(err) => Err(Error::from_request("get", node, client.session_id(), err)),
        }
    }

    /// Reads the fence node, compares, and commits the checks and `ops` in one `multi`, again
    /// while other writers move the fence node first. The fence's token before, and `ops`'s
    /// results. `claiming`: a claim (no `ops`), which the `CheckOutsideTransaction` mutant
    /// checks, and whose later writes it does not.
    async fn commit(
        &self,
        ticket: &FenceTicket,
        claiming: bool,
        ops: &mut (dyn FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send),
    ) -> Result<(Option<i64>, Vec<zk::MultiWriteResult>), FenceError<Error>> {
        let op = if claiming { "claim" } else { "write" };
        let unchecked = self.flaw.is(FenceMutant::CheckOutsideTransaction) && !claiming;
        let work = async move {
            let session = self.client.session_id();
            tracing::Span::current().record("session_id", tracing::field::display(session));
            match unchecked {
                // The mutant trusts the claim made before, and writes with no check at all.
                true => (self.send(ticket, None, ops).await)
                    .map(|out| (None, out))
                    .map_err(|a| match a {
                        CommitFailure::Failed(err) => err,
                        _ => FenceError::Store(Error::InvalidOptions("unchecked write raced")),
                    }),
                false => self.attempts(ticket, ops).await,
            }
        };
        super::driver::drive_once("zookeeper", op, ticket, work).await
    }

    /// [`commit`](Self::commit)'s attempts.
    async fn attempts(
        &self,
        ticket: &FenceTicket,
        ops: &mut (dyn FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send),
    ) -> Result<(Option<i64>, Vec<zk::MultiWriteResult>), FenceError<Error>> {
        for attempt in 0..MAX_RACES {
            let (seen, raise) = self.admit(ticket, attempt).await?;
            let before = seen.as_ref().and_then(|s| s.token);
            ticket.check_before_commit()?;
            match self.send(ticket, Some((seen.as_ref(), raise)), ops).await {
                Ok(results) => {
                    self.remember(ticket, seen.as_ref(), raise);
                    return Ok((before, results));
                }
                Err(CommitFailure::Raced) => {
                    self.forget();
                    super::driver::record_retry("zookeeper", "raced");
                }
                Err(CommitFailure::NoParent) => self.create_fence_parent().await?,
                Err(CommitFailure::Failed(err)) => return Err(err),
            }
        }
        Err(FenceError::Store(Error::FenceContended {
            scope: ticket.scope().to_owned(),
            attempts: MAX_RACES,
        }))
    }

    /// What attempt `attempt` commits against: the fence node as seen (`None`: none, to be
    /// created) and whether the ticket raises it (`false`: it holds the ticket's own token,
    /// checked unchanged); or the refusal of an older token.
    async fn admit(
        &self,
        ticket: &FenceTicket,
        attempt: u32,
    ) -> Result<(Option<Seen>, bool), FenceError<Error>> {
        // The fence node as this fence last left it, if it did, on the first try: its
        // version check in the multi makes a stale memory fail the commit, not the fence.
        // A refusal is always decided on a fresh read.
        let mut seen = match attempt {
            0 => self.known(ticket),
            _ => None,
        };
        let token = ticket.token().as_i64();
        let admitted = seen
            .as_ref()
            .and_then(|s| self.flaw.admits(token, s.token).ok());
        let raise = match admitted {
            Some(raise) => raise,
            None => {
                seen = self.read_fence(ticket).await?;
                let before = seen.as_ref().and_then(|s| s.token);
                (self.flaw.admits(token, before))
                    .map_err(|()| ticket.refused(before.unwrap_or(-1)))?
            }
        };
        Ok((seen, raise))
    }

    /// Creates the fence node's missing parents (persistent, with the fence's ACLs).
    async fn create_fence_parent(&self) -> Result<(), FenceError<Error>> {
        let node = self.node.as_deref().unwrap_or_default();
        let parent = &node[..node.rfind('/').unwrap_or(0)];
        let mode = zk::CreateMode::Persistent;
        create_parents(&self.client, parent, mode, &self.acls)
            .await
            .map_err(FenceError::Store)
    }

    /// What this fence's last commit left in the fence node, if it was for `ticket`'s scope.
    fn known(&self, ticket: &FenceTicket) -> Option<Seen> {
        self.node.as_ref()?;
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        (known.as_ref())
            .filter(|(scope, _)| **scope == *ticket.scope())
            .map(|(_, seen)| Seen {
                token: seen.token,
                version: seen.version,
            })
    }

    /// Remembers the fence node as a commit for `ticket` left it: created (version 0), raised
    /// (one version on), or checked (unchanged).
    fn remember(&self, ticket: &FenceTicket, seen: Option<&Seen>, raise: bool) {
        if self.node.is_none() {
            return;
        }
        let left = match seen {
            None => Seen {
                token: Some(ticket.token().as_i64()),
                version: 0,
            },
            Some(seen) if raise => Seen {
                token: Some(ticket.token().as_i64()),
                version: seen.version.wrapping_add(1),
            },
            Some(seen) => Seen {
                token: seen.token,
                version: seen.version,
            },
        };
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some((ticket.scope().into(), left));
    }

    fn forget(&self) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The fence node, if the fence keeps one and it exists.
    async fn read_fence(&self, ticket: &FenceTicket) -> Result<Option<Seen>, FenceError<Error>> {
        let Some(node) = &self.node else {
            return Ok(None);
        };
        let client = &self.client;
        let read = retrying(client, || client.get_data(node))
            .await
            .map_err(FenceError::Store)?;
        let (data, stat) = match read {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) => {
                let err = Error::from_request("get", node, client.session_id(), err);
                return Err(FenceError::Store(err));
            }
        };
        if data.is_empty() {
            return Ok(Some(Seen {
                token: None,
                version: stat.version,
            }));
        }
        let (token, scope) = parse_fence(node, &data).map_err(FenceError::Store)?;
        if scope != ticket.scope() {
            return Err(FenceError::Store(Error::FenceScope {
                node: node.clone(),
                fenced: scope,
                asked: ticket.scope().to_owned(),
            }));
        }
        Ok(Some(Seen {
            token: Some(token),
            version: stat.version,
        }))
    }

    /// One `multi`: the holder's node check, the fence node's compare-and-raise (for the
    /// fence as read, `seen`, and whether to raise it), `ops`. `checks` is `None` only for the
    /// `CheckOutsideTransaction` mutant's writes: `ops` alone.
    async fn send(
        &self,
        ticket: &FenceTicket,
        checks: Option<(Option<&Seen>, bool)>,
        ops: &mut (dyn FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send),
    ) -> Result<Vec<zk::MultiWriteResult>, CommitFailure> {
        let (seen, _) = checks.unwrap_or((None, false));
        let mut multi = self.client.new_multi_writer();
        let ours = self.add_checks(&mut multi, ticket, checks)?;
        let store = |err| CommitFailure::Failed(FenceError::Store(err));
        ops(&mut multi).map_err(|e| store(self.request_error("multi", ticket.scope(), e)))?;
        match multi.commit().await {
            Ok(mut results) => {
                results.drain(..ours.len().min(results.len()));
                Ok(results)
            }
            Err(err) => Err(self.commit_failed(ticket, ours, seen, err)),
        }
    }

    /// Adds the fence's own checks to `multi`, ahead of the caller's operations (see
    /// [`send`](Self::send)): the holder's node `check`, when the ticket names it; then the
    /// fence node's create (none `seen`), raise (`set_data` at the version seen) or `check` (of
    /// the version seen), when the fence keeps one. None at all when `checks` is `None`.
    fn add_checks(
        &self,
        multi: &mut zk::MultiWriter<'_>,
        ticket: &FenceTicket,
        checks: Option<(Option<&Seen>, bool)>,
    ) -> Result<FenceChecks, CommitFailure> {
        let (seen, raise) = checks.unwrap_or((None, false));
        let store = |err| CommitFailure::Failed(FenceError::Store(err));
        let holder = ticket.node_path().filter(|_| checks.is_some());
        if let Some(node) = &holder {
            multi
                .add_check_version(node, -1)
                .map_err(|e| store(self.request_error("multi", node, e)))?;
        }
        let fence_op = self.node.as_ref().filter(|_| checks.is_some());
        if let Some(node) = fence_op {
            let data = fence_data(ticket);
            let added = match (seen, raise) {
                (None, _) => {
                    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&self.acls));
                    multi.add_create(node, &data, &options)
                }
                (Some(seen), true) => multi.add_set_data(node, &data, Some(seen.version)),
                (Some(seen), false) => multi.add_check_version(node, seen.version),
            };
            added.map_err(|e| store(self.request_error("multi", node, e)))?;
        }
        Ok(FenceChecks {
            holder: holder.is_some(),
            fence: fence_op.is_some(),
        })
    }

    /// What a failed commit of [`send`](Self::send)'s `multi` means, given which of the
    /// fence's checks led it (`ours`) and the fence node as read (`seen`).
    fn commit_failed(
        &self,
        ticket: &FenceTicket,
        ours: FenceChecks,
        seen: Option<&Seen>,
        err: zk::MultiWriteError,
    ) -> CommitFailure {
        let store = |err| CommitFailure::Failed(FenceError::Store(err));
        match err {
            zk::MultiWriteError::RequestFailed { source } if is_connection_error(&source) => {
                let cause = self.request_error("multi", ticket.scope(), source);
                CommitFailure::Failed(ticket.in_doubt(cause))
            }
            zk::MultiWriteError::RequestFailed { source } => {
                store(self.request_error("multi", ticket.scope(), source))
            }
            zk::MultiWriteError::OperationFailed { index, source } => {
                let holder_op = ours.holder && index == 0;
                let fence_index = usize::from(ours.holder);
                let fence_failed = ours.fence && index == fence_index;
                match (holder_op, fence_failed, source) {
                    (true, _, zk::Error::NoNode) => CommitFailure::Failed(FenceError::LockLost {
                        scope: ticket.scope().to_owned(),
                        token: ticket.token().as_i64(),
                        cause: Error::LockLost(LossReason::NodeDeleted),
                    }),
                    (_, true, zk::Error::BadVersion | zk::Error::NodeExists) => {
                        CommitFailure::Raced
                    }
                    (_, true, zk::Error::NoNode) if seen.is_none() => CommitFailure::NoParent,
                    (_, true, zk::Error::NoNode) => CommitFailure::Raced,
                    (_, _, source) => {
                        let path = ticket.scope();
                        store(self.request_error("multi", path, source))
                    }
                }
            }
        }
    }

    fn request_error(&self, op: &'static str, path: &str, err: zk::Error) -> Error {
        Error::from_request(op, path, self.client.session_id(), err)
    }
}

/// What a fence node holds for `ticket`: its token, a newline, its scope.
fn fence_data(ticket: &FenceTicket) -> Vec<u8> {
    format!("{}\n{}", ticket.token().as_i64(), ticket.scope()).into_bytes()
}

/// Reads a fence node's `<token>\n<scope>`.
fn parse_fence(node: &str, data: &[u8]) -> crate::Result<(i64, String)> {
    let text = std::str::from_utf8(data).ok();
    let parsed = text.and_then(|text| {
        let (token, scope) = text.split_once('\n')?;
        let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        Some((
            digits.then(|| token.parse::<i64>().ok())??,
            scope.to_owned(),
        ))
    });
    parsed.ok_or_else(|| Error::NotAFence {
        node: node.to_owned(),
    })
}

impl super::Fence for ZooKeeperFence {
    fn store(&self) -> &'static str {
        "zookeeper"
    }

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> super::BoxFuture<'a, Result<Option<i64>, FenceError<super::BoxError>>> {
        Box::pin(async move {
            let outcome = ZooKeeperFence::claim(self, ticket).await;
            outcome.map_err(|e| e.map_store(|e| Box::new(e) as super::BoxError))
        })
    }

    fn seen<'a>(
        &'a self,
        scope: &'a str,
    ) -> super::BoxFuture<'a, Result<Option<i64>, super::BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::seen(self, scope).await?) })
    }

    fn rebase<'a>(
        &'a self,
        scope: &'a str,
        to: i64,
    ) -> super::BoxFuture<'a, Result<Option<i64>, super::BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::rebase(self, scope, to).await?) })
    }

    fn fences(&self) -> super::BoxFuture<'_, Result<Vec<super::FenceState>, super::BoxError>> {
        Box::pin(async move { Ok(ZooKeeperFence::fences(self).await?) })
    }
}
