//! [`Connected`]: an [`ObjectFence`] and the fenced objects under a prefix, the fence contract
//! ([`Fence`]) on an object store.

use futures_util::StreamExt as _;
use object_store::path::Path;
use zkfence::fence::{BoxError, BoxFuture, Fence, FenceError, FenceState, FenceTicket};

use crate::error::Error;
use crate::fence::ObjectFence;
use crate::snapshot::Snapshot;

/// An [`ObjectFence`] with the fenced objects under `prefix`: the fence contract every zkfence
/// store offers ([`Fence`]), as `zkfence fence` drives it for `s3://bucket/prefix`. An object
/// store keeps each fence in its objects (every fenced object's header holds the token it last
/// accepted), so a scope's fence is the fenced objects of that scope under the prefix:
///
/// - [`Fence::fences`] lists each fenced object (its path in `at`) with its scope and token;
/// - [`Fence::seen`] is the highest token among the scope's objects;
/// - [`Fence::claim`] raises every object of the scope (a scope with none has nothing to
///   raise: `Ok(None)`, nothing written);
/// - [`Fence::rebase`] sets every object of the scope to the token (payloads kept), each
///   conditional on the version read, and returns the highest token they held.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::sync::Arc;
/// use zkfence::fence::{Fence, FenceTicket};
/// use zkfence_object_store::{Connected, ObjectFence};
///
/// let fence = ObjectFence::new(Arc::new(object_store::memory::InMemory::new()));
/// let ticket: FenceTicket = "7@4294967303::/locks/reports".parse()?;
/// fence.put(&"reports/manifest".into(), &ticket, "v1").await?;
/// let connected = Connected::new(fence, "reports".into());
/// assert_eq!(connected.seen("/locks/reports").await.map_err(|e| e.to_string())?, Some(4294967303));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Connected {
    fence: ObjectFence,
    prefix: Path,
}

impl Connected {
    /// The fenced objects of `fence`'s store under `prefix`.
    ///
    /// # Examples
    ///
    /// See the [type's](Connected).
    pub fn new(fence: ObjectFence, prefix: Path) -> Connected {
        Connected { fence, prefix }
    }

    /// The fenced objects under the prefix of `url`, `s3://bucket/prefix`, in S3 or an
    /// S3-compatible store, configured from the AWS environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; `AWS_ENDPOINT` or `AWS_ENDPOINT_URL` for an
    /// S3-compatible store, an `http://` one used as given), with conditional puts. Needs the
    /// `aws` feature. Nothing is sent: run [`ObjectFence::probe`] to check that the store
    /// enforces conditional writes.
    ///
    /// # Errors
    ///
    /// A URL without a bucket, or a configuration the S3 client refuses (no region, no
    /// credentials), saying what to set.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// use zkfence::fence::Fence;
    /// let fence = zkfence_object_store::Connected::connect("s3://reports/fenced").await?;
    /// fence.fence().probe(fence.prefix()).await?;
    /// println!("{:?}", fence.seen("/locks/reports").await?);
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "aws")]
    pub async fn connect(url: &str) -> Result<Connected, BoxError> {
        let dial = crate::dial::Dial::parse(url)?;
        Ok(Connected::new(dial.open()?, dial.prefix().clone()))
    }

    /// The prefix of the fenced objects.
    ///
    /// # Examples
    ///
    /// ```
    /// # let fence = zkfence_object_store::ObjectFence::new(std::sync::Arc::new(object_store::memory::InMemory::new()));
    /// let connected = zkfence_object_store::Connected::new(fence, "reports".into());
    /// assert_eq!(connected.prefix().as_ref(), "reports");
    /// ```
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The fence.
    ///
    /// # Examples
    ///
    /// ```
    /// # let fence = zkfence_object_store::ObjectFence::new(std::sync::Arc::new(object_store::memory::InMemory::new()));
    /// let connected = zkfence_object_store::Connected::new(fence, "reports".into());
    /// # let _ = connected.fence();
    /// ```
    pub fn fence(&self) -> &ObjectFence {
        &self.fence
    }

    /// Every fenced object under the prefix, with what it holds; objects that are no fenced
    /// objects (no header) are left out.
    async fn objects(&self) -> Result<Vec<(Path, Snapshot)>, Error> {
        let mut listed = self.fence.store().list(Some(&self.prefix));
        let mut found = Vec::new();
        while let Some(meta) = listed.next().await {
            let meta = meta?;
            match self.fence.read(&meta.location).await {
                Ok(snapshot) if snapshot.scope().is_some() => found.push((meta.location, snapshot)),
                Ok(_) | Err(Error::NotFenced { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        found.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        Ok(found)
    }

    /// The paths and tokens of `scope`'s objects.
    async fn of_scope(&self, scope: &str) -> Result<Vec<(Path, i64)>, Error> {
        Ok((self.objects().await?.into_iter())
            .filter(|(_, s)| s.scope() == Some(scope))
            .filter_map(|(path, s)| Some((path, s.token()?)))
            .collect())
    }
}

impl Fence for Connected {
    fn store(&self) -> &'static str {
        crate::fence::STORE
    }

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<Option<i64>, FenceError<BoxError>>> {
        Box::pin(async move {
            let boxed = |e: Error| FenceError::Store(Box::new(e) as BoxError);
            let mut before = None;
            for (path, _) in self.of_scope(ticket.scope()).await.map_err(boxed)? {
                let outcome = self.fence.claim(&path, ticket).await;
                let held = outcome.map_err(|e| e.map_store(|e| Box::new(e) as BoxError))?;
                before = before.max(held);
            }
            Ok(before)
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move {
            let objects = self.of_scope(scope).await?;
            Ok(objects.into_iter().map(|(_, token)| token).max())
        })
    }

    fn rebase<'a>(
        &'a self,
        scope: &'a str,
        to: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move {
            let mut before = None;
            for (path, _) in self.of_scope(scope).await? {
                let held = self.fence.rebase(&path, to).await?;
                before = before.max(held);
            }
            Ok(before)
        })
    }

    fn fences(&self) -> BoxFuture<'_, Result<Vec<FenceState>, BoxError>> {
        Box::pin(async move {
            Ok((self.objects().await?.into_iter())
                .filter_map(|(path, s)| {
                    let (scope, token) = (s.scope()?.to_owned(), s.token()?);
                    Some(FenceState::new(scope, token).at(path.to_string()))
                })
                .collect())
        })
    }
}
