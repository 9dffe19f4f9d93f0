//! `zkfence`: run a command under a fenced ZooKeeper lock, inspect a lock's queue, and see the
//! whole idea work in one command (`zkfence demo`).

mod bench;
mod connect;
mod demo;
mod duration;
mod holders;
mod run;
mod terminal;

use std::process::ExitCode;

use std::io::IsTerminal as _;

use clap::{CommandFactory as _, Parser, Subcommand};

pub(crate) use crate::duration::{parse_duration, parse_session_timeout};

/// Bad input: an invalid lock path, an unusable duration or session timeout, unreadable
/// credentials or certificates.
pub(crate) const EXIT_USAGE: u8 = 64;
/// ZooKeeper could not be reached, or the session ended before the lock was acquired.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Any other failure (an unexpected ZooKeeper error, a lock path missing under a chroot).
pub(crate) const EXIT_FAILURE: u8 = 70;
/// ZooKeeper refused us: authentication failed, or an ACL denies what the lock needs.
pub(crate) const EXIT_NO_PERMISSION: u8 = 77;
/// `--timeout` passed before the lock was acquired; nothing was run and no node is left.
pub(crate) const EXIT_TIMEOUT: u8 = 75;
/// The lock was lost while the command ran (the command was stopped: SIGTERM, then SIGKILL),
/// or was found lost, or could not be confirmed held, by the release after the command exited.
pub(crate) const EXIT_LOCK_LOST: u8 = 76;
/// The command was found but could not be executed (permissions, not an executable).
pub(crate) const EXIT_NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub(crate) const EXIT_CANNOT_RUN: u8 = 127;

const EXIT_CODES: &str = "\
Exit codes:
  N    run: the command's own exit code (128+signal if a signal ended it)
  2    command line syntax error (unknown flag, missing argument)
  64   bad input: invalid lock path, unusable duration or session timeout, unreadable
       credentials or certificates
  69   ZooKeeper unreachable within --connect-timeout, or the session ended before the
       lock was acquired
  70   other failures (an unexpected ZooKeeper error, the lock path missing)
  75   run --timeout passed before the lock was acquired (nothing ran, no node left)
  76   the lock was lost while the command ran (the command was stopped), or the release
       after it found the lock lost, failed, or was not confirmed within --release-timeout
  77   permission denied: authentication failed, or an ACL refuses the lock's requests
  126  the command is not executable
  127  the command was not found

Every flag can also be set by a ZKFENCE_* variable (see each flag's help).
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
    /// Print a shell completion script, e.g. `zkfence completions bash > /etc/bash_completion.d/zkfence`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
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
    // Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return parse_error(err),
    };
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
            Command::Completions { shell } => {
                clap_complete::generate(
                    shell,
                    &mut Cli::command(),
                    "zkfence",
                    &mut std::io::stdout(),
                );
                0
            }
        }
    });
    ExitCode::from(code)
}

/// Exits for a command line clap refused: bad values (a duration, a session timeout) are bad
/// input, 64 as the table says; help and version print and exit 0; syntax errors exit 2.
fn parse_error(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let code = match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 2,
        ErrorKind::ValueValidation | ErrorKind::InvalidValue => EXIT_USAGE,
        _ => 2,
    };
    let _ = err.print();
    ExitCode::from(code)
}

/// Starts a throwaway local ZooKeeper (Debian's package) with `start` (one of
/// `LocalZooKeeper`'s starters), or says why not on one line.
pub(crate) async fn start_local_zookeeper(
    start: impl FnOnce() -> Result<zkfence_testkit::LocalZooKeeper, zkfence_testkit::StartError>
        + Send
        + 'static,
) -> Result<zkfence_testkit::LocalZooKeeper, u8> {
    let started = match tokio::task::spawn_blocking(start).await {
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
    match err {
        // The library's advice names its API; a command line user needs the flag.
        zkfence::Error::NoParent { path } => {
            eprintln!("zkfence: {context}: {path} (or a parent, or the chroot in --connect) does not exist; create it first, e.g. with zkCli.sh create");
            return EXIT_FAILURE;
        }
        zkfence::Error::AccessDenied { op, path, .. } => {
            eprintln!("zkfence: {context}: ZooKeeper denied {op} on {path}; authenticate with --auth (or ZKFENCE_AUTH) as an identity the ACL grants read, create and delete");
            return EXIT_NO_PERMISSION;
        }
        _ => eprintln!("zkfence: {context}: {err}"),
    }
    match err {
        zkfence::Error::InvalidPath { .. } | zkfence::Error::InvalidOptions(_) => EXIT_USAGE,
        e if e.is_session_terminal() => EXIT_UNAVAILABLE,
        _ => EXIT_FAILURE,
    }
}
