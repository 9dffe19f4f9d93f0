//! `zkfence fence` over TLS, against servers that serve nothing else (PostgreSQL rejects
//! `hostnossl`, MariaDB requires secure transport, Redis has no plain port), each with a
//! certificate of a CA made for the test: the fence installed and verified green with the
//! server checked (`sslmode=verify-full`, `ssl-mode=VERIFY_IDENTITY`, `rediss://` with
//! `SSL_CERT_FILE`); refused, exit 69 naming the certificate, when the client trusts another
//! CA; refused by the server in the clear (MariaDB: access denied to the account, exit 77).
//!
//! Then servers that also require a client certificate (`start_mtls`: PostgreSQL's `cert`
//! method, MariaDB's `REQUIRE X509`, Redis's `tls-auth-clients yes`): green with the CA's
//! client certificate in the URL (`sslcert`/`sslkey`, `ssl-cert`/`ssl-key`,
//! `ssl_certfile`/`ssl_keyfile`); refused without one, and with one another CA signed.

mod common;

use zkfence_harness::{LocalMariaDb, LocalPostgres, LocalRedis, TestCa, POSTGRES_USER};

use common::{run, run_with, temp, zkfence};

type Outcome = (Option<i32>, String, String);

fn ok((code, out, err): &Outcome) {
    assert_eq!(*code, Some(0), "{out}{err}");
}

fn green(outcome: &Outcome) {
    ok(outcome);
    assert!(outcome.1.contains("cases passed"), "{}", outcome.1);
    assert!(!outcome.1.contains("FAIL"), "{}", outcome.1);
}

/// Exit 69 (the store unreachable), the error saying `why`.
fn unreachable((code, out, err): &Outcome, why: &[&str]) {
    assert_eq!(*code, Some(69), "{out}{err}");
    let lower = err.to_lowercase();
    assert!(
        why.iter().any(|w| lower.contains(w)),
        "expected one of {why:?} in: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_tls_checks_the_server() {
    let ca = TestCa::new().unwrap();
    let dir = temp("postgres");
    let pg = LocalPostgres::start_tls(&dir, &ca).unwrap();
    let base = format!(
        "postgresql://{POSTGRES_USER}@127.0.0.1:{}/postgres",
        pg.port()
    );
    let verified = format!(
        "{base}?sslmode=verify-full&sslrootcert={}",
        ca.ca_cert().display()
    );
    ok(&run(&["fence", "install", &verified]).await);
    green(&run(&["fence", "verify", &verified]).await);
    // libpq's `require`: encrypted, the certificate not checked.
    ok(&run(&["fence", "show", &format!("{base}?sslmode=require")]).await);
    // Another CA's root: verify-full, and require with a root (libpq checks the chain then).
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = format!(
            "{base}?sslmode={mode}&sslrootcert={}",
            ca.other_ca_cert().display()
        );
        unreachable(
            &run(&["fence", "show", &url]).await,
            &["certificate", "issuer"],
        );
    }
    // The server takes no connection in the clear.
    unreachable(
        &run(&["fence", "show", &format!("{base}?sslmode=disable")]).await,
        &["no encryption", "pg_hba.conf"],
    );
    // A TLS parameter the CLI cannot honour is a usage error, not a connection in the clear.
    let (code, _, err) = run(&["fence", "show", &format!("{base}?sslcrl=/crl.pem")]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("CRLs are not supported"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_tls_checks_the_server() {
    let ca = TestCa::new().unwrap();
    let dir = temp("mariadb");
    let db = LocalMariaDb::start_tls(&dir, &ca).unwrap();
    let base = db.url("mysql");
    let verified = format!(
        "{base}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        ca.ca_cert().display()
    );
    ok(&run(&["fence", "install", &verified]).await);
    green(&run(&["fence", "verify", &verified]).await);
    ok(&run(&["fence", "show", &format!("{base}?ssl-mode=REQUIRED")]).await);
    let other = format!(
        "{base}?ssl-mode=VERIFY_CA&ssl-ca={}",
        ca.other_ca_cert().display()
    );
    unreachable(
        &run(&["fence", "show", &other]).await,
        &["certificate", "issuer"],
    );
    // The account requires TLS: in the clear, the server denies it (error 1045), exit 77.
    let (code, out, err) = run(&["fence", "show", &base]).await;
    assert_eq!(code, Some(77), "{out}{err}");
    assert!(err.to_lowercase().contains("access denied"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_checks_the_server() {
    let ca = TestCa::new().unwrap();
    let redis = LocalRedis::start_tls(&ca).unwrap();
    let url = format!("rediss://{}/", redis.addr());
    let trusting = |args: &[&str], cert: &std::path::Path| {
        let mut command = zkfence(args);
        command.env("SSL_CERT_FILE", cert);
        command
    };
    ok(&run_with(trusting(&["fence", "install", &url], &ca.ca_cert())).await);
    // The throwaway TLS server keeps no append-only file: verify would fail it as volatile
    // (redis/tests/deployment.rs tests that), so this run accepts it knowingly.
    let verify = ["fence", "verify", "--accept-volatile", &url];
    green(&run_with(trusting(&verify, &ca.ca_cert())).await);
    unreachable(
        &run_with(trusting(&["fence", "show", &url], &ca.other_ca_cert())).await,
        &["certificate", "issuer"],
    );
    // `#insecure`: encrypted, the certificate not checked.
    let insecure = format!("{url}#insecure");
    ok(&run_with(trusting(&["fence", "show", &insecure], &ca.other_ca_cert())).await);
    // The server has no plain port.
    unreachable(
        &run(&["fence", "show", &format!("redis://{}/", redis.addr())]).await,
        &["connection", "closed", "reset", "broken", "i/o"],
    );
}

/// `url` with a client certificate's parameters appended: `cert` and `key` under `names`.
fn with_identity(
    url: &str,
    names: (&str, &str),
    cert: &std::path::Path,
    key: &std::path::Path,
) -> String {
    format!(
        "{url}&{}={}&{}={}",
        names.0,
        cert.display(),
        names.1,
        key.display()
    )
}

/// Exit `expected`, the error saying one of `why`.
fn refused((code, out, err): &Outcome, expected: i32, why: &[&str]) {
    assert_eq!(*code, Some(expected), "{out}{err}");
    let lower = err.to_lowercase();
    assert!(
        why.iter().any(|w| lower.contains(w)),
        "expected one of {why:?} in: {err}"
    );
}

/// Against a server that requires a client certificate, with `checked` (a URL that checks the
/// server) and the certificate parameters `names`: installed and verified green with the CA's
/// client certificate; refused with none (exit `none_exit`, saying one of `none_why`) and
/// with the other CA's (exit 69, the handshake's unknown CA); half the pair, or a file that
/// is not there, is a usage error naming the parameter and the path.
async fn requires_a_client_certificate(
    ca: &TestCa,
    checked: &str,
    names: (&str, &str),
    verify: &[&str],
    none: (i32, &[&str]),
) {
    let mine = with_identity(checked, names, &ca.client_cert(), &ca.client_key());
    ok(&run(&["fence", "install", &mine]).await);
    let verify: Vec<&str> = ["fence", "verify"].iter().chain(verify).copied().collect();
    green(&run(&[verify.as_slice(), &[mine.as_str()]].concat()).await);
    refused(&run(&["fence", "show", checked]).await, none.0, none.1);
    let other = with_identity(
        checked,
        names,
        &ca.other_client_cert(),
        &ca.other_client_key(),
    );
    refused(&run(&["fence", "show", &other]).await, 69, &["unknownca"]);
    let half = format!("{checked}&{}={}", names.0, ca.client_cert().display());
    let gone = ca.client_key().with_extension("gone");
    let missing = with_identity(checked, names, &ca.client_cert(), &gone);
    // Redis takes the key from the certificate's file when it is not given (redis-py's rule).
    let half_names = [names.1, "no private key", "private key"];
    refused(&run(&["fence", "show", &half]).await, 64, &half_names);
    let named = run(&["fence", "show", &missing]).await;
    refused(&named, 64, &[names.1]);
    assert!(named.2.contains(&gone.display().to_string()), "{}", named.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_with_a_client_certificate() {
    let ca = TestCa::new().unwrap();
    let dir = temp("postgres-mtls");
    let pg = LocalPostgres::start_mtls(&dir, &ca).unwrap();
    let checked = format!(
        "postgresql://{POSTGRES_USER}@127.0.0.1:{}/postgres?sslmode=verify-full&sslrootcert={}",
        pg.port(),
        ca.ca_cert().display()
    );
    // pg_hba.conf's `cert` refuses the connection (SQLSTATE 28000, which the CLI does not
    // count as a refused privilege): the store could not be reached, exit 69.
    let none = (69, &["requires a valid client certificate"][..]);
    requires_a_client_certificate(&ca, &checked, ("sslcert", "sslkey"), &[], none).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_with_a_client_certificate() {
    let ca = TestCa::new().unwrap();
    let dir = temp("mariadb-mtls");
    let db = LocalMariaDb::start_mtls(&dir, &ca).unwrap();
    let checked = format!(
        "{}?ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        db.url("mysql"),
        ca.ca_cert().display()
    );
    // The account requires X509: without a certificate the server denies it (1045), exit 77.
    let none = (77, &["access denied"][..]);
    requires_a_client_certificate(&ca, &checked, ("ssl-cert", "ssl-key"), &[], none).await;
    // The MySQL client's spelling with underscores works the same.
    let mine = with_identity(
        &checked,
        ("ssl_cert", "ssl_key"),
        &ca.client_cert(),
        &ca.client_key(),
    );
    ok(&run(&["fence", "show", &mine]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_with_a_client_certificate() {
    let ca = TestCa::new().unwrap();
    let redis = LocalRedis::start_mtls(&ca).unwrap();
    let checked = format!(
        "rediss://{}/?ssl_ca_certs={}",
        redis.addr(),
        ca.ca_cert().display()
    );
    // The handshake fails (`tls-auth-clients yes`): the store could not be reached, exit 69.
    let none = (69, &["certificaterequired"][..]);
    // The throwaway server keeps no append-only file (see redis_over_tls_checks_the_server).
    let verify = ["--accept-volatile"];
    let names = ("ssl_certfile", "ssl_keyfile");
    requires_a_client_certificate(&ca, &checked, names, &verify, none).await;
    // SSL_CERT_FILE still names the roots when ssl_ca_certs does not.
    let url = format!(
        "rediss://{}/?ssl_certfile={}&ssl_keyfile={}",
        redis.addr(),
        ca.client_cert().display(),
        ca.client_key().display()
    );
    let mut command = zkfence(&["fence", "show", &url]);
    command.env("SSL_CERT_FILE", ca.ca_cert());
    ok(&run_with(command).await);
    // ssl_cert_reqs=none: the server's certificate not checked (as #insecure).
    let insecure = with_identity(
        &format!("rediss://{}/?ssl_cert_reqs=none", redis.addr()),
        names,
        &ca.client_cert(),
        &ca.client_key(),
    );
    let mut command = zkfence(&["fence", "show", &insecure]);
    command.env("SSL_CERT_FILE", ca.other_ca_cert());
    ok(&run_with(command).await);
}
