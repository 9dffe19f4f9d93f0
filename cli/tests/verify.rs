//! `zkfence fence verify` against every store the test kit starts: green (exit 0, every case
//! passed) on a sound deployment, red (exit 1, the failed case named) on one built to fail:
//! an S3 emulator that ignores conditional writes, a MySQL fence installed without the doom
//! of what it refuses (as before this version), a Redis function library without the token's
//! form check (as the published scripts were).

mod common;

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use zkfence_harness::{chroot, shared, shared_mariadb};
use zkfence_harness::{LocalRedis, LocalS3, Preconditions};

use common::{postgres_database, run, run_with, zkfence};

/// Asserts that `verify` passed every case.
fn green((code, out, err): &(Option<i32>, String, String)) {
    assert_eq!(*code, Some(0), "{out}{err}");
    assert!(!out.contains("FAIL") && !out.contains("BROKEN"), "{out}");
    assert!(out.contains("cases passed"), "{out}");
}

/// Asserts that `verify` failed, naming `case` as failed.
fn red((code, out, err): &(Option<i32>, String, String), case: &str) {
    assert_eq!(*code, Some(1), "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with(case))
        .unwrap_or_default();
    assert!(line.contains("FAIL"), "{case} must fail:\n{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_installed_by_the_cli_verifies_green() {
    let url = postgres_database(&format!("verify_{}", std::process::id()))
        .await
        .url;
    let (code, out, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    green(&run(&["fence", "verify", &url]).await);
    // Its scratch scopes and schema are gone again: no fence left behind.
    let (code, out, _) = run(&["fence", "show", &url]).await;
    assert_eq!((code, out.trim()), (Some(0), "no fence yet"));
}

/// A MariaDB database of its own, on the shared server; its URL.
async fn mariadb_database(name: &str) -> String {
    let root = tokio::task::spawn_blocking(shared_mariadb).await.unwrap();
    let db = format!("{name}_{}", std::process::id());
    let opts = mysql_async::Opts::from_url(root).unwrap();
    let mut conn =
        mysql_async::Conn::new(mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false))
            .await
            .unwrap();
    use mysql_async::prelude::Queryable;
    conn.query_drop(format!("CREATE DATABASE `{db}`"))
        .await
        .unwrap();
    root.replace("/mysql", &format!("/{db}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_verifies_green_and_an_install_without_the_doom_red() {
    let url = mariadb_database("verify_ok").await;
    let (code, out, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    green(&run(&["fence", "verify", &url]).await);
    // The procedures as they were: a refusal signals and nothing more. Installed by hand with
    // the mariadb client, as an operator might have from an older script.
    let url = mariadb_database("verify_old").await;
    let (_, script, _) = run(&["fence", "install", "--print", "mysql://"]).await;
    let old = script.replace(
        "ROLLBACK;\n    SET SESSION TRANSACTION READ ONLY;\n    ",
        "",
    );
    assert_ne!(old, script, "the doom's statements are in the script");
    let (port, db) = url.rsplit(':').next().unwrap().split_once('/').unwrap();
    let mut client = tokio::process::Command::new("mariadb")
        .args([
            "--protocol=tcp",
            "-h",
            "127.0.0.1",
            "-u",
            "root",
            "-P",
            port,
            db,
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("the mariadb client");
    let mut stdin = client.stdin.take().unwrap();
    stdin.write_all(old.as_bytes()).await.unwrap();
    drop(stdin);
    assert!(client.wait().await.unwrap().success());
    red(
        &run(&["fence", "verify", &url]).await,
        "carrying_on_after_a_refusal_commits_nothing",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_verifies_green_and_the_scripts_without_the_form_check_red() {
    let redis = tokio::task::spawn_blocking(LocalRedis::start)
        .await
        .unwrap()
        .unwrap();
    let url = format!("redis://{}/", redis.addr());
    let (code, out, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    green(&run(&["fence", "verify", &url]).await);
    // The library as the published scripts were: the token's text compared as it came.
    let other = tokio::task::spawn_blocking(LocalRedis::start)
        .await
        .unwrap()
        .unwrap();
    let old = zkfence_redis::FUNCTIONS
        .replace(
            "local function token(text)\n",
            "local function token(text)\n  if true then return text end\n",
        )
        .replace(
            "local function above(a, b)\n",
            "local function above(a, b)\n  if true then return a > b end\n",
        );
    let (host, port) = other
        .addr()
        .rsplit_once(':')
        .map(|(h, p)| (h.to_owned(), p.to_owned()))
        .unwrap();
    let loaded = tokio::process::Command::new("redis-cli")
        .args(["-e", "-h", &host, "-p", &port, "FUNCTION", "LOAD", &old])
        .output()
        .await
        .expect("redis-cli");
    assert!(loaded.status.success(), "{loaded:?}");
    let url = format!("redis://{}/", other.addr());
    red(
        &run(&["fence", "verify", &url]).await,
        "tokens_in_any_text_form",
    );
}

/// `zkfence fence verify s3://…` against moto, its client configured from the AWS environment.
async fn verify_s3(s3: &LocalS3) -> (Option<i32>, String, String) {
    s3.create_bucket("verify", false).unwrap();
    let mut command = zkfence(&["fence", "verify", "s3://verify/checks"]);
    command
        .env("AWS_ENDPOINT", s3.endpoint())
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "zkfence")
        .env("AWS_SECRET_ACCESS_KEY", "zkfence");
    run_with(command).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_store_that_ignores_conditional_writes_verifies_red() {
    let enforcing = tokio::task::spawn_blocking(|| LocalS3::start(Preconditions::Enforced))
        .await
        .unwrap()
        .unwrap();
    green(&verify_s3(&enforcing).await);
    let ignoring = tokio::task::spawn_blocking(|| LocalS3::start(Preconditions::Ignored))
        .await
        .unwrap()
        .unwrap();
    red(&verify_s3(&ignoring).await, "preconditions_enforced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_verifies_green() {
    let hosts = chroot(shared(), "cli-verify").await;
    let (servers, root) = hosts.split_at(hosts.find('/').unwrap());
    let url = format!("zk://{servers}{root}/fences");
    green(&run(&["fence", "verify", &url]).await);
}
