//! `zkfence` against secured servers: digest credentials and creator-only ACLs, TLS, SASL
//! DIGEST-MD5; a wrong or missing identity is refused quickly with 77 and leaves no node.
//! Every test talks to real servers the test starts.

mod common;

use std::io::Write as _;
use std::time::{Duration, Instant};

use common::{run, run_line, run_with, temp, zkfence};
use zkfence_harness::{chroot, connect, shared};
use zkfence_testkit::LocalZooKeeper;
use zookeeper_client as zk;

/// `zkfence <line> -- sh -c 'echo token=$ZKFENCE_TOKEN'` exits 0 having printed its token.
async fn holds_and_sees_its_token(line: &str) {
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["--", "sh", "-c", "echo token=$ZKFENCE_TOKEN"]);
    let (status, stdout, stderr) = run(&args).await;
    assert_eq!(status, Some(0), "{line}: {stderr}");
    assert!(stdout.contains("token="), "{line}: {stdout}");
}

/// `run` on `lock` with the wrong credentials, then with none: 77 each time, quickly, with
/// advice naming `--auth`.
async fn refused_without_the_right_credentials(connect: &str, lock: &str, wrong: &str) {
    for auth in [Some(wrong), None] {
        let mut args = vec!["run", "--connect", connect, "--connect-timeout", "5s"];
        if let Some(auth) = auth {
            args.extend(["--auth", auth]);
        }
        args.extend(["--lock", lock, "--", "true"]);
        let started = Instant::now();
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(77), "{args:?}: {stderr}");
        assert!(stderr.contains("--auth"), "{stderr}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
    }
}

/// Digest credentials and creator-all ACLs: the right identity runs; a wrong or missing one
/// fails fast with 77 and leaves no node; the credentials can come from a variable or a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_and_acls() {
    let hosts = chroot(shared(), "cli-auth").await;
    // The lock path belongs to `alice`: only she may create, delete and list under it.
    let alice = zk::Client::connector()
        .with_auth("digest", b"alice:right")
        .connect(&hosts)
        .await
        .unwrap();
    alice
        .create(
            "/secured",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()),
        )
        .await
        .unwrap();

    holds_and_sees_its_token(&format!(
        "run --connect {} --auth digest:alice:right --acl creator --lock /secured",
        hosts
    ))
    .await;

    let mut from_env = zkfence(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/secured",
        "--",
        "true",
    ]);
    from_env.env("ZKFENCE_AUTH", "digest:alice:right");
    let env = run_with(from_env).await;
    assert_eq!(env.0, Some(0), "{}", env.2);

    let file = temp("auth").join("credentials");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(b"digest:alice:right\n")
        .unwrap();
    let from_file = run_line(&format!(
        "run --connect {} --auth-file {} --lock /secured -- true",
        hosts,
        file.to_string_lossy()
    ))
    .await;
    assert_eq!(from_file.0, Some(0), "{}", from_file.2);

    refused_without_the_right_credentials(&hosts, "/secured", "digest:alice:wrong").await;
    let left = alice.list_children("/secured").await.unwrap();
    assert!(left.is_empty(), "nodes left behind: {left:?}");
}

/// TLS on a `secureClientPort` with a key store `keytool` made at test time: the right CA
/// connects; no TLS, or a CA that did not sign the server, fails within --connect-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_right_ca_and_failures_without() {
    let server = tokio::task::spawn_blocking(LocalZooKeeper::start_tls)
        .await
        .unwrap()
        .unwrap();
    let tls = server.tls_addr().unwrap();
    let ca = server.tls_ca().unwrap().to_string_lossy().into_owned();
    holds_and_sees_its_token(&format!(
        "run --connect {} --tls-ca {} --lock /locks/tls",
        tls, ca
    ))
    .await;

    // Another CA: a key pair signed by nobody the client trusts.
    let other = tokio::task::spawn_blocking(LocalZooKeeper::start_tls)
        .await
        .unwrap()
        .unwrap();
    let wrong_ca = other.tls_ca().unwrap().to_string_lossy().into_owned();
    for extra in [vec![], vec!["--tls-ca", wrong_ca.as_str()]] {
        let mut args = vec!["run", "--connect", &tls, "--connect-timeout", "2s"];
        args.extend(extra.iter().copied());
        args.extend(["--lock", "/locks/tls", "--", "true"]);
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(69), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot reach ZooKeeper"), "{stderr}");
    }
    let client = connect(&server.addr(), Duration::from_secs(10)).await;
    assert!(client.list_children("/locks/tls").await.unwrap().is_empty());
}

/// SASL DIGEST-MD5 against a server that requires authentication: the right password runs;
/// a wrong one, or none, fails with 77 and leaves no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_digest_md5_on_a_server_that_requires_it() {
    let server = tokio::task::spawn_blocking(|| LocalZooKeeper::start_sasl(&[("alice", "right")]))
        .await
        .unwrap()
        .unwrap();
    let addr = server.addr();
    let ok = run_line(&format!(
        "run --connect {} --auth sasl:alice:right --lock /locks/sasl -- true",
        addr
    ))
    .await;
    assert_eq!(ok.0, Some(0), "{}", ok.2);
    refused_without_the_right_credentials(&addr, "/locks/sasl", "sasl:alice:wrong").await;
    let alice = zk::Client::connector()
        .with_sasl(zk::SaslOptions::digest_md5("alice", "right"))
        .connect(&addr)
        .await
        .unwrap();
    let left = alice.list_children("/locks/sasl").await.unwrap();
    assert!(left.is_empty(), "nodes left behind: {left:?}");
}
