//! Connections from a URL: `redis://`, and `rediss://` with the `tls` feature.

use redis::aio::MultiplexedConnection;
use zkfence::fence::{BoxError, ConfigError};

/// A connection to `url`: `redis://`, or `rediss://` (TLS, the server's certificate checked
/// against the system's roots, which honour `SSL_CERT_FILE`; `#insecure` at the end checks
/// nothing) with the `tls` feature.
pub(crate) async fn open(url: &str) -> Result<MultiplexedConnection, BoxError> {
    Ok(client(url)?.get_multiplexed_async_connection().await?)
}

/// The client of `url`, or what to give instead.
pub(crate) fn client(url: &str) -> Result<redis::Client, ConfigError> {
    if url.starts_with("rediss://") {
        #[cfg(feature = "tls")]
        // redis's rustls takes the process's crypto provider: aws-lc-rs unless the process
        // chose one.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
        #[cfg(not(feature = "tls"))]
        return Err(ConfigError::new(
            "URL scheme",
            "rediss://",
            "redis://: TLS needs zkfence-redis's `tls` feature, which this build leaves out (the zkfence CLI has it)",
        ));
    }
    redis::Client::open(url).map_err(|e| {
        ConfigError::new(
            "Redis URL",
            e.to_string(),
            "redis://host:port/db or rediss://host:port/db",
        )
    })
}
