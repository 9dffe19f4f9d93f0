//! [`ConformanceStore`]: the conformance kit's claims and probe on a scratch prefix (with the
//! `conformance` feature).

use std::sync::Arc;

use futures_util::StreamExt as _;
use object_store::path::Path;
use zkfence::conformance::{BoxFuture as KitFuture, FenceStore, Hooks, ReplySwitch};
use zkfence::fence::{FenceError, FenceTicket};

use crate::error::Error;
use crate::fence::ObjectFence;

/// The conformance kit's claims on objects under a scratch prefix of a real store
/// (`<prefix>/<scratch name>/`, one object per scope), and the store's probe
/// ([`ObjectFence::probe`]): what `zkfence fence verify s3://…` runs
/// ([`zkfence::conformance::CLAIMS_ONLY`]). The kit's read-modify-write cases need a
/// versioned bucket of the test's own, where zkfence's own tests run them.
/// [`ConformanceStore::clear`] deletes the objects.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::sync::Arc;
/// use zkfence::conformance;
/// use zkfence_object_store::{ConformanceStore, ObjectFence};
///
/// let fence = ObjectFence::new(Arc::new(object_store::memory::InMemory::new()));
/// let store = ConformanceStore::new(fence, &"checks".into(), "run1");
/// conformance::edge_tokens(&store).await?;
/// conformance::preconditions_enforced(&store).await?;
/// store.clear().await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ConformanceStore {
    fence: ObjectFence,
    scratch: Path,
}

impl ConformanceStore {
    /// Claims under `<prefix>/<scratch name of name>/` with `fence`.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub fn new(fence: ObjectFence, prefix: &Path, name: &str) -> ConformanceStore {
        let scratch = prefix
            .clone()
            .join(zkfence::conformance::scratch_name(name, 200));
        ConformanceStore { fence, scratch }
    }

    /// Deletes the scratch objects.
    ///
    /// # Errors
    ///
    /// The store's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: whatever it deleted stays deleted.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn clear(self) -> Result<(), Error> {
        let mut listed = self.fence.store().list(Some(&self.scratch));
        let mut paths = Vec::new();
        while let Some(meta) = listed.next().await {
            paths.push(meta?.location);
        }
        for path in paths {
            self.fence.purge(&path).await?;
        }
        Ok(())
    }

    /// The object of `scope`.
    fn object(&self, scope: &str) -> Path {
        let name: String = (scope.chars())
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        self.scratch.clone().join(name)
    }
}

impl FenceStore for ConformanceStore {
    type Error = Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> KitFuture<'a, Result<(), FenceError<Error>>> {
        Box::pin(async move {
            let path = self.object(ticket.scope());
            self.fence.claim(&path, ticket).await.map(|_| ())
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        hooks: Hooks,
    ) -> KitFuture<'a, Result<i64, FenceError<Error>>> {
        let _ = (ticket, key, hooks);
        Box::pin(async move { Err(FenceError::Store(Error::Aborted(UNSUPPORTED.into()))) })
    }

    fn value<'a>(&'a self, key: &'a str) -> KitFuture<'a, Result<i64, String>> {
        let _ = key;
        Box::pin(async move { Err(UNSUPPORTED.to_owned()) })
    }

    fn log<'a>(&'a self, key: &'a str) -> KitFuture<'a, Result<Vec<i64>, String>> {
        let _ = key;
        Box::pin(async move { Err(UNSUPPORTED.to_owned()) })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> KitFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let snapshot = self.fence.read(&self.object(scope)).await;
            Ok(snapshot.map_err(|e| e.to_string())?.token())
        })
    }

    fn waiting(&self) -> KitFuture<'_, Result<bool, String>> {
        // Conditional writes take no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        Arc::new(|_| {})
    }

    fn preconditions(&self) -> Option<KitFuture<'_, Result<(), String>>> {
        Some(Box::pin(async move {
            self.fence
                .probe(&self.scratch)
                .await
                .map_err(|e| e.to_string())
        }))
    }
}

/// What the deployment store cannot do.
const UNSUPPORTED: &str =
    "the kit's increments need a versioned bucket of the test's own: not run on a deployment";
