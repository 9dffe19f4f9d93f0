//! `zkfence demo`: worker processes increment a counter in a SQLite store under the lock; the
//! holder is frozen (SIGSTOP) in the middle of its write for twice its session timeout. With
//! fencing, its late write is refused and no increment is lost; without, one is. With
//! `--redis HOST:PORT`, a third run does the same under a Redis lock on that server (its TTL the
//! session timeout): no token to fence with, no watchdog to tell the frozen holder, and an
//! increment is lost.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use zkfence::Acquire;

use rusqlite::{params, Connection, TransactionBehavior};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;
use zkfence::{FencedLock, LockOptions};

use crate::connect::Connection as ZkConnection;
use crate::duration::parse_duration;
#[cfg(not(feature = "redis"))]
use crate::exit::EXIT_USAGE;
use crate::exit::{fail, EXIT_FAILURE};
use zkfence_testkit::start_local_zookeeper;

#[cfg(feature = "redis")]
mod redis_lock;

/// What `demo --redis` says in a `zkfence` built without the Redis lock.
#[cfg(not(feature = "redis"))]
const WITHOUT_REDIS: &str = "this zkfence was built without the redis feature, which --redis needs: cargo install zkfence-cli --features demo,redis (or --features full)";

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  zkfence demo                              # starts a throwaway local ZooKeeper itself
  zkfence demo --connect 127.0.0.1:2181     # uses yours (it creates /zkfence-demo)
  zkfence demo --redis 127.0.0.1:6379       # and the same under a Redis lock on that server")]
pub(crate) struct Args {
    /// ZooKeeper hosts; without it, a throwaway local ZooKeeper is started (Debian's package).
    #[arg(long, env = "ZKFENCE_DEMO_CONNECT")]
    connect: Option<String>,
    /// Worker processes.
    #[arg(long, default_value_t = 3, env = "ZKFENCE_DEMO_WORKERS")]
    workers: u32,
    /// Increments each worker makes.
    #[arg(long, default_value_t = 4, env = "ZKFENCE_DEMO_INCREMENTS")]
    increments: u32,
    /// The workers' ZooKeeper session timeout (and the Redis lock's TTL).
    #[arg(long, value_parser = parse_duration, default_value = "2s", env = "ZKFENCE_DEMO_SESSION_TIMEOUT")]
    session_timeout: Duration,
    /// Then the same under a Redis lock on this server, HOST:PORT (`SET NX PX` with the session
    /// timeout as its TTL, a compare-and-delete release, as Redis lock libraries do; it uses
    /// the key `zkfence-demo:lock`).
    #[arg(long, value_name = "HOST:PORT", env = "ZKFENCE_DEMO_REDIS")]
    redis: Option<String>,
}

#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    connect: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    db: PathBuf,
    #[arg(long)]
    id: u32,
    #[arg(long)]
    increments: u32,
    /// Write without the fence check (the demo's second run).
    #[arg(long)]
    no_fence: bool,
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    session_timeout: Duration,
    /// How long a write takes between the check and the store (the window the demo freezes).
    #[arg(long, value_parser = parse_duration, default_value = "300ms")]
    write_delay: Duration,
    /// Lock with a Redis lock on this server instead (no token: writes are unfenced).
    #[arg(long)]
    redis: Option<String>,
}

/// What the workers of a run lock with, and how the store takes their writes.
#[derive(Debug, Clone)]
enum Locking {
    /// zkfence, the store checking the token.
    Fenced,
    /// zkfence, the store not checking it.
    Unfenced,
    /// A Redis lock on this server (no token).
    Redis(String),
}

/// What one run of the scenario showed.
#[derive(Debug, Default)]
struct Outcome {
    value: i64,
    accepted: i64,
    late_write_refused: bool,
    late_write_accepted: bool,
    successor_token_greater: bool,
    victim_cancelled: bool,
}

pub(crate) async fn demo(args: Args) -> u8 {
    #[cfg(not(feature = "redis"))]
    if args.redis.is_some() {
        eprintln!("zkfence: {WITHOUT_REDIS}");
        return EXIT_USAGE;
    }
    println!("zkfence demo: a lock holder freezes in the middle of a write, longer than its session timeout.");
    println!("Does its late write corrupt the data? {} workers each add {} to a counter in a SQLite store.\n", args.workers, args.increments);
    let local;
    let hosts = match &args.connect {
        Some(hosts) => hosts.clone(),
        None => {
            println!(
                "Starting a throwaway ZooKeeper (Debian's zookeeper package) on a loopback port..."
            );
            local = match start_local_zookeeper("zkfence", zkfence_testkit::LocalZooKeeper::start)
                .await
            {
                Ok(zk) => zk,
                Err(code) => return code,
            };
            println!("ZooKeeper is up at {}.\n", local.addr());
            local.addr()
        }
    };
    let dir = std::env::temp_dir().join(format!("zkfence-demo-{}", std::process::id()));
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!("zkfence: cannot create {}: {err}", dir.display());
        return EXIT_FAILURE;
    }
    let result = runs(&args, &hosts, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    let (fenced, unfenced, redis) = match result {
        Ok(outcomes) => outcomes,
        Err(err) => {
            eprintln!("zkfence: demo failed: {err}");
            return EXIT_FAILURE;
        }
    };
    verdict(&fenced, &unfenced, redis.as_ref())
}

/// The runs: fenced, unfenced, and (with `--redis`) under a Redis lock.
async fn runs(
    args: &Args,
    hosts: &str,
    dir: &Path,
) -> Result<(Outcome, Outcome, Option<Outcome>), String> {
    println!("== Run 1: the store checks the fencing token (UPDATE ... WHERE fence <= token) ==");
    let fenced = scenario(args, hosts, dir, Locking::Fenced).await?;
    println!(
        "\n== Run 2: the same, with fencing switched off (UPDATE ... without the fence check) =="
    );
    let unfenced = scenario(args, hosts, dir, Locking::Unfenced).await?;
    let Some(redis) = &args.redis else {
        return Ok((fenced, unfenced, None));
    };
    println!("\n== Run 3: the same under a Redis lock on {redis} (SET key value NX PX {}ms, compare-and-delete release): no token to fence with, no watchdog ==", args.session_timeout.as_millis());
    let outcome = scenario(args, hosts, dir, Locking::Redis(redis.clone())).await?;
    Ok((fenced, unfenced, Some(outcome)))
}

/// The last line, and the exit code: 0 when every run showed what it should.
fn verdict(fenced: &Outcome, unfenced: &Outcome, redis: Option<&Outcome>) -> u8 {
    let fenced_ok = fenced.value == fenced.accepted
        && fenced.late_write_refused
        && fenced.successor_token_greater
        && fenced.victim_cancelled;
    let lost = |o: &Outcome| o.accepted - o.value;
    let redis_ok =
        redis.is_none_or(|r| r.late_write_accepted && lost(r) > 0 && !r.victim_cancelled);
    println!();
    if fenced_ok && unfenced.late_write_accepted && lost(unfenced) > 0 && redis_ok {
        let and_redis = redis.map_or(String::new(), |r| {
            format!(" Under the Redis lock, its key expired while it was frozen, nothing told it, and its late write was accepted: {} increment(s) lost.", lost(r))
        });
        println!(
            "VERDICT: with fencing, the frozen holder's late write was refused and all {} increments survived; without fencing, its late write was accepted and {} increment(s) were lost.{and_redis}",
            fenced.accepted,
            lost(unfenced)
        );
        0
    } else {
        println!(
            "VERDICT: unexpected result: with fencing {fenced:?}; without fencing {unfenced:?}; under Redis {redis:?}"
        );
        EXIT_FAILURE
    }
}

fn open_store(path: &Path) -> rusqlite::Result<Connection> {
    let db = Connection::open(path)?;
    db.busy_timeout(Duration::from_secs(30))?;
    db.pragma_update(None, "journal_mode", "WAL")?;
    Ok(db)
}

/// The worker lines of one scenario: (worker id, line).
type WorkerLines = tokio::sync::mpsc::UnboundedReceiver<(u32, String)>;

/// Starts the scenario's worker processes on `lock` and the store at `db_path`; their stdout
/// lines arrive on the returned channel.
fn spawn_workers(
    args: &Args,
    hosts: &str,
    lock: &str,
    db_path: &Path,
    locking: &Locking,
) -> Result<(Vec<tokio::process::Child>, WorkerLines), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
    let mut children = Vec::new();
    for id in 1..=args.workers {
        let mut command = tokio::process::Command::new(&exe);
        command
            .arg("demo-worker")
            .args(["--connect", hosts, "--lock", lock, "--id", &id.to_string()])
            .args(["--increments", &args.increments.to_string()])
            .args([
                "--session-timeout",
                &format!("{}ms", args.session_timeout.as_millis()),
            ])
            .arg("--db")
            .arg(db_path)
            .env("RUST_LOG", "off")
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        match locking {
            Locking::Fenced => {}
            Locking::Unfenced => {
                command.arg("--no-fence");
            }
            Locking::Redis(addr) => {
                command.args(["--no-fence", "--redis", addr]);
            }
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start a worker: {e}"))?;
        let stdout = child.stdout.take().ok_or("worker without stdout")?;
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send((id, line));
            }
        });
        children.push(child);
    }
    Ok((children, rx))
}

/// Runs the scenario: watches the workers' lines, freezes the holder mid-write, narrates.
async fn scenario(
    args: &Args,
    hosts: &str,
    dir: &Path,
    locking: Locking,
) -> Result<Outcome, String> {
    let name = match locking {
        Locking::Fenced => "fenced",
        Locking::Unfenced => "unfenced",
        Locking::Redis(_) => "redis",
    };
    let db_path = dir.join(format!("{name}.sqlite"));
    let db = create_store(&db_path)?;
    let lock = format!("/zkfence-demo/{name}-{}", std::process::id());
    let (children, mut rx) = spawn_workers(args, hosts, &lock, &db_path, &locking)?;
    let redis = matches!(locking, Locking::Redis(_));
    let mut narrator = Narrator::new(args.session_timeout, redis);
    while narrator.done < args.workers {
        tokio::select! {
            next = rx.recv() => {
                let Some((id, line)) = next else { break };
                narrator.on_line(id, &Event::parse(&line), &children);
            }
            _ = sleep_until_opt(narrator.resume_at), if !narrator.resumed => narrator.resume(),
            _ = tokio::time::sleep(Duration::from_secs(120)) => return Err("the workers made no progress for 2 minutes".into()),
        }
    }
    let mut outcome = narrator.outcome;
    tally(&db, children, &mut outcome).await?;
    Ok(outcome)
}

/// The scenario's store at `db_path`: the counter with its fence, and the accepted writes.
fn create_store(db_path: &Path) -> Result<Connection, String> {
    let db = open_store(db_path).map_err(|e| e.to_string())?;
    db.execute_batch(
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL, fence INTEGER NOT NULL);
         INSERT INTO counter VALUES (1, 0, 0);
         CREATE TABLE accepted (worker INTEGER NOT NULL, token INTEGER NOT NULL, value INTEGER NOT NULL);",
    )
    .map_err(|e| e.to_string())?;
    Ok(db)
}

/// What a scenario's narrator knows from the workers' lines so far, and what it has done: the
/// holder it froze, and when it thaws it.
struct Narrator {
    outcome: Outcome,
    /// Each worker's granted session timeout.
    granted: std::collections::HashMap<u32, Duration>,
    accepted_so_far: u32,
    /// The frozen worker: (worker, pid, token).
    victim: Option<(u32, i32, i64)>,
    /// When the frozen worker is thawed (SIGCONT).
    resume_at: Option<Instant>,
    resumed: bool,
    /// Whether another worker acquired the lock while the victim was frozen.
    successor_seen: bool,
    /// Workers that have made all their increments.
    done: u32,
    /// The session timeout asked for: a worker's stall when its granted one is unknown.
    session_timeout: Duration,
    started: Instant,
    /// Under a Redis lock: no tokens to tell, a TTL instead of a session.
    redis: bool,
}

impl Narrator {
    fn new(session_timeout: Duration, redis: bool) -> Narrator {
        Narrator {
            outcome: Outcome::default(),
            granted: std::collections::HashMap::new(),
            accepted_so_far: 0,
            victim: None,
            resume_at: None,
            resumed: false,
            successor_seen: false,
            done: 0,
            session_timeout,
            started: Instant::now(),
            redis,
        }
    }

    fn say(&self, text: String) {
        println!("  [{:>5.1}s] {text}", self.started.elapsed().as_secs_f64());
    }

    /// Narrates worker `id`'s line; freezes the first worker that starts a write once two
    /// writes were accepted.
    fn on_line(&mut self, id: u32, event: &Event<'_>, children: &[tokio::process::Child]) {
        match event.kind {
            "acquired" => self.acquired(id, event),
            "writing" if self.victim.is_none() && self.accepted_so_far >= 2 => {
                self.freeze(id, event, children)
            }
            "accepted" => self.accepted(id, event),
            "refused" => {
                if self.victim.is_some_and(|(v, _, _)| v == id) {
                    self.outcome.late_write_refused = true;
                }
                self.say(format!(
                    "the store REFUSED worker {id}'s late write: its token {} is below the store's fence {}",
                    event.int("token"),
                    event.int("fence")
                ));
            }
            "cancelled" => {
                if self.victim.is_some_and(|(v, _, _)| v == id) {
                    self.outcome.victim_cancelled = true;
                }
                self.say(format!(
                    "worker {id}'s watchdog cancelled its lock: {}",
                    event.rest("reason")
                ));
            }
            "reconnecting" => self.say(format!(
                "worker {id} lost its session; it reconnects and queues again"
            )),
            "unreleased" => self.say(format!(
                "worker {id}'s release found its key holding another worker's value: the first sign, after its write, that it had lost the lock"
            )),
            "done" => self.done += 1,
            "error" => self.say(format!("worker {id}: {}", event.rest("message"))),
            _ => {}
        }
    }

    /// Worker `id` acquired the lock: the frozen worker's successor, or any holder.
    fn acquired(&mut self, id: u32, event: &Event<'_>) {
        let token = event.int("token");
        self.granted.insert(
            id,
            Duration::from_millis(event.int("session_ms").max(0) as u64),
        );
        match self.victim {
            Some((v, _, _)) if self.redis && !self.resumed && id != v && !self.successor_seen => {
                self.successor_seen = true;
                self.say(format!(
                    "worker {id} acquired the lock: Redis expired frozen worker {v}'s key (its TTL ran out); there is no token to tell them apart"
                ));
            }
            Some((v, _, vt)) if !self.resumed && id != v && !self.successor_seen => {
                self.successor_seen = true;
                self.outcome.successor_token_greater = token > vt;
                self.say(format!(
                    "worker {id} acquired the lock with token {token}, greater than frozen worker {v}'s {vt}: ZooKeeper expired worker {v}'s session"
                ));
            }
            _ if self.redis => self.say(format!("worker {id} holds the lock")),
            _ => self.say(format!("worker {id} holds the lock (token {token})")),
        }
    }

    /// Freezes worker `id` (SIGSTOP) in the middle of its write, for twice its session timeout.
    fn freeze(&mut self, id: u32, event: &Event<'_>, children: &[tokio::process::Child]) {
        let token = event.int("token");
        let pid = children[(id - 1) as usize].id().unwrap_or(0) as i32;
        let session = self
            .granted
            .get(&id)
            .copied()
            .filter(|t| !t.is_zero())
            .unwrap_or(self.session_timeout);
        let stall = session * 2;
        // SAFETY: kill(2) on a worker process we started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        self.victim = Some((id, pid, token));
        self.resume_at = Some(Instant::now() + stall);
        let (with, limit) = match self.redis {
            true => (String::new(), "the lock's TTL"),
            false => (
                format!(" with token {token}"),
                "the session timeout the server granted it",
            ),
        };
        self.say(format!(
            "SIGSTOP worker {id} in the middle of its write (it read counter = {}, will write {}{with}); frozen for {stall:?}, twice {limit}",
            event.int("value") - 1,
            event.int("value")
        ));
    }

    /// The store accepted worker `id`'s write: the frozen worker's late one, or any.
    fn accepted(&mut self, id: u32, event: &Event<'_>) {
        self.accepted_so_far += 1;
        let (token, value) = (event.int("token"), event.int("value"));
        // The frozen worker's first write after it was thawed (a Redis worker's writes all
        // carry token 0: only the first is the late one).
        let late = !self.outcome.late_write_accepted
            && self
                .victim
                .is_some_and(|(v, _, vt)| v == id && self.resumed && token == vt);
        if self.successor_seen && late {
            self.outcome.late_write_accepted = true;
            let stale = match self.redis {
                true => "as if it still held the lock".to_owned(),
                false => format!("with its stale token {token}"),
            };
            self.say(format!(
                "the store ACCEPTED worker {id}'s late write: counter = {value} {stale}, overwriting newer increments"
            ));
        } else if self.redis {
            self.say(format!("worker {id} wrote counter = {value}: accepted"));
        } else {
            self.say(format!(
                "worker {id} wrote counter = {value} (token {token}): accepted"
            ));
        }
    }

    /// Thaws the frozen worker (SIGCONT), still in the middle of its write.
    fn resume(&mut self) {
        if let Some((v, pid, _)) = self.victim {
            // SAFETY: kill(2) on a worker process we started.
            unsafe { libc::kill(pid, libc::SIGCONT) };
            self.resumed = true;
            self.say(format!(
                "SIGCONT worker {v}: it wakes up still in the middle of its write"
            ));
        }
    }
}

/// After the workers exit: the counter against the accepted increments, printed and recorded.
async fn tally(
    db: &Connection,
    children: Vec<tokio::process::Child>,
    outcome: &mut Outcome,
) -> Result<(), String> {
    for mut child in children {
        let _ = child.wait().await;
    }
    let (value, accepted): (i64, i64) = db
        .query_row(
            "SELECT (SELECT value FROM counter WHERE id = 1), (SELECT count(*) FROM accepted)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .map_err(|e| e.to_string())?;
    outcome.value = value;
    outcome.accepted = accepted;
    if value == accepted {
        println!("  Result: counter = {value}, accepted increments = {accepted}: consistent.");
    } else {
        println!(
            "  Result: counter = {value}, accepted increments = {accepted}: {} increment(s) LOST.",
            accepted - value
        );
    }
    Ok(())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One line a worker prints: `<kind> key=value ...`.
struct Event<'a> {
    kind: &'a str,
    line: &'a str,
}

impl<'a> Event<'a> {
    fn parse(line: &'a str) -> Event<'a> {
        Event {
            kind: line.split_whitespace().next().unwrap_or(""),
            line,
        }
    }

    fn int(&self, key: &str) -> i64 {
        self.line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Everything after `key=`, for free text.
    fn rest(&self, key: &str) -> &'a str {
        self.line
            .split_once(&format!("{key}="))
            .map_or("", |(_, rest)| rest)
    }
}

pub(crate) async fn worker(args: WorkerArgs) -> u8 {
    let db = match open_store(&args.db) {
        Ok(db) => db,
        Err(err) => {
            println!("error message=cannot open the store: {err}");
            return EXIT_FAILURE;
        }
    };
    match &args.redis {
        #[cfg(feature = "redis")]
        Some(addr) => redis_worker(&args, addr, db).await,
        #[cfg(not(feature = "redis"))]
        Some(_) => {
            println!("error message={WITHOUT_REDIS}");
            EXIT_USAGE
        }
        None => zkfence_worker(&args, db).await,
    }
}

/// A worker under zkfence: acquire, check, write with the token, check, release.
async fn zkfence_worker(args: &WorkerArgs, mut db: Connection) -> u8 {
    let mut lock = match worker_lock(args).await {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    let mut done = 0;
    while done < args.increments {
        let guard = match lock.acquire().await {
            Ok(guard) => guard,
            Err(err) if err.is_session_terminal() => {
                println!("reconnecting");
                lock = match worker_lock(args).await {
                    Ok(lock) => lock,
                    Err(code) => return code,
                };
                continue;
            }
            Err(err) => {
                println!("error message={err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let token = guard.token().as_u64() as i64;
        // The session timeout the server granted (it clamps what we ask for to 2..20 ticks):
        // the demo freezes us for twice this long.
        println!(
            "acquired token={token} sequence={} session_ms={}",
            guard.token().sequence(),
            lock.client().session_timeout().as_millis()
        );
        if let Err(err) = guard.check() {
            println!("cancelled reason={err}");
            continue;
        }
        match increment(&mut db, args, token).await {
            Ok(accepted) => done += u32::from(accepted),
            Err(code) => return code,
        }
        if let Err(err) = guard.check() {
            println!("cancelled reason={err}");
        }
        let _ = guard.release().await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    println!("done");
    0
}

#[cfg(feature = "redis")]
/// A worker under a Redis lock (its TTL the session timeout): acquire, write, release with a
/// compare-and-delete. No token, so its writes go unfenced; no watchdog, so nothing tells it
/// that its key expired while it was stalled.
async fn redis_worker(args: &WorkerArgs, addr: &str, mut db: Connection) -> u8 {
    let mut lock = match redis_lock::RedisLock::connect(addr, args.session_timeout).await {
        Ok(lock) => lock,
        Err(err) => {
            println!("error message=cannot reach Redis at {addr}: {err}");
            return EXIT_FAILURE;
        }
    };
    let mut done = 0;
    while done < args.increments {
        let value = match lock.acquire().await {
            Ok(value) => value,
            Err(err) => {
                println!("error message={err}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        println!(
            "acquired token=0 session_ms={}",
            args.session_timeout.as_millis()
        );
        match increment(&mut db, args, 0).await {
            Ok(accepted) => done += u32::from(accepted),
            Err(code) => return code,
        }
        match lock.release(&value).await {
            Ok(true) => {}
            Ok(false) => println!("unreleased"),
            Err(err) => println!("error message=release failed: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    println!("done");
    0
}

/// One increment under the lock: reads the counter, announces the write, takes the write's
/// time (the window the demo freezes), writes with `token`; whether the store accepted it.
async fn increment(db: &mut Connection, args: &WorkerArgs, token: i64) -> Result<bool, u8> {
    let read = db.query_row("SELECT value FROM counter WHERE id = 1", [], |row| {
        row.get::<_, i64>(0)
    });
    let Ok(value) = read else {
        println!("error message=cannot read the store");
        return Err(EXIT_FAILURE);
    };
    println!("writing token={token} value={}", value + 1);
    // The write path is slow (a disk, a network hop): the demo freezes us right here.
    tokio::time::sleep(args.write_delay).await;
    match store_write(db, args.id, value + 1, token, !args.no_fence) {
        Ok(None) => {
            println!("accepted token={token} value={}", value + 1);
            Ok(true)
        }
        Ok(Some(fence)) => {
            println!("refused token={token} fence={fence}");
            Ok(false)
        }
        Err(err) => {
            println!("error message=store write failed: {err}");
            Ok(false)
        }
    }
}

async fn worker_lock(args: &WorkerArgs) -> Result<FencedLock, u8> {
    let client = ZkConnection::plain(&args.connect)
        .open(args.session_timeout, None)
        .await?;
    let options = LockOptions::default().with_data(format!(
        "demo worker {} pid {}",
        args.id,
        std::process::id()
    ));
    FencedLock::new(client, args.lock.clone(), options)
        .map_err(|err| fail("cannot use the lock", &err))
}

/// The token-checked write: `None` when accepted, `Some(fence)` when the store's fence is
/// higher than our token. Without `fence`, every write is accepted (the unsafe baseline).
fn store_write(
    db: &mut Connection,
    worker: u32,
    value: i64,
    token: i64,
    fence: bool,
) -> rusqlite::Result<Option<i64>> {
    let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let updated = if fence {
        tx.execute(
            "UPDATE counter SET value = ?1, fence = ?2 WHERE id = 1 AND fence <= ?2",
            params![value, token],
        )?
    } else {
        tx.execute(
            "UPDATE counter SET value = ?1, fence = max(fence, ?2) WHERE id = 1",
            params![value, token],
        )?
    };
    let result = if updated == 1 {
        tx.execute(
            "INSERT INTO accepted (worker, token, value) VALUES (?1, ?2, ?3)",
            params![worker, token, value],
        )?;
        None
    } else {
        Some(
            tx.query_row("SELECT fence FROM counter WHERE id = 1", [], |row| {
                row.get(0)
            })?,
        )
    };
    tx.commit()?;
    Ok(result)
}
