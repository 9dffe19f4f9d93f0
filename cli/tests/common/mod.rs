//! What the CLI's test files share: the `zkfence` binary under test, run without a
//! `ZKFENCE_CONNECT` of the environment, and its exit code and output; `zkfence run` with a
//! shell command that reports when it started.
#![allow(dead_code)] // each test file uses its own part

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use zkfence_harness::wait_until;

/// The `zkfence` binary this build made.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_zkfence");

/// `zkfence args`, quiet (no logs) and deaf to a `ZKFENCE_CONNECT` of the environment.
pub(crate) fn zkfence(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("ZKFENCE_CONNECT");
    command
}

/// Runs `zkfence args` off the async runtime and returns (exit code, stdout, stderr).
pub(crate) async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    run_with(zkfence(args)).await
}

/// Runs `zkfence` with `line` split at whitespace.
pub(crate) async fn run_line(line: &str) -> (Option<i32>, String, String) {
    run(&line.split_whitespace().collect::<Vec<_>>()).await
}

/// Runs `command` off the async runtime and returns (exit code, stdout, stderr).
pub(crate) async fn run_with(command: Command) -> (Option<i32>, String, String) {
    zkfence_harness::output(command).await
}

/// An output's (stdout, stderr) as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    zkfence_harness::text(output)
}

/// A live process of a group, as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Member {
    pub(crate) pid: i32,
    pub(crate) parent: i32,
    /// Its state letter (`T` when stopped).
    pub(crate) state: char,
}

/// The processes of group `pgid` that are alive (zombies, already dead, left out).
pub(crate) fn group(pgid: i32) -> Vec<Member> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        // After the name: state, parent, process group.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(Ok(parent)), Some(group)) = (
            fields.first().and_then(|s| s.chars().next()),
            fields.get(1).map(|p| p.parse()),
            fields.get(2),
        ) else {
            continue;
        };
        if state != 'Z' && *group == pgid.to_string() {
            members.push(Member { pid, parent, state });
        }
    }
    members
}

/// The pids of the processes of group `pgid` that are alive.
pub(crate) fn alive_in_group(pgid: i32) -> Vec<i32> {
    group(pgid).iter().map(|m| m.pid).collect()
}

/// A fresh directory for one test, named after the test file (`cli-<name>-<pid>`).
pub(crate) fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{}-{name}-{}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `zkfence run --connect hosts --lock /locks/cli <rest>`.
pub(crate) fn run_on(hosts: &str, rest: &[&str]) -> Command {
    let mut args = vec!["run", "--connect", hosts, "--lock", "/locks/cli"];
    args.extend_from_slice(rest);
    zkfence(&args)
}

/// `zkfence run --connect hosts --lock /locks/cli <extra> -- sh -c script`, with `$DIR` set.
pub(crate) fn run_sh(
    hosts: &str,
    extra: &[&str],
    script: &str,
    dir: &std::path::Path,
) -> std::process::Child {
    let mut rest = extra.to_vec();
    rest.extend_from_slice(&["--", "sh", "-c", script]);
    run_on(hosts, &rest)
        .env("DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A command that says it is ready, then exits 0 once `$DIR/go` exists.
pub(crate) const EXIT_0_ON_GO: &str = r#"echo ready > "$DIR/ready"
    while [ ! -e "$DIR/go" ]; do sleep 0.02; done
    exit 0"#;

/// Tells an [`EXIT_0_ON_GO`] command to exit, and waits for zkfence's exit.
pub(crate) async fn go(dir: &std::path::Path, child: std::process::Child) -> Output {
    std::fs::write(dir.join("go"), "").unwrap();
    exited(child).await
}

/// Waits (off the runtime's threads) for a zkfence started with piped output to exit.
pub(crate) async fn exited(child: std::process::Child) -> Output {
    tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

/// Waits until the command has written `$DIR/ready`.
pub(crate) async fn started(dir: &std::path::Path) {
    wait_until(Duration::from_secs(20), "the command to start", || async {
        dir.join("ready").exists()
    })
    .await;
}

/// A PostgreSQL database of one test's own on the test binary's shared server.
pub(crate) struct Database {
    /// Its libpq conninfo (`host=… dbname=<db>`).
    pub(crate) conninfo: String,
    /// Its `postgresql://` URL, as users give it to `zkfence fence`.
    pub(crate) url: String,
    /// A client of it.
    pub(crate) client: tokio_postgres::Client,
}

/// Creates the database `db` on the shared PostgreSQL server.
pub(crate) async fn postgres_database(db: &str) -> Database {
    let server = tokio::task::spawn_blocking(zkfence_harness::shared_postgres)
        .await
        .unwrap();
    let (admin, connection) = tokio_postgres::connect(server, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    (admin.batch_execute(&format!("CREATE DATABASE {db}")).await).unwrap();
    let conninfo = server.replace("dbname=postgres", &format!("dbname={db}"));
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let get = |key: &str| {
        (conninfo.split_whitespace())
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    let url = format!(
        "postgresql://{}@{}:{}/{db}",
        get("user"),
        get("host"),
        get("port")
    );
    Database {
        conninfo,
        url,
        client,
    }
}
