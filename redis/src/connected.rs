//! [`Connected`]: a [`RedisFence`] bound to a connection of its own, the fence contract
//! ([`Fence`]) on Redis.

use redis::aio::MultiplexedConnection;
use zkfence::fence::{BoxError, BoxFuture, Fence, FenceError, FenceState, FenceTicket};

use crate::RedisFence;

/// A [`RedisFence`] with a connection of its own: the fence contract every zkfence store
/// offers ([`Fence`]), as `zkfence fence` drives it. Fenced writes go through
/// [`RedisFence::write`] on a connection of yours, or through the function library from any
/// client.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::fence::Fence;
/// let fence = zkfence_redis::Connected::connect("redis://cache/", zkfence_redis::RedisFence::new()).await?;
/// println!("{:?}", fence.seen("/locks/orders").await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connected {
    fence: RedisFence,
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Connected {
    /// `fence` on `conn`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(conn: redis::aio::MultiplexedConnection) {
    /// let fence = zkfence_redis::Connected::new(zkfence_redis::RedisFence::new(), conn);
    /// # let _ = fence;
    /// # }
    /// ```
    pub fn new(fence: RedisFence, conn: MultiplexedConnection) -> Connected {
        Connected { fence, conn }
    }

    /// `fence` on a new connection to `url`: `redis://host:port/db`, or with the `tls`
    /// feature `rediss://host:port/db` (the server's certificate checked against the system's
    /// roots, which honour `SSL_CERT_FILE`; `#insecure` at the end checks nothing).
    ///
    /// # Errors
    ///
    /// Redis's error (unreachable, refused, a bad URL, a certificate it does not trust,
    /// `rediss://` without the `tls` feature).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// use zkfence_redis::{Connected, RedisFence};
    /// let fence = Connected::connect("rediss://cache.internal:6380/0", RedisFence::new()).await?;
    /// # let _ = fence; Ok(()) }
    /// ```
    pub async fn connect(url: &str, fence: RedisFence) -> Result<Connected, BoxError> {
        Ok(Connected::new(fence, crate::dial::open(url).await?))
    }

    /// The fence.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(fence: zkfence_redis::Connected) {
    /// println!("{}", fence.fence().fence_key("/locks/a"));
    /// # }
    /// ```
    pub fn fence(&self) -> &RedisFence {
        &self.fence
    }

    /// Loads the function library ([`RedisFence::install`]).
    ///
    /// # Errors
    ///
    /// As [`RedisFence::install`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence_redis::Connected) -> redis::RedisResult<()> {
    /// fence.install().await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self) -> Result<(), redis::RedisError> {
        self.fence.install(&mut self.conn.clone()).await
    }
}

impl Fence for Connected {
    fn store(&self) -> &'static str {
        crate::fence::STORE
    }

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<Option<i64>, FenceError<BoxError>>> {
        Box::pin(async move {
            let outcome = self.fence.claim(&mut self.conn.clone(), ticket).await;
            outcome.map_err(|e| e.map_store(|e| Box::new(e) as BoxError))
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move { Ok(self.fence.seen(&mut self.conn.clone(), scope).await?) })
    }

    fn rebase<'a>(
        &'a self,
        scope: &'a str,
        to: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, BoxError>> {
        Box::pin(async move { Ok(self.fence.rebase(&mut self.conn.clone(), scope, to).await?) })
    }

    fn fences(&self) -> BoxFuture<'_, Result<Vec<FenceState>, BoxError>> {
        Box::pin(async move { Ok(self.fence.fences(&mut self.conn.clone()).await?) })
    }
}
