//! `zkfence-bench --fences`: what fencing costs a writer, as ratios measured in the same run.
//!
//! - PostgreSQL: `UPDATE bench_counter SET v = v + 1 WHERE id = 1` in a transaction (BEGIN,
//!   the UPDATE, COMMIT), unfenced, and fenced by `zkfence_postgres::PostgresFence`, which
//!   adds the claim (`SELECT zkfence_claim($1, $2)`) as the first statement and the hold's
//!   check before COMMIT;
//! - ZooKeeper: a plain `set_data` of one node, against the same write fenced by
//!   `ZooKeeperFence` by the holder's node (one `multi`: check + set_data) and with a fence
//!   node too (one `multi`: check + the fence's version check +
//!   set_data);
//! - MySQL (a throwaway MariaDB): the same `UPDATE` in a transaction (START TRANSACTION, the
//!   UPDATE, COMMIT), unfenced, and in `zkfence_mysql::MySqlFence::transaction` (the claim
//!   batched with the transaction's start, the seal with its COMMIT);
//! - Redis: a plain `SET`, against the same `SET` in the fence's script
//!   (`zkfence_redis::RedisFence::write`: the compare and the command in one `EVALSHA`);
//! - an S3 server (`moto`, which enforces conditional writes): a plain `put` of a small object,
//!   against `zkfence_object_store::ObjectFence::put` of the same bytes (the token inside, an
//!   update-if-match on the version its last write left).
//!
//! Beside each store's fence, its floor: the same transaction with the least a fence could add
//! to it, a bare update of one more row (PostgreSQL: pipelined with the work, as the claim is;
//! MySQL: batched with the transaction's start), and for Redis the least script (a compare and
//! the `SET`) and the fence's function library (`FCALL`). No fence that writes its token in the
//! transaction can cost less than its floor.
//!
//! Each writer (`--fence-writers`, default 1) runs each variant back to back for `--seconds`
//! on its own connections, holding a real lock of its own (acquired once per round) whose
//! ticket the fenced variants use; with more than one, the writers write side by side on their
//! own scopes, rows and keys, and a variant's throughput is their sum. The variants of a store are
//! interleaved in each round, each round starting with another, and the ratios (fenced ÷
//! unfenced throughput) are taken per round, then summarised as their median and range, so
//! that the drift of a noisy machine hits both sides of a ratio alike and shows as spread.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use zkfence::Acquire;
use zkfence_harness::LocalPostgres;
use zkfence_postgres::PostgresFence;

use super::options::Args;
use super::rounds::{with_round, Spread};
use super::stats::{per_second, Latencies};
use crate::support::EXIT_USAGE;

mod links;
mod others;
mod variant;
mod writer;

use links::Links;
use variant::Variant;
use writer::{measure_all, Samples, Writer};

/// Rounds when `--rounds` is not given.
const DEFAULT_ROUNDS: usize = 5;
/// Measured seconds per variant and round when `--seconds` is not given.
const DEFAULT_SECONDS: f64 = 3.0;
/// The PostgreSQL variants' tables: the counter the work updates, and the floor's fence-like
/// table; each with a row per writer, made by [`pg_rows`].
const SETUP: &str = "CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, v bigint NOT NULL);
CREATE TABLE IF NOT EXISTS bench_floor (id int PRIMARY KEY, token bigint NOT NULL, claims bigint NOT NULL, updated timestamptz NOT NULL DEFAULT now())";

/// Each store's name (as `--fence-stores` takes it) and variants, interleaved in each round.
const STORES: [(&str, &[Variant]); 5] = [
    (
        "postgres",
        &[Variant::PgUnfenced, Variant::PgFenced, Variant::PgFloor],
    ),
    (
        "zookeeper",
        &[
            Variant::ZkSetData,
            Variant::ZkNodeCheck,
            Variant::ZkFenceNode,
        ],
    ),
    (
        "mysql",
        &[Variant::MyUnfenced, Variant::MyFenced, Variant::MyFloor],
    ),
    (
        "redis",
        &[
            Variant::RedisSet,
            Variant::RedisFenced,
            Variant::RedisFcall,
            Variant::RedisFloor,
        ],
    ),
    ("object-store", &[Variant::S3Put, Variant::S3Fenced]),
];

/// A ratio reported: its summary label, its JSON key, and (fenced, unfenced), whose
/// throughputs it divides.
type Ratio = (&'static str, &'static str, Variant, Variant);

/// The ratios reported, in the summary's order.
const RATIOS: [Ratio; 10] = [
    (
        "postgres  fenced tx ÷ unfenced tx",
        "postgres_fenced_per_unfenced",
        Variant::PgFenced,
        Variant::PgUnfenced,
    ),
    (
        "postgres  floor tx ÷ unfenced tx",
        "postgres_floor_per_unfenced",
        Variant::PgFloor,
        Variant::PgUnfenced,
    ),
    (
        "zookeeper fenced write (node check) ÷ set_data",
        "zookeeper_node_check_per_set_data",
        Variant::ZkNodeCheck,
        Variant::ZkSetData,
    ),
    (
        "zookeeper fenced write (fence node) ÷ set_data",
        "zookeeper_fence_node_per_set_data",
        Variant::ZkFenceNode,
        Variant::ZkSetData,
    ),
    (
        "mysql     fenced tx ÷ unfenced tx",
        "mysql_fenced_per_unfenced",
        Variant::MyFenced,
        Variant::MyUnfenced,
    ),
    (
        "mysql     floor tx ÷ unfenced tx",
        "mysql_floor_per_unfenced",
        Variant::MyFloor,
        Variant::MyUnfenced,
    ),
    (
        "redis     fenced write ÷ SET",
        "redis_fenced_per_set",
        Variant::RedisFenced,
        Variant::RedisSet,
    ),
    (
        "redis     fenced FCALL ÷ SET",
        "redis_fcall_per_set",
        Variant::RedisFcall,
        Variant::RedisSet,
    ),
    (
        "redis     floor script ÷ SET",
        "redis_floor_per_set",
        Variant::RedisFloor,
        Variant::RedisSet,
    ),
    (
        "object store fenced put ÷ put",
        "object_store_fenced_per_put",
        Variant::S3Fenced,
        Variant::S3Put,
    ),
];

/// One variant's measurement in one round.
#[derive(Debug, Clone)]
struct Side {
    /// What was measured.
    variant: Variant,
    /// Operations completed in the window, by every writer.
    ops: u64,
    /// The longest writer's window, as measured (each ends with the operation that crosses
    /// `--seconds`).
    seconds: f64,
    /// Operations per second: the sum of each writer's over its own window.
    per_s: f64,
    /// Each operation's latency, from its call to its return.
    latencies: Latencies,
    /// The mean latency in microseconds.
    mean_us: f64,
}

impl Side {
    /// `variant`'s side from its writers' samples.
    fn of(variant: Variant, samples: &[Samples]) -> Side {
        let nanos: Vec<u64> = samples
            .iter()
            .flat_map(|s| s.nanos.iter().copied())
            .collect();
        let ops = nanos.len() as u64;
        let total: f64 = nanos.iter().map(|&n| n as f64 / 1e3).sum();
        Side {
            variant,
            ops,
            seconds: samples.iter().map(|s| s.seconds).fold(0.0, f64::max),
            per_s: (samples.iter())
                .map(|s| per_second(s.nanos.len() as u64, s.seconds))
                .sum(),
            latencies: Latencies::from_nanos(&nanos),
            mean_us: total / ops.max(1) as f64,
        }
    }

    /// Operations per second, of every writer together.
    fn per_s(&self) -> f64 {
        self.per_s
    }

    /// The side's JSON object.
    fn json(&self) -> String {
        format!(
            "{{\"ops\":{},\"seconds\":{:.3},\"ops_per_s\":{:.1},\"mean_us\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
            self.ops,
            self.seconds,
            self.per_s(),
            self.mean_us,
            self.latencies.percentile_or_zero(0.5),
            self.latencies.percentile_or_zero(0.99),
        )
    }
}

/// One round (`round` from 0): every writer's lock acquired and its fence node claimed with
/// its ticket, then each store's variants in turn, starting with the `round`th, each measured
/// for every writer side by side; the locks released.
async fn round(
    writers: Vec<Writer>,
    stores: &[&[Variant]],
    round: usize,
    seconds: f64,
) -> Result<(Vec<Writer>, Vec<Side>), String> {
    let mut held = Vec::new();
    let mut guards = Vec::new();
    for writer in writers {
        let path = writer.lock.path().to_owned();
        let guard = (writer.lock.acquire().await).map_err(|e| format!("acquire {path}: {e}"))?;
        let ticket = guard.ticket();
        writer.claim_fence_node(&ticket).await?;
        held.push((writer, ticket));
        guards.push((guard, path));
    }
    let mut sides = Vec::new();
    for store in stores {
        let mut order = store.to_vec();
        // Each round starts with another variant, so that none always runs first.
        let first = round % order.len();
        order.rotate_left(first);
        for variant in order {
            let (back, samples) = measure_all(held, variant, seconds).await?;
            held = back;
            sides.push(Side::of(variant, &samples));
        }
    }
    for (guard, path) in guards {
        (guard.release().await).map_err(|e| format!("release {path}: {e}"))?;
    }
    Ok((held.into_iter().map(|(w, _)| w).collect(), sides))
}

/// `--fences`: a throwaway PostgreSQL, MariaDB, Redis and S3 server, the ZooKeeper at `hosts`,
/// `--fence-writers` writers, an unmeasured warm-up round of `--warmup` seconds per variant,
/// then the rounds, each its JSON line, then the summary.
pub(super) async fn fences(args: &Args, hosts: &str) -> Result<u8, String> {
    let rounds = args.rounds.unwrap_or(DEFAULT_ROUNDS);
    let seconds = args.seconds.unwrap_or(DEFAULT_SECONDS);
    let warmup_ok = args.warmup.is_finite() && args.warmup >= 0.0;
    let latency_ok = args.latency_ms.is_finite() && args.latency_ms >= 0.0;
    let seconds_ok = seconds.is_finite() && seconds > 0.0;
    let writers_ok = (1..=64).contains(&args.fence_writers);
    if !(rounds > 0 && seconds_ok && warmup_ok && latency_ok && writers_ok) {
        eprintln!("zkfence: --fences needs --rounds of 1 or more, --fence-writers from 1 to 64, and --seconds (and --warmup, --latency-ms) that are positive numbers");
        return Ok(EXIT_USAGE);
    }
    let names = &args.fence_stores;
    if let Some(bad) = names.iter().find(|n| STORES.iter().all(|(s, _)| s != n)) {
        let known: Vec<&str> = STORES.iter().map(|(s, _)| *s).collect();
        eprintln!(
            "zkfence: --fence-stores: no store `{bad}`: name some of {}",
            known.join(", ")
        );
        return Ok(EXIT_USAGE);
    }
    let stores: Vec<&[Variant]> = (STORES.iter())
        .filter(|(name, _)| names.is_empty() || names.iter().any(|n| n == name))
        .map(|(_, variants)| *variants)
        .collect();
    let mut links = Links::new(args.latency_ms);
    if args.latency_ms > 0.0 {
        eprintln!(
            "bench: every link through a delaying proxy: {} ms more per round trip",
            args.latency_ms
        );
    }
    let log_dir = std::env::temp_dir().join(format!("zkfence-bench-fences-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let count = args.fence_writers;
    let (postgres, conninfo) = start_postgres(&log_dir, &mut links, count).await?;
    let hosts = (hosts.split(',').map(|host| links.reach(host)))
        .collect::<Result<Vec<_>, _>>()?
        .join(",");
    let servers = others::Servers::start(&log_dir, &mut links, count).await?;
    let mut writers = Vec::new();
    for index in 0..count {
        writers.push(Writer::new(index, &hosts, &conninfo, &servers).await?);
    }
    if args.warmup > 0.0 {
        eprintln!(
            "bench: warming up, {} s per variant (not counted) ...",
            args.warmup
        );
        writers = round(writers, &stores, 0, args.warmup).await?.0;
    }
    let mut all = Vec::new();
    for r in 0..rounds {
        eprintln!("bench fences round {}/{rounds} ...", r + 1);
        let (back, sides) = round(writers, &stores, r, seconds).await?;
        writers = back;
        println!("{}", with_round(&round_json(seconds, count, &sides), r + 1));
        all.push(sides);
    }
    let setting = (args.latency_ms, count);
    print!("{}", summary(rounds, seconds, setting, &all));
    // The servers' shutdowns wait for their processes: off the runtime's threads.
    drop(writers);
    let _ = tokio::task::spawn_blocking(move || drop((servers, links, postgres))).await;
    let _ = std::fs::remove_dir_all(&log_dir);
    Ok(0)
}

/// A throwaway PostgreSQL (its log in `log_dir`), the tables with a row per writer and the
/// fence installed; the conninfo its writers dial (through `links`).
async fn start_postgres(
    log_dir: &Path,
    links: &mut Links,
    writers: usize,
) -> Result<(LocalPostgres, String), String> {
    eprintln!("bench: starting a throwaway PostgreSQL on a loopback port ...");
    let dir: PathBuf = log_dir.to_owned();
    let started = tokio::task::spawn_blocking(move || LocalPostgres::start(&dir)).await;
    let postgres = started.map_err(|e| e.to_string())??;
    let port = postgres.port();
    let reached = links.reach(&format!("127.0.0.1:{port}"))?;
    let conninfo = postgres.conninfo("postgres").replace(
        &format!("port={port}"),
        &format!("port={}", reached.rsplit(':').next().unwrap_or_default()),
    );
    let (client, connection) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot reach the throwaway PostgreSQL: {e}"))?;
    tokio::spawn(connection);
    let setup = |e: tokio_postgres::Error| format!("postgres setup: {e}");
    client.batch_execute(SETUP).await.map_err(setup)?;
    client
        .batch_execute(&pg_rows(writers))
        .await
        .map_err(setup)?;
    PostgresFence::new().install(&client).await.map_err(setup)?;
    Ok((postgres, conninfo))
}

/// The statements that give each of `writers` writers its row in both PostgreSQL tables.
fn pg_rows(writers: usize) -> String {
    (1..=writers)
        .map(|id| {
            format!(
                "INSERT INTO bench_counter (id, v) VALUES ({id}, 0) ON CONFLICT (id) DO NOTHING;
INSERT INTO bench_floor (id, token, claims) VALUES ({id}, 0, 0) ON CONFLICT (id) DO NOTHING;\n"
            )
        })
        .collect()
}

/// The side of `variant` in a round's sides.
fn side(sides: &[Side], variant: Variant) -> Option<&Side> {
    sides.iter().find(|s| s.variant == variant)
}

/// A ratio's value in one round: the fenced throughput ÷ the unfenced one.
fn ratio(sides: &[Side], (_, _, fenced, unfenced): Ratio) -> Option<f64> {
    let (fenced, unfenced) = (side(sides, fenced)?.per_s(), side(sides, unfenced)?.per_s());
    (unfenced > 0.0).then(|| fenced / unfenced)
}

/// A round's JSON line (its round number is added by the caller): each variant's figures, and
/// the ratios.
fn round_json(seconds: f64, writers: usize, sides: &[Side]) -> String {
    let mut out = format!("{{\"mode\":\"fences\",\"seconds\":{seconds},\"writers\":{writers}");
    for side in sides {
        let _ = write!(out, ",\"{}\":{}", side.variant.name(), side.json());
    }
    out.push_str(",\"ratios\":{");
    let ratios: Vec<String> = (RATIOS.iter())
        .filter_map(|&r| ratio(sides, r).map(|v| format!("\"{}\":{v:.3}", r.1)))
        .collect();
    out.push_str(&ratios.join(","));
    out.push_str("}}");
    out
}

/// The summary: per ratio, its median and range over the rounds, and the median throughput and
/// mean latency of both sides.
fn summary(
    rounds: usize,
    seconds: f64,
    (latency_ms, writers): (f64, usize),
    all: &[Vec<Side>],
) -> String {
    let links = match latency_ms > 0.0 {
        true => format!(", every link {latency_ms} ms more per round trip"),
        false => String::new(),
    };
    let writers = match writers {
        1 => "one writer".to_owned(),
        n => format!("{n} writers on {n} scopes"),
    };
    let mut out = format!(
        "\nfences, {writers}, {rounds} rounds of {seconds} s per variant{links} (throughput ratios per round: median (min–max)):\n"
    );
    let width = RATIOS
        .iter()
        .map(|r| r.0.chars().count())
        .max()
        .unwrap_or(0);
    let median = |variant: Variant, f: fn(&Side) -> f64| {
        let values: Vec<f64> = (all.iter())
            .filter_map(|sides| side(sides, variant).map(f))
            .collect();
        Spread::of(&values).map(|s| s.median)
    };
    for r in RATIOS {
        let (label, _, fenced, unfenced) = r;
        let ratios: Vec<f64> = all.iter().filter_map(|sides| ratio(sides, r)).collect();
        if ratios.is_empty() {
            continue; // a store not measured
        }
        let spread = Spread::of(&ratios).map_or("-".into(), Spread::show);
        let mut line = format!("{label:<width$}   {spread:<16}");
        for (i, variant) in [unfenced, fenced].into_iter().enumerate() {
            let per_s = median(variant, Side::per_s).map_or("-".into(), thousands);
            let mean = median(variant, |s| s.mean_us).map_or("-".into(), |m| format!("{m:.0}"));
            let _ = write!(
                line,
                "{}{} {per_s} {}/s (mean {mean} µs)",
                if i == 0 { "   " } else { ", " },
                variant.label(),
                variant.unit()
            );
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// `v` rounded, its thousands separated by commas: `2,910`.
fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < -0.5 {
        out.insert(0, '-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(variant: Variant, ops: u64, seconds: f64) -> Side {
        Side {
            variant,
            ops,
            seconds,
            per_s: ops as f64 / seconds,
            latencies: Latencies::from_nanos(&[1000, 2000]),
            mean_us: seconds * 1e6 / ops as f64,
        }
    }

    #[test]
    fn writers_throughputs_add_up_and_their_latencies_merge() {
        let samples = [
            Samples {
                nanos: vec![1_000_000; 100],
                seconds: 1.0,
            },
            Samples {
                nanos: vec![3_000_000; 50],
                seconds: 2.0,
            },
        ];
        let side = Side::of(Variant::RedisSet, &samples);
        assert_eq!(side.ops, 150);
        assert_eq!(side.seconds, 2.0);
        assert_eq!(side.per_s(), 125.0);
        assert!(
            (side.mean_us - 5_000_000.0 / 3.0 / 1e3 * 1.0).abs() < 1e-6,
            "{}",
            side.mean_us
        );
        assert_eq!(side.latencies.percentile(1.0), Some(3000.0));
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(2910.4), "2,910");
        assert_eq!(thousands(999.6), "1,000");
        assert_eq!(thousands(12.0), "12");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }

    #[test]
    fn ratios_divide_fenced_by_unfenced_throughput_per_round() {
        let sides = vec![
            side(Variant::PgUnfenced, 300, 3.0),
            side(Variant::PgFenced, 210, 3.0),
            side(Variant::ZkSetData, 400, 2.0),
        ];
        assert_eq!(ratio(&sides, RATIOS[0]), Some(0.7));
        // The floor and the fenced ZooKeeper writes did not run: no ratio.
        assert_eq!(ratio(&sides, RATIOS[1]), None);
        assert_eq!(ratio(&sides, RATIOS[2]), None);
        let json = round_json(3.0, 1, &sides);
        assert!(
            json.contains("\"postgres_fenced_per_unfenced\":0.700"),
            "{json}"
        );
        assert!(
            json.contains("\"postgres_unfenced\":{\"ops\":300,"),
            "{json}"
        );
        let text = summary(1, 3.0, (0.0, 1), &[sides]);
        assert!(text.contains("0.70 (0.70–0.70)"), "{text}");
        assert!(
            text.contains("unfenced 100 tx/s (mean 10000 µs), fenced 70 tx/s"),
            "{text}"
        );
    }
}
