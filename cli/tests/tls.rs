//! `zkfence fence` over TLS, against servers that serve nothing else (PostgreSQL rejects
//! `hostnossl`, MariaDB requires secure transport, Redis has no plain port), each with a
//! certificate of a CA made for the test: the fence installed and verified green with the
//! server checked (`sslmode=verify-full`, `ssl-mode=VERIFY_IDENTITY`, `rediss://` with
//! `SSL_CERT_FILE`); refused, exit 69 naming the certificate, when the client trusts another
//! CA; refused by the server in the clear (MariaDB: access denied to the account, exit 77).

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
    let (code, _, err) = run(&["fence", "show", &format!("{base}?sslcert=/c.pem")]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("client certificates"), "{err}");
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
