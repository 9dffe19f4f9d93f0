//! [`Exclusive`] and [`Shared`]: what a hold's type says about who may hold beside it, and so
//! whether its fencing token may fence storage.

/// The mode of a hold: [`Exclusive`] (a mutex, a write lock, a leader) or [`Shared`] (a read
/// lock, a semaphore lease). Guards, handles and locks carry it as a type parameter, so that
/// only an exclusive hold can hand out a [`FenceTicket`](crate::fence::FenceTicket): the
/// compiler, not a runtime check, keeps a shared hold's token away from a fence. Sealed: the
/// two modes are the only ones.
///
/// # Examples
///
/// ```compile_fail
/// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
/// let read = rw.read().await?;
/// let ticket = read.ticket(); // a reader's token must never raise a fence: no ticket
/// # Ok(()) }
/// ```
///
/// ```compile_fail
/// # async fn demo(pool: zkfence::FencedSemaphore) -> zkfence::Result<()> {
/// use zkfence::Acquire;
/// let lease = pool.acquire().await?;
/// let ticket = lease.ticket(); // up to N leases hold at once: no ticket
/// # Ok(()) }
/// ```
///
/// ```
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// use zkfence::Acquire;
/// let guard = lock.acquire().await?;
/// let ticket = guard.ticket(); // a mutex holds alone: its token fences storage
/// # let _ = ticket; Ok(()) }
/// ```
pub trait Mode: sealed::Sealed + std::fmt::Debug + Send + Sync + 'static {
    /// Whether this mode holds alone.
    const EXCLUSIVE: bool;
}

/// The mode of a hold that nobody else has beside it: a [`FencedLock`](crate::FencedLock)'s, a
/// write lock's, a [`Leadership`](crate::Leadership)'s, each lock of a
/// [`MultiGuard`](crate::MultiGuard). Its token fences storage: see
/// [`Held::ticket`](crate::Held::ticket).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
/// use zkfence::Acquire;
/// let guard: zkfence::LockGuard<zkfence::Exclusive> = lock.acquire().await?; // = LockGuard
/// # let _ = guard; Ok(()) }
/// ```
#[derive(Debug)]
pub enum Exclusive {}

/// The mode of a hold that others may have at the same time: a read lock's
/// ([`FencedRwLock::read`](crate::FencedRwLock::read)), a semaphore lease's
/// ([`FencedSemaphore`](crate::FencedSemaphore)). Its token orders and labels its work, but
/// never fences storage: a reader's token raising a fence would lock out the writer, and a
/// newer lease's would lock out the older leases that still hold.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(rw: zkfence::FencedRwLock) -> zkfence::Result<()> {
/// let read: zkfence::LockGuard<zkfence::Shared> = rw.read().await?;
/// read.check()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub enum Shared {}

impl Mode for Exclusive {
    const EXCLUSIVE: bool = true;
}

impl Mode for Shared {
    const EXCLUSIVE: bool = false;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Exclusive {}
    impl Sealed for super::Shared {}
}
