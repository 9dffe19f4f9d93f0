//! The fenced store: a PostgreSQL server of our own (the test kit's `LocalPostgres`: a temp
//! dir on a loopback port, fsync on) and the statements workers run against it.
//!
//! A row per lock path holds its counter and its fence (the highest token seen for that path):
//! one row for a scenario of one lock, three for the multi-lock scenario. Every accepted write
//! also inserts a row into `log` (with the store row it wrote) in the same statement, after the
//! `UPDATE` took the row lock, so `log.seq` is the commit order of accepted writes, and per
//! store row its commit order.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tokio_postgres::{Client, NoTls, Statement};
use zkfence_testkit::LocalPostgres;

/// The suite's PostgreSQL server (the test kit's), living as long as this value.
pub(crate) struct Postgres(LocalPostgres);

impl Postgres {
    /// initdb in a fresh temp dir, then start the server on a free loopback port; its log goes
    /// to the run's folder.
    pub(crate) fn start(run_dir: &Path) -> Result<Postgres, String> {
        LocalPostgres::start(run_dir).map(Postgres)
    }

    pub(crate) fn port(&self) -> u16 {
        self.0.port()
    }

    pub(crate) fn conninfo(&self) -> String {
        self.0.conninfo("postgres")
    }

    /// A database of its own for one scenario (so that scenarios can run side by side), made
    /// if missing; returns its connection string.
    pub(crate) async fn database(&self, name: &str) -> Result<String, String> {
        let db: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let client = open(&self.conninfo())
            .await
            .map_err(|e| format!("connect to postgres: {e}"))?;
        let exists = client
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&db])
            .await
            .map_err(|e| format!("look up database {db}: {e}"))?;
        if exists.is_none() {
            client
                .batch_execute(&format!("CREATE DATABASE {db}"))
                .await
                .map_err(|e| format!("create database {db}: {e}"))?;
        }
        Ok(self.0.conninfo(&db))
    }
}

/// A row of `log`: one accepted write, in commit order.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub seq: i64,
    /// The store row (lock path) it wrote.
    pub row: i32,
    pub op: String,
    pub kind: String,
    pub worker: i64,
    pub token: i64,
    pub value: i64,
}

async fn open(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// (Re)creates the schema for one run: `rows` store rows (1, 2, …), each with counter 0 and
/// fence 0; an empty log.
pub(crate) async fn reset(conninfo: &str, rows: u32) -> Result<(), String> {
    let client = open(conninfo)
        .await
        .map_err(|e| format!("connect to postgres: {e}"))?;
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS store, log;
             CREATE TABLE store (id int PRIMARY KEY, counter bigint NOT NULL, fence bigint NOT NULL);
             INSERT INTO store SELECT id, 0, 0 FROM generate_series(1, {rows}) AS id;
             CREATE TABLE log (seq bigserial PRIMARY KEY, op text UNIQUE NOT NULL, kind text NOT NULL,
                               worker int NOT NULL, token bigint NOT NULL, value bigint, row int NOT NULL);"
        ))
        .await
        .map_err(|e| format!("create schema: {e}"))
}

/// The accepted writes in commit order, and each store row's final counter.
pub(crate) async fn dump(conninfo: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    let client = open(conninfo)
        .await
        .map_err(|e| format!("connect to postgres: {e}"))?;
    let rows = client
        .query(
            "SELECT seq, op, kind, worker, token, value, row FROM log ORDER BY seq",
            &[],
        )
        .await
        .map_err(|e| format!("read log: {e}"))?
        .iter()
        .map(|r| Row {
            seq: r.get(0),
            op: r.get(1),
            kind: r.get(2),
            worker: i64::from(r.get::<_, i32>(3)),
            token: r.get(4),
            value: r.get::<_, Option<i64>>(5).unwrap_or(0),
            row: r.get(6),
        })
        .collect();
    let counters = client
        .query("SELECT id, counter FROM store ORDER BY id", &[])
        .await
        .map_err(|e| format!("read store: {e}"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Ok((rows, counters))
}

/// A fenced statement's identity: its op id, the worker sending it, the store row it writes.
pub(crate) struct Op {
    pub id: String,
    pub worker: u32,
    pub row: i32,
}

pub(crate) enum Outcome {
    Ok,
    Refused,
    Unknown(String),
}

/// A worker's connection with its prepared statements.
pub(crate) struct Store {
    conninfo: String,
    fencing: bool,
    conn: Option<(Client, [Statement; 4])>,
}

impl Store {
    pub(crate) async fn connect_retrying(conninfo: &str, fencing: bool) -> Store {
        let mut store = Store {
            conninfo: conninfo.to_owned(),
            fencing,
            conn: None,
        };
        while store.ensure().await.is_err() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        store
    }

    async fn ensure(&mut self) -> Result<&(Client, [Statement; 4]), String> {
        if self.conn.as_ref().is_none_or(|(c, _)| c.is_closed()) {
            let client = open(&self.conninfo).await.map_err(|e| e.to_string())?;
            // The mutant without fencing drops the token comparison and nothing else.
            let check = if self.fencing { "AND fence <= $2" } else { "" };
            let write = format!(
                "WITH u AS (UPDATE store SET counter = $1 WHERE id = $5 {check} RETURNING 1)
                 INSERT INTO log (op, kind, worker, token, value, row) SELECT $3, 'write', $4, $2, $1, $5 FROM u RETURNING seq"
            );
            let check = if self.fencing { "AND fence <= $1" } else { "" };
            let fence = format!(
                "WITH u AS (UPDATE store SET fence = $1 WHERE id = $4 {check} RETURNING counter)
                 INSERT INTO log (op, kind, worker, token, value, row) SELECT $2, 'fence', $3, $1, counter, $4 FROM u RETURNING seq"
            );
            let statements = [
                client.prepare(&write).await.map_err(|e| e.to_string())?,
                client.prepare(&fence).await.map_err(|e| e.to_string())?,
                client
                    .prepare("SELECT counter FROM store WHERE id = $1")
                    .await
                    .map_err(|e| e.to_string())?,
                client
                    .prepare("SELECT counter, fence FROM store WHERE id = $1")
                    .await
                    .map_err(|e| e.to_string())?,
            ];
            self.conn = Some((client, statements));
        }
        self.conn.as_ref().ok_or_else(|| "no connection".into())
    }

    /// Store row `row`'s counter.
    pub(crate) async fn read(&mut self, row: i32) -> Result<i64, String> {
        let (client, st) = self.ensure().await?;
        let row = client
            .query_one(&st[2], &[&row])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    }

    /// Store row `row`'s counter and fence, for readers.
    pub(crate) async fn peek(&mut self, row: i32) -> Result<(i64, i64), String> {
        let (client, st) = self.ensure().await?;
        let row = client
            .query_one(&st[3], &[&row])
            .await
            .map_err(|e| e.to_string())?;
        Ok((row.get(0), row.get(1)))
    }

    /// Sets store row `row`'s counter to `value`, fenced by `token`.
    pub(crate) async fn write(&mut self, op: &Op, token: u64, value: i64) -> Outcome {
        let (worker, token) = (op.worker as i32, token as i64);
        self.execute(0, &[&value, &token, &op.id, &worker, &op.row])
            .await
    }

    /// Raises store row `row`'s fence to `token`.
    pub(crate) async fn raise_fence(&mut self, op: &Op, token: u64) -> Outcome {
        let (worker, token) = (op.worker as i32, token as i64);
        self.execute(1, &[&token, &op.id, &worker, &op.row]).await
    }

    async fn execute(
        &mut self,
        which: usize,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Outcome {
        let (client, st) = match self.ensure().await {
            Ok(conn) => conn,
            Err(err) => return Outcome::Unknown(err),
        };
        match client.query(&st[which], params).await {
            Ok(rows) if rows.is_empty() => Outcome::Refused,
            Ok(_) => Outcome::Ok,
            Err(err) => {
                let message = err.to_string();
                self.conn = None;
                Outcome::Unknown(message)
            }
        }
    }
}
