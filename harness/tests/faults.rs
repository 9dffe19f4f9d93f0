//! The store faults the chaos suite injects, on real PostgreSQL, MariaDB, Redis and ZooKeeper
//! servers, checked from outside with Debian's `psql`, `mariadb`, `redis-cli` and `zkCli.sh`: a
//! paused server answers nothing until resumed; a server killed with `kill -9` comes back on
//! its data, with what was committed and without what was not.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use zkfence_harness::{LocalPostgres, StoreFaults, POSTGRES_USER};

/// `psql` on `pg`'s database `postgres`, with `sql` on its command line.
fn psql(pg: &LocalPostgres, sql: &str) -> Command {
    let mut cmd = Command::new(psql_path());
    cmd.args([
        "-X",
        "-q",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        "127.0.0.1",
    ])
    .args([
        "-p",
        &pg.port().to_string(),
        "-U",
        POSTGRES_USER,
        "-d",
        "postgres",
    ])
    .args(["-c", sql])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

/// Debian's newest `psql`.
fn psql_path() -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("Debian's postgresql package")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/psql")))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().expect("a psql under /usr/lib/postgresql")
}

fn run(pg: &LocalPostgres, sql: &str) -> String {
    let out: Output = psql(pg, sql).output().unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Waits up to `within` for `child` to exit.
fn exited(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Pauses `store`, sends `query` and sees no answer for 2 s; resumes it and sees the answer.
fn answers_only_once_resumed(store: &dyn StoreFaults, mut query: Command) {
    store.pause();
    let mut query = query.spawn().unwrap();
    assert!(
        exited(&mut query, Duration::from_secs(2)).is_none(),
        "a paused server answered"
    );
    store.resume();
    let answered = exited(&mut query, Duration::from_secs(10)).expect("no answer after resume");
    assert!(answered.success());
}

#[test]
fn a_paused_server_answers_once_resumed_and_a_crashed_one_keeps_only_what_committed() {
    let logs = zkfence_testkit::temp_dir("harness-faults").unwrap();
    let mut pg = LocalPostgres::start(&logs).unwrap();
    run(&pg, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)");

    answers_only_once_resumed(&pg, psql(&pg, "SELECT count(*) FROM t"));

    // A transaction left open, then kill -9: its row is gone, the committed one stays, and
    // its client hears the connection die.
    let mut open = psql(&pg, "BEGIN; INSERT INTO t VALUES (2); SELECT pg_sleep(60)")
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while run(&pg, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(60)%' AND pid <> pg_backend_pid()") != "1" {
        assert!(Instant::now() < deadline, "the open transaction never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    pg.crash_and_restart().unwrap();
    let status = exited(&mut open, Duration::from_secs(10)).expect("its client never heard");
    assert!(
        !status.success(),
        "the killed transaction's client succeeded"
    );
    assert_eq!(run(&pg, "SELECT string_agg(x::text, ',') FROM t"), "1");
    // And the restarted server takes writes again.
    run(&pg, "INSERT INTO t VALUES (3)");
    assert_eq!(run(&pg, "SELECT count(*) FROM t"), "2");
    drop(pg);
    let _ = std::fs::remove_dir_all(&logs);
}

/// `mariadb` on `db`'s server, with `sql` on its command line.
fn mariadb(db: &zkfence_harness::LocalMariaDb, sql: &str) -> Command {
    let mut cmd = Command::new("mariadb");
    cmd.args([
        "--protocol=tcp",
        "-h",
        "127.0.0.1",
        "-u",
        "root",
        "-N",
        "-B",
    ])
    .arg(format!("--port={}", db.port()))
    .args(["-e", sql])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    cmd
}

fn run_mariadb(db: &zkfence_harness::LocalMariaDb, sql: &str) -> String {
    let out = mariadb(db, sql).output().unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_paused_mariadb_answers_once_resumed_and_a_crashed_one_keeps_only_what_committed() {
    let logs = zkfence_testkit::temp_dir("harness-faults").unwrap();
    let mut db = zkfence_harness::LocalMariaDb::start(&logs).unwrap();
    run_mariadb(
        &db,
        "CREATE DATABASE f; CREATE TABLE f.t (x INT) ENGINE = InnoDB; INSERT INTO f.t VALUES (1)",
    );

    answers_only_once_resumed(&db, mariadb(&db, "SELECT COUNT(*) FROM f.t"));

    let mut open = mariadb(
        &db,
        "START TRANSACTION; INSERT INTO f.t VALUES (2); SELECT SLEEP(60)",
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while run_mariadb(
        &db,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(60)'",
    ) != "1"
    {
        assert!(Instant::now() < deadline, "the open transaction never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    db.crash_and_restart().unwrap();
    let status = exited(&mut open, Duration::from_secs(10)).expect("its client never heard");
    assert!(
        !status.success(),
        "the killed transaction's client succeeded"
    );
    assert_eq!(run_mariadb(&db, "SELECT GROUP_CONCAT(x) FROM f.t"), "1");
    run_mariadb(&db, "INSERT INTO f.t VALUES (3)");
    assert_eq!(run_mariadb(&db, "SELECT COUNT(*) FROM f.t"), "2");
    drop(db);
    let _ = std::fs::remove_dir_all(&logs);
}

/// `redis-cli` on `redis`, with `args`.
fn redis_cli(redis: &zkfence_harness::LocalRedis, args: &[&str]) -> Command {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &redis.port().to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run_redis(redis: &zkfence_harness::LocalRedis, args: &[&str]) -> String {
    let out = redis_cli(redis, args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_paused_redis_answers_once_resumed_and_a_durable_one_keeps_what_it_acknowledged() {
    let mut redis = zkfence_harness::LocalRedis::start_durable().unwrap();
    assert_eq!(run_redis(&redis, &["RPUSH", "log", "a", "b"]), "2");

    answers_only_once_resumed(&redis, redis_cli(&redis, &["LLEN", "log"]));

    redis.crash_and_restart().unwrap();
    assert_eq!(run_redis(&redis, &["LRANGE", "log", "0", "-1"]), "a\nb");

    // Without the append-only file, a crash loses everything: what a fence on such a server
    // is worth after a restart.
    let mut volatile = zkfence_harness::LocalRedis::start().unwrap();
    run_redis(&volatile, &["SET", "fence", "7"]);
    volatile.crash_and_restart().unwrap();
    assert_eq!(run_redis(&volatile, &["EXISTS", "fence"]), "0");
}

/// Debian's `zkCli.sh` on `zk`, running one command.
fn zk_cli(zk: &zkfence_testkit::LocalZooKeeper, args: &[&str]) -> Command {
    let mut cmd = Command::new("/usr/share/zookeeper/bin/zkCli.sh");
    cmd.args(["-server", &zk.addr()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run_zk(zk: &zkfence_testkit::LocalZooKeeper, args: &[&str]) -> String {
    let out = zk_cli(zk, args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ZooKeeper fence's store: a standalone server, paused and crashed as the others are.
#[test]
fn a_paused_zookeeper_answers_once_resumed_and_a_crashed_one_keeps_what_it_committed() {
    let mut zk = zkfence_testkit::LocalZooKeeper::start().unwrap();
    run_zk(&zk, &["create", "/log", "written-before-the-crash"]);

    answers_only_once_resumed(&zk, zk_cli(&zk, &["get", "/log"]));

    zk.crash_and_restart().unwrap();
    let read = run_zk(&zk, &["get", "/log"]);
    assert!(
        read.lines()
            .any(|line| line.trim() == "written-before-the-crash"),
        "the committed node is gone after the restart:\n{read}"
    );
}

/// The object store's server (moto): paused and resumed as the others, asked from Python's
/// own HTTP client. It keeps its objects in memory, so it refuses a restart (which would lose
/// every one) and serves on.
#[test]
fn a_paused_s3_server_answers_once_resumed_and_refuses_a_restart() {
    use zkfence_harness::{LocalS3, Preconditions};
    let mut s3 = LocalS3::start(Preconditions::Enforced).unwrap();
    s3.create_bucket("faults", false).unwrap();
    // Any HTTP answer will do (an unsigned request may be refused): the server answered.
    let get = "import sys, urllib.request, urllib.error\n\
               try:\n    urllib.request.urlopen(sys.argv[1], timeout=30).read()\n\
               except urllib.error.HTTPError:\n    pass";
    let python = |url: String| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", get, &url]).stdout(Stdio::null());
        cmd
    };
    answers_only_once_resumed(&s3, python(s3.endpoint()));

    let refused = s3.crash_and_restart().unwrap_err();
    assert!(refused.contains("in memory"), "{refused}");
    let mut after = python(format!("{}/faults", s3.endpoint())).spawn().unwrap();
    let status =
        exited(&mut after, Duration::from_secs(10)).expect("no answer after the refused restart");
    assert!(status.success());
}
