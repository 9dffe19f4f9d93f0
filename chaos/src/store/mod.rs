//! The fenced store: a PostgreSQL server of our own (the test kit's `LocalPostgres`: a temp
//! dir on a loopback port, fsync on) and what workers do there, through the shipped
//! PostgreSQL fence (`zkfence-postgres`): its `zkfence_fence` table and `zkfence_claim`
//! function, and its fenced transactions, exactly as users get them. A scenario with a store
//! of its own ([`OwnStore`]) may have it on MariaDB instead, through the MySQL fence
//! ([`mysql`]), on Redis, through the Redis fence ([`redis`]), on a ZooKeeper server,
//! through the library's ZooKeeper fence ([`zookeeper`]), or on an S3 server (moto), through
//! the object store fence ([`object`]); [`Store`], [`reset`] and [`dump`] go to each by the
//! URL.
//!
//! [`record`] holds what every store shares (the history's rows, a write's outcome);
//! [`postgres`], [`mysql`], [`redis`], [`zookeeper`] and [`object`] each store's own.
//!
//! A row per lock path holds its counter (one row for a scenario of one lock, three for the
//! multi-lock scenario); the fence of each path is the fence table's row for that scope. Every
//! accepted write also inserts a row into `log` (with the store row it wrote) in the same
//! fenced transaction, after the claim took the fence row's lock, so per store row `log.seq`
//! is the commit order of accepted writes.

mod mysql;
mod object;
mod postgres;
mod record;
mod redis;
mod zookeeper;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zkfence::fence::FenceTicket;
use zkfence_harness::{LocalMariaDb, LocalRedis, LocalS3, Preconditions, StoreFaults};
use zkfence_testkit::{LocalZooKeeper, RawProxy};

use self::mysql::MyStore;
use self::object::ObjStore;
use self::postgres::PgStore;
pub(crate) use self::postgres::Postgres;
use self::record::Step;
pub(crate) use self::record::{Op, Outcome, Row};
use self::redis::RedisStore;
use self::zookeeper::ZkStore;

/// Which server a scenario's store of its own runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Postgres,
    MariaDb,
    Redis,
    ZooKeeper,
    /// An S3 server (moto), which keeps its objects in memory: it is paused and answers
    /// errors, but is never restarted.
    ObjectStore,
}

impl StoreKind {
    /// Every kind, in the order the schedules draw them.
    pub(crate) const ALL: [StoreKind; 5] = [
        StoreKind::Postgres,
        StoreKind::MariaDb,
        StoreKind::Redis,
        StoreKind::ZooKeeper,
        StoreKind::ObjectStore,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Postgres => "PostgreSQL",
            StoreKind::MariaDb => "MariaDB",
            StoreKind::Redis => "Redis",
            StoreKind::ZooKeeper => "ZooKeeper",
            StoreKind::ObjectStore => "the object store",
        }
    }

    /// The name of the scenario that writes to a store of this kind.
    pub(crate) fn scenario(self) -> &'static str {
        match self {
            StoreKind::Postgres => "stores-postgres",
            StoreKind::MariaDb => "stores-mariadb",
            StoreKind::Redis => "stores-redis",
            StoreKind::ZooKeeper => "stores-zookeeper",
            StoreKind::ObjectStore => "stores-object",
        }
    }

    /// Whether a crash and restart keeps what the store acknowledged (not moto's memory).
    pub(crate) fn survives_restart(self) -> bool {
        self != StoreKind::ObjectStore
    }
}

/// A scenario's store of its own: a PostgreSQL, MariaDB, Redis, ZooKeeper or S3 server for it alone
/// (the SQL servers' logs in the scenario's folder), which the nemesis pauses and crashes, and a proxy
/// in front of it, through which the workers connect and whose replies the nemesis drops. The
/// controller reads the history directly.
pub(crate) struct OwnStore {
    pub kind: StoreKind,
    server: Arc<Mutex<Box<dyn StoreFaults>>>,
    proxy: RawProxy,
    /// The scenario's database, directly.
    pub direct: String,
    /// The same through the proxy, for the workers.
    pub proxied: String,
}

impl OwnStore {
    /// Starts a `kind` server (its files in a temp dir, its log in `dir`), makes database
    /// `name` there and the proxy.
    pub(crate) async fn start(kind: StoreKind, dir: &Path, name: &str) -> Result<OwnStore, String> {
        let logs = dir.to_owned();
        let (server, direct, port) = match kind {
            StoreKind::Postgres => {
                let pg = tokio::task::spawn_blocking(move || Postgres::start(&logs))
                    .await
                    .map_err(|e| e.to_string())??;
                let (direct, port) = (pg.database(name).await?, pg.port());
                (Box::new(pg.0) as Box<dyn StoreFaults>, direct, port)
            }
            StoreKind::MariaDb => {
                let db = tokio::task::spawn_blocking(move || LocalMariaDb::start(&logs))
                    .await
                    .map_err(|e| e.to_string())??;
                let direct = mysql::database(&db.url("mysql"), name).await?;
                let port = db.port();
                (Box::new(db) as Box<dyn StoreFaults>, direct, port)
            }
            StoreKind::Redis => {
                let redis = tokio::task::spawn_blocking(LocalRedis::start_durable)
                    .await
                    .map_err(|e| e.to_string())??;
                let port = redis.port();
                let direct = format!("redis://127.0.0.1:{port}/");
                (Box::new(redis) as Box<dyn StoreFaults>, direct, port)
            }
            StoreKind::ZooKeeper => {
                let zk = tokio::task::spawn_blocking(LocalZooKeeper::start)
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("the store's ZooKeeper: {e}"))?;
                let port = port_of(&zk.addr(), "ZooKeeper")?;
                let direct = format!("zk://127.0.0.1:{port}/{name}");
                (Box::new(zk) as Box<dyn StoreFaults>, direct, port)
            }
            StoreKind::ObjectStore => {
                // A bucket is 3 to 63 lowercase letters, digits and dashes.
                let bucket: String = (name.chars())
                    .map(|c| {
                        if c.is_ascii_alphanumeric() {
                            c.to_ascii_lowercase()
                        } else {
                            '-'
                        }
                    })
                    .collect();
                let made = bucket.clone();
                let s3 = tokio::task::spawn_blocking(move || {
                    let s3 = LocalS3::start(Preconditions::Enforced)?;
                    s3.create_bucket(&made, true).map(|()| s3)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the store's S3 server: {e}"))?;
                let port = port_of(&s3.addr(), "S3 server")?;
                let direct = format!("s3://127.0.0.1:{port}/{bucket}");
                (Box::new(s3) as Box<dyn StoreFaults>, direct, port)
            }
        };
        let proxy = RawProxy::start(&format!("127.0.0.1:{port}"))
            .await
            .map_err(|e| format!("the store's proxy: {e}"))?;
        // PostgreSQL's "… port=N …", MySQL's, Redis's, ZooKeeper's and S3's "…:N/…".
        let proxied = zkfence_harness::with_port(&direct, port, proxy.port());
        Ok(OwnStore {
            kind,
            server: Arc::new(Mutex::new(server)),
            proxy,
            direct,
            proxied,
        })
    }

    fn server(&self) -> std::sync::MutexGuard<'_, Box<dyn StoreFaults>> {
        self.server.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// SIGSTOP to every process of the server.
    pub(crate) fn pause(&self) {
        self.server().pause();
    }

    /// SIGCONT to every process of the server.
    pub(crate) fn resume(&self) {
        self.server().resume();
    }

    /// `kill -9` to every process of the server, then the server started again on its data;
    /// how long until it accepted connections again.
    pub(crate) async fn crash_and_restart(&self) -> Result<Duration, String> {
        let server = self.server.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut server = server.lock().unwrap_or_else(|e| e.into_inner());
            server.crash_and_restart().map(|()| started.elapsed())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// The request that commits a write on this store, as its bytes cross the wire (not a
    /// bare `COMMIT`, which `READ COMMITTED` in a transaction's first statement holds too):
    /// PostgreSQL's simple query ending `COMMIT` (the fence sends `SELECT 1; COMMIT`), the
    /// MySQL fence's `CALL zkfence_commit(…)` (its seal, then `COMMIT`), Redis's `EVALSHA`
    /// (or `EVAL`) of the fence's script, the ZooKeeper fence's `multi` (by its log entry's
    /// path), the object store fence's conditional `PUT`.
    fn commit(&self) -> &'static [u8] {
        match self.kind {
            StoreKind::Postgres => b"COMMIT\0",
            StoreKind::MariaDb => b"zkfence_commit(",
            StoreKind::Redis => b"EVAL",
            StoreKind::ZooKeeper => zookeeper::COMMIT,
            StoreKind::ObjectStore => object::COMMIT,
        }
    }

    /// Drops the store's replies from the next commit on (which still reaches the store),
    /// and waits up to `within` for one to be sent; whether one was.
    pub(crate) async fn drop_replies_from_the_next_commit(&self, within: Duration) -> bool {
        self.proxy.drop_replies_after(self.commit());
        let deadline = Instant::now() + within;
        while !self.proxy.replies_dropped() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        self.proxy.replies_dropped()
    }

    /// An HTTP store's next commit answered with a server error (500) in the store's stead,
    /// the commit applied first when `applied` (and never sent when not); waits up to
    /// `within` for one to come (and as long again for its answer). `None` for a store that
    /// does not speak HTTP, else whether one was answered (a trigger that did not fire is
    /// disarmed, by a cut).
    pub(crate) async fn answer_next_commit_with_error(
        &self,
        applied: bool,
        within: Duration,
    ) -> Option<bool> {
        if self.kind != StoreKind::ObjectStore {
            return None;
        }
        let before = self.proxy.answered();
        self.proxy
            .answer_next(self.commit(), object::SERVER_ERROR, applied);
        // A request that came in time is waited for to the end (the store's reply to a
        // forwarded one may take a while): cutting it would make another fault of it.
        let deadline = Instant::now() + within;
        let answered = || self.proxy.answered() > before;
        while !answered() && (Instant::now() < deadline || !self.proxy.armed()) {
            if Instant::now() > deadline + within {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let answered = answered();
        if !answered {
            self.cut();
        }
        Some(answered)
    }

    /// Cuts every connection through the proxy, and lets replies through again (a trigger
    /// that did not fire is disarmed).
    pub(crate) fn cut(&self) {
        self.proxy.reset();
    }

    /// The store's reply bytes the proxy dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.proxy.dropped()
    }
}

/// The port of the store's `server` at `addr` (`host:port`).
fn port_of(addr: &str, server: &str) -> Result<u16, String> {
    (addr.rsplit(':').next().and_then(|p| p.parse().ok()))
        .ok_or_else(|| format!("the store's {server} at {addr:?}: no port"))
}

/// Which store `url` names: a `mysql://`, `redis://`, `zk://` or `s3://` URL, else a
/// PostgreSQL conninfo.
fn kind_of(url: &str) -> StoreKind {
    match url.split_once("://").map(|(scheme, _)| scheme) {
        Some("mysql") => StoreKind::MariaDb,
        Some("redis") => StoreKind::Redis,
        Some("zk") => StoreKind::ZooKeeper,
        Some("s3") => StoreKind::ObjectStore,
        _ => StoreKind::Postgres,
    }
}

/// (Re)creates the schema for one run in `url`'s database: `rows` store rows (1, 2, …), each
/// with counter 0; an empty log; a fresh fence.
pub(crate) async fn reset(url: &str, rows: u32) -> Result<(), String> {
    match kind_of(url) {
        StoreKind::MariaDb => mysql::reset(url, rows).await,
        // Its keys come with the first fence raised on each path.
        StoreKind::Redis => redis::reset(url).await,
        StoreKind::ZooKeeper => zookeeper::reset(url, rows).await,
        // Its objects come with each path's first write.
        StoreKind::ObjectStore => object::reset(url).await,
        StoreKind::Postgres => postgres::reset(url, rows).await,
    }
}

/// The accepted writes in commit order, and each store row's final counter.
pub(crate) async fn dump(url: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    match kind_of(url) {
        StoreKind::MariaDb => mysql::dump(url).await,
        StoreKind::Redis => redis::dump(url).await,
        StoreKind::ZooKeeper => zookeeper::dump(url).await,
        StoreKind::ObjectStore => object::dump(url).await,
        StoreKind::Postgres => postgres::dump(url).await,
    }
}

/// A worker's store, PostgreSQL's, MySQL's, Redis's, ZooKeeper's or an object store's (by its URL): its connection, and the
/// fence its writes go through (none in the fencing-off mutant, whose writes are plain
/// transactions).
pub(crate) struct Store {
    backend: Backend,
    /// The in-doubt-as-failed mutant: a write in doubt recorded as not applied.
    doubt_as_failed: bool,
}

/// Each store's own side of [`Store`].
pub(crate) enum Backend {
    Postgres(PgStore),
    MySql(MyStore),
    Redis(RedisStore),
    ZooKeeper(ZkStore),
    Object(ObjStore),
}

/// What a worker's writes go through: the fence, or (the fencing-off mutant) nothing; and
/// whether (the in-doubt-as-failed mutant) a write in doubt is recorded as not applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flaws {
    pub fencing: bool,
    pub doubt_as_failed: bool,
}

impl Store {
    /// Worker `worker`'s store at `url`, once a connection to it is made (retrying every
    /// 200 ms).
    pub(crate) async fn connect_retrying(url: &str, flaws: Flaws, worker: u32) -> Store {
        let fencing = flaws.fencing;
        let mut backend = match kind_of(url) {
            StoreKind::MariaDb => Backend::MySql(MyStore::new(url, fencing)),
            StoreKind::Redis => Backend::Redis(RedisStore::new(url, fencing)),
            StoreKind::ZooKeeper => Backend::ZooKeeper(ZkStore::new(url, fencing)),
            // The odd workers' clients resend, but for the mutant that records a write in
            // doubt as failed: it needs writes left in doubt.
            StoreKind::ObjectStore => {
                let resend = worker % 2 == 1 && !flaws.doubt_as_failed;
                Backend::Object(ObjStore::new(url, fencing, resend))
            }
            StoreKind::Postgres => Backend::Postgres(PgStore::new(url, fencing)),
        };
        loop {
            let connected = match &mut backend {
                Backend::Postgres(pg) => pg.ensure().await.is_ok(),
                Backend::MySql(my) => my.ensure().await.is_ok(),
                Backend::Redis(redis) => redis.ensure().await.is_ok(),
                Backend::ZooKeeper(zk) => zk.ensure().await.is_ok(),
                Backend::Object(object) => object.ensure().await.is_ok(),
            };
            if connected {
                let doubt_as_failed = flaws.doubt_as_failed;
                return Store {
                    backend,
                    doubt_as_failed,
                };
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Store row `row`'s counter.
    pub(crate) async fn read(&mut self, row: i32) -> Result<i64, String> {
        match &mut self.backend {
            Backend::Postgres(pg) => pg.read(row).await,
            Backend::MySql(my) => my.read(row).await,
            Backend::Redis(redis) => redis.read(row).await,
            Backend::ZooKeeper(zk) => zk.read(row).await,
            Backend::Object(object) => object.read(row).await,
        }
    }

    /// Store row `row`'s counter and `scope`'s fence (0 before its first claim), for readers.
    pub(crate) async fn peek(&mut self, row: i32, scope: &str) -> Result<(i64, i64), String> {
        match &mut self.backend {
            Backend::Postgres(pg) => pg.peek(row, scope).await,
            Backend::MySql(my) => my.peek(row, scope).await,
            Backend::Redis(redis) => redis.peek(row, scope).await,
            Backend::ZooKeeper(zk) => zk.peek(row, scope).await,
            Backend::Object(object) => object.peek(row, scope).await,
        }
    }

    /// Sets store row `row`'s counter to `value`, in a transaction fenced by `ticket`.
    pub(crate) async fn write(&mut self, op: &Op, ticket: &FenceTicket, value: i64) -> Outcome {
        self.fenced(op, ticket, Step::Write(value)).await
    }

    /// Raises `ticket`'s fence (and logs the counter it found): from then on every older
    /// holder is refused.
    pub(crate) async fn raise_fence(&mut self, op: &Op, ticket: &FenceTicket) -> Outcome {
        self.fenced(op, ticket, Step::Fence).await
    }

    async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        let outcome = match &mut self.backend {
            Backend::Postgres(pg) => pg.fenced(op, ticket, step).await,
            Backend::MySql(my) => my.fenced(op, ticket, step).await,
            Backend::Redis(redis) => redis.fenced(op, ticket, step).await,
            Backend::ZooKeeper(zk) => zk.fenced(op, ticket, step).await,
            Backend::Object(object) => object.fenced(op, ticket, step).await,
        };
        match outcome {
            Outcome::Unknown(err) if self.doubt_as_failed => Outcome::NotApplied(err),
            outcome => outcome,
        }
    }
}
