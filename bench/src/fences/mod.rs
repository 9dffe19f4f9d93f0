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
//! One client of each store runs each variant back to back for `--seconds`, holding a real lock
//! (acquired once per round) whose ticket the fenced variants use. The variants of a store are
//! interleaved in each round, each round starting with another, and the ratios (fenced ÷
//! unfenced throughput) are taken per round, then summarised as their median and range, so
//! that the drift of a noisy machine hits both sides of a ratio alike and shows as spread.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use zkfence::fence::{FenceTicket, ZooKeeperFence};
use zkfence::{Acquire, FencedLock, LockOptions};
use zkfence_harness::LocalPostgres;
use zkfence_postgres::PostgresFence;
use zookeeper_client as zk;

use super::options::Args;
use super::rounds::{with_round, Spread};
use super::stats::{per_second, Latencies};
use super::workload::connect_raw;
use crate::support::EXIT_USAGE;

mod links;
mod others;

use links::Links;

use others::Op;

/// Rounds when `--rounds` is not given.
const DEFAULT_ROUNDS: usize = 5;
/// Measured seconds per variant and round when `--seconds` is not given.
const DEFAULT_SECONDS: f64 = 3.0;
/// The data node every ZooKeeper variant writes.
const DATA: &str = "/bench-fence/data";
/// The fence node of the fence-node variant (claimed once per round, before it is measured).
const FENCE_NODE: &str = "/bench-fence/fence";
/// The lock held while measuring: its ticket fences the fenced variants.
const LOCK: &str = "/bench-fence/lock";
/// What the ZooKeeper variants write.
const PAYLOAD: &[u8] = b"zkfence-bench --fences";
/// The PostgreSQL variants' one statement.
const UPDATE: &str = "UPDATE bench_counter SET v = v + 1 WHERE id = 1";
/// The PostgreSQL variants' table, with the one row they update.
const SETUP: &str =
    "CREATE TABLE IF NOT EXISTS bench_counter (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO bench_counter (id, v) VALUES (1, 0) ON CONFLICT (id) DO NOTHING";

/// One way of writing, timed on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// BEGIN; UPDATE; COMMIT.
    PgUnfenced,
    /// The same in `PostgresFence::transaction`: BEGIN; claim; UPDATE; check; COMMIT.
    PgFenced,
    /// A plain `set_data`.
    ZkSetData,
    /// `ZooKeeperFence::new`: one multi, check(holder's node) + set_data.
    ZkNodeCheck,
    /// `ZooKeeperFence::with_fence_node`: one multi (the fence remembers the node's version
    /// from its last commit; a read first only when another writer moved it),
    /// check(holder's node) + the fence node's version check + set_data.
    ZkFenceNode,
    /// MySQL: START TRANSACTION; UPDATE; COMMIT.
    MyUnfenced,
    /// The same in `MySqlFence::transaction`.
    MyFenced,
    /// Redis: a plain SET.
    RedisSet,
    /// The same SET in `RedisFence::write`'s script.
    RedisFenced,
    /// An object store: a plain put.
    S3Put,
    /// `ObjectFence::put` of the same bytes.
    S3Fenced,
}

impl Variant {
    /// The variant as the JSON lines name it.
    fn name(self) -> &'static str {
        match self {
            Variant::PgUnfenced => "postgres_unfenced",
            Variant::PgFenced => "postgres_fenced",
            Variant::ZkSetData => "zookeeper_set_data",
            Variant::ZkNodeCheck => "zookeeper_fenced_node_check",
            Variant::ZkFenceNode => "zookeeper_fenced_fence_node",
            Variant::MyUnfenced => "mysql_unfenced",
            Variant::MyFenced => "mysql_fenced",
            Variant::RedisSet => "redis_set",
            Variant::RedisFenced => "redis_fenced",
            Variant::S3Put => "object_store_put",
            Variant::S3Fenced => "object_store_fenced",
        }
    }

    /// The variant in the summary, beside its throughput.
    fn label(self) -> &'static str {
        match self {
            Variant::PgUnfenced | Variant::MyUnfenced => "unfenced",
            Variant::ZkSetData => "set_data",
            Variant::RedisSet => "SET",
            Variant::S3Put => "put",
            _ => "fenced",
        }
    }

    /// What one operation is called, in throughputs (`tx/s`, `writes/s`).
    fn unit(self) -> &'static str {
        match self {
            Variant::PgUnfenced | Variant::PgFenced | Variant::MyUnfenced | Variant::MyFenced => {
                "tx"
            }
            _ => "writes",
        }
    }
}

/// The PostgreSQL variants, interleaved in each round.
const POSTGRES: [Variant; 2] = [Variant::PgUnfenced, Variant::PgFenced];
/// The ZooKeeper variants, interleaved in each round.
const ZOOKEEPER: [Variant; 3] = [
    Variant::ZkSetData,
    Variant::ZkNodeCheck,
    Variant::ZkFenceNode,
];

/// The other stores' variants, each pair interleaved in each round.
const OTHERS: [[Variant; 2]; 3] = [
    [Variant::MyUnfenced, Variant::MyFenced],
    [Variant::RedisSet, Variant::RedisFenced],
    [Variant::S3Put, Variant::S3Fenced],
];

/// A ratio reported: its summary label, its JSON key, and (fenced, unfenced), whose
/// throughputs it divides.
type Ratio = (&'static str, &'static str, Variant, Variant);

/// The ratios reported, in the summary's order.
const RATIOS: [Ratio; 6] = [
    (
        "postgres  fenced tx ÷ unfenced tx",
        "postgres_fenced_per_unfenced",
        Variant::PgFenced,
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
        "redis     fenced write ÷ SET",
        "redis_fenced_per_set",
        Variant::RedisFenced,
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
    /// Operations completed in the window.
    ops: u64,
    /// The window, as measured (it ends with the operation that crosses `--seconds`).
    seconds: f64,
    /// Each operation's latency, from its call to its return.
    latencies: Latencies,
    /// The mean latency in microseconds (one client: the window over the operations).
    mean_us: f64,
}

impl Side {
    /// Operations per second of the window.
    fn per_s(&self) -> f64 {
        per_second(self.ops, self.seconds)
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

/// The clients and fences the variants write through: one connection to each store, so that
/// every variant runs sequentially, one operation at a time.
struct Stores {
    /// The PostgreSQL connection.
    pg: tokio_postgres::Client,
    /// The PostgreSQL fence (installed in the throwaway database).
    pg_fence: PostgresFence,
    /// The ZooKeeper session (it also holds the lock).
    zk: zk::Client,
    /// The fence by the holder's node.
    node_check: ZooKeeperFence,
    /// The fence with a fence node.
    fence_node: ZooKeeperFence,
    /// MySQL, Redis and the object store.
    others: others::Others,
    /// The links to them all.
    _links: Links,
}

impl Stores {
    /// One operation of `variant`, fenced (where it is) by `ticket`.
    async fn once(&mut self, variant: Variant, ticket: &FenceTicket) -> Result<(), String> {
        let pg = |e: tokio_postgres::Error| format!("postgres: {e}");
        let zk = |e: zk::Error| format!("zookeeper set_data {DATA}: {e}");
        let write = |ops: &mut zk::MultiWriter<'_>| ops.add_set_data(DATA, PAYLOAD, None);
        match variant {
            Variant::PgUnfenced => {
                let tx = self.pg.transaction().await.map_err(pg)?;
                tx.execute(UPDATE, &[]).await.map_err(pg)?;
                tx.commit().await.map_err(pg)?;
            }
            Variant::PgFenced => {
                self.pg_fence
                    .transaction(&mut self.pg, ticket, |tx| {
                        Box::pin(async move { tx.execute(UPDATE, &[]).await })
                    })
                    .await
                    .map_err(|e| format!("postgres fenced transaction: {e}"))?;
            }
            Variant::ZkSetData => {
                self.zk.set_data(DATA, PAYLOAD, None).await.map_err(zk)?;
            }
            Variant::ZkNodeCheck => {
                (self.node_check.write(ticket, write).await)
                    .map_err(|e| format!("zookeeper fenced write (node check): {e}"))?;
            }
            Variant::ZkFenceNode => {
                (self.fence_node.write(ticket, write).await)
                    .map_err(|e| format!("zookeeper fenced write (fence node): {e}"))?;
            }
            Variant::MyUnfenced => self.others.once(Op::MyUnfenced, ticket).await?,
            Variant::MyFenced => self.others.once(Op::MyFenced, ticket).await?,
            Variant::RedisSet => self.others.once(Op::RedisSet, ticket).await?,
            Variant::RedisFenced => self.others.once(Op::RedisFenced, ticket).await?,
            Variant::S3Put => self.others.once(Op::S3Put, ticket).await?,
            Variant::S3Fenced => self.others.once(Op::S3Fenced, ticket).await?,
        }
        Ok(())
    }

    /// `variant`'s operations, one after the other, for `seconds`.
    async fn measure(
        &mut self,
        variant: Variant,
        ticket: &FenceTicket,
        seconds: f64,
    ) -> Result<Side, String> {
        let mut samples = Vec::new();
        let start = Instant::now();
        let until = start + Duration::from_secs_f64(seconds);
        loop {
            let begun = Instant::now();
            if begun >= until {
                break;
            }
            self.once(variant, ticket).await?;
            samples.push(u64::try_from(begun.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        let seconds = start.elapsed().as_secs_f64();
        let ops = samples.len() as u64;
        Ok(Side {
            variant,
            ops,
            seconds,
            latencies: Latencies::from_nanos(&samples),
            mean_us: seconds * 1e6 / ops.max(1) as f64,
        })
    }

    /// One round (`round` from 0): the lock acquired, the fence node claimed with its ticket,
    /// then each store's variants in turn, starting with the `round`th; the lock released.
    async fn round(
        &mut self,
        lock: &FencedLock,
        round: usize,
        seconds: f64,
    ) -> Result<Vec<Side>, String> {
        let guard = (lock.acquire().await).map_err(|e| format!("acquire {LOCK}: {e}"))?;
        let ticket = guard.ticket();
        (self.fence_node.claim(&ticket).await)
            .map_err(|e| format!("claim the fence node {FENCE_NODE}: {e}"))?;
        let mut sides = Vec::new();
        let groups = [&POSTGRES[..], &ZOOKEEPER[..]].into_iter();
        for store in groups.chain(OTHERS.iter().map(|pair| &pair[..])) {
            let mut order = store.to_vec();
            // Each round starts with another variant, so that none always runs first.
            let first = round % order.len();
            order.rotate_left(first);
            for variant in order {
                sides.push(self.measure(variant, &ticket, seconds).await?);
            }
        }
        (guard.release().await).map_err(|e| format!("release {LOCK}: {e}"))?;
        Ok(sides)
    }
}

/// `--fences`: a throwaway PostgreSQL, MariaDB, Redis and S3 server, the ZooKeeper at `hosts`, an unmeasured warm-up round
/// of `--warmup` seconds per variant, then the rounds, each its JSON line, then the summary.
pub(super) async fn fences(args: &Args, hosts: &str) -> Result<u8, String> {
    let rounds = args.rounds.unwrap_or(DEFAULT_ROUNDS);
    let seconds = args.seconds.unwrap_or(DEFAULT_SECONDS);
    let warmup_ok = args.warmup.is_finite() && args.warmup >= 0.0;
    let latency_ok = args.latency_ms.is_finite() && args.latency_ms >= 0.0;
    let seconds_ok = seconds.is_finite() && seconds > 0.0;
    if !(rounds > 0 && seconds_ok && warmup_ok && latency_ok) {
        eprintln!("zkfence: --fences needs --rounds of 1 or more, and --seconds (and --warmup, --latency-ms) that are positive numbers");
        return Ok(EXIT_USAGE);
    }
    let mut links = Links::new(args.latency_ms);
    if args.latency_ms > 0.0 {
        eprintln!(
            "bench: every link through a delaying proxy: {} ms more per round trip",
            args.latency_ms
        );
    }
    let log_dir = std::env::temp_dir().join(format!("zkfence-bench-fences-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
    let (postgres, pg) = start_postgres(&log_dir, &mut links).await?;
    let hosts = (hosts.split(',').map(|host| links.reach(host)))
        .collect::<Result<Vec<_>, _>>()?
        .join(",");
    let (zk, lock) = zookeeper(&hosts).await?;
    let others = others::Others::start(&log_dir, &mut links).await?;
    let mut stores = Stores {
        _links: links,
        others,
        pg,
        pg_fence: PostgresFence::new(),
        node_check: ZooKeeperFence::new(zk.clone()),
        fence_node: ZooKeeperFence::with_fence_node(zk.clone(), FENCE_NODE)
            .map_err(|e| e.to_string())?,
        zk,
    };
    if args.warmup > 0.0 {
        eprintln!(
            "bench: warming up, {} s per variant (not counted) ...",
            args.warmup
        );
        stores.round(&lock, 0, args.warmup).await?;
    }
    let mut all = Vec::new();
    for round in 0..rounds {
        eprintln!("bench fences round {}/{rounds} ...", round + 1);
        let sides = stores.round(&lock, round, seconds).await?;
        println!("{}", with_round(&round_json(seconds, &sides), round + 1));
        all.push(sides);
    }
    print!("{}", summary(rounds, seconds, args.latency_ms, &all));
    // The servers' shutdowns wait for their processes: off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || drop((stores, postgres))).await;
    let _ = std::fs::remove_dir_all(&log_dir);
    Ok(0)
}

/// A throwaway PostgreSQL (its log in `log_dir`), one connection to it, the counter table and
/// the fence installed.
async fn start_postgres(
    log_dir: &Path,
    links: &mut Links,
) -> Result<(LocalPostgres, tokio_postgres::Client), String> {
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
    let (client, connection) = tokio_postgres::connect(&conninfo, NoTls)
        .await
        .map_err(|e| format!("cannot reach the throwaway PostgreSQL: {e}"))?;
    tokio::spawn(connection);
    let setup = |e: tokio_postgres::Error| format!("postgres setup: {e}");
    client.batch_execute(SETUP).await.map_err(setup)?;
    PostgresFence::new().install(&client).await.map_err(setup)?;
    Ok((postgres, client))
}

/// A session to `hosts`, the data node, and the lock whose holds fence the fenced variants.
async fn zookeeper(hosts: &str) -> Result<(zk::Client, FencedLock), String> {
    let client = connect_raw(hosts).await?;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    (client.mkdir(DATA, &persistent).await).map_err(|e| format!("create {DATA}: {e}"))?;
    let lock = FencedLock::new(client.clone(), LOCK, LockOptions::default())
        .map_err(|e| format!("lock {LOCK}: {e}"))?;
    Ok((client, lock))
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
fn round_json(seconds: f64, sides: &[Side]) -> String {
    let mut out = format!("{{\"mode\":\"fences\",\"seconds\":{seconds}");
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
fn summary(rounds: usize, seconds: f64, latency_ms: f64, all: &[Vec<Side>]) -> String {
    let links = match latency_ms > 0.0 {
        true => format!(", every link {latency_ms} ms more per round trip"),
        false => String::new(),
    };
    let mut out = format!(
        "\nfences, {rounds} rounds of {seconds} s per variant{links} (throughput ratios per round: median (min–max)):\n"
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
            latencies: Latencies::from_nanos(&[1000, 2000]),
            mean_us: seconds * 1e6 / ops as f64,
        }
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
        // The fenced ZooKeeper writes did not run: no ratio.
        assert_eq!(ratio(&sides, RATIOS[1]), None);
        let json = round_json(3.0, &sides);
        assert!(
            json.contains("\"postgres_fenced_per_unfenced\":0.700"),
            "{json}"
        );
        assert!(
            json.contains("\"postgres_unfenced\":{\"ops\":300,"),
            "{json}"
        );
        let text = summary(1, 3.0, 0.0, &[sides]);
        assert!(text.contains("0.70 (0.70–0.70)"), "{text}");
        assert!(
            text.contains("unfenced 100 tx/s (mean 10000 µs), fenced 70 tx/s"),
            "{text}"
        );
    }
}
