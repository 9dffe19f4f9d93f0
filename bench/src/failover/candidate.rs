//! `zkfence-bench candidate` (hidden): one candidate process of `bench --failover`, campaigning
//! with [`FencedElection`] and reporting its leadership on stdout, one flushed line each, in the
//! protocol `bench/java/CuratorLatchBench.java` also speaks:
//!
//! - `session <granted timeout ms>` once connected;
//! - `lead <epoch> <unix-nanos>` the moment `campaign` returns: the leader's first step;
//! - `step <unix-nanos>` about every 5 ms while `check()` passes;
//! - `deposed <unix-nanos>` when `check()` fails (the leadership lost or its lease lapsed);
//!   then it exits.
//!
//! Times are unix nanoseconds (`CLOCK_REALTIME`), which the bench and the Java candidates read
//! on the same host. A step's time is read *before* its check: a step printed with time `t`
//! means the leader still believed it led at some moment after `t`, so a pause between the
//! check and the print never passes for a stale step.

use std::io::{Read as _, Write as _};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zkfence::{FencedElection, LockOptions};

use crate::support::parse_session_timeout;
use crate::support::{fail, EXIT_FAILURE};

/// Between two steps, unless the leadership is lost first.
const STEP: Duration = Duration::from_millis(5);

/// The hidden `zkfence-bench candidate`'s command line.
#[derive(clap::Args, Debug)]
pub(crate) struct CandidateArgs {
    /// ZooKeeper hosts (with a chroot if any).
    #[arg(long)]
    connect: String,
    /// The election path to campaign on.
    #[arg(long)]
    election: String,
    /// The session timeout to ask for.
    #[arg(long, value_parser = parse_session_timeout, default_value = "2s")]
    session_timeout: Duration,
}

/// Unix time in nanoseconds (`CLOCK_REALTIME`), as the bench and its Java candidates read it.
pub(super) fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Prints one protocol line and flushes it; a bench that no longer reads (a closed pipe) ends
/// the process.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// Ends the process when stdin reaches its end: the bench that started it holds the other end
/// and closes it by exiting, however it exits, so that no candidate outlives it. A thread of its
/// own (not the runtime's), so that it never holds up the process's exit.
fn exit_with_stdin() {
    std::thread::spawn(|| {
        let mut buffer = [0u8; 64];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut buffer), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
}

/// `zkfence-bench candidate`: campaigns, then reports each step until deposed; the exit code
/// (0 once deposed).
pub(crate) async fn candidate(args: CandidateArgs) -> u8 {
    exit_with_stdin();
    let client = match crate::support::open(&args.connect, args.session_timeout).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    say(format_args!(
        "session {}",
        client.session_timeout().as_millis()
    ));
    let election = match FencedElection::new(client, &args.election, LockOptions::default()) {
        Ok(election) => election,
        Err(err) => return fail("bad election path", &err),
    };
    let leadership = match election
        .campaign(format!("candidate pid:{}", std::process::id()))
        .await
    {
        Ok(leadership) => leadership,
        Err(err) => {
            eprintln!("zkfence: campaign failed: {err}");
            return EXIT_FAILURE;
        }
    };
    let led = unix_nanos();
    say(format_args!("lead {} {led}", leadership.epoch().as_u64()));
    loop {
        let at = unix_nanos();
        if leadership.check().is_err() {
            say(format_args!("deposed {at}"));
            return 0;
        }
        say(format_args!("step {at}"));
        tokio::select! {
            () = tokio::time::sleep(STEP) => {}
            _ = leadership.lost() => {}
        }
    }
}
