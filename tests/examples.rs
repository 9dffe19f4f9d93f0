//! The examples in `examples/` run end to end against real servers: `cargo test` builds them,
//! and each test runs one binary with the shared ZooKeeper (and, for the store example, a
//! PostgreSQL of its own) and checks its verdict line and exit status.

use std::path::PathBuf;
use std::process::Command;

use zkfence_harness::{chroot, shared};

/// `target/<profile>/examples/<name>`, beside this test binary's `deps/` folder.
fn example(name: &str) -> Command {
    let deps = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(PathBuf::from))
        .expect("the test binary's folder");
    let path = deps.with_file_name("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples; run it rather than one test target",
        path.display()
    );
    Command::new(path)
}

/// Runs `name` against a fresh chroot and returns its stdout, failing with its output when it
/// does not exit 0 or print `<name>: ok`.
async fn run_example(name: &str, env: &[(&str, String)]) -> String {
    let hosts = chroot(shared(), name).await;
    let mut cmd = example(name);
    cmd.env("ZKFENCE_CONNECT", &hosts);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let output = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("the example starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(&format!("{name}: ok")),
        "{name} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_section_is_cancelled_when_its_node_goes() {
    let out = run_example("critical_section", &[]).await;
    assert!(out.contains("section cancelled"), "{out}");
    assert!(!out.contains("never prints"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_readers_share_and_the_writer_waits() {
    let out = run_example("rwlock", &[]).await;
    assert!(out.contains("the writer waits"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_runs_on_an_open_server_without_credentials() {
    let out = run_example("secured", &[]).await;
    assert!(out.contains("holding"), "{out}");
}

/// Fenced writes against a real PostgreSQL (started here, as the chaos suite does): the
/// current holder's writes land, a stale token's write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_postgres_refuses_the_stale_write() {
    let logs = std::env::temp_dir();
    let pg = tokio::task::spawn_blocking(move || zkfence_harness::LocalPostgres::start(&logs))
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{err}"));
    let out = run_example(
        "fenced_postgres",
        &[("DATABASE_URL", pg.conninfo("postgres"))],
    )
    .await;
    assert_eq!(out.matches("increment accepted").count(), 3, "{out}");
    assert!(out.contains("refused by the store"), "{out}");
}

/// The singleton worker: four terms by two candidates, each with three fenced steps under a
/// greater epoch, then the first leader's late write refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singleton_leaders_take_turns_and_a_deposed_leaders_write_is_refused() {
    let logs = std::env::temp_dir();
    let pg = tokio::task::spawn_blocking(move || zkfence_harness::LocalPostgres::start(&logs))
        .await
        .unwrap()
        .unwrap_or_else(|err| panic!("{err}"));
    let out = run_example("singleton", &[("DATABASE_URL", pg.conninfo("postgres"))]).await;
    assert_eq!(out.matches("step accepted").count(), 12, "{out}");
    assert!(out.contains("refused by the store"), "{out}");
    assert!(out.contains("observer: epoch"), "{out}");
}
