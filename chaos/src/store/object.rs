//! The fenced store on an object store, through the shipped object store fence
//! (`zkfence-object-store`): the token inside each fenced object, each write conditional on
//! the version whose token it compared, exactly as users get it, against an S3 server (moto)
//! of the scenario's own.
//!
//! Per store row `r` one fenced object, `row-r`, in the scenario's versioned bucket; its
//! payload is the counter and the write's log entry (`<counter> <entry>`). Every accepted
//! write and fence raise is a version of it, and each is conditional on the version before
//! it: the object's versions, oldest first, are the commit order of accepted writes.
//!
//! Half the workers (the odd ones) write through a client that sends a request again when its
//! connection broke before the reply or the reply was a server error, as `object_store` does
//! by default: the fence then finds its own write id to tell a resent write that landed. The
//! others' client never sends a request twice, so a lost reply is theirs to resolve: in
//! doubt. (The in-doubt-as-failed mutant's workers all use the latter: its reply cuts must
//! leave writes in doubt.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, ObjectStore, PutMode, PutOptions};
use zkfence::fence::FenceTicket;
use zkfence_object_store::ObjectFence;

use super::record::{chain, entry, in_doubt, parse_entry, recorded, Op, Outcome, Row, Step};

/// How long a request may take before the client gives up on it: a store paused past it
/// times requests out (a resending client sends a read again; a write, which `object_store`
/// does not resend on a timeout, is in doubt either way).
const TIMEOUT: Duration = Duration::from_secs(2);

/// The retries of a resending client (`object_store`'s default).
const RESENDS: usize = 10;

/// The bytes of a fenced write's request on the wire: every `PUT` a worker sends is one
/// (reads are `GET`s).
pub(super) const COMMIT: &[u8] = b"PUT /";

/// An HTTP server error, as the fault that answers in the store's stead sends it.
pub(super) const SERVER_ERROR: &[u8] = b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: 124\r\nConnection: close\r\n\r\n<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message></Error>";

/// `s3://<host:port>/<bucket>`: the endpoint, the address and the bucket.
fn parse(url: &str) -> Result<(String, String, String), String> {
    let rest = url.strip_prefix("s3://").unwrap_or(url);
    match rest.split_once('/') {
        Some((addr, bucket)) if !bucket.is_empty() => {
            Ok((format!("http://{addr}"), addr.to_owned(), bucket.to_owned()))
        }
        _ => Err(format!("{url:?}: not s3://<host:port>/<bucket>")),
    }
}

/// A client of `url`'s bucket, resending up to `retries` times.
fn client(url: &str, retries: usize) -> Result<Arc<dyn ObjectStore>, String> {
    let (endpoint, _, bucket) = parse(url)?;
    zkfence_harness::s3_client_timed(&endpoint, &bucket, retries, Some(TIMEOUT))
}

fn key(row: i32) -> Path {
    Path::from(format!("row-{row}"))
}

/// A fenced object's payload: the counter, then the log entry of the write.
fn payload(counter: i64, entry: &str) -> String {
    format!("{counter} {entry}")
}

/// The counter in a fenced object's payload (0 for none).
fn counter_of(payload: Option<&[u8]>) -> Result<i64, String> {
    let Some(bytes) = payload else { return Ok(0) };
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let first = text.split(' ').next().unwrap_or_default();
    first.parse().map_err(|e| format!("payload {text:?}: {e}"))
}

/// Checks that the scenario's bucket holds nothing: it is made with its server, and a store
/// is reset once per run.
pub(super) async fn reset(url: &str) -> Result<(), String> {
    let store = client(url, RESENDS)?;
    match store.list(None).next().await {
        None => Ok(()),
        Some(Ok(found)) => Err(format!(
            "{url}: expected an empty bucket (a fresh S3 server per scenario), found {}",
            found.location
        )),
        Some(Err(err)) => Err(format!("list {url}: {}", chain(&err))),
    }
}

/// The accepted writes (each store row's versions oldest first, the rows in order), and each
/// store row's final counter. A version whose header token is not its entry's (the writer's)
/// is an error: the fence wrote another token than its ticket's. (moto lists versions by
/// their time of writing; each is conditional on the one before it, so that is their order.)
pub(super) async fn dump(url: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    let (_, addr, bucket) = parse(url)?;
    let store = client(url, RESENDS)?;
    let listed: Vec<_> = store.list(None).collect().await;
    let mut rows = Vec::new();
    for meta in listed {
        let meta = meta.map_err(|e| format!("list {url}: {}", chain(&e)))?;
        let name = meta.location.to_string();
        let row = (name
            .strip_prefix("row-")
            .and_then(|r| r.parse::<i32>().ok()))
        .ok_or_else(|| format!("{url}: an object {name:?} no worker writes"))?;
        rows.push(row);
    }
    rows.sort_unstable();
    let mut all = Vec::new();
    let mut counters = BTreeMap::new();
    for row in rows {
        let name = key(row).to_string();
        let (a, b, n) = (addr.clone(), bucket.clone(), name.clone());
        let ids =
            tokio::task::spawn_blocking(move || zkfence_harness::s3_object_versions(&a, &b, &n))
                .await
                .map_err(|e| e.to_string())??;
        let mut counter = 0;
        for id in ids {
            let options = GetOptions {
                version: Some(id.clone()),
                ..GetOptions::default()
            };
            let got = store.get_opts(&key(row), options).await;
            let bytes = match got {
                Ok(got) => got.bytes().await,
                Err(err) => Err(err),
            };
            let bytes = bytes.map_err(|e| format!("{name} version {id}: {}", chain(&e)))?;
            let (logged, value) =
                version_row(&bytes).map_err(|why| format!("{name} version {id}: {why}"))?;
            counter = value;
            all.push(logged);
        }
        counters.insert(row, counter);
    }
    for (seq, row) in all.iter_mut().enumerate() {
        row.seq = seq as i64 + 1;
    }
    Ok((all, counters))
}

/// A version's log row and the counter it holds, from its bytes: the fence's header line
/// (`zkfence-fence 1 <token> <write id> <state> <scope>`), then the payload.
fn version_row(bytes: &[u8]) -> Result<(Row, i64), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| e.to_string())?;
    let (header, body) = text.split_once('\n').ok_or("no header line")?;
    let token: i64 = (header.split(' ').nth(2))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| format!("a header without a token: {header:?}"))?;
    let (counter, logged) = body
        .split_once(' ')
        .ok_or_else(|| format!("a payload without an entry: {body:?}"))?;
    let counter = counter_of(Some(counter.as_bytes()))?;
    let row = parse_entry(logged).ok_or_else(|| format!("a bad entry {logged:?}"))?;
    if row.token != token {
        return Err(format!("header token {token}, the entry's {}", row.token));
    }
    Ok((row, counter))
}

/// A worker's fence, its client resending or not (none in the fencing-off mutant, whose
/// writes are plain puts through the same client).
pub(crate) struct ObjStore {
    url: String,
    fencing: bool,
    resend: bool,
    fence: Option<ObjectFence>,
}

impl ObjStore {
    pub(super) fn new(url: &str, fencing: bool, resend: bool) -> ObjStore {
        ObjStore {
            url: url.to_owned(),
            fencing,
            resend,
            fence: None,
        }
    }

    /// The fence, made on first use (an object store has no connection to open). It reads
    /// too: a read leaves it the version a write is then conditional on.
    pub(super) async fn ensure(&mut self) -> Result<ObjectFence, String> {
        if self.fence.is_none() {
            let retries = if self.resend { RESENDS } else { 0 };
            self.fence = Some(ObjectFence::new(client(&self.url, retries)?));
        }
        self.fence.clone().ok_or_else(|| "no client".into())
    }

    /// Store row `row`'s counter.
    pub(super) async fn read(&mut self, row: i32) -> Result<i64, String> {
        Ok(self.peek(row, "").await?.0)
    }

    /// Store row `row`'s counter and its object's fence (0 before its first claim), for
    /// readers.
    pub(super) async fn peek(&mut self, row: i32, _scope: &str) -> Result<(i64, i64), String> {
        let fence = self.ensure().await?;
        let found = (fence.read(&key(row)).await).map_err(|e| chain(&e))?;
        let counter = counter_of(found.payload().map(|p| &p[..]))?;
        Ok((counter, found.token().unwrap_or(0)))
    }

    /// One fenced write: a fenced put of the new counter and the write's entry, or, for a
    /// fence raise, a fenced update that keeps the counter it finds (a plain put, with no
    /// compare and no condition, in the fencing-off mutant).
    pub(super) async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        let fence = match self.ensure().await {
            Ok(fence) => fence,
            Err(err) => return Outcome::NotApplied(err),
        };
        let token = ticket.token().as_i64();
        let path = key(op.row);
        if !self.fencing {
            return unfenced(&fence, ticket, op, step).await;
        }
        let written = match step {
            Step::Write(value) => {
                let bytes = payload(value, &entry(op, "write", token, value));
                fence.put(&path, ticket, bytes).await
            }
            Step::Fence => {
                let logged = entry(op, "fence", token, 0);
                let keep = |found: Option<&bytes::Bytes>| {
                    let counter = counter_of(found.map(|p| &p[..]))?;
                    Ok::<_, zkfence::fence::BoxError>(payload(counter, &logged))
                };
                fence.update(&path, ticket, keep).await
            }
        };
        recorded(written.map(|_| ()))
    }
}

/// The fencing-off mutant's write: the same object, its header in the fence's form (see
/// `zkfence_object_store::PROTOCOL`) with the writer's token, put over whatever is there: no
/// compare, no condition (a failed one is in doubt: it is one request).
async fn unfenced(fence: &ObjectFence, ticket: &FenceTicket, op: &Op, step: Step) -> Outcome {
    let token = ticket.token().as_i64();
    let counter = match step {
        Step::Write(value) => value,
        Step::Fence => match fence.read(&key(op.row)).await {
            Ok(found) => counter_of(found.payload().map(|p| &p[..])).unwrap_or(0),
            Err(err) => return Outcome::NotApplied(chain(&err)),
        },
    };
    let (kind, value) = match step {
        Step::Write(value) => ("write", value),
        Step::Fence => ("fence", 0),
    };
    let write_id = crate::clock::now_ns() as u128 ^ (u128::from(op.worker) << 64);
    let bytes = format!(
        "zkfence-fence 1 {token:019} {write_id:032x} value {}\n{}",
        ticket.scope(),
        payload(counter, &entry(op, kind, token, value))
    );
    let options = PutOptions {
        mode: PutMode::Overwrite,
        ..PutOptions::default()
    };
    let put = fence
        .store()
        .put_opts(&key(op.row), bytes.into(), options)
        .await;
    recorded(put.map(|_| ()).map_err(|e| in_doubt(ticket, e)))
}
