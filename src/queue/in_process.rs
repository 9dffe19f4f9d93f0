//! The in-process queue: tasks acquiring through clones of one exclusive lock (a mutex, or a
//! read/write lock's writers) queue fairly inside the process first, so that only the task at
//! the head contends in ZooKeeper and a busy process keeps one node in the lock's queue.

use std::sync::Arc;

use crate::metrics::InProcessWaiter;
use crate::wait::Wait;

/// The queue itself, shared by the clones of one lock.
pub(crate) type InProcessQueue = Arc<tokio::sync::Mutex<()>>;

/// A task's turn at the head of a lock's in-process queue.
pub(crate) type InProcessTurn = tokio::sync::OwnedMutexGuard<()>;

/// The in-process queue's turn did not come in time.
pub(crate) struct Busy;

/// Waits in the in-process queue for this process's turn to contend in ZooKeeper.
/// `Ok(None)` when the kind has no in-process queue (readers, semaphore leases); `Err(Busy)`
/// when the turn did not come (`Wait::Never`, or the deadline passed).
pub(crate) async fn take_turn(
    queue: Option<&InProcessQueue>,
    label: &str,
    wait: Wait,
) -> Result<Option<InProcessTurn>, Busy> {
    let Some(queue) = queue else {
        return Ok(None);
    };
    if let Ok(turn) = queue.clone().try_lock_owned() {
        return Ok(Some(turn));
    }
    let _waiting = InProcessWaiter::new(label);
    match wait {
        Wait::Never => Err(Busy),
        Wait::Forever => Ok(Some(queue.clone().lock_owned().await)),
        Wait::Until(deadline) => tokio::time::timeout_at(deadline, queue.clone().lock_owned())
            .await
            .map(Some)
            .map_err(|_| Busy),
    }
}
