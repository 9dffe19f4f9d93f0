//! [`ObjectFence`]: fenced writes to objects, each conditional on the version its compare read.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt as _, PutMode, PutOptions,
    PutPayload, UpdateVersion,
};
use zkfence::fence::{self, BoxError, FenceError, FenceTicket};

use crate::error::Error;
use crate::header::{self, State, WriteId};
use crate::snapshot::{Found, Snapshot};

/// The label of this store in the `zkfence_fence_*` metrics.
pub(crate) const STORE: &str = "object_store";

/// How many conditional writes a fenced write tries while other writers keep moving the object
/// between its read and its write, before it gives up ([`Error::Contended`]).
const MAX_RACES: u32 = 32;

/// How many objects a fence remembers the latest version of (it forgets them all when full).
const MAX_KNOWN: usize = 1024;

/// The metadata key the `EtagOnly` mutant keeps its token under (zkfence's own tests).
const TOKEN_METADATA: &str = "zkfence-token";

/// Fenced writes to objects of an [`ObjectStore`]: each fenced object carries, in its first
/// line, the highest token it has accepted, and every write is **conditional on the exact
/// version whose token it compared** (create-if-absent for a missing object, update-if-match
/// on the ETag and version read otherwise). A newer holder's write in between changes the
/// object, so the older write's condition fails; it reads again and is refused.
///
/// See the [crate docs](crate) for the object format, the traps of object stores, and the
/// manifest pattern. Run [`probe`](Self::probe) once against a store before trusting it: a
/// store that ignores preconditions accepts every write.
///
/// A write that other writers raced past is read and compared again (up to 32 times); its
/// payload is rewritten as given ([`put`](Self::put)), recomputed ([`update`](Self::update)),
/// or the race is handed back to the caller ([`put_if`](Self::put_if)). Before each write the
/// ticket's [`check`](FenceTicket::check) runs: a hold that is lost or past its lease writes
/// nothing.
///
/// **One request per write, for a holder that writes again.** A fence remembers each object
/// as it last wrote or read it (clones share the memory), and writes over that version without
/// reading first; an object it knows nothing of it tries to create. A stale memory costs a
/// failed condition and a read, never a stale write: the write lands only over the version
/// compared. Every verdict other than a landed write (a refusal, a claim that needs no write)
/// is taken again on a fresh read.
///
/// **A write the store's client sent twice.** `object_store` sends a request again when its
/// connection closed before the reply, a conditional put included; the second send then fails
/// its condition against the first. Each write's bytes carry a random write id, so the fence
/// reads the object and recognises its own write (reported done, applied once); when the object
/// has moved on since, the first send may or may not have landed: [`FenceError::InDoubt`].
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::sync::Arc;
/// use object_store::{memory::InMemory, path::Path};
/// use zkfence::fence::{FenceError, FenceTicket};
/// use zkfence_object_store::ObjectFence;
///
/// let fence = ObjectFence::new(Arc::new(InMemory::new()));
/// let path = Path::from("jobs/7/state");
/// let old: FenceTicket = "5@4294967301::/locks/job-7".parse()?;
/// let new: FenceTicket = "6@4294967302::/locks/job-7".parse()?;
/// fence.put(&path, &old, "running").await?;
/// fence.put(&path, &new, "restarted").await?;
/// match fence.put(&path, &old, "done").await {
///     Err(FenceError::Refused { seen, .. }) => assert_eq!(seen, 4294967302),
///     other => panic!("the older holder's write must be refused: {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ObjectFence {
    pub(crate) store: Arc<dyn ObjectStore>,
    flaw: Flaw,
    /// The objects as this fence last wrote or read them (shared by clones): the next fenced
    /// write tries over that version without reading first.
    known: Known,
}

/// The latest version a fence knows of each object it wrote or read.
type Known = Arc<Mutex<HashMap<Path, Snapshot>>>;

impl std::fmt::Debug for ObjectFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let known = self.known.lock().map_or(0, |known| known.len());
        f.debug_struct("ObjectFence")
            .field("store", &format_args!("{}", self.store))
            .field("flaw", &self.flaw)
            .field("known", &known)
            .finish()
    }
}

/// A deliberate flaw (zkfence's own tests only: set by `with_mutant`).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// The token kept in metadata, the bytes constant: the ETag alone guards the write.
    EtagOnly,
    /// The token compared on the read, the write sent with no condition.
    CheckOutsideTransaction,
    StrictlyGreater,
    Equality,
    StringCompare,
    NoUpsert,
    /// The store's conditional writes taken on trust (the probe of a deployment skipped).
    NoProbe,
}

impl Flaw {
    /// Whether `token` is accepted over an object fenced at `seen` (`None`: no object yet), and
    /// whether the write raises the fence; `Err` with the token that refuses it.
    fn admits(self, token: i64, seen: Option<i64>) -> Result<bool, i64> {
        let Some(seen) = seen else {
            return match self {
                Flaw::NoUpsert => Err(0),
                _ => Ok(true),
            };
        };
        let accepted = match self {
            Flaw::StrictlyGreater => token > seen,
            Flaw::Equality => token == seen,
            Flaw::StringCompare => token.to_string() >= seen.to_string(),
            _ => token >= seen,
        };
        match accepted {
            true => Ok(token != seen),
            false => Err(seen),
        }
    }
}

/// What a fenced operation makes of the object it read.
enum Intent {
    /// Write this state and payload.
    Write(State, Bytes),
    /// Keep the state and payload: write only to raise the fence (a claim).
    Keep,
}

/// How one conditional write ended, short of success.
enum NotWritten {
    /// The object moved since it was read: here it is now.
    Raced(Snapshot),
    Failed(FenceError<Error>),
}

impl ObjectFence {
    /// A fence over `store`'s objects. It keeps nothing of its own: every fenced object
    /// carries its fence.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_object_store::ObjectFence::new(std::sync::Arc::new(object_store::memory::InMemory::new()));
    /// # let _ = fence;
    /// ```
    pub fn new(store: Arc<dyn ObjectStore>) -> ObjectFence {
        ObjectFence {
            store,
            flaw: Flaw::None,
            known: Known::default(),
        }
    }

    /// **For zkfence's own tests**: the fence with one of its rules broken.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: zkfence::FenceMutant) -> Self {
        use zkfence::FenceMutant as M;
        self.flaw = match mutant {
            M::EtagOnly => Flaw::EtagOnly,
            M::CheckOutsideTransaction => Flaw::CheckOutsideTransaction,
            M::NoProbe => Flaw::NoProbe,
            M::StrictlyGreater => Flaw::StrictlyGreater,
            M::Equality => Flaw::Equality,
            M::StringCompare | M::DoubleCompare => Flaw::StringCompare,
            M::NoUpsert => Flaw::NoUpsert,
            _ => Flaw::None,
        };
        self
    }

    /// The store the fence writes to.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn demo(fence: zkfence_object_store::ObjectFence) {
    /// println!("fencing objects of {}", fence.store());
    /// # }
    /// ```
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Reads the fenced object at `path`: its token, payload and version (a missing object is
    /// a [`Snapshot`] too, with none of them). Reads are not fenced: anyone may read.
    ///
    /// # Errors
    ///
    /// [`Error::NotFenced`] for an object without the fence's header; the store's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// let snapshot = fence.read(&"config/manifest".into()).await?;
    /// match snapshot.payload() {
    ///     Some(bytes) => println!("{} bytes at token {:?}", bytes.len(), snapshot.token()),
    ///     None => println!("no value"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn read(&self, path: &Path) -> Result<Snapshot, Error> {
        let result = match self.store.get_opts(path, GetOptions::default()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => {
                self.forget(path);
                return Ok(Snapshot::missing(path.clone()));
            }
            Err(err) => {
                self.forget(path);
                return Err(err.into());
            }
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let in_metadata = (result.attributes)
            .get(&Attribute::Metadata(TOKEN_METADATA.into()))
            .and_then(|value| value.as_ref().parse::<i64>().ok());
        let bytes = result.bytes().await.inspect_err(|_| self.forget(path))?;
        let header = header::parse(&bytes).map_err(|why| {
            self.forget(path);
            Error::NotFenced {
                path: path.to_string(),
                why,
            }
        })?;
        let token = match (self.flaw, in_metadata) {
            (Flaw::EtagOnly, Some(token)) => token,
            _ => header.token,
        };
        let found = Found {
            token,
            write_id: header.write_id,
            state: header.state,
            scope: header.scope,
            payload: bytes.slice(header.len..),
            version,
        };
        let snapshot = Snapshot::found(path.clone(), found);
        self.remember(&snapshot);
        Ok(snapshot)
    }

    /// The token the object at `path` is fenced at (`None` when there is no object).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// println!("{:?}", fence.seen(&"config/manifest".into()).await?);
    /// # Ok(()) }
    /// ```
    pub async fn seen(&self, path: &Path) -> Result<Option<i64>, Error> {
        Ok(self.read(path).await?.token())
    }

    /// Writes `payload` to `path` under the ticket's token: refused if the object is fenced at
    /// a newer token; otherwise created if absent, or updated if it still is the version whose
    /// token was compared. When another writer moved the object in between, it reads and
    /// compares again. Returns the object as written.
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`] (the object holds a newer token: nothing was written),
    /// [`FenceError::LockLost`] (the ticket's check failed before the write),
    /// [`FenceError::InDoubt`] (the write was sent and its outcome is unknown: read back);
    /// [`FenceError::Store`] with [`Error::Contended`], [`Error::NotFenced`],
    /// [`Error::OtherScope`], [`Error::NoVersion`] or the store's error.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a write already sent may land after the future is dropped. Treat a
    /// dropped write as [in doubt](FenceError::InDoubt): it landed whole or not at all (an
    /// object store's put is atomic), and only where the fence admitted it.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let written = fence.put(&"config/manifest".into(), &ticket, r#"{"generation":7}"#).await?;
    /// assert_eq!(written.token(), Some(ticket.token().as_i64()));
    /// # Ok(()) }
    /// ```
    pub async fn put(
        &self,
        path: &Path,
        ticket: &FenceTicket,
        payload: impl Into<Bytes>,
    ) -> Result<Snapshot, FenceError<Error>> {
        let payload = payload.into();
        let mut next = |_: &Snapshot| Ok(Intent::Write(State::Value, payload.clone()));
        let work = self.fenced(ticket, path, &mut next);
        self.observe(ticket, path, "put", work)
            .await
            .map(|(_, after)| after)
    }

    /// Writes `payload` over exactly the version `base` read (a compare-and-swap): refused if
    /// `base`, or the object as it is now, is fenced at a newer token; and
    /// [`Error::Changed`] if the object moved since `base` was read, by a token no newer than
    /// ours. Nothing is retried: for a read-modify-write with work between the read and the
    /// write (the pattern of a holder that may stall), read, work, then `put_if`, and on
    /// [`Error::Changed`] start over. Returns the object as written, a `base` for the next one.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put), with [`Error::Changed`] for [`Error::Contended`].
    ///
    /// # Cancel safety
    ///
    /// As [`put`](Self::put): a write already sent may land after the future is dropped, and
    /// then only over `base`.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence::fence::FenceError;
    /// use zkfence_object_store::Error;
    /// let path = "config/manifest".into();
    /// loop {
    ///     let base = fence.read(&path).await?;
    ///     let next = format!("{} and more", String::from_utf8_lossy(base.payload().map_or(&b""[..], |p| p)));
    ///     // ... slow work here: a newer holder may take over meanwhile ...
    ///     match fence.put_if(&base, &ticket, next).await {
    ///         Err(FenceError::Store(Error::Changed { .. })) => continue,
    ///         outcome => break outcome.map(|_| ())?,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn put_if(
        &self,
        base: &Snapshot,
        ticket: &FenceTicket,
        payload: impl Into<Bytes>,
    ) -> Result<Snapshot, FenceError<Error>> {
        let payload = payload.into();
        let work = async {
            let token = ticket.token().as_i64();
            check_scope(ticket, base)?;
            (self.flaw.admits(token, base.token())).map_err(|seen| ticket.refused(seen))?;
            ticket.check_before_commit()?;
            match self.commit(ticket, base, State::Value, payload).await {
                Ok(written) => Ok(written),
                Err(NotWritten::Raced(now)) => {
                    check_scope(ticket, &now)?;
                    (self.flaw.admits(token, now.token())).map_err(|seen| ticket.refused(seen))?;
                    Err(FenceError::Store(Error::Changed {
                        path: base.path().to_string(),
                    }))
                }
                Err(NotWritten::Failed(err)) => Err(err),
            }
        };
        self.observe(ticket, base.path(), "put_if", work).await
    }

    /// A fenced read-modify-write: reads the object, calls `change` with its payload (`None`
    /// when missing or deleted), writes what it returns over exactly the version read. When
    /// another writer moved the object in between, it reads again and calls `change` again:
    /// `change` may run more than once, and never for a token the object refuses. Returns the
    /// object as written.
    ///
    /// The write is conditional on the version `change` saw, so a stale holder's update can
    /// never land over a newer holder's write, even one that left the same payload (its token
    /// is in the bytes: see the crate docs).
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put), and [`Error::Aborted`] with `change`'s error (nothing written):
    /// a [`BoxError`](zkfence::fence::BoxError), which any error converts into with `?`.
    ///
    /// # Cancel safety
    ///
    /// As [`put`](Self::put).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let written = fence
    ///     .update(&"counters/orders".into(), &ticket, |current| {
    ///         let n: u64 = match current {
    ///             Some(bytes) => std::str::from_utf8(bytes)?.parse()?,
    ///             None => 0,
    ///         };
    ///         Ok((n + 1).to_string())
    ///     })
    ///     .await?;
    /// println!("{:?}", written.payload());
    /// # Ok(()) }
    /// ```
    pub async fn update<F, T>(
        &self,
        path: &Path,
        ticket: &FenceTicket,
        mut change: F,
    ) -> Result<Snapshot, FenceError<Error>>
    where
        F: FnMut(Option<&Bytes>) -> Result<T, BoxError> + Send,
        T: Into<Bytes>,
    {
        let mut next = |base: &Snapshot| match change(base.payload()) {
            Ok(payload) => Ok(Intent::Write(State::Value, payload.into())),
            Err(err) => Err(Error::Aborted(err)),
        };
        let work = self.fenced(ticket, path, &mut next);
        self.observe(ticket, path, "update", work)
            .await
            .map(|(_, after)| after)
    }

    /// Raises the object's fence to the ticket's token, its payload kept (a missing object is
    /// created empty, holding the token): from then on every older holder's write to it is
    /// refused. Returns the token it held before (`None` for a missing object). A claim with
    /// the token the object already holds writes nothing.
    ///
    /// Claim first when a read-modify-write reads *other* data before it writes this object
    /// (unfenced data, or objects under unique keys): a holder that reads before claiming could
    /// read what an older holder is about to overwrite.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    ///
    /// # Cancel safety
    ///
    /// As [`put`](Self::put): a claim that lands only refuses older holders.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let before = fence.claim(&"config/manifest".into(), &ticket).await?;
    /// println!("raised from {before:?}");
    /// # Ok(()) }
    /// ```
    pub async fn claim(
        &self,
        path: &Path,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, FenceError<Error>> {
        let mut keep = |_: &Snapshot| Ok(Intent::Keep);
        let work = self.fenced(ticket, path, &mut keep);
        let outcome = self.observe(ticket, path, "claim", work).await;
        outcome.map(|(before, _)| before.token())
    }

    /// Sets the fence of the object at `path` to `to`, whatever token it holds, keeping its
    /// payload (or its emptiness): the operator's way out after the ZooKeeper ensemble's data
    /// was reset. Conditional on the version read, again while other writers move it. Returns
    /// the token it held; `None` (and writes nothing) when there is no object. Only once no
    /// holder of the old ensemble can write any more: a fence set lower lets their late writes
    /// in.
    ///
    /// # Errors
    ///
    /// [`Error::Aborted`] for a negative `to`, or a write whose outcome is unknown;
    /// [`Error::NotFenced`], [`Error::Contended`]; the store's error.
    ///
    /// # Cancel safety
    ///
    /// A write already sent may land after the future is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// use std::sync::Arc;
    /// let fence = zkfence_object_store::ObjectFence::new(Arc::new(object_store::memory::InMemory::new()));
    /// let ticket: zkfence::fence::FenceTicket = "7@4294967303::/locks/a".parse()?;
    /// fence.put(&"a/state".into(), &ticket, "v1").await?;
    /// assert_eq!(fence.rebase(&"a/state".into(), 5).await?, Some(4294967303));
    /// assert_eq!(fence.read(&"a/state".into()).await?.token(), Some(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn rebase(&self, path: &Path, to: i64) -> Result<Option<i64>, Error> {
        let sequence = (to & 0x7FFF_FFFF) as i32;
        let token = zkfence::FencingToken::new(sequence, to)
            .map_err(|_| Error::Aborted("a fence holds a token from 0".into()))?;
        for _ in 0..MAX_RACES {
            let base = self.read(path).await?;
            let Some(found) = base.parts() else {
                return Ok(None);
            };
            let ticket = FenceTicket::new(found.scope.clone(), token)
                .map_err(|e| Error::Aborted(e.to_string().into()))?;
            match self
                .commit(&ticket, &base, found.state, found.payload.clone())
                .await
            {
                Ok(_) => {
                    tracing::warn!(scope = %found.scope, path = %path, from = found.token, to, "fence rebased");
                    return Ok(Some(found.token));
                }
                Err(NotWritten::Raced(_)) => fence::author::record_retry(STORE, "raced"),
                Err(NotWritten::Failed(FenceError::Store(err))) => return Err(err),
                Err(NotWritten::Failed(err)) => return Err(Error::Aborted(err.to_string().into())),
            }
        }
        Err(Error::Contended {
            path: path.to_string(),
            attempts: MAX_RACES,
        })
    }

    /// Whether this fence is the mutant that takes a store's conditional writes on trust.
    pub(crate) fn flaw_is_no_probe(&self) -> bool {
        self.flaw == Flaw::NoProbe
    }

    /// A **fenced delete**: replaces the object with an empty one that keeps the ticket's token
    /// (a tombstone), which reads as no payload. A plain delete would throw the token away,
    /// and a stale holder's create-if-absent would then succeed; the tombstone refuses it.
    /// Returns the tombstone. To remove the object itself, once no holder can write it any
    /// more, use [`purge`](Self::purge).
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    ///
    /// # Cancel safety
    ///
    /// As [`put`](Self::put).
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let path = "jobs/7/state".into();
    /// fence.delete(&path, &ticket).await?;
    /// assert!(fence.read(&path).await?.payload().is_none());
    /// # Ok(()) }
    /// ```
    pub async fn delete(
        &self,
        path: &Path,
        ticket: &FenceTicket,
    ) -> Result<Snapshot, FenceError<Error>> {
        let mut next = |base: &Snapshot| match base.is_empty() {
            true => Ok(Intent::Keep),
            false => Ok(Intent::Write(State::Empty, Bytes::new())),
        };
        let work = self.fenced(ticket, path, &mut next);
        self.observe(ticket, path, "delete", work)
            .await
            .map(|(_, after)| after)
    }

    /// **Unfenced**: removes the object at `path`, tombstone and token with it. Any holder's
    /// create-if-absent succeeds afterwards, whatever its token: purge only what no holder can
    /// write any more (a scope retired for good, an object written without the fence).
    ///
    /// # Errors
    ///
    /// The store's error (a missing object is no error).
    ///
    /// # Cancel safety
    ///
    /// A delete already sent may land after the future is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # async fn demo(fence: zkfence_object_store::ObjectFence) -> Result<(), zkfence_object_store::Error> {
    /// fence.purge(&"retired/manifest".into()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn purge(&self, path: &Path) -> Result<(), Error> {
        self.forget(path);
        match self.store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// The span and metrics of one fenced operation (its races are retried inside it).
    async fn observe<T>(
        &self,
        ticket: &FenceTicket,
        path: &Path,
        op: &'static str,
        work: impl Future<Output = Result<T, FenceError<Error>>>,
    ) -> Result<T, FenceError<Error>> {
        let work = async move {
            tracing::Span::current().record("path", tracing::field::display(path));
            work.await
        };
        fence::author::drive_once(STORE, op, ticket, work).await
    }

    /// Compares, and writes what `next` makes of the object, conditional on the version
    /// compared; again, from the object as a failed write found it, while other writers move
    /// it first. Starts from the object as this fence last knew it (or missing, when it knows
    /// nothing): a write conditional on a stale version fails and reads, and every verdict but
    /// a landed write is taken again on a fresh read. Returns the object before and after.
    async fn fenced(
        &self,
        ticket: &FenceTicket,
        path: &Path,
        next: &mut (dyn FnMut(&Snapshot) -> Result<Intent, Error> + Send),
    ) -> Result<(Snapshot, Snapshot), FenceError<Error>> {
        let mut base = self.known(path);
        let mut fresh = false;
        let mut races = 0;
        loop {
            let decided = self.decide(ticket, &base, next);
            let (state, payload) = match decided {
                Err(err @ FenceError::LockLost { .. }) => return Err(err),
                Ok(None) | Err(_) if !fresh => {
                    base = self.read(path).await.map_err(FenceError::Store)?;
                    fresh = true;
                    continue;
                }
                Ok(None) => return Ok((base.clone(), base)),
                Ok(Some(write)) => write,
                Err(err) => return Err(err),
            };
            match self.commit(ticket, &base, state, payload).await {
                Ok(written) => return Ok((base, written)),
                Err(NotWritten::Raced(now)) => {
                    races += 1;
                    if races >= MAX_RACES {
                        return Err(FenceError::Store(Error::Contended {
                            path: path.to_string(),
                            attempts: races,
                        }));
                    }
                    fence::author::record_retry(STORE, "raced");
                    (base, fresh) = (now, true);
                }
                Err(NotWritten::Failed(err)) => return Err(err),
            }
        }
    }

    /// The verdict on `base`: refused, nothing to write (`None`), or what to write.
    fn decide(
        &self,
        ticket: &FenceTicket,
        base: &Snapshot,
        next: &mut (dyn FnMut(&Snapshot) -> Result<Intent, Error> + Send),
    ) -> Result<Option<(State, Bytes)>, FenceError<Error>> {
        check_scope(ticket, base)?;
        let token = ticket.token().as_i64();
        let raise = (self.flaw.admits(token, base.token())).map_err(|s| ticket.refused(s))?;
        let intent = next(base).map_err(FenceError::Store)?;
        ticket.check_before_commit()?;
        Ok(match (intent, base.parts()) {
            (Intent::Write(state, payload), _) => Some((state, payload)),
            (Intent::Keep, _) if !raise => None,
            (Intent::Keep, Some(found)) => Some((found.state, found.payload.clone())),
            (Intent::Keep, None) => Some((State::Empty, Bytes::new())),
        })
    }

    /// The object as this fence last wrote or read it; missing when it knows nothing.
    fn known(&self, path: &Path) -> Snapshot {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        (known.get(path).cloned()).unwrap_or_else(|| Snapshot::missing(path.clone()))
    }

    /// Remembers `snapshot` as the object's latest version (forgets the object when it is
    /// missing, or carries no version to write over).
    fn remember(&self, snapshot: &Snapshot) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let usable = snapshot.e_tag().is_some() || snapshot.version().is_some();
        if !usable {
            known.remove(snapshot.path());
            return;
        }
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(snapshot.path().clone(), snapshot.clone());
    }

    /// Forgets what this fence knew of the object at `path`.
    fn forget(&self, path: &Path) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.remove(path);
    }

    /// One write of `state` and `payload` under the ticket's token, conditional on `base`.
    async fn commit(
        &self,
        ticket: &FenceTicket,
        base: &Snapshot,
        state: State,
        payload: Bytes,
    ) -> Result<Snapshot, NotWritten> {
        let path = base.path();
        let token = ticket.token().as_i64();
        let etag_only = self.flaw == Flaw::EtagOnly;
        let (header_token, write_id) = match etag_only {
            true => (0, WriteId::CONSTANT),
            false => (token, WriteId::new()),
        };
        let line = header::encode(header_token, write_id, state, ticket.scope());
        let body = PutPayload::from_iter([Bytes::from(line), payload.clone()]);
        let mut attributes = Attributes::new();
        if etag_only {
            let key = Attribute::Metadata(TOKEN_METADATA.into());
            attributes.insert(key, token.to_string().into());
        }
        let mode = self.mode(base).map_err(NotWritten::Failed)?;
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let written = match self.store.put_opts(path, body, options).await {
            Ok(result) => {
                let version = UpdateVersion {
                    e_tag: result.e_tag,
                    version: result.version,
                };
                let scope = ticket.scope().to_owned();
                let found = Found {
                    token,
                    write_id,
                    state,
                    scope,
                    payload,
                    version,
                };
                Ok(Snapshot::found(path.clone(), found))
            }
            Err(err) if condition_failed(&err) => self.moved(ticket, path, write_id, err).await,
            Err(err) if never_applied(&err) => {
                Err(NotWritten::Failed(FenceError::Store(err.into())))
            }
            Err(err) => Err(NotWritten::Failed(ticket.in_doubt(err.into()))),
        };
        match &written {
            Ok(snapshot) => self.remember(snapshot),
            Err(NotWritten::Failed(_)) => self.forget(path),
            Err(NotWritten::Raced(_)) => {}
        }
        written
    }

    /// The condition of a write over `base`: create-if-absent, or update-if-match on its
    /// version.
    fn mode(&self, base: &Snapshot) -> Result<PutMode, FenceError<Error>> {
        match (self.flaw, base.parts()) {
            (Flaw::CheckOutsideTransaction, _) => Ok(PutMode::Overwrite),
            (_, None) => Ok(PutMode::Create),
            (_, Some(found))
                if found.version.e_tag.is_none() && found.version.version.is_none() =>
            {
                Err(FenceError::Store(Error::NoVersion {
                    path: base.path().to_string(),
                }))
            }
            (_, Some(found)) => Ok(PutMode::Update(found.version.clone())),
        }
    }

    /// A write's condition failed: the object moved since it was read, or (when the store's
    /// client sent the write again after losing its reply) our own write moved it. Reads the
    /// object to tell: our write id there means the write landed.
    async fn moved(
        &self,
        ticket: &FenceTicket,
        path: &Path,
        write_id: WriteId,
        err: object_store::Error,
    ) -> Result<Snapshot, NotWritten> {
        let resent = resent(&err);
        let now = match self.read(path).await {
            Ok(now) => now,
            Err(_) if resent => return Err(NotWritten::Failed(ticket.in_doubt(err.into()))),
            Err(read) => return Err(NotWritten::Failed(FenceError::Store(read))),
        };
        let ours = self.flaw != Flaw::EtagOnly
            && now.parts().is_some_and(|found| found.write_id == write_id);
        if ours {
            tracing::debug!(path = %path, "a resent write found landed: its first send applied");
            return Ok(now);
        }
        if resent {
            // Our first send may have landed and been overwritten since: unknown.
            return Err(NotWritten::Failed(ticket.in_doubt(err.into())));
        }
        Err(NotWritten::Raced(now))
    }
}

/// Refuses an object fenced for another scope than the ticket's.
fn check_scope(ticket: &FenceTicket, snapshot: &Snapshot) -> Result<(), FenceError<Error>> {
    match snapshot.parts() {
        Some(found) if found.scope != ticket.scope() => Err(FenceError::Store(Error::OtherScope {
            path: snapshot.path().to_string(),
            fenced: found.scope.clone(),
            asked: ticket.scope().to_owned(),
        })),
        _ => Ok(()),
    }
}

/// A conditional write refused for its condition (or its object gone).
fn condition_failed(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::NotFound { .. }
    )
}

/// An error that says the write was refused or never sent (anything else may come after the
/// store applied it: a lost reply, a timeout, a server error).
fn never_applied(err: &object_store::Error) -> bool {
    matches!(
        err,
        object_store::Error::NotImplemented { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::UnknownConfigurationKey { .. }
    )
}

/// Whether the store's client sent the request more than once: `object_store` retries a
/// request whose connection closed before the reply, conditional writes included, and says so
/// only in its message (`after N retries`). Then a failed condition may be our own first send's
/// doing.
fn resent(err: &object_store::Error) -> bool {
    err.to_string().contains(" retries, max_retries")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compare_accepts_equal_and_newer_tokens_and_raises_on_newer() {
        let sound = Flaw::None;
        assert_eq!(sound.admits(5, None), Ok(true));
        assert_eq!(sound.admits(5, Some(5)), Ok(false));
        assert_eq!(sound.admits(6, Some(5)), Ok(true));
        assert_eq!(sound.admits(4, Some(5)), Err(5));
        assert_eq!(sound.admits(10, Some(9)), Ok(true));
        assert_eq!(sound.admits(i64::MAX, Some(i64::MAX - 1)), Ok(true));
    }

    #[test]
    fn each_compare_flaw_breaks_its_rule() {
        assert_eq!(Flaw::StrictlyGreater.admits(5, Some(5)), Err(5));
        assert_eq!(Flaw::Equality.admits(6, Some(5)), Err(5));
        assert_eq!(Flaw::StringCompare.admits(10, Some(9)), Err(9));
        assert_eq!(Flaw::NoUpsert.admits(1, None), Err(0));
    }
}
