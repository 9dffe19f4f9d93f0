//! `zkfence elect`: a command run while this process leads an election, stopped when the
//! leadership is lost, then a new campaign; and `elect --observe`, the leader and each change.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, Signal, SignalKind};
use zkfence::{Error, FencedElection, Leader, Leadership, LockOptions};
use zookeeper_client::{Acls, Client};

use crate::connect::Connection;
use crate::duration::parse_session_timeout;
use crate::exit::{fail, EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::json::json_string;
use crate::run::{serve_metrics, variables, AclChoice};
use crate::supervise::{self, supervise, OnRevoke, Outcome};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
While this process leads, the command runs in its own process group (supervised as by
`zkfence run`: --grace, --on-jeopardy, --kill-after) with these variables set:
  ZKFENCE_EPOCH      the leader's epoch: a fencing token, strictly increasing across leaders
  ZKFENCE_TOKEN      the same number, as `run` names it
  ZKFENCE_SEQUENCE   the candidate node's sequence number, as in its name
  ZKFENCE_ELECTION   the election path (also as ZKFENCE_LOCK_PATH)
  ZKFENCE_NODE       our candidate node's full path

A term ends when the command exits (zkfence resigns and exits with the command's code) or
when the leadership is lost (the command is stopped: SIGTERM, SIGKILL after --kill-after);
then zkfence campaigns again, on a new session if the old one expired, or exits 76 with
--once. SIGINT or SIGTERM while campaigning withdraws the candidate and exits 130 or 143;
while leading, they go to the command.

Candidates are named as Apache Curator's LeaderLatch names its participants, so zkfence and
LeaderLatch candidates on one path elect one leader between them.

Examples:
  zkfence elect --connect zk1:2181,zk2:2181 --election /elections/scheduler -- ./scheduler
  zkfence elect --connect 127.0.0.1:2181 --election /elections/compactor --grace 10s -- \\
      sh -c 'exec compactor --epoch \"$ZKFENCE_EPOCH\"'
  zkfence elect --connect 127.0.0.1:2181 --observe /elections/scheduler --json")]
pub(crate) struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The election path, e.g. `/elections/scheduler`: campaign on it, and run CMD while leader.
    #[arg(
        long,
        env = "ZKFENCE_ELECTION",
        value_name = "PATH",
        required_unless_present = "observe"
    )]
    election: Option<String>,
    /// Print this election's leader, then each change, until interrupted (as `etcdctl elect
    /// -l`); campaigns for nothing.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["command", "once", "data"])]
    observe: Option<String>,
    /// With --observe: one JSON object per line, `{"leader": … }` (null while nobody leads).
    #[arg(long, env = "ZKFENCE_JSON", requires = "observe")]
    json: bool,
    /// What observers see as this candidate's data until the command proclaims otherwise
    /// (default `host:<hostname> pid:<pid>`).
    #[arg(long, env = "ZKFENCE_DATA")]
    data: Option<String>,
    /// Exit after one term: when leadership is lost, exit 76 instead of campaigning again.
    #[arg(long, env = "ZKFENCE_ONCE")]
    once: bool,
    /// The ZooKeeper session timeout to ask for (1s to 10min; the server may grant less).
    #[arg(long, env = "ZKFENCE_SESSION_TIMEOUT", value_parser = parse_session_timeout, default_value = "10s")]
    session_timeout: Duration,
    #[command(flatten)]
    supervision: supervise::Options,
    /// The ACL of the candidate nodes: `anyone` (world:anyone, all) or `creator` (creator-all).
    #[arg(long, env = "ZKFENCE_ACL", value_enum, default_value = "anyone")]
    acl: AclChoice,
    /// Serve the zkfence_* metrics in Prometheus format at this address, e.g. `127.0.0.1:9464`.
    #[arg(long, env = "ZKFENCE_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// The command and its arguments (after `--`).
    #[arg(
        required_unless_present = "observe",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<String>,
}

pub(crate) async fn elect(args: Args) -> u8 {
    let path = match (&args.observe, &args.election) {
        (Some(observe), Some(election)) if observe != election => {
            eprintln!("zkfence: give --observe or --election, not both");
            return EXIT_USAGE;
        }
        (Some(path), _) | (None, Some(path)) => path.clone(),
        (None, None) => unreachable!("clap requires one of them"),
    };
    if let Err(err) = zkfence::FencedLock::check_path(&path) {
        return fail("bad election path", &err);
    }
    if args.observe.is_some() {
        return observe(&args, &path).await;
    }
    if args.acl == AclChoice::Creator && matches!(args.connection.credential(), Ok(None)) {
        eprintln!("zkfence: --acl creator needs credentials (--auth, ZKFENCE_AUTH or --auth-file)");
        return EXIT_USAGE;
    }
    if let Some(addr) = args.metrics_addr {
        if let Err(code) = serve_metrics(addr) {
            return code;
        }
    }
    let Ok(mut interrupts) = Interrupts::install() else {
        eprintln!("zkfence: cannot install signal handlers");
        return EXIT_FAILURE;
    };
    Candidate { args: &args, path }.serve(&mut interrupts).await
}

/// SIGINT and SIGTERM, which end a campaign.
struct Interrupts {
    interrupt: Signal,
    terminate: Signal,
}

impl Interrupts {
    fn install() -> std::io::Result<Interrupts> {
        Ok(Interrupts {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The exit code for the next one: 128 + its number.
    async fn next(&mut self) -> u8 {
        tokio::select! {
            _ = self.interrupt.recv() => 128 + libc::SIGINT as u8,
            _ = self.terminate.recv() => 128 + libc::SIGTERM as u8,
        }
    }
}

/// This process as a candidate: campaigns, runs a term, and campaigns again.
struct Candidate<'a> {
    args: &'a Args,
    path: String,
}

/// How a campaign ended.
enum Campaign {
    /// Leading, on this session.
    Won(Leadership, Client),
    /// Its session ended: campaign again on a new one.
    SessionEnded,
    /// Exit with this code.
    Exit(u8),
}

impl Candidate<'_> {
    /// Campaign, lead, repeat: the exit code.
    async fn serve(&self, interrupts: &mut Interrupts) -> u8 {
        let mut client = match self.connect(interrupts).await {
            Ok(client) => client,
            Err(code) => return code,
        };
        let mut losses = 0u32;
        loop {
            let leadership = match self.campaign(client, interrupts).await {
                Campaign::Won(leadership, same) => {
                    client = same;
                    leadership
                }
                Campaign::Exit(code) => return code,
                Campaign::SessionEnded => {
                    client = match self.connect(interrupts).await {
                        Ok(client) => client,
                        Err(code) => return code,
                    };
                    continue;
                }
            };
            let started = Instant::now();
            match self.term(leadership).await {
                Outcome::Lost if !self.args.once => {
                    // A term that lasted a session timeout starts the backoff over.
                    if started.elapsed() > self.args.session_timeout {
                        losses = 0;
                    }
                    losses += 1;
                    tokio::select! {
                        code = interrupts.next() => return code,
                        () = tokio::time::sleep(backoff(losses)) => {}
                    }
                    if client.state().is_terminated() {
                        client = match self.connect(interrupts).await {
                            Ok(client) => client,
                            Err(code) => return code,
                        };
                    }
                }
                outcome => return outcome.code(),
            }
        }
    }

    /// A session, retried while the ensemble cannot be reached (a candidate waits for it);
    /// `Err` is an exit code: bad credentials, certificates or hosts, or an interrupt.
    async fn connect(&self, interrupts: &mut Interrupts) -> Result<Client, u8> {
        loop {
            let open = self.args.connection.open(self.args.session_timeout, None);
            let code = tokio::select! {
                code = interrupts.next() => return Err(code),
                opened = open => match opened {
                    Ok(client) => return Ok(client),
                    Err(code) => code,
                },
            };
            if code != EXIT_UNAVAILABLE {
                return Err(code);
            }
            eprintln!(
                "zkfence: still campaigning for {}: trying ZooKeeper again",
                self.path
            );
        }
    }

    /// One campaign on `client`'s session, withdrawn on an interrupt (the candidate node is
    /// deleted, or goes with the session, before zkfence exits).
    async fn campaign(&self, client: Client, interrupts: &mut Interrupts) -> Campaign {
        let mut options = self.args.supervision.lock_options();
        if self.args.acl == AclChoice::Creator {
            options = options.with_acls(&Acls::creator_all());
        }
        let data = match &self.args.data {
            Some(data) => data.clone().into_bytes(),
            None => LockOptions::default().data().to_vec(),
        };
        let election = match FencedElection::new(client.clone(), self.path.clone(), options) {
            Ok(election) => election,
            Err(err) => return Campaign::Exit(fail("cannot use the election", &err)),
        };
        let won = tokio::select! {
            code = interrupts.next() => Err(code),
            won = election.campaign(data) => Ok(won),
        };
        match won {
            Ok(Ok(leadership)) => Campaign::Won(leadership, client),
            Ok(Err(err)) if err.is_session_terminal() => {
                eprintln!("zkfence: the session ended while campaigning ({err}); campaigning again on a new one");
                Campaign::SessionEnded
            }
            Ok(Err(err)) => {
                Campaign::Exit(fail(&format!("cannot campaign on {}", self.path), &err))
            }
            Err(code) => {
                withdraw(election, client, self.args.supervision.release_timeout).await;
                Campaign::Exit(code)
            }
        }
    }

    /// The command under `leadership`, supervised as `run` supervises it.
    async fn term(&self, leadership: Leadership) -> Outcome {
        let epoch = leadership.epoch().as_u64();
        tracing::info!(election = %self.path, epoch, node = leadership.node_path(), "leading; starting the command");
        eprintln!("zkfence: leading {} in epoch {epoch}", self.path);
        let mut env = variables(&[(*leadership).clone()], &[leadership.ticket()]);
        env.push(("ZKFENCE_EPOCH".into(), epoch.to_string()));
        env.push(("ZKFENCE_ELECTION".into(), self.path.clone()));
        let policy = self.args.supervision.policy(OnRevoke::Ignore);
        let outcome = supervise(&self.args.command, &env, leadership, &self.path, &policy).await;
        match outcome {
            Outcome::Lost if self.args.once => {
                eprintln!(
                    "zkfence: leadership of {} lost in epoch {epoch}; --once: exiting",
                    self.path
                )
            }
            Outcome::Lost => eprintln!(
                "zkfence: leadership of {} lost in epoch {epoch}; campaigning again",
                self.path
            ),
            _ => {}
        }
        outcome
    }
}

/// Closes the session of a withdrawn candidate, waiting at most `limit`: the cancelled
/// campaign deletes the candidate node in the background, and the session closes when that
/// task lets go of its last handle (the server deletes what is left of its nodes then), so
/// that no stale candidate leads after the process has gone.
async fn withdraw(election: FencedElection, client: Client, limit: Duration) {
    let mut state = client.state_watcher();
    drop((election, client));
    let closed = async { while !state.changed().await.is_terminated() {} };
    if tokio::time::timeout(limit, closed).await.is_err() {
        eprintln!("zkfence: the withdrawal was not confirmed within {limit:?}; the candidate node goes when the session expires");
    }
}

/// Between a lost term and the next campaign: 100 ms doubling per loss up to 5 s, with up to
/// half as much again at random, so a fleet that lost its leader together does not campaign in
/// lockstep.
fn backoff(losses: u32) -> Duration {
    let base = (Duration::from_millis(100) * 2u32.saturating_pow(losses.min(6)))
        .min(Duration::from_secs(5));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    base.mul_f64(1.0 + f64::from(nanos % 1000) / 2000.0)
}

/// `elect --observe`: the leader, then each change, one line each.
async fn observe(args: &Args, path: &str) -> u8 {
    let mut last: Option<Option<Leader>> = None;
    loop {
        let client = match args.connection.open(args.session_timeout, None).await {
            Ok(client) => client,
            Err(code) => return code,
        };
        let election = match FencedElection::new(client, path.to_owned(), LockOptions::default()) {
            Ok(election) => election,
            Err(err) => return fail("cannot use the election", &err),
        };
        let mut observer = election.observe();
        loop {
            match observer.next().await {
                Ok(leader) if last.as_ref() == Some(&leader) => {}
                Ok(leader) => {
                    if let Err(code) = print_leader(path, leader.as_ref(), args.json) {
                        return code;
                    }
                    last = Some(leader);
                }
                Err(err) if err.is_session_terminal() => {
                    tracing::info!(cause = %err, "the observer's session ended; observing on a new one");
                    break;
                }
                Err(Error::NoParent { .. }) => {}
                Err(err) => return fail(&format!("cannot observe {path}"), &err),
            }
        }
    }
}

/// One line for `leader`; `Err(0)` once stdout is closed (a pipe's reader left).
fn print_leader(path: &str, leader: Option<&Leader>, json: bool) -> Result<(), u8> {
    let line = match (leader, json) {
        (None, false) => format!("{path}: no leader"),
        (Some(l), false) => format!(
            "{path}: epoch {} (sequence {}) session {} node {}: {}",
            l.epoch.as_u64(),
            l.epoch.sequence(),
            l.session_id,
            l.node,
            String::from_utf8_lossy(&l.data)
        ),
        (None, true) => format!("{{\"election\":{},\"leader\":null}}", json_string(path)),
        (Some(l), true) => format!(
            "{{\"election\":{},\"leader\":{{\"epoch\":{},\"sequence\":{},\"session_id\":{},\"node\":{},\"data\":{}}}}}",
            json_string(path),
            l.epoch.as_u64(),
            l.epoch.sequence(),
            json_string(&l.session_id.to_string()),
            json_string(&l.node),
            json_string(&String::from_utf8_lossy(&l.data)),
        ),
    };
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(0),
        Err(err) => {
            eprintln!("zkfence: cannot write to stdout: {err}");
            Err(EXIT_FAILURE)
        }
    }
}
