//! Our queue node until a guard owns it: deleted on every other way out (a timeout, a refusal,
//! the acquire future dropped), and the background deletes a dropped guard leaves behind.

use std::future::Future;

use zookeeper_client as zk;

use crate::error::Result;
use crate::metrics as m;
use crate::queue::in_process::InProcessTurn;
use crate::zk::{child_path, delete_node, find_own_node, Deleted};

/// Our queue node until it is handed to a guard: deleted on every other way out, including
/// the acquire future being dropped.
pub(crate) struct PendingNode {
    pub(crate) client: zk::Client,
    pub(crate) parent: String,
    /// `_c_<uuid>-lock-`: finds the node when the create's reply was lost.
    pub(crate) prefix: String,
    /// Full path once the create's reply arrived.
    pub(crate) node: Option<String>,
    /// Whether something of ours may exist and must be cleaned up.
    pub(crate) armed: bool,
    /// Delete with the release marker: only with lock-delay on, and never for the kinds whose
    /// marked release admits a successor (`withdrawal_marked`).
    pub(crate) mark: bool,
}

impl PendingNode {
    /// Deletes our node now (awaited), for `try_acquire` and timeouts.
    ///
    /// Stays armed until the delete is confirmed: if this future is dropped while it waits for
    /// a reconnect, or the delete fails, the drop cleans up in the background.
    pub(crate) async fn remove(&mut self) -> Result<()> {
        match &self.node {
            Some(node) => delete_node(&self.client, node, self.mark)
                .await
                .map(|_| ())?,
            None => remove_by_prefix(&self.client, &self.parent, &self.prefix, self.mark).await?,
        }
        self.armed = false;
        Ok(())
    }
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let mark = self.mark;
        match self.node.take() {
            Some(node) => spawn_cleanup(client, node, mark, None),
            None => {
                let (parent, prefix) = (
                    std::mem::take(&mut self.parent),
                    std::mem::take(&mut self.prefix),
                );
                spawn_task(async move {
                    let outcome = match remove_by_prefix(&client, &parent, &prefix, mark).await {
                        Ok(()) => "deleted",
                        Err(_) => "failed",
                    };
                    ::metrics::counter!(m::BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome)
                        .increment(1);
                });
            }
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
        delete_node(client, &child_path(parent, &name), mark).await?;
    }
    Ok(())
}

/// Deletes `node` in a task of its own (retrying across ConnectionLoss), with the release
/// marker when `mark`.
///
/// `turn`, the in-process queue turn of a dropped guard, is given up only once the delete is
/// done, so the process's next contender does not queue behind its own stale node.
pub(crate) fn spawn_cleanup(
    client: zk::Client,
    node: String,
    mark: bool,
    turn: Option<InProcessTurn>,
) {
    spawn_task(async move {
        let _turn = turn;
        let outcome = match delete_node(&client, &node, mark).await {
            Ok(Deleted::Confirmed) => "deleted",
            Ok(Deleted::Absent) => "absent",
            Ok(Deleted::Unconfirmed) => "unconfirmed",
            Err(err) => {
                tracing::debug!(%node, cause = %err, "background delete failed; the node goes with the session");
                "failed"
            }
        };
        ::metrics::counter!(m::BACKGROUND_CLEANUPS_TOTAL, "outcome" => outcome).increment(1);
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
