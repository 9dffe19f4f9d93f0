//! Granting: the lock-delay after a failed holder, the read that follows it, the proof that
//! the lease holds (early, once our herald goes, or at the grant), and the grant itself.

use tokio::sync::oneshot;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::metrics::{GRANT_PROOFS_TOTAL, LOCK_DELAYS_TOTAL};
use crate::requests::retry::retrying;
use crate::requests::{chroot_prefix, server_path};
use crate::wait::sleep_until_opt;
use crate::watchdog::clock;
use crate::watchdog::Event;

use super::handoff::release_marked;
use super::in_process::InProcessTurn;
use super::state::{Attempt, Grant, Queued, Waited};

impl Attempt<'_> {
    /// Asks the session's watchdog to prove the session now, checking our node, unless a proof
    /// asked for earlier is still on its way: our herald went (see [`Kind::herald`]), so our
    /// grant is a few handoffs away, and a lease that holds by then lets it return without a
    /// commit of its own (see [`Self::prove`]).
    pub(super) fn warm_up(&self, node: &Queued) {
        use oneshot::error::TryRecvError;
        let mut warming = self.warming.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(proved) = warming.as_mut() {
            if matches!(proved.try_recv(), Err(TryRecvError::Empty)) {
                return;
            }
        }
        tracing::debug!(node = %node.path, "our herald went: proving the session before our turn");
        *warming = Some(self.ask_for_proof(node, self.budget()));
    }

    /// Asks the session's watchdog to prove the session, checking our node: the receiver is
    /// told once the lease vouches for a hold of `budget` (dropped: the node is gone, or the
    /// session over).
    pub(super) fn ask_for_proof(
        &self,
        node: &Queued,
        budget: std::time::Duration,
    ) -> oneshot::Receiver<()> {
        let (done, proved) = oneshot::channel();
        // The watchdog reads paths on the server: the chroot included.
        self.watchdog_ref.watch().send(Event::Prove {
            node: server_path(self.client, &node.path).into(),
            budget,
            done,
        });
        proved
    }

    /// A holder ahead of us failed rather than released: gives its stalled work the
    /// lock-delay to end before ours starts, within our own deadline. `Ok(false)`: the
    /// deadline came first (our node is removed).
    pub(super) async fn delay(&mut self, vanished: bool) -> Result<bool> {
        let Some(delay) = self.queue.options.lock_delay.filter(|_| vanished) else {
            return Ok(true);
        };
        let until = Instant::now() + delay;
        // If we give up during the delay, our node goes without the release marker, so our
        // successor inherits the delay instead of walking straight in.
        self.pending.set_mark(false);
        tracing::debug!(
            delay_ms = delay.as_millis() as u64,
            "lock-delay: a node ahead vanished without a release"
        );
        metrics::counter!(LOCK_DELAYS_TOTAL, "lock" => self.queue.label.clone()).increment(1);
        let deadline = self.deadline();
        if deadline.is_some_and(|d| d < until) {
            sleep_until_opt(deadline).await;
            self.withdraw().await?;
            return Ok(false);
        }
        tokio::time::sleep_until(until).await;
        Ok(true)
    }

    /// After a lock-delay: reads our node once more, so that the grant rests on a reply that
    /// came after the vanish. The node that vanished without a release was a session's that
    /// ended, and its deletion may have taken ours in the same transaction: a session closed
    /// from outside deletes all its nodes at once (it may have been ours, holding and
    /// waiting), as does an administrator's `multi`. Its notification may come behind the one
    /// we proceeded on, and a semaphore's waiter watches nothing of its own; a lease proved
    /// before the vanish vouches for the session, not for the node. Our server sent that
    /// notification after applying the transaction, so it answers this read from a state in
    /// which our node is gone (a reconnect reaches only a server at least as far along).
    /// One round trip, on a path that has just slept out the lock-delay.
    pub(super) async fn reread(&self, node: &Queued) -> Result<()> {
        let (client, path) = (self.client, node.path.as_str());
        match retrying(client, || client.check_stat(path)).await? {
            Ok(Some(_)) => Ok(()),
            Ok(None) | Err(zk::Error::NoNode) => Err(self.node_deleted(node).await),
            Err(err) => Err(Error::from_request("exists", path, self.session, err)),
        }
    }

    /// Makes sure the lease can vouch for the hold we were granted: a session that only waited
    /// sent no proof meanwhile (only holds probe), so after a long wait its last proof may be
    /// too old. Then the watchdog probes now, checking our node, and the grant waits for the
    /// commit (one round trip); a grant soon after our create needs none, nor one whose
    /// warm-up ([`Self::warm_up`]) proved the session while it waited, and one whose warm-up
    /// is still on its way waits for that. `Ok(false)`: the deadline passed first (our node is
    /// removed).
    pub(super) async fn prove(&mut self, node: &Queued) -> Result<bool> {
        use oneshot::error::TryRecvError;
        let budget = self.budget();
        let early = (self.warming.get_mut())
            .unwrap_or_else(|e| e.into_inner())
            .take();
        // What our warm-up came to: proved (its answer is in), still on its way, or nothing.
        let (warmed, pending) = match early {
            Some(mut proved) => match proved.try_recv() {
                Ok(()) => (true, None),
                Err(TryRecvError::Empty) => (false, Some(proved)),
                Err(TryRecvError::Closed) => (false, None),
            },
            None => (false, None),
        };
        if self.lease().grants_at_once(budget, clock::now()) {
            self.count_proof(if warmed { "warmed" } else { "held" });
            return Ok(true);
        }
        // A proof sent while we waited and still on its way is nearer than a new one.
        let (proved, how) = match pending {
            Some(proved) => (proved, "warmed"),
            None => (self.ask_for_proof(node, budget), "at_grant"),
        };
        let deadline = self.deadline();
        tokio::select! {
            proved = proved => match proved {
                Ok(()) => {
                    self.count_proof(how);
                    Ok(true)
                }
                // The watchdog found our node gone (or its session over) before the proof.
                Err(_) => Err(self.node_deleted(node).await),
            },
            _ = sleep_until_opt(deadline) => {
                self.pending.remove().await?;
                Ok(false)
            }
        }
    }

    /// Counts how a grant's lease was proved (see [`GRANT_PROOFS_TOTAL`]).
    pub(super) fn count_proof(&self, proof: &'static str) {
        metrics::counter!(GRANT_PROOFS_TOTAL, "proof" => proof, "lock" => self.queue.label.clone())
            .increment(1);
    }

    /// Hands our node back as a grant, for the front type to build its guard from.
    pub(super) fn into_grant(
        mut self,
        node: Queued,
        waited: Waited,
        turn: Option<InProcessTurn>,
    ) -> Grant {
        self.watchdog_ref.granted();
        let mark = release_marked(self.queue.kind, self.lock_delay_on(), waited.crowded);
        Grant {
            token: node.token,
            watchdog_ref: self.watchdog_ref,
            node_watch: waited.own_watch,
            chroot_len: chroot_prefix(self.client.path()).len(),
            release: self.pending.into_release(&node.name, mark, turn),
            behind_writers: waited.behind_writers,
        }
    }
}
