//! The fence node: its data (`<token>\n<scope>`), reading it, and the operator's side (`seen`,
//! `fences`, `rebase`).

use zookeeper_client as zk;

use super::fence::{Seen, ZooKeeperFence};
use crate::error::Error;
use crate::fence::contract::FenceState;
use crate::fence::error::FenceError;
use crate::fence::ticket::FenceTicket;
use crate::requests::retry::retrying;

impl ZooKeeperFence {
    /// Sets the fence node of `scope` to `to`, whatever it holds, and returns what it held
    /// (`None` when there is no fence node yet: nothing to rebase): the operator's way out
    /// after the ensemble's data was reset (every new token is below the old fence). Only once
    /// no holder of the old ensemble can write any more: a fence set lower lets their late
    /// writes in. The node is set (one version on), never deleted.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node or for a negative `to`;
    /// [`Error::FenceScope`] for a fence node of another scope; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one versioned write, which happened or not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// if let Some(old) = fence.rebase("/locks/config", 0).await? {
    ///     println!("the fence moved from {old} to 0");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn rebase(&self, scope: &str, to: i64) -> crate::Result<Option<i64>> {
        let Some(node) = &self.node else {
            return Err(Error::InvalidOptions("this fence keeps no fence node"));
        };
        if to < 0 {
            return Err(Error::InvalidOptions("a fence holds a token from 0"));
        }
        self.forget();
        let client = &self.client;
        let failed = |op, err| Error::from_request(op, node, client.session_id(), err);
        loop {
            let (data, stat) = match retrying(client, || client.get_data(node)).await? {
                Ok(read) => read,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(err) => return Err(failed("get", err)),
            };
            if data.is_empty() {
                return Ok(None);
            }
            let (old, fenced) = parse_fence(node, &data)?;
            if fenced != scope {
                return Err(Error::FenceScope {
                    node: node.clone(),
                    fenced,
                    asked: scope.to_owned(),
                });
            }
            let data = format!("{to}\n{scope}");
            let set = || client.set_data(node, data.as_bytes(), Some(stat.version));
            match retrying(client, set).await? {
                Ok(_) => {
                    tracing::warn!(scope, from = old, to, "fence rebased");
                    return Ok(Some(old));
                }
                // Moved meanwhile (or our own set, repeated after a lost reply): read again.
                Err(zk::Error::BadVersion) => continue,
                Err(err) => return Err(failed("set", err)),
            }
        }
    }

    /// The token the fence node holds for `scope`; `None` before the first claim (the node
    /// missing, or empty).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node; [`Error::FenceScope`] when the node
    /// fences another scope; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// if let Some(token) = fence.seen("/locks/config").await? {
    ///     println!("fenced at {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn seen(&self, scope: &str) -> crate::Result<Option<i64>> {
        match self.fences().await?.pop() {
            Some(state) if state.scope == scope => Ok(Some(state.token)),
            Some(state) => Err(Error::FenceScope {
                node: state.at.unwrap_or_default(),
                fenced: state.scope,
                asked: scope.to_owned(),
            }),
            None => Ok(None),
        }
    }

    /// The fence node's fence, if it holds one: its scope and token, the node's path in `at`;
    /// none when the node is missing or empty (an empty node is a fence node with no fence yet,
    /// which the first claim sets).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOptions`] without a fence node; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(fence: zkfence::fence::ZooKeeperFence) -> zkfence::Result<()> {
    /// for state in fence.fences().await? {
    ///     println!("{}: {}", state.scope, state.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fences(&self) -> crate::Result<Vec<FenceState>> {
        let Some(node) = &self.node else {
            return Err(Error::InvalidOptions("this fence keeps no fence node"));
        };
        let client = &self.client;
        match retrying(client, || client.get_data(node)).await? {
            // An empty node (created as another node's parent, or by hand): no fence yet.
            Ok((data, _)) if data.is_empty() => Ok(Vec::new()),
            Ok((data, _)) => {
                let (token, scope) = parse_fence(node, &data)?;
                Ok(vec![FenceState::new(scope, token).at(node.clone())])
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(err) => Err(Error::from_request("get", node, client.session_id(), err)),
        }
    }

    /// The fence node, if the fence keeps one and it exists.
    pub(super) async fn read_fence(
        &self,
        ticket: &FenceTicket,
    ) -> Result<Option<Seen>, FenceError<Error>> {
        let Some(node) = &self.node else {
            return Ok(None);
        };
        let client = &self.client;
        let read = retrying(client, || client.get_data(node))
            .await
            .map_err(FenceError::Store)?;
        let (data, stat) = match read {
            Ok(read) => read,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) => {
                let err = Error::from_request("get", node, client.session_id(), err);
                return Err(FenceError::Store(err));
            }
        };
        if data.is_empty() {
            return Ok(Some(Seen {
                token: None,
                version: stat.version,
            }));
        }
        let (token, scope) = parse_fence(node, &data).map_err(FenceError::Store)?;
        if scope != ticket.scope() {
            return Err(FenceError::Store(Error::FenceScope {
                node: node.clone(),
                fenced: scope,
                asked: ticket.scope().to_owned(),
            }));
        }
        Ok(Some(Seen {
            token: Some(token),
            version: stat.version,
        }))
    }
}

/// What a fence node holds for `ticket`: its token, a newline, its scope.
pub(super) fn fence_data(ticket: &FenceTicket) -> Vec<u8> {
    format!("{}\n{}", ticket.token().as_i64(), ticket.scope()).into_bytes()
}

/// Reads a fence node's `<token>\n<scope>`.
fn parse_fence(node: &str, data: &[u8]) -> crate::Result<(i64, String)> {
    let text = std::str::from_utf8(data).ok();
    let parsed = text.and_then(|text| {
        let (token, scope) = text.split_once('\n')?;
        let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
        Some((
            digits.then(|| token.parse::<i64>().ok())??,
            scope.to_owned(),
        ))
    });
    parsed.ok_or_else(|| Error::NotAFence {
        node: node.to_owned(),
    })
}
