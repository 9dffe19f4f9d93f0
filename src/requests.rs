//! What every request to ZooKeeper needs here: telling a lost outcome from a refusal, waiting
//! for a reconnect, one retry loop for both, and the deletes, look-ups and parent creation the
//! queue protocol is built from.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};

/// The data a marked release writes into its node just before deleting it (lock-delay, and
/// the handoff: see `crate::queue`).
pub(crate) const RELEASED: &[u8] = b"released";

/// What a revocation request writes into a holder's node: Apache Curator's marker
/// (`LockInternals.REVOKE_MESSAGE`), so that Curator's `Revoker` and zkfence reach each other's
/// holders.
pub(crate) const REVOKE: &[u8] = b"__REVOKE__";

/// Joins a parent path and a child name.
pub(crate) fn child_path(parent: &str, name: &str) -> String {
    let mut path = String::with_capacity(parent.len() + 1 + name.len());
    path.push_str(parent);
    path.push('/');
    path.push_str(name);
    path
}

/// A pending `OneshotWatcher::changed()` on a node.
pub(crate) type NodeWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// Runs `request` until a server answers it, reconnecting across broken connections (whose
/// outcome is unknown, so the request is sent again). `Ok(answer)` is the server's answer, an
/// error included; `Err` means the session ended first.
///
/// Only for requests that are safe to repeat (reads, and writes whose repetition is detected,
/// such as a delete meeting `NoNode`).
pub(crate) async fn retrying<T, F, Fut>(
    client: &zk::Client,
    mut request: F,
) -> Result<std::result::Result<T, zk::Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, zk::Error>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            answer => return Ok(answer),
        }
    }
}

/// Whether a request that failed with `err` reached a server, which then saw the session
/// (errors `zookeeper-client` makes up itself, without a server, do not count).
pub(crate) fn answered_by_server(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::NoNode
            | zk::Error::NoAuth
            | zk::Error::BadVersion
            | zk::Error::NodeExists
            | zk::Error::NotEmpty
            | zk::Error::NoChildrenForEphemerals
            | zk::Error::InvalidAcl
            | zk::Error::QuotaExceeded
            | zk::Error::RuntimeInconsistent
    )
}

/// Whether a request failed because the connection broke, so its outcome is unknown and it
/// may be retried once the client has reconnected. `zookeeper-client` 0.11 reports a clean
/// close as `ConnectionLoss`, but socket errors and its own "no response from connection"
/// timeout as `Custom`; all of them mean the same thing here.
pub(crate) fn is_connection_error(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// Waits until the client is connected again after a ConnectionLoss, or fails once the
/// session is over. A short pause first keeps a retry loop from spinning while the client has
/// not yet noticed the disconnect.
pub(crate) async fn await_reconnect(client: &zk::Client, attempt: &mut u32) -> Result<()> {
    let pause = Duration::from_millis(5u64 << (*attempt).min(5));
    *attempt += 1;
    tokio::time::sleep(pause).await;
    let mut states = client.state_watcher();
    loop {
        let state = states.state();
        if let Some(err) = Error::from_session_state(state, client.session_id()) {
            return Err(err);
        }
        if state == zk::SessionState::Disconnected {
            states.changed().await;
        } else {
            return Ok(());
        }
    }
}

/// Why our node vanished: `Ok(())` if the session is still alive (someone deleted the node),
/// the session's error if it is over. A session closed from outside deletes its ephemeral
/// nodes, and fires their watches, before its connection is closed, so a node's deletion can be
/// the first sign of an expiry. One `sync` tells the two apart.
pub(crate) async fn session_alive(client: &zk::Client, path: &str) -> Result<()> {
    match retrying(client, || client.sync(path)).await? {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(err) => Err(Error::from_request("sync", path, client.session_id(), err)),
    }
}

/// What [`delete_node`] found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// The server answered our delete: we deleted the node.
    Confirmed,
    /// The node was gone before our first attempt.
    Absent,
    /// An attempt lost its reply, and a retry found the node gone: either our delete went
    /// through, or someone else deleted the node first. Nothing the server keeps tells the two
    /// apart (a deletion leaves no trace of who made it).
    Unconfirmed,
}

/// Deletes `path`, retrying across ConnectionLoss until the node is known to be gone or the
/// session is over; see [`Deleted`] for what the outcome proves. (Its own loop rather than
/// [`retrying`]: whether an earlier attempt lost its reply is part of the answer.)
pub(crate) async fn delete_node(client: &zk::Client, path: &str, mark: bool) -> Result<Deleted> {
    let mut attempt = 0;
    loop {
        let deleted = if mark {
            // The release marker: the data change fires the successor's watch instead of the
            // deletion, in the same transaction, so the successor knows it was released (see
            // `crate::queue`'s "The handoff").
            let mut multi = client.new_multi_writer();
            let marked = match multi
                .add_set_data(path, RELEASED, None)
                .and_then(|()| multi.add_delete(path, None))
            {
                Ok(()) => multi.commit().await.map(|_| ()).map_err(zk::Error::from),
                Err(err) => Err(err),
            };
            match marked {
                // The node's ACL does not let us write it: delete it plainly.
                Err(zk::Error::NoAuth) => client.delete(path, None).await,
                other => other,
            }
        } else {
            client.delete(path, None).await
        };
        match deleted {
            Ok(()) => return Ok(Deleted::Confirmed),
            Err(zk::Error::NoNode) if attempt == 0 => return Ok(Deleted::Absent),
            Err(zk::Error::NoNode) => return Ok(Deleted::Unconfirmed),
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            Err(err) => {
                return Err(Error::from_request(
                    "delete",
                    path,
                    client.session_id(),
                    err,
                ))
            }
        }
    }
}

/// After a create whose reply was lost: our node in `parent` whose name starts with `prefix`
/// (our UUID) **and** whose `ephemeralOwner` is our session, with its `Stat`. Another
/// session's node is never taken for ours.
pub(crate) async fn find_own_node(
    client: &zk::Client,
    parent: &str,
    prefix: &str,
) -> Result<Option<(String, zk::Stat)>> {
    // After a reconnect, the server we reach may lag behind the one that took our create; sync
    // first so that a create already applied is in the listing.
    let listing = || async {
        let synced = client.sync(parent);
        let listed = client.list_children(parent);
        let _ = synced.await;
        listed.await
    };
    let children = match retrying(client, listing).await? {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(err) => {
            return Err(Error::from_request(
                "list",
                parent,
                client.session_id(),
                err,
            ))
        }
    };
    let session = client.session_id().0;
    for name in children.into_iter().filter(|name| name.starts_with(prefix)) {
        let path = child_path(parent, &name);
        match retrying(client, || client.get_data(&path)).await? {
            Ok((_, stat)) if stat.ephemeral_owner == session => return Ok(Some((name, stat))),
            Ok(_) | Err(zk::Error::NoNode) => {}
            Err(err) => return Err(Error::from_request("get", &path, client.session_id(), err)),
        }
    }
    Ok(None)
}

/// Creates the missing ancestors of `path` and `path` itself (`mkdir -p`), with `mode`
/// (persistent or container) and `acls`.
pub(crate) async fn create_parents(
    client: &zk::Client,
    path: &str,
    mode: zk::CreateMode,
    acls: &[zk::Acl],
) -> Result<()> {
    let options = mode.with_acls(zk::Acls::new(acls));
    // Walk down from the first missing ancestor; most calls find only the last one missing.
    let mut end = path.len();
    loop {
        // A create repeated after a lost reply meets NodeExists: the same as success here.
        match retrying(client, || client.create(&path[..end], &[], &options)).await? {
            Ok(_) | Err(zk::Error::NodeExists) => {
                if end == path.len() {
                    return Ok(());
                }
                end = path[end + 1..]
                    .find('/')
                    .map_or(path.len(), |i| end + 1 + i);
            }
            Err(zk::Error::NoNode) => match path[..end].rfind('/') {
                Some(i) if i > 0 => end = i,
                _ => {
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    })
                }
            },
            Err(err) => {
                return Err(Error::from_request(
                    "create",
                    &path[..end],
                    client.session_id(),
                    err,
                ))
            }
        }
    }
}

/// `OneshotWatcher::changed()`, with a panic inside it turned into a `Closed` session event:
/// `zookeeper-client` 0.11 unwraps the watch's channel, which panics if the session task went
/// away without a last event (its runtime shut down, say).
pub(crate) async fn watch_changed(watcher: zk::OneshotWatcher) -> zk::WatchedEvent {
    CatchUnwind(Box::pin(watcher.changed()))
        .await
        .unwrap_or_else(|| zk::WatchedEvent::new_session(zk::SessionState::Closed))
}

/// Polls a future, turning a panic inside it into `None`.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx))) {
            Ok(std::task::Poll::Ready(out)) => std::task::Poll::Ready(Some(out)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(None),
        }
    }
}
