//! [`ObjectFence::probe`]: whether a store enforces the preconditions a fence stands on.

use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStoreExt as _, PutMode, PutPayload, PutResult, UpdateVersion,
};

use crate::error::Error;
use crate::fence::ObjectFence;

/// What to do about a store that ignores or lacks conditional writes.
const REMEDY: &str = "use a store whose conditional writes fail with 412 Precondition Failed (on S3-compatible stores: `If-None-Match: *` and `If-Match` on PutObject, with object_store's S3ConditionalPut::ETagMatch); many emulators and older servers ignore these headers silently, and local filesystems have no update-if-match";

impl ObjectFence {
    /// Checks, on a fresh object under `scratch`, that the store enforces what the fence stands
    /// on, and removes the object again: a create-if-absent succeeds once and fails the second
    /// time; an update-if-match with an ETag the object never had fails, and one with its own
    /// ETag succeeds; reads return an ETag or a version. Run it once against a store before
    /// trusting the fence with it: a store that ignores preconditions (an emulator, an older
    /// server, a proxy that strips headers) accepts every write, and the fence with it.
    ///
    /// Needs write and delete permission under `scratch`.
    ///
    /// # Errors
    ///
    /// [`Error::Unfit`] saying what the store failed to enforce and what to do, for a store that
    /// cannot fence (one without update-if-match, such as `object_store`'s `LocalFileSystem`,
    /// included); the store's error when it could not be asked.
    ///
    /// # Cancel safety
    ///
    /// Dropped mid-way, it may leave its scratch object (`zkfence-probe-<uuid>`) behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// use std::sync::Arc;
    /// use object_store::memory::InMemory;
    /// use zkfence_object_store::ObjectFence;
    ///
    /// let fence = ObjectFence::new(Arc::new(InMemory::new()));
    /// fence.probe(&"scratch".into()).await?; // InMemory enforces both conditions
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn probe(&self, scratch: &Path) -> Result<(), Error> {
        if self.flaw_is_no_probe() {
            return Ok(()); // the mutant takes the store on trust
        }
        let name = format!("zkfence-probe-{}", uuid::Uuid::new_v4().simple());
        let key = scratch.clone().join(name.as_str());
        let outcome = self.probe_at(&key).await;
        let removed = match self.store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(Error::from(err)),
        };
        outcome.and(removed)
    }

    /// The probe's checks on `key`.
    async fn probe_at(&self, key: &Path) -> Result<(), Error> {
        let unfit = |why: String| Error::Unfit {
            store: self.store.to_string(),
            why,
        };
        let first = match self.probe_put(key, PutMode::Create).await {
            Ok(first) => first,
            Err(err) if missing(&err) => {
                return Err(unfit(format!(
                    "it has no create-if-absent (`PutMode::Create`): {err}; {REMEDY}"
                )))
            }
            Err(err) => return Err(err.into()),
        };
        match self.probe_put(key, PutMode::Create).await {
            Ok(_) => return Err(unfit(format!("a create-if-absent over an object it had just created succeeded: it ignores `If-None-Match`, so two holders could each create a fenced object and the older could overwrite the newer; {REMEDY}"))),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {}
            Err(err) => return Err(err.into()),
        }
        let wrong = UpdateVersion {
            e_tag: Some("\"zkfence-probe-no-such-etag\"".to_owned()),
            version: None,
        };
        match self.probe_put(key, PutMode::Update(wrong)).await {
            Ok(_) => return Err(unfit(format!("an update-if-match with an ETag the object never had succeeded: it ignores `If-Match`, so a stale holder's write would land over a newer holder's; {REMEDY}"))),
            Err(object_store::Error::Precondition { .. }) => {}
            Err(err) if missing(&err) => {
                return Err(unfit(format!("it has no update-if-match (`PutMode::Update`): {err}; {REMEDY}")))
            }
            Err(err) => return Err(err.into()),
        }
        self.probe_own_version(key, first).await.map_err(unfit)
    }

    /// The last checks: reads report a version, and an update-if-match on the object's own one
    /// succeeds. `Err` says what failed.
    async fn probe_own_version(&self, key: &Path, first: PutResult) -> Result<(), String> {
        let read = (self.store.get_opts(key, GetOptions::default()).await)
            .map_err(|err| format!("reading the probe's object failed: {err}"))?;
        if read.meta.e_tag.is_none() && read.meta.version.is_none() {
            return Err(format!("its reads return neither an ETag nor a version, so no write can be made conditional on one; {REMEDY}"));
        }
        let own = UpdateVersion::from(first);
        if own.e_tag.is_none() && own.version.is_none() {
            return Err(format!(
                "its writes return neither an ETag nor a version; {REMEDY}"
            ));
        }
        match self.probe_put(key, PutMode::Update(own)).await {
            Ok(_) => Ok(()),
            Err(err) => Err(format!("an update-if-match with the object's own ETag failed ({err}): its conditional writes would refuse every fenced update; {REMEDY}")),
        }
    }

    async fn probe_put(&self, key: &Path, mode: PutMode) -> object_store::Result<PutResult> {
        let payload = PutPayload::from_static(b"zkfence probe: safe to delete\n");
        self.store.put_opts(key, payload, mode.into()).await
    }
}

/// The store does not offer the operation.
fn missing(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }
    )
}
