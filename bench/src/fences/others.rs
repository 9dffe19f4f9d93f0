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

/// What the variants write (the same bytes as the other stores' variants).
const PAYLOAD: &[u8] = b"zkfence-bench --fences";
/// The MySQL variants' one statement.
const UPDATE: &str = "UPDATE bench_counter SET v = v + 1 WHERE id = 1";
/// The Redis variants' key, tagged with the lock's hash slot (as a fenced key must be).
const REDIS_KEY: &str = "{/bench-fence/lock}:data";
/// The bucket the object store variants write to.
const BUCKET: &str = "zkfence-bench";

/// One way of writing to one of these stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
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

/// The servers (stopped when dropped) and one client of each.
pub(super) struct Others {
    _mariadb: LocalMariaDb,
    _redis: LocalRedis,
    _s3: LocalS3,
    my: mysql_async::Conn,
    my_fence: MySqlFence,
    redis: redis::aio::MultiplexedConnection,
    redis_fence: RedisFence,
    s3: Arc<dyn ObjectStore>,
    s3_fence: ObjectFence,
    /// The object each object store variant writes (its own: the fenced one carries a header).
    plain: Path,
    fenced: Path,
}

impl Others {
    /// Starts the servers (MariaDB's log in `log_dir`) and connects.
    pub(super) async fn start(
        log_dir: &FsPath,
        links: &mut super::links::Links,
    ) -> Result<Others, String> {
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
        let my = mysql(&links.reach(&format!("127.0.0.1:{}", mariadb.port()))?).await?;
        let redis =
            (redis::Client::open(format!("redis://{}/", links.reach(&redis_server.addr())?)))
                .map_err(|e| format!("redis: {e}"))?
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| format!("redis: {e}"))?;
        let s3_endpoint = format!("http://{}", links.reach(&s3_server.addr())?);
        let s3 = zkfence_harness::s3_client(&s3_endpoint, BUCKET, 10)?;
        Ok(Others {
            _mariadb: mariadb,
            _redis: redis_server,
            _s3: s3_server,
            my,
            my_fence: MySqlFence::new(),
            redis,
            redis_fence: RedisFence::new(),
            s3_fence: ObjectFence::new(s3.clone()),
            s3,
            plain: Path::from("bench/plain"),
            fenced: Path::from("bench/fenced"),
        })
    }

    /// One operation `op`, fenced where it is by `ticket`.
    pub(super) async fn once(&mut self, op: Op, ticket: &FenceTicket) -> Result<(), String> {
        match op {
            Op::MyUnfenced => {
                let my = |e: mysql_async::Error| format!("mysql: {e}");
                self.my.query_drop("START TRANSACTION").await.map_err(my)?;
                self.my.query_drop(UPDATE).await.map_err(my)?;
                self.my.query_drop("COMMIT").await.map_err(my)?;
            }
            Op::MyFenced => {
                (self.my_fence)
                    .transaction(&mut self.my, ticket, |c| Box::pin(c.query_drop(UPDATE)))
                    .await
                    .map_err(|e| format!("mysql fenced transaction: {e}"))?;
            }
            Op::RedisSet => {
                redis::cmd("SET")
                    .arg(REDIS_KEY)
                    .arg(PAYLOAD)
                    .query_async::<()>(&mut self.redis)
                    .await
                    .map_err(|e| format!("redis SET: {e}"))?;
            }
            Op::RedisFenced => {
                let commands =
                    Commands::new().command(|c| c.arg("SET").key(REDIS_KEY).arg(PAYLOAD));
                (self
                    .redis_fence
                    .write(&mut self.redis, ticket, &commands)
                    .await)
                    .map_err(|e| format!("redis fenced write: {e}"))?;
            }
            Op::S3Put => {
                (self
                    .s3
                    .put(&self.plain, PutPayload::from_static(PAYLOAD))
                    .await)
                    .map_err(|e| format!("s3 put: {e}"))?;
            }
            Op::S3Fenced => {
                (self
                    .s3_fence
                    .put(ticket, &self.fenced, PAYLOAD.to_vec())
                    .await)
                    .map_err(|e| format!("s3 fenced put: {e}"))?;
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

/// One connection to the `mysql` database of the MariaDB at `addr` (over TCP), the counter
/// table and the fence.
async fn mysql(addr: &str) -> Result<mysql_async::Conn, String> {
    let my = |e: mysql_async::Error| format!("mysql setup: {e}");
    let url = format!("mysql://root@{addr}/mysql");
    let opts = mysql_async::Opts::from_url(&url).map_err(|e| e.to_string())?;
    let opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    let mut conn = mysql_async::Conn::new(opts).await.map_err(my)?;
    conn.query_drop(
        "CREATE TABLE IF NOT EXISTS bench_counter (id INT PRIMARY KEY, v BIGINT NOT NULL) ENGINE = InnoDB;
         INSERT IGNORE INTO bench_counter (id, v) VALUES (1, 0)",
    )
    .await
    .map_err(my)?;
    MySqlFence::new().install(&mut conn).await.map_err(my)?;
    Ok(conn)
}
