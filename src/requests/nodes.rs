//! The node operations the recipes are built from: a child's path, a delete retried until its
//! outcome is known, our own node found again after a create lost its reply, and a path's
//! missing parents created.

use zookeeper_client as zk;

use super::retry::{await_reconnect, is_connection_error, retrying};
use crate::error::{Error, Result};

/// Joins a parent path and a child name.
pub(crate) fn child_path(parent: &str, name: &str) -> String {
    let mut path = String::with_capacity(parent.len() + 1 + name.len());
    path.push_str(parent);
    path.push('/');
    path.push_str(name);
    path
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
///
/// With a `marker`, the node's data is set to it in the same transaction as the delete, so a
/// data watch on the node fires on the delete (the queue's release marker: see `crate::queue`'s
/// "The handoff"); a node whose ACL does not let us write it is deleted plainly.
pub(crate) async fn delete_node(
    client: &zk::Client,
    path: &str,
    marker: Option<&[u8]>,
) -> Result<Deleted> {
    let mut attempt = 0;
    loop {
        let deleted = match marker {
            Some(marker) => marked_delete(client, path, marker).await,
            None => client.delete(path, None).await,
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

/// One attempt of a marked delete: sets the node's data to `marker` and deletes it in one
/// `multi`; a plain delete when the node's ACL refuses the write.
async fn marked_delete(
    client: &zk::Client,
    path: &str,
    marker: &[u8],
) -> std::result::Result<(), zk::Error> {
    let mut multi = client.new_multi_writer();
    let marked = match multi
        .add_set_data(path, marker, None)
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
