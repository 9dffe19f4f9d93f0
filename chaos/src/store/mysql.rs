//! The fenced store on MySQL/MariaDB, through the shipped MySQL fence (`zkfence-mysql`): its
//! `zkfence_fence` table and `zkfence_claim`/`zkfence_seal` procedures and its fenced
//! transactions, exactly as users get them. The same tables as on PostgreSQL
//! ([`super::postgres`]): a row per lock path holding its counter, and `log`, a row per accepted
//! write inserted in the same fenced transaction after the claim locked the fence row, so that
//! per store row `log.seq` is the commit order of accepted writes. (`row` is a reserved word
//! in MySQL: the log's column is `row_id`.)

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_mysql::{MySqlFence, TxFuture};

use super::record::{chain, in_doubt, recorded, Op, Outcome, Row, Step};

/// Opens a TCP connection to `url` (never the server's Unix socket, which would go around the
/// proxy), giving up after 5 s.
async fn open(url: &str) -> Result<Conn, String> {
    let opts = Opts::from_url(url).map_err(|e| format!("{url}: {e}"))?;
    let opts = OptsBuilder::from_opts(opts).prefer_socket(false);
    match tokio::time::timeout(Duration::from_secs(5), Conn::new(opts)).await {
        Ok(conn) => conn.map_err(|e| chain(&e)),
        Err(_) => Err("connect: no answer within 5 s".into()),
    }
}

/// Database `name` on the server whose root URL (`…/mysql`) is `root`, made if missing; its
/// URL.
pub(super) async fn database(root: &str, name: &str) -> Result<String, String> {
    let db: String = (name.chars())
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_lowercase(),
            false => '_',
        })
        .collect();
    let mut conn = open(root).await?;
    (conn
        .query_drop(format!("CREATE DATABASE IF NOT EXISTS `{db}`"))
        .await)
        .map_err(|e| format!("create database {db}: {e}"))?;
    Ok(root.replace("/mysql", &format!("/{db}")))
}

/// (Re)creates the schema for one run in `url`'s database: `rows` store rows, each with
/// counter 0; an empty log; a fresh fence table (its procedures installed).
pub(super) async fn reset(url: &str, rows: u32) -> Result<(), String> {
    let mut conn = open(url).await?;
    let mut statements = vec![
        "DROP TABLE IF EXISTS store, log, zkfence_fence".to_owned(),
        "CREATE TABLE store (id INT PRIMARY KEY, counter BIGINT NOT NULL) ENGINE = InnoDB".into(),
        "CREATE TABLE log (seq BIGINT AUTO_INCREMENT PRIMARY KEY, op VARCHAR(64) NOT NULL UNIQUE, \
         kind VARCHAR(8) NOT NULL, worker INT NOT NULL, token BIGINT NOT NULL, val BIGINT, \
         row_id INT NOT NULL) ENGINE = InnoDB"
            .into(),
    ];
    statements.extend((1..=rows).map(|id| format!("INSERT INTO store VALUES ({id}, 0)")));
    for statement in statements {
        (conn.query_drop(&statement).await).map_err(|e| format!("{statement}: {e}"))?;
    }
    MySqlFence::new()
        .install(&mut conn)
        .await
        .map_err(|e| format!("install the fence: {e}"))
}

/// The accepted writes in commit order, and each store row's final counter.
pub(super) async fn dump(url: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    let mut conn = open(url).await?;
    type LogRow = (i64, String, String, i32, i64, Option<i64>, i32);
    let log: Vec<LogRow> = conn
        .query("SELECT seq, op, kind, worker, token, val, row_id FROM log ORDER BY seq")
        .await
        .map_err(|e| format!("read log: {e}"))?;
    let rows = log
        .into_iter()
        .map(|(seq, op, kind, worker, token, value, row)| Row {
            seq,
            op,
            kind,
            worker: i64::from(worker),
            token,
            value: value.unwrap_or(0),
            row,
        })
        .collect();
    let counters: Vec<(i32, i64)> = conn
        .query("SELECT id, counter FROM store ORDER BY id")
        .await
        .map_err(|e| format!("read store: {e}"))?;
    Ok((rows, counters.into_iter().collect()))
}

/// A worker's connection, and the fence its writes go through (none in the fencing-off
/// mutant, whose writes are plain transactions).
pub(crate) struct MyStore {
    url: String,
    fence: Option<MySqlFence>,
    conn: Option<Conn>,
}

impl MyStore {
    pub(super) fn new(url: &str, fencing: bool) -> MyStore {
        MyStore {
            url: url.to_owned(),
            fence: fencing.then(MySqlFence::new),
            conn: None,
        }
    }

    pub(super) async fn ensure(&mut self) -> Result<&mut Conn, String> {
        if self.conn.is_none() {
            self.conn = Some(open(&self.url).await?);
        }
        self.conn.as_mut().ok_or_else(|| "no connection".into())
    }

    /// A query's outcome; a failed one drops the connection (the next call opens another).
    fn keep<T>(&mut self, outcome: Result<T, mysql_async::Error>) -> Result<T, String> {
        outcome.map_err(|e| {
            self.conn = None;
            chain(&e)
        })
    }

    /// Store row `row`'s counter.
    pub(super) async fn read(&mut self, row: i32) -> Result<i64, String> {
        let conn = self.ensure().await?;
        let value: Result<Option<i64>, _> = conn
            .exec_first("SELECT counter FROM store WHERE id = ?", (row,))
            .await;
        self.keep(value)?
            .ok_or_else(|| format!("no store row {row}"))
    }

    /// Store row `row`'s counter and `scope`'s fence (0 before its first claim), for readers.
    pub(super) async fn peek(&mut self, row: i32, scope: &str) -> Result<(i64, i64), String> {
        let conn = self.ensure().await?;
        let found: Result<Option<(i64, i64)>, _> = conn
            .exec_first(
                "SELECT s.counter, COALESCE(f.token, 0) FROM store s
                 LEFT JOIN zkfence_fence f ON f.scope = ? WHERE s.id = ?",
                (scope.as_bytes(), row),
            )
            .await;
        self.keep(found)?
            .ok_or_else(|| format!("no store row {row}"))
    }

    /// One fenced transaction: the fence's claim, the step's statements with its `log` row,
    /// the hold's check and the seal, the commit (a plain transaction in the fencing-off
    /// mutant).
    pub(super) async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        let fence = self.fence.clone();
        let conn = match self.ensure().await {
            Ok(conn) => conn,
            Err(err) => return Outcome::NotApplied(err),
        };
        let (id, worker, row) = (op.id.clone(), op.worker as i32, op.row);
        let token = ticket.token().as_i64();
        let work = statement(move |conn| {
            let id = id.clone();
            Box::pin(async move {
                match step {
                    Step::Write(value) => {
                        conn.exec_drop("UPDATE store SET counter = ? WHERE id = ?", (value, row))
                            .await?;
                        conn.exec_drop(
                            "INSERT INTO log (op, kind, worker, token, val, row_id)
                             VALUES (?, 'write', ?, ?, ?, ?)",
                            (id, worker, token, value, row),
                        )
                        .await
                    }
                    Step::Fence => {
                        conn.exec_drop(
                            "INSERT INTO log (op, kind, worker, token, val, row_id)
                             SELECT ?, 'fence', ?, ?, counter, id FROM store WHERE id = ?",
                            (id, worker, token, row),
                        )
                        .await
                    }
                }
            })
        });
        let outcome = match fence {
            Some(fence) => fence.transaction(conn, ticket, work).await,
            None => unfenced(conn, ticket, work).await,
        };
        let outcome = recorded(outcome);
        if matches!(outcome, Outcome::Unknown(_) | Outcome::NotApplied(_)) {
            self.conn = None;
        }
        outcome
    }
}

/// A transaction's statements, as both the fence and the fencing-off mutant run them.
fn statement<F>(work: F) -> F
where
    F: for<'c> FnMut(&'c mut Conn) -> TxFuture<'c, (), mysql_async::Error>,
{
    work
}

/// The fencing-off mutant's write: the same statements in a plain transaction (a failed
/// commit is in doubt).
async fn unfenced<F>(
    conn: &mut Conn,
    ticket: &FenceTicket,
    mut work: F,
) -> Result<(), FenceError<mysql_async::Error>>
where
    F: for<'c> FnMut(&'c mut Conn) -> TxFuture<'c, (), mysql_async::Error>,
{
    let statements = async {
        conn.query_drop("START TRANSACTION").await?;
        work(conn).await
    };
    statements.await.map_err(FenceError::Store)?;
    (conn.query_drop("COMMIT").await).map_err(|e| in_doubt(ticket, e))
}
