//! [`Snapshot`]: a fenced object as one read (or one write) found it.

use bytes::Bytes;
use object_store::path::Path;
use object_store::UpdateVersion;

use crate::header::{State, WriteId};

/// A fenced object as one read found it (or as a write of this fence left it): its fence's
/// token, its payload, and the version a conditional write over it names
/// ([`ObjectFence::put_if`](crate::ObjectFence::put_if)).
///
/// Three shapes: **missing** (no object: no token, no payload); **a value** (a token and a
/// payload); **empty** (a token and no payload: claimed before its first write, or deleted by
/// a fenced [`delete`](crate::ObjectFence::delete), which keeps the token so that an older
/// holder cannot create the object again).
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::sync::Arc;
/// use object_store::{memory::InMemory, path::Path};
/// use zkfence_object_store::ObjectFence;
///
/// let fence = ObjectFence::new(Arc::new(InMemory::new()));
/// let ticket: zkfence::fence::FenceTicket = "1@4294967297::/locks/config".parse()?;
/// let path = Path::from("config/manifest");
/// assert!(!fence.read(&path).await?.exists());
/// fence.put(&path, &ticket, "v1").await?;
/// let snapshot = fence.read(&path).await?;
/// assert_eq!(snapshot.token(), Some(4294967297));
/// assert_eq!(snapshot.payload().map(|p| &p[..]), Some(&b"v1"[..]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Snapshot {
    path: Path,
    /// `None` for a missing object.
    found: Option<Found>,
}

/// What a snapshot of an existing object holds.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    pub(crate) token: i64,
    pub(crate) write_id: WriteId,
    pub(crate) state: State,
    /// The scope its header names.
    pub(crate) scope: String,
    /// Empty for [`State::Empty`].
    pub(crate) payload: Bytes,
    pub(crate) version: UpdateVersion,
}

impl Snapshot {
    pub(crate) fn missing(path: Path) -> Snapshot {
        Snapshot { path, found: None }
    }

    pub(crate) fn found(path: Path, found: Found) -> Snapshot {
        Snapshot {
            path,
            found: Some(found),
        }
    }

    pub(crate) fn parts(&self) -> Option<&Found> {
        self.found.as_ref()
    }

    /// The object's path.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let snapshot = fence.read(&"a/b".into()).await?;
    /// assert_eq!(snapshot.path().as_ref(), "a/b");
    /// # Ok(()) }
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The fence's token: the highest token the object has accepted. `None` when there is no
    /// object.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// if let Some(token) = fence.read(&"a/b".into()).await?.token() {
    ///     println!("fenced at {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> Option<i64> {
        self.found.as_ref().map(|f| f.token)
    }

    /// The scope the object's header names (the lock path of the holders that write it);
    /// `None` when there is no object.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// println!("{:?}", fence.read(&"a/b".into()).await?.scope());
    /// # Ok(()) }
    /// ```
    pub fn scope(&self) -> Option<&str> {
        self.found.as_ref().map(|f| f.scope.as_str())
    }

    /// The payload (without the fence's header); `None` when the object is missing or empty
    /// (claimed before its first write, or deleted).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let snapshot = fence.read(&"a/b".into()).await?;
    /// let text = snapshot.payload().map(|p| String::from_utf8_lossy(p).into_owned());
    /// # let _ = text; Ok(()) }
    /// ```
    pub fn payload(&self) -> Option<&Bytes> {
        let found = self.found.as_ref()?;
        (found.state == State::Value).then_some(&found.payload)
    }

    /// The payload, owned; `None` as for [`payload`](Self::payload).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let bytes: Option<bytes::Bytes> = fence.read(&"a/b".into()).await?.into_payload();
    /// # let _ = bytes; Ok(()) }
    /// ```
    pub fn into_payload(self) -> Option<bytes::Bytes> {
        let found = self.found?;
        (found.state == State::Value).then_some(found.payload)
    }

    /// Whether an object exists at the path (with a value, or empty).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let snapshot = fence.read(&"a/b".into()).await?;
    /// assert_eq!(snapshot.exists(), snapshot.token().is_some());
    /// # Ok(()) }
    /// ```
    pub fn exists(&self) -> bool {
        self.found.is_some()
    }

    /// Whether the object exists without a value: deleted by a fenced
    /// [`delete`](crate::ObjectFence::delete) (a tombstone), or claimed before its first
    /// write.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let snapshot = fence.read(&"a/b".into()).await?;
    /// if snapshot.is_empty() {
    ///     println!("deleted at token {:?}", snapshot.token());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.found.as_ref().is_some_and(|f| f.state == State::Empty)
    }

    /// The object's ETag, as the store reported it.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// println!("{:?}", fence.read(&"a/b".into()).await?.e_tag());
    /// # Ok(()) }
    /// ```
    pub fn e_tag(&self) -> Option<&str> {
        self.found.as_ref()?.version.e_tag.as_deref()
    }

    /// The object's version, for stores that version objects.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// println!("{:?}", fence.read(&"a/b".into()).await?.version());
    /// # Ok(()) }
    /// ```
    pub fn version(&self) -> Option<&str> {
        self.found.as_ref()?.version.version.as_deref()
    }
}
