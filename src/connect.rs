//! [`Connect`]: connecting a new session whose creation anchors its first lease.

use std::fmt;
use std::time::Duration;

use zookeeper_client as zk;

use crate::watchdog::{clock, session_began};

/// How to connect a new read-write ZooKeeper session, built with `with_*` methods as
/// `zookeeper-client`'s [`Connector`](zk::Connector) is; [`Connect::connect`] connects it and
/// tells zkfence when the connect began.
///
/// A session's first lease needs a proof that the ensemble heard from the session lately. A
/// session created here has one: its creation is committed by the leader after the connect was
/// sent, so the first acquire soon after it is granted at once. Any other client works too,
/// and its process's first acquire waits for a paired proof instead (about half the tick time
/// plus a margin; the lease module's "A new session's first lease" says why).
///
/// That proof holds only for a new read-write session, so there is no way to set a session to
/// resume (`Connector::with_session`) or to allow a read-only one (`with_readonly`): connect
/// those with `zookeeper-client` directly; they anchor nothing.
///
/// Its `Debug` form names the hosts, the timeouts, the schemes of the credentials and whether
/// TLS and SASL are set, never a credential, a password or a key.
///
/// TLS and SASL need features of zkfence: `with_tls` the `tls` feature, `with_sasl` the `sasl`
/// feature (SASL DIGEST-MD5; enable `zookeeper-client`'s `sasl-gssapi` too for GSSAPI).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zookeeper_client::Error> {
/// use std::time::Duration;
///
/// let client = zkfence::Connect::new("zk1:2181,zk2:2181,zk3:2181")
///     .with_session_timeout(Duration::from_secs(10))
///     .with_auth("digest", b"orders-service:s3cret")
///     .connect()
///     .await?;
/// # let _ = client; Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a Connect does nothing until connect() is awaited"]
pub struct Connect {
    /// The connection string: hosts and an optional chroot, as `Connector::connect` takes it.
    hosts: String,
    /// What is being built, credentials included; never printed.
    connector: zk::Connector,
    /// What was set, the secrets left out: what `Debug` shows (the connector's own `Debug`
    /// shows a SASL password), and whether to connect with TLS.
    settings: Settings,
}

/// What a [`Connect`] was given, but the secrets.
#[derive(Debug, Clone, Default)]
struct Settings {
    session_timeout: Option<Duration>,
    connection_timeout: Option<Duration>,
    fail_eagerly: bool,
    detached: bool,
    server_version: Option<(u32, u32, u32)>,
    /// The scheme of each credential given with `with_auth`, in order.
    auth_schemes: Vec<String>,
    /// Whether TLS options were given: the connect is `secure_connect`.
    tls: bool,
    sasl: bool,
}

impl Connect {
    /// A connect to `hosts` (`zk1:2181,zk2:2181`, optionally with a chroot:
    /// `zk1:2181/app`; a host written `tcp+tls://host:port` needs `with_tls` (the `tls` feature),
    /// without which the connect cannot reach it) with `zookeeper-client`'s
    /// defaults: a session timeout of 6 s, no credentials, plain TCP.
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181");
    /// assert!(format!("{connect:?}").contains("127.0.0.1:2181"));
    /// ```
    pub fn new(hosts: impl Into<String>) -> Connect {
        Connect {
            hosts: hosts.into(),
            connector: zk::Client::connector(),
            settings: Settings::default(),
        }
    }

    /// The session timeout to negotiate with the servers (`zookeeper-client`'s default: 6 s).
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181")
    ///     .with_session_timeout(std::time::Duration::from_secs(10));
    /// # let _ = connect;
    /// ```
    pub fn with_session_timeout(mut self, timeout: Duration) -> Connect {
        self.connector = self.connector.with_session_timeout(timeout);
        self.settings.session_timeout = Some(timeout);
        self
    }

    /// How long a connection may stay idle before it counts as lost (`zookeeper-client`'s
    /// default: 2/5 of the session timeout).
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181")
    ///     .with_connection_timeout(std::time::Duration::from_secs(2));
    /// # let _ = connect;
    /// ```
    pub fn with_connection_timeout(mut self, timeout: Duration) -> Connect {
        self.connector = self.connector.with_connection_timeout(timeout);
        self.settings.connection_timeout = Some(timeout);
        self
    }

    /// Fails the connect with [`zk::Error::NoHosts`] once every host has been tried, rather
    /// than trying them again until the session timeout (not for an ensemble behind one
    /// virtual IP).
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181").with_fail_eagerly();
    /// # let _ = connect;
    /// ```
    pub fn with_fail_eagerly(mut self) -> Connect {
        self.connector = self.connector.with_fail_eagerly();
        self.settings.fail_eagerly = true;
        self
    }

    /// A detached session: dropping the last client leaves it to expire on the servers rather
    /// than closing it (see [`Connector::with_detached`](zk::Connector::with_detached)). It is
    /// still a new session, so its first lease anchors at its creation as any other's.
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181").with_detached();
    /// assert!(format!("{connect:?}").contains("detached: true"));
    /// ```
    pub fn with_detached(mut self) -> Connect {
        self.connector = self.connector.with_detached();
        self.settings.detached = true;
        self
    }

    /// Adds a credential for `scheme` (`digest` with `user:password`, or any scheme the servers
    /// know), sent when the session connects. Call it once per credential.
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181").with_auth("digest", b"orders:s3cret");
    /// assert!(!format!("{connect:?}").contains("s3cret"));
    /// ```
    pub fn with_auth(mut self, scheme: &str, auth: &[u8]) -> Connect {
        self.connector = self.connector.with_auth(scheme, auth);
        self.settings.auth_schemes.push(scheme.to_owned());
        self
    }

    /// The version of the ensemble's servers, so that the client speaks a protocol they know
    /// (see [`Connector::with_server_version`](zk::Connector::with_server_version)).
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181").with_server_version(3, 8, 4);
    /// # let _ = connect;
    /// ```
    pub fn with_server_version(mut self, major: u32, minor: u32, patch: u32) -> Connect {
        self.connector = self.connector.with_server_version(major, minor, patch);
        self.settings.server_version = Some((major, minor, patch));
        self
    }

    /// Connects with TLS (`Connector::secure_connect`): a host without a scheme takes TLS, one
    /// written `tcp://host:port` plain TCP. Needs the `tls` feature.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let tls = zookeeper_client::TlsOptions::new()
    ///     .with_pem_ca(&std::fs::read_to_string("ca.pem")?)?;
    /// let connect = zkfence::Connect::new("zk1:2281").with_tls(tls);
    /// # let _ = connect; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, options: zk::TlsOptions) -> Connect {
        self.connector = self.connector.with_tls(options);
        self.settings.tls = true;
        self
    }

    /// Authenticates with SASL (`zk::SaslOptions::digest_md5(user, password)`; GSSAPI with
    /// `zookeeper-client`'s `sasl-gssapi` feature). Needs the `sasl` feature.
    ///
    /// # Examples
    ///
    /// ```
    /// let connect = zkfence::Connect::new("127.0.0.1:2181")
    ///     .with_sasl(zookeeper_client::SaslOptions::digest_md5("orders", "s3cret"));
    /// assert!(!format!("{connect:?}").contains("s3cret"));
    /// ```
    #[cfg(feature = "sasl")]
    pub fn with_sasl(mut self, options: impl Into<zk::SaslOptions>) -> Connect {
        self.connector = self.connector.with_sasl(options);
        self.settings.sasl = true;
        self
    }

    /// Connects a new session, and tells zkfence when the connect began if the session comes
    /// back read-write (`SyncConnected`): its first lease anchors there.
    ///
    /// # Errors
    ///
    /// What `zookeeper-client`'s connect returns, notably [`zk::Error::NoHosts`] (every host
    /// tried, with [`with_fail_eagerly`](Connect::with_fail_eagerly)), [`zk::Error::Timeout`]
    /// (no session within about the session timeout), [`zk::Error::AuthFailed`] (the
    /// credentials refused) and [`zk::Error::BadArguments`] (hosts it cannot parse).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it drops the connect under way, and nothing is recorded.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zookeeper_client::Error> {
    /// let client = zkfence::Connect::new("127.0.0.1:2181").connect().await?;
    /// let lock = zkfence::FencedLock::new(client, "/locks/orders", zkfence::LockOptions::default());
    /// # let _ = lock; Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<zk::Client, zk::Error> {
        let began = clock::now();
        let client = self.dial().await?;
        if client.state() == zk::SessionState::SyncConnected {
            session_began(client.session_id().0, began, client.session_timeout());
        }
        Ok(client)
    }

    /// The connect itself: `secure_connect` when TLS options were given.
    async fn dial(self) -> Result<zk::Client, zk::Error> {
        #[cfg(feature = "tls")]
        if self.settings.tls {
            return self.connector.secure_connect(&self.hosts).await;
        }
        self.connector.connect(&self.hosts).await
    }
}

impl fmt::Debug for Connect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Settings {
            session_timeout,
            connection_timeout,
            fail_eagerly,
            detached,
            server_version,
            auth_schemes,
            tls,
            sasl,
        } = &self.settings;
        f.debug_struct("Connect")
            .field("hosts", &self.hosts)
            .field("session_timeout", session_timeout)
            .field("connection_timeout", connection_timeout)
            .field("fail_eagerly", fail_eagerly)
            .field("detached", detached)
            .field("server_version", server_version)
            .field("auth_schemes", auth_schemes)
            .field("tls", tls)
            .field("sasl", sasl)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_settings_and_prints_no_secret() {
        let connect = Connect::new("zk1:2181,zk2:2181/app")
            .with_session_timeout(Duration::from_secs(4))
            .with_fail_eagerly()
            .with_auth("digest", b"orders:digest-s3cret")
            .with_auth("ip", b"10.0.0.7");
        #[cfg(feature = "sasl")]
        let connect = connect.with_sasl(zk::SaslOptions::digest_md5("orders", "sasl-s3cret"));
        let shown = format!("{connect:?} {connect:#?}");
        for secret in ["digest-s3cret", "orders:", "10.0.0.7", "sasl-s3cret"] {
            assert!(!shown.contains(secret), "{secret:?} printed: {shown}");
        }
        for setting in [
            "zk1:2181,zk2:2181/app",
            "4s",
            "fail_eagerly: true",
            "\"digest\"",
        ] {
            assert!(shown.contains(setting), "{setting:?} not printed: {shown}");
        }
        assert!(shown.contains(&format!("sasl: {}", cfg!(feature = "sasl"))));
    }
}
