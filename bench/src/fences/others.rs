//! The stores beyond PostgreSQL and ZooKeeper that `bench --fences` measures: a throwaway
//! MariaDB, Redis and S3 server (`moto`), each written unfenced and through its fence.

use std::path::Path as FsPath;
use std::sync::Arc;

use mysql_async::prelude::Queryable as _;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use zkfence::fence::FenceTicket;
use zkfence_harness::{LocalMariaDb, LocalRedis, LocalS3, Preconditions};
use zkfence_mysql::MySqlFence;
use zkfence_object_store::ObjectFence;
use zkfence_redis::{Commands, RedisFence};

use super::variant::Variant;

/// What the variants write (the same bytes as the other stores' variants).
const PAYLOAD: &[u8] = b"zkfence-bench --fences";
/// The bucket the object store variants write to.
const BUCKET: &str = "zkfence-bench";
/// The floor's Redis script: the least a script fence can do, a compare of the token with the
/// fence key's and the write, with none of the fence's checks (the token's text form, the
/// key's format, a missing fence) and nothing recorded.
const REDIS_FLOOR: &str = "local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if seen > tonumber(ARGV[1]) then return redis.error_reply('ZF001 refused') end
return redis.call('SET', KEYS[2], ARGV[2])";

/// The servers, stopped when dropped, and the addresses their clients dial.
pub(super) struct Servers {
    _mariadb: LocalMariaDb,
    _redis: LocalRedis,
    _s3: LocalS3,
    mysql_addr: String,
    redis_url: String,
    s3_endpoint: String,
}

impl Servers {
    /// Starts the servers (MariaDB's log in `log_dir`), each reached through `links`, and
    /// sets up the tables, rows and fences of `writers` writers.
    pub(super) async fn start(
        log_dir: &FsPath,
        links: &mut super::links::Links,
        writers: usize,
    ) -> Result<Servers, String> {
        eprintln!("bench: starting a throwaway MariaDB, Redis and S3 server (moto) ...");
        let dir = log_dir.to_owned();
        let mariadb = blocking(move || LocalMariaDb::start(&dir)).await?;
        let redis_server = blocking(LocalRedis::start).await?;
        let s3_server = blocking(|| {
            let s3 = LocalS3::start(Preconditions::Enforced)?;
            s3.create_bucket(BUCKET, false)?;
            Ok(s3)
        })
        .await?;
        let servers = Servers {
            mysql_addr: links.reach(&format!("127.0.0.1:{}", mariadb.port()))?,
            redis_url: format!("redis://{}/", links.reach(&redis_server.addr())?),
            s3_endpoint: format!("http://{}", links.reach(&s3_server.addr())?),
            _mariadb: mariadb,
            _redis: redis_server,
            _s3: s3_server,
        };
        mysql_setup(&mut mysql(&servers.mysql_addr).await?, writers).await?;
        let mut redis = servers.redis().await?;
        (RedisFence::new().install(&mut redis).await).map_err(|e| format!("redis: {e}"))?;
        Ok(servers)
    }

    /// A connection to the Redis server.
    async fn redis(&self) -> Result<redis::aio::MultiplexedConnection, String> {
        (redis::Client::open(self.redis_url.as_str()))
            .map_err(|e| format!("redis: {e}"))?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| format!("redis: {e}"))
    }

    /// Writer `writer`'s clients (from 0), writing under `scope`: its own connections, row,
    /// keys and objects.
    pub(super) async fn clients(&self, writer: usize, scope: &str) -> Result<Clients, String> {
        let s3 = zkfence_harness::s3_client(&self.s3_endpoint, BUCKET, 10)?;
        Ok(Clients {
            my: mysql(&self.mysql_addr).await?,
            my_fence: MySqlFence::new(),
            update: String::leak(format!(
                "UPDATE bench_counter SET v = v + 1 WHERE id = {}",
                writer + 1
            )),
            floor: format!(
                "START TRANSACTION; UPDATE bench_floor SET token = 1, claims = claims + 1 WHERE id = {} AND token <= 1",
                writer + 1
            ),
            redis: self.redis().await?,
            redis_fence: RedisFence::new(),
            redis_functions: RedisFence::new().through_functions(),
            redis_floor: redis::Script::new(REDIS_FLOOR),
            redis_key: format!("{{{scope}}}:data"),
            redis_floor_key: format!("{{{scope}}}:floor"),
            s3_fence: ObjectFence::new(s3.clone()),
            s3,
            plain: Path::from(format!("bench/plain-{writer}")),
            fenced: Path::from(format!("bench/fenced-{writer}")),
        })
    }
}

/// One writer's clients of these stores.
pub(super) struct Clients {
    my: mysql_async::Conn,
    my_fence: MySqlFence,
    /// The writer's one statement: its own row (leaked, a few bytes per writer, so that the
    /// fenced transaction's closure can hold it).
    update: &'static str,
    /// The floor's batch: the transaction's start and a bare update of the writer's floor row.
    floor: String,
    redis: redis::aio::MultiplexedConnection,
    redis_fence: RedisFence,
    redis_functions: RedisFence,
    redis_floor: redis::Script,
    /// The writer's key, tagged with its lock's hash slot (as a fenced key must be).
    redis_key: String,
    /// The floor script's fence key.
    redis_floor_key: String,
    s3: Arc<dyn ObjectStore>,
    s3_fence: ObjectFence,
    /// The object each object store variant writes (its own: the fenced one carries a header).
    plain: Path,
    fenced: Path,
}

impl Clients {
    /// One operation of `op` (one of these stores' variants), fenced where it is by `ticket`;
    /// another store's variant is an error.
    pub(super) async fn once(&mut self, op: Variant, ticket: &FenceTicket) -> Result<(), String> {
        let my = |e: mysql_async::Error| format!("mysql: {e}");
        match op {
            Variant::MyUnfenced | Variant::MyFloor => {
                let start = match op {
                    Variant::MyFloor => self.floor.as_str(),
                    _ => "START TRANSACTION",
                };
                self.my.query_drop(start).await.map_err(my)?;
                self.my.query_drop(self.update).await.map_err(my)?;
                self.my.query_drop("COMMIT").await.map_err(my)?;
            }
            Variant::MyFenced => {
                let update = self.update;
                (self.my_fence)
                    .transaction(&mut self.my, ticket, |c| Box::pin(c.query_drop(update)))
                    .await
                    .map_err(|e| format!("mysql fenced transaction: {e}"))?;
            }
            Variant::RedisSet => {
                redis::cmd("SET")
                    .arg(&self.redis_key)
                    .arg(PAYLOAD)
                    .query_async::<()>(&mut self.redis)
                    .await
                    .map_err(|e| format!("redis SET: {e}"))?;
            }
            Variant::RedisFenced | Variant::RedisFcall => {
                let fence = match op {
                    Variant::RedisFcall => &self.redis_functions,
                    _ => &self.redis_fence,
                };
                let key = self.redis_key.as_str();
                let commands = Commands::new().command(|c| c.arg("SET").key(key).arg(PAYLOAD));
                (fence.write(&mut self.redis, ticket, &commands).await)
                    .map_err(|e| format!("redis fenced write: {e}"))?;
            }
            Variant::RedisFloor => {
                (self
                    .redis_floor
                    .key(&self.redis_floor_key)
                    .key(&self.redis_key))
                .arg(ticket.token().as_i64())
                .arg(PAYLOAD)
                .invoke_async::<()>(&mut self.redis)
                .await
                .map_err(|e| format!("redis floor script: {e}"))?;
            }
            Variant::S3Put => {
                (self
                    .s3
                    .put(&self.plain, PutPayload::from_static(PAYLOAD))
                    .await)
                    .map_err(|e| format!("s3 put: {e}"))?;
            }
            Variant::S3Fenced => {
                (self
                    .s3_fence
                    .put(&self.fenced, ticket, PAYLOAD.to_vec())
                    .await)
                    .map_err(|e| format!("s3 fenced put: {e}"))?;
            }
            other => {
                return Err(format!(
                    "{} is not a MySQL, Redis or S3 variant",
                    other.name()
                ))
            }
        }
        Ok(())
    }
}

/// `start` (a server's, which waits for it) off the runtime's threads.
async fn blocking<T: Send + 'static>(
    start: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(start)
        .await
        .map_err(|e| e.to_string())?
}

/// One connection to the `mysql` database of the MariaDB at `addr` (over TCP).
async fn mysql(addr: &str) -> Result<mysql_async::Conn, String> {
    let url = format!("mysql://root@{addr}/mysql");
    let opts = mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    (mysql_async::Conn::new(opts).await).map_err(|e| format!("mysql: {e}"))
}

/// The counter table and the floor's table, a row of each per writer, and the fence.
async fn mysql_setup(conn: &mut mysql_async::Conn, writers: usize) -> Result<(), String> {
    let my = |e: mysql_async::Error| format!("mysql setup: {e}");
    conn.query_drop(
        "CREATE TABLE IF NOT EXISTS bench_counter (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE = InnoDB;
         CREATE TABLE IF NOT EXISTS bench_floor (id INT PRIMARY KEY, token BIGINT NOT NULL, claims BIGINT NOT NULL) ENGINE = InnoDB",
    )
    .await
    .map_err(my)?;
    for id in 1..=writers {
        let rows = format!(
            "INSERT IGNORE INTO bench_counter (id, v) VALUES ({id}, 0); INSERT IGNORE INTO bench_floor (id, token, claims) VALUES ({id}, 0, 0)"
        );
        conn.query_drop(rows).await.map_err(my)?;
    }
    MySqlFence::new().install(conn).await.map_err(my)
}
