//! What the bench's test files share: the `zkfence-bench` binary this build made, quiet, and
//! its exit code and output.
#![allow(dead_code, unused_imports)] // each test file uses its own part

use std::process::Command;

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

pub(crate) use zkfence_harness::{output as run_with, text};
