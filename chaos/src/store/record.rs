//! What every store shares: the history's rows, a fenced write's identity and what it writes,
//! and its outcome as a worker records it.

use zkfence::fence::{FenceError, FenceTicket};

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

/// A fenced statement's identity: its op id, the worker sending it, the store row it writes.
pub(crate) struct Op {
    pub id: String,
    pub worker: u32,
    pub row: i32,
}

pub(crate) enum Outcome {
    Ok,
    /// The fence refused the token (a newer holder claimed).
    Refused,
    /// The fence's check before the commit found the hold lost: nothing written.
    LockLost,
    /// The connection failed with the transaction under way: it may have committed.
    Unknown(String),
    /// The store's error before the commit (`FenceError::Store`, `FenceError::Invalid`), or
    /// no connection to send it on: nothing applied, by the fence's contract.
    NotApplied(String),
}

/// What a fenced step writes: a value into the counter, or (a claim) the counter as it is.
#[derive(Clone, Copy)]
pub(crate) enum Step {
    Write(i64),
    Fence,
}

/// A fenced write's outcome as the worker records it: refused, the hold found lost, in doubt
/// (the commit's reply lost), or not applied: the store's error before the commit, or a write
/// the fence could not make (`FenceError::Store` and `FenceError::Invalid` promise that
/// nothing applied, and the checker holds the fences to it).
pub(crate) fn recorded<E: std::error::Error + 'static>(
    outcome: Result<(), FenceError<E>>,
) -> Outcome {
    match outcome {
        Ok(()) => Outcome::Ok,
        Err(FenceError::Refused { .. }) => Outcome::Refused,
        Err(FenceError::LockLost { .. }) => Outcome::LockLost,
        Err(err @ (FenceError::Store(_) | FenceError::Invalid(_))) => {
            Outcome::NotApplied(chain(&err))
        }
        Err(err) => Outcome::Unknown(chain(&err)),
    }
}

/// The error of a commit whose reply did not come, as the fences report it: in doubt.
pub(crate) fn in_doubt<E>(ticket: &FenceTicket, cause: E) -> FenceError<E> {
    FenceError::InDoubt {
        scope: ticket.scope().to_owned(),
        token: ticket.token().as_i64(),
        cause,
    }
}

/// `err` and its sources, one after another (tokio-postgres's own text of a server's error is
/// "db error", its message is the source's).
pub(crate) fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

/// A log entry as the Redis and ZooKeeper stores keep it: op, kind, worker, token, value, store
/// row, separated by spaces.
pub(super) fn entry(op: &Op, kind: &str, token: i64, value: i64) -> String {
    format!("{} {kind} {} {token} {value} {}", op.id, op.worker, op.row)
}

/// The row a log [`entry`] stands for (its `seq` left 0 for the caller to number).
pub(super) fn parse_entry(entry: &str) -> Option<Row> {
    let mut fields = entry.split(' ');
    let (op, kind) = (fields.next()?, fields.next()?);
    let mut number = || fields.next()?.parse::<i64>().ok();
    let (worker, token, value, row) = (number()?, number()?, number()?, number()?);
    Some(Row {
        seq: 0,
        op: op.to_owned(),
        kind: kind.to_owned(),
        worker,
        token,
        value,
        row: i32::try_from(row).ok()?,
    })
}
