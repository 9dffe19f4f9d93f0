//! [`Dial`]: how to reach a database named by a URL, TLS included, parsed once and opened as
//! often as needed (`Connected::connect`, the conformance store).
//!
//! TLS follows libpq's `sslmode` (tokio-postgres alone knows only `disable`, `prefer` and
//! `require`, and verifies nothing by itself):
//!
//! | `sslmode`            | encrypted          | the server's certificate checked                    |
//! |----------------------|--------------------|-----------------------------------------------------|
//! | `disable`            | no                 | -                                                   |
//! | `allow`, `prefer`    | if the server can  | no (as `require`)                                   |
//! | `require`            | yes                | no; with `sslrootcert`, its chain (libpq's rule)    |
//! | `verify-ca`          | yes                | its chain, to a root of `sslrootcert` or the system |
//! | `verify-full`        | yes                | its chain and that it names the host                |
//!
//! `sslrootcert` is a file of PEM certificates, or `system` for the system's roots (which
//! honour `SSL_CERT_FILE` and `SSL_CERT_DIR`); without it the system's roots are used.
//!
//! A client certificate (for a server whose `pg_hba.conf` says `cert` or `clientcert=`) is
//! libpq's `sslcert` (a PEM file: the certificate, then any intermediates) with `sslkey` (its
//! private key, an unencrypted PEM file), both given or neither; there are no default files
//! (libpq's `~/.postgresql/postgresql.crt` is not read). With `sslmode=disable` they are
//! ignored, as libpq does. `sslpassword` (an encrypted key), `sslcrl` and `sslcrldir` are
//! refused with an error saying what to give instead.

use tokio_postgres::{Client, Config};
use zkfence::fence::{BoxError, ConfigError};

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, ConfigError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(ConfigError::new(
                    "sslmode",
                    other,
                    "disable, allow, prefer, require, verify-ca or verify-full",
                ))
            }
        })
    }

    /// The mode tokio-postgres is told: it only negotiates, [`Dial`]'s connector checks.
    fn negotiated(self) -> tokio_postgres::config::SslMode {
        match self {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        }
    }
}

/// What a URL asks of TLS, taken out of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Asked {
    mode: Option<SslMode>,
    root: Option<String>,
    /// The client's certificate, when the server asks for one.
    identity: Option<Identity>,
}

/// A client certificate's files: `sslcert` (the certificate and its chain) and `sslkey`.
#[derive(Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
struct Identity {
    cert: String,
    key: String,
}

impl Identity {
    /// The identity `sslcert` and `sslkey` name: both or neither.
    fn pair(cert: Option<String>, key: Option<String>) -> Result<Option<Identity>, ConfigError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(Identity { cert, key })),
            (None, None) => Ok(None),
            (Some(cert), None) => Err(ConfigError::new(
                "sslcert without sslkey",
                cert,
                "sslkey=FILE too: the certificate's private key, an unencrypted PEM file",
            )),
            (None, Some(key)) => Err(ConfigError::new(
                "sslkey without sslcert",
                key,
                "sslcert=FILE too: the client's certificate (and its chain), a PEM file",
            )),
        }
    }
}

/// The TLS parameters tokio-postgres cannot parse (or zkfence does not support).
const TLS_PARAMETERS: [&str; 7] = [
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcrl",
    "sslcrldir",
];

/// `url` without the TLS parameters tokio-postgres cannot parse, and what they asked.
fn take_tls(url: &str) -> Result<(String, Asked), ConfigError> {
    let (rest, taken) = if url.contains("://") {
        zkfence::fence::author::take_url_parameters(url, &TLS_PARAMETERS)?
    } else {
        // key=value pairs; quoted values are left to tokio-postgres (and so are not TLS's).
        let (mut kept, mut taken) = (Vec::new(), Vec::new());
        for pair in url.split_whitespace() {
            let key = pair.split_once('=').map_or(pair, |(key, _)| key);
            match TLS_PARAMETERS.iter().find(|name| **name == key) {
                Some(name) => {
                    taken.push((*name, pair[key.len()..].trim_start_matches('=').to_owned()))
                }
                None => kept.push(pair),
            }
        }
        (kept.join(" "), taken)
    };
    let mut asked = Asked::default();
    let (mut cert, mut key, mut password) = (None, None, false);
    for (name, value) in taken {
        match name {
            "sslmode" => asked.mode = Some(SslMode::parse(&value)?),
            "sslrootcert" => asked.root = Some(value),
            "sslcert" => cert = Some(value),
            "sslkey" => key = Some(value),
            "sslpassword" => password = true,
            _ => {
                return Err(ConfigError::new(
                    name,
                    value,
                    "none: CRLs are not supported (sslmode=verify-full with sslrootcert checks the server)",
                ))
            }
        }
    }
    // libpq ignores the client's certificate when it does not use TLS.
    if asked.mode == Some(SslMode::Disable) {
        return Ok((rest, asked));
    }
    if password {
        // Never echoed: it is a password.
        return Err(ConfigError::new(
            "sslpassword",
            "(not shown)",
            "none: encrypted keys are not supported; give sslkey an unencrypted PEM key (`openssl pkey -in KEY -out PLAIN`, readable by this user only)",
        ));
    }
    asked.identity = Identity::pair(cert, key)?;
    Ok((rest, asked))
}

/// A database to connect to: tokio-postgres's configuration and the TLS connector the URL
/// asked for.
#[derive(Clone)]
pub(crate) struct Dial {
    config: Config,
    #[cfg(feature = "tls")]
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial")
            .field("hosts", &self.config.get_hosts())
            .field("ssl_mode", &self.config.get_ssl_mode())
            .finish()
    }
}

impl Dial {
    /// The database `url` names (a `postgresql://` URL or `key=value` pairs).
    pub(crate) fn parse(url: &str) -> Result<Dial, BoxError> {
        let (plain, asked) = take_tls(url)?;
        let mut config: Config = plain.parse().map_err(|e: tokio_postgres::Error| {
            ConfigError::new(
                "PostgreSQL URL",
                e.to_string(),
                "postgresql://user@host:port/database?param=value or key=value pairs",
            )
        })?;
        let mode = asked.mode.unwrap_or(SslMode::Prefer);
        config.ssl_mode(mode.negotiated());
        #[cfg(feature = "tls")]
        {
            let tls = match mode {
                SslMode::Disable => None,
                _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(
                    tls::client_config(mode, asked.root.as_deref(), asked.identity.as_ref())?,
                )),
            };
            Ok(Dial { config, tls })
        }
        #[cfg(not(feature = "tls"))]
        {
            if let Some(identity) = asked.identity {
                return Err(ConfigError::new(
                    "sslcert",
                    identity.cert,
                    "no client certificate: it needs TLS, which needs zkfence-postgres's `tls` feature, which this build leaves out (the zkfence CLI has it)",
                )
                .into());
            }
            if matches!(
                mode,
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
            ) || asked.root.is_some()
            {
                return Err(ConfigError::new(
                    "sslmode",
                    format!("{mode:?}"),
                    "disable or prefer: TLS needs zkfence-postgres's `tls` feature, which this build leaves out (the zkfence CLI has it)",
                )
                .into());
            }
            Ok(Dial { config })
        }
    }

    /// A new connection, driven in a task of its own; named `name` (its `application_name`)
    /// when given.
    pub(crate) async fn open(&self, name: Option<&str>) -> Result<Client, tokio_postgres::Error> {
        let mut config = self.config.clone();
        if let Some(name) = name {
            config.application_name(name);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let (client, connection) = config.connect(tls.clone()).await?;
            drive(connection);
            return Ok(client);
        }
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        drive(connection);
        Ok(client)
    }
}

/// Runs a connection's I/O until it ends.
fn drive<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(cause = %err, "connection ended");
        }
    });
}

#[cfg(feature = "tls")]
mod tls {
    //! rustls's client configuration for each `sslmode`.

    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
    use zkfence::fence::{BoxError, ConfigError};

    use crate::dial::{Identity, SslMode};

    pub(super) fn client_config(
        mode: SslMode,
        root: Option<&str>,
        identity: Option<&Identity>,
    ) -> Result<ClientConfig, BoxError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        // libpq's rule: `require` checks the chain when a root certificate is given.
        let check = match (mode, root) {
            (SslMode::Prefer | SslMode::Require, None) => None,
            (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, _) => Some(false),
            (SslMode::VerifyFull, _) => Some(true),
            (SslMode::Disable, _) => unreachable!("no TLS for sslmode=disable"),
        };
        let verifier: Arc<dyn ServerCertVerifier> = match check {
            None => Arc::new(Unverified(provider)),
            Some(names) => {
                let roots = Arc::new(roots(root)?);
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(roots, provider).build()?;
                if names {
                    webpki
                } else {
                    Arc::new(ChainOnly(webpki))
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let Some(identity) = identity else {
            return Ok(builder.with_no_client_auth());
        };
        let (chain, key) = load(identity)?;
        builder.with_client_auth_cert(chain, key).map_err(|e| {
            ConfigError::new(
                "sslkey",
                format!("{} ({e})", identity.key),
                "the private key of sslcert's certificate",
            )
            .into()
        })
    }

    /// The certificate chain and private key `identity` names, read now: a file that cannot
    /// be used is an error naming its parameter and path.
    pub(super) fn load(
        identity: &Identity,
    ) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ConfigError> {
        let (cert, key) = (&identity.cert, &identity.key);
        let (chain, pem) =
            zkfence::fence::author::read_client_identity(("sslcert", cert), ("sslkey", key))?;
        let unusable = |name, path: &str, why: String, instead| {
            ConfigError::new(name, format!("{path} ({why})"), instead)
        };
        let chain = CertificateDer::pem_slice_iter(&chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                let instead = "a PEM file of the client's certificate, then any intermediates";
                unusable("sslcert", cert, e.to_string(), instead)
            })?;
        let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
            unusable(
                "sslkey",
                key,
                e.to_string(),
                "an unencrypted PEM private key",
            )
        })?;
        Ok((chain, key))
    }

    /// The roots `sslrootcert` names: a PEM file, or `system` (the default).
    fn roots(root: Option<&str>) -> Result<RootCertStore, BoxError> {
        let mut store = RootCertStore::empty();
        match root {
            Some(path) if path != "system" => {
                let unusable = |why: String| {
                    ConfigError::new(
                        "sslrootcert",
                        format!("{path} ({why})"),
                        "a readable file of PEM certificates, or system",
                    )
                };
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| unusable(e.to_string()))?;
                let (added, _) = store.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(unusable("no certificate in it".into()).into());
                }
            }
            _ => {
                let found = rustls_native_certs::load_native_certs();
                store.add_parsable_certificates(found.certs);
                if store.is_empty() {
                    return Err(ConfigError::new(
                        "sslrootcert",
                        "system",
                        "a file of PEM certificates: the system has no root certificates (install ca-certificates, or set SSL_CERT_FILE)",
                    )
                    .into());
                }
            }
        }
        Ok(store)
    }

    /// `verify-ca`: the chain checked, the name not (the server may be reached by any name).
    #[derive(Debug)]
    struct ChainOnly(Arc<WebPkiServerVerifier>);

    impl ServerCertVerifier for ChainOnly {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            // The verifier checks the chain first and the name last: a name error means the
            // chain held.
            match self
                .0
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            self.0.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.supported_verify_schemes()
        }
    }

    /// `prefer` and `require` without a root: encrypted, the certificate taken as it comes
    /// (libpq's meaning; the handshake's signatures are still checked).
    #[derive(Debug)]
    struct Unverified(Arc<CryptoProvider>);

    impl ServerCertVerifier for Unverified {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_come_out_of_urls() {
        let (url, asked) =
            take_tls("postgresql://app@db/orders?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&connect_timeout=5")
                .unwrap();
        assert_eq!(url, "postgresql://app@db/orders?connect_timeout=5");
        assert_eq!(asked.mode, Some(SslMode::VerifyFull));
        assert_eq!(asked.root.as_deref(), Some("/etc/ca.pem"));
        let (url, asked) = take_tls("host=db sslmode=require user=app").unwrap();
        assert_eq!(url, "host=db user=app");
        assert_eq!(asked.mode, Some(SslMode::Require));
        let (url, asked) = take_tls("postgresql://db/orders").unwrap();
        assert_eq!(url, "postgresql://db/orders");
        assert_eq!(asked, Asked::default());
    }

    #[test]
    fn tls_parameters_it_cannot_honour_are_errors() {
        for url in [
            "postgresql://db/x?sslmode=verify",
            "postgresql://db/x?sslcrl=/crl.pem",
            "host=db sslcrldir=/crls",
        ] {
            assert!(take_tls(url).is_err(), "{url}");
        }
    }

    #[test]
    fn a_client_certificate_is_a_pair_of_files() {
        let (url, asked) =
            take_tls("postgresql://app@db/x?sslcert=%2Fc.pem&sslmode=verify-full&sslkey=%2Fc.key")
                .unwrap();
        assert_eq!(url, "postgresql://app@db/x");
        let identity = asked.identity.unwrap();
        assert_eq!(
            (identity.cert.as_str(), identity.key.as_str()),
            ("/c.pem", "/c.key")
        );
        let (_, asked) = take_tls("host=db sslcert=/c.pem sslkey=/c.key").unwrap();
        assert!(asked.identity.is_some());
        for (url, missing) in [
            ("postgresql://db/x?sslcert=/c.pem", "sslkey=FILE"),
            ("host=db sslmode=require sslkey=/c.key", "sslcert=FILE"),
        ] {
            let err = take_tls(url).unwrap_err().to_string();
            assert!(err.contains(missing), "{url}: {err}");
        }
        // libpq ignores them without TLS.
        let (_, asked) = take_tls("postgresql://db/x?sslmode=disable&sslcert=/c.pem").unwrap();
        assert_eq!(asked.identity, None);
    }

    #[test]
    fn a_key_password_is_refused_and_never_shown() {
        let err = take_tls("postgresql://db/x?sslcert=/c&sslkey=/k&sslpassword=hunter2")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unencrypted PEM key"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn unusable_certificate_files_are_named() {
        let dir = std::env::temp_dir().join(format!("zkfence-pg-dial-{}", std::process::id()));
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
            (path("missing.pem"), path("missing.key"), "sslcert"),
            (path("missing.pem"), path("missing.key"), "missing.pem"),
            (path("empty.pem"), path("missing.key"), "no certificate"),
            (path("framed.pem"), path("missing.key"), "sslkey"),
            (path("framed.pem"), path("missing.key"), "missing.key"),
            (path("framed.pem"), path("encrypted.key"), "unencrypted"),
            (path("framed.pem"), path("empty.pem"), "sslkey"),
        ];
        for (cert, key, named) in cases {
            let identity = Identity { cert, key };
            let err = tls::load(&identity).unwrap_err().to_string();
            assert!(err.contains(named), "{identity:?}: {err}");
        }
        let url = format!(
            "postgresql://db/x?sslmode=require&sslcert={}&sslkey={}",
            path("missing.pem"),
            path("missing.key")
        );
        let err = Dial::parse(&url).unwrap_err().to_string();
        assert!(
            err.contains("sslcert") && err.contains("missing.pem"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
