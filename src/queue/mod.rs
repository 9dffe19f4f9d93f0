//! The queue protocol every lock kind shares: take our turn in the in-process queue, create
//! our node (the listing pipelined behind it), wait on the nodes the kind's predicate names,
//! give a failed holder's stalled work its lock-delay, and hand back a [`Grant`]: the node,
//! its token, and what its release must do. The front types build their guards from it.
//!
//! [`kind`] holds the predicates, [`names`] the node names and their order, [`cleanup`] what
//! removes our node on every way out (the pending node, then the grant's release),
//! [`in_process`] the queue inside a process.
//!
//! The steps, each in a file of its own: [`state`] what they share, [`create`] our node
//! created and checked, [`wait`] our turn awaited (the watches it sets in [`watches`]), and
//! [`grant`] the lock-delay, the proof and the grant. Why a handoff needs no listing is
//! [`handoff`]'s argument; the semaphore's gate is [`watches`]'.
//!
//! # What the queue model checks
//!
//! The queue model (`model/src/queue/`, in the `zkfence-model` package) checks the protocol and
//! [`handoff`]'s argument exhaustively for three contenders (a mutex's, or mixes of readers and
//! writers, with lock-delay on and off) on a linearizable server: creates in any order, each
//! listing, the watches the waiter asks for, events in the transactions' order, marked and
//! plain releases, waiters that give up, sessions that expire, revocation requests written into
//! any node, and waits that outlast the lease; and, with two of the contenders on one session,
//! both their nodes deleted in one transaction they are not told of. Every decision is this
//! module's: the kinds' `position`, the handoff's `Ahead`, `release_marked`,
//! `withdrawal_marked`, `rereads_after_delay` and the grant rule (`LeaseCell::grants_at_once`).
//! In every state no two holders exclude each other, a holder's live predecessors that block
//! its kind are all gone, a grant holds on a lease that holds, a grant after a lock-delay never
//! rests on a reply sent after its node went, and tokens increase; and every schedule ends with
//! every contender served. It assumes of ZooKeeper what the argument above does: sequential
//! nodes, an atomic `multi`, one-shot watches that fire in the transactions' order, in order
//! with replies, and a zxid shared by a transaction's events. It leaves out connection loss (a
//! lost reply, a watch set twice), semaphores and elections (their own tests), the waiter's
//! watch on its own node (a grant that rests on no read made after its node went is that
//! watch's and the watchdog's to cancel), and time beyond whether a wait outlasted the lease
//! (the lease model's).

pub(crate) mod cleanup;
mod create;
mod grant;
mod handoff;
pub(crate) mod in_process;
pub(crate) mod kind;
#[cfg(feature = "model")]
pub mod model;
pub(crate) mod names;
mod state;
mod wait;
mod watches;

use crate::error::{Error, Result};
use crate::requests::chroot_prefix;
use crate::wait::Wait;
use crate::watchdog::{self, WatchdogRef};

pub(crate) use self::cleanup::Release;
use self::kind::Kind;
use self::state::Attempt;
pub(crate) use self::state::{
    create_request_bytes, Admission, Grant, Queue, Request, MAX_REQUEST_BYTES,
};

/// The protocol, as its steps: our turn in the process, our node in the queue, our turn in
/// the queue, the lock-delay, the grant. `Ok(None)` when the wait ran out.
pub(crate) async fn acquire(queue: &Queue, request: Request<'_>) -> Result<Option<Grant>> {
    let Request { wait, under, data } = request;
    let client = &queue.client;
    if let Some(err) = Error::from_session_state(client.state(), client.session_id()) {
        return Err(err);
    }
    let Ok(turn) = in_process::take_turn(queue.in_process.as_ref(), &queue.label, wait).await
    else {
        return Ok(None);
    };
    let mut watchdog_ref = watchdog::watch_session(client, &queue.options.lease, &queue.path);
    // An acquire that cannot wait (`try_acquire`, a downgrade's read lock) sets no watch.
    let waits = !matches!(wait, Wait::Never) && under.is_none();
    reserve_node(queue, &mut watchdog_ref, waits)?;
    let data = data.unwrap_or(&queue.options.data);
    let mut attempt = Attempt::new(queue, wait, data, watchdog_ref);
    let Some(created) = attempt.create().await? else {
        return Ok(None);
    };
    let node = attempt.verify(created).await?;
    let waited = match under {
        Some(write) => attempt.beside(&node, write).await?,
        None => attempt.wait_turn(&node).await?,
    };
    let Some(mut waited) = waited else {
        return Ok(None);
    };
    if !attempt.delay(waited.vanished).await? {
        return Ok(None);
    }
    if handoff::rereads_after_delay(waited.vanished, queue.options.flaw) {
        attempt.reread(&node).await?;
    }
    if !attempt.prove(&node).await? {
        return Ok(None);
    }
    // A session that ended while we waited (or during the lock-delay), or a node of ours whose
    // deletion came in behind the event we proceeded on, grants nothing.
    attempt.still_queued(&node, &mut waited.own_watch).await?;
    Ok(Some(attempt.into_grant(node, waited, turn)))
}

/// The longest name a lock node of ours gets: `_c_`, a UUID, `-`, the longest marker
/// (`__READ__`, `__WRIT__`) and ten digits.
const NODE_NAME_BYTES: u64 = 3 + 36 + 1 + 8 + 10;

/// Reserves what our node will add to the session's close-session transaction (4 bytes of
/// length and the node's full path on the server: the chroot, the lock path, `/`, its name),
/// and, for an acquire that `waits`, the paths its watches may take until its grant (see
/// [`waiting_watch_paths`]), each about as long as our node's path.
fn reserve_node(queue: &Queue, watchdog_ref: &mut WatchdogRef, waits: bool) -> Result<()> {
    let client = &queue.client;
    let chroot = chroot_prefix(client.path()).len() as u64;
    let path = chroot + queue.path.len() as u64 + 1 + NODE_NAME_BYTES;
    let limit = queue.options.session_node_bytes as u64;
    let session = client.session_id();
    watchdog_ref
        .reserve_node(4 + path, limit)
        .map_err(|(nodes, bytes)| Error::SessionNodeBudget {
            session,
            nodes,
            bytes,
            limit,
        })?;
    if !waits {
        return Ok(());
    }
    let limit = crate::WAITING_WATCH_BYTES as u64;
    let paths = waiting_watch_paths(queue.kind, queue.options.lock_delay.is_some());
    watchdog_ref
        .reserve_waiting(paths * path, limit)
        .map_err(|(waiting, bytes)| Error::SessionWatchBudget {
            session,
            waiting,
            bytes,
            limit,
        })
}

/// How many paths a waiting acquire of `kind` may have watched at once, as the client sets
/// them again after a disconnect (a path watched for its data and its children counts twice):
/// its predecessor's two, its own node's and its herald's; a semaphore's waiter with lock-delay
/// watches its `n` nearest nodes both ways, and its herald.
fn waiting_watch_paths(kind: Kind, lock_delay: bool) -> u64 {
    match kind {
        Kind::Semaphore(n) if lock_delay => 2 * u64::from(n) + 2,
        _ => 4,
    }
}
