//! [`Dial`]: how to reach a server named by a URL, TLS included, parsed once and opened as
//! often as needed (`Connected::connect`, the conformance store).
//!
//! TLS follows the MySQL client's `ssl-mode` (given in the URL's query, as are `ssl-ca` and
//! mysql_async's own parameters):
//!
//! | `ssl-mode`                 | encrypted | the server's certificate checked          |
//! |----------------------------|-----------|-------------------------------------------|
//! | `DISABLED`, `PREFERRED`    | no        | -                                         |
//! | `REQUIRED`                 | yes       | no (the MySQL client's meaning)           |
//! | `VERIFY_CA`                | yes       | its chain, to `ssl-ca` or Mozilla's roots |
//! | `VERIFY_IDENTITY`          | yes       | its chain and that it names the host      |
//!
//! `PREFERRED` (the MySQL client's default) connects in the clear here: a TLS attempt that
//! may silently fall back protects nothing, so ask for `REQUIRED` or stronger.

use mysql_async::{Conn, Opts, OptsBuilder};
use zkfence::fence::{BoxError, ConfigError};

/// The MySQL client's `ssl-mode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disabled,
    Required,
    VerifyCa,
    VerifyIdentity,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, ConfigError> {
        Ok(match value.to_ascii_uppercase().as_str() {
            "DISABLED" | "PREFERRED" => SslMode::Disabled,
            "REQUIRED" => SslMode::Required,
            "VERIFY_CA" => SslMode::VerifyCa,
            "VERIFY_IDENTITY" => SslMode::VerifyIdentity,
            _ => {
                return Err(ConfigError::new(
                    "ssl-mode",
                    value,
                    "DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                ))
            }
        })
    }
}

/// The TLS parameters mysql_async does not know, under MySQL's names and with underscores.
const TLS_PARAMETERS: [&str; 8] = [
    "ssl-mode", "ssl_mode", "ssl-ca", "ssl_ca", "ssl-cert", "ssl_cert", "ssl-key", "ssl_key",
];

/// `url` without `ssl-mode` and `ssl-ca` (which mysql_async does not know), and their values.
fn take_tls(url: &str) -> Result<(String, Option<SslMode>, Option<String>), ConfigError> {
    let (rest, taken) = zkfence::fence::take_url_parameters(url, &TLS_PARAMETERS)?;
    let (mut mode, mut ca) = (None, None);
    for (name, value) in taken {
        match name.replace('_', "-").as_str() {
            "ssl-mode" => mode = Some(SslMode::parse(&value)?),
            "ssl-ca" => ca = Some(value),
            _ => {
                return Err(ConfigError::new(
                    "ssl-cert or ssl-key",
                    value,
                    "none: client certificates are not supported (authenticate with a password; ssl-mode=VERIFY_IDENTITY with ssl-ca checks the server)",
                ))
            }
        }
    }
    Ok((rest, mode, ca))
}

/// A server to connect to, over TCP (never the server's Unix socket, which a proxy in front
/// of the port would not see).
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    opts: Opts,
}

impl Dial {
    /// The server `url` names (`mysql://user:password@host:port/database?…`).
    pub(crate) fn parse(url: &str) -> Result<Dial, BoxError> {
        let (plain, mode, ca) = take_tls(url)?;
        let opts = Opts::from_url(&plain).map_err(|e| {
            ConfigError::new(
                "MySQL URL",
                e.to_string(),
                "mysql://user:password@host:port/database?param=value",
            )
        })?;
        let mut builder = OptsBuilder::from_opts(opts).prefer_socket(false);
        let mode = match (mode, &ca) {
            (Some(mode), _) => mode,
            // A CA given alone asks for its check, as the MySQL client takes it.
            (None, Some(_)) => SslMode::VerifyCa,
            (None, None) => return Ok(Dial::from(builder)),
        };
        builder = match mode {
            SslMode::Disabled => builder.ssl_opts(None),
            _ => builder.ssl_opts(Some(ssl_opts(mode, ca)?)),
        };
        Ok(Dial::from(builder))
    }

    /// The same server, in database `db`.
    pub(crate) fn with_database(&self, db: &str) -> Dial {
        Dial::from(OptsBuilder::from_opts(self.opts.clone()).db_name(Some(db)))
    }

    /// The database a connection starts in, if any.
    pub(crate) fn database(&self) -> Option<&str> {
        self.opts.db_name()
    }

    /// A new connection.
    pub(crate) async fn open(&self) -> Result<Conn, mysql_async::Error> {
        Conn::new(self.opts.clone()).await
    }
}

impl From<OptsBuilder> for Dial {
    fn from(builder: OptsBuilder) -> Dial {
        Dial {
            opts: Opts::from(builder),
        }
    }
}

#[cfg(feature = "tls")]
fn ssl_opts(mode: SslMode, ca: Option<String>) -> Result<mysql_async::SslOpts, BoxError> {
    // mysql_async's rustls takes the process's crypto provider: aws-lc-rs unless the process
    // chose one.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut opts = mysql_async::SslOpts::default()
        .with_danger_accept_invalid_certs(mode == SslMode::Required)
        .with_danger_skip_domain_validation(mode != SslMode::VerifyIdentity);
    if let Some(ca) = ca {
        if let Err(e) = std::fs::metadata(&ca) {
            let given = format!("{ca} ({e})");
            return Err(
                ConfigError::new("ssl-ca", given, "a readable file of PEM certificates").into(),
            );
        }
        opts = opts.with_root_certs(vec![std::path::PathBuf::from(ca).into()]);
    }
    Ok(opts)
}

#[cfg(not(feature = "tls"))]
fn ssl_opts(mode: SslMode, _: Option<String>) -> Result<mysql_async::SslOpts, BoxError> {
    Err(ConfigError::new(
        "ssl-mode",
        format!("{mode:?}"),
        "DISABLED or PREFERRED: TLS needs zkfence-mysql's `tls` feature, which this build leaves out (the zkfence CLI has it)",
    )
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_urls() {
        let (url, mode, ca) =
            take_tls("mysql://app:pw@db:3306/orders?ssl-mode=verify_identity&ssl-ca=%2Fca.pem&wait_timeout=5")
                .unwrap();
        assert_eq!(url, "mysql://app:pw@db:3306/orders?wait_timeout=5");
        assert_eq!(mode, Some(SslMode::VerifyIdentity));
        assert_eq!(ca.as_deref(), Some("/ca.pem"));
        assert_eq!(
            take_tls("mysql://db/x").unwrap(),
            ("mysql://db/x".to_owned(), None, None)
        );
        for bad in ["mysql://db/x?ssl-mode=maybe", "mysql://db/x?ssl-key=/k.pem"] {
            assert!(take_tls(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_database_is_kept_with_the_tls_asked() {
        let dial = Dial::parse("mysql://app@db/orders?require_ssl=true").unwrap();
        let other = dial.with_database("scratch");
        assert_eq!(other.database(), Some("scratch"));
        assert!(other.opts.ssl_opts().is_some());
    }
}
