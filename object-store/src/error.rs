//! [`Error`]: the object store fence's own errors, the `E` of its
//! [`FenceError`](zkfence::fence::FenceError)s.

/// What an [`ObjectFence`](crate::ObjectFence) reports besides the fence's verdicts: the object
/// store's error, an object the fence cannot read, a store that cannot fence, a write raced
/// past. A fenced write's refusal, lost hold and unknown outcome are
/// [`FenceError`](zkfence::fence::FenceError)'s own variants, with this as their store error.
///
/// # Examples
///
/// ```
/// use zkfence_object_store::Error;
/// let err = Error::Changed { path: "app/manifest".into() };
/// assert!(err.to_string().contains("read it again"));
/// ```
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The object store's own error (nothing was written, or the fence did not write).
    #[error(transparent)]
    ObjectStore(#[from] object_store::Error),
    /// An object at the path that is no fenced object: written without the fence, damaged, or
    /// of another format.
    #[error("{path} is not a fenced object ({why}): it was written without the fence; fence another path, or remove it with ObjectFence::purge once nothing reads it")]
    NotFenced {
        /// The object's path.
        path: String,
        /// What is wrong with its header.
        why: &'static str,
    },
    /// The object is fenced for another scope (another lock's tickets): its tokens and ours
    /// are not one sequence.
    #[error("{path} is fenced for scope {fenced:?}, not {asked:?}: fence each object with the tickets of one lock only")]
    OtherScope {
        /// The object's path.
        path: String,
        /// The scope its header names.
        fenced: String,
        /// The ticket's scope.
        asked: String,
    },
    /// The store returned neither an ETag nor a version for an object: it cannot update it
    /// conditionally, so it cannot fence it.
    #[error("the store returned neither an ETag nor a version for {path}: it cannot update the object conditionally, so it cannot fence it (ObjectFence::probe says more)")]
    NoVersion {
        /// The object's path.
        path: String,
    },
    /// [`ObjectFence::put_if`](crate::ObjectFence::put_if): the object was written since the
    /// snapshot was read, by a token no newer than ours (a newer one is a refusal). Nothing was
    /// written.
    #[error("{path} changed since it was read (a write of the same or an older token came in between): nothing was written; read it again and redo the change")]
    Changed {
        /// The object's path.
        path: String,
    },
    /// Other writers moved the object between every read and conditional write, `attempts`
    /// times. Nothing was written.
    #[error("{path}: other writers moved the object before each of {attempts} conditional writes; nothing was written, try again later")]
    Contended {
        /// The object's path.
        path: String,
        /// How many writes were tried.
        attempts: u32,
    },
    /// [`ObjectFence::update`](crate::ObjectFence::update)'s closure gave up. Nothing was
    /// written.
    #[error("the update gave up, nothing was written: {0}")]
    Aborted(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// [`ObjectFence::probe`](crate::ObjectFence::probe): the store cannot fence writes.
    #[error("{store} cannot fence writes: {why}")]
    Unfit {
        /// The store, as it names itself.
        store: String,
        /// What the probe saw, and what to do.
        why: String,
    },
}
