//! The store on PostgreSQL: the run's server and a scenario's own, through the shipped
//! PostgreSQL fence (`zkfence-postgres`).

use std::collections::BTreeMap;
use std::path::Path;

use tokio_postgres::{Client, NoTls};
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_harness::LocalPostgres;
use zkfence_postgres::{PostgresFence, TxFuture};

use super::record::{chain, in_doubt, recorded, Op, Outcome, Row, Step};

/// The suite's PostgreSQL server (the test kit's), living as long as this value.
pub(crate) struct Postgres(pub(super) LocalPostgres);

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

async fn open(conninfo: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(conninfo, NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// [`super::reset`] on PostgreSQL: the fence's table and function installed afresh.
pub(super) async fn reset(conninfo: &str, rows: u32) -> Result<(), String> {
    let client = open(conninfo)
        .await
        .map_err(|e| format!("connect to postgres: {e}"))?;
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS store, log, zkfence_fence;
             CREATE TABLE store (id int PRIMARY KEY, counter bigint NOT NULL);
             INSERT INTO store SELECT id, 0 FROM generate_series(1, {rows}) AS id;
             CREATE TABLE log (seq bigserial PRIMARY KEY, op text UNIQUE NOT NULL, kind text NOT NULL,
                               worker int NOT NULL, token bigint NOT NULL, value bigint, row int NOT NULL);"
        ))
        .await
        .map_err(|e| format!("create schema: {e}"))?;
    PostgresFence::new()
        .install(&client)
        .await
        .map_err(|e| format!("install the fence: {e}"))
}

/// [`super::dump`] on PostgreSQL.
pub(super) async fn dump(conninfo: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
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

/// The store on PostgreSQL.
pub(crate) struct PgStore {
    conninfo: String,
    fence: Option<PostgresFence>,
    conn: Option<Client>,
}

/// A write of the counter, logged in the same statement (no row once the store refused).
const WRITE: &str = "WITH u AS (UPDATE store SET counter = $1 WHERE id = $5 RETURNING 1)
     INSERT INTO log (op, kind, worker, token, value, row) SELECT $3, 'write', $4, $2, $1, $5 FROM u";

/// A claim's log row, with the counter it found.
const FENCE: &str = "INSERT INTO log (op, kind, worker, token, value, row)
     SELECT $2, 'fence', $3, $1, counter, $4 FROM store WHERE id = $4";

/// A transaction's statements, as both the fence and the fencing-off mutant run them.
fn statement<F>(work: F) -> F
where
    F: for<'t> FnMut(
        &'t tokio_postgres::Transaction<'_>,
    ) -> TxFuture<'t, (), tokio_postgres::Error>,
{
    work
}

impl PgStore {
    pub(super) fn new(conninfo: &str, fencing: bool) -> PgStore {
        PgStore {
            conninfo: conninfo.to_owned(),
            fence: fencing.then(PostgresFence::new),
            conn: None,
        }
    }

    pub(super) async fn ensure(&mut self) -> Result<&mut Client, String> {
        if self.conn.as_ref().is_none_or(Client::is_closed) {
            self.conn = Some(open(&self.conninfo).await.map_err(|e| chain(&e))?);
        }
        self.conn.as_mut().ok_or_else(|| "no connection".into())
    }

    /// Store row `row`'s counter.
    pub(super) async fn read(&mut self, row: i32) -> Result<i64, String> {
        let client = self.ensure().await?;
        let row = client
            .query_one("SELECT counter FROM store WHERE id = $1", &[&row])
            .await
            .map_err(|e| e.to_string())?;
        Ok(row.get(0))
    }

    /// Store row `row`'s counter and `scope`'s fence (0 before its first claim), for readers.
    pub(super) async fn peek(&mut self, row: i32, scope: &str) -> Result<(i64, i64), String> {
        let client = self.ensure().await?;
        let row = client
            .query_one(
                "SELECT s.counter, coalesce(f.token, 0) FROM store s
                 LEFT JOIN zkfence_fence f ON f.scope = $2 WHERE s.id = $1",
                &[&row, &scope],
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok((row.get(0), row.get(1)))
    }

    /// One fenced transaction: the fence's claim, the step's statement with its `log` row, the
    /// hold's check, the commit (a plain transaction in the fencing-off mutant).
    pub(super) async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        let fence = self.fence.clone();
        let client = match self.ensure().await {
            Ok(client) => client,
            Err(err) => return Outcome::NotApplied(err),
        };
        let (id, worker, row) = (op.id.clone(), op.worker as i32, op.row);
        let token = ticket.token().as_i64();
        let work = statement(move |tx| {
            let id = id.clone();
            Box::pin(async move {
                let written = match step {
                    Step::Write(value) => {
                        tx.execute(WRITE, &[&value, &token, &id, &worker, &row])
                            .await
                    }
                    Step::Fence => tx.execute(FENCE, &[&token, &id, &worker, &row]).await,
                };
                written.map(|_| ())
            })
        });
        let outcome = match fence {
            Some(fence) => fence.transaction(client, ticket, work).await,
            None => unfenced(client, ticket, work).await,
        };
        let outcome = recorded(outcome);
        if matches!(outcome, Outcome::Unknown(_) | Outcome::NotApplied(_)) {
            self.conn = None;
        }
        outcome
    }
}

/// The fencing-off mutant's write: the same statements in a plain transaction (a failed
/// commit is in doubt).
async fn unfenced<F>(
    client: &mut Client,
    ticket: &FenceTicket,
    mut work: F,
) -> Result<(), FenceError<tokio_postgres::Error>>
where
    F: for<'t> FnMut(
        &'t tokio_postgres::Transaction<'_>,
    ) -> TxFuture<'t, (), tokio_postgres::Error>,
{
    let tx = client.transaction().await.map_err(FenceError::Store)?;
    work(&tx).await.map_err(FenceError::Store)?;
    tx.commit().await.map_err(|e| in_doubt(ticket, e))
}
