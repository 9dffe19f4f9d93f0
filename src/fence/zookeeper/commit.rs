//! A fenced commit's attempts: the fence node as this fence remembers it or reads it, compared
//! with the ticket's token, and committed again while other writers move it first.

use zookeeper_client as zk;

use super::fence::{Seen, ZooKeeperFence};
use super::transaction::CommitFailure;
use crate::error::Error;
use crate::fence::error::FenceError;
use crate::fence::ticket::FenceTicket;
use crate::mutants::FenceMutant;
use crate::requests::nodes::create_parents;

/// How often a fenced write re-reads the fence node when other writers keep moving it between
/// its read and its commit, before it gives up.
const MAX_RACES: u32 = 32;

impl ZooKeeperFence {
    /// Reads the fence node, compares, and commits the checks and `ops` in one `multi`, again
    /// while other writers move the fence node first. The fence's token before, and `ops`'s
    /// results. `claiming`: a claim (no `ops`), which the `CheckOutsideTransaction` mutant
    /// checks, and whose later writes it does not.
    pub(super) async fn commit(
        &self,
        ticket: &FenceTicket,
        claiming: bool,
        ops: &mut (dyn FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send),
    ) -> Result<(Option<i64>, Vec<zk::MultiWriteResult>), FenceError<Error>> {
        let op = if claiming { "claim" } else { "write" };
        let unchecked = self.flaw.is(FenceMutant::CheckOutsideTransaction) && !claiming;
        let work = async move {
            let session = self.client.session_id();
            tracing::Span::current().record("session_id", tracing::field::display(session));
            match unchecked {
                // The mutant trusts the claim made before, and writes with no check at all.
                true => (self.send(ticket, None, ops).await)
                    .map(|out| (None, out))
                    .map_err(|a| match a {
                        CommitFailure::Failed(err) => err,
                        _ => FenceError::Store(Error::InvalidOptions("unchecked write raced")),
                    }),
                false => self.attempts(ticket, ops).await,
            }
        };
        crate::fence::driver::drive_once("zookeeper", op, ticket, work).await
    }

    /// [`commit`](Self::commit)'s attempts.
    async fn attempts(
        &self,
        ticket: &FenceTicket,
        ops: &mut (dyn FnMut(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error> + Send),
    ) -> Result<(Option<i64>, Vec<zk::MultiWriteResult>), FenceError<Error>> {
        for attempt in 0..MAX_RACES {
            let (seen, raise) = self.admit(ticket, attempt).await?;
            let before = seen.as_ref().and_then(|s| s.token);
            ticket.check_before_commit()?;
            match self.send(ticket, Some((seen.as_ref(), raise)), ops).await {
                Ok(results) => {
                    self.remember(ticket, seen.as_ref(), raise);
                    return Ok((before, results));
                }
                Err(CommitFailure::Raced) => {
                    self.forget();
                    crate::fence::driver::record_retry("zookeeper", "raced");
                }
                Err(CommitFailure::NoParent) => self.create_fence_parent().await?,
                Err(CommitFailure::Failed(err)) => return Err(err),
            }
        }
        Err(FenceError::Store(Error::FenceContended {
            scope: ticket.scope().to_owned(),
            attempts: MAX_RACES,
        }))
    }

    /// What attempt `attempt` commits against: the fence node as seen (`None`: none, to be
    /// created) and whether the ticket raises it (`false`: it holds the ticket's own token,
    /// checked unchanged); or the refusal of an older token.
    async fn admit(
        &self,
        ticket: &FenceTicket,
        attempt: u32,
    ) -> Result<(Option<Seen>, bool), FenceError<Error>> {
        // The fence node as this fence last left it, if it did, on the first try: its
        // version check in the multi makes a stale memory fail the commit, not the fence.
        // A refusal is always decided on a fresh read.
        let mut seen = match attempt {
            0 => self.known(ticket),
            _ => None,
        };
        let token = ticket.token().as_i64();
        let admitted = seen
            .as_ref()
            .and_then(|s| self.flaw.admits(token, s.token).ok());
        let raise = match admitted {
            Some(raise) => raise,
            None => {
                seen = self.read_fence(ticket).await?;
                let before = seen.as_ref().and_then(|s| s.token);
                (self.flaw.admits(token, before))
                    .map_err(|()| ticket.refused(before.unwrap_or(-1)))?
            }
        };
        Ok((seen, raise))
    }

    /// Creates the fence node's missing parents (persistent, with the fence's ACLs).
    async fn create_fence_parent(&self) -> Result<(), FenceError<Error>> {
        let node = self.node.as_deref().unwrap_or_default();
        let parent = &node[..node.rfind('/').unwrap_or(0)];
        let mode = zk::CreateMode::Persistent;
        create_parents(&self.client, parent, mode, &self.acls)
            .await
            .map_err(FenceError::Store)
    }

    /// What this fence's last commit left in the fence node, if it was for `ticket`'s scope.
    fn known(&self, ticket: &FenceTicket) -> Option<Seen> {
        self.node.as_ref()?;
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        (known.as_ref())
            .filter(|(scope, _)| **scope == *ticket.scope())
            .map(|(_, seen)| Seen {
                token: seen.token,
                version: seen.version,
            })
    }

    /// Remembers the fence node as a commit for `ticket` left it: created (version 0), raised
    /// (one version on), or checked (unchanged).
    fn remember(&self, ticket: &FenceTicket, seen: Option<&Seen>, raise: bool) {
        if self.node.is_none() {
            return;
        }
        let left = match seen {
            None => Seen {
                token: Some(ticket.token().as_i64()),
                version: 0,
            },
            Some(seen) if raise => Seen {
                token: Some(ticket.token().as_i64()),
                version: seen.version.wrapping_add(1),
            },
            Some(seen) => Seen {
                token: seen.token,
                version: seen.version,
            },
        };
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = Some((ticket.scope().into(), left));
    }

    pub(super) fn forget(&self) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
