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
//!
//! A client certificate (for an account that says `REQUIRE X509`, `SUBJECT` or `ISSUER`) is
//! the MySQL client's `ssl-cert` (a PEM file: the certificate, then any intermediates) with
//! `ssl-key` (its private key, an unencrypted PEM file), both given or neither (`ssl_cert`
//! and `ssl_key` also do). Given without `ssl-mode` they ask for `REQUIRED` (`VERIFY_CA` with
//! `ssl-ca`): a certificate is only sent over TLS. With `DISABLED` or `PREFERRED` they are
//! ignored, as the MySQL client does without TLS.

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

/// What a URL asks of TLS, taken out of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Asked {
    mode: Option<SslMode>,
    ca: Option<String>,
    /// The client's certificate, when the account requires one.
    identity: Option<Identity>,
}

/// A client certificate's files: `ssl-cert` (the certificate and its chain) and `ssl-key`.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
struct Identity {
    cert: String,
    key: String,
}

/// `url` without the TLS parameters (which mysql_async does not know), and what they asked.
fn take_tls(url: &str) -> Result<(String, Asked), ConfigError> {
    let (rest, taken) = zkfence::fence::author::take_url_parameters(url, &TLS_PARAMETERS)?;
    let (mut asked, mut cert, mut key) = (Asked::default(), None, None);
    for (name, value) in taken {
        match name.replace('_', "-").as_str() {
            "ssl-mode" => asked.mode = Some(SslMode::parse(&value)?),
            "ssl-ca" => asked.ca = Some(value),
            "ssl-cert" => cert = Some(value),
            _ => key = Some(value),
        }
    }
    asked.identity = match (cert, key) {
        (Some(cert), Some(key)) => Some(Identity { cert, key }),
        (None, None) => None,
        (Some(cert), None) => {
            return Err(ConfigError::new(
                "ssl-cert without ssl-key",
                cert,
                "ssl-key=FILE too: the certificate's private key, an unencrypted PEM file",
            ))
        }
        (None, Some(key)) => {
            return Err(ConfigError::new(
                "ssl-key without ssl-cert",
                key,
                "ssl-cert=FILE too: the client's certificate (and its chain), a PEM file",
            ))
        }
    };
    Ok((rest, asked))
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
        let (plain, asked) = take_tls(url)?;
        let opts = Opts::from_url(&plain).map_err(|e| {
            ConfigError::new(
                "MySQL URL",
                e.to_string(),
                "mysql://user:password@host:port/database?param=value",
            )
        })?;
        let mut builder = OptsBuilder::from_opts(opts).prefer_socket(false);
        let mode = match (asked.mode, &asked.ca, &asked.identity) {
            (Some(mode), _, _) => mode,
            // A CA given alone asks for its check, as the MySQL client takes it.
            (None, Some(_), _) => SslMode::VerifyCa,
            // A certificate is only ever sent over TLS.
            (None, None, Some(_)) => SslMode::Required,
            (None, None, None) => return Ok(Dial::from(builder)),
        };
        builder = match mode {
            SslMode::Disabled => builder.ssl_opts(None),
            _ => builder.ssl_opts(Some(ssl_opts(mode, asked)?)),
        };
        Ok(Dial::from(builder))
    }

    /// The same server, in database `db`.
    #[cfg(feature = "conformance")]
    pub(crate) fn with_database(&self, db: &str) -> Dial {
        Dial::from(OptsBuilder::from_opts(self.opts.clone()).db_name(Some(db)))
    }

    /// The database a connection starts in, if any.
    #[cfg(feature = "conformance")]
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
fn ssl_opts(mode: SslMode, asked: Asked) -> Result<mysql_async::SslOpts, BoxError> {
    // mysql_async's rustls takes the process's crypto provider: aws-lc-rs unless the process
    // chose one.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut opts = mysql_async::SslOpts::default()
        .with_danger_accept_invalid_certs(mode == SslMode::Required)
        .with_danger_skip_domain_validation(mode != SslMode::VerifyIdentity);
    if let Some(ca) = asked.ca {
        if let Err(e) = std::fs::metadata(&ca) {
            let given = format!("{ca} ({e})");
            return Err(
                ConfigError::new("ssl-ca", given, "a readable file of PEM certificates").into(),
            );
        }
        opts = opts.with_root_certs(vec![std::path::PathBuf::from(ca).into()]);
    }
    if let Some(identity) = asked.identity {
        let (cert, key) = tls::load(&identity)?;
        opts = opts.with_client_identity(Some(mysql_async::ClientIdentity::new(
            cert.into(),
            key.into(),
        )));
    }
    Ok(opts)
}

#[cfg(not(feature = "tls"))]
fn ssl_opts(mode: SslMode, _: Asked) -> Result<mysql_async::SslOpts, BoxError> {
    Err(ConfigError::new(
        "ssl-mode",
        format!("{mode:?}"),
        "DISABLED or PREFERRED: TLS needs zkfence-mysql's `tls` feature, which this build leaves out (the zkfence CLI has it)",
    )
    .into())
}

#[cfg(feature = "tls")]
mod tls {
    //! A client certificate's files, read and checked when the URL is parsed.

    use zkfence::fence::ConfigError;

    use crate::dial::Identity;

    /// The PEM texts of `identity`'s certificate chain and private key: a file that cannot be
    /// used is an error naming its parameter and path.
    pub(super) fn load(identity: &Identity) -> Result<(Vec<u8>, Vec<u8>), ConfigError> {
        zkfence::fence::author::read_client_identity(
            ("ssl-cert", &identity.cert),
            ("ssl-key", &identity.key),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_urls() {
        let (url, asked) =
            take_tls("mysql://app:pw@db:3306/orders?ssl-mode=verify_identity&ssl-ca=%2Fca.pem&wait_timeout=5")
                .unwrap();
        assert_eq!(url, "mysql://app:pw@db:3306/orders?wait_timeout=5");
        assert_eq!(asked.mode, Some(SslMode::VerifyIdentity));
        assert_eq!(asked.ca.as_deref(), Some("/ca.pem"));
        assert_eq!(
            take_tls("mysql://db/x").unwrap(),
            ("mysql://db/x".to_owned(), Asked::default())
        );
        assert!(take_tls("mysql://db/x?ssl-mode=maybe").is_err());
    }

    #[test]
    fn a_client_certificate_is_a_pair_of_files() {
        for url in [
            "mysql://app:pw@db/x?ssl-cert=%2Fc.pem&ssl-key=%2Fc.key",
            "mysql://app:pw@db/x?ssl_key=/c.key&ssl_cert=/c.pem",
        ] {
            let (rest, asked) = take_tls(url).unwrap();
            assert_eq!(rest, "mysql://app:pw@db/x");
            let identity = asked.identity.unwrap();
            assert_eq!(
                (identity.cert.as_str(), identity.key.as_str()),
                ("/c.pem", "/c.key")
            );
        }
        for (url, missing) in [
            ("mysql://app:secret@db/x?ssl-cert=/c.pem", "ssl-key=FILE"),
            ("mysql://app:secret@db/x?ssl_key=/c.key", "ssl-cert=FILE"),
        ] {
            let err = Dial::parse(url).unwrap_err().to_string();
            assert!(err.contains(missing), "{url}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn unusable_certificate_files_are_named() {
        let dir = std::env::temp_dir().join(format!("zkfence-my-dial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |name: &str| dir.join(name).display().to_string();
        std::fs::write(path("empty.pem"), "no PEM here\n").unwrap();
        std::fs::write(
            path("encrypted.key"),
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIB\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        // PEM's framing only: the certificate's contents are checked in the handshake.
        std::fs::write(
            path("framed.pem"),
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let cases = [
            ("missing.pem", "missing.key", "ssl-cert \""),
            ("missing.pem", "missing.key", "missing.pem"),
            ("empty.pem", "missing.key", "no certificate"),
            ("framed.pem", "missing.key", "ssl-key \""),
            ("framed.pem", "missing.key", "missing.key"),
            ("framed.pem", "encrypted.key", "unencrypted"),
            ("framed.pem", "empty.pem", "ssl-key \""),
        ];
        for (cert, key, named) in cases {
            let url = format!(
                "mysql://app:secret@db/x?ssl-mode=REQUIRED&ssl-cert={}&ssl-key={}",
                path(cert),
                path(key)
            );
            let err = Dial::parse(&url).unwrap_err().to_string();
            assert!(err.contains(named), "{cert} {key}: {err}");
            assert!(!err.contains("secret"), "{err}");
        }
        let url = format!(
            "mysql://db/x?ssl-cert={}&ssl-key={}",
            path("framed.pem"),
            path("framed.pem")
        );
        assert!(Dial::parse(&url).is_err(), "no key in the file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_database_is_kept_with_the_tls_asked() {
        let dial = Dial::parse("mysql://app@db/orders?require_ssl=true").unwrap();
        let other = dial.with_database("scratch");
        assert_eq!(other.database(), Some("scratch"));
        assert!(other.opts.ssl_opts().is_some());
    }
}
