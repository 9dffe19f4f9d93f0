//! [`LockGuard`], the proof of a hold on a lock, and [`Held`], the handle a critical section
//! gets from [`Acquire::run`](crate::Acquire::run); and the hold they share: one
//! acquisition's node, token, watchdog registration and release, which ends with the last of
//! its guards (more than one with reentrancy).
//!
//! By file: `hold.rs` (the hold the guards and handles share, and this process's holds for
//! reentrancy), `held.rs` (`Held`, the handle: token, check, cancellation), `lock_guard.rs`
//! (`LockGuard`: a hold's guards, made from a grant or nested, and their release).

mod held;
mod hold;
mod lock_guard;

pub use self::held::Held;
pub(crate) use self::hold::{owned_by, NewHold};
pub use self::lock_guard::LockGuard;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn guard_and_handle_are_send_sync_static() {
        assert_send_sync_static::<LockGuard>();
        assert_send_sync_static::<Held>();
        assert_send_sync_static::<LockGuard<crate::Shared>>();
        assert_send_sync_static::<Held<crate::Shared>>();
        assert_send_sync_static::<crate::FencedLock>();
        assert_send_sync_static::<crate::FencedLock<crate::Shared>>();
        assert_send_sync_static::<crate::FenceTicket>();
    }
}
