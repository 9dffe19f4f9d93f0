//! How long an acquire may wait, and waiting on optional deadlines inside `select!` loops.

use tokio::time::Instant;

/// How long an acquire may wait: for its turn in the process, then in the queue.
// Public in a private module: named by `Acquire::acquire_with`, which users cannot call.
#[allow(unreachable_pub)]
#[derive(Debug, Clone, Copy)]
pub enum Wait {
    /// Until the turn comes.
    Forever,
    /// Not at all: the turn must be free now.
    Never,
    /// Until this instant.
    Until(Instant),
}

impl Wait {
    /// The deadline, if the wait has one.
    pub(crate) fn deadline(self) -> Option<Instant> {
        match self {
            Wait::Until(deadline) => Some(deadline),
            Wait::Forever | Wait::Never => None,
        }
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
pub(crate) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
