//! [`FencedElection`]: leader election on the fair queue, with the leader's fencing token as
//! its epoch; [`Leadership`], [`Leader`], [`Observer`].
//!
//! The files: `mod.rs` ([`FencedElection`]: campaigns, [`lead`](FencedElection::lead)),
//! `term.rs` (one term of `lead`, the backoff between campaigns), `leadership.rs`
//! ([`Leadership`], the leader's term: its epoch, proclaim, resign), `leader.rs` ([`Leader`],
//! who leads as a listing and a read show it), `observer.rs` ([`Observer`], leader changes as
//! a watch sees them).

mod leader;
mod leadership;
mod observer;
mod term;

pub use leader::Leader;
pub use leadership::Leadership;
pub use observer::Observer;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use self::leader::{read_leader, VALUE_NAME};
use self::term::{backoff, term, TermEnd};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::FencedLock;
use crate::options::LockOptions;
use crate::queue::kind::Kind;
use crate::requests::nodes::child_path;
use crate::wait::Wait;

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
        Leadership::new(guard, self.value.clone(), self.lock.client().clone())
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
        Observer::new(
            self.lock.client().clone(),
            self.path().into(),
            self.value.clone(),
        )
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
