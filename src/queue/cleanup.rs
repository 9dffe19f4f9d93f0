//! Removing our node on every way out: the [`PendingNode`] until the acquire succeeds (a
//! timeout, a refusal, the acquire future dropped), then the [`Release`] that a grant carries
//! (the holder's release, awaited or in the background when the guard is dropped), with the
//! release marker ([`RELEASED`]) when the delete must say "released".

use std::future::Future;
use std::sync::Arc;

use zookeeper_client as zk;

use crate::error::Result;
use crate::metrics::BACKGROUND_CLEANUPS_TOTAL;
use crate::queue::in_process::InProcessTurn;
use crate::requests::nodes::{child_path, delete_node, find_own_node, Deleted};

/// The data a marked release writes into its node in the transaction that deletes it
/// (lock-delay, and the handoff: see `crate::queue`).
pub(crate) const RELEASED: &[u8] = b"released";

/// The marker a delete writes: [`RELEASED`] when `mark`, else none (a plain delete).
fn marker(mark: bool) -> Option<&'static [u8]> {
    mark.then_some(RELEASED)
}

/// What of ours may exist in the queue while an acquire runs.
#[derive(Debug)]
enum Leftovers {
    /// Nothing: no create sent yet since the last refusal.
    Nothing,
    /// A create was sent and its reply has not arrived: a node named with our prefix may exist.
    Unnamed,
    /// Our node, by its path on the server.
    Node(String),
}

/// Our queue node while an acquire runs: deleted on every way out that is not a grant,
/// including the acquire future being dropped. Its state changes only through its methods.
///
/// It deletes with the session's handle at the server's root, and so keeps the paths as the
/// server knows them (the chroot included): the release it becomes is the one mechanism for
/// every chroot a session's holds were taken under.
#[derive(Debug)]
pub(crate) struct PendingNode {
    /// The session's client at the server's root.
    client: Arc<zk::Client>,
    /// The lock path on the server.
    parent: String,
    /// `_c_<uuid>-<marker>`: finds the node when the create's reply was lost.
    prefix: String,
    ours: Leftovers,
    /// Delete with the release marker: only with lock-delay on, and never for the kinds whose
    /// marked release admits a successor (see `queue::handoff`'s "The handoff").
    mark: bool,
}

impl PendingNode {
    /// A pending node under `parent` (its path on the server), to be deleted with `client` (at
    /// the server's root).
    pub(crate) fn new(client: Arc<zk::Client>, parent: String, prefix: String, mark: bool) -> Self {
        PendingNode {
            client,
            parent,
            prefix,
            ours: Leftovers::Unnamed,
            mark,
        }
    }

    /// The name prefix of our node.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A create is about to be sent: from now on a node of ours may exist.
    pub(crate) fn sending_create(&mut self) {
        if !matches!(self.ours, Leftovers::Node(_)) {
            self.ours = Leftovers::Unnamed;
        }
    }

    /// The server refused our create: nothing of ours exists (an earlier create that lost its
    /// reply was looked for, after the reconnect, before this one was sent).
    pub(crate) fn refused(&mut self) {
        self.ours = Leftovers::Nothing;
    }

    /// Our node exists, named `name`.
    pub(crate) fn created(&mut self, name: &str) {
        self.ours = Leftovers::Node(child_path(&self.parent, name));
    }

    /// Whether a waiter that gives up from now on deletes with the marker.
    pub(crate) fn set_mark(&mut self, mark: bool) {
        self.mark = mark;
    }

    /// Deletes our node now (awaited), for `try_acquire`, timeouts and refusals.
    ///
    /// Keeps its state until the delete is confirmed: if this future is dropped while it waits
    /// for a reconnect, or the delete fails, the drop cleans up in the background.
    pub(crate) async fn remove(&mut self) -> Result<()> {
        match &self.ours {
            Leftovers::Nothing => {}
            Leftovers::Node(node) => {
                delete_node(&self.client, node, marker(self.mark)).await?;
            }
            Leftovers::Unnamed => {
                remove_by_prefix(&self.client, &self.parent, &self.prefix, self.mark).await?
            }
        }
        self.ours = Leftovers::Nothing;
        Ok(())
    }

    /// The acquire succeeded with our node `name`: it becomes the holder's, to be released
    /// with the marker when `mark`, and `turn` given up once it is deleted.
    pub(crate) fn into_release(
        mut self,
        name: &str,
        mark: bool,
        turn: Option<InProcessTurn>,
    ) -> Release {
        let node = match std::mem::replace(&mut self.ours, Leftovers::Nothing) {
            Leftovers::Node(node) => node.into(),
            // A grant comes after our create's reply ([`Self::created`]); named again all
            // the same rather than trusted.
            Leftovers::Nothing | Leftovers::Unnamed => child_path(&self.parent, name).into(),
        };
        Release {
            client: self.client.clone(),
            node,
            mark,
            turn,
            pending: true,
        }
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        let client = self.client.clone();
        let mark = self.mark;
        match std::mem::replace(&mut self.ours, Leftovers::Nothing) {
            Leftovers::Nothing => {}
            Leftovers::Node(node) => spawn_cleanup(client, node.into(), mark, None),
            Leftovers::Unnamed => {
                let (parent, prefix) = (
                    std::mem::take(&mut self.parent),
                    std::mem::take(&mut self.prefix),
                );
                spawn_task(async move {
                    let outcome = match remove_by_prefix(&client, &parent, &prefix, mark).await {
                        Ok(()) => "deleted",
                        Err(_) => "failed",
                    };
                    metrics::counter!(BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome).increment(1);
                });
            }
        }
    }
}

/// What the holder's release must do: delete its node (with the release marker when `mark`),
/// then give up the process's in-process turn. Dropped before [`Release::now`] confirmed the
/// delete, it deletes in the background.
#[derive(Debug)]
pub(crate) struct Release {
    /// The session's client at the server's root, shared with its other holds and its watchdog.
    client: Arc<zk::Client>,
    /// The node's path on the server (the chroot included), as the watchdog knows it too.
    node: Arc<str>,
    mark: bool,
    /// The in-process queue turn, given up only once the node is deleted, so the process's
    /// next contender does not queue behind its own stale node.
    turn: Option<InProcessTurn>,
    /// Whether the node may still be ours (the background delete on drop is needed).
    pending: bool,
}

impl Release {
    /// The node this release deletes, its path on the server (the chroot included).
    pub(crate) fn node(&self) -> &Arc<str> {
        &self.node
    }

    /// Deletes the node now, retried across ConnectionLoss until it is known gone or the
    /// session is over, then gives up the in-process turn. On another error the node may still
    /// be ours: the drop keeps trying in the background (with the turn). If this future is
    /// dropped before the delete is confirmed, the drop deletes in the background too.
    pub(crate) async fn now(&mut self) -> Result<Deleted> {
        let deleted = delete_node(&self.client, &self.node, marker(self.mark)).await;
        self.pending = matches!(&deleted, Err(err) if !err.is_session_terminal());
        if !self.pending {
            self.turn = None;
        }
        deleted
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.pending {
            let node = self.node.clone();
            spawn_cleanup(self.client.clone(), node, self.mark, self.turn.take());
        }
    }
}

/// Deletes every node of ours with `prefix` (a create retried after a lost reply can have
/// landed twice).
async fn remove_by_prefix(
    client: &zk::Client,
    parent: &str,
    prefix: &str,
    mark: bool,
) -> Result<()> {
    while let Some((name, _)) = find_own_node(client, parent, prefix).await? {
        delete_node(client, &child_path(parent, &name), marker(mark)).await?;
    }
    Ok(())
}

/// Deletes `node` (its path on the server; `client` is at the root) in a task of its own
/// (retrying across ConnectionLoss), with the release marker when `mark`; `turn` is given up
/// once the delete is done.
fn spawn_cleanup(client: Arc<zk::Client>, node: Arc<str>, mark: bool, turn: Option<InProcessTurn>) {
    spawn_task(async move {
        let _turn = turn;
        let node = &*node;
        let outcome = match delete_node(&client, node, marker(mark)).await {
            Ok(Deleted::Confirmed) => "deleted",
            Ok(Deleted::Absent) => "absent",
            Ok(Deleted::Unconfirmed) => "unconfirmed",
            Err(err) => {
                tracing::debug!(%node, cause = %err, "background delete failed; the node goes with the session");
                "failed"
            }
        };
        metrics::counter!(BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome).increment(1);
    });
}

fn spawn_task(task: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(task);
        }
        Err(_) => tracing::warn!(
            "no tokio runtime at drop; the lock node is removed when the session ends"
        ),
    }
}
