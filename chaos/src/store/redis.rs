//! The fenced store on Redis, through the shipped Redis fence (`zkfence-redis`): the fence's
//! compare and raise and the write's commands in one script, exactly as users get them. Per
//! lock path (the ticket's scope, the hash tag of every key) a counter `{<scope>}:counter` and
//! a log `{<scope>}:log`, a list: every accepted write and fence raise pushes its entry in the
//! script that raised the fence, so the list's order is the commit order of accepted writes.
//! The server is durable (`appendfsync always`): what it acknowledged survives a `kill -9`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_redis::{Commands, RedisFence};

use super::record::{chain, entry, in_doubt, parse_entry, recorded, Op, Outcome, Row, Step};

/// A connection to `url`, giving up after 5 s.
async fn open(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| format!("{url}: {e}"))?;
    let connect = client.get_multiplexed_async_connection();
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(conn) => conn.map_err(|e| chain(&e)),
        Err(_) => Err("connect: no answer within 5 s".into()),
    }
}

fn counter_key(scope: &str) -> String {
    format!("{{{scope}}}:counter")
}

fn log_key(scope: &str) -> String {
    format!("{{{scope}}}:log")
}

/// Empties the server for one run (a store scenario's server is its own).
pub(super) async fn reset(url: &str) -> Result<(), String> {
    let mut conn = open(url).await?;
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .map_err(|e| format!("FLUSHALL: {e}"))
}

/// The accepted writes (each lock path's log in its order, the paths by store row), and each
/// store row's final counter.
pub(super) async fn dump(url: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    let mut conn = open(url).await?;
    let keys: Vec<String> = conn
        .keys("{*}:log")
        .await
        .map_err(|e| format!("KEYS: {e}"))?;
    let mut logs = Vec::new();
    for key in keys {
        let entries: Vec<String> =
            (conn.lrange(&key, 0, -1).await).map_err(|e| format!("LRANGE {key}: {e}"))?;
        let rows: Vec<Row> = (entries.iter())
            .map(|e| parse_entry(e).ok_or_else(|| format!("{key}: a bad entry {e:?}")))
            .collect::<Result<_, _>>()?;
        let counter: Option<i64> =
            (conn.get(key.replace(":log", ":counter")).await).map_err(|e| format!("GET: {e}"))?;
        if let Some(row) = rows.first().map(|r| r.row) {
            logs.push((row, rows, counter.unwrap_or(0)));
        }
    }
    logs.sort_by_key(|(row, _, _)| *row);
    let mut all = Vec::new();
    let mut counters = BTreeMap::new();
    for (row, rows, counter) in logs {
        counters.insert(row, counter);
        all.extend(rows);
    }
    for (seq, row) in all.iter_mut().enumerate() {
        row.seq = seq as i64 + 1;
    }
    Ok((all, counters))
}

/// A worker's connection, the fence its writes go through (none in the fencing-off mutant,
/// whose writes are plain `MULTI`/`EXEC` transactions), and the scope of each store row it
/// raised a fence on (a hold raises its fence before it reads).
pub(crate) struct RedisStore {
    url: String,
    fence: Option<RedisFence>,
    conn: Option<MultiplexedConnection>,
    scopes: HashMap<i32, String>,
}

impl RedisStore {
    pub(super) fn new(url: &str, fencing: bool) -> RedisStore {
        RedisStore {
            url: url.to_owned(),
            fence: fencing.then(RedisFence::new),
            conn: None,
            scopes: HashMap::new(),
        }
    }

    pub(super) async fn ensure(&mut self) -> Result<&mut MultiplexedConnection, String> {
        if self.conn.is_none() {
            self.conn = Some(open(&self.url).await?);
        }
        self.conn.as_mut().ok_or_else(|| "no connection".into())
    }

    /// A reply; a failed one drops the connection (the next call opens another).
    fn keep<T>(&mut self, outcome: redis::RedisResult<T>) -> Result<T, String> {
        outcome.map_err(|e| {
            self.conn = None;
            chain(&e)
        })
    }

    /// Store row `row`'s counter (its scope learnt from the fence raised on it).
    pub(super) async fn read(&mut self, row: i32) -> Result<i64, String> {
        let key = match self.scopes.get(&row) {
            Some(scope) => counter_key(scope),
            None => return Err(format!("no fence raised on store row {row} yet")),
        };
        let conn = self.ensure().await?;
        let value: redis::RedisResult<Option<i64>> = conn.get(key).await;
        Ok(self.keep(value)?.unwrap_or(0))
    }

    /// Store row `row`'s counter and `scope`'s fence (0 before its first claim), for readers.
    pub(super) async fn peek(&mut self, _row: i32, scope: &str) -> Result<(i64, i64), String> {
        let fence_key = RedisFence::new().fence_key(scope);
        let conn = self.ensure().await?;
        let read: redis::RedisResult<(Option<i64>, Option<String>)> = redis::pipe()
            .get(counter_key(scope))
            .get(fence_key)
            .query_async(conn)
            .await;
        let (counter, fence) = self.keep(read)?;
        let fence = fence
            .map_or(Ok(0), |f| f.parse::<i64>())
            .map_err(|e| e.to_string())?;
        Ok((counter.unwrap_or(0), fence))
    }

    /// One fenced write: the fence's compare and raise, then the step's commands (the counter
    /// set, the log entry pushed) in the same script (a `MULTI`/`EXEC` without the compare in
    /// the fencing-off mutant).
    pub(super) async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        let scope = ticket.scope().to_owned();
        self.scopes.insert(op.row, scope.clone());
        let fence = self.fence.clone();
        let conn = match self.ensure().await {
            Ok(conn) => conn,
            Err(err) => return Outcome::NotApplied(err),
        };
        let token = ticket.token().as_i64();
        let (log, counter) = (log_key(&scope), counter_key(&scope));
        let commands = match step {
            Step::Write(value) => {
                let entry = entry(op, "write", token, value);
                Commands::new()
                    .command(|c| c.arg("SET").key(counter.clone()).arg(value))
                    .command(|c| c.arg("RPUSH").key(log.clone()).arg(entry))
            }
            Step::Fence => {
                let entry = entry(op, "fence", token, 0);
                Commands::new().command(|c| c.arg("RPUSH").key(log.clone()).arg(entry))
            }
        };
        let outcome = match fence {
            Some(fence) => (fence.write(conn, ticket, &commands).await).map(|_| ()),
            None => unfenced(conn, ticket, op, step, &counter, &log).await,
        };
        let outcome = recorded(outcome);
        if matches!(outcome, Outcome::Unknown(_) | Outcome::NotApplied(_)) {
            self.conn = None;
        }
        outcome
    }
}

/// The fencing-off mutant's write: the same commands in a `MULTI`/`EXEC`, with no compare (a
/// failed one is in doubt: it is one request).
async fn unfenced(
    conn: &mut MultiplexedConnection,
    ticket: &FenceTicket,
    op: &Op,
    step: Step,
    counter: &str,
    log: &str,
) -> Result<(), FenceError<redis::RedisError>> {
    let token = ticket.token().as_i64();
    let mut pipe = redis::pipe();
    pipe.atomic();
    match step {
        Step::Write(value) => pipe
            .set(counter, value)
            .rpush(log, entry(op, "write", token, value)),
        Step::Fence => pipe.rpush(log, entry(op, "fence", token, 0)),
    };
    pipe.query_async::<()>(conn)
        .await
        .map_err(|e| in_doubt(ticket, e))
}
