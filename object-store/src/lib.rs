//! An object store fence for [`zkfence`], on the [`object_store`] crate (S3 and S3-compatible
//! stores, Google Cloud Storage, Azure Blob Storage): a stale lock holder's write to a fenced
//! object is refused, because every fenced object carries the highest token it has accepted
//! and every write is conditional on the exact version whose token it compared.
//!
//! # How it is kept
//!
//! A fenced object is a one-line header, then your payload:
//!
//! ```text
//! zkfence-fence 1 <token, 19 digits> <write id, 32 hex digits> <value|empty> <scope>\n<payload>
//! ```
//!
//! - [`ObjectFence::put`] reads the object, refuses a ticket older than its token
//!   ([`FenceError::Refused`](zkfence::fence::FenceError::Refused)), and writes with a
//!   precondition on what it read: **create-if-absent** (`If-None-Match: *`) for a missing
//!   object, **update-if-match** (`If-Match: <ETag>`, and the version where the store has one)
//!   otherwise. A newer holder's write in between fails the condition; the write reads again,
//!   and is refused.
//! - [`ObjectFence::update`] is a fenced read-modify-write on the same condition, and
//!   [`ObjectFence::put_if`] the compare-and-swap for one with slow work between its read and
//!   its write; [`ObjectFence::claim`] raises the token alone.
//! - [`ObjectFence::delete`] is **fenced**: it leaves an empty object holding the token (a
//!   tombstone). A plain delete throws the token away, and a stale holder's create-if-absent
//!   would succeed again. [`ObjectFence::purge`] is that plain delete, for objects no holder
//!   writes any more.
//! - [`ObjectFence::probe`] refuses a store that does not enforce the preconditions.
//!
//! Before each write the ticket's [`check`](zkfence::fence::FenceTicket::check) runs, and a
//! write whose outcome is unknown (its reply lost) is reported
//! [`InDoubt`](zkfence::fence::FenceError::InDoubt), as by every zkfence fence; the errors are
//! [`zkfence::fence`]'s, with this crate's [`Error`] as the store error.
//!
//! # Object stores' traps, said plainly
//!
//! - **The ETag is a hash of the content alone** (S3's, for a single-part upload: the MD5 of
//!   the bytes). A fence that kept its token in metadata, or nowhere, and trusted `If-Match`
//!   alone falls to an ABA: a stale holder reads version A; a newer holder writes B, then
//!   writes A's payload back; the object's ETag is A's again, and the stale holder's `If-Match`
//!   passes. Here the token and a per-write id are **in the bytes**, so no two writes share an
//!   ETag, and the newer holder's token refuses the stale one. (The write id also lets a writer
//!   recognise its own write when the store's client sent it again after losing the reply.)
//! - **Some stores ignore preconditions silently**: emulators and older servers (the tests use
//!   `moto` 4, which accepts every `If-Match`), gateways that strip headers. Every write then
//!   succeeds. [`ObjectFence::probe`] finds out; run it once against each store.
//! - **Local filesystems have no update-if-match** (`object_store`'s `LocalFileSystem` reports
//!   it not implemented): the probe refuses them, and a fenced update fails without writing.
//! - **Multipart uploads take no condition**: a fenced object is written with one `put`, so
//!   keep it small. Put big data under **unique keys** (written once, by anyone, with any
//!   upload), and fence a small **manifest** that names them: a stale holder's data objects
//!   are then harmless garbage that no manifest points at.
//! - **Replication across regions is asynchronous**: fence against one region's bucket.
//!
//! # The manifest pattern
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! use std::sync::Arc;
//! use object_store::{memory::InMemory, path::Path, ObjectStore, ObjectStoreExt};
//! use zkfence::fence::FenceTicket;
//! use zkfence_object_store::ObjectFence;
//!
//! let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
//! let fence = ObjectFence::new(store.clone());
//! fence.probe(&Path::from("_scratch")).await?; // once, at start-up
//! # let ticket: FenceTicket = "7@4294967303::/locks/reports".parse()?;
//! // The holder of /locks/reports (its ticket from `guard.ticket()`):
//! // 1. the data, under a key no one else writes (multipart is fine here);
//! let data = Path::from(format!("reports/data/{}.parquet", uuid::Uuid::new_v4()));
//! store.put(&data, vec![0u8; 1024].into()).await?;
//! // 2. the small manifest that points at it, fenced.
//! let manifest = Path::from("reports/manifest");
//! fence.put(&manifest, &ticket, data.to_string()).await?;
//! let current = fence.read(&manifest).await?;
//! assert_eq!(current.payload().map(|p| &p[..]), Some(data.as_ref().as_bytes()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With a lock from ZooKeeper:
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence_object_store::ObjectFence;
//!
//! # async fn demo(zk: zookeeper_client::Client, fence: ObjectFence) -> Result<(), Box<dyn std::error::Error>> {
//! let lock = FencedLock::new(zk, "/locks/reports", LockOptions::default())?;
//! let guard = lock.acquire().await?;
//! fence.put(&"reports/manifest".into(), &guard.ticket(), "reports/data/0001.parquet").await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! `fence.rs` the fenced writes; `connected.rs` the fence contract on the fenced objects under a
//! prefix; `dial.rs` an S3 bucket reached from its URL (the `aws` feature); `snapshot.rs` what
//! a read finds; `header.rs` the object format; `probe.rs` the store
//! check; `error.rs` the errors.

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

#[cfg(feature = "conformance")]
mod conformance;
mod connected;
#[cfg(feature = "aws")]
mod dial;
mod error;
mod fence;
mod header;
mod probe;
mod snapshot;

#[cfg(feature = "conformance")]
pub use crate::conformance::ConformanceStore;
pub use crate::connected::Connected;
pub use crate::error::Error;
pub use crate::fence::ObjectFence;

/// The object format and the write protocol, for a writer in another language (`zkfence fence
/// script s3://` prints it). An object store runs no code of ours: the compare is the writer's,
/// and what the store enforces is that nobody writes over a version they did not read. A writer
/// that skips a step is not fenced; run `zkfence fence verify s3://bucket/prefix` once against
/// a store to check that it enforces its part.
///
/// # Examples
///
/// ```
/// assert!(zkfence_object_store::PROTOCOL.contains("If-Match"));
/// ```
pub const PROTOCOL: &str = "\
zkfence object fence: the format and the write protocol

A fenced object is one header line, then the payload:

  zkfence-fence 1 <token> <write id> <state> <scope>\n<payload>

  token     the highest fencing token the object accepted, 19 digits, zero-padded
            (compare it as an integer: never as text, never as a double)
  write id  32 hex digits, random per write: no two writes share bytes, so no two share an
            ETag (a newer holder writing a stale holder's bytes back cannot make its
            If-Match pass), and a writer recognises its own write after a retry
  state     value (a payload follows) or empty (claimed before its first write, or deleted:
            a tombstone keeps the token)
  scope     the lock path

To write `payload` with token T (ZKFENCE_TOKEN, as an integer) under lock path S:

  1. GET the object (keep its ETag, and its version id where the store has versions).
  2. If it exists, parse the header's token; if token > T: refused, stop, write nothing.
  3. PUT the new bytes (header with T, a fresh write id, `value`, S; then the payload) with
     If-None-Match: * when the object did not exist, else If-Match: <the ETag read>.
  4. 412 Precondition Failed: another writer moved it since step 1: go back to step 1
     (a newer holder's write is then refused at step 2).
  5. A reply lost (timeout, reset): GET again; your write id in the header means it landed;
     another's means it may or may not have: read before doing anything else.

Delete by writing an `empty` object with T (a plain DELETE throws the token away, and a stale
holder's If-None-Match: * would succeed again). Multipart uploads take no condition: keep
fenced objects small and point them at data written under unique keys.
";
pub use crate::snapshot::Snapshot;
