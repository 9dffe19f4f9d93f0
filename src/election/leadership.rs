//! [`Leadership`]: a term of leadership, the leader's guard: its epoch, the value it
//! proclaims (a fenced write), its resignation.

use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use zookeeper_client as zk;

use super::leader::proclaimed_for;
use crate::error::{Error, Result};
use crate::guard::{Held, LockGuard};
use crate::requests::retry::{is_connection_error, retrying};
use crate::token::FencingToken;

/// A term of leadership: what [`FencedElection::campaign`](crate::FencedElection::campaign)
/// returns. A cheap clone: every clone is the same term, and it ends with
/// [`resign`](Leadership::resign) or when the last clone is dropped (resigned in the
/// background). It dereferences to the leader's [`Held`]:
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
    /// The term that `guard`, a won campaign's, begins; `value`: the path of the election's
    /// proclaimed value.
    pub(super) fn new(guard: LockGuard, value: Arc<str>, client: zk::Client) -> Leadership {
        Leadership {
            inner: Arc::new(Term {
                held: guard.held(),
                guard: tokio::sync::Mutex::new(Some(guard)),
                value,
                client,
            }),
        }
    }

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

    /// Publishes `data` as the leader's value, which
    /// [`FencedElection::leader`](crate::FencedElection::leader) and observers report instead
    /// of the campaign's data; fenced by the leader's node: the write commits only while it
    /// exists (a deposed leader's proclaim fails with [`Error::LockLost`]).
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

    /// Nothing: the only section over a leadership is [`term`](super::term::term)'s, which
    /// resigns itself after it, to tell a loss found by the resignation from `work`'s own error.
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
