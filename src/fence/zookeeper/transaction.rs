//! One fenced `multi`: the fence's own checks ahead of the caller's operations, and what a
//! failed commit of it means.

use zookeeper_client as zk;

use super::fence::{Seen, ZooKeeperFence};
use super::fence_node::fence_data;
use crate::error::Error;
use crate::fence::error::FenceError;
use crate::fence::ticket::FenceTicket;
use crate::loss::LossReason;
use crate::requests::retry::is_connection_error;

/// How one attempt at a fenced commit ended, short of success.
pub(super) enum CommitFailure {
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
    /// One `multi`: the holder's node check, the fence node's compare-and-raise (for the
    /// fence as read, `seen`, and whether to raise it), `ops`. `checks` is `None` only for the
    /// `CheckOutsideTransaction` mutant's writes: `ops` alone.
    pub(super) async fn send(
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
