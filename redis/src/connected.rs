//! [`Connected`]: a [`RedisFence`] bound to a connection of its own (a server's, or a
//! cluster's through one node's URL), the fence contract ([`Fence`]) on Redis.
//!
//! [`Fence`]: zkfence::fence::Fence

use redis::aio::MultiplexedConnection;
use zkfence::fence::{BoxError, FenceState};

use crate::{Link, RedisFence};

/// A [`RedisFence`] with a connection of its own: the fence contract every zkfence store
/// offers ([`Fence`]), as `zkfence fence` drives it. Fenced writes go through
/// [`RedisFence::write`] on a connection of yours, or through the function library from any
/// client. On a Redis Cluster (a node's URL: see [`Link::open`]) a claim, `seen` and `rebase`
/// go to the primary of the scope's slot, and [`install`](Connected::install) and `fences`
/// to every primary.
///
/// [`Fence`]: zkfence::fence::Fence
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
    conn: Link,
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
        Connected {
            fence,
            conn: conn.into(),
        }
    }

    /// `fence` on a new connection to `url`: `redis://host:port/db`, or with the `tls`
    /// feature `rediss://host:port/db` (the server's certificate checked against the system's
    /// roots, which honour `SSL_CERT_FILE`, or redis-py's `?ssl_ca_certs=FILE`; `#insecure`
    /// at the end checks nothing; a client certificate for a server that requires one as
    /// redis-py's `ssl_certfile` and `ssl_keyfile` give it, unencrypted PEM files). The URL of
    /// any node of a Redis Cluster reaches the whole cluster ([`Link::open`]).
    ///
    /// # Errors
    ///
    /// Redis's error (unreachable, refused, a bad URL, a certificate it does not trust or that
    /// does not trust ours, `rediss://` without the `tls` feature, an unreadable
    /// `ssl_ca_certs`, `ssl_certfile` or `ssl_keyfile`); [`Link::open`]'s for a cluster.
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
        let conn = Link::open(url).await?;
        Ok(Connected { fence, conn })
    }

    /// Whether it reaches a Redis Cluster.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(fence: zkfence_redis::Connected) {
    /// println!("cluster: {}", fence.is_cluster());
    /// # }
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// The primaries' addresses (`host:port`, sorted): a cluster's, as `CLUSTER NODES` names
    /// them (each reached on a connection of its own); a server's own.
    ///
    /// # Errors
    ///
    /// Redis's error; a primary that cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence_redis::Connected) -> Result<(), zkfence::fence::BoxError> {
    /// println!("{}", fence.primaries().await?.join(", "));
    /// # Ok(()) }
    /// ```
    pub async fn primaries(&self) -> Result<Vec<String>, BoxError> {
        let primaries = self.conn.primaries().await?;
        Ok(primaries.into_iter().map(|p| p.addr).collect())
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

    /// Loads the function library ([`RedisFence::install`]) on the server, or on every primary
    /// of a cluster, each on a connection of its own (a replica gets it from its primary);
    /// returns the primaries' addresses it loaded it on.
    ///
    /// # Errors
    ///
    /// As [`RedisFence::install`], naming the primary that refused; a primary that cannot be
    /// reached. The primaries before it in address order have the library.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each primary has the library or not, and installing again replaces it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence_redis::Connected) -> Result<(), zkfence::fence::BoxError> {
    /// let primaries = fence.install().await?;
    /// println!("loaded on {}", primaries.join(", "));
    /// # Ok(()) }
    /// ```
    pub async fn install(&self) -> Result<Vec<String>, BoxError> {
        let mut loaded = Vec::new();
        for mut primary in self.conn.primaries().await? {
            if let Err(err) = self.fence.install(&mut primary.conn).await {
                return Err(match self.conn.is_cluster() {
                    true => format!("the primary {}: {err}", primary.addr).into(),
                    false => err.into(),
                });
            }
            loaded.push(primary.addr);
        }
        Ok(loaded)
    }

    /// Every fence on every primary, by scope (`Fence::fences`).
    async fn every_primarys_fences(&self) -> Result<Vec<FenceState>, BoxError> {
        let mut fences = Vec::new();
        for mut primary in self.conn.primaries().await? {
            fences.extend(self.fence.fences(&mut primary.conn).await?);
        }
        fences.sort_by(|a, b| a.scope.cmp(&b.scope));
        Ok(fences)
    }
}

zkfence::fence::author::connected_fence!(
    Connected,
    crate::fence::STORE,
    |this| this.fence,
    &mut this.conn.clone();
    fences: this.every_primarys_fences()
);
