//! `zkfence run`: a command under the lock, stopped when the lock is lost.

use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use zkfence::{FencedLock, LockOptions, LossReason};

use crate::{
    connect, fail, parse_duration, EXIT_CANNOT_RUN, EXIT_LOCK_LOST, EXIT_TIMEOUT, EXIT_USAGE,
};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
The command runs in its own process group with these variables set:
  ZKFENCE_TOKEN      the fencing token for storage (strictly increasing across holders)
  ZKFENCE_SEQUENCE   the lock node's sequence number, as in its name
  ZKFENCE_LOCK_PATH  the lock path
  ZKFENCE_NODE       our lock node's full path

Examples:
  zkfence run --connect zk1:2181,zk2:2181 --lock /locks/nightly -- ./nightly-job.sh
  zkfence run --connect 127.0.0.1:2181 --lock /locks/db --timeout 30s -- \\
      sh -c 'psql -c \"UPDATE t SET v = v + 1, fence = $ZKFENCE_TOKEN WHERE fence <= $ZKFENCE_TOKEN\"'")]
pub(crate) struct Args {
    /// ZooKeeper hosts, e.g. `zk1:2181,zk2:2181` (optionally with a chroot: `zk1:2181/app`).
    #[arg(long, env = "ZKFENCE_CONNECT")]
    connect: String,
    /// The lock path, e.g. `/locks/nightly`.
    #[arg(long)]
    lock: String,
    /// Give up waiting for the lock after this long (exit 75), e.g. `30s`.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// The ZooKeeper session timeout to ask for.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    session_timeout: Duration,
    /// After SIGTERM on lock loss, how long before SIGKILL.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    grace: Duration,
    /// Ride out short disconnects until the lease ends, instead of stopping the command at once.
    #[arg(long)]
    ride_out: bool,
    /// Serve the zkfence_* metrics in Prometheus format at this address, e.g. `127.0.0.1:9464`.
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<String>,
}

pub(crate) async fn run(args: Args) -> u8 {
    if let Some(addr) = args.metrics_addr {
        if let Err(code) = serve_metrics(addr) {
            return code;
        }
    }
    let client = match connect(&args.connect, args.session_timeout).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let options = LockOptions::default().with_ride_out_disconnects(args.ride_out);
    let lock = match FencedLock::new(client, args.lock.clone(), options) {
        Ok(lock) => lock,
        Err(err) => return fail("cannot use the lock", &err),
    };
    let acquired = match args.timeout {
        Some(timeout) => lock.acquire_timeout(timeout).await,
        None => lock.acquire().await.map(Some),
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            eprintln!(
                "zkfence: timed out after {:?} waiting for {}",
                args.timeout.unwrap_or_default(),
                args.lock
            );
            return EXIT_TIMEOUT;
        }
        Err(err) => return fail(&format!("cannot acquire {}", args.lock), &err),
    };
    tracing::info!(lock = %args.lock, fencing_token = %guard.token(), node = guard.node_path(), "acquired; starting the command");

    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("ZKFENCE_TOKEN", guard.token().as_u64().to_string())
        .env("ZKFENCE_SEQUENCE", guard.token().sequence().to_string())
        .env("ZKFENCE_LOCK_PATH", &args.lock)
        .env("ZKFENCE_NODE", guard.node_path())
        .process_group(0);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!("zkfence: cannot run {:?}: {err}", args.command[0]);
            let _ = guard.release().await;
            return if err.kind() == std::io::ErrorKind::NotFound {
                EXIT_CANNOT_RUN
            } else {
                EXIT_USAGE
            };
        }
    };
    let Some(pgid) = child.id().map(|id| id as i32) else {
        let _ = guard.release().await;
        return EXIT_CANNOT_RUN;
    };
    let (Ok(mut interrupts), Ok(mut terminations)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        eprintln!("zkfence: cannot install signal handlers");
        let _ = child.kill().await;
        let _ = guard.release().await;
        return crate::EXIT_FAILURE;
    };

    let lost = loop {
        tokio::select! {
            status = child.wait() => {
                let code = match status {
                    Ok(status) => status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)) as u8,
                    Err(_) => crate::EXIT_FAILURE,
                };
                return finish(&args.lock, guard, code).await;
            }
            reason = guard.lost() => break reason,
            _ = interrupts.recv() => signal_group(pgid, libc::SIGINT),
            _ = terminations.recv() => signal_group(pgid, libc::SIGTERM),
        }
    };

    // The lock is lost: stop the command before anyone else's work overlaps it any longer.
    signal_group(pgid, libc::SIGTERM);
    eprintln!(
        "zkfence: lock {} lost ({lost}); sent SIGTERM to the command (SIGKILL in {:?})",
        args.lock, args.grace
    );
    if tokio::time::timeout(args.grace, child.wait())
        .await
        .is_err()
    {
        signal_group(pgid, libc::SIGKILL);
        eprintln!("zkfence: the command outlived its grace period; sent SIGKILL");
        let _ = child.wait().await;
    }
    // Best effort: the node may still be ours (a disconnect we did not ride out).
    let _ = guard.release().await;
    EXIT_LOCK_LOST
}

/// The exit code once the command has exited (and been reaped) with `code`: `code` if the lock
/// was held all along, [`EXIT_LOCK_LOST`] if it was lost at any point before its release was
/// confirmed, whatever the command returned.
///
/// The exit and the loss can arrive together (and the `select!` above then takes either), or
/// the loss can still be on its way (a `NodeDeleted` notification in flight) when the exit is
/// seen. So this is the one place that decides, from the guard's own state: first by
/// [`check`](zkfence::Held::check), synchronously, with nothing awaited since the exit (the
/// watchdog's verdict and the lease deadline by the monotonic clock); then by the release,
/// which reports [`LockLost`](zkfence::Error::LockLost) for a loss recorded before it and for
/// a node that was already gone.
async fn finish(lock: &str, guard: zkfence::LockGuard, code: u8) -> u8 {
    let checked = guard.check().err().as_ref().and_then(loss);
    let released = guard.release().await;
    match checked.or_else(|| released.as_ref().err().and_then(loss)) {
        Some(reason) => {
            eprintln!(
                "zkfence: the command exited with {code}, but lock {lock} was lost before it was released ({reason})"
            );
            EXIT_LOCK_LOST
        }
        None => {
            if let Err(err) = released {
                // Held until the command was reaped (the check passed after it): the code
                // stands, though the node may outlive us until the session ends.
                eprintln!("zkfence: the command finished, but {err}");
            }
            code
        }
    }
}

/// The reason, when `err` says the lock was lost (not merely released).
fn loss(err: &zkfence::Error) -> Option<LossReason> {
    match err {
        zkfence::Error::LockLost(reason) if *reason != LossReason::Released => Some(*reason),
        _ => None,
    }
}

fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) on the process group we created for the child.
    unsafe { libc::kill(-pgid, signal) };
}

fn serve_metrics(addr: SocketAddr) -> Result<(), u8> {
    match metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
    {
        Ok(()) => {
            zkfence::metrics::describe();
            Ok(())
        }
        Err(err) => {
            eprintln!("zkfence: cannot serve metrics on {addr}: {err}");
            Err(EXIT_USAGE)
        }
    }
}
