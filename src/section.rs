//! The critical section runner behind every `run`: the section's future is polled only while
//! its lock holds, dropped the moment it does not, and the lock released however it ends.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::loss::LossReason;
use crate::watchdog::CheckError;

/// What a section runs under: a guard that is released after it, and the cloneable handle the
/// section gets (a [`LockGuard`](crate::LockGuard) and its [`Held`](crate::Held), a
/// [`MultiGuard`](crate::MultiGuard) and its [`MultiHeld`](crate::MultiHeld)).
// Public in a private module: named by `Acquire::Guard`'s bound, never by users.
#[allow(unreachable_pub)]
pub trait Guarded: Send {
    type Handle: Fenceable;

    /// A handle on the same hold.
    fn handle(&self) -> Self::Handle;

    /// Releases the hold.
    fn release(self) -> impl Future<Output = Result<()>> + Send;
}

/// The handle's side: the synchronous check, waiting for the hold to be steady, cancellation.
#[allow(unreachable_pub)]
pub trait Fenceable: Clone + Send + Sync + Unpin + 'static {
    /// Whether the hold is steady, in jeopardy or over.
    fn check_hold(&self) -> std::result::Result<(), CheckError>;

    /// Until the hold is steady again (or lost).
    fn steady(&self) -> impl Future<Output = Result<()>> + Send;

    /// Cancelled when the hold is lost or released.
    fn cancellation_token(&self) -> CancellationToken;
}

/// Runs `f`'s future under `guard`, checking the hold before every poll; releases after.
pub(crate) async fn run<G, F, Fut, T, E>(guard: G, f: F) -> std::result::Result<T, E>
where
    G: Guarded,
    F: FnOnce(G::Handle) -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: From<Error>,
{
    let held = guard.handle();
    let cancelled = Box::pin(held.cancellation_token().cancelled_owned());
    let section = WhileHeld {
        future: Some(Box::pin(f(guard.handle()))),
        held,
        cancelled,
        steadying: None,
    };
    match section.await {
        SectionEnd::Done(out) => {
            let released = guard.release().await;
            match (out, released) {
                (Ok(value), Ok(())) => Ok(value),
                (Ok(_), Err(err)) => Err(err.into()),
                (Err(err), _) => Err(err),
            }
        }
        SectionEnd::Lost(reason) => {
            // The node may still be ours (e.g. a disconnect we did not ride out): delete it.
            let _ = guard.release().await;
            Err(Error::LockLost(reason).into())
        }
        SectionEnd::Panicked(payload) => {
            let _ = guard.release().await;
            std::panic::resume_unwind(payload)
        }
    }
}

enum SectionEnd<O> {
    Done(O),
    Lost(LossReason),
    Panicked(Box<dyn std::any::Any + Send>),
}

/// Polls the critical section only while the lock holds: not at all while the hold is in
/// jeopardy (it waits, unpolled, until the hold is steady again), and never again once it is
/// lost (it is dropped).
struct WhileHeld<H, Fut> {
    held: H,
    /// Wakes the section on loss, so one waiting on something slow is dropped promptly.
    cancelled: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// While in jeopardy: until the hold is steady again, or lost.
    steadying: Option<Pin<Box<dyn Future<Output = Result<()>> + Send>>>,
    future: Option<Pin<Box<Fut>>>,
}

impl<H: Fenceable, Fut: Future> Future for WhileHeld<H, Fut> {
    type Output = SectionEnd<Fut::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        // Registers the waker before the check, so a loss between the two still wakes us.
        let _ = this.cancelled.as_mut().poll(cx);
        loop {
            if let Some(steadying) = this.steadying.as_mut() {
                if steadying.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.steadying = None;
            }
            match this.held.check_hold() {
                Ok(()) => break,
                Err(CheckError::Lost(reason)) => {
                    this.future = None;
                    return Poll::Ready(SectionEnd::Lost(reason));
                }
                Err(CheckError::Jeopardy) => {
                    let held = this.held.clone();
                    this.steadying = Some(Box::pin(async move { held.steady().await }));
                }
            }
        }
        let Some(future) = this.future.as_mut() else {
            return Poll::Ready(SectionEnd::Lost(LossReason::Released));
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => {
                this.future = None;
                Poll::Ready(SectionEnd::Done(out))
            }
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                this.future = None;
                Poll::Ready(SectionEnd::Panicked(payload))
            }
        }
    }
}
