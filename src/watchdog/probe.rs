//! One probe of the session on the wire: the `multi` of `check`s that renews the lease's proof
//! (or, under the mutants' `sync` rule, a `sync`), chunked below ZooKeeper's request size, and
//! the answers it can get.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::clock;
use super::core::Answer;
use crate::requests::retry::answered_by_server;

/// One probe: a `multi` per chunk of its checks, sent together; a reply per chunk.
pub(super) type Probe = Pin<Box<dyn Future<Output = Vec<ProbeReply>> + Send>>;

/// A probe whose answer has not come within `limit` (the session timeout: by then nothing it
/// could prove still holds a lease) is given up, with no answer, which proves nothing and loses
/// nothing. A reply lost on a live connection never comes (a proxy dropping frames does that;
/// TCP does not), and a probe in flight holds the regular one back.
pub(super) async fn abandon_after(
    limit: Duration,
    probe: impl Future<Output = Vec<ProbeReply>>,
) -> Vec<ProbeReply> {
    tokio::time::timeout(limit, probe).await.unwrap_or_default()
}

/// One `check` of a probe: a held guard's node, a granted node waiting for its proof, or
/// (with none held) a lock path.
#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) guard: Option<u64>,
    pub(super) path: Arc<str>,
}

/// The most a probe's `multi` carries, in bytes of its checks, far below ZooKeeper's default
/// `jute.maxbuffer` (1 MiB): a session with more holds in jeopardy sends several, together.
const MOST_PROBE_BYTES: usize = 256 * 1024;

/// A `check` operation's bytes in a `multi` request, besides its path: the op header (type,
/// done, error), the path's length and the version.
const CHECK_OVERHEAD: usize = 4 + 1 + 4 + 4 + 4;

/// One probe's chunk, timed from its send.
#[derive(Debug)]
pub(super) struct ProbeReply {
    pub(super) sent: Instant,
    /// What it checked, in order: guards' nodes, granted nodes, or a lock path.
    pub(super) checks: Vec<Check>,
    pub(super) answer: Answer,
}

/// One probe of the session: `multi`s of `check`s of the targets (any version), chunked below
/// [`MOST_PROBE_BYTES`] and sent together. Each is a write, so it is committed only by a leader
/// with a quorum (see [`super::lease`]); it changes nothing and fires no watch, and on held
/// nodes it also finds one that is gone (the first, by its index).
///
/// Under the mutants' `sync` rule it is a `sync` then a read of the first target: unsound,
/// since a leader answers its own clients' syncs without a quorum.
pub(super) async fn probe_session(
    client: Arc<zk::Client>,
    targets: Vec<Check>,
    sync: bool,
) -> Vec<ProbeReply> {
    let sent = clock::now();
    if sync {
        return vec![probe_by_sync(&client, &targets, sent).await];
    }
    probe_by_checks(&client, &targets, sent).await
}

/// The probe under the mutants' `sync` rule (unsound: see [`probe_session`]): a `sync`, then a
/// read of the first target (`/` without one), sent at `sent`; one reply, for that target.
async fn probe_by_sync(client: &zk::Client, targets: &[Check], sent: Instant) -> ProbeReply {
    let path = targets
        .first()
        .map_or_else(|| Arc::from("/"), |c| c.path.clone());
    let synced = client.sync(&path);
    let read = client.check_stat(&path);
    let synced = synced.await;
    let answer = match (read.await, synced) {
        (Ok(None), _) => Answer::Refused(Some(0)),
        (_, Ok(())) => Answer::Synced,
        (_, Err(err)) => refused_or_none(&err, None),
    };
    let checks = targets[..targets.len().min(1)].to_vec();
    ProbeReply {
        sent,
        checks,
        answer,
    }
}

/// The probe proper (see [`probe_session`]): a `multi` of `check`s (any version) per chunk of
/// the targets, sent together at `sent`; a reply per chunk, in order.
async fn probe_by_checks(client: &zk::Client, targets: &[Check], sent: Instant) -> Vec<ProbeReply> {
    let chunks = chunk_checks(targets);
    let commits = chunks.iter().map(|chunk| {
        let mut multi = client.new_multi_writer();
        let added = (chunk.iter()).try_for_each(|c| multi.add_check_version(&c.path, -1));
        async move {
            added?;
            multi.commit().await.map(|_| ())
        }
    });
    let results = futures_util::future::join_all(commits).await;
    (chunks.iter().zip(results))
        .map(|(chunk, result)| ProbeReply {
            sent,
            checks: chunk.to_vec(),
            answer: match result {
                Ok(()) => Answer::Committed,
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    refused_or_none(&source, Some(index))
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    refused_or_none(&source, None)
                }
            },
        })
        .collect()
}

/// The answer for a probe that failed with `err` (at check `index`, if one failed).
fn refused_or_none(err: &zk::Error, index: Option<usize>) -> Answer {
    match err {
        zk::Error::NoNode => Answer::Refused(index.or(Some(0))),
        err if answered_by_server(err) => Answer::Refused(None),
        _ => Answer::None,
    }
}

/// `checks` in chunks of at most [`MOST_PROBE_BYTES`] (at least one check each).
fn chunk_checks(checks: &[Check]) -> Vec<&[Check]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, check) in checks.iter().enumerate() {
        let size = check.path.len() + CHECK_OVERHEAD;
        if i > start && bytes + size > MOST_PROBE_BYTES {
            chunks.push(&checks[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < checks.len() {
        chunks.push(&checks[start..]);
    }
    chunks
}
