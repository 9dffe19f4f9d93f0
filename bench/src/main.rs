//! `zkfence-bench`: the project's benchmarks, a program of their own (unpublished), beside the
//! `zkfence` command users install. Acquire/release cycles and handoffs of zkfence,
//! `zookeeper-client`'s own `Client::lock`, Apache Curator (a JVM worker) and two Redis locks,
//! and the raw ZooKeeper limits, measured in one process on one server; the failover, scale
//! and fence benches. `scripts/bench`, `scripts/bench-scale` and the tables of
//! `docs/performance.md` run it.
//!
//! - cycle: one contender's acquire call start to its release call return;
//! - handoff: the holder's release call start to the next holder's acquire return;
//! - raw: a create(ephemeral sequential)+delete cycle (uncontended), and the notification
//!   latency, one client's delete call start to another's watch firing (contended).
//!
//! This file is the command: the runs it orchestrates (one run, the matrix, the in-process
//! measurements) and the tables it prints. Its options and a run's parameters are in
//! `options`, a run's figures in `report`, the workloads in `workload` (Curator's, in a JVM, in
//! `curator`; the Redis locks' client in `redis_lock`), the statistics in `stats`, the matrix's
//! SVG chart in `chart`; what fencing costs a writer (`--fences`) in `fences`; the scale
//! measurements against the peers (`--scale`) in `scale`; failovers (`--failover`) in
//! `failover`; what the commands share in `support`.

mod apart;
mod chart;
mod contention;
mod cpu;
mod curator;
pub(crate) mod failover;
mod fences;
mod measure;
mod options;
mod pin;
mod redis_lock;
mod report;
mod rounds;
mod scale;
mod stats;
mod support;
mod workload;

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use zookeeper_client as zk;

use self::options::Args;
use self::options::{Impl, Mode, Run, CONFIGS, IMPLS, LOCKS};
use self::report::{find, Report};
use self::stats::{per_acquisition, per_second};
use self::workload::InProcess;
use crate::support::{EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};
use zkfence_testkit::start_local_zookeeper;

/// `zkfence-bench [OPTIONS]`, or one candidate process of `--failover` (started by the bench).
#[derive(Parser, Debug)]
#[command(
    name = "zkfence-bench",
    about = "zkfence's benchmarks: contention, handoffs, failover, scale and fences against their peers and the raw ZooKeeper limits",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    args: Args,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One candidate process of `--failover` (started by the bench).
    #[command(hide = true)]
    Candidate(failover::CandidateArgs),
    /// One timed run in a process of its own (started by the bench).
    #[command(hide = true)]
    Run(apart::RunArgs),
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // tokio's default (a worker per core): what a service gets, as its peers' users run them.
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zkfence-bench: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    ExitCode::from(runtime.block_on(async move {
        match cli.command {
            Some(Command::Candidate(args)) => failover::candidate(args).await,
            Some(Command::Run(args)) => apart::run(args).await,
            None => bench(cli.args).await,
        }
    }))
}

/// The bench: one run against `--connect`, or the matrix, scale or in-process
/// measurements; the exit code.
pub(crate) async fn bench(args: Args) -> u8 {
    if args.failover.run {
        return failover::bench(
            args.connect.as_deref(),
            &args.lock,
            args.rounds,
            &args.failover,
        )
        .await;
    }
    if args.fences || args.matrix || args.scale || args.in_process || args.rounds.is_some() {
        return with_server(&args).await;
    }
    let redis = args.implementation.redis_waiting().is_some();
    let hosts = match (&args.connect, redis) {
        (Some(hosts), _) => hosts.clone(),
        (None, true) => String::new(),
        (None, false) => {
            eprintln!(
                "zkfence: bench needs --connect HOSTS (or --rounds or --matrix, which start a local server)"
            );
            return EXIT_USAGE;
        }
    };
    let run = Run::new(&args, args.implementation, args.mode, args.contenders);
    let measured = match (args.count, redis) {
        (true, true) => measure::counted_redis(run, &args.lock).await,
        (true, false) => measure::counted(run, &hosts, &args.lock).await,
        (false, _) => run.execute(&hosts, &args.lock).await.map(|r| {
            let none = measure::Counted::none();
            (r, none)
        }),
    }
    .map(|(report, counted)| (counted.line(&report), report));
    match measured {
        Ok((line, report)) => {
            println!("{line}");
            if report.violations > 0 {
                EXIT_FAILURE
            } else {
                0
            }
        }
        Err(err) => {
            eprintln!("zkfence: {err}");
            EXIT_UNAVAILABLE
        }
    }
}

/// Runs the matrix, the rounds, the fences' or the scale measurements against `--connect`, or a
/// throwaway local server.
async fn with_server(args: &Args) -> u8 {
    let local;
    let (hosts, server) = match &args.connect {
        Some(hosts) => (hosts.clone(), None),
        None => {
            eprintln!("bench: starting a throwaway ZooKeeper (forceSync=no) on a loopback port...");
            local = match start_local_zookeeper("zkfence-bench", || bench_server(false)).await {
                Ok(zk) => zk,
                Err(code) => return code,
            };
            (local.addr(), Some(&local))
        }
    };
    let server_pid = server.map(|s| s.pid());
    if args.pin_server {
        let pinned = match server_pid {
            Some(pid) => pin::pin(pid),
            None => Err(pin::PinError::Usage("--pin-server pins the throwaway server; it cannot pin one given by --connect: run without one of them".to_string())),
        };
        match pinned {
            Ok(()) => {}
            Err(pin::PinError::Usage(err)) => {
                eprintln!("zkfence-bench: {err}");
                return EXIT_USAGE;
            }
            Err(pin::PinError::Failed(err)) => {
                eprintln!("zkfence-bench: {err}");
                return EXIT_FAILURE;
            }
        }
    }
    let result = if args.fences {
        fences::fences(args, &hosts).await
    } else if args.scale {
        // Before --rounds: the scale bench has rounds of its own.
        scale::scale(args, &hosts, server).await
    } else if args.rounds.is_some() {
        with_redis(args, &hosts, server_pid).await
    } else if args.in_process {
        in_process(args, &hosts).await
    } else {
        matrix(args, &hosts).await
    };
    result.unwrap_or_else(|err| {
        eprintln!("zkfence: {err}");
        EXIT_UNAVAILABLE
    })
}

/// `--rounds`, with a throwaway Redis server when a Redis peer is measured without `--redis`.
async fn with_redis(args: &Args, hosts: &str, zookeeper_pid: Option<i32>) -> Result<u8, String> {
    let wanted = args.peers.iter().any(|p| p.redis_waiting().is_some());
    let local = match (wanted, args.redis) {
        (true, None) => {
            eprintln!("bench: starting a throwaway redis-server on a loopback port...");
            let started = tokio::task::spawn_blocking(zkfence_harness::LocalRedis::start).await;
            Some(started.map_err(|e| e.to_string())??)
        }
        _ => None,
    };
    let redis = match &local {
        Some(redis) => Some((
            redis.addr().parse().map_err(|e| format!("{e}"))?,
            Some(redis.pid()),
        )),
        None => args.redis.map(|addr| (addr, None)),
    };
    let servers = rounds::Servers {
        hosts,
        zookeeper_pid,
        redis,
    };
    rounds::rounds(args, servers).await
}

/// A throwaway server for measurements (every JIT tier; fsync as asked).
fn bench_server(
    force_sync: bool,
) -> Result<zkfence_testkit::LocalZooKeeper, zkfence_testkit::StartError> {
    zkfence_testkit::LocalZooKeeper::start_for_bench(force_sync)
}

/// `--matrix`: every impl in every configuration, the requests and writes per acquisition, the
/// table of ratios and the chart; then, on a local server, the same matrix on a second server
/// with forceSync=yes.
async fn matrix(args: &Args, hosts: &str) -> Result<u8, String> {
    measure::warm_up(args, hosts).await?;
    let reports = matrix_runs(args, hosts).await?;
    let requests = matrix_requests(args, hosts).await;
    println!(
        "\nforceSync=no (the log is written, not fsynced, before a transaction is acknowledged):\n"
    );
    print!("{}", table(&reports));
    print!("{}", per_acquisition_table(&reports, &requests));
    match std::fs::write(&args.chart, chart::chart(&reports)) {
        Ok(()) => println!("\nchart: {}", args.chart.display()),
        Err(err) => eprintln!("zkfence: cannot write {}: {err}", args.chart.display()),
    }
    let mut violated = reports.iter().any(|r| r.violations > 0);
    if args.connect.is_none() && !args.skip_force_sync {
        eprintln!("bench: starting a second throwaway ZooKeeper, forceSync=yes ...");
        let durable = match start_local_zookeeper("zkfence-bench", || bench_server(true)).await {
            Ok(zk) => zk,
            Err(code) => return Ok(code),
        };
        measure::warm_up(args, &durable.addr()).await?;
        let synced = matrix_runs(args, &durable.addr()).await?;
        println!("\nforceSync=yes (every transaction fsynced before it is acknowledged):\n");
        print!("{}", table(&synced));
        print!("{}", per_acquisition_table(&synced, &[]));
        violated |= synced.iter().any(|r| r.violations > 0);
    }
    Ok(if violated { EXIT_FAILURE } else { 0 })
}

/// The matrix's runs, each printed as its JSON line as it ends.
async fn matrix_runs(args: &Args, hosts: &str) -> Result<Vec<Report>, String> {
    let total = CONFIGS.len() * IMPLS.len();
    let mut reports: Vec<Report> = Vec::new();
    let mut n = 0;
    for (mode, contenders) in CONFIGS {
        // All impls back to back for each configuration, so drift hits them alike.
        for implementation in IMPLS {
            n += 1;
            eprintln!(
                "bench [{n}/{total}] {} {:?} x{contenders} ...",
                implementation.name(),
                mode
            );
            let run = Run::new(args, implementation, mode, contenders);
            let report = run.execute(hosts, &args.lock).await?;
            println!("{}", report.json());
            reports.push(report);
        }
    }
    Ok(reports)
}

/// Server requests per acquisition of each lock, uncontended and with 8 contenders; a failed
/// measurement is reported and left out.
async fn matrix_requests(args: &Args, hosts: &str) -> Vec<(Impl, Mode, usize, f64)> {
    eprintln!("bench: counting server requests per acquisition through a proxy ...");
    let mut requests = Vec::new();
    for (mode, contenders) in [(Mode::Uncontended, 1), (Mode::Contended, 8)] {
        for implementation in LOCKS {
            match measure::requests_per_acquisition(hosts, args, implementation, mode, contenders)
                .await
            {
                Ok(r) => requests.push((implementation, mode, contenders, r)),
                Err(err) => eprintln!("zkfence: {err}"),
            }
        }
    }
    requests
}

/// `--tasks` tasks of one process on one lock and one session: sharing one `FencedLock`
/// (clones queue in process; one node at a time) versus one `FencedLock` each (one node each).
async fn in_process(args: &Args, hosts: &str) -> Result<u8, String> {
    let server = hosts.split(',').next().unwrap_or(hosts).to_owned();
    let admin = workload::connect_raw(&server).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    match admin.create(&args.lock, &[], &persistent).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(err) => return Err(format!("create {}: {err}", args.lock)),
    }
    let mut sides = Vec::new();
    for shared in [true, false] {
        let side = workload::in_process_side(args, &server, &admin, shared).await?;
        println!(
            "{{\"mode\":\"in-process\",\"shared_lock\":{shared},\"tasks\":{},\"seconds\":{},\"acquisitions\":{},\"acq_per_s\":{:.1},\"nodes_created_per_acq\":{:.3},\"requests_per_acq\":{:.2},\"max_queue_nodes\":{}}}",
            args.tasks,
            side.seconds,
            side.acquisitions,
            per_second(side.acquisitions, side.seconds),
            per_acquisition(side.creates, side.acquisitions),
            per_acquisition(side.requests, side.acquisitions),
            side.max_nodes
        );
        sides.push(side);
    }
    print_in_process_table(args, &sides[0], &sides[1]);
    Ok(0)
}

/// The in-process comparison's table and its one-line verdict.
fn print_in_process_table(args: &Args, shared: &InProcess, separate: &InProcess) {
    let rate = |s: &InProcess| per_second(s.acquisitions, s.seconds);
    println!();
    println!("| {} tasks, one session | acq/s | nodes created / acq | requests / acq | most nodes queued |", args.tasks);
    println!("| --- | --- | --- | --- | --- |");
    for (name, side) in [
        ("one shared FencedLock (in-process queue)", shared),
        ("a FencedLock per task", separate),
    ] {
        println!(
            "| {name} | {:.0} | {:.2} | {:.2} | {} |",
            rate(side),
            per_acquisition(side.creates, side.acquisitions),
            per_acquisition(side.requests, side.acquisitions),
            side.max_nodes
        );
    }
    println!(
        "in-process queue / separate contenders: throughput {:.2}x, queue nodes {} vs {}",
        rate(shared) / rate(separate).max(f64::MIN_POSITIVE),
        shared.max_nodes,
        separate.max_nodes
    );
}

/// The matrix's table of ratios (zkfence against zookeeper-client, Curator and the raw
/// limits), then the raw limits themselves.
fn table(reports: &[Report]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| run | zkfence cycle p50 | ÷ zookeeper-client | ÷ Curator | ÷ raw create+delete | ÷ raw create+listing+delete | zkfence handoff p50 | ÷ zookeeper-client | ÷ Curator | ÷ raw notification | throughput ÷ zookeeper-client | ÷ Curator | violations |");
    let _ = writeln!(out, "|{}", " --- |".repeat(13));
    let raw = |mode, n| find(reports, Impl::Raw, mode, n);
    let uncontended = raw(Mode::Uncontended, 1);
    let raw_cycles = [
        uncontended.map(|r| r.cycle_p50_us),
        uncontended.and_then(|r| r.listed_cycle_p50_us),
    ];
    for (mode, contenders) in CONFIGS {
        table_row(&mut out, reports, mode, contenders, raw_cycles);
    }
    if let Some(read) = uncontended.and_then(|r| r.read_p50_us) {
        let _ = writeln!(
            out,
            "\nraw limits in this run: create+delete p50 {}, create+listing+delete p50 {}, one read p50 {read:.0} µs, delete→notification p50 {}",
            us(raw_cycles[0]),
            us(raw_cycles[1]),
            us(raw(Mode::Contended, 2).and_then(|r| r.handoff_p50_us)),
        );
    }
    out
}

/// The table's row for one configuration, if zkfence ran in it.
fn table_row(
    out: &mut String,
    reports: &[Report],
    mode: Mode,
    contenders: usize,
    raw_cycles: [Option<f64>; 2],
) {
    let Some(ours) = find(reports, Impl::Zkfence, mode, contenders) else {
        return;
    };
    let others = [Impl::Zkclient, Impl::Curator].map(|i| find(reports, i, mode, contenders));
    let raw = find(reports, Impl::Raw, mode, contenders);
    let name = if mode == Mode::Contended {
        format!("contended N={contenders}")
    } else {
        "uncontended".to_owned()
    };
    let each = |f: &dyn Fn(&Report) -> Option<f64>| -> String {
        others
            .iter()
            .map(|other| ratio(f(ours), other.and_then(f)))
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let _ = writeln!(
        out,
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |",
        us(Some(ours.cycle_p50_us)),
        each(&|r| Some(r.cycle_p50_us)),
        raw_cycles
            .map(|raw| match mode {
                Mode::Uncontended => ratio(Some(ours.cycle_p50_us), raw),
                Mode::Contended => "-".to_owned(),
            })
            .join(" | "),
        us(ours.handoff_p50_us),
        each(&|r| r.handoff_p50_us),
        ratio(ours.handoff_p50_us, raw.and_then(|r| r.handoff_p50_us)),
        each(&|r| Some(r.acq_per_s())),
        ours.violations + others.iter().flatten().map(|r| r.violations).sum::<u64>(),
    );
}

/// Server requests (counted by the proxy, pings excluded) and writes (transactions, from the
/// zxid probes of the runs) per acquisition, for each lock.
fn per_acquisition_table(reports: &[Report], requests: &[(Impl, Mode, usize, f64)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| per acquisition | zkfence | zookeeper-client | Curator |"
    );
    let _ = writeln!(out, "| --- | --- | --- | --- |");
    let label = |mode: Mode, n: usize| match mode {
        Mode::Uncontended => "uncontended".to_owned(),
        Mode::Contended => format!("N={n}"),
    };
    for (mode, n) in [(Mode::Uncontended, 1), (Mode::Contended, 8)] {
        let cells: Vec<String> = LOCKS
            .iter()
            .map(|&i| {
                requests
                    .iter()
                    .find(|r| (r.0, r.1, r.2) == (i, mode, n))
                    .map_or("-".to_owned(), |r| format!("{:.2}", r.3))
            })
            .collect();
        if cells.iter().any(|c| c != "-") {
            let _ = writeln!(
                out,
                "| requests, {} | {} |",
                label(mode, n),
                cells.join(" | ")
            );
        }
    }
    for (mode, n) in CONFIGS {
        let cells: Vec<String> = LOCKS
            .iter()
            .map(|&i| {
                find(reports, i, mode, n)
                    .and_then(|r| r.writes_per_acq)
                    .map_or("-".to_owned(), |w| format!("{w:.2}"))
            })
            .collect();
        let _ = writeln!(
            out,
            "| server writes, {} | {} |",
            label(mode, n),
            cells.join(" | ")
        );
    }
    out
}

/// `a / b` to two decimals, `-` without both or with a zero `b`.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_owned(),
    }
}

/// Microseconds without decimals, `-` without a value.
fn us(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.0} µs"))
}
