//! [`FencedElection`]: leader election on the fair queue, with the leader's fencing token as
//! its epoch; [`Leadership`], [`Leader`], [`Observer`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::guard::{Held, LockGuard};
use crate::lock::{Contender, FencedLock};
use crate::options::LockOptions;
use crate::queue::kind::Kind;
use crate::queue::names::{self, LATCH_NAME};
use crate::requests::nodes::child_path;
use crate::requests::retry::{is_connection_error, retrying};
use crate::requests::watch::{watch_changed, NodeWatch};
use crate::token::FencingToken;
use crate::wait::Wait;

/// The child of the election path that holds the leader's proclaimed value (it is no candidate:
/// its name has no `latch-`).
const VALUE_NAME: &str = "zkfence-leader-value";

/// A new session for [`FencedElection::lead`] after the old one ended.
pub type Reconnect =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<zk::Client>> + Send>> + Send + Sync>;

/// Leader election with fencing, on one ZooKeeper path.
///
/// Candidates queue as ephemeral sequential nodes named as Apache Curator's `LeaderLatch` names
/// its participants (`_c_<uuid>-latch-<seq>`), so a mixed fleet of `LeaderLatch` and zkfence
/// candidates on one path has exactly one leader at a time; the leader is the first node. (A
/// node of another kind on the path, a mutex's, say, sorts among them by its sequence: a
/// zkfence candidate behind it waits, and [`leader`](FencedElection::leader) reports none,
/// where Curator's latch, which looks at `latch-` nodes only, would lead. Keep elections and
/// locks on paths of their own.) The
/// leader's [`Leadership`] is a guard like a lock's: its [`epoch`](Leadership::epoch) is the
/// fencing token (strictly increasing from leader to leader), its lease watchdog cancels it as
/// soon as leadership may be lost, and storage that keeps the highest epoch it has seen refuses
/// a deposed leader's late writes. Curator's `LeaderSelector` is built on a mutex, which
/// [`FencedLock`] already shares with Curator's `InterProcessMutex`: use a `FencedLock` on the
/// selector's path to join a `LeaderSelector` fleet.
///
/// A candidate never writes into its node (Curator's participants react to their
/// predecessor's deletion only, and a data change would strand them), so
/// [`proclaim`](Leadership::proclaim) stores its value in a child of the election path of its
/// own, fenced by the leader's node.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let election = zkfence::FencedElection::new(client, "/elections/compactor", zkfence::LockOptions::default())?;
/// let leadership = election.campaign("host-a").await?;
/// println!("leading in epoch {}", leadership.epoch());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedElection {
    lock: FencedLock,
    value: Arc<str>,
    options: LockOptions,
    reconnect: Option<Reconnect>,
}

impl std::fmt::Debug for FencedElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedElection")
            .field("path", &self.path())
            .field("reconnect", &self.reconnect.is_some())
            .finish_non_exhaustive()
    }
}

/// The current leader, as [`FencedElection::leader`] and [`Observer`] report it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its epoch: its node's fencing token.
    pub epoch: FencingToken,
    /// What it proclaimed (see [`Leadership::proclaim`]), else its campaign's data.
    pub data: Vec<u8>,
    /// The session that leads.
    pub session_id: zk::SessionId,
    /// Its node's name under the election path.
    pub node: String,
}

impl FencedElection {
    /// An election on `path`, using `client`'s session. Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::new`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let election = zkfence::FencedElection::new(client, "/elections/compactor", zkfence::LockOptions::default())?;
    /// # let _ = election; Ok(()) }
    /// ```
    pub fn new(
        client: zk::Client,
        path: impl Into<String>,
        options: LockOptions,
    ) -> Result<FencedElection> {
        let path = path.into();
        let value = child_path(&path, VALUE_NAME).into();
        let lock = FencedLock::with_kind(client, path, options.clone(), Kind::Latch, None)?;
        Ok(FencedElection {
            lock,
            value,
            options,
            reconnect: None,
        })
    }

    /// How [`lead`](Self::lead) gets a new session once the current one has ended (expired,
    /// closed). Without it, `lead` returns the session's error then.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(election: zkfence::FencedElection) {
    /// let election = election.with_reconnect(|| async {
    ///     Ok(zookeeper_client::Client::connect("zk1:2181,zk2:2181").await.map_err(|e| {
    ///         zkfence::Error::ZooKeeper { op: "connect", path: "/".into(), source: e }
    ///     })?)
    /// });
    /// # let _ = election; }
    /// ```
    pub fn with_reconnect<F, Fut>(mut self, reconnect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<zk::Client>> + Send + 'static,
    {
        self.reconnect = Some(Arc::new(move || Box::pin(reconnect())));
        self
    }

    /// The election path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(election: zkfence::FencedElection) {
    /// println!("{}", election.path());
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        self.lock.path()
    }

    /// Waits until this candidate leads; its node carries `data` (an identity, shown to
    /// observers until the leader proclaims something else).
    ///
    /// # Errors
    ///
    /// As [`Acquire::acquire`](crate::Acquire::acquire); [`Error::RequestTooLarge`] for oversized data.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Acquire::acquire`](crate::Acquire::acquire): no candidate node is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
    /// let leadership = election.campaign("host-a").await?;
    /// leadership.check()?;
    /// # Ok(()) }
    /// ```
    pub async fn campaign(&self, data: impl Into<Vec<u8>>) -> Result<Leadership> {
        let data = data.into();
        check_size(&self.options, &data)?;
        loop {
            // A wait without a deadline ends only with a guard or an error.
            if let Some(guard) = self.lock.acquire_as(Wait::Forever, Some(&data)).await? {
                return Ok(self.leadership(guard));
            }
        }
    }

    /// As [`campaign`](Self::campaign), giving up after `timeout` with `None` (no node left).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`campaign`](Self::campaign).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
    /// if let Some(leadership) = election.campaign_timeout("host-a", std::time::Duration::from_secs(5)).await? {
    ///     leadership.resign().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn campaign_timeout(
        &self,
        data: impl Into<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Option<Leadership>> {
        let data = data.into();
        check_size(&self.options, &data)?;
        let deadline = tokio::time::Instant::now() + timeout;
        let guard = self
            .lock
            .acquire_as(Wait::Until(deadline), Some(&data))
            .await?;
        Ok(guard.map(|guard| self.leadership(guard)))
    }

    fn leadership(&self, guard: LockGuard) -> Leadership {
        Leadership {
            inner: Arc::new(Term {
                held: guard.held(),
                guard: tokio::sync::Mutex::new(Some(guard)),
                value: self.value.clone(),
                client: self.lock.client().clone(),
            }),
        }
    }

    /// The current leader, if there is one: the first candidate, when nothing of another kind
    /// is queued ahead of it (as a campaign would wait for such a node), with its epoch,
    /// session and data (its proclaimed value if it proclaimed one).
    ///
    /// # Errors
    ///
    /// ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
    /// if let Some(leader) = election.leader().await? {
    ///     println!("epoch {} led by {}", leader.epoch, String::from_utf8_lossy(&leader.data));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>> {
        read_leader(&self.lock, &self.value).await
    }

    /// Leader changes, as a watch sees them: the first [`Observer::next`] gives the current
    /// leader, each later one the next change (a new leader, a new proclaimed value, or none).
    /// An observer watches only the current leader's node and the proclaimed value: a leader
    /// change costs it one listing and two reads, never a request per candidate.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
    /// let mut observer = election.observe();
    /// while let Some(leader) = observer.next().await? {
    ///     println!("epoch {}", leader.epoch);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self) -> Observer {
        Observer {
            client: self.lock.client().clone(),
            path: self.path().into(),
            value: self.value.clone(),
            last: None,
            started: false,
            armed: Vec::new(),
            head: None,
        }
    }

    /// Leads until `shutdown` fires: campaigns, runs `work` with the [`Leadership`] each time
    /// this candidate leads (polled only while the leadership holds, as a
    /// [`Acquire::run`](crate::Acquire::run) section, and dropped the moment it is lost), resigns when `work`
    /// returns, and campaigns again after a backoff with jitter: 100 ms doubling per failure up
    /// to 5 s. After a session's end it campaigns on a new session from
    /// [`with_reconnect`](Self::with_reconnect). This is what most singleton workers want.
    ///
    /// # Errors
    ///
    /// An error of `work`'s own ends `lead` with it, after resigning; an error that comes of a
    /// lost leadership does not (it campaigns again). Also: the session's end without
    /// [`with_reconnect`](Self::with_reconnect), a reconnect's error, and errors no campaign
    /// can mend (bad paths, ACLs).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the term's work and resigns in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
    /// let shutdown = tokio_util::sync::CancellationToken::new();
    /// election
    ///     .lead("host-a", shutdown, |leadership| async move {
    ///         loop {
    ///             leadership.check()?; // before each side effect
    ///             // ... one step of singleton work, fenced with leadership.epoch() ...
    ///             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///         }
    ///     })
    ///     .await
    /// # }
    /// ```
    pub async fn lead<F, Fut, E>(
        &self,
        data: impl Into<Vec<u8>>,
        shutdown: CancellationToken,
        mut work: F,
    ) -> std::result::Result<(), E>
    where
        F: FnMut(Leadership) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: From<Error>,
    {
        let data = data.into();
        let mut election = self.clone();
        let mut failures = 0u32;
        while !shutdown.is_cancelled() {
            let ended = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                won = election.campaign(data.clone()) => match won {
                    Ok(leadership) => match term(leadership, &shutdown, &mut work).await {
                        TermEnd::Ended(ended) => ended,
                        TermEnd::Failed(err) => return Err(err),
                    },
                    Err(err) => Err(err),
                },
            };
            match ended {
                Ok(()) => failures = 0,
                Err(err) if err.is_session_terminal() => {
                    election = election.renewed(&err).await?;
                    failures += 1;
                }
                Err(err) if err.is_retryable() || err.is_lock_lost() => failures += 1,
                Err(err) => return Err(err.into()),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(backoff(failures)) => {}
            }
        }
        Ok(())
    }

    /// The same election on a new session, after `ended` ended the old one.
    async fn renewed(&self, ended: &Error) -> Result<FencedElection> {
        let Some(reconnect) = &self.reconnect else {
            return Err(ended.clone());
        };
        let client = reconnect().await?;
        let election = FencedElection::new(client, self.path().to_owned(), self.options.clone())?;
        Ok(FencedElection {
            reconnect: self.reconnect.clone(),
            ..election
        })
    }
}

/// How a term of [`FencedElection::lead`] ended.
enum TermEnd<E> {
    /// Its leadership ended: resigned (`Ok`), lost, or its resignation failed.
    Ended(Result<()>),
    /// `work` failed with an error of its own while leading (and this candidate resigned).
    Failed(E),
}

/// One term: `work` under `leadership` until it returns, leadership is lost, or `shutdown`
/// fires; then the resignation, awaited. A loss wins over `work`'s error, which it may have
/// caused (the section's check turned into `work`'s error type).
async fn term<F, Fut, E>(
    leadership: Leadership,
    shutdown: &CancellationToken,
    work: &mut F,
) -> TermEnd<E>
where
    F: FnMut(Leadership) -> Fut,
    Fut: Future<Output = std::result::Result<(), E>>,
    E: From<Error>,
{
    let kept = leadership.clone();
    let ran = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        ran = crate::section::run(leadership, work) => ran,
    };
    let resigned = kept.resign().await;
    match (ran, resigned) {
        (_, Err(loss)) if loss.is_lock_lost() => TermEnd::Ended(Err(loss)),
        (Err(err), _) => TermEnd::Failed(err),
        (Ok(()), resigned) => TermEnd::Ended(resigned),
    }
}

/// Between campaigns: 100 ms doubling per failure up to 5 s, with up to 50% jitter (so a fleet
/// that lost its leader together does not campaign in lockstep).
fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(100) * 2u32.saturating_pow(failures.min(6));
    let base = base.min(Duration::from_secs(5));
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 2000.0;
    base.mul_f64(1.0 + jitter)
}

/// Refuses campaign data the server would not take in a create.
fn check_size(options: &LockOptions, data: &[u8]) -> Result<()> {
    let with = options.clone().with_data(data.to_vec());
    let bytes = crate::queue::create_request_bytes("", "/", &with);
    if bytes > crate::queue::MAX_REQUEST_BYTES {
        return Err(Error::RequestTooLarge {
            bytes,
            limit: crate::queue::MAX_REQUEST_BYTES,
        });
    }
    Ok(())
}

/// A term of leadership: what [`FencedElection::campaign`] returns. A cheap clone: every
/// clone is the same term, and it ends with [`resign`](Leadership::resign) or when the last
/// clone is dropped (resigned in the background). It dereferences to the leader's [`Held`]:
/// [`check`](Held::check) before each side effect, the cancellation token, [`lost`](Held::lost),
/// jeopardy.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
/// let leadership = election.campaign("host-a").await?;
/// leadership.check()?;
/// leadership.proclaim("serving at 10.0.0.7:8080").await?;
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Leadership {
    inner: Arc<Term>,
}

#[derive(Debug)]
struct Term {
    held: Held,
    guard: tokio::sync::Mutex<Option<LockGuard>>,
    value: Arc<str>,
    client: zk::Client,
}

impl std::ops::Deref for Leadership {
    type Target = Held;

    fn deref(&self) -> &Held {
        &self.inner.held
    }
}

impl Leadership {
    /// This leader's epoch: its node's fencing token, strictly greater than every earlier
    /// leader's (also across Curator `LeaderLatch` leaders on the same path). Give
    /// storage with every write: its [`ticket`](crate::Held::ticket) (scope: the election path,
    /// token: the epoch) to a fence in [`crate::fence`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(leadership: zkfence::Leadership) {
    /// let ticket = leadership.ticket(); // for a fence: scope = the election path, token = the epoch
    /// assert_eq!(ticket.token(), leadership.epoch());
    /// # }
    /// ```
    pub fn epoch(&self) -> FencingToken {
        self.inner.held.token()
    }

    /// Publishes `data` as the leader's value, which [`FencedElection::leader`] and observers
    /// report instead of the campaign's data; fenced by the leader's node: the write commits
    /// only while it exists (a deposed leader's proclaim fails with
    /// [`Error::LockLost`]).
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`] when the node is gone (leadership lost); ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one transaction, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(leadership: zkfence::Leadership) -> zkfence::Result<()> {
    /// leadership.proclaim("serving at 10.0.0.7:8080").await?;
    /// # Ok(()) }
    /// ```
    pub async fn proclaim(&self, data: impl Into<Vec<u8>>) -> Result<()> {
        let term = &self.inner;
        self.check()?;
        let mut value = self.epoch().as_u64().to_string().into_bytes();
        value.push(b'\n');
        value.extend(data.into());
        let (client, node, path) = (&term.client, term.held.node_path(), &*term.value);
        let session = client.session_id();
        let failed = |err| Error::from_request("proclaim", path, session, err);
        // Set the value; if it is missing, create it; if someone created it meanwhile, set.
        for create in [false, true, false] {
            let write = || fenced_write(client, node, path, &value, create);
            match retrying(client, write).await?.map_err(failed)? {
                Ok(()) => return Ok(()),
                Err(ProclaimFailure::NodeGone) => {
                    return Err(Error::LockLost(crate::LossReason::NodeDeleted))
                }
                Err(ProclaimFailure::ValueMissing | ProclaimFailure::Exists) => {}
                Err(ProclaimFailure::Other(err)) => return Err(failed(err)),
            }
        }
        Err(failed(zk::Error::UnexpectedError(
            "the proclaimed value kept appearing and vanishing".into(),
        )))
    }

    /// Ends the term: deletes the candidate node (a plain delete, which Curator participants
    /// watch for), awaited, and with it the proclaimed value if this term wrote it. Other
    /// clones of this leadership end with it.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters: if dropped before the delete is confirmed, the
    /// node is deleted in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(leadership: zkfence::Leadership) -> zkfence::Result<()> {
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub async fn resign(self) -> Result<()> {
        let term = &self.inner;
        let Some(guard) = term.guard.lock().await.take() else {
            return Ok(());
        };
        let (client, path) = (&term.client, &*term.value);
        // Our node goes first, so no observer sees this term without its value in between;
        // the value after it, only at the version that holds our epoch's proclamation (a
        // later leader's write changes the version, and the delete then fails harmlessly).
        let ours = match client.get_data(path).await {
            Ok((data, stat)) => proclaimed_for(self.epoch(), Some((data, stat))).map(|_| stat),
            Err(_) => None,
        };
        let released = guard.release().await;
        if let Some(stat) = ours {
            let _ = client.delete(path, Some(stat.version)).await;
        }
        released
    }
}

impl crate::section::Guarded for Leadership {
    type Handle = Leadership;

    fn handle(&self) -> Leadership {
        self.clone()
    }

    /// Nothing: the only section over a leadership is [`term`]'s, which resigns itself after
    /// it, to tell a loss found by the resignation from `work`'s own error.
    fn release(self) -> impl Future<Output = Result<()>> + Send {
        std::future::ready(Ok(()))
    }
}

impl crate::section::Fenceable for Leadership {
    fn check_hold(&self) -> std::result::Result<(), crate::watchdog::CheckError> {
        self.inner.held.check_hold()
    }

    fn steady(&self) -> impl Future<Output = Result<()>> + Send {
        self.inner.held.steady()
    }

    fn cancellation_token(&self) -> CancellationToken {
        self.inner.held.cancellation_token()
    }
}

/// How a fenced write of the proclaimed value failed.
enum ProclaimFailure {
    /// Our node is gone: no longer the leader.
    NodeGone,
    /// The value node does not exist yet.
    ValueMissing,
    /// It was created meanwhile.
    Exists,
    Other(zk::Error),
}

/// Writes (or creates) the value at `path`, in one transaction with a check that `node`
/// exists. `Ok(Ok(()))` when committed.
async fn fenced_write(
    client: &zk::Client,
    node: &str,
    path: &str,
    value: &[u8],
    create: bool,
) -> std::result::Result<std::result::Result<(), ProclaimFailure>, zk::Error> {
    let mut multi = client.new_multi_writer();
    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let added = multi
        .add_check_version(node, -1)
        .and_then(|()| match create {
            true => multi.add_create(path, value, &options),
            false => multi.add_set_data(path, value, None),
        });
    if let Err(err) = added {
        return Ok(Err(ProclaimFailure::Other(err)));
    }
    Ok(match multi.commit().await {
        Ok(_) => Ok(()),
        Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) => {
            Err(ProclaimFailure::NodeGone)
        }
        Err(zk::MultiWriteError::OperationFailed { source, .. }) => Err(match source {
            zk::Error::NoNode => ProclaimFailure::ValueMissing,
            zk::Error::NodeExists => ProclaimFailure::Exists,
            err => ProclaimFailure::Other(err),
        }),
        Err(err) => {
            let err = zk::Error::from(err);
            if is_connection_error(&err) {
                return Err(err);
            }
            Err(ProclaimFailure::Other(err))
        }
    })
}

/// The leader of `election`'s path, read as [`FencedLock::holders`] reads a lock's holders
/// (one listing, then the holder's node), with the proclaimed value, read beside the holder's
/// node, if the leader wrote it.
async fn read_leader(election: &FencedLock, value: &str) -> Result<Option<Leader>> {
    let client = election.client();
    loop {
        let holding = match election.holding_nodes().await {
            Ok(holding) => holding,
            Err(Error::NoParent { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Some(head) = candidate(holding) else {
            return Ok(None);
        };
        let (holder, proclaimed) = futures_util::future::join(
            election.read_contenders(std::slice::from_ref(&head)),
            retrying(client, || client.get_data(value)),
        )
        .await;
        match holder?.pop() {
            Some(holder) => return Ok(Some(leader_of(holder, proclaimed?.ok()))),
            // Gone between the listing and the read: look again.
            None => continue,
        }
    }
}

/// The leader in a listing: the candidate that holds by the queue's own rule (nothing queued
/// ahead of it: [`Kind::holders`], which [`FencedLock::holders`] applies), with its sequence.
fn head(children: Vec<String>) -> Option<(String, i32)> {
    candidate(Kind::holders(names::queue_order(children), None))
}

/// The election candidate (`latch-`) among the holders of a listing.
fn candidate(holding: Vec<(String, i32)>) -> Option<(String, i32)> {
    (holding.into_iter()).find(|(name, _)| names::marker_of(name) == Some(LATCH_NAME))
}

/// The leader whose node a listing and a read found (`sequence`, and `data` and `stat` of the
/// node `node`), with the value it proclaimed if the read found one.
fn leader(
    node: String,
    sequence: i32,
    data: Vec<u8>,
    stat: zk::Stat,
    proclaimed: Option<(Vec<u8>, zk::Stat)>,
) -> Leader {
    let holder = Contender {
        node,
        token: FencingToken::of_node(sequence, stat.czxid),
        session_id: zk::SessionId(stat.ephemeral_owner),
        data,
        created_ms: stat.ctime,
    };
    leader_of(holder, proclaimed)
}

/// The leader that `holder` is, with the value it proclaimed if `proclaimed` is its.
fn leader_of(holder: Contender, proclaimed: Option<(Vec<u8>, zk::Stat)>) -> Leader {
    Leader {
        epoch: holder.token,
        data: proclaimed_for(holder.token, proclaimed).unwrap_or(holder.data),
        session_id: holder.session_id,
        node: holder.node,
    }
}

/// The proclaimed value, if the leader of `epoch` wrote it: `<epoch>\n<value>`.
fn proclaimed_for(epoch: FencingToken, read: Option<(Vec<u8>, zk::Stat)>) -> Option<Vec<u8>> {
    let (data, _) = read?;
    let at = data.iter().position(|b| *b == b'\n')?;
    let written_by: u64 = std::str::from_utf8(&data[..at]).ok()?.parse().ok()?;
    (written_by == epoch.as_u64()).then(|| data[at + 1..].to_vec())
}

/// Leader changes as a watch sees them (see [`FencedElection::observe`]).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
/// let mut observer = election.observe();
/// let current = observer.next().await?;
/// let next_change = observer.next().await?;
/// # let _ = (current, next_change); Ok(()) }
/// ```
pub struct Observer {
    client: zk::Client,
    path: Arc<str>,
    value: Arc<str>,
    last: Option<Leader>,
    started: bool,
    /// The watches set by the last look: on the leader's node and the value (or, with no
    /// leader, on the election path's children).
    armed: Vec<NodeWatch>,
    /// The leader's node as the last look read it (name, sequence, data, stat), while it
    /// leads: a new proclamation is read against it, without listing the candidates again.
    head: Option<(String, i32, Vec<u8>, zk::Stat)>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("path", &self.path)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// The current leader on the first call; after that, waits for the next change and
    /// returns the leader then (`None` while nobody leads).
    ///
    /// # Errors
    ///
    /// The session's end; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the watches stay with the observer, and the next call goes on from them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut observer: zkfence::Observer) -> zkfence::Result<()> {
    /// loop {
    ///     match observer.next().await? {
    ///         Some(leader) => println!("epoch {}", leader.epoch),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            if self.started && !self.armed.is_empty() {
                let armed = std::mem::take(&mut self.armed);
                let (event, _, rest) = futures_util::future::select_all(armed).await;
                if let Some(err) =
                    Error::from_session_state(event.session_state, self.client.session_id())
                {
                    self.armed = rest;
                    return Err(err);
                }
                // A new proclamation of the same leader: its value is read again, and nothing
                // else (the leader's node keeps its watch; no listing of the candidates).
                // (Its value deleted, by hand or after an old term's resignation: look again.)
                let proclamation = event.path == *self.value
                    && matches!(
                        event.event_type,
                        zk::EventType::NodeDataChanged | zk::EventType::NodeCreated
                    );
                let current = match (&self.head, proclamation) {
                    (Some(head), true) => {
                        let head = head.clone();
                        self.armed = rest;
                        let proclaimed = self.watch_value().await?;
                        Some(leader(head.0, head.1, head.2, head.3, proclaimed))
                    }
                    _ => {
                        // Watches set again on the same paths first, so dropping the old ones
                        // costs no removal request.
                        let current = self.look().await?;
                        drop(rest);
                        current
                    }
                };
                if current != self.last {
                    self.last = current.clone();
                    return Ok(current);
                }
                continue;
            }
            let current = self.look().await?;
            if !self.started || current != self.last {
                self.started = true;
                self.last = current.clone();
                return Ok(current);
            }
        }
    }

    /// Reads the leader and sets the watches for the next change: on the leader's node (its
    /// deletion ends its term; later candidates queue behind it and change nothing), on the
    /// proclaimed value, and, while nobody leads, on the election path's children.
    async fn look(&mut self) -> Result<Option<Leader>> {
        let (client, path) = (self.client.clone(), self.path.clone());
        let (client, path) = (&client, &*path);
        let session = client.session_id();
        self.head = None;
        loop {
            let children = match retrying(client, || client.list_children(path)).await? {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return self.await_creation().await,
                Err(err) => return Err(Error::from_request("list", path, session, err)),
            };
            let Some((name, sequence)) = head(children) else {
                match self.await_candidate().await? {
                    true => continue,
                    false => return Ok(None),
                }
            };
            let node = child_path(path, &name);
            let (data, stat) = match retrying(client, || client.get_and_watch_data(&node)).await? {
                Ok((data, stat, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    (data, stat)
                }
                // Gone between the listing and the read: look again.
                Err(zk::Error::NoNode) => continue,
                Err(err) => return Err(Error::from_request("get", &node, session, err)),
            };
            let proclaimed = self.watch_value().await?;
            self.head = Some((name.clone(), sequence, data.clone(), stat));
            return Ok(Some(leader(name, sequence, data, stat, proclaimed)));
        }
    }

    /// With no election path: a watch for its creation. `None`: nobody leads.
    async fn await_creation(&mut self) -> Result<Option<Leader>> {
        let (client, path) = (&self.client, &*self.path);
        match retrying(client, || client.check_and_watch_stat(path)).await? {
            Ok((_, watcher)) => self.armed.push(Box::pin(watch_changed(watcher))),
            Err(err) => {
                return Err(Error::from_request(
                    "exists",
                    path,
                    client.session_id(),
                    err,
                ))
            }
        }
        Ok(None)
    }

    /// With no candidate: a watch on the path's children; `true` when one arrived meanwhile.
    async fn await_candidate(&mut self) -> Result<bool> {
        let (client, path) = (&self.client, &*self.path);
        let session = client.session_id();
        match retrying(client, || client.list_and_watch_children(path)).await? {
            Ok((children, watcher)) => {
                self.armed.push(Box::pin(watch_changed(watcher)));
                Ok(head(children).is_some())
            }
            Err(zk::Error::NoNode) => self.await_creation().await.map(|_| false),
            Err(err) => Err(Error::from_request("list", path, session, err)),
        }
    }

    /// The proclaimed value, watched (its creation too).
    async fn watch_value(&mut self) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let (client, value) = (&self.client, &*self.value);
        let session = client.session_id();
        loop {
            match retrying(client, || client.get_and_watch_data(value)).await? {
                Ok((data, stat, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    return Ok(Some((data, stat)));
                }
                Err(zk::Error::NoNode) => {}
                Err(err) => return Err(Error::from_request("get", value, session, err)),
            }
            match retrying(client, || client.check_and_watch_stat(value)).await? {
                Ok((None, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    return Ok(None);
                }
                // Created between the two reads: read it.
                Ok((Some(_), _)) => continue,
                Err(err) => return Err(Error::from_request("exists", value, session, err)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_of_a_listing_is_the_candidate_nothing_is_queued_ahead_of() {
        let latch = |seq: i32| format!("_c_0f-{LATCH_NAME}{seq:010}");
        let listing = vec![latch(12), VALUE_NAME.to_owned(), latch(7), latch(9)];
        assert_eq!(head(listing), Some((latch(7), 7)));
        assert_eq!(head(vec![VALUE_NAME.to_owned()]), None);
        // A node of another kind queued ahead holds, so no candidate leads (as a campaign
        // would wait for it).
        let mut mixed = names::mutex_names(&[3]);
        mixed.push(latch(5));
        assert_eq!(head(mixed), None);
    }
}
