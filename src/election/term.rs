//! One term of [`FencedElection::lead`](super::FencedElection::lead): the work under a
//! leadership, then its resignation; and the backoff between campaigns.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::leadership::Leadership;
use crate::error::{Error, Result};

/// How a term of [`FencedElection::lead`](super::FencedElection::lead) ended.
pub(super) enum TermEnd<E> {
    /// Its leadership ended: resigned (`Ok`), lost, or its resignation failed.
    Ended(Result<()>),
    /// `work` failed with an error of its own while leading (and this candidate resigned).
    Failed(E),
}

/// One term: `work` under `leadership` until it returns, leadership is lost, or `shutdown`
/// fires; then the resignation, awaited. A loss wins over `work`'s error, which it may have
/// caused (the section's check turned into `work`'s error type).
pub(super) async fn term<F, Fut, E>(
    leadership: Leadership,
    shutdown: &CancellationToken,
    work: &mut F,
) -> TermEnd<E>
where
    F: FnMut(Leadership) -> Fut,
    Fut: Future<Output = std::result::Result<(), E>>,
    E: From<Error>,
{
    let kept = leadership.clone();
    let ran = tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        ran = crate::section::run(leadership, work) => ran,
    };
    let resigned = kept.resign().await;
    match (ran, resigned) {
        (_, Err(loss)) if loss.is_lock_lost() => TermEnd::Ended(Err(loss)),
        (Err(err), _) => TermEnd::Failed(err),
        (Ok(()), resigned) => TermEnd::Ended(resigned),
    }
}

/// Between campaigns: 100 ms doubling per failure up to 5 s, with up to 50% jitter (so a fleet
/// that lost its leader together does not campaign in lockstep).
pub(super) fn backoff(failures: u32) -> Duration {
    let base = Duration::from_millis(100) * 2u32.saturating_pow(failures.min(6));
    let base = base.min(Duration::from_secs(5));
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as f64 / 2000.0;
    base.mul_f64(1.0 + jitter)
}
