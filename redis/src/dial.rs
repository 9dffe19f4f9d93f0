//! Connections from a URL: `redis://`, and `rediss://` with the `tls` feature.
//!
//! `rediss://` checks the server's certificate against the system's roots (which honour
//! `SSL_CERT_FILE`); `#insecure` at the end checks nothing. redis-py's query parameters say
//! more, and are taken out of the URL before redis-rs reads it:
//!
//! | parameter       | what it gives                                                        |
//! |-----------------|----------------------------------------------------------------------|
//! | `ssl_ca_certs`  | a PEM file of the roots to trust instead of the system's             |
//! | `ssl_certfile`  | the client's certificate (then any intermediates), a PEM file        |
//! | `ssl_keyfile`   | its private key, an unencrypted PEM file (default: in `ssl_certfile`) |
//! | `ssl_cert_reqs` | `required` (the default) or `optional`; `none` is `#insecure`         |
//!
//! A client certificate is for a server with `tls-auth-clients yes` (or `optional`).

use redis::aio::MultiplexedConnection;
use redis::RedisError;
use zkfence::fence::{BoxError, ConfigError};

/// A server to connect to: redis's client of a URL, `redis://`, or `rediss://` (TLS, the
/// server's certificate checked against `ssl_ca_certs` or the system's roots, which honour
/// `SSL_CERT_FILE`; a client certificate from `ssl_certfile` and `ssl_keyfile`; `#insecure` at
/// the end checks nothing) with the `tls` feature.
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    client: redis::Client,
}

impl Dial {
    /// The server `url` names, or what to give instead.
    pub(crate) fn parse(url: &str) -> Result<Dial, ConfigError> {
        client(url).map(|client| Dial { client })
    }

    /// A new connection.
    pub(crate) async fn open(&self) -> Result<MultiplexedConnection, RedisError> {
        self.client.get_multiplexed_async_connection().await
    }

    /// A new connection to the server `url` names.
    pub(crate) async fn open_url(url: &str) -> Result<MultiplexedConnection, BoxError> {
        Ok(Dial::parse(url)?.open().await?)
    }

    /// Where it connects, as redis's cluster client takes a node.
    pub(crate) fn info(&self) -> &redis::ConnectionInfo {
        self.client.get_connection_info()
    }
}

/// The client of `url`, or what to give instead.
fn client(url: &str) -> Result<redis::Client, ConfigError> {
    let (url, asked) = take_tls(url)?;
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
    } else if let Some(name) = asked.first_given() {
        return Err(ConfigError::new(
            name,
            "with redis://",
            "rediss://host:port/db: TLS parameters need a TLS URL",
        ));
    }
    let bad_url = |e: redis::RedisError| {
        ConfigError::new(
            "Redis URL",
            e.to_string(),
            "redis://host:port/db or rediss://host:port/db",
        )
    };
    #[cfg(feature = "tls")]
    if let Some(certificates) = tls::certificates(&asked)? {
        return redis::Client::build_with_tls(url, certificates).map_err(bad_url);
    }
    redis::Client::open(url).map_err(bad_url)
}

/// The certificates `url`'s redis-py parameters name (`ssl_ca_certs`, `ssl_certfile`,
/// `ssl_keyfile`), read and checked; `None` when it names none. A Redis Cluster's client takes
/// them for every node it reaches.
#[cfg(feature = "tls")]
pub(crate) fn certificates(url: &str) -> Result<Option<redis::TlsCertificates>, ConfigError> {
    tls::certificates(&take_tls(url)?.1)
}

/// redis-py's TLS parameters, which redis-rs does not know.
const TLS_PARAMETERS: [&str; 4] = [
    "ssl_ca_certs",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_cert_reqs",
];

/// What a URL asks of TLS beyond its scheme, taken out of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Asked {
    /// `ssl_ca_certs`: the roots to trust.
    ca: Option<String>,
    /// `ssl_certfile` and `ssl_keyfile` (which defaults to the certificate's file).
    identity: Option<(String, String)>,
    /// `ssl_cert_reqs=none`: the server's certificate not checked.
    insecure: bool,
}

impl Asked {
    /// The first parameter given, if any.
    fn first_given(&self) -> Option<&'static str> {
        match self {
            Asked { ca: Some(_), .. } => Some("ssl_ca_certs"),
            Asked {
                identity: Some(_), ..
            } => Some("ssl_certfile"),
            Asked { insecure: true, .. } => Some("ssl_cert_reqs"),
            _ => None,
        }
    }
}

/// `url` without redis-py's TLS parameters (`ssl_cert_reqs=none` turned into `#insecure`),
/// and what they asked.
fn take_tls(url: &str) -> Result<(String, Asked), ConfigError> {
    let (body, fragment) = match url.split_once('#') {
        Some((body, fragment)) => (body, Some(fragment)),
        None => (url, None),
    };
    let (mut rest, taken) = zkfence::fence::author::take_url_parameters(body, &TLS_PARAMETERS)?;
    let (mut asked, mut cert, mut key) = (Asked::default(), None, None);
    for (name, value) in taken {
        match name {
            "ssl_ca_certs" => asked.ca = Some(value),
            "ssl_certfile" => cert = Some(value),
            "ssl_keyfile" => key = Some(value),
            _ => match value.to_ascii_lowercase().as_str() {
                "required" | "optional" => asked.insecure = false,
                "none" => asked.insecure = true,
                _ => {
                    return Err(ConfigError::new(
                        "ssl_cert_reqs",
                        value,
                        "required (the default), optional, or none (the server's certificate not checked, as #insecure)",
                    ))
                }
            },
        }
    }
    asked.identity = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        // redis-py's rule: the key in the certificate's file.
        (Some(cert), None) => Some((cert.clone(), cert)),
        (None, None) => None,
        (None, Some(key)) => {
            return Err(ConfigError::new(
                "ssl_keyfile without ssl_certfile",
                key,
                "ssl_certfile=FILE too: the client's certificate (and its chain), a PEM file",
            ))
        }
    };
    match (fragment, asked.insecure) {
        (Some(fragment), _) => rest = format!("{rest}#{fragment}"),
        (None, true) => rest.push_str("#insecure"),
        (None, false) => {}
    }
    Ok((rest, asked))
}

/// `url` with its host and port replaced by `addr`'s (`host:port`; an IPv6 host bracketed),
/// everything else (scheme, credentials, database, parameters) kept: a node of a cluster,
/// dialed with the URL's credentials and TLS.
pub(crate) fn node_url(url: &str, addr: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "6379"));
    let host = match host.contains(':') && !host.starts_with('[') {
        true => format!("[{host}]"),
        false => host.to_owned(),
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return format!("redis://{host}:{port}/");
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => format!("{scheme}://{userinfo}@{host}:{port}{tail}"),
        None => format!("{scheme}://{host}:{port}{tail}"),
    }
}

/// The `host:port` of `url`, without its credentials.
pub(crate) fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    (authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host))
    .to_owned()
}

/// `url` without its password (`redis://user:secret@host/` as `redis://user@host/`), for
/// advice printed in a failure.
#[cfg(feature = "conformance")]
pub(crate) fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<URL>".to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    match authority.rsplit_once('@') {
        None => url.to_owned(),
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            match user {
                "" => format!("{scheme}://{host}{path}"),
                user => format!("{scheme}://{user}@{host}{path}"),
            }
        }
    }
}

#[cfg(feature = "tls")]
mod tls {
    //! The files redis-py's parameters name, read and checked when the URL is parsed.

    use redis::{ClientTlsConfig, TlsCertificates};
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    use zkfence::fence::ConfigError;

    use crate::dial::Asked;

    /// The certificates `asked` names, or `None` when it names none (the system's roots, no
    /// client certificate).
    pub(super) fn certificates(asked: &Asked) -> Result<Option<TlsCertificates>, ConfigError> {
        if asked.ca.is_none() && asked.identity.is_none() {
            return Ok(None);
        }
        let root_cert = match &asked.ca {
            Some(ca) => Some(certs(
                "ssl_ca_certs",
                ca,
                "a PEM file of the roots to trust",
            )?),
            None => None,
        };
        let client_tls = match &asked.identity {
            Some((cert, key)) => {
                let (client_cert, client_key) = zkfence::fence::author::read_client_identity(
                    ("ssl_certfile", cert),
                    ("ssl_keyfile", key),
                )?;
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            None => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// The PEM text of the file `name` gives, with a certificate in it.
    fn certs(
        name: &'static str,
        path: &str,
        instead: &'static str,
    ) -> Result<Vec<u8>, ConfigError> {
        let pem = zkfence::fence::author::read_url_file(name, path)?;
        let unusable = |why: String| ConfigError::new(name, format!("{path} ({why})"), instead);
        let found = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unusable(e.to_string()))?;
        if found.is_empty() {
            return Err(unusable("no certificate in it".into()));
        }
        Ok(pem)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_keep_all_but_the_address() {
        let cases = [
            (
                "redis://127.0.0.1:7000/",
                "10.0.0.2:7001",
                "redis://10.0.0.2:7001/",
            ),
            (
                "rediss://app:secret@cache:7000/0?protocol=resp3#insecure",
                "10.0.0.2:7001",
                "rediss://app:secret@10.0.0.2:7001/0?protocol=resp3#insecure",
            ),
            ("redis://cache", "::1:7001", "redis://[::1]:7001"),
        ];
        for (url, addr, want) in cases {
            assert_eq!(node_url(url, addr), want, "{url}");
        }
        assert_eq!(authority("redis://u:p@cache:7000/0"), "cache:7000");
    }

    #[cfg(feature = "conformance")]
    #[test]
    fn advice_never_shows_a_password() {
        let cases = [
            ("redis://cache:6379/0", "redis://cache:6379/0"),
            ("redis://:secret@cache:6379/0", "redis://cache:6379/0"),
            (
                "rediss://app:secret@cache/0#insecure",
                "rediss://app@cache/0#insecure",
            ),
            ("redis://app:p@ss@cache", "redis://app@cache"),
            ("cache:6379", "<URL>"),
        ];
        for (url, shown) in cases {
            assert_eq!(without_password(url), shown, "{url}");
        }
    }

    #[test]
    fn tls_parameters_come_out_of_urls() {
        let (url, asked) = take_tls(
            "rediss://:pw@cache:6380/0?ssl_certfile=%2Fc.pem&protocol=resp3&ssl_keyfile=/c.key&ssl_ca_certs=/ca.pem",
        )
        .unwrap();
        assert_eq!(url, "rediss://:pw@cache:6380/0?protocol=resp3");
        assert_eq!(asked.ca.as_deref(), Some("/ca.pem"));
        assert_eq!(
            asked.identity,
            Some(("/c.pem".to_owned(), "/c.key".to_owned()))
        );
        // redis-py's rule: the key in the certificate's file.
        let (_, asked) = take_tls("rediss://cache/?ssl_certfile=/both.pem").unwrap();
        assert_eq!(
            asked.identity,
            Some(("/both.pem".to_owned(), "/both.pem".to_owned()))
        );
        assert_eq!(
            take_tls("rediss://cache/0#insecure").unwrap(),
            ("rediss://cache/0#insecure".to_owned(), Asked::default())
        );
        let (url, asked) = take_tls("rediss://cache/0?ssl_cert_reqs=none").unwrap();
        assert_eq!(url, "rediss://cache/0#insecure");
        assert!(asked.insecure);
        let (url, _) = take_tls("rediss://cache/0?ssl_ca_certs=/ca.pem#insecure").unwrap();
        assert_eq!(url, "rediss://cache/0#insecure");
    }

    #[test]
    fn half_a_pair_or_a_plain_url_is_refused() {
        let err = client("rediss://:secret@cache/0?ssl_keyfile=/c.key").unwrap_err();
        assert!(err.to_string().contains("ssl_certfile=FILE"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err = client("redis://cache/0?ssl_certfile=/c.pem").unwrap_err();
        assert!(err.to_string().contains("rediss://"), "{err}");
        assert!(client("rediss://cache/0?ssl_cert_reqs=maybe").is_err());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn unusable_certificate_files_are_named() {
        let dir = std::env::temp_dir().join(format!("zkfence-redis-dial-{}", std::process::id()));
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
            ("ssl_ca_certs=missing.pem", "ssl_ca_certs \""),
            ("ssl_ca_certs=missing.pem", "missing.pem"),
            ("ssl_ca_certs=empty.pem", "no certificate"),
            ("ssl_certfile=missing.pem&ssl_keyfile=x", "ssl_certfile \""),
            ("ssl_certfile=empty.pem&ssl_keyfile=x", "no certificate"),
            (
                "ssl_certfile=framed.pem&ssl_keyfile=missing.key",
                "missing.key",
            ),
            (
                "ssl_certfile=framed.pem&ssl_keyfile=encrypted.key",
                "unencrypted",
            ),
            ("ssl_certfile=framed.pem", "ssl_keyfile \""),
        ];
        for (query, named) in cases {
            let query = query.replace('=', &format!("={}/", dir.display()));
            let err = client(&format!("rediss://:secret@cache/0?{query}")).unwrap_err();
            assert!(err.to_string().contains(named), "{query}: {err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
