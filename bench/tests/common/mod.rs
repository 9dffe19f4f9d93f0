//! What the bench's test files share: the `zkfence-bench` binary this build made, quiet, and
//! its exit code and output.
#![allow(dead_code)] // each test file uses its own part

use std::process::{Command, Output};

/// `zkfence-bench args`, with no logs.
pub(crate) fn bench(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zkfence-bench"));
    command.args(args).env("RUST_LOG", "off");
    command
}

/// Runs `zkfence-bench args` off the async runtime: (exit code, stdout, stderr).
pub(crate) async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    run_with(bench(args)).await
}

/// Runs `command` off the async runtime: (exit code, stdout, stderr).
pub(crate) async fn run_with(mut command: Command) -> (Option<i32>, String, String) {
    let output = tokio::task::spawn_blocking(move || command.output())
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
