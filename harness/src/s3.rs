//! [`LocalS3`]: a throwaway S3-compatible server, `moto` in server mode (from PyPI), for the
//! object store fence: one that enforces conditional writes, and one that ignores them.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zkfence_testkit::{spawn_tied, Keeper};

/// moto's server app on 127.0.0.1 and the port in `sys.argv[1]`, one request at a time.
const SERIAL_MOTO: &str = "import sys
from werkzeug.serving import run_simple
from moto.server import DomainDispatcherApplication, create_backend_app
run_simple('127.0.0.1', int(sys.argv[1]), DomainDispatcherApplication(create_backend_app), threaded=False, use_reloader=False)";

/// The moto a kit-built environment gets for [`Preconditions::Enforced`]: it answers a failed
/// `If-Match` or `If-None-Match` on PutObject with 412.
const MOTO_ENFORCING: &str = "5.2.1";

/// The moto of [`Preconditions::Ignored`]: from before S3 had conditional writes (2024), it
/// accepts a PutObject whatever its `If-Match` or `If-None-Match` say.
const MOTO_IGNORING: &str = "4.2.14";

/// What a fake `Authorization` header says: moto checks no signature, but answers a request
/// without one as an anonymous user's.
const AUTHORIZATION: &str = "AWS4-HMAC-SHA256 Credential=zkfence/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0";

/// How long a server may take to answer its first request (moto imports a lot).
const STARTUP: Duration = Duration::from_secs(60);

/// Whether a [`LocalS3`] enforces the preconditions of a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preconditions {
    /// `If-None-Match: *` and `If-Match` on PutObject fail with 412 when they do not hold
    /// (moto 5.2.1, or the `python3`'s moto from 5.1 on).
    Enforced,
    /// Both are ignored: every PutObject succeeds (moto 4.2.14, in a virtual environment the
    /// kit builds on first use).
    Ignored,
}

/// An S3-compatible server (moto) that lives as long as this value, on a free loopback port,
/// with no buckets: create them with [`create_bucket`](LocalS3::create_bucket). Any access
/// key and secret are accepted; use region `us-east-1` and path-style requests.
///
/// The moto for [`Preconditions::Enforced`] is `$ZKFENCE_MOTO_PYTHON`'s when set, else
/// `python3`'s when it has moto 5.1 or later, else moto 5.2.1 in a virtual environment the kit
/// builds; the one for [`Preconditions::Ignored`] is moto 4.2.14, always in a virtual
/// environment of the kit's. Those are built once, from PyPI (`python3 -m venv`, then pip),
/// under `$XDG_CACHE_HOME/zkfence` (or `~/.cache/zkfence`), and reused.
///
/// # Examples
///
/// ```no_run
/// use zkfence_harness::{LocalS3, Preconditions};
/// let s3 = LocalS3::start(Preconditions::Enforced)?;
/// s3.create_bucket("fenced", false)?;
/// println!("S3 at {}", s3.endpoint());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalS3 {
    child: Child,
    port: u16,
    preconditions: Preconditions,
    /// Dropped after the server is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

impl LocalS3 {
    /// Starts moto on a free loopback port (see [`LocalS3`] for which), and waits (up to 60 s)
    /// until it answers; its log is kept until then, for the error when it does not (nothing
    /// is left behind in the temp dir, even by a server kept in a `static`). The first start
    /// of a kit-built moto builds its environment first (about 10 s, from PyPI).
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let s3 = zkfence_harness::LocalS3::start(zkfence_harness::Preconditions::Ignored)?;
    /// assert!(s3.endpoint().starts_with("http://127.0.0.1:"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn start(preconditions: Preconditions) -> Result<LocalS3, String> {
        let python = python_for(preconditions)?;
        let mut last = String::new();
        // A free port can be taken between our look and moto's bind: try another.
        for _ in 0..3 {
            match LocalS3::start_on(&python, preconditions) {
                Ok(s3) => return Ok(s3),
                Err(err) => last = err,
            }
        }
        Err(last)
    }

    fn start_on(python: &Path, preconditions: Preconditions) -> Result<LocalS3, String> {
        let dir = zkfence_testkit::temp_dir("s3").map_err(|e| format!("temp dir: {e}"))?;
        let started = LocalS3::spawn(python, preconditions, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        started
    }

    /// Starts moto with its log in `dir` and waits until it answers.
    fn spawn(python: &Path, preconditions: Preconditions, dir: &Path) -> Result<LocalS3, String> {
        let port = zkfence_testkit::free_port().map_err(|e| format!("no free port: {e}"))?;
        let log = std::fs::File::create(dir.join("moto.log")).map_err(|e| format!("log: {e}"))?;
        let err_log = log.try_clone().map_err(|e| format!("log: {e}"))?;
        let mut cmd = Command::new(python);
        // moto's own `moto.server` serves each request on a thread of its own, and its
        // conditional PutObject checks and then stores without a lock: two concurrent
        // `If-None-Match: *` creates could both succeed (seen once in CI, 2026-11-29, as
        // verify's `concurrent_first_claims` failing on the enforcing server). S3 makes the
        // check and the write one step; one request at a time does the same here.
        cmd.args(["-c", SERIAL_MOTO, &port.to_string()])
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err_log);
        // The server stops with us however we die, whichever thread started it.
        let (child, _keeper) = spawn_tied(cmd, libc::SIGKILL)
            .map_err(|e| format!("start {}'s moto server: {e}", python.display()))?;
        let mut s3 = LocalS3 {
            child,
            port,
            preconditions,
            _keeper,
        };
        let deadline = Instant::now() + STARTUP;
        while !s3.answers() {
            let exited = s3.child.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(dir.join("moto.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(8).collect();
                let why = match exited {
                    Some(status) => format!("exited ({status})"),
                    None => format!("did not answer within {} s", STARTUP.as_secs()),
                };
                return Err(format!(
                    "{} -m moto.server on port {port} {why}; the end of its log:\n{}\n(the S3 server of the object store tests is moto from PyPI: `pip install 'moto[server]'` for python3, or ZKFENCE_MOTO_PYTHON naming a Python that has it)",
                    python.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(s3)
    }

    /// Whether the server answers a ListBuckets with 200.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = raw_request("GET", "/", &self.addr(), b"");
        let mut reply = Vec::new();
        stream.write_all(&request).is_ok()
            && stream.read_to_end(&mut reply).is_ok()
            && status(&reply) == Some(200)
    }

    /// `http://127.0.0.1:<port>`, the endpoint for an S3 client (path-style, plain HTTP).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let s3 = zkfence_harness::LocalS3::start(zkfence_harness::Preconditions::Enforced)?;
    /// println!("{}", s3.endpoint());
    /// # Ok::<(), String>(())
    /// ```
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// `127.0.0.1:<port>` (for a proxy in front of it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let s3 = zkfence_harness::LocalS3::start(zkfence_harness::Preconditions::Enforced)?;
    /// assert!(s3.addr().starts_with("127.0.0.1:"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Whether this server enforces conditional writes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence_harness::{LocalS3, Preconditions};
    /// let s3 = LocalS3::start(Preconditions::Ignored)?;
    /// assert_eq!(s3.preconditions(), Preconditions::Ignored);
    /// # Ok::<(), String>(())
    /// ```
    pub fn preconditions(&self) -> Preconditions {
        self.preconditions
    }

    /// Creates bucket `name` (3 to 63 lowercase letters, digits, `-`), with versioning on when
    /// `versioned` (every write then keeps its version: see
    /// [`object_versions`](Self::object_versions)).
    ///
    /// # Errors
    ///
    /// The server's status and reply when it refused.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(s3: zkfence_harness::LocalS3) -> Result<(), String> {
    /// s3.create_bucket("history", true)?;
    /// # Ok(()) }
    /// ```
    pub fn create_bucket(&self, name: &str, versioned: bool) -> Result<(), String> {
        self.expect_ok("PUT", &format!("/{name}"), b"")?;
        if versioned {
            let body = br#"<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>"#;
            self.expect_ok("PUT", &format!("/{name}?versioning"), body)?;
        }
        Ok(())
    }

    /// The version ids of object `key` in a versioned `bucket`, oldest first: the store's own
    /// record of every write it accepted, in the order it accepted them (moto's by their time
    /// of writing). `key` must need no URL encoding (letters, digits, `/`, `-`, `_`, `.`). It
    /// blocks (briefly, on loopback): from async code, call it through `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// The server's status and reply when it refused; a key that needs encoding.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(s3: zkfence_harness::LocalS3) -> Result<(), String> {
    /// for id in s3.object_versions("history", "a/manifest")? {
    ///     println!("{id}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn object_versions(&self, bucket: &str, key: &str) -> Result<Vec<String>, String> {
        s3_object_versions(&self.addr(), bucket, key)
    }

    fn expect_ok(&self, method: &str, target: &str, body: &[u8]) -> Result<String, String> {
        expect_ok(&self.addr(), method, target, body)
    }
}

impl Drop for LocalS3 {
    fn drop(&mut self) {
        crate::StoreFaults::resume(self);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The version ids of object `key` in a versioned `bucket` of the S3 server at `addr`
/// (`127.0.0.1:<port>`: a [`LocalS3`]'s, or one a test started beside it), oldest first; as
/// [`LocalS3::object_versions`], which this is for a server known by its address alone.
///
/// # Errors
///
/// The server's status and reply when it refused; a key that needs encoding.
///
/// # Examples
///
/// ```no_run
/// # fn demo(s3: zkfence_harness::LocalS3) -> Result<(), String> {
/// let ids = zkfence_harness::s3_object_versions(&s3.addr(), "history", "a/manifest")?;
/// # let _ = ids; Ok(()) }
/// ```
pub fn s3_object_versions(addr: &str, bucket: &str, key: &str) -> Result<Vec<String>, String> {
    versions_in_pages(addr, bucket, key, 1000)
}

/// [`s3_object_versions`], asking for `page` versions a page.
fn versions_in_pages(
    addr: &str,
    bucket: &str,
    key: &str,
    page: usize,
) -> Result<Vec<String>, String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/-_.".contains(c);
    if !key.chars().all(plain) {
        return Err(format!(
            "{key:?} needs URL encoding, which object_versions does not do"
        ));
    }
    let mut ids = Vec::new();
    // Page by page (S3 lists up to 1,000 versions a page), from where the last one ended.
    let mut from = String::new();
    loop {
        let target = format!("/{bucket}?versions&prefix={key}&max-keys={page}{from}");
        let xml = expect_ok(addr, "GET", &target, b"")?;
        for version in xml.split("<Version>").skip(1) {
            if xml_field(version, "Key").as_deref() == Some(key) {
                ids.extend(xml_field(version, "VersionId"));
            }
        }
        if !xml.contains("<IsTruncated>true</IsTruncated>") {
            break;
        }
        let next = |name| xml_field(&xml, name).map(|v| percent_encoded(&v));
        match (next("NextKeyMarker"), next("NextVersionIdMarker")) {
            (Some(k), Some(v)) => from = format!("&key-marker={k}&version-id-marker={v}"),
            _ => {
                return Err(format!(
                    "a truncated page of {key}'s versions without its markers"
                ))
            }
        }
    }
    // S3 lists the newest first.
    ids.reverse();
    Ok(ids)
}

/// The text of the first `<name>` element in `xml`.
fn xml_field(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find('<')? + start;
    Some(xml[start..end].to_owned())
}

/// `text` for a URL's query: every byte but the unreserved ones percent-encoded.
fn percent_encoded(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One request, its reply's body; an error unless the status is 200.
fn expect_ok(addr: &str, method: &str, target: &str, body: &[u8]) -> Result<String, String> {
    let what = format!("{method} {target}");
    let failed = |e: std::io::Error| format!("{what}: {e}");
    let mut stream = TcpStream::connect(addr).map_err(failed)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(failed)?;
    let request = raw_request(method, target, addr, body);
    stream.write_all(&request).map_err(failed)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(failed)?;
    let text = String::from_utf8_lossy(&reply).into_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    match status(&reply) {
        Some(200) => Ok(body),
        other => Err(format!("{what}: status {other:?}: {body}")),
    }
}

/// An HTTP/1.0 request (so that the reply is never chunked, and the server closes after it).
fn raw_request(method: &str, target: &str, addr: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "{method} {target} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: {AUTHORIZATION}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// The status code of an HTTP reply.
fn status(reply: &[u8]) -> Option<u16> {
    let line = reply.split(|&b| b == b'\r').next()?;
    let line = std::str::from_utf8(line).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

/// The Python whose moto serves `preconditions`.
fn python_for(preconditions: Preconditions) -> Result<PathBuf, String> {
    match preconditions {
        Preconditions::Enforced => {
            if let Some(python) = std::env::var_os("ZKFENCE_MOTO_PYTHON") {
                return Ok(PathBuf::from(python));
            }
            if let Some(version) = moto_version(Path::new("python3")) {
                let parts: Vec<u32> = version.split('.').filter_map(|p| p.parse().ok()).collect();
                if parts.as_slice() >= [5, 1].as_slice() {
                    return Ok(PathBuf::from("python3"));
                }
            }
            venv(MOTO_ENFORCING)
        }
        Preconditions::Ignored => venv(MOTO_IGNORING),
    }
}

/// The moto version `python` imports, if it has one with its server.
fn moto_version(python: &Path) -> Option<String> {
    let out = Command::new(python)
        .args(["-c", "import moto, moto.server; print(moto.__version__)"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The Python of the kit's virtual environment with moto `version` and its server's Flask.
fn venv(version: &str) -> Result<PathBuf, String> {
    let hint = "the object store tests run moto (PyPI) as their S3 server: they need `python3` with `venv` and `pip` (Debian: `apt-get install -y python3-venv python3-pip`) and PyPI, or an installed moto (`pip install 'moto[server]'`) named by ZKFENCE_MOTO_PYTHON";
    let spec = format!("moto[s3]=={version}");
    let works = |python: &Path| moto_version(python).as_deref() == Some(version);
    crate::python::environment(
        &format!("moto-{version}"),
        &[&spec, "flask", "flask-cors"],
        &works,
        hint,
    )
}

/// An S3 client of `bucket` at `endpoint` (a [`LocalS3`]'s, or a proxy in front of it):
/// path-style requests over plain HTTP, the credentials moto takes, conditional puts by ETag,
/// and at most `retries` retries (0: a request whose connection broke fails at once, which a
/// lost-reply test needs).
///
/// # Errors
///
/// The client's complaint about its configuration.
///
/// # Examples
///
/// ```no_run
/// use zkfence_harness::{s3_client, LocalS3, Preconditions};
/// let s3 = LocalS3::start(Preconditions::Enforced)?;
/// s3.create_bucket("demo", false)?;
/// let store = s3_client(&s3.endpoint(), "demo", 10)?;
/// # let _ = store; Ok::<(), String>(())
/// ```
pub fn s3_client(
    endpoint: &str,
    bucket: &str,
    retries: usize,
) -> Result<std::sync::Arc<dyn object_store::ObjectStore>, String> {
    s3_client_timed(endpoint, bucket, retries, None)
}

/// [`s3_client`] whose requests each give up after `timeout` (object_store's default, 30 s,
/// when `None`): a store that stalls then times a request out, as a production client set to
/// fail fast sees it.
///
/// # Errors
///
/// The client's complaint about its configuration.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// # let s3 = zkfence_harness::LocalS3::start(zkfence_harness::Preconditions::Enforced)?;
/// let store = zkfence_harness::s3_client_timed(&s3.endpoint(), "demo", 3, Some(Duration::from_secs(2)))?;
/// # let _ = store; Ok::<(), String>(())
/// ```
pub fn s3_client_timed(
    endpoint: &str,
    bucket: &str,
    retries: usize,
    timeout: Option<Duration>,
) -> Result<std::sync::Arc<dyn object_store::ObjectStore>, String> {
    use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
    let retry = object_store::RetryConfig {
        max_retries: retries,
        ..object_store::RetryConfig::default()
    };
    let mut options = object_store::ClientOptions::new().with_allow_http(true);
    if let Some(timeout) = timeout {
        options = options.with_timeout(timeout);
    }
    let store = AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("zkfence")
        .with_secret_access_key("zkfence")
        .with_client_options(options)
        .with_virtual_hosted_style_request(false)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .with_retry(retry)
        .build()
        .map_err(|e| format!("an S3 client for {endpoint}: {e}"))?;
    Ok(std::sync::Arc::new(store))
}

/// moto keeps every bucket in memory: a paused server stalls, and a crash loses everything, so
/// [`crash_and_restart`](crate::StoreFaults::crash_and_restart) refuses (an object store's
/// outage in the chaos suite is a server error or a timeout instead).
impl crate::StoreFaults for LocalS3 {
    fn pause(&self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGSTOP) };
    }

    fn resume(&self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
    }

    fn crash_and_restart(&mut self) -> Result<(), String> {
        Err("moto keeps its objects in memory: a restart would lose every one, not only what was unacknowledged; fault an object store with server errors and timeouts instead".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_s3_answers_keeps_versions_and_goes_with_its_value() {
        let s3 = LocalS3::start(Preconditions::Enforced).unwrap_or_else(|err| panic!("{err}"));
        assert!(s3.answers());
        s3.create_bucket("kit-check", true).unwrap();
        assert_eq!(
            s3.object_versions("kit-check", "none").unwrap(),
            Vec::<String>::new()
        );
        assert!(s3.object_versions("kit-check", "needs encoding?").is_err());
        // Five writes, listed two a page: every version, oldest first, once.
        for i in 0..5 {
            s3.expect_ok("PUT", "/kit-check/paged", format!("v{i}").as_bytes())
                .unwrap();
        }
        let all = s3.object_versions("kit-check", "paged").unwrap();
        let paged = versions_in_pages(&s3.addr(), "kit-check", "paged", 2).unwrap();
        assert_eq!(all.len(), 5);
        let first_page = "/kit-check?versions&prefix=paged&max-keys=2";
        let first_page = expect_ok(&s3.addr(), "GET", first_page, b"").unwrap();
        assert!(
            first_page.contains("<IsTruncated>true</IsTruncated>"),
            "not paged: {first_page}"
        );
        assert_eq!(paged, all);
        let first = expect_ok(
            &s3.addr(),
            "GET",
            &format!("/kit-check/paged?versionId={}", all[0]),
            b"",
        );
        assert_eq!(first.unwrap(), "v0");
        let pid = s3.child.id();
        drop(s3);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_reply_status_is_read() {
        assert_eq!(
            status(b"HTTP/1.0 412 PRECONDITION FAILED\r\n\r\n"),
            Some(412)
        );
        assert_eq!(status(b"garbage"), None);
    }
}
