//! `zkfence fence verify` against every store the test kit starts: green (exit 0, every case
//! passed) on a sound deployment, red (exit 1, the failed case named) on one built to fail:
//! an S3 emulator that ignores conditional writes, a MySQL fence installed without the doom
//! of what it refuses (as before this version), a Redis function library without the token's
//! form check (as the published scripts were).

mod common;

use std::io::BufRead as _;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use zkfence::conformance::DEPLOYMENT;
use zkfence_harness::{chroot, connect, shared, shared_mariadb, wait_until};
use zkfence_harness::{LocalRedis, LocalS3, Preconditions};

use common::{exited, postgres_database, run, run_with, zkfence};

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
    // Durable, as deployment_keeps_fences asks (appendonly, fsync on every write).
    let redis = tokio::task::spawn_blocking(LocalRedis::start_durable)
        .await
        .unwrap()
        .unwrap();
    let url = format!("redis://{}/", redis.addr());
    let (code, out, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    green(&run(&["fence", "verify", &url]).await);
    // The library as the published scripts were: the token's text compared as it came.
    let other = tokio::task::spawn_blocking(LocalRedis::start_durable)
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
        // An http:// endpoint works as given: no AWS_ALLOW_HTTP.
        .env("AWS_ENDPOINT", s3.endpoint())
        .env_remove("AWS_ALLOW_HTTP")
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

/// A `zk://` URL of a fence node `/fences` under a chroot of the test's own, and that chroot's
/// hosts string.
async fn zk_url(name: &str) -> (String, String) {
    let hosts = chroot(shared(), name).await;
    let (servers, root) = hosts.split_at(hosts.find('/').unwrap());
    (format!("zk://{servers}{root}/fences"), hosts)
}

/// `zkfence fence show` after `install` and `verify` on `zk://` finds no fence and no node (the
/// run's scratch parent, the fence node itself, is gone again); an empty node is a fence node
/// with no fence yet, and a node of other data is named as such (exit 64), never exit 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_verify_leaves_nothing_and_show_reads_odd_nodes() {
    let (url, hosts) = zk_url("cli-verify-leaves").await;
    let (code, out, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    green(&run(&["fence", "verify", &url]).await);
    let client = connect(&hosts, Duration::from_secs(10)).await;
    assert_eq!(client.check_stat("/fences").await.unwrap(), None);
    let (code, out, err) = run(&["fence", "show", &url]).await;
    assert_eq!((code, out.trim()), (Some(0), "no fence yet"), "{err}");
    // An empty node, as a client that made it a parent leaves it.
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    client.create("/fences", b"", &options).await.unwrap();
    let (code, out, err) = run(&["fence", "show", &url]).await;
    assert_eq!((code, out.trim()), (Some(0), "no fence yet"), "{err}");
    // The first claim sets it.
    let fence = zkfence::fence::ZooKeeperFence::with_fence_node(client.clone(), "/fences").unwrap();
    let ticket = zkfence::conformance::ticket("/locks/empty", 5);
    assert_eq!(fence.claim(&ticket).await.unwrap(), None);
    let (code, out, err) = run(&["fence", "show", "--json", &url]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(r#""scope":"/locks/empty","token":5"#), "{out}");
    client
        .set_data("/fences", b"not a fence", None)
        .await
        .unwrap();
    let (code, _, err) = run(&["fence", "show", &url]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("something else than a fence"), "{err}");
    assert!(err.contains("zk://hosts/path/to/fence-node"), "{err}");
}

/// `--json`: every stdout line is one JSON object; one per case with fixed keys, then one
/// summary; and without RUST_LOG, none of the warnings of the refusals the cases provoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_json_is_objects_only_and_logs_no_expected_refusals() {
    let (url, _) = zk_url("cli-verify-json").await;
    let mut command = zkfence(&["fence", "verify", "--json", &url]);
    command.env_remove("RUST_LOG");
    let (code, out, err) = run_with(command).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!err.contains("WARN"), "{err}");
    assert_eq!(err, "", "nothing on stderr for a green run");
    let objects: Vec<serde_json::Value> = out
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let (summary, cases) = objects.split_last().unwrap();
    assert_eq!(cases.len(), DEPLOYMENT.len());
    for (case, name) in cases.iter().zip(DEPLOYMENT) {
        let keys = keys(case);
        assert_eq!(keys, ["case", "kind", "ms", "verdict", "why"], "{case}");
        assert_eq!(case["kind"], "case");
        assert_eq!(case["case"], name);
        assert_eq!(case["verdict"], "pass");
        assert!(case["ms"].is_u64() && case["why"].is_null(), "{case}");
    }
    assert_eq!(
        keys(summary),
        ["broken", "cases", "exit", "failed", "kind", "passed", "skipped", "verdict", "why"]
    );
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["verdict"], "pass");
    assert_eq!(summary["passed"], DEPLOYMENT.len());
    assert_eq!(summary["exit"], 0);
}

/// An object's keys, sorted.
fn keys(object: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = object
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort_unstable();
    keys
}

/// `zkfence fence verify … | head -1`: the reader goes away after one line; zkfence goes on
/// without a panic and exits with the verdict's status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_into_a_pipe_closed_after_one_line_does_not_panic() {
    let (url, _) = zk_url("cli-verify-pipe").await;
    let mut command = zkfence(&["fence", "verify", &url]);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let first = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        line // the reader, and the pipe's read end, dropped here
    })
    .await
    .unwrap();
    assert!(first.starts_with("CASE"), "{first}");
    let output = exited(child).await;
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(output.status.code(), Some(0), "{err}");
}

/// Every `zkfence fence` command whose stdout is a pipe closed before it writes a byte (the
/// reader gone at once): no panic, the usual status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_commands_into_a_closed_pipe_do_not_panic() {
    let (url, _) = zk_url("cli-verify-closed").await;
    for (args, status) in [
        (&["fence", "verify", &url][..], 0),
        (&["fence", "verify", "--json", &url], 0),
        (&["fence", "show", &url], 0),
        (&["fence", "script", "zk://"], 0),
        (&["fence", "install", "--print", "postgresql://"], 0),
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut command = zkfence(args);
        command.stdout(writer);
        let (code, _, err) = run_with(command).await;
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, Some(status), "{args:?}: {err}");
    }
}

/// The scratch schemas of verify runs in the database at `conninfo`.
async fn scratch_schemas(client: &tokio_postgres::Client) -> Vec<String> {
    let rows = client
        .query(
            "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'zkfence_verify_%'",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// A role without the CREATE privilege on the database: verify cannot make its scratch schema
/// and says so with the server's words, the SQLSTATE and the privilege it needs: exit 77, not
/// 69 ("unreachable"); `install` as that role too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_role_without_create_exits_77_naming_the_privilege() {
    let db = postgres_database(&format!("verify_noperm_{}", std::process::id())).await;
    let role = format!("noperm_{}", std::process::id());
    (db.client)
        .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
        .await
        .unwrap();
    let user = db
        .url
        .split_once("://")
        .unwrap()
        .1
        .split_once('@')
        .unwrap()
        .0;
    let url = db
        .url
        .replacen(&format!("://{user}@"), &format!("://{role}@"), 1);
    let (code, out, err) = run(&["fence", "verify", &url]).await;
    assert_eq!(code, Some(77), "{out}{err}");
    assert!(err.contains("CREATE"), "{err}");
    assert!(err.contains("42501"), "{err}");
    assert!(err.contains("permission denied"), "{err}");
    assert!(!err.contains("db error"), "{err}");
    let (code, _, err) = run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(77), "{err}");
    assert!(err.contains("42501") && !err.contains("db error"), "{err}");
    assert!(scratch_schemas(&db.client).await.is_empty());
}

/// Without the fence installed, verify reports that one failure with the install command, the
/// other cases skipped (not a dozen follow-on failures), and leaves no scratch schema behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_without_the_fence_names_the_install_and_skips_the_rest() {
    let db = postgres_database(&format!("verify_bare_{}", std::process::id())).await;
    let (code, out, err) = run(&["fence", "verify", &db.url]).await;
    assert_eq!(code, Some(1), "{out}{err}");
    red(
        &(code, out.clone(), err.clone()),
        "installed_fence_is_current",
    );
    assert_eq!(out.matches("FAIL").count(), 1, "{out}");
    assert!(!out.contains("BROKEN"), "{out}");
    let skipped = out.lines().filter(|l| l.contains(" skipped ")).count();
    assert_eq!(skipped, DEPLOYMENT.len() - 1, "{out}");
    let install = format!("zkfence fence install {}", db.url);
    assert!(out.contains(&install), "{out}");
    assert!(err.contains(&install), "{err}");
    assert!(scratch_schemas(&db.client).await.is_empty());
}

/// SIGTERM while the cases run: verify stops them, removes its scratch schema and scopes, and
/// exits 143.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_verify_stopped_by_sigterm_removes_its_scratch_schema() {
    let db = postgres_database(&format!("verify_term_{}", std::process::id())).await;
    let (code, out, err) = run(&["fence", "install", &db.url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let mut command = zkfence(&["fence", "verify", &db.url]);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    wait_until(Duration::from_secs(30), "the scratch schema", || async {
        !scratch_schemas(&db.client).await.is_empty()
    })
    .await;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let output = exited(child).await;
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(143), "{err}");
    assert!(err.contains("SIGTERM"), "{err}");
    assert!(scratch_schemas(&db.client).await.is_empty());
    let left = (db.client)
        .query_one(
            "SELECT count(*) FROM zkfence_fence WHERE scope LIKE '/zkfence-verify/%'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(left.get::<_, i64>(0), 0);
}
