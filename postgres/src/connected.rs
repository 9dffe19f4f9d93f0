//! [`Connected`]: a [`PostgresFence`] bound to a connection of its own, the fence contract
//! ([`Fence`]) on PostgreSQL.
//!
//! [`Fence`]: zkfence::fence::Fence

use tokio_postgres::Client;
use zkfence::fence::BoxError;

use crate::dial::Dial;
use crate::PostgresFence;

/// A [`PostgresFence`] with a connection of its own: the fence contract every zkfence store
/// offers ([`Fence`]), as `zkfence fence` drives it. A fenced transaction takes a connection of
/// yours ([`PostgresFence::transaction`]); this is for the rest.
///
/// [`Fence`]: zkfence::fence::Fence
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::fence::Fence;
/// let fence = zkfence_postgres::Connected::connect("postgresql://app@db/orders", zkfence_postgres::PostgresFence::new()).await?;
/// for state in fence.fences().await? {
///     println!("{} {}", state.scope, state.token);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Connected {
    fence: PostgresFence,
    client: Client,
}

impl Connected {
    /// `fence` on `client`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(client: tokio_postgres::Client) {
    /// let fence = zkfence_postgres::Connected::new(zkfence_postgres::PostgresFence::new(), client);
    /// # let _ = fence;
    /// # }
    /// ```
    pub fn new(fence: PostgresFence, client: Client) -> Connected {
        Connected { fence, client }
    }

    /// `fence` on a new connection to `url`: a `postgresql://` URL or `key=value` pairs, as
    /// tokio-postgres takes them, with TLS as libpq's `sslmode` and `sslrootcert` ask
    /// (`disable`; `prefer`, the default, and `require` encrypt without checking the server;
    /// `verify-ca` checks its certificate's chain, `verify-full` its name too; roots from
    /// `sslrootcert`, a PEM file, else the system's), and a client certificate for a server
    /// that requires one as libpq's `sslcert` (a PEM file: the certificate, then any
    /// intermediates) and `sslkey` (its unencrypted PEM key) give it. TLS needs the `tls`
    /// feature.
    ///
    /// # Errors
    ///
    /// A URL it cannot use (an unknown `sslmode`, `sslcert` without `sslkey` or the reverse,
    /// an encrypted key (`sslpassword`), CRLs, TLS without the `tls` feature, an unreadable
    /// `sslrootcert`, `sslcert` or `sslkey`), or the database's error (unreachable, refused,
    /// a certificate it does not trust, or that does not trust ours).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// use zkfence_postgres::{Connected, PostgresFence};
    /// let url = "postgresql://app@db.internal/orders?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem";
    /// let fence = Connected::connect(url, PostgresFence::new()).await?;
    /// # let _ = fence; Ok(()) }
    /// ```
    pub async fn connect(url: &str, fence: PostgresFence) -> Result<Connected, BoxError> {
        let client = Dial::parse(url)?.open(None).await?;
        Ok(Connected::new(fence, client))
    }

    /// The fence.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(fence: zkfence_postgres::Connected) {
    /// println!("{}", fence.fence().install_sql());
    /// # }
    /// ```
    pub fn fence(&self) -> &PostgresFence {
        &self.fence
    }

    /// The connection.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence_postgres::Connected) -> Result<(), tokio_postgres::Error> {
    /// fence.fence().install(fence.client()).await?;
    /// # Ok(()) }
    /// ```
    pub fn client(&self) -> &Client {
        &self.client
    }
}

zkfence::fence::author::connected_fence!(
    Connected,
    crate::fence::STORE,
    |this| this.fence,
    &this.client
);
