//! What `cli.rs` and `secured.rs` share: the `zkfence` binary under test, run without a
//! `ZKFENCE_CONNECT` of the environment, and its exit code and output.

use std::process::{Command, Output};

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
pub(crate) async fn run_with(mut command: Command) -> (Option<i32>, String, String) {
    let output: Output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let (stdout, stderr) = text(&output);
    (output.status.code(), stdout, stderr)
}

/// An output's (stdout, stderr) as text.
pub(crate) fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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
