//! Each run in a process of its own, as users run their services: the bench starts
//! `zkfence-bench run …` (hidden) for every timed run, the child executes it on its own tokio
//! runtime with its own sessions and prints the run's JSON line, and the parent reads it back.
//! No implementation shares a runtime, an allocator or leftover tasks with another, and the
//! client CPU time measured is the child's alone.

use std::time::Duration;

use tokio::io::AsyncReadExt as _;

use crate::options::{Impl, Mode, Run};
use crate::report::Report;

/// The hidden `zkfence-bench run`'s command line: one [`Run`], against `connect`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    #[arg(long)]
    connect: String,
    #[arg(long)]
    lock: String,
    #[arg(long = "impl", value_enum)]
    implementation: Impl,
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long)]
    contenders: usize,
    #[arg(long)]
    seconds: f64,
    #[arg(long)]
    warmup: f64,
    /// The critical section, in microseconds.
    #[arg(long)]
    hold_us: u64,
    #[arg(long)]
    server_pid: Option<i32>,
    #[arg(long)]
    redis: Option<std::net::SocketAddr>,
}

/// `zkfence-bench run`: executes the run and prints its JSON line; the exit code.
pub(crate) async fn run(args: RunArgs) -> u8 {
    let run = Run {
        implementation: args.implementation,
        mode: args.mode,
        contenders: args.contenders,
        seconds: args.seconds,
        warmup: args.warmup,
        hold: Duration::from_micros(args.hold_us),
        server_pid: args.server_pid,
        redis: args.redis,
    };
    match run.execute(&args.connect, &args.lock).await {
        Ok(report) => {
            println!("{}", report.json());
            0
        }
        Err(why) => {
            eprintln!("zkfence-bench run: {why}");
            crate::support::EXIT_FAILURE
        }
    }
}

impl Run {
    /// Executes the run in a child process of its own (see the module's docs).
    pub(crate) async fn execute_apart(self, hosts: &str, base: &str) -> Result<Report, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find zkfence-bench: {e}"))?;
        let mut command = tokio::process::Command::new(exe);
        command
            .args(["run", "--connect", hosts, "--lock", base])
            .args([
                "--impl",
                self.implementation.name(),
                "--mode",
                self.mode.name(),
            ])
            .args(["--contenders", &self.contenders.to_string()])
            .args(["--seconds", &self.seconds.to_string()])
            .args(["--warmup", &self.warmup.to_string()])
            .args(["--hold-us", &self.hold.as_micros().to_string()])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(pid) = self.server_pid {
            command.args(["--server-pid", &pid.to_string()]);
        }
        if let Some(redis) = self.redis {
            command.args(["--redis", &redis.to_string()]);
        }
        crate::support::die_with_bench(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start a run's process: {e}"))?;
        let mut out = String::new();
        if let Some(mut stdout) = child.stdout.take() {
            let _ = stdout.read_to_string(&mut out).await;
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        let line = out.lines().rev().find(|l| l.starts_with('{'));
        match (status.success(), line) {
            (true, Some(line)) => Report::parse(line),
            _ => Err(format!(
                "the {} run's process failed ({status}); its output: {out}",
                self.implementation.name()
            )),
        }
    }
}
