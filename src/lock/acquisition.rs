//! An acquire of a [`FencedLock`]: what the task already holds (reentrancy, a downgrade), the
//! queue, the guard of a grant; its span and metrics.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::fenced_lock::FencedLock;
use crate::acquire::{sealed::Sealed, Acquire};
use crate::error::{Error, Result};
use crate::guard::{self, Held, LockGuard, NewHold};
use crate::metrics::{ACQUIRE_DURATION_SECONDS, ACQUISITIONS_TOTAL};
use crate::mode::Mode;
use crate::queue::kind::Kind;
use crate::queue::{self, Grant};
use crate::reentrancy::{self, Key, Owner, Reentry};
use crate::wait::Wait;

impl<M: Mode> FencedLock<M> {
    /// An acquire whose node carries `data` instead of the options' (an election candidate's).
    pub(crate) async fn acquire_as(
        &self,
        wait: Wait,
        data: Option<&[u8]>,
    ) -> Result<Option<LockGuard<M>>> {
        let client = &self.queue.client;
        let span = tracing::debug_span!(
            "acquire",
            lock_path = %self.queue.path,
            kind = self.queue.kind.name(),
            session_id = %client.session_id(),
            fencing_token = tracing::field::Empty,
            node = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = match self.reentry() {
            Ok(AcquirePath::Queue(pin)) => {
                let queued = self.queue_for(wait, pin, data);
                queued.instrument(span.clone()).await
            }
            Ok(AcquirePath::Nested(guard)) => Ok(Some(guard)),
            Err(err) => Err(err),
        };
        let outcome = match &result {
            Ok(Some(guard)) => {
                span.record("fencing_token", tracing::field::display(guard.token()));
                span.record("node", guard.node_path());
                metrics::counter!(ACQUISITIONS_TOTAL, "lock" => self.queue.label.clone())
                    .increment(1);
                tracing::debug!(parent: &span, waited_ms = started.elapsed().as_secs_f64() * 1e3, "acquired");
                "acquired"
            }
            Ok(None) if matches!(wait, Wait::Never) => "busy",
            Ok(None) => "timeout",
            Err(err) => {
                tracing::debug!(parent: &span, cause = %err, "acquire failed");
                "error"
            }
        };
        metrics::histogram!(ACQUIRE_DURATION_SECONDS, "outcome" => outcome, "lock" => self.queue.label.clone())
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// Which lock this is, for the holds of this process.
    fn key(&self) -> Key {
        self.key.clone()
    }

    /// What an acquire by the calling task gets, given what it already holds on this lock
    /// (see [`crate::reentrancy::reentry`]).
    fn reentry(&self) -> Result<AcquirePath<M>> {
        let queue = &self.queue;
        let held = guard::owned_by(&self.key(), Owner::current());
        let kinds: Vec<Kind> = held.iter().map(|(kind, _)| *kind).collect();
        Ok(
            match reentrancy::reentry(&kinds, queue.kind, queue.options.reentrant) {
                Reentry::Queue => AcquirePath::Queue(None),
                Reentry::Nest(i) => LockGuard::<M>::nest(held[i].1.clone())?
                    .map_or(AcquirePath::Queue(None), AcquirePath::Nested),
                // The write lock stays held while the read lock is taken beside it.
                Reentry::Downgrade(i) => AcquirePath::Queue(LockGuard::nest(held[i].1.clone())?),
                Reentry::WouldDeadlock => {
                    return Err(Error::WouldDeadlock {
                        path: queue.path.to_string(),
                        held: reentrancy::describe(kinds[0]),
                        asked: reentrancy::describe(queue.kind),
                    })
                }
            },
        )
    }

    /// Queues for the lock; `pin`, a share of the write lock a read lock is taken under (a
    /// downgrade), admits the read lock at once and is kept while writers queued behind the
    /// write lock before it.
    async fn queue_for(
        &self,
        wait: Wait,
        pin: Option<LockGuard>,
        data: Option<&[u8]>,
    ) -> Result<Option<LockGuard<M>>> {
        let under = pin.as_ref().map(|write| write.node_path().to_owned());
        let request = queue::Request {
            wait,
            under: under.as_deref(),
            data,
        };
        let queued = queue::acquire(&self.queue, request);
        let granted = match wait {
            // The protocol honours the deadline itself and deletes our node before returning;
            // this bound only matters while ZooKeeper is unreachable (then the node, if any,
            // is deleted in the background).
            Wait::Until(deadline) => {
                tokio::time::timeout_at(deadline + Duration::from_secs(1), queued)
                    .await
                    .unwrap_or(Ok(None))
            }
            _ => queued.await,
        };
        Ok(granted?.map(|grant| {
            let behind_writers = grant.behind_writers;
            let mut guard = self.guard(grant);
            let unpinned = self
                .queue
                .options
                .flaw
                .is(crate::mutants::Mutant::UnpinnedDowngrade);
            if let Some(write) = pin.filter(|_| behind_writers && !unpinned) {
                guard.pin(write);
            }
            guard
        }))
    }

    /// The guard of a grant on this lock, held by the calling task.
    fn guard(&self, grant: Grant) -> LockGuard<M> {
        let queue = &self.queue;
        let holder = NewHold {
            key: self.key(),
            kind: queue.kind,
            owner: Owner::current(),
        };
        LockGuard::new(grant, &queue.options, queue.label.clone(), holder)
    }
}

impl<M: Mode> Sealed for FencedLock<M> {}

impl<M: Mode> Acquire for FencedLock<M> {
    type Guard = LockGuard<M>;
    type Handle = Held<M>;

    fn acquire_with(
        &self,
        wait: Wait,
    ) -> impl std::future::Future<Output = Result<Option<LockGuard<M>>>> + Send {
        self.acquire_as(wait, None)
    }
}

/// How an acquire goes on, given what the task already holds.
enum AcquirePath<M: Mode> {
    /// Through the queue; with a downgrade, the write lock's share to keep.
    Queue(Option<LockGuard>),
    /// A reentrant acquire's guard, no request sent.
    Nested(LockGuard<M>),
}
