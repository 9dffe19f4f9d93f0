//! The watchdog task: the [`Core`] plus the ZooKeeper side (session events, node watches,
//! probes).

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::clock;
use super::core::{Answer, Core, Event, NodeToWatch};
use super::lease::{LeaseCell, RunRecord};
use super::nodes::Nodes;
use super::registry::SessionWatch;
use crate::metrics::{LEASE_PROBES_TOTAL, LEASE_REMAINING_SECONDS, WATCHED_SESSIONS};
use crate::requests::retry::answered_by_server;
use crate::wait::sleep_until_opt;

/// How long an idle watchdog keeps its client handle (and keeps probing) after the last guard
/// or acquire of its session ended. The task itself lives as long as the session; only the
/// handle, which would keep the session open, is let go.
const LINGER: Duration = Duration::from_secs(1);

/// The most probes in flight at once: one, but for the cold phase's extra probes.
const MOST_IN_FLIGHT: usize = 4;

/// One probe: a `multi` per chunk of its checks, sent together; a reply per chunk.
type Probe = Pin<Box<dyn Future<Output = Vec<ProbeReply>> + Send>>;

/// The watchdog task: the [`Core`] plus the ZooKeeper side (session events, node watches,
/// probes). Without a client (unit tests) it only applies what comes through the channel.
/// Instants are on the lease clock ([`clock`]), turned into timers only to sleep.
pub(crate) struct Driver {
    watch: Weak<SessionWatch>,
    events: mpsc::UnboundedReceiver<Event>,
    client: Option<Arc<zk::Client>>,
    core: Core,
    timeout: Duration,
    probing: Probing,
    /// Grants, and waiters expecting theirs, waiting for the lease to hold (see [`Event::Prove`]).
    provers: Vec<Prover>,
    /// When the ticker runs next: it tells the lease that the process runs (`LeaseCell::ran`),
    /// so that a cold proof leans only across a stretch without a pause.
    tick_at: Instant,
    /// The guards' nodes: watched, or read back past the session's watch share.
    nodes: Nodes,
}

/// A grant waiting for a proof: its node (checked by the probes until then), the budget the
/// lease must hold for, and whom to tell.
struct Prover {
    node: Arc<str>,
    budget: Duration,
    done: tokio::sync::oneshot::Sender<()>,
}

/// The probes in flight and when the next one goes.
struct Probing {
    in_flight: FuturesUnordered<Probe>,
    last_sent: Option<Instant>,
    next: Instant,
    /// Which held node the next probe checks (they take turns).
    turn: usize,
}

/// What woke the task.
enum Wake {
    Event(Option<Event>),
    /// The first deferred node watch is due.
    Sweep,
    /// A session state, after the Disconnected that the state channel folded into it, if
    /// it did (see [`SessionStates`]).
    State(Option<zk::SessionState>, zk::SessionState),
    /// A node watch ended: its node deleted (`true`), or the session over.
    Watched(u64, bool),
    /// A read of the unwatched holds' nodes came back: each read, and whether it is gone.
    Read(Vec<(u64, bool)>),
    Due,
    Probed(Vec<ProbeReply>),
    ProbeTime,
    Detach,
    /// The ticker's time.
    Tick,
}

impl Driver {
    pub(crate) fn new(
        watch: Weak<SessionWatch>,
        events: mpsc::UnboundedReceiver<Event>,
        client: Option<Arc<zk::Client>>,
    ) -> Driver {
        let strong = watch.upgrade();
        let (session, lease, timeout) = match &strong {
            Some(w) => (w.session, w.lease.clone(), w.timeout),
            None => {
                let timeout = Duration::from_secs(10);
                (0, Arc::new(LeaseCell::new(timeout)), timeout)
            }
        };
        Driver {
            watch,
            events,
            client,
            core: Core::new(session, lease),
            timeout,
            probing: Probing {
                in_flight: FuturesUnordered::new(),
                last_sent: None,
                next: clock::now(),
                turn: 0,
            },
            provers: Vec::new(),
            tick_at: clock::now(),
            nodes: Nodes::new(),
        }
    }

    /// The ticker: records that the process runs now (in the session's lease and in the
    /// process's record, whose history a new session's lease starts from), and when to run
    /// next.
    fn tick(&mut self) {
        let now = clock::now();
        let lease = &self.core.lease;
        let unbroken = lease.ran(now);
        // Before a lock's policy sets the stall, every gap would be a break.
        if lease.stall() > Duration::ZERO {
            lease.inherit(process_ran(now, lease.stall()), unbroken);
        }
        self.tick_at = now + lease.ticker_period();
    }

    pub(crate) async fn run(mut self) {
        let mut idle_since: Option<Instant> = None;
        // The state channel, and the state as it is now, taken from it (so that what comes
        // next on it is a change from this).
        let mut states = self.client.as_deref().map(SessionStates::new);
        if let Some(states) = &states {
            self.on_state(states.first());
        }
        self.tick();
        loop {
            self.take_posted();
            let detach_at = idle_since.map(|t| t + LINGER.min(self.timeout / 3));
            let wake = self.next_wake(&mut states, detach_at).await;
            if self.on_wake(wake).is_break() {
                break;
            }
            self.stop_looking();
            let idle = self.idle();
            if idle && self.core.terminal.is_some() && self.try_close() {
                break;
            }
            idle_since = idle.then(|| idle_since.unwrap_or_else(Instant::now));
        }
        metrics::gauge!(WATCHED_SESSIONS).decrement(1.0);
    }

    /// Waits for what wakes the task next: the ticker first, then messages, session states,
    /// node watches and reads, the lease deadline, probes, the deferred watches' sweep, and
    /// (idle since `detach_at`) the time to let the client handle go.
    async fn next_wake(
        &mut self,
        states: &mut Option<SessionStates>,
        detach_at: Option<Instant>,
    ) -> Wake {
        let (due_at, probe_at) = (self.core.next_deadline(), self.probe_at());
        let sweep_at = self.nodes.next_due();
        tokio::select! {
            biased;
            // First: after a pause its time is long past, and it records the gap before
            // anything else runs.
            _ = sleep_on_lease_clock(Some(self.tick_at)) => Wake::Tick,
            event = self.events.recv() => Wake::Event(event),
            (folded, state) = next_state(states) => Wake::State(folded, state),
            Some((id, gone)) = self.nodes.watches.next() => Wake::Watched(id, gone),
            Some(read) = self.nodes.reads.next() => Wake::Read(read),
            _ = sleep_on_lease_clock(due_at) => Wake::Due,
            Some(reply) = self.probing.in_flight.next() => Wake::Probed(reply),
            _ = sleep_on_lease_clock(probe_at) => Wake::ProbeTime,
            _ = sleep_until_opt(sweep_at) => Wake::Sweep,
            _ = sleep_until_opt(detach_at), if self.client.is_some() => Wake::Detach,
        }
    }

    /// Does what woke the task; `Break` once the message channel has closed (the task ends).
    fn on_wake(&mut self, wake: Wake) -> ControlFlow<()> {
        match wake {
            Wake::Tick => self.tick(),
            Wake::Event(None) => return ControlFlow::Break(()),
            Wake::Event(Some(event)) => {
                if let Some(node) = self.on_event(event) {
                    (self.nodes).add(node, Instant::now(), &self.core, self.client.as_ref());
                }
            }
            Wake::State(folded, state) => {
                // Both in one turn: a guard registered between them would be judged by
                // the break that came before it.
                folded.into_iter().for_each(|folded| self.on_state(folded));
                self.on_state(state);
            }
            Wake::Watched(id, gone) => {
                if gone {
                    self.core.apply(Event::NodeGone { id }, clock::now());
                }
                (self.nodes).watch_ended(id, &self.core, self.client.as_ref());
            }
            Wake::Read(read) => {
                for id in self.nodes.gone(read) {
                    self.core.apply(Event::NodeGone { id }, clock::now());
                }
            }
            Wake::Due => self.core.check_lease(clock::now()),
            Wake::Probed(reply) => self.on_probe(reply),
            Wake::ProbeTime => self.send_probe(),
            Wake::Sweep => self.nodes.sweep(&self.core, self.client.as_ref()),
            Wake::Detach => self.detach(),
        }
        ControlFlow::Continue(())
    }

    /// Takes the registrations and ends the guards posted (see [`SessionWatch::post`]).
    fn take_posted(&mut self) {
        let Some(watch) = self.watch.upgrade() else {
            return;
        };
        let posted = watch.take_posted();
        // A guard registered and ended within one batch, with no watch set on its node, never
        // needed the driver: both messages are dropped unseen.
        let ended: std::collections::HashSet<u64> = (posted.iter())
            .filter_map(|(_, event)| match event {
                Event::Unregister { id } => Some(*id),
                _ => None,
            })
            .collect();
        let mut passed = std::collections::HashSet::new();
        for (at, event) in posted {
            match &event {
                Event::Register {
                    id, watch: None, ..
                } if ended.contains(id) => {
                    passed.insert(*id);
                    continue;
                }
                Event::Unregister { id } if passed.contains(id) => continue,
                _ => {}
            }
            if let Some(node) = self.on_event(event) {
                (self.nodes).add(node, at, &self.core, self.client.as_ref());
            }
        }
    }

    /// Lets posts wake the task again once nothing brings it back on its own (no deferred
    /// watch), then takes what was posted before the flag went down.
    fn stop_looking(&mut self) {
        let Some(watch) = self.watch.upgrade() else {
            return;
        };
        if self.nodes.has_deferred() {
            watch
                .looking
                .store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        watch
            .looking
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // A post that saw the flag still up woke nobody: look again (the loop takes it).
        if watch.has_posted()
            && !watch
                .looking
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            watch.send(Event::Posted);
        }
    }

    /// Idle: lets the client handle go, so that the session can close when the application
    /// drops its clients; keeps it if interest rose meanwhile (its acquire saw it attached).
    fn detach(&mut self) {
        if let Some(watch) = self.watch.upgrade() {
            watch
                .attached
                .store(false, std::sync::atomic::Ordering::SeqCst);
            if watch.interested() {
                watch
                    .attached
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        }
        self.client = None;
        self.probing.in_flight = FuturesUnordered::new();
        self.nodes.detach();
    }

    /// Applies a message; a newly registered guard's node to watch, if there is one.
    fn on_event(&mut self, event: Event) -> Option<NodeToWatch> {
        match event {
            Event::Attach(client) => {
                self.client = Some(client);
                self.probing.next = clock::now();
                None
            }
            Event::Prove { node, budget, done } => {
                self.prove(Prover { node, budget, done });
                None
            }
            event => {
                if let Event::Unregister { id } = event {
                    self.nodes.forget(id);
                }
                self.core.apply(event, clock::now())
            }
        }
    }

    /// Takes a grant (or a waiter's warm-up) that waits for the lease: told at once if the
    /// lease vouches for a grant (`LeaseCell::vouches_for`, the queue's rule); else probes
    /// start now, and, if the lease has lapsed, as a cold start when nothing else kept them
    /// going (no proof was sent while the session only waited, so the newest replies are old,
    /// and the first commits lean on the client's keepalive, as after any idle spell: see the
    /// lease module; the lease model's `grant` does the same).
    fn prove(&mut self, prover: Prover) {
        let lease = &self.core.lease;
        let now = clock::now();
        // A lease about to lapse is proved again: told at once, a grant would hold with less
        // than the rule's spare, and a waiter's warm-up sent then would prove nothing.
        if lease.vouches_for(prover.budget, now) {
            let _ = prover.done.send(());
            return;
        }
        if !self.wants_proofs() && lease.deadline(prover.budget) <= now {
            lease.restart(now);
        }
        self.provers.push(prover);
        self.probing.next = now;
    }

    /// Tells the grants whose lease holds now; forgets those whose acquire gave up.
    fn settle_provers(&mut self) {
        let now = clock::now();
        let lease = self.core.lease.clone();
        for prover in std::mem::take(&mut self.provers) {
            if prover.done.is_closed() {
                continue;
            }
            match lease.deadline(prover.budget) > now {
                true => drop(prover.done.send(())),
                false => self.provers.push(prover),
            }
        }
    }

    /// Whether the session needs proofs: it holds a lock, an acquire is creating its node (a
    /// slow commit there must not leave the first lease to lapse: the cold phase's extra
    /// probes), or a grant waits for one. A session that only waits in queues sends none (the
    /// lease module says why that is enough).
    fn wants_proofs(&self) -> bool {
        self.core.guards() > 0
            || self.provers.iter().any(|p| !p.done.is_closed())
            || self.watch.upgrade().is_some_and(|w| w.creating())
    }

    /// When to wake up to send a probe: the regular one when none is in flight, or a cold one
    /// (see [`Self::cold_probe_due`]); never without a client.
    fn probe_at(&self) -> Option<Instant> {
        self.client.as_ref()?;
        if !self.wants_proofs() {
            return None;
        }
        let in_flight = self.probing.in_flight.len();
        let regular = (in_flight == 0).then_some(self.probing.next);
        let cold = (in_flight < MOST_IN_FLIGHT)
            .then(|| self.cold_probe_due())
            .flatten();
        regular.into_iter().chain(cold).min()
    }

    /// Sends the next probe if one can prove something now, else moves its time on (a reply
    /// that came in since, an acquire's create, pairs with nothing until a gap has passed).
    fn send_probe(&mut self) {
        // Its time was set while the session wanted proofs; it may not any more (an acquire
        // that was creating now waits, a hold ended).
        if !self.wants_proofs() {
            return;
        }
        let now = clock::now();
        let cold = self.cold_probe_due().is_some_and(|at| at <= now)
            && self.probing.in_flight.len() < MOST_IN_FLIGHT;
        if !cold {
            if !self.probing.in_flight.is_empty() {
                return;
            }
            let due = self.probe_due(self.probing.last_sent);
            if due > now {
                self.probing.next = due;
                return;
            }
        }
        let Some(client) = &self.client else {
            return;
        };
        let target = self.probe_targets(self.probing.turn);
        let sync = self.core.probes_by_sync();
        let probe = abandon_after(self.timeout, probe_session(client.clone(), target, sync));
        self.probing.in_flight.push(Box::pin(probe));
        let period = self.core.lease.probe_period();
        (self.nodes).read_if_due(&self.core, client, now, period, self.timeout);
        self.probing.last_sent = Some(now);
        self.probing.turn = self.probing.turn.wrapping_add(1);
    }

    /// When the next regular probe is due: once it can prove something (a pair gap after the
    /// newest reply) and a probe period after the last one (every `T/3` under the
    /// `SyncLease` mutant's rule).
    fn probe_due(&self, last_sent: Option<Instant>) -> Instant {
        let lease = &self.core.lease;
        // What has never happened is due already: a time in the past, never "now", which
        // `send_probe` (comparing with the instant it read first) would find still ahead.
        let long_ago = || {
            clock::now()
                .checked_sub(self.timeout)
                .unwrap_or_else(clock::now)
        };
        if lease.is_legacy() {
            return last_sent.map_or_else(long_ago, |s| s + self.timeout / 3);
        }
        // A probe pairs with the newest committed write once a gap has passed (replies that
        // are refusals do not move this: a lock retrying an error must not starve the probes).
        let pairs = lease
            .newest_commit()
            .map_or_else(long_ago, |r| r + lease.gap());
        last_sent.map_or(pairs, |s| pairs.max(s + lease.probe_period()))
    }

    /// When an extra probe should go in the cold phase, if one should: while no commit has
    /// come back since the start, one every cold period; after that, once the regular probe
    /// could no longer be back before the lease lapses. Each cold commit leans on the client's
    /// keepalive (see the lease module), so a slow create (an fsync stall) followed by a slow
    /// first probe cannot leave the first lease to lapse.
    fn cold_probe_due(&self) -> Option<Instant> {
        let lease = &self.core.lease;
        let since = lease.cold_since()?;
        if lease.is_legacy() || !self.wants_proofs() {
            return None;
        }
        let period = lease
            .shortest_budget()
            .saturating_sub(lease.lean())
            .div_f64(6.0)
            .max(Duration::from_millis(10));
        // None can lean before the ticker has seen the process run a whole lean: until then
        // pairing is the only proof, and the regular probe brings it.
        let leans_from = lease.leans_from()?;
        let after_last =
            (self.probing.last_sent.map_or(since, |s| s.max(since)) + period).max(leans_from);
        let Some(reply) = lease.newest_commit().filter(|&r| r >= since) else {
            return Some(after_last);
        };
        let slowest = lease.slowest_cold_commit();
        let regular_back = self.probe_due(self.probing.last_sent).max(reply) + slowest;
        let deadline = lease.deadline(lease.shortest_budget());
        let margin = period;
        (regular_back + margin >= deadline).then_some(after_last)
    }

    /// What the next probe checks: every node in jeopardy, else a held node (in turn), else
    /// the newest lock path.
    fn probe_targets(&self, turn: usize) -> Vec<Check> {
        let targets = self.core.probe_targets(turn);
        // A grant waiting for a proof has its own node checked: the proof shows it still there.
        // One whose acquire gave up (a waiter that withdrew its node) is left out.
        let granted = (self.provers.iter().filter(|p| !p.done.is_closed())).map(|p| Check {
            guard: None,
            path: p.node.clone(),
        });
        let mut checks: Vec<Check> = (targets.into_iter())
            .map(|(id, path)| Check {
                guard: Some(id),
                path,
            })
            .chain(granted)
            .collect();
        if checks.is_empty() {
            let path = (self.watch.upgrade()).map_or_else(|| Arc::from("/"), |w| w.probe_path());
            checks.push(Check { guard: None, path });
        }
        checks
    }

    /// Records what a probe's chunks proved, and when the next probe goes.
    fn on_probe(&mut self, replies: Vec<ProbeReply>) {
        let retry = (replies.into_iter())
            .filter_map(|reply| self.record_probe(reply))
            .min();
        self.settle_provers();
        self.probing.next = match retry {
            Some(retry) => retry,
            None => self.probe_due(self.probing.last_sent),
        };
    }

    /// Records what a probe proved; returns when to try again if nothing came back.
    fn record_probe(&mut self, reply: ProbeReply) -> Option<Instant> {
        let lease = self.core.lease.clone();
        let now = clock::now();
        if let (Answer::Committed, Some(client)) = (reply.answer, &self.client) {
            self.core
                .apply(Event::SessionId(client.session_id().0), now);
        }
        let guards: Vec<Option<u64>> = reply.checks.iter().map(|c| c.guard).collect();
        let missing = self.core.probed(reply.answer, reply.sent, &guards, now);
        let outcome = match reply.answer {
            Answer::Committed => {
                metrics::histogram!(LEASE_REMAINING_SECONDS)
                    .record(lease.remaining(now).as_secs_f64());
                "committed"
            }
            Answer::Synced => "synced",
            Answer::Refused(_) => {
                // The first missing node's hold ended; the others are probed again at once,
                // without it (the failed `multi` proved nothing about them).
                if let Some(check) = missing.and_then(|i| reply.checks.get(i)) {
                    // A granted node gone before its proof: its acquire hears of it.
                    if check.guard.is_none() {
                        self.provers.retain(|p| p.node != check.path);
                    }
                    metrics::counter!(LEASE_PROBES_TOTAL, "outcome" => "refused").increment(1);
                    return Some(now);
                }
                "refused"
            }
            Answer::None => "failed",
        };
        metrics::counter!(LEASE_PROBES_TOTAL, "outcome" => outcome).increment(1);
        // Nothing came back (the connection broke): try again a gap later, or at once when
        // the client reconnects (`on_state`).
        (reply.answer == Answer::None).then(|| now + lease.gap().max(Duration::from_millis(10)))
    }

    /// Applies a session state; after a reconnect, probes at once so that the lease is
    /// renewed as soon as the session can prove itself alive again.
    fn on_state(&mut self, state: zk::SessionState) {
        if matches!(
            state,
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly
        ) {
            self.probing.next = clock::now();
        }
        self.core.apply(Event::State(state), clock::now());
        if self.core.terminal.is_some() {
            // No proof will come: the grants waiting for one hear it (their senders dropped).
            self.provers.clear();
        }
    }

    fn idle(&self) -> bool {
        self.watch.upgrade().is_none_or(|w| !w.interested()) && self.core.guards() == 0
    }

    /// Leaves the registry once the session is over and nobody is interested; under the
    /// registry lock, so that nobody can take interest in a watchdog that is about to stop.
    fn try_close(&mut self) -> bool {
        let Some(watch) = self.watch.upgrade() else {
            return true;
        };
        let (events, core) = (&self.events, &self.core);
        let busy = || !events.is_empty() || watch.has_posted() || core.guards() != 0;
        watch.leave_unless(busy)
    }
}

/// A probe whose answer has not come within `limit` (the session timeout: by then nothing it
/// could prove still holds a lease) is given up, with no answer, which proves nothing and loses
/// nothing. A reply lost on a live connection never comes (a proxy dropping frames does that;
/// TCP does not), and a probe in flight holds the regular one back.
async fn abandon_after(
    limit: Duration,
    probe: impl Future<Output = Vec<ProbeReply>>,
) -> Vec<ProbeReply> {
    tokio::time::timeout(limit, probe).await.unwrap_or_default()
}

/// Records a run of a ticker in the process's [`RunRecord`] and returns since when the
/// process has run without a break. Unit tests (paused clocks, one per test thread) keep one
/// record per thread, so no test's paused instants reach another's.
fn process_ran(now: Instant, stall: Duration) -> Instant {
    #[cfg(not(test))]
    {
        static PROCESS: RunRecord = RunRecord::new();
        PROCESS.ran(now, stall)
    }
    #[cfg(test)]
    {
        thread_local! {
            static PROCESS: RunRecord = const { RunRecord::new() };
        }
        PROCESS.with(|record| record.ran(now, stall))
    }
}

/// Sleeps until the lease clock reads `at` (forever without one), but never longer than
/// [`clock::LONGEST_SLEEP`]: tokio's timers do not count a suspend, the lease clock does.
async fn sleep_on_lease_clock(at: Option<Instant>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let cap = Instant::now() + clock::LONGEST_SLEEP;
    tokio::time::sleep_until(clock::timer(at).min(cap)).await;
}

/// One `check` of a probe: a held guard's node, a granted node waiting for its proof, or
/// (with none held) a lock path.
#[derive(Debug, Clone)]
struct Check {
    guard: Option<u64>,
    path: Arc<str>,
}

/// The most a probe's `multi` carries, in bytes of its checks, far below ZooKeeper's default
/// `jute.maxbuffer` (1 MiB): a session with more holds in jeopardy sends several, together.
const MOST_PROBE_BYTES: usize = 256 * 1024;

/// A `check` operation's bytes in a `multi` request, besides its path: the op header (type,
/// done, error), the path's length and the version.
const CHECK_OVERHEAD: usize = 4 + 1 + 4 + 4 + 4;

/// One probe's chunk, timed from its send.
#[derive(Debug)]
struct ProbeReply {
    sent: Instant,
    /// What it checked, in order: guards' nodes, granted nodes, or a lock path.
    checks: Vec<Check>,
    answer: Answer,
}

/// One probe of the session: `multi`s of `check`s of the targets (any version), chunked below
/// [`MOST_PROBE_BYTES`] and sent together. Each is a write, so it is committed only by a leader
/// with a quorum (see [`super::lease`]); it changes nothing and fires no watch, and on held
/// nodes it also finds one that is gone (the first, by its index).
///
/// Under the mutants' `sync` rule it is a `sync` then a read of the first target: unsound,
/// since a leader answers its own clients' syncs without a quorum.
async fn probe_session(
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

/// The session's states from `zookeeper-client`'s state channel, which keeps only the latest
/// one, with the Disconnected it folded away put back.
///
/// The client publishes a state only when it differs from the one before, and it moves from
/// one connected state to another (SyncConnected, ConnectedReadOnly) only through a
/// reconnect. So a connected state taken right after a connected one (the same again, or the
/// other) means that a Disconnected came and went unseen: a flap over before this task
/// looked. Such a change yields that Disconnected before the state (the lease must see the
/// break). Before, a persistent watch on a path nobody creates carried every transition, at
/// the cost of two server watches per session (ZooKeeper registers a persistent watch in its
/// data and child tables) and an `addWatch` per session.
struct SessionStates {
    watcher: zk::StateWatcher,
    fold: LastTaken,
}

impl SessionStates {
    fn new(client: &zk::Client) -> SessionStates {
        let mut watcher = client.state_watcher();
        let last = watcher.state();
        SessionStates {
            watcher,
            fold: LastTaken { last },
        }
    }

    /// The state as it was when the channel was opened.
    fn first(&self) -> zk::SessionState {
        self.fold.last
    }
}

/// What [`SessionStates`] remembers to put a folded flap back: the state last taken.
#[derive(Debug)]
struct LastTaken {
    last: zk::SessionState,
}

impl LastTaken {
    /// What a change to `state` yields: the Disconnected folded into it, if the channel
    /// folded one (see [`SessionStates`]), then `state`.
    fn changed_to(
        &mut self,
        state: zk::SessionState,
    ) -> (Option<zk::SessionState>, zk::SessionState) {
        use zk::SessionState::{ConnectedReadOnly, SyncConnected};
        let connected = |s| matches!(s, SyncConnected | ConnectedReadOnly);
        // A connected state after the same one or the other: a reconnect came between.
        let folded = connected(state) && connected(self.last);
        self.last = state;
        (folded.then_some(zk::SessionState::Disconnected), state)
    }
}

/// The next session state, after a Disconnected folded into it (see [`SessionStates`]).
/// Cancel safe: a state taken from the channel is yielded in the same poll.
async fn next_state(
    states: &mut Option<SessionStates>,
) -> (Option<zk::SessionState>, zk::SessionState) {
    let Some(states) = states else {
        return std::future::pending().await;
    };
    let state = states.watcher.changed().await;
    states.fold.changed_to(state)
}

#[cfg(test)]
mod tests {
    use super::LastTaken;
    use zookeeper_client::SessionState::{ConnectedReadOnly, Disconnected, Expired, SyncConnected};

    #[test]
    fn a_change_back_to_the_last_state_is_a_flap_put_back() {
        let mut fold = LastTaken {
            last: SyncConnected,
        };
        // Seen one by one: as they come.
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        assert_eq!(fold.changed_to(SyncConnected), (None, SyncConnected));
        // Folded: the channel shows SyncConnected again.
        assert_eq!(
            fold.changed_to(SyncConnected),
            (Some(Disconnected), SyncConnected)
        );
        // From one connected state to the other: a reconnect in between.
        assert_eq!(
            fold.changed_to(ConnectedReadOnly),
            (Some(Disconnected), ConnectedReadOnly)
        );
        // Disconnected twice: a connected spell in between, nothing to put back.
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        // A terminal state is never put back behind a Disconnected.
        assert_eq!(fold.changed_to(Expired), (None, Expired));
    }
}
