//! A service in Python (`examples/python/fenced_service.py`: psycopg, PyMySQL, redis-py, boto3,
//! from PyPI in the test kit's environment) under `zkfence run`, writing to PostgreSQL,
//! MariaDB, Redis and an S3-compatible store with only the documented protocol. Its holder is
//! frozen past its session timeout (the supervisor and the service both), a successor writes
//! to every store, and the frozen service, let go, writes late: every store refuses it with its
//! own error, and no store holds a stale write.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio_postgres::NoTls;
use zkfence_harness::{chroot, connect, shared, shared_mariadb, wait_until};
use zkfence_harness::{python_clients, LocalRedis, LocalS3, Preconditions};

use common::{postgres_database, Database, BIN};

const LOCK: &str = "/locks/python";

/// The service's source.
fn service() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python/fenced_service.py")
}

/// This binary's Redis and S3 servers.
fn servers() -> &'static (LocalRedis, LocalS3) {
    static SERVERS: OnceLock<(LocalRedis, LocalS3)> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let redis = LocalRedis::start().unwrap_or_else(|e| panic!("{e}"));
        let s3 = LocalS3::start(Preconditions::Enforced).unwrap_or_else(|e| panic!("{e}"));
        s3.create_bucket("python", false)
            .unwrap_or_else(|e| panic!("{e}"));
        (redis, s3)
    })
}

/// The four stores, each with its fence installed (by `zkfence fence install`) and an
/// `example` table or key; the service's environment for them.
async fn stores() -> Vec<(String, String)> {
    let name = format!("python_{}", std::process::id());
    // PostgreSQL: a database of the test's own.
    let Database {
        conninfo: pg,
        client,
        ..
    } = postgres_database(&name).await;
    zkfence_postgres::PostgresFence::new()
        .install(&client)
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TABLE example (seq bigserial PRIMARY KEY, scope text, token bigint, value text)",
        )
        .await
        .unwrap();
    // MariaDB: a database of the test's own.
    let root = tokio::task::spawn_blocking(shared_mariadb).await.unwrap();
    let mysql_url = root.replace("/mysql", &format!("/{name}"));
    {
        use mysql_async::prelude::Queryable;
        let opts = mysql_async::Opts::from_url(root).unwrap();
        let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        conn.query_drop(format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        conn.query_drop(format!("USE {name}")).await.unwrap();
        zkfence_mysql::MySqlFence::new()
            .install(&mut conn)
            .await
            .unwrap();
        conn.query_drop(
            "CREATE TABLE example (seq BIGINT AUTO_INCREMENT PRIMARY KEY, scope VARCHAR(200), token BIGINT, value VARCHAR(200))",
        )
        .await
        .unwrap();
    }
    let mysql = mysql_url.rsplit_once('@').unwrap().1.to_owned();
    let (redis, s3) = tokio::task::spawn_blocking(servers).await.unwrap();
    let redis_url = format!("redis://{}/", redis.addr());
    let (code, out, err) = common::run(&["fence", "install", &redis_url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    vec![
        ("ZKFENCE_EXAMPLE_POSTGRES".into(), pg),
        ("ZKFENCE_EXAMPLE_MYSQL".into(), mysql),
        ("ZKFENCE_EXAMPLE_REDIS".into(), redis_url),
        (
            "ZKFENCE_EXAMPLE_S3".into(),
            format!("{}/python", s3.endpoint()),
        ),
        ("AWS_ACCESS_KEY_ID".into(), "zkfence".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "zkfence".into()),
        ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
    ]
}

/// `zkfence run` of the service on `hosts`, its stdout piped.
fn holder(hosts: &str, python: &PathBuf, env: &[(String, String)], pause: bool) -> Child {
    let mut command = tokio::process::Command::new(BIN);
    command
        .args([
            "run",
            "--connect",
            hosts,
            "--lock",
            LOCK,
            "--session-timeout",
            "2s",
            "--",
        ])
        .arg(python)
        .arg(service())
        .envs(env.iter().cloned())
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if pause {
        command.env("ZKFENCE_EXAMPLE_PAUSE", "1");
    }
    command.spawn().expect("zkfence run")
}

/// The service's lines until one `until` accepts (up to 60 s), each echoed.
async fn lines_until(
    out: &mut tokio::io::Lines<BufReader<ChildStdout>>,
    until: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let line = tokio::time::timeout_at(deadline, out.next_line())
            .await
            .unwrap_or_else(|_| panic!("no line of the service's within 60 s after {seen:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the service ended after {seen:?}"));
        eprintln!("service: {line}");
        let done = until(&line);
        seen.push(line);
        if done {
            return seen;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_python_service_is_refused_by_every_store_after_its_successor_wrote() {
    let python = tokio::task::spawn_blocking(python_clients)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
    let hosts = chroot(shared(), "cli-python").await;
    let env = stores().await;
    let observer = connect(&hosts, Duration::from_secs(10)).await;

    // The first holder writes once to every store, then stops itself (SIGSTOP) in its critical
    // section; its supervisor is frozen too, so that nothing keeps its session alive.
    let mut first = holder(&hosts, &python, &env, true);
    let supervisor = first.id().unwrap();
    let mut out = BufReader::new(first.stdout.take().unwrap()).lines();
    let wrote = lines_until(&mut out, |l| l.starts_with("paused ")).await;
    assert_eq!(
        wrote.iter().filter(|l| l.starts_with("wrote")).count(),
        4,
        "{wrote:?}"
    );
    let service_pid: i32 = wrote.last().unwrap()["paused ".len()..].parse().unwrap();
    unsafe { libc::kill(supervisor as i32, libc::SIGSTOP) };
    // Until the server expired the frozen holder's session: its lock node is gone.
    wait_until(
        Duration::from_secs(30),
        "the frozen holder's session expired",
        || {
            let observer = observer.clone();
            async move { matches!(observer.list_children(LOCK).await, Ok(c) if c.is_empty()) }
        },
    )
    .await;

    // The successor writes to every store, twice, and releases.
    let mut second = holder(&hosts, &python, &env, false);
    let mut second_out = BufReader::new(second.stdout.take().unwrap()).lines();
    let mut wrote = Vec::new();
    while let Some(line) = second_out.next_line().await.unwrap() {
        wrote.push(line);
    }
    let status = second.wait().await.unwrap();
    assert!(status.success(), "the successor: {status:?} {wrote:?}");
    assert_eq!(
        wrote.iter().filter(|l| l.starts_with("wrote")).count(),
        8,
        "{wrote:?}"
    );

    // The frozen service goes on: its late writes, each refused by the store.
    unsafe { libc::kill(service_pid, libc::SIGCONT) };
    let mut refused = Vec::new();
    while refused.len() < 4 {
        let lines = lines_until(&mut out, |l| {
            l.starts_with("refused") || l.starts_with("wrote")
        })
        .await;
        let last = lines.last().cloned().unwrap_or_default();
        assert!(
            last.starts_with("refused"),
            "a late write was accepted: {last}"
        );
        refused.push(last);
    }
    for (store, error) in [
        ("postgres", "ZF001"),
        ("mysql", "ZF001"),
        ("redis", "ZF001"),
        ("s3", "holds token"),
    ] {
        let line = refused
            .iter()
            .find(|l| l.starts_with(&format!("refused {store} ")));
        assert!(
            line.is_some_and(|l| l.contains(error)),
            "{store}: {refused:?}"
        );
    }
    // Its supervisor, let go, finds the lock lost.
    unsafe { libc::kill(supervisor as i32, libc::SIGCONT) };
    let status = tokio::time::timeout(Duration::from_secs(30), first.wait())
        .await
        .expect("the first supervisor ends")
        .unwrap();
    assert_eq!(status.code(), Some(76), "the lock was lost under it");
    check_stores(&env).await;
}

/// Every store holds the successor's writes after the first holder's first, and not the first
/// holder's late one: tokens never go down in its order of writes.
async fn check_stores(env: &[(String, String)]) {
    let var = |name: &str| env.iter().find(|(k, _)| k == name).unwrap().1.clone();
    let mut written: Vec<(&str, Vec<String>)> = Vec::new();
    let (client, connection) = tokio_postgres::connect(&var("ZKFENCE_EXAMPLE_POSTGRES"), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let rows = client
        .query("SELECT value FROM example ORDER BY seq", &[])
        .await
        .unwrap();
    written.push(("postgres", rows.iter().map(|r| r.get(0)).collect()));
    {
        use mysql_async::prelude::Queryable;
        let root = tokio::task::spawn_blocking(shared_mariadb).await.unwrap();
        let database = var("ZKFENCE_EXAMPLE_MYSQL")
            .rsplit_once('/')
            .unwrap()
            .1
            .to_owned();
        let url = root.replace("/mysql", &format!("/{database}"));
        let opts = mysql_async::Opts::from_url(&url).unwrap();
        let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await.unwrap();
        let values: Vec<String> = conn
            .query("SELECT value FROM example ORDER BY seq")
            .await
            .unwrap();
        written.push(("mysql", values));
    }
    let redis = redis::Client::open(var("ZKFENCE_EXAMPLE_REDIS")).unwrap();
    let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
    let values: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("{{{LOCK}}}:example"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    written.push(("redis", values));
    for (store, values) in &written {
        assert_eq!(values.len(), 3, "{store}: {values:?}");
        assert!(values[0].starts_with("first "), "{store}: {values:?}");
        let tokens: Vec<i64> = (values.iter())
            .map(|v| v.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(
            tokens.windows(2).all(|w| w[0] <= w[1]),
            "{store}: {values:?}"
        );
        assert!(
            tokens[0] < tokens[2],
            "{store}: the successor's token is greater"
        );
    }
    // The object holds the successor's last write.
    let object = zkfence_object_store::ObjectFence::new(s3_client());
    let snapshot = object.read(&format!("example{LOCK}").into()).await.unwrap();
    let payload = String::from_utf8_lossy(snapshot.payload().unwrap()).into_owned();
    let postgres_last = &written[0].1[2];
    assert_eq!(
        &payload, postgres_last,
        "the object holds the successor's late write"
    );
}

/// An S3 client of this binary's moto's bucket.
fn s3_client() -> std::sync::Arc<dyn object_store::ObjectStore> {
    zkfence_harness::s3_client(&servers().1.endpoint(), "python", 10).unwrap()
}
