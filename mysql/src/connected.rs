//! [`Connected`]: a [`MySqlFence`] bound to a connection of its own, the fence contract
//! ([`Fence`]) on MySQL/MariaDB.
//!
//! [`Fence`]: zkfence::fence::Fence

use mysql_async::Conn;
use tokio::sync::Mutex;
use zkfence::fence::BoxError;

use crate::dial::Dial;
use crate::MySqlFence;

/// A [`MySqlFence`] with a connection of its own: the fence contract every zkfence store
/// offers ([`Fence`]), as `zkfence fence` drives it. A fenced transaction takes a connection of
/// yours ([`MySqlFence::transaction`]); this is for the rest.
///
/// [`Fence`]: zkfence::fence::Fence
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::fence::Fence;
/// let url = "mysql://app:secret@db/orders";
/// let fence = zkfence_mysql::Connected::connect(url, zkfence_mysql::MySqlFence::new()).await?;
/// println!("{:?}", fence.seen("/locks/orders").await?);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Connected {
    fence: MySqlFence,
    conn: Mutex<Conn>,
}

impl Connected {
    /// `fence` on `conn`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(conn: mysql_async::Conn) {
    /// let fence = zkfence_mysql::Connected::new(zkfence_mysql::MySqlFence::new(), conn);
    /// # let _ = fence;
    /// # }
    /// ```
    pub fn new(fence: MySqlFence, conn: Conn) -> Connected {
        Connected {
            fence,
            conn: Mutex::new(conn),
        }
    }

    /// `fence` on a new connection to `url` (`mysql://user:password@host:port/database`, as
    /// mysql_async takes it), over TCP, with TLS as the MySQL client's `ssl-mode` and `ssl-ca`
    /// ask in the URL's query (`REQUIRED` encrypts without checking the server; `VERIFY_CA`
    /// checks its certificate's chain, `VERIFY_IDENTITY` its name too; roots from `ssl-ca`, a
    /// PEM file, else Mozilla's), and a client certificate for an account that requires one
    /// as its `ssl-cert` (a PEM file: the certificate, then any intermediates) and `ssl-key`
    /// (its unencrypted PEM key) give it (`ssl_cert`, `ssl_key` too; alone they ask for
    /// `REQUIRED`). TLS needs the `tls` feature.
    ///
    /// # Errors
    ///
    /// A URL it cannot use (an unknown `ssl-mode`, `ssl-cert` without `ssl-key` or the
    /// reverse, an encrypted key, TLS without the `tls` feature, a missing `ssl-ca`, an
    /// unreadable `ssl-cert` or `ssl-key`), or the server's error (unreachable, refused, a
    /// certificate it does not trust, or that does not trust ours).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// use zkfence_mysql::{Connected, MySqlFence};
    /// let url = "mysql://app:secret@db.internal/orders?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/db-ca.pem";
    /// let fence = Connected::connect(url, MySqlFence::new()).await?;
    /// # let _ = fence; Ok(()) }
    /// ```
    pub async fn connect(url: &str, fence: MySqlFence) -> Result<Connected, BoxError> {
        let conn = Dial::parse(url)?.open().await?;
        Ok(Connected::new(fence, conn))
    }

    /// The fence.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(fence: zkfence_mysql::Connected) {
    /// println!("{}", fence.fence().install_sql());
    /// # }
    /// ```
    pub fn fence(&self) -> &MySqlFence {
        &self.fence
    }

    /// Installs the fence on the connection ([`MySqlFence::install`]).
    ///
    /// # Errors
    ///
    /// As [`MySqlFence::install`].
    ///
    /// # Cancel safety
    ///
    /// As [`MySqlFence::install`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence_mysql::Connected) -> Result<(), mysql_async::Error> {
    /// fence.install().await?;
    /// # Ok(()) }
    /// ```
    pub async fn install(&self) -> Result<(), mysql_async::Error> {
        self.fence.install(&mut *self.conn.lock().await).await
    }
}

zkfence::fence::author::connected_fence!(
    Connected,
    crate::fence::STORE,
    |this| this.fence,
    &mut *this.conn.lock().await
);
