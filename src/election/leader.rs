//! [`Leader`]: who leads an election, as one listing and a read show it (for
//! [`FencedElection::leader`](super::FencedElection::leader) and the [`Observer`](super::Observer)),
//! and the value it proclaimed.

use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::lock::{Contender, FencedLock};
use crate::queue::kind::Kind;
use crate::queue::names::{self, LATCH_NAME};
use crate::requests::retry::retrying;
use crate::token::FencingToken;

/// The child of the election path that holds the leader's proclaimed value (it is no candidate:
/// its name has no `latch-`).
pub(super) const VALUE_NAME: &str = "zkfence-leader-value";

/// The current leader, as [`FencedElection::leader`](crate::FencedElection::leader) and
/// [`Observer`](crate::Observer) report it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// Its epoch: its node's fencing token.
    pub epoch: FencingToken,
    /// What it proclaimed (see [`Leadership::proclaim`](crate::Leadership::proclaim)), else its
    /// campaign's data.
    pub data: Vec<u8>,
    /// The session that leads.
    pub session_id: zk::SessionId,
    /// Its node's name under the election path.
    pub node: String,
}

/// The leader of `election`'s path, read as [`FencedLock::holders`] reads a lock's holders
/// (one listing, then the holder's node), with the proclaimed value, read beside the holder's
/// node, if the leader wrote it.
pub(super) async fn read_leader(election: &FencedLock, value: &str) -> Result<Option<Leader>> {
    let client = election.client();
    loop {
        let holding = match election.holding_nodes().await {
            Ok(holding) => holding,
            Err(Error::NoParent { .. }) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Some(head) = candidate(holding) else {
            return Ok(None);
        };
        let (holder, proclaimed) = futures_util::future::join(
            election.read_contenders(std::slice::from_ref(&head)),
            retrying(client, || client.get_data(value)),
        )
        .await;
        match holder?.pop() {
            Some(holder) => return Ok(Some(leader_of(holder, proclaimed?.ok()))),
            // Gone between the listing and the read: look again.
            None => continue,
        }
    }
}

/// The leader in a listing: the candidate that holds by the queue's own rule (nothing queued
/// ahead of it: [`Kind::holders`], which [`FencedLock::holders`] applies), with its sequence.
pub(super) fn head(children: Vec<String>) -> Option<(String, i32)> {
    candidate(Kind::holders(names::queue_order(children), None))
}

/// The election candidate (`latch-`) among the holders of a listing.
fn candidate(holding: Vec<(String, i32)>) -> Option<(String, i32)> {
    (holding.into_iter()).find(|(name, _)| names::marker_of(name) == Some(LATCH_NAME))
}

/// The leader whose node a listing and a read found (`sequence`, and `data` and `stat` of the
/// node `node`), with the value it proclaimed if the read found one.
pub(super) fn leader(
    node: String,
    sequence: i32,
    data: Vec<u8>,
    stat: zk::Stat,
    proclaimed: Option<(Vec<u8>, zk::Stat)>,
) -> Leader {
    let holder = Contender {
        node,
        token: FencingToken::of_node(sequence, stat.czxid),
        session_id: zk::SessionId(stat.ephemeral_owner),
        data,
        created_ms: stat.ctime,
    };
    leader_of(holder, proclaimed)
}

/// The leader that `holder` is, with the value it proclaimed if `proclaimed` is its.
fn leader_of(holder: Contender, proclaimed: Option<(Vec<u8>, zk::Stat)>) -> Leader {
    Leader {
        epoch: holder.token,
        data: proclaimed_for(holder.token, proclaimed).unwrap_or(holder.data),
        session_id: holder.session_id,
        node: holder.node,
    }
}

/// The proclaimed value, if the leader of `epoch` wrote it: `<epoch>\n<value>`.
pub(super) fn proclaimed_for(
    epoch: FencingToken,
    read: Option<(Vec<u8>, zk::Stat)>,
) -> Option<Vec<u8>> {
    let (data, _) = read?;
    let at = data.iter().position(|b| *b == b'\n')?;
    let written_by: u64 = std::str::from_utf8(&data[..at]).ok()?.parse().ok()?;
    (written_by == epoch.as_u64()).then(|| data[at + 1..].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_leader_of_a_listing_is_the_candidate_nothing_is_queued_ahead_of() {
        let latch = |seq: i32| format!("_c_0f-{LATCH_NAME}{seq:010}");
        let listing = vec![latch(12), VALUE_NAME.to_owned(), latch(7), latch(9)];
        assert_eq!(head(listing), Some((latch(7), 7)));
        assert_eq!(head(vec![VALUE_NAME.to_owned()]), None);
        // A node of another kind queued ahead holds, so no candidate leads (as a campaign
        // would wait for it).
        let mut mixed = names::mutex_names(&[3]);
        mixed.push(latch(5));
        assert_eq!(head(mixed), None);
    }
}
