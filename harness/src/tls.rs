//! [`TestCa`]: a certificate authority of a test's own, and a server certificate it signed for
//! `127.0.0.1` and `localhost`, made with Debian's `openssl` command: the TLS of the servers
//! the kit starts ([`LocalPostgres::start_tls`](crate::LocalPostgres::start_tls),
//! [`LocalMariaDb::start_tls`](crate::LocalMariaDb::start_tls),
//! [`LocalRedis::start_tls`](crate::LocalRedis::start_tls)).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::run_as::{give, Who};

/// A CA and a server certificate in a temp dir, removed when dropped.
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
    /// `server.pem`, for `127.0.0.1` and `localhost`, valid for a day), and a second CA
    /// (`other-ca.pem`) that signed nothing, for a client that must not trust the server.
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
        let d = |name: &str| ca.dir.join(name).display().to_string();
        let ext = ca.dir.join("server.ext");
        std::fs::write(
            &ext,
            "subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\n",
        )
        .map_err(|e| format!("{}: {e}", ext.display()))?;
        let new_ca = "req -x509 -newkey rsa:2048 -nodes -days 1";
        openssl(&format!(
            "{new_ca} -subj /CN=zkfence-test-CA -keyout {} -out {}",
            d("ca.key"),
            d("ca.pem")
        ))?;
        openssl(&format!(
            "{new_ca} -subj /CN=zkfence-other-CA -keyout {} -out {}",
            d("other-ca.key"),
            d("other-ca.pem")
        ))?;
        openssl(&format!(
            "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout {} -out {}",
            d("server.key"),
            d("server.csr")
        ))?;
        openssl(&format!(
            "x509 -req -in {} -CA {} -CAkey {} -CAcreateserial -days 1 -extfile {} -out {}",
            d("server.csr"),
            d("ca.pem"),
            d("ca.key"),
            d("server.ext"),
            d("server.pem")
        ))?;
        Ok(ca)
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
