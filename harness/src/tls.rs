//! [`TestCa`]: a certificate authority of a test's own, a server certificate it signed for
//! `127.0.0.1` and `localhost` and a client certificate, made with Debian's `openssl` command:
//! the TLS of the servers the kit starts ([`LocalPostgres::start_tls`](crate::LocalPostgres::start_tls),
//! [`LocalMariaDb::start_tls`](crate::LocalMariaDb::start_tls),
//! [`LocalRedis::start_tls`](crate::LocalRedis::start_tls)), and of those that require a client
//! certificate ([`LocalPostgres::start_mtls`](crate::LocalPostgres::start_mtls),
//! [`LocalMariaDb::start_mtls`](crate::LocalMariaDb::start_mtls),
//! [`LocalRedis::start_mtls`](crate::LocalRedis::start_mtls)).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::run_as::{give, Who};

/// The common name of the client certificates: the user PostgreSQL's `cert` method lets in
/// ([`POSTGRES_USER`](crate::POSTGRES_USER) is this).
pub(crate) const CLIENT_NAME: &str = "zkfence";

/// A CA, a server certificate and a client certificate in a temp dir, removed when dropped.
///
/// # Examples
///
/// ```no_run
/// let ca = zkfence_harness::TestCa::new()?;
/// println!("trust {}", ca.ca_cert().display());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
}

impl TestCa {
    /// A new CA (`ca.pem`) and a server key and certificate it signed (`server.key`,
    /// `server.pem`, for `127.0.0.1` and `localhost`, valid for a day), a client key and
    /// certificate it signed (`client.key`, `client.pem`, for TLS client authentication, its
    /// common name [`POSTGRES_USER`](crate::POSTGRES_USER) as PostgreSQL's `cert` method
    /// wants), and a second CA (`other-ca.pem`) that signed only a client certificate of its
    /// own (`other-client.pem`): for a client that must not trust the servers, and a client
    /// the servers must refuse.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.server_cert().exists());
    /// # Ok::<(), String>(())
    /// ```
    pub fn new() -> Result<TestCa, String> {
        let dir = zkfence_testkit::temp_dir("tls").map_err(|e| format!("temp dir: {e}"))?;
        let ca = TestCa { dir };
        for (name, ext) in [
            (
                "server.ext",
                "subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\n",
            ),
            ("client.ext", "extendedKeyUsage = clientAuth\n"),
        ] {
            let path = ca.dir.join(name);
            std::fs::write(&path, ext).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let new_ca = "req -x509 -newkey rsa:2048 -nodes -days 1";
        for (name, cn) in [("ca", "zkfence-test-CA"), ("other-ca", "zkfence-other-CA")] {
            openssl(&format!(
                "{new_ca} -subj /CN={cn} -keyout {} -out {}",
                ca.file(&format!("{name}.key")),
                ca.file(&format!("{name}.pem")),
            ))?;
        }
        ca.issue("server", "localhost", "ca", "server.ext")?;
        ca.issue("client", CLIENT_NAME, "ca", "client.ext")?;
        ca.issue("other-client", CLIENT_NAME, "other-ca", "client.ext")?;
        Ok(ca)
    }

    /// The path of `name` in the CA's dir, as text.
    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A key (`<name>.key`) and a certificate for it (`<name>.pem`, common name `cn`, the
    /// extensions in the file `ext`) signed by CA `ca` (`<ca>.key`, `<ca>.pem`).
    fn issue(&self, name: &str, cn: &str, ca: &str, ext: &str) -> Result<(), String> {
        let d = |file: String| self.file(&file);
        openssl(&format!(
            "req -newkey rsa:2048 -nodes -subj /CN={cn} -keyout {} -out {}",
            d(format!("{name}.key")),
            d(format!("{name}.csr")),
        ))?;
        openssl(&format!(
            "x509 -req -in {} -CA {} -CAkey {} -CAcreateserial -days 1 -extfile {} -out {}",
            d(format!("{name}.csr")),
            d(format!("{ca}.pem")),
            d(format!("{ca}.key")),
            d(ext.to_owned()),
            d(format!("{name}.pem")),
        ))
    }

    /// The CA's certificate (PEM): what a client trusts.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.ca_cert().ends_with("ca.pem"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Another CA's certificate, which signed nothing the servers show: a client trusting
    /// only it must refuse them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert_ne!(ca.other_ca_cert(), ca.ca_cert());
    /// # Ok::<(), String>(())
    /// ```
    pub fn other_ca_cert(&self) -> PathBuf {
        self.dir.join("other-ca.pem")
    }

    /// The server's certificate (PEM).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.server_cert().ends_with("server.pem"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The server's private key (PEM).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.server_key().ends_with("server.key"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client's certificate (PEM), signed by the CA: what a client shows a server that
    /// requires one (`sslcert=`, `ssl-cert=`, `ssl_certfile=`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// println!("postgresql://…?sslcert={}&sslkey={}", ca.client_cert().display(), ca.client_key().display());
    /// # Ok::<(), String>(())
    /// ```
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client's private key (PEM, unencrypted).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.client_key().ends_with("client.key"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// A client certificate (PEM) the other CA signed, with the same common name as
    /// [`client_cert`](TestCa::client_cert): a server trusting only this CA must refuse it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert_ne!(ca.other_client_cert(), ca.client_cert());
    /// # Ok::<(), String>(())
    /// ```
    pub fn other_client_cert(&self) -> PathBuf {
        self.dir.join("other-client.pem")
    }

    /// The private key (PEM, unencrypted) of [`other_client_cert`](TestCa::other_client_cert).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ca = zkfence_harness::TestCa::new()?;
    /// assert!(ca.other_client_key().ends_with("other-client.key"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn other_client_key(&self) -> PathBuf {
        self.dir.join("other-client.key")
    }

    /// The CA's certificate copied into `dir`, owned by the server's user: its path, for a
    /// server that checks its clients' certificates.
    pub(crate) fn ca_file(&self, dir: &Path, who: Who) -> Result<PathBuf, String> {
        let to = dir.join("ca.pem");
        std::fs::copy(self.ca_cert(), &to).map_err(|e| format!("{}: {e}", to.display()))?;
        give(&to, who);
        Ok(to)
    }

    /// The server's key and certificate copied into `dir`, owned by the server's user (a
    /// server refuses a key others can read): their paths.
    pub(crate) fn server_files(&self, dir: &Path, who: Who) -> Result<(PathBuf, PathBuf), String> {
        let (key, cert) = (dir.join("server.key"), dir.join("server.pem"));
        for (from, to) in [(self.server_key(), &key), (self.server_cert(), &cert)] {
            std::fs::copy(&from, to).map_err(|e| format!("{}: {e}", from.display()))?;
            give(to, who);
        }
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", key.display()))?;
        Ok((key, cert))
    }
}

/// The TLS a server the kit starts serves: `ca`'s server certificate, and whether it requires
/// its clients' certificates (signed by `ca`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Serve<'a> {
    pub(crate) ca: &'a TestCa,
    pub(crate) clients: bool,
}

/// Runs `openssl` with `args` (split at spaces); its complaint on failure.
fn openssl(args: &str) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args.split(' '))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("openssl: {e}: install Debian's openssl package"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl {args}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
