//! Connecting to ZooKeeper the way every subcommand does: the hosts, credentials (digest or any
//! other scheme the servers know), TLS, and retries while the ensemble starts or restarts.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::duration::parse_duration;
use crate::exit::{EXIT_NO_PERMISSION, EXIT_UNAVAILABLE, EXIT_USAGE};

/// Where ZooKeeper is and how to prove who we are. Shared by `run` and `holders`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Connection {
    /// ZooKeeper hosts, e.g. `zk1:2181,zk2:2181` (optionally with a chroot: `zk1:2181/app`).
    #[arg(long, env = "ZKFENCE_CONNECT")]
    pub(crate) connect: String,
    /// Credentials as SCHEME:CREDENTIALS, e.g. `digest:user:password`; `sasl:user:password`
    /// authenticates with SASL DIGEST-MD5. Arguments show in `ps`: prefer the variable or
    /// `--auth-file`.
    #[arg(
        long,
        env = "ZKFENCE_AUTH",
        hide_env_values = true,
        conflicts_with = "auth_file"
    )]
    auth: Option<String>,
    /// A file whose first line is SCHEME:CREDENTIALS.
    #[arg(long, env = "ZKFENCE_AUTH_FILE", value_name = "PATH")]
    auth_file: Option<PathBuf>,
    /// Connect with TLS, trusting the CA certificates in this PEM file.
    #[arg(long, env = "ZKFENCE_TLS_CA", value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Our certificate (PEM), for servers that authenticate clients by certificate.
    #[arg(
        long,
        env = "ZKFENCE_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    tls_cert: Option<PathBuf>,
    /// The private key of `--tls-cert` (PEM).
    #[arg(
        long,
        env = "ZKFENCE_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    tls_key: Option<PathBuf>,
    /// How long to keep trying to reach the ensemble (it may be starting or restarting).
    #[arg(long, env = "ZKFENCE_CONNECT_TIMEOUT", value_parser = parse_duration, default_value = "30s")]
    connect_timeout: Duration,
}

/// A credential to present: the scheme (`digest`, …) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credential {
    pub(crate) scheme: String,
    pub(crate) secret: Vec<u8>,
}

impl Credential {
    /// Adds this credential to `connect`: SASL DIGEST-MD5 for the `sasl` scheme (the server's
    /// `SASLAuthenticationProvider` and a JAAS `Server` section), an `addauth` packet for any
    /// other (`digest`, …).
    fn apply(&self, connect: zkfence::Connect) -> zkfence::Connect {
        #[cfg(feature = "sasl")]
        if self.scheme == "sasl" {
            let secret = String::from_utf8_lossy(&self.secret);
            if let Some((user, password)) = secret.split_once(':') {
                return connect.with_sasl(zk::SaslOptions::digest_md5(
                    user.to_owned(),
                    password.to_owned(),
                ));
            }
        }
        connect.with_auth(&self.scheme, &self.secret)
    }
}

impl Connection {
    /// Plain TCP to `hosts`, no credentials: for the demo's own workers.
    #[cfg(feature = "demo")]
    pub(crate) fn plain(hosts: &str) -> Connection {
        Connection {
            connect: hosts.to_owned(),
            auth: None,
            auth_file: None,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
            connect_timeout: Duration::from_secs(30),
        }
    }

    /// The credential from `--auth`, `ZKFENCE_AUTH` or `--auth-file`, checked; `Err` is an
    /// exit code after a one-line message.
    pub(crate) fn credential(&self) -> Result<Option<Credential>, u8> {
        let text = match (&self.auth, &self.auth_file) {
            (Some(auth), _) => auth.clone(),
            (None, Some(path)) => match std::fs::read_to_string(path) {
                Ok(text) => text.lines().next().unwrap_or_default().to_owned(),
                Err(err) => {
                    eprintln!("zkfence: cannot read --auth-file {}: {err}", path.display());
                    return Err(EXIT_USAGE);
                }
            },
            (None, None) => return Ok(None),
        };
        match text.trim().split_once(':') {
            Some(("sasl", _)) if cfg!(not(feature = "sasl")) => {
                eprintln!("zkfence: this zkfence was built without the sasl feature, which sasl: credentials need: cargo install zkfence-cli --features sasl");
                Err(EXIT_USAGE)
            }
            Some(("sasl", secret)) if !secret.contains(':') => {
                eprintln!("zkfence: SASL credentials must read sasl:USER:PASSWORD");
                Err(EXIT_USAGE)
            }
            Some((scheme, secret)) if !scheme.is_empty() && !secret.is_empty() => {
                Ok(Some(Credential {
                    scheme: scheme.to_owned(),
                    secret: secret.as_bytes().to_vec(),
                }))
            }
            _ => {
                eprintln!(
                    "zkfence: credentials must read SCHEME:CREDENTIALS, e.g. digest:user:password"
                );
                Err(EXIT_USAGE)
            }
        }
    }

    /// Without the `tls` feature: `None` for plain TCP, or an error for a TLS option.
    #[cfg(not(feature = "tls"))]
    fn tls(&self) -> Result<Option<std::convert::Infallible>, u8> {
        if self.tls_ca.is_some() || self.tls_cert.is_some() {
            eprintln!("zkfence: this zkfence was built without the tls feature, which --tls-ca and --tls-cert need: cargo install zkfence-cli --features tls");
            return Err(EXIT_USAGE);
        }
        Ok(None)
    }

    /// The TLS options from the PEM files, or `None` for plain TCP.
    #[cfg(feature = "tls")]
    fn tls(&self) -> Result<Option<zk::TlsOptions>, u8> {
        let Some(ca) = &self.tls_ca else {
            if self.tls_cert.is_some() {
                eprintln!("zkfence: --tls-cert needs --tls-ca (the CA that signed the servers' certificates)");
                return Err(EXIT_USAGE);
            }
            return Ok(None);
        };
        let read = |path: &PathBuf, what: &str| {
            std::fs::read_to_string(path).map_err(|err| {
                eprintln!("zkfence: cannot read {what} {}: {err}", path.display());
                EXIT_USAGE
            })
        };
        let bad = |what: &str, err: zk::Error| {
            eprintln!("zkfence: {what} is not usable PEM: {err}");
            EXIT_USAGE
        };
        let mut options = zk::TlsOptions::new()
            .with_pem_ca(&read(ca, "--tls-ca")?)
            .map_err(|e| bad("--tls-ca", e))?;
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            options = options
                .with_pem_identity(&read(cert, "--tls-cert")?, &read(key, "--tls-key")?)
                .map_err(|e| bad("--tls-cert/--tls-key", e))?;
        }
        Ok(Some(options))
    }

    /// Connects with a session of `session_timeout`, retrying with backoff until
    /// `--connect-timeout` or `deadline` (whichever is first) while no server answers. Fails at
    /// once on what a retry cannot fix: unreadable credentials or certificates, refused
    /// authentication. `Err` is an exit code after a one-line message.
    pub(crate) async fn open(
        &self,
        session_timeout: Duration,
        deadline: Option<Instant>,
    ) -> Result<zk::Client, u8> {
        let credential = self.credential()?;
        let tls = self.tls()?;
        let started = Instant::now();
        let until = (started + self.connect_timeout)
            .min(deadline.unwrap_or(Instant::now() + self.connect_timeout));
        let mut backoff = Duration::from_millis(100);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            // Through zkfence::Connect: the session's creation anchors the first lease, so
            // the command starts without waiting for a paired proof.
            let mut connect = zkfence::Connect::new(self.connect.as_str())
                .with_session_timeout(session_timeout)
                .with_connection_timeout(
                    left.clamp(Duration::from_millis(100), Duration::from_secs(5)),
                )
                .with_fail_eagerly();
            if let Some(credential) = &credential {
                connect = credential.apply(connect);
            }
            #[cfg(feature = "tls")]
            if let Some(tls) = tls.clone() {
                connect = connect.with_tls(tls);
            }
            let attempt = tokio::time::timeout(left, connect.connect()).await;
            let err = match attempt {
                Ok(Ok(client)) => return Ok(client),
                Ok(Err(zk::Error::AuthFailed)) => {
                    eprintln!("zkfence: ZooKeeper at {} refused our credentials (AuthFailed); check --auth / ZKFENCE_AUTH", self.connect);
                    return Err(EXIT_NO_PERMISSION);
                }
                Ok(Err(zk::Error::BadArguments(reason))) => {
                    eprintln!(
                        "zkfence: --connect {:?} is not usable: {reason}",
                        self.connect
                    );
                    return Err(EXIT_USAGE);
                }
                Ok(Err(err)) => err.to_string(),
                Err(_) => "no answer".to_owned(),
            };
            if Instant::now() + backoff >= until {
                eprintln!(
                    "zkfence: cannot reach ZooKeeper at {} within {:?} ({err}); check --connect{} and that the servers are up",
                    self.connect,
                    started.elapsed(),
                    if tls.is_some() { ", the TLS port and --tls-ca" } else { "" },
                );
                return Err(EXIT_UNAVAILABLE);
            }
            tracing::info!(hosts = %self.connect, cause = %err, retry_in = ?backoff, "ZooKeeper not reachable yet");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }
}
