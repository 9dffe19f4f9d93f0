//! `zkfence-bench --rounds R`: zkfence and its peers measured in turns, R rounds of every
//! configuration, each round starting with a different implementation; then the ratios of
//! zkfence to each peer per round, summarised as the median and the range, so that one noisy
//! run can neither make nor break a claim. Every run is its own JSON line; the counts
//! (requests and notifications per acquisition, through a proxy) and the CPU per acquisition
//! (this process or Curator's JVM, and the server when the bench started it) come with them.

use std::fmt::Write as _;

use super::measure::{self, Counted};
use super::options::{Args, Impl, Mode, Run};
use super::report::Report;

/// One configuration: N contenders (1: uncontended, each on a lock of its own).
fn mode_of(contenders: usize) -> Mode {
    if contenders <= 1 {
        Mode::Uncontended
    } else {
        Mode::Contended
    }
}

/// Every run of the rounds, by round.
struct Runs {
    /// (round, report)
    timed: Vec<(usize, Report)>,
    /// (implementation, contenders, counts)
    counted: Vec<(Impl, usize, Counted)>,
}

impl Runs {
    /// `implementation`'s report in `round` with `contenders`.
    fn find(&self, round: usize, implementation: Impl, contenders: usize) -> Option<&Report> {
        self.timed
            .iter()
            .map(|(r, report)| (*r, report))
            .find_map(|(r, report)| {
                (r == round
                    && report.implementation == implementation.name()
                    && report.contenders == contenders
                    && report.mode == mode_of(contenders).name())
                .then_some(report)
            })
    }

    /// Per round, `f(zkfence) / f(peer)` in the configuration, where both ran.
    fn ratios(
        &self,
        rounds: usize,
        peer: Impl,
        contenders: usize,
        f: impl Fn(&Report) -> Option<f64>,
    ) -> Vec<f64> {
        (0..rounds)
            .filter_map(|round| {
                let ours = f(self.find(round, Impl::Zkfence, contenders)?)?;
                let theirs = f(self.find(round, peer, contenders)?)?;
                (theirs > 0.0).then(|| ours / theirs)
            })
            .collect()
    }

    /// The median over the rounds of `f` for `implementation` in the configuration.
    fn median(
        &self,
        rounds: usize,
        implementation: Impl,
        contenders: usize,
        f: impl Fn(&Report) -> Option<f64>,
    ) -> Option<f64> {
        let values: Vec<f64> = (0..rounds)
            .filter_map(|round| f(self.find(round, implementation, contenders)?))
            .collect();
        Spread::of(&values).map(|s| s.median)
    }

    fn counts(&self, implementation: Impl, contenders: usize) -> Option<&Counted> {
        (self.counted.iter())
            .find(|(i, n, _)| *i == implementation && *n == contenders)
            .map(|(_, _, c)| c)
    }
}

/// The median and range of some values (per-round ratios; `--fences` shares it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    /// The middle value (the mean of the two middle ones for an even count).
    pub(super) median: f64,
    /// The lowest value.
    pub(super) min: f64,
    /// The highest value.
    pub(super) max: f64,
}

impl Spread {
    /// The spread of `values`; `None` without any.
    pub(super) fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        if n == 0 {
            return None;
        }
        let median = match n % 2 {
            1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }

    /// `1.12 (1.03–1.20)`.
    pub(super) fn show(self) -> String {
        format!("{:.2} ({:.2}–{:.2})", self.median, self.min, self.max)
    }
}

/// The implementations measured: zkfence, then the peers asked for (once each).
fn implementations(args: &Args) -> Vec<Impl> {
    let mut all = vec![Impl::Zkfence];
    for &peer in &args.peers {
        if !all.contains(&peer) && peer != Impl::Raw {
            all.push(peer);
        }
    }
    all
}

/// The servers the runs go to: ZooKeeper's hosts, and the process ids whose CPU is measured
/// (ZooKeeper's and, for the Redis peers, Redis's, when the bench started them).
#[derive(Debug, Clone)]
pub(super) struct Servers<'a> {
    pub(super) hosts: &'a str,
    pub(super) zookeeper_pid: Option<i32>,
    pub(super) redis: Option<(std::net::SocketAddr, Option<i32>)>,
}

impl Servers<'_> {
    /// `implementation`'s run of (`mode`, `n`), pointed at its server.
    fn run(&self, args: &Args, implementation: Impl, mode: Mode, n: usize) -> Run {
        let run = Run::new(args, implementation, mode, n);
        match (implementation.redis_waiting(), self.redis) {
            (Some(_), Some((addr, pid))) => Run {
                redis: Some(addr),
                server_pid: pid,
                ..run
            },
            _ => Run {
                server_pid: self.zookeeper_pid,
                ..run
            },
        }
    }
}

/// `--rounds`: the runs, the counts, the summary; the exit code (a violation fails it).
pub(super) async fn rounds(args: &Args, servers: Servers<'_>) -> Result<u8, String> {
    measure::warm_up(args, servers.hosts).await?;
    let impls = implementations(args);
    let rounds = args.rounds.unwrap_or(1).max(1);
    let mut runs = Runs {
        timed: Vec::new(),
        counted: Vec::new(),
    };
    for round in 0..rounds {
        for &contenders in &args.configs {
            // Each round starts with another implementation, so that none always runs first.
            let mut order = impls.clone();
            order.rotate_left(round % impls.len());
            order.push(Impl::Raw);
            for implementation in order {
                let report = timed(args, &servers, round, implementation, contenders).await?;
                runs.timed.push((round, report));
            }
        }
    }
    eprintln!("bench: counting requests and notifications per acquisition ...");
    for &contenders in &args.configs {
        for &implementation in &impls {
            let run = Run {
                seconds: 2.0,
                ..servers.run(args, implementation, mode_of(contenders), contenders)
            };
            let (report, counted) = match implementation.redis_waiting() {
                Some(_) => measure::counted_redis(run, &args.lock).await?,
                None => measure::counted(run, servers.hosts, &args.lock).await?,
            };
            println!("{}", counted.json(&report));
            runs.counted.push((implementation, contenders, counted));
        }
    }
    print!("{}", summary(args, &impls, rounds, &runs));
    let violated = runs.timed.iter().any(|(_, r)| r.violations > 0);
    Ok(if violated {
        crate::support::EXIT_FAILURE
    } else {
        0
    })
}

/// One timed run, printed as its JSON line with its round.
async fn timed(
    args: &Args,
    servers: &Servers<'_>,
    round: usize,
    implementation: Impl,
    contenders: usize,
) -> Result<Report, String> {
    // The raw limits: the uncontended cycle with one client, the notification with two.
    let (mode, n) = match (implementation, mode_of(contenders)) {
        (Impl::Raw, Mode::Uncontended) => (Mode::Uncontended, 1),
        (Impl::Raw, Mode::Contended) => (Mode::Contended, 2),
        (_, mode) => (mode, contenders),
    };
    eprintln!(
        "bench round {}: {} {} x{n} ...",
        round + 1,
        implementation.name(),
        mode.name()
    );
    let run = servers.run(args, implementation, mode, n);
    let mut report = run.execute_apart(servers.hosts, &args.lock).await?;
    // Filed under the configuration it was measured for.
    report.contenders = contenders;
    report.mode = mode_of(contenders).name();
    println!("{}", with_round(&report.json(), round + 1));
    Ok(report)
}

/// A run's JSON line with its round first.
pub(super) fn with_round(json: &str, round: usize) -> String {
    // The round goes right after the object's opening brace.
    let at = json.find(OPENING_BRACE).map_or(0, |i| i + 1);
    let mut line = json.to_owned();
    line.insert_str(at, &format!("\"round\":{round},"));
    line
}

/// `{`, spelled so that brace counting tools see balanced source.
const OPENING_BRACE: char = '\u{7b}';

/// The summary: per configuration, zkfence's figures and its ratios to each peer (median and
/// range over the rounds), the counts and the CPU; then the raw limits' ratios.
fn summary(args: &Args, impls: &[Impl], rounds: usize, runs: &Runs) -> String {
    let peers: Vec<Impl> = impls[1..].to_vec();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{rounds} rounds, {} s each (after {} s unmeasured); ratios are zkfence ÷ peer per round: median (min–max).\n",
        args.seconds(), args.warmup
    );
    let mut header = String::from("| N | zkfence acq/s |");
    for peer in &peers {
        let _ = write!(
            header,
            " throughput ÷ {0} | cycle p50 ÷ {0} | handoff p50 ÷ {0} |",
            peer.name()
        );
    }
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "|{}", " --- |".repeat(2 + 3 * peers.len()));
    for &n in &args.configs {
        let acq = runs.median(rounds, Impl::Zkfence, n, |r| Some(r.acq_per_s()));
        let mut row = format!(
            "| {} | {} |",
            label(n),
            acq.map_or("-".into(), |a| format!("{a:.0}"))
        );
        for &peer in &peers {
            let cells = [
                Spread::of(&runs.ratios(rounds, peer, n, |r| Some(r.acq_per_s()))),
                Spread::of(&runs.ratios(rounds, peer, n, |r| Some(r.cycle_p50_us))),
                Spread::of(&runs.ratios(rounds, peer, n, |r| r.handoff_p50_us)),
            ];
            for cell in cells {
                let _ = write!(row, " {} |", cell.map_or("-".into(), Spread::show));
            }
        }
        let _ = writeln!(out, "{row}");
    }
    out.push_str(&per_acquisition_table(impls, rounds, runs, &args.configs));
    out.push_str(&raw_ratios(rounds, runs, &args.configs));
    out
}

/// `uncontended` or `N=8`.
fn label(contenders: usize) -> String {
    match mode_of(contenders) {
        Mode::Uncontended => "uncontended".into(),
        Mode::Contended => format!("N={contenders}"),
    }
}

/// One figure of an implementation in a configuration (contenders).
type Figure<'a> = dyn Fn(Impl, usize) -> Option<f64> + 'a;

/// Requests, notifications and CPU per acquisition, every implementation side by side.
fn per_acquisition_table(impls: &[Impl], rounds: usize, runs: &Runs, configs: &[usize]) -> String {
    let mut out = String::new();
    let names: Vec<&str> = impls.iter().map(|i| i.name()).collect();
    let _ = writeln!(out, "\n| per acquisition | {} |", names.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(1 + impls.len()));
    let rows: [(&str, &Figure); 4] = [
        ("requests", &|i, n| runs.counts(i, n).map(|c| c.requests)),
        ("notifications", &|i, n| {
            (runs.counts(i, n).map(|c| c.notifications)).filter(|v| !v.is_nan())
        }),
        ("client CPU µs (median)", &|i, n| {
            runs.median(rounds, i, n, |r| r.client_cpu_us)
        }),
        ("server CPU µs (median)", &|i, n| {
            runs.median(rounds, i, n, |r| r.server_cpu_us)
        }),
    ];
    for (name, f) in rows {
        for &n in configs {
            let cells: Vec<String> = (impls.iter())
                .map(|&i| f(i, n).map_or("-".into(), |v| format!("{v:.2}")))
                .collect();
            if cells.iter().any(|c| c != "-") {
                let _ = writeln!(out, "| {name}, {} | {} |", label(n), cells.join(" | "));
            }
        }
    }
    out
}

/// zkfence against the raw limits measured in the same rounds: the uncontended cycle ÷ a
/// create with the listing pipelined behind it + delete, and the handoff ÷ one delete's
/// notification.
fn raw_ratios(rounds: usize, runs: &Runs, configs: &[usize]) -> String {
    let mut out = String::from("\n");
    for &n in configs {
        let (what, ratios) = match mode_of(n) {
            Mode::Uncontended => (
                "cycle p50 ÷ raw create+listing+delete",
                ratio_to_raw(
                    rounds,
                    runs,
                    n,
                    |r| Some(r.cycle_p50_us),
                    |raw| raw.listed_cycle_p50_us,
                ),
            ),
            Mode::Contended => (
                "handoff p50 ÷ raw delete→notification",
                ratio_to_raw(
                    rounds,
                    runs,
                    n,
                    |r| r.handoff_p50_us,
                    |raw| raw.handoff_p50_us,
                ),
            ),
        };
        if let Some(spread) = Spread::of(&ratios) {
            let _ = writeln!(out, "zkfence {}, {what}: {}", label(n), spread.show());
        }
    }
    out
}

fn ratio_to_raw(
    rounds: usize,
    runs: &Runs,
    contenders: usize,
    ours: impl Fn(&Report) -> Option<f64>,
    raw: impl Fn(&Report) -> Option<f64>,
) -> Vec<f64> {
    (0..rounds)
        .filter_map(|round| {
            let ours = ours(runs.find(round, Impl::Zkfence, contenders)?)?;
            let raw = raw(runs.find(round, Impl::Raw, contenders)?)?;
            (raw > 0.0).then(|| ours / raw)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_is_the_median_and_the_range() {
        let odd = Spread::of(&[1.2, 0.9, 1.1]).unwrap();
        assert_eq!((odd.median, odd.min, odd.max), (1.1, 0.9, 1.2));
        let even = Spread::of(&[1.0, 2.0, 4.0, 3.0]).unwrap();
        assert_eq!(even.median, 2.5);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(odd.show(), "1.10 (0.90–1.20)");
    }

    #[test]
    fn the_round_comes_first_in_a_runs_line() {
        assert_eq!(
            with_round(r#"{"impl":"zkfence"}"#, 2),
            r#"{"round":2,"impl":"zkfence"}"#
        );
    }

    #[test]
    fn one_contender_is_the_uncontended_configuration() {
        assert_eq!(mode_of(1), Mode::Uncontended);
        assert_eq!(mode_of(2), Mode::Contended);
        assert_eq!(label(1), "uncontended");
        assert_eq!(label(32), "N=32");
    }
}
