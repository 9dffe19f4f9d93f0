//! [`FencedSemaphore`]: up to N holders, each with its own token and watchdog.

use std::future::Future;
use std::pin::Pin;

use zookeeper_client as zk;

use crate::acquire::{sealed::Sealed, Acquire};
use crate::error::{Error, Result};
use crate::guard::{Held, LockGuard};
use crate::lock::{Contender, FencedLock};
use crate::mode::Shared;
use crate::options::{LockOptions, ParentMode};
use crate::queue::kind::Kind;
use crate::queue::Admission;
use crate::requests::nodes::create_parents;
use crate::requests::retry::retrying;
use crate::wait::Wait;

/// A fair, fenced counting semaphore: up to `permits` holders at once on one ZooKeeper path.
///
/// Contenders queue as ephemeral sequential nodes `_c_<uuid>-lease-<seq>`; the first
/// `permits` nodes hold a lease. Only the first waiter watches the holders (a child watch on the
/// path); every other waiter watches the waiter just ahead of it, which tells it, by writing
/// its own node once admitted, that it now comes first. So a release notifies two waiters, the
/// first and the next, however many permits and waiters there are (the crate's queue docs,
/// "The semaphore's gate").
/// Each lease is a [`LockGuard`] with its own fencing token (strictly increasing per
/// acquisition), its own cancellation and its own lease watchdog.
///
/// **The tokens do not fence storage the way the mutex's do.** Up to `permits` holders are
/// valid at once, so storage that kept the highest token it saw would refuse the older of two
/// legitimate holders. A lease's token orders and labels its work (and its
/// [`check`](crate::Held::check) and cancellation still stop it once its lease has lapsed);
/// to fence a resource that only one holder may write, put that resource behind a
/// [`FencedLock`](crate::FencedLock) of its own.
///
/// **All clients agree on the count.** The count lives in the semaphore node's data: the
/// first client to use the path stores its own (a versioned write, so two first clients
/// cannot both win), and every acquire reads it in the same round trip as its create and
/// listing. A client built with a different count gets [`Error::PermitsMismatch`] from
/// `acquire` (its node is removed first): it never admits holders by a count the others do
/// not share. The semaphore node is created persistent (not as a container, whatever the
/// options say), so the count survives idle periods.
///
/// [`set_permits`](Self::set_permits) changes the count for everyone: clients still built
/// with the old count fail at their next acquire until rebuilt. Holders already admitted
/// keep their leases, and waiters that read the old count before the change still admit by
/// it; so lower the count only after rebuilding the clients, or accept a transition with up
/// to the old count of holders.
///
/// Cost per release with waiters queued: two notifications, two listings of the queue (each
/// the size of the queue), and one write of the admitted waiter's node, which the node's ACL
/// must let its creator make; a new contender arriving also wakes the first waiter, which
/// lists twice. With lock-delay every waiter watches the `permits` nodes ahead of it instead
/// (to see each holder's release marker), and a release wakes up to `permits` waiters.
///
/// # Examples
///
/// ```no_run
/// # use zkfence::Acquire;
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = zookeeper_client::Client::connect("127.0.0.1:2181").await?;
/// let pool = zkfence::FencedSemaphore::new(client, "/semaphores/exports", 3, zkfence::LockOptions::default())?;
/// let lease = pool.acquire().await?; // one of at most 3
/// println!("lease token {}", lease.token());
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedSemaphore {
    lock: FencedLock<Shared>,
    permits: u32,
    /// The ACLs of the semaphore node, should `set_permits` have to create it.
    acls: Vec<zk::Acl>,
}

impl FencedSemaphore {
    /// A semaphore of `permits` on `path`, using `client`'s session. Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// As [`FencedLock::new`]; [`Error::InvalidOptions`] for zero permits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: zookeeper_client::Client) -> zkfence::Result<()> {
    /// let pool = zkfence::FencedSemaphore::new(client, "/semaphores/exports", 3, zkfence::LockOptions::default())?;
    /// assert_eq!(pool.permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn new(
        client: zk::Client,
        path: impl Into<String>,
        permits: u32,
        options: LockOptions,
    ) -> Result<FencedSemaphore> {
        if permits == 0 {
            return Err(Error::InvalidOptions(
                "a semaphore needs at least one permit",
            ));
        }
        // The node holds the count: it must not be reaped as an empty container.
        let options = options.with_parent_mode(ParentMode::Persistent);
        let acls = options.acls.clone();
        Ok(FencedSemaphore {
            lock: FencedLock::with_kind(
                client,
                path.into(),
                options,
                Kind::Semaphore(permits),
                Some(Box::new(PermitAgreement { permits })),
            )?,
            permits,
            acls,
        })
    }

    /// The count this client was built with.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(pool: zkfence::FencedSemaphore) {
    /// println!("{} permits", pool.permits());
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The semaphore path.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(pool: zkfence::FencedSemaphore) {
    /// println!("{}", pool.path());
    /// # }
    /// ```
    pub fn path(&self) -> &str {
        self.lock.path()
    }

    /// The holders: the first `permits` nodes of the queue, by this client's count (which
    /// `acquire` checks against the stored one).
    ///
    /// # Errors
    ///
    /// As [`FencedLock::contenders`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(pool: zkfence::FencedSemaphore) -> zkfence::Result<()> {
    /// for holder in pool.holders().await? {
    ///     println!("{} token {}", holder.identity(), holder.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn holders(&self) -> Result<Vec<Contender>> {
        let mut queue = self.lock.contenders().await?;
        queue.truncate(self.permits as usize);
        Ok(queue)
    }

    /// Changes the stored count, for every client, creating the semaphore node (persistent,
    /// with this client's ACLs) and its parents if needed. Clients built with another count
    /// get [`Error::PermitsMismatch`] at their next acquire until rebuilt (see the type's docs
    /// for lowering the count).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] for zero; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one write (and the creates it may need), each of which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(pool: zkfence::FencedSemaphore) -> zkfence::Result<()> {
    /// pool.set_permits(5).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        if permits == 0 {
            return Err(Error::InvalidOptions(
                "a semaphore needs at least one permit",
            ));
        }
        self.store_count(permits.to_string().as_bytes()).await
    }

    /// Sets the semaphore node's data to `count` (creating it and its parents as persistent
    /// nodes, with this client's ACLs, when missing), retried across ConnectionLoss.
    async fn store_count(&self, count: &[u8]) -> Result<()> {
        let (client, path) = (self.lock.client(), self.lock.path());
        let mut created = false;
        loop {
            match retrying(client, || client.set_data(path, count, None)).await? {
                Ok(_) => return Ok(()),
                Err(zk::Error::NoNode) if !created => {
                    created = true;
                    let mode = zk::CreateMode::Persistent;
                    create_parents(client, path, mode, &self.acls).await?;
                }
                Err(err) => return Err(Error::from_request("set", path, client.session_id(), err)),
            }
        }
    }
}

impl Sealed for FencedSemaphore {}

impl Acquire for FencedSemaphore {
    type Guard = LockGuard<Shared>;
    type Handle = Held<Shared>;

    fn acquire_with(
        &self,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<LockGuard<Shared>>>> + Send {
        self.lock.acquire_with(wait)
    }
}

/// The semaphore's admission in the queue protocol: a lease is admitted only if this client's
/// count agrees with the stored one (read in the create's round trip).
#[derive(Debug)]
struct PermitAgreement {
    permits: u32,
}

impl Admission for PermitAgreement {
    fn admit<'a>(
        &'a self,
        client: &'a zk::Client,
        path: &'a str,
        read: Option<(Vec<u8>, zk::Stat)>,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(agree_on_permits(client, path, self.permits, read))
    }
}

/// Makes all clients of a semaphore agree on its permit count: the count stored in the
/// semaphore node's data. The first client stores its own (a versioned set, so two first
/// clients cannot both win); later ones must match it.
async fn agree_on_permits(
    client: &zk::Client,
    path: &str,
    requested: u32,
    mut read: Option<(Vec<u8>, zk::Stat)>,
) -> Result<()> {
    let session = client.session_id();
    loop {
        let (data, stat) = match read.take() {
            Some(read) => read,
            None => match retrying(client, || client.get_data(path)).await? {
                Ok(read) => read,
                Err(err) => return Err(Error::from_request("get", path, session, err)),
            },
        };
        if data.is_empty() {
            let value = requested.to_string();
            // Versioned: two first clients cannot both store, and a repeat after a lost reply
            // finds the version moved and reads again.
            let set = || client.set_data(path, value.as_bytes(), Some(stat.version));
            match retrying(client, set).await? {
                Ok(_) => return Ok(()),
                Err(zk::Error::BadVersion) => continue, // another client stored first
                Err(err) => return Err(Error::from_request("set", path, session, err)),
            }
        }
        let stored = std::str::from_utf8(&data)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        return match stored {
            Some(stored) if stored == requested => Ok(()),
            Some(stored) => Err(Error::PermitsMismatch {
                path: path.to_owned(),
                stored,
                requested,
            }),
            None => Err(Error::PermitsMismatch {
                path: path.to_owned(),
                stored: 0,
                requested,
            }),
        };
    }
}
