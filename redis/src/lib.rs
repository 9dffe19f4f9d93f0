//! A Redis fence for [`zkfence`]: the fence's compare and the caller's commands run in one
//! Lua script, so Redis refuses a stale lock holder's write atomically with the write itself.
//!
//! # How it is kept
//!
//! Each **scope** (a lock path) has a fence key, `zkfence:fence:{<scope>}`, holding the highest
//! token accepted, kept as a **zero-padded 19-digit decimal string**. A caller may send a token
//! in any decimal text form (`42`, `+42`, `0000000042`, as `ZKFENCE_TOKEN` gives it or padded);
//! anything else is a `ZF002` error reply. Lua's numbers are doubles: above 2⁵³ two
//! neighbouring tokens compare equal, so the scripts never call `tonumber` on a token; they
//! strip the sign and leading zeros and compare digits by length, then as text. A refusal is a
//! `ZF001` error reply. `KEYS[1]` must be a fence key: a claim on any other key (an
//! application's counter holding a number) is a `ZF002` error reply, nothing written. The
//! scripts ([`CLAIM_SCRIPT`], [`WRITE_SCRIPT`]) and the function library
//! ([`RedisFence::install`]; [`RedisFence::through_functions`] calls it from Rust) are published
//! for users of other clients; their protocol is in the repository's `docs/fences.md`.
//!
//! - [`RedisFence::claim`] raises the fence (refusing a lower token);
//! - [`RedisFence::write`] runs your [`Commands`] in the same script, after the compare, and
//!   returns their replies: nothing of them runs for a refused token;
//! - a read-modify-write **claims before it reads** (as every fence here: see
//!   [`zkfence::fence`]); the write's script compares again.
//!
//! # Redis's own limits, said plainly
//!
//! - **Cluster**: a script may only touch keys of one hash slot. The fence key's hash tag is
//!   the scope (`{/locks/orders}`); put the same tag in every key you write under the fence
//!   (`{/locks/orders}:balance`). [`RedisFence::write`] refuses, before sending, a key of
//!   another slot. One node's URL reaches the whole cluster ([`Link::open`]: claims and
//!   writes go to the primary of the scope's slot, `MOVED` and `ASK` followed);
//!   [`Connected`] installs the function library on every primary and lists every
//!   primary's fences, and `ConformanceStore` (the `conformance` feature) checks every
//!   primary.
//! - **A failover can take the fence backwards**: replication is asynchronous, so a fence
//!   raised on a primary that dies before replicating it is lost with it, and the promoted
//!   replica accepts an older token again. A claim is durable across a failover only once
//!   `WAIT <replicas> <timeout>` after it returned at least the replicas you require:
//!   [`RedisFence::with_wait`] sends it with each claim and write, and fewer replicas than
//!   asked is [`FenceError::InDoubt`](zkfence::fence::FenceError::InDoubt). `WAIT` narrows
//!   the window (a replica that acknowledged can still lag the others a failover picks); only
//!   a store with synchronous replication closes it.
//! - **Scripts are not rolled back**: a command of yours that errors inside the script stops
//!   it, and the commands before it stay applied. Write commands that cannot fail (right key
//!   types) and check the replies.
//! - **A restart without persistence forgets the fence**: the fence key lives in memory as
//!   your data does. Without an append-only file synced on every write (`appendonly yes`,
//!   `appendfsync always`; `everysec` can lose the last second's raises), a restarted server
//!   accepts any token again, a stale holder's too. Fence keys carry no TTL: an `allkeys-*`
//!   eviction policy drops them under memory pressure, `noeviction` and `volatile-*` never.
//!   The check of a deployment (`zkfence fence verify`, `ConformanceStore` with the
//!   `conformance` feature) fails such a server unless told to accept it
//!   (`ConformanceStore::accept_volatile`).
//! - **`MULTI` and pipelines do not stop at a refused claim**: the commands queued after it
//!   run all the same (`EXEC` returns the refusal among its replies). Only the one call,
//!   [`RedisFence::write`] (`FCALL zkfence_write`), keeps a refused holder's writes out.
//!
//! # Examples
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence_redis::{Commands, RedisFence};
//!
//! # async fn demo(zk: zookeeper_client::Client, mut redis: redis::aio::MultiplexedConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let lock = FencedLock::new(zk, "/locks/orders", LockOptions::default())?;
//! let fence = RedisFence::new();
//! let guard = lock.acquire().await?;
//! let ticket = guard.ticket();
//! fence.claim(&mut redis, &ticket).await?; // before the first read
//! let total: i64 = redis::cmd("GET").arg("{/locks/orders}:total").query_async(&mut redis).await.unwrap_or(0);
//! let commands = Commands::new().command(|c| c.arg("SET").key("{/locks/orders}:total").arg(total + 1));
//! fence.write(&mut redis, &ticket, &commands).await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

mod cluster;
#[cfg(feature = "conformance")]
mod conformance;
mod connected;
mod dial;
mod fence;

pub use crate::cluster::Link;
#[cfg(feature = "conformance")]
pub use crate::conformance::ConformanceStore;
pub use crate::connected::Connected;
pub use crate::fence::{Command, Commands, RedisFence, CLAIM_SCRIPT, FUNCTIONS, WRITE_SCRIPT};
pub use zkfence::fence::{BAD_CLAIM, REFUSED};
