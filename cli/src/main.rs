//! `zkfence`: run a command under a fenced ZooKeeper lock, inspect a lock's queue, and see the
//! whole idea work in one command (`zkfence demo`).

mod bench;
mod demo;
mod holders;
mod run;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use zookeeper_client as zk;

/// Bad input: an invalid lock path, an unusable duration, a command that is missing.
pub(crate) const EXIT_USAGE: u8 = 64;
/// ZooKeeper could not be reached, or the session ended before the lock was acquired.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Any other failure (ACL denied, an unexpected ZooKeeper error).
pub(crate) const EXIT_FAILURE: u8 = 70;
/// `--timeout` passed before the lock was acquired; nothing was run and no node is left.
pub(crate) const EXIT_TIMEOUT: u8 = 75;
/// The lock was lost while the command ran: the command was stopped (SIGTERM, then SIGKILL).
pub(crate) const EXIT_LOCK_LOST: u8 = 76;
/// The command could not be started (not found, not executable).
pub(crate) const EXIT_CANNOT_RUN: u8 = 127;

const EXIT_CODES: &str = "\
Exit codes:
  N    run: the command's own exit code (128+signal if a signal ended it)
  2    command line syntax error
  64   bad input: invalid lock path, unusable duration
  69   ZooKeeper unreachable, or the session ended before the lock was acquired
  70   other failures (e.g. ACL denied)
  75   run --timeout passed before the lock was acquired (nothing ran, no node left)
  76   the lock was lost while the command ran; the command was stopped
  127  the command could not be started

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=zkfence=debug) for more.";

#[derive(Parser, Debug)]
#[command(
    name = "zkfence",
    version,
    about = "Fenced distributed locks on Apache ZooKeeper",
    long_about = "Fenced distributed locks on Apache ZooKeeper.\n\n\
        A lock's holder gets a fencing token that strictly increases from holder to holder; \
        pass it to your storage so that it refuses a stalled holder's late writes. A lease \
        watchdog stops the holder's work as soon as the lock may be lost.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a command while holding a lock; stop it if the lock is lost.
    Run(run::Args),
    /// Show a lock's queue: holder first, then waiters.
    Holders(holders::Args),
    /// Show, step by step, a stalled holder's late write refused thanks to the fencing token.
    Demo(demo::Args),
    /// Measure acquire/release cycles and handoffs against zookeeper-client's lock and raw ZooKeeper.
    Bench(bench::Args),
    /// One worker process of the demo (run by `zkfence demo`).
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
}

/// `zookeeper-client` 0.11 unwraps a closed watch channel (`session/watch.rs`) when a client
/// goes away under a watch; zkfence's watchdog catches that panic, but the default hook would
/// still print it. Keep stderr to messages that mean something to the user.
fn quiet_caught_upstream_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let upstream = info.location().is_some_and(|l| {
            l.file().contains("zookeeper-client") && l.file().ends_with("watch.rs")
        });
        if !upstream {
            default(info);
        }
    }));
}

fn main() -> ExitCode {
    quiet_caught_upstream_panics();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zkfence: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Run(args) => run::run(args).await,
            Command::Holders(args) => holders::holders(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::Bench(args) => bench::bench(args).await,
            Command::DemoWorker(args) => demo::worker(args).await,
        }
    });
    ExitCode::from(code)
}

/// Parses `500ms`, `2s`, `1.5s`, `3m`, `1h`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write it like 2s or 500ms"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        "" => return Err(format!("{text:?} has no unit; write it like 2s or 500ms")),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?}; use ms, s, m or h"
            ))
        }
    };
    if !seconds.is_finite() || !(0.0..=1e9).contains(&seconds) {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Connects, failing with one clear line (and [`EXIT_UNAVAILABLE`]) when nobody answers.
pub(crate) async fn connect(hosts: &str, session_timeout: Duration) -> Result<zk::Client, u8> {
    let attempt = zk::Client::connector()
        .with_session_timeout(session_timeout)
        .with_fail_eagerly()
        .connect(hosts);
    match tokio::time::timeout(session_timeout.max(Duration::from_secs(5)), attempt).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => {
            eprintln!("zkfence: cannot reach ZooKeeper at {hosts}: {err}; check --connect and that the servers are up");
            Err(EXIT_UNAVAILABLE)
        }
        Err(_) => {
            eprintln!("zkfence: cannot reach ZooKeeper at {hosts}: no session within {session_timeout:?}; check --connect and that the servers are up");
            Err(EXIT_UNAVAILABLE)
        }
    }
}

/// Starts a throwaway local ZooKeeper (Debian's package), or says why not on one line.
pub(crate) async fn start_local_zookeeper() -> Result<zkfence_testkit::LocalZooKeeper, u8> {
    let started = match tokio::task::spawn_blocking(zkfence_testkit::LocalZooKeeper::start).await {
        Ok(started) => started.map_err(|err| (err.to_string(), EXIT_UNAVAILABLE)),
        Err(err) => Err((err.to_string(), EXIT_FAILURE)),
    };
    started.map_err(|(message, code)| {
        eprintln!("zkfence: {message}");
        code
    })
}

/// The exit code for a library error, after printing it on one line.
pub(crate) fn fail(context: &str, err: &zkfence::Error) -> u8 {
    eprintln!("zkfence: {context}: {err}");
    match err {
        zkfence::Error::InvalidPath { .. } | zkfence::Error::InvalidOptions(_) => EXIT_USAGE,
        e if e.is_session_terminal() => EXIT_UNAVAILABLE,
        _ => EXIT_FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert!(parse_duration("2").unwrap_err().contains("no unit"));
        assert!(parse_duration("2d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("fast").is_err());
    }
}
