//! `zkfence`: run a command under a fenced ZooKeeper lock, inspect a lock's queue, and see the
//! whole idea work in one command (`zkfence demo`).

mod connect;
#[cfg(feature = "demo")]
mod demo;
mod duration;
mod elect;
mod exit;
mod fence;
mod holders;
mod json;
mod lifeline;
mod revoke;
mod run;
mod supervise;
mod terminal;

use std::process::ExitCode;

use std::io::IsTerminal as _;

use clap::{CommandFactory as _, Parser, Subcommand};

use crate::exit::{EXIT_CODES, EXIT_FAILURE, EXIT_USAGE};

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
    /// Run a command while this process leads an election; campaign again when it loses.
    Elect(elect::Args),
    /// Show a lock's queue: holder first, then waiters.
    Holders(holders::Args),
    /// Ask a lock's holder to let go (Curator's revocation), or take the lock (--force).
    Revoke(revoke::Args),
    /// Every store's fence, by its URL (postgresql, mysql, redis, s3, zk): install it, print
    /// what other languages need, show and rebase fences, verify a deployment.
    Fence(fence::Args),
    /// Show, step by step, a stalled holder's late write refused thanks to the fencing token.
    #[cfg(feature = "demo")]
    Demo(demo::Args),
    /// Show, step by step, a stalled holder's late write refused thanks to the fencing token
    /// (this build has no demo: install with `--features demo`).
    #[cfg(not(feature = "demo"))]
    Demo {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
    /// Print a shell completion script, e.g. `zkfence completions bash > /etc/bash_completion.d/zkfence`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// One worker process of the demo (run by `zkfence demo`).
    #[cfg(feature = "demo")]
    #[command(hide = true)]
    DemoWorker(demo::WorkerArgs),
    /// The process that kills a command's group if zkfence dies (started by `run`).
    #[command(hide = true)]
    Lifeline,
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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return parse_error(err),
    };
    // `fence verify` provokes refusals on purpose, and the library warns of each: without
    // RUST_LOG, it logs errors only.
    let default = match &cli.command {
        Command::Fence(args) if args.provokes_refusals() => "error",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    if let Command::Lifeline = cli.command {
        return ExitCode::from(lifeline::main());
    }
    // Two workers are plenty for a lock's supervisor.
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
            Command::Elect(args) => elect::elect(args).await,
            Command::Holders(args) => holders::holders(args).await,
            Command::Revoke(args) => revoke::revoke(args).await,
            Command::Fence(args) => fence::fence(args).await,
            #[cfg(feature = "demo")]
            Command::Demo(args) => demo::demo(args).await,
            #[cfg(feature = "demo")]
            Command::DemoWorker(args) => demo::worker(args).await,
            #[cfg(not(feature = "demo"))]
            Command::Demo { .. } => {
                eprintln!("zkfence: this zkfence was built without the demo feature: cargo install zkfence-cli --features demo (or run scripts/demo in a clone)");
                EXIT_USAGE
            }
            Command::Lifeline => lifeline::main(),
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
