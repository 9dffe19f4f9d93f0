//! Revocation, Apache Curator's protocol: [`FencedLock::request_revocation`] asks a holder to
//! let go, [`FencedLock::force_revocation`] takes the lock from it.

use zookeeper_client as zk;

use super::fenced_lock::FencedLock;
use crate::error::{Error, Result};
use crate::mode::Mode;
use crate::queue::kind::Kind;
use crate::requests::nodes::{delete_node, Deleted};
use crate::requests::retry::retrying;
use crate::watchdog::REVOKE;

impl<M: Mode> FencedLock<M> {
    /// Asks the holder of `node` (its full path, as
    /// [`Held::node_path`](crate::Held::node_path) gives it) to let go: writes Apache Curator's
    /// revocation marker (`__REVOKE__`) into the node, as Curator's `Revoker.attemptRevoke`
    /// does. A zkfence holder learns of it through
    /// [`Held::revocation_requested`](crate::Held::revocation_requested); a Curator holder
    /// made revocable (`InterProcessMutex.makeRevocable`) through its listener. The holder
    /// decides: nothing is taken from it. Only a node that holds the lock is written to (a waiter is left
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
}
