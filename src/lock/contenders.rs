//! The queue as it stands: [`Contender`], [`FencedLock::contenders`] and
//! [`FencedLock::holders`], and the reads under them.

use std::borrow::Cow;

use zookeeper_client as zk;

use super::fenced_lock::FencedLock;
use crate::error::{Error, Result};
use crate::mode::Mode;
use crate::queue::kind::Kind;
use crate::requests::nodes::child_path;
use crate::requests::retry::retrying;
use crate::token::FencingToken;

/// One node in a lock's queue, as [`FencedLock::contenders`] reports it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// for (i, c) in lock.contenders().await?.iter().enumerate() {
///     let role = if i == 0 { "holder" } else { "waiting" };
///     println!("{role} {} token {} session {} ({})", c.node, c.token, c.session_id, c.identity());
/// }
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contender {
    /// The node's name under the lock path.
    pub node: String,
    /// Its fencing token (sequence and creation zxid).
    pub token: FencingToken,
    /// The session that owns the (ephemeral) node.
    pub session_id: zk::SessionId,
    /// The node's data: an identity such as `host:… pid:…`.
    pub data: Vec<u8>,
    /// When the node was created, in milliseconds since the Unix epoch (server clock).
    pub created_ms: i64,
}

impl Contender {
    /// The node data as text (lossy UTF-8).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// if let Some(holder) = lock.contenders().await?.first() {
    ///     println!("held by {}", holder.identity());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn identity(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.data)
    }
}

impl<M: Mode> FencedLock<M> {
    /// The queue, in order: the holder first, then the waiters (for a read lock or a
    /// semaphore, several of the first nodes may hold). Includes Curator's and other clients'
    /// nodes named `…lock-<seq>`, `…__READ__<seq>`, `…__WRIT__<seq>` or `…lease-<seq>`.
    ///
    /// # Errors
    ///
    /// [`Error::NoParent`] when the lock path does not exist (nobody has used it, or it was
    /// reaped), ZooKeeper errors otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// let queue = lock.contenders().await?;
    /// if let Some(holder) = queue.first() {
    ///     println!("holder {} token {}", holder.node, holder.token.as_i64());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn contenders(&self) -> Result<Vec<Contender>> {
        let ordered = self.queue_in_order().await?;
        self.read_contenders(&ordered).await
    }

    /// The lock path's queue nodes in queue order, with their sequences.
    async fn queue_in_order(&self) -> Result<Vec<(String, i32)>> {
        let client = &self.queue.client;
        let path = &*self.queue.path;
        let session = client.session_id();
        match retrying(client, || client.list_children(path)).await? {
            Ok(children) => Ok(crate::queue::names::queue_order(children)),
            Err(zk::Error::NoNode) => Err(Error::NoParent {
                path: path.to_owned(),
            }),
            Err(err) => Err(Error::from_request("list", path, session, err)),
        }
    }

    /// The data and `Stat` of `nodes` (in queue order), read in multi-reads of a few hundred
    /// (replies far below the server's 1 MiB `jute.maxbuffer`); a node gone meanwhile is left
    /// out (it is no longer queued). A node that cannot be read for another reason (its ACL
    /// refuses us) is an error naming that node: leaving it out would report a holder as gone
    /// and send the election's leader read round again without end.
    pub(crate) async fn read_contenders(&self, nodes: &[(String, i32)]) -> Result<Vec<Contender>> {
        let client = &self.queue.client;
        let path = &*self.queue.path;
        let session = client.session_id();
        let mut out = Vec::with_capacity(nodes.len());
        for chunk in nodes.chunks(256) {
            let paths: Vec<String> = (chunk.iter())
                .map(|(name, _)| child_path(path, name))
                .collect();
            let results = match retrying(client, || read_all(client, &paths)).await? {
                Ok(results) => results,
                Err(err) => return Err(Error::from_request("get", path, session, err)),
            };
            for ((name, seq), result) in chunk.iter().zip(results) {
                match result {
                    zk::MultiReadResult::Data { data, stat } => out.push(Contender {
                        node: name.clone(),
                        token: FencingToken::of_node(*seq, stat.czxid),
                        session_id: zk::SessionId(stat.ephemeral_owner),
                        data,
                        created_ms: stat.ctime,
                    }),
                    zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    } => {}
                    zk::MultiReadResult::Error { err } => {
                        let node = child_path(path, name);
                        return Err(Error::from_request("get", &node, session, err));
                    }
                    // A children reply, which a get of data never gets.
                    _ => {}
                }
            }
        }
        Ok(out)
    }

    /// The nodes that hold the lock now: those that nothing ahead blocks, by each node's own
    /// kind (the mutex's or a writer's one holder, the readers ahead of the first writer, a
    /// semaphore's first leases by this semaphore's count). Includes Curator's nodes.
    ///
    /// # Errors
    ///
    /// As [`contenders`](Self::contenders).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// for holder in lock.holders().await? {
    ///     lock.request_revocation(&format!("{}/{}", lock.path(), holder.node)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Contender>> {
        let holding = self.holding_nodes().await?;
        self.read_contenders(&holding).await
    }

    /// The nodes that hold the lock now, as one listing shows them (see
    /// [`holders`](Self::holders)), in queue order with their sequences: one pass over the
    /// listing in queue order, linear in the queue's length, whatever the number of waiters.
    /// [`read_contenders`](Self::read_contenders) reads them.
    pub(crate) async fn holding_nodes(&self) -> Result<Vec<(String, i32)>> {
        Ok(Kind::holders(self.queue_in_order().await?, self.permits()))
    }
}

/// Reads the data of `nodes` in one multi-read (nodes gone by then come back as errors).
async fn read_all(
    client: &zk::Client,
    nodes: &[String],
) -> std::result::Result<Vec<zk::MultiReadResult>, zk::Error> {
    let mut reader = client.new_multi_reader();
    for node in nodes {
        reader.add_get_data(node)?;
    }
    reader.commit().await
}
