//! `zkfence run`: a command under the lock, stopped when the lock is lost.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use zkfence::{
    Acquire, FenceTicket, FencedLock, FencedMultiLock, FencedSemaphore, Held, LockGuard, Mode,
    MultiGuard, Shared,
};
use zookeeper_client::Acls;

use crate::connect::Connection;
use crate::duration::{parse_duration, parse_session_timeout};
use crate::exit::{fail, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::supervise::{self, supervise, OnRevoke};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
The command runs in its own process group with these variables set:
  ZKFENCE_TOKEN      the fencing token for storage: plain decimal digits, 0 to
                     9223372036854775807 (a BIGINT), strictly increasing across holders; pass
                     it as is to the store's claim (docs/fences.md: the recipe per store)
                     (a --permits lease's token orders its work but must never raise a fence)
  ZKFENCE_TICKET     the fence ticket, <sequence>@<token>:<node>:<lock path>, for a service
                     that fences writes on the holder's behalf (none with --permits)
  ZKFENCE_SEQUENCE   the lock node's sequence number, as in its name
  ZKFENCE_LOCK_PATH  the lock path (the fence's scope, for an exclusive lock)
  ZKFENCE_NODE       our lock node's full path
With several --lock, each lock's as ZKFENCE_TOKEN_<n>, ZKFENCE_TICKET_<n>,
ZKFENCE_SEQUENCE_<n>, ZKFENCE_LOCK_PATH_<n> and ZKFENCE_NODE_<n>, n from 1 in --lock order
(the first's also as above).

Examples:
  zkfence run --connect zk1:2181,zk2:2181 --lock /locks/nightly -- ./nightly-job.sh
  # PostgreSQL, fenced by the SQL function `zkfence fence install` put there: the claim
  # first, in one transaction, psql stopping at the first error (without ON_ERROR_STOP psql
  # exits 0 after a refusal: nothing is written, but the caller cannot tell)
  zkfence run --connect 127.0.0.1:2181 --lock /locks/db --timeout 30s -- sh -c \\
      'psql -v ON_ERROR_STOP=1 --single-transaction \\
         -c \"SELECT zkfence_claim('\\''$ZKFENCE_LOCK_PATH'\\'', $ZKFENCE_TOKEN)\" \\
         -c \"UPDATE t SET v = v + 1\"'
  # (the claim raises SQLSTATE ZF001, and psql exits non-zero, once a newer holder claimed)")]
pub(crate) struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The lock path, e.g. `/locks/nightly`; give it several times to hold several locks
    /// together (taken in sorted order, all or nothing).
    #[arg(long, env = "ZKFENCE_LOCK", required = true, num_args = 1)]
    lock: Vec<String>,
    /// Give up after this long, connecting and waiting for the lock together (exit 75), e.g. `30s`.
    #[arg(long, env = "ZKFENCE_TIMEOUT", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// The ZooKeeper session timeout to ask for (1s to 10min; the server may grant less).
    #[arg(long, env = "ZKFENCE_SESSION_TIMEOUT", value_parser = parse_session_timeout, default_value = "10s")]
    session_timeout: Duration,
    #[command(flatten)]
    supervision: supervise::Options,
    /// What happens when someone asks the holder to let go (`zkfence revoke`, Curator's
    /// `Revoker`): `term` (SIGTERM, SIGKILL after --kill-after, release, exit 79) or `ignore`.
    #[arg(long, env = "ZKFENCE_ON_REVOKE", value_enum, default_value = "term")]
    on_revoke: OnRevoke,
    /// Let up to N commands hold at once (a semaphore, as `consul lock -n`); each gets its own
    /// token. All contenders on a path must agree on N.
    #[arg(long, env = "ZKFENCE_PERMITS", value_name = "N")]
    permits: Option<u32>,
    /// The ACL of the lock nodes zkfence creates: `anyone` (world:anyone, all) or
    /// `creator` (creator-all: only the identity in --auth).
    #[arg(long, env = "ZKFENCE_ACL", value_enum, default_value = "anyone")]
    acl: AclChoice,
    /// Serve the zkfence_* metrics in Prometheus format at this address, e.g. `127.0.0.1:9464`.
    #[arg(long, env = "ZKFENCE_METRICS_ADDR")]
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

/// The ACL of the lock nodes `run` creates.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AclChoice {
    /// world:anyone with every permission (ZooKeeper's open default).
    Anyone,
    /// creator-all: only the authenticated identity that created a node may touch it.
    Creator,
}

pub(crate) async fn run(args: Args) -> u8 {
    if let Err(code) = check(&args) {
        return code;
    }
    if let Some(addr) = args.metrics_addr {
        if let Err(code) = serve_metrics(addr) {
            return code;
        }
    }
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let client = match args.connection.open(args.session_timeout, deadline).await {
        Ok(client) => client,
        Err(code) if deadline.is_some_and(|d| Instant::now() >= d) && code == EXIT_UNAVAILABLE => {
            return EXIT_TIMEOUT
        }
        Err(code) => return code,
    };
    let policy = args.supervision.policy(args.on_revoke);
    let what = args.lock.join(", ");
    match acquire(&args, client, deadline).await {
        Ok(Acquired::One(guard)) => {
            tracing::info!(lock = %what, fencing_token = %guard.token(), node = guard.node_path(), "acquired; starting the command");
            let env = variables(&[guard.held()], &[guard.ticket()]);
            supervise(&args.command, &env, guard, &what, &policy)
                .await
                .code()
        }
        Ok(Acquired::Lease(guard)) => {
            tracing::info!(lock = %what, fencing_token = %guard.token(), node = guard.node_path(), "acquired a lease; starting the command");
            let env = variables(&[guard.held()], &[]);
            supervise(&args.command, &env, guard, &what, &policy)
                .await
                .code()
        }
        Ok(Acquired::Many(guard)) => {
            tracing::info!(lock = %what, "acquired every lock; starting the command");
            let env = variables(guard.helds(), &guard.tickets());
            supervise(&args.command, &env, guard, &what, &policy)
                .await
                .code()
        }
        Err(code) => code,
    }
}

/// Everything that can be checked without ZooKeeper, first (exit 64).
fn check(args: &Args) -> Result<(), u8> {
    for lock in &args.lock {
        FencedLock::check_path(lock).map_err(|err| fail("bad --lock", &err))?;
    }
    if args.permits == Some(0) {
        eprintln!("zkfence: --permits must be at least 1");
        return Err(EXIT_USAGE);
    }
    if args.permits.is_some() && args.lock.len() > 1 {
        eprintln!(
            "zkfence: --permits takes one --lock (a semaphore); hold several locks without it"
        );
        return Err(EXIT_USAGE);
    }
    match args.connection.credential() {
        Ok(None) if args.acl == AclChoice::Creator => {
            eprintln!("zkfence: --acl creator needs credentials (--auth, ZKFENCE_AUTH or --auth-file): without them every client is the same anonymous creator");
            Err(EXIT_USAGE)
        }
        Err(code) => Err(code),
        Ok(_) => Ok(()),
    }
}

/// The command's variables: the first lock's as `ZKFENCE_TOKEN` and friends, and every lock's
/// as `ZKFENCE_TOKEN_<n>` and friends, `n` from 1 in the order of `--lock`; `tickets` are the
/// exclusive holds' (none for a semaphore lease).
pub(crate) fn variables<M: Mode>(
    helds: &[Held<M>],
    tickets: &[FenceTicket],
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (i, held) in helds.iter().enumerate() {
        let suffixes = if i == 0 {
            vec![String::new(), "_1".to_owned()]
        } else {
            vec![format!("_{}", i + 1)]
        };
        for suffix in suffixes {
            let var = |name: &str| format!("ZKFENCE_{name}{suffix}");
            env.push((var("TOKEN"), held.token().as_i64().to_string()));
            if let Some(ticket) = tickets.get(i) {
                env.push((var("TICKET"), ticket.to_string()));
            }
            env.push((var("SEQUENCE"), held.token().sequence().to_string()));
            env.push((var("LOCK_PATH"), held.lock_path().to_owned()));
            env.push((var("NODE"), held.node_path().to_owned()));
        }
    }
    env
}

/// What `run` holds.
enum Acquired {
    One(LockGuard),
    Lease(LockGuard<Shared>),
    Many(MultiGuard),
}

/// Queues for the lock (or one of `--permits` leases, or every lock) until `deadline`.
async fn acquire(
    args: &Args,
    client: zookeeper_client::Client,
    deadline: Option<Instant>,
) -> Result<Acquired, u8> {
    let mut options = args.supervision.lock_options();
    if args.acl == AclChoice::Creator {
        options = options.with_acls(&Acls::creator_all());
    }
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let lock = args.lock[0].clone();
    let acquired = match (args.permits, args.lock.len()) {
        (Some(permits), _) => {
            let semaphore = FencedSemaphore::new(client, lock, permits, options)
                .map_err(|err| fail("cannot use the semaphore", &err))?;
            match left {
                Some(left) => semaphore.acquire_timeout(left).await,
                None => semaphore.acquire().await.map(Some),
            }
            .map(|g| g.map(Acquired::Lease))
        }
        (None, 1) => {
            let lock = FencedLock::new(client, lock, options)
                .map_err(|err| fail("cannot use the lock", &err))?;
            match left {
                Some(left) => lock.acquire_timeout(left).await,
                None => lock.acquire().await.map(Some),
            }
            .map(|g| g.map(Acquired::One))
        }
        (None, _) => {
            let locks = FencedMultiLock::new(client, args.lock.clone(), options)
                .map_err(|err| fail("cannot use the locks", &err))?;
            match left {
                Some(left) => locks.acquire_timeout(left).await,
                None => locks.acquire().await.map(Some),
            }
            .map(|g| g.map(Acquired::Many))
        }
    };
    let what = args.lock.join(", ");
    match acquired {
        Ok(Some(acquired)) => Ok(acquired),
        Ok(None) => {
            eprintln!(
                "zkfence: timed out after {:?} waiting for {what}",
                args.timeout.unwrap_or_default(),
            );
            Err(EXIT_TIMEOUT)
        }
        Err(err) => Err(fail(&format!("cannot acquire {what}"), &err)),
    }
}

/// Seconds: 250 µs to 10 min, about ×2.5 apart.
const LATENCY_BUCKETS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 150.0, 300.0, 600.0,
];

pub(crate) fn serve_metrics(addr: SocketAddr) -> Result<(), u8> {
    // Histograms with buckets (summaries cannot be aggregated across instances), spanning what
    // a lock's latencies span: a sub-millisecond uncontended acquire to a many-minute hold.
    let builder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(LATENCY_BUCKETS);
    match builder.and_then(|builder| builder.install()) {
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
