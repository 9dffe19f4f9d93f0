//! Node watches: a pending watch as a future to select on, which a panic inside
//! `zookeeper-client` cannot take down with it.

use std::future::Future;
use std::pin::Pin;

use zookeeper_client as zk;

/// A pending `OneshotWatcher::changed()` on a node.
pub(crate) type NodeWatch = Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>;

/// `OneshotWatcher::changed()`, with a panic inside it turned into a `Closed` session event:
/// `zookeeper-client` 0.11 unwraps the watch's channel, which panics if the session task went
/// away without a last event (its runtime shut down, say).
pub(crate) async fn watch_changed(watcher: zk::OneshotWatcher) -> zk::WatchedEvent {
    CatchUnwind(Box::pin(watcher.changed()))
        .await
        .unwrap_or_else(|| zk::WatchedEvent::new_session(zk::SessionState::Closed))
}

/// Polls a future, turning a panic inside it into `None`.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Option<F::Output>;

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.poll(cx))) {
            Ok(std::task::Poll::Ready(out)) => std::task::Poll::Ready(Some(out)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(None),
        }
    }
}
