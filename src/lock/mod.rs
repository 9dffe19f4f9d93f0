//! [`FencedLock`]: the mutex (and each side of a read/write lock, each semaphore lease), its
//! queue's contenders and holders, revocation.
//!
//! The files: `fenced_lock.rs` (the type, how it is made, what it is on), `acquisition.rs`
//! (an acquire: reentrancy, the queue, the guard), `contenders.rs` (the queue as it stands:
//! [`Contender`], the holders), `revocation.rs` (asking a holder to let go, or taking the lock).

mod acquisition;
mod contenders;
mod fenced_lock;
mod revocation;

pub use contenders::Contender;
pub use fenced_lock::FencedLock;
