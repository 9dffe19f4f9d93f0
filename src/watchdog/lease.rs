//! The lease: from which instant a session is proven alive in the eyes of the one server that
//! can expire it, and how long after that instant its locks may still be trusted.
//!
//! # What a reply proves
//!
//! Only the leader's session tracker expires sessions (`SessionTrackerImpl`, run by
//! `LeaderZooKeeperServer`); it expires a session no earlier than `T` after the last time it
//! touched it (`ExpiryQueue::update` rounds `now + T` *up* to the next tick). The leader
//! touches a session:
//! - on every request the session sends to the leader itself (`ZooKeeperServer::submitRequestNow`
//!   calls `touch` before the request enters the pipeline);
//! - when a follower relays that it saw the session: a follower collects the sessions that
//!   sent it anything (`LearnerSessionTracker::touchSession`) and lists them in its reply to
//!   the leader's `PING` (`Learner::ping`), which the leader sends every `tickTime/2`; requests
//!   a follower *forwards* do not touch the session on the leader
//!   (`LeaderZooKeeperServer::submitLearnerRequest` skips `touch`);
//! - on a reconnect (`REVALIDATE`), and for every session when a new leader starts its tracker
//!   (`SessionTrackerImpl`'s constructor touches every session it loads).
//!
//! From that:
//! 1. **A read reply proves nothing**: a follower cut off from the leader keeps answering reads.
//! 2. **A `sync` reply proves nothing either**: a leader answers its own clients' syncs without
//!    a quorum round (its `CommitProcessor` is built with `matchSyncs = false`), and one cut off
//!    from its followers keeps doing so until it notices lost quorum, about
//!    `syncLimit · tickTime` later, while the followers may already have elected a new leader.
//! 3. **A committed write `k`, sent at `s_k`, proves that no *later* leader can expire the
//!    session before `s_k + T`**: the write needs acknowledgements from a quorum, every later
//!    leader is established by a quorum, two quorums share a server, and that server
//!    acknowledged `k` (after `s_k`) before it followed the later leader; a new leader builds
//!    its session tracker only after that (`Leader::lead` → `startZkServer`), touching every
//!    session. It also proves the session was not yet closing when the leader prepared `k`
//!    (`PrepRequestProcessor` calls `checkSession`).
//! 4. **The leader that committed `k` heard from the session no earlier than `s_j`, for any
//!    request `j` whose reply came back at `r_j ≤ s_k − G`**, `G` the longest the follower can
//!    go without relaying to the leader (`tickTime/2` plus jitter): `j` touched the follower
//!    when it arrived (at or before `r_j`); within `G` the follower answered a leader `PING`
//!    with that touch; that answer and the later forward of `k` travel the same ordered
//!    connection, so the leader processed the touch before it saw `k`. A client on the leader
//!    itself touches it directly, which is only better. (If the client moved to another
//!    server in between, that server's `REVALIDATE` touched the leader after `r_j`.)
//!
//! So every committed write `k` moves the **anchor** to `max{ s_j : r_j ≤ s_k − G }`, and the
//! leader cannot expire the session before `anchor + T` on its clock. The lease deadline is
//! `anchor + T·(1 − drift) − margin` on ours. The watchdog keeps proofs coming with a write of
//! its own, a `multi` holding one `check` of a held node (it changes nothing and fires no
//! watch), sent `G` after the newest reply so that each probe pairs with the one before it.
//!
//! The one exception is the **cold phase**, from the session's watchdog (re)starting until a
//! proof pairs with a reply of this phase and is at least as good as the following one: no earlier reply of ours is known to
//! pair with, so a committed write rests on `zookeeper-client` itself keeping the connection
//! alive (it pings a connection idle for `3T/20`, checking every `T/20`, so the follower saw the
//! session within `T/5` before relaying), and anchors at `s_k − G − T/5 − margin − S` (the
//! *lean*; `S` is the stall below), **if the process is known to have run through the lean
//! before `s_k`** (next section); else it anchors nothing, and the lease waits for a pair.
//! Every commit of the cold phase leans, not only the first: with slow commits (an fsync
//! stall) the create's own lean lease ends about `0.34·T` after it was sent, before the first
//! paired probe (sent `G` after the create's reply) can be back. So while cold the watchdog
//! also sends extra probes, a sixth of `budget − lean` apart and up to four in flight, whenever
//! no commit has come back yet or the regular probe could not be back before the lease lapses;
//! each leans from its own send time (none goes before it could lean). With fast commits none
//! is sent.
//!
//! # Leaning needs a running process
//!
//! The keepalive is made of tasks of this same process: a process that was paused (`SIGSTOP`,
//! a stall, a starved runtime, a suspended machine) sent nothing, and a cold proof sent right
//! after the pause would lean on touches that never happened. The lease model found it: A
//! paused right after its first acquire and woke at 9 with its session (last heard at 0) about
//! to expire at 10; its probe sent at 9 leaned back and gave it a lease to 14.1 while B held
//! from 10 (`model/README.md`; the [`Mutant::LeanThroughPause`] mutant keeps that rule).
//!
//! So each session's watchdog runs a **ticker**: a timer on the lease clock every quarter of
//! the *stall* `S` (the margin: `T/20` between 20 ms and 500 ms by default), whose every run
//! tells the lease cell the process runs ([`LeaseCell::ran`]). The cell keeps when it last ran
//! (`L`) and since when it has run with no gap between two runs longer than `S` (`R`; a longer
//! gap is a break, and `R` starts again at the run that found it). A cold write sent at `s`
//! leans only if `R ≤ s − lean` and `s − L ≤ S` ([`LeaseCell::committed`]; both decisions take
//! their instants as arguments, so the lease model drives them). Why that is sound:
//! - From `R` to `s` the process never went more than `S` without running: consecutive runs of
//!   the ticker are at most `S` apart, and so are the last one before `s` and `s` itself (if
//!   the ticker ran after `s`, the run that straddles `s` found no break, since `R` is still
//!   before it). `zookeeper-client`'s keepalive, a timer every `T/20` that pings a connection
//!   idle for `3T/20`, is then late by at most `S`: a connected client sent something in every
//!   stretch of `T/5 + S` of that window, and the lean covers such a stretch, the relay `G`
//!   and the margin. (A disconnected client sends nothing, but its reconnect touches the
//!   leader, point 4.)
//! - The race after a resume: a write sent right after it, before the ticker has run, finds
//!   `L` from before the pause, and `s − L > S`; if the ticker runs between the send and the
//!   reply, it records the break, and `R > s`. Either way the write leans on nothing, whichever
//!   task ran first after the resume: the decision is taken when the reply comes, from `s`
//!   (read before the send) and the ticker's record. A pause between reading `s` and sending
//!   only makes the real send later than `s`, which the lean does not need.
//! - A write that cannot lean still proves what pairing proves, which needs no keepalive: the
//!   grant waits for a probe sent `G` after a reply of the session, as a warm lease does.
//!
//! A session's watchdog, and so its ticker, starts with its first acquire; what shows that
//! the process ran before that is the **process's record** ([`RunRecord`]): every ticker's run
//! is recorded there too, and it keeps since when some ticker has run at least every `S` (the
//! smallest stall any reported; a smaller one arriving counts as a break). A session's ticker,
//! on its first run, starts its lease's record from the process's. Both are records of runs of
//! this process's threads, so the argument above holds for either; a lease that has ticked
//! before keeps its own record, so a break its own ticker saw (its runtime starved, say) is not
//! papered over by another runtime's ticker.
//!
//! Its cost: one timer per session's watchdog, waking every `S/4` (125 ms at `T ≥ 10 s`) for as
//! long as the watchdog task lives; a lean longer by `S`; and the grant of an acquire whose
//! cold proof cannot lean waits for a paired proof, about `G` and a round trip more. That is
//! the grant right after a detected pause, and the first acquire of a process (or the first
//! after every watchdog of it stopped: nothing shows that the process ran before it) on a
//! session that [`Connect`](crate::Connect) did not create (below); every other acquire leans
//! as before.
//!
//! # A new session's first lease
//!
//! A session that [`Connect`](crate::Connect) created needs neither: its creation is a proof.
//! The client sends the connect request at `c` (read on the lease clock before the connect
//! starts); the server it reaches forwards a `createSession` to the leader, whose
//! `PrepRequestProcessor` starts tracking the session (`SessionTrackerImpl.trackSession`, its
//! expiry `T` from then); the connect's reply comes only after that transaction committed
//! (`FinalRequestProcessor` → `finishSessionInit`). So a leader with a quorum heard from the
//! session no earlier than `c`, exactly what a paired proof sent at `c` shows, and `c` anchors
//! the lease. (A leader elected later touches every session when it starts, point 3.) This
//! holds only for a new read-write session: a resumed one (`Connector::with_session`) is
//! revalidated by whichever server it reaches, a leader cut off from its quorum included, and a
//! read-only server commits nothing; [`Connect`](crate::Connect) cannot ask for either, and a
//! session connected otherwise anchors nothing. A pause after the connect only lets that anchor
//! age: the lease lapses on time. With it a process's first acquire, soon after its connect, is
//! granted at once, where it would otherwise wait for a paired proof (about `G`).
//!
//! # Only holds probe
//!
//! A session that only waits in queues sends no probe: its lease matters from its grant on,
//! and a waiter costs the ensemble no write (ten thousand waiters at `T = 2 s` used to cost
//! some sixteen thousand committed writes per second). The first proof after a grant still
//! comes in time:
//! - a grant soon after the acquire's create (an uncontended acquire, a short wait) rests on
//!   the create, a committed write like any probe (cold, it leans on the keepalive if the ticker
//!   shows the process ran through the lean; else the grant waits for a paired probe);
//! - a grant after a longer wait, whose lease can no longer vouch for the hold, is not handed
//!   out until the watchdog has probed: a cold start, as after any idle spell (the replies
//!   before the wait are too old to pair with, and the client's keepalive ran all along), whose
//!   probe also checks the granted node. Nothing is done under the lock before that commit, so
//!   the wait needs no proof; it costs that grant one round trip, and only that grant;
//! - a session that holds other locks meanwhile keeps probing for them, so its grants find a
//!   warm lease.
//!
//! # Jeopardy
//!
//! With a grace period, a lease that lapses is not a loss but **jeopardy**: the hold stops
//! (`check()` fails, a `run` section is not polled), the cancellation token waits. It resumes
//! when a probe that checked the guard's own node, **sent after the jeopardy began**, was
//! committed, and the lease holds again (a fresh paired proof). Why that is safe:
//! - the commit proves the node existed when the leader prepared the probe (a `check` on a
//!   missing node fails the whole `multi`), after the jeopardy began; an ephemeral node exists
//!   only while its session does, and in the queue nobody proceeds past a node that exists, so
//!   no other contender held a conflicting lock at any time up to then (for a reader, no
//!   writer; for a semaphore lease, no more than the permits);
//! - the fresh lease proves, by the argument above, that no leader can expire the session
//!   before the new deadline; until then the node goes only if someone deletes it, which the
//!   node's watch reports (ZooKeeper delivers a watch event before the reply of any later
//!   request);
//! - while in jeopardy nothing was done under the lock, so the gap needs no proof.
//!
//! A reply that is not a commit proves neither: a leader cut off from its followers answers
//! reads and syncs while the others elect, expire the session and grant the lock. The
//! `ResumeWithoutProof` mutant resumes on a `sync`'s answer, and the chaos suite's partitions
//! catch it. The grace runs from the lapse; when it runs out, or the session expires, or the
//! node is deleted, the hold is lost and the token fires.
//!
//! # The clock
//!
//! Instants here are on the lease clock ([`super::clock`]): the monotonic clock plus the time
//! the machine spent suspended (`CLOCK_BOOTTIME`), so a host that sleeps through its lease wakes
//! up with `check()` failing. A paused VM stops every clock inside it: only the fencing token
//! covers that.
//!
//! # Assumptions
//!
//! - Clock rates (ours, the servers') differ by at most `drift`.
//! - **Timing:** between a reply `j` and a write `k` sent `G` later, the follower received a
//!   leader `PING`: the leader's pings reach a follower at most `G` apart. ZooKeeper itself
//!   only enforces silences of at most `syncLimit · tickTime`; a leader pause (a GC pause, say)
//!   or a leader-to-follower stall (TCP retransmissions) longer than `G` breaks the assumption,
//!   and the lease can then outlast the session on that leader by up to the stall. To cover
//!   leader pauses of up to `X`, declare a tickTime of at least `2X`.
//! - `G` needs the ensemble's tickTime, which a client cannot read: zkfence takes the largest
//!   one ZooKeeper's default session bounds allow, `T/2` (the server refuses a session timeout
//!   below `minSessionTimeout`, which defaults to `2·tickTime`), unless told
//!   ([`LockOptions::with_tick_time`](crate::LockOptions::with_tick_time)). A client on an
//!   observer behind an `ObserverMaster` (`observerMasterPort`) reaches the leader through two
//!   relays: declare twice the tickTime there.
//! - Every server negotiates the same session timeout (the same `minSessionTimeout` and
//!   `maxSessionTimeout`): `zookeeper-client` renegotiates it on every reconnect without
//!   telling, and zkfence keeps the first.
//! - The cold proofs: the client's default connection timeout (one set between `2T/5` and
//!   `3T/5` stretches the keepalive to at most `3T/10`), and the client's sends reaching the
//!   follower within the margin (a stall longer than that on a connection the client has not
//!   yet given up shortens the true lease); a test pins the `T/5`. Only the cold phase, about
//!   `G` plus a few round trips per watchdog start, rests on this. That the process ran through
//!   the lean is no longer assumed: the ticker shows it (above). What the ticker cannot see is
//!   a runtime starved while the watchdog's own runs: the client's tasks on another runtime, or
//!   stuck behind a blocked worker of this one, while the ticker keeps running. Build the
//!   client on the runtime that acquires, and keep blocking calls off it.
//! - Not covered: a 2-server ensemble with a quorum oracle (`QuorumOracleMaj`), which gives
//!   up quorum intersection; and races inside ZooKeeper that lose a touch (the follower's
//!   touch table swapped while a touch lands) together with a partition.
//!
//! # What the model checks
//!
//! The argument above is checked exhaustively by the lease model (`model/`, the
//! `zkfence-model` package; its README has the state counts, the run times and each mutant's
//! counterexample). It drives this module's [`LeaseCell`], the watchdog's `Core` and the
//! guards' state (`crate::model_api`): the anchor, the deadline, jeopardy, resume and loss are
//! this code's decisions; the model supplies the world they are made in, and checks in every
//! state that no two clients pass `check()` at one real instant, that a hold leaves jeopardy
//! only on a committed probe of its node sent since the spell began, that tokens increase with
//! grants, and that a waiter is granted within a bound once the holder's node is gone and its
//! own session works.
//!
//! What it assumes of ZooKeeper is what the points above say, and no more:
//! - a leader with a quorum commits writes and runs the session tracker, which expires a
//!   session exactly `T` after it last touched it (the earliest ZooKeeper allows), deleting its
//!   nodes; a new leader touches every live session when it starts;
//! - a follower relays the sessions that touched it within `tickTime/2`, in order with the
//!   writes it forwards (point 4); a follower cut off loses what it had not relayed;
//! - a leader cut off from its quorum answers its own clients' syncs and reads (points 1, 2)
//!   while the others elect; a follower cut off keeps its clients connected to nothing;
//! - a reconnect revalidates the session with the leader (a touch), except at a leader cut off
//!   from its quorum, which revalidates it on its own and touches nothing the others see; watch
//!   events reach a connected client in order with replies, and fire again on a reconnect;
//! - a connected client that runs sends something at least every `T/5` of its clock (the
//!   keepalive the cold proof leans on).
//!
//! Its world: three servers and two clients, one lock, one acquire each (A's node first);
//! time in ticks of `T/10` (`tickTime` two ticks, so relays come within a tick); the clients'
//! clocks at `1 ± drift` (10%, fixed per schedule: A's slow or fast, B's exact); each probe's
//! reply back at once or three ticks late; probes at any tick, at most one a tick and two per
//! client (safety must not depend on when the driver probes: its schedule is one of these);
//! and per schedule a fault: the leader cut off from its followers (noticing at once, or never:
//! stale), a follower cut off (likewise), a client's connection breaking, or a client's process
//! pausing, at any point and for any length (the deep run pauses only warm holders, for its
//! memory). A running process's ticker runs through every tick, calling [`LeaseCell::ran`]
//! every period; a paused one's does not, and a write sent on its waking goes before the
//! ticker's next run. The lease clock counting a suspend is taken as given (the clock's own
//! test checks it), so a pause stands for a suspend too.
//!
//! Its connect world adds a new session: A's session created by a connect its process (just
//! started, no ticker record) sent at tick 0, which the leader committed then, its first lease
//! anchored there by [`LeaseCell::began`] as [`Connect`](crate::Connect) records it (so its
//! first acquire is granted at once); and A's reconnects may come up to three ticks late
//! while a stale leader answers, and may reach that leader. There a mutant that anchors at a
//! resumed session's reconnect (`AnchorOnReconnect`) outlives its session.
//!
//! What it leaves out, and why that is sound or stated:
//! - the wire protocol and commit delays: a write commits as it arrives (a later commit only
//!   touches the session later);
//! - anything below a tick: no jitter, so the margin covers nothing in the model (it sets a
//!   tenth of a tick) and a rule without one passes it; the margin stays for what the model
//!   lacks (scheduling, ping jitter, the time between `check()` and a write);
//! - leader pauses and stalls longer than `G`, misconfigured ensembles, two-server ensembles:
//!   outside the assumptions above;
//! - the connect's own timing: the connect world's new session is created at tick 0, its
//!   creation committed by the leader as the connect arrives and the reply coming after (the
//!   ZooKeeper fact the anchor rests on, argued above, is an assumption of that world, not
//!   something it checks); what the model checks is the anchor the library takes from it
//!   ([`LeaseCell::began`]) against everything that follows;
//! - the process-wide record ([`RunRecord`]): each client of the model is a process with one
//!   session, whose own ticker is its record;
//! - the gaps between a running process's ticker runs: one ticker period each, so a pause is
//!   whole ticks long; a late timer within the stall is left to the unit tests;
//! - a partition healing within a schedule, a third client, more than two probes per client,
//!   a changing clock rate: the deep run follows one fault to tick 24 (past a lapse's whole
//!   grace) and allows two faults to the CI horizon; the rest is left to the chaos suite.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::clock;
use crate::mutants::{Flaw, Mutant};

/// What the tickers of every session's watchdog in this process have seen, together: since
/// when some ticker has run at least every `stall` (the smallest stall any of them reported),
/// so a session whose watchdog starts now can lean on the process's history rather than wait
/// for its own (see "Leaning needs a running process"). Both instants only move forward, so a
/// ticker that recorded late (descheduled between reading the clock and storing) cannot undo
/// a break that a later one found.
#[derive(Debug)]
pub(crate) struct RunRecord {
    /// The longest gap that is no break, in nanoseconds: the smallest stall reported.
    stall: AtomicI64,
    last_ran: AtomicI64,
    running_since: AtomicI64,
}

impl RunRecord {
    pub(crate) const fn new() -> RunRecord {
        RunRecord {
            stall: AtomicI64::new(i64::MAX),
            last_ran: AtomicI64::new(NO_PROOF),
            running_since: AtomicI64::new(NO_PROOF),
        }
    }

    /// A ticker that tolerates `stall` ran at `now`. Returns since when the process has run
    /// with no gap longer than the record's stall (at most `stall`) between any two tickers'
    /// runs, up to `now`. A stall smaller than any before counts as a break: the gaps recorded
    /// so far were judged against a longer one.
    pub(crate) fn ran(&self, now: Instant, stall: Duration) -> Instant {
        let (now, stall) = (to_nanos(now), nanos(stall));
        let before = self.stall.fetch_min(stall, Ordering::AcqRel);
        let last = self.last_ran.fetch_max(now, Ordering::AcqRel);
        if last == NO_PROOF || stall < before || now.saturating_sub(last) > stall.min(before) {
            self.running_since.fetch_max(now, Ordering::AcqRel);
        }
        from_nanos(self.running_since.load(Ordering::Acquire))
    }
}

/// The zero of the lease clock. Instants are stored as signed nanoseconds from it, so they fit
/// an atomic and `check()` never takes a lock; instants before it (a cold proof anchors up to
/// `T` before the process's first acquire) are negative, never clamped up to it.
static EPOCH: LazyLock<Instant> = LazyLock::new(clock::now);

/// "No proof yet": a lease anchored here has ended long ago.
const NO_PROOF: i64 = i64::MIN;

/// Starts the lease clock; it must predate every instant the lease is asked to record.
pub(crate) fn start_clock() {
    LazyLock::force(&EPOCH);
}

fn to_nanos(at: Instant) -> i64 {
    match at.checked_duration_since(*EPOCH) {
        Some(after) => after.as_nanos() as i64,
        None => -((*EPOCH - at).as_nanos() as i64),
    }
}

/// The instant `nanos` from the epoch. One the clock cannot represent (before the machine
/// started counting) can only be a deadline long past: the epoch stands in for it, which is
/// past too.
fn from_nanos(nanos: i64) -> Instant {
    if nanos >= 0 {
        *EPOCH + Duration::from_nanos(nanos as u64)
    } else {
        EPOCH
            .checked_sub(Duration::from_nanos(nanos.unsigned_abs()))
            .unwrap_or(*EPOCH)
    }
}

fn nanos(d: Duration) -> i64 {
    d.as_nanos().min(i64::MAX as u128) as i64
}

/// How zkfence turns proofs into a lease: the knobs of [`LockOptions`](crate::LockOptions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LeasePolicy {
    /// Fraction of a duration given up for clock-rate differences between us and the servers.
    pub(crate) drift: f64,
    /// Slack for scheduling and network jitter; `None` for [`default_margin`].
    pub(crate) margin: Option<Duration>,
    /// The ensemble's tickTime, if the user knows it; `None` assumes the largest ZooKeeper's
    /// default session bounds allow, `T/2`.
    pub(crate) tick: Option<Duration>,
    /// A deliberate flaw (the chaos suite's `SyncLease` mutant); none in a service.
    pub(crate) flaw: Flaw,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy {
            drift: 0.01,
            margin: None,
            tick: None,
            flaw: Flaw::default(),
        }
    }
}

/// The default margin: `T/20`, between 20 ms and 500 ms.
pub(crate) fn default_margin(session_timeout: Duration) -> Duration {
    (session_timeout / 20).clamp(Duration::from_millis(20), Duration::from_millis(500))
}

/// How long `zookeeper-client` 0.11 lets a connection go without sending: a ping after
/// `3T/20` idle, checked every `T/20` (its `reset_timeout`, with no connection timeout set).
pub(crate) fn client_keepalive(session_timeout: Duration) -> Duration {
    session_timeout / 5
}

/// Why a lease cannot be kept with these settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Infeasible {
    pub(crate) session_timeout: Duration,
    pub(crate) tick: Duration,
}

impl Infeasible {
    /// The shortest session timeout (in steps of 10 ms) at which `policy` can keep a lease.
    pub(crate) fn needed(&self, policy: &LeasePolicy) -> Duration {
        let step = Duration::from_millis(10);
        let mut t = self.session_timeout + step;
        while policy.check_feasible(t).is_err() && t < Duration::from_secs(3600) {
            t += step;
        }
        t
    }
}

impl LeasePolicy {
    /// The margin in use for a session of `t`.
    pub(crate) fn margin(&self, t: Duration) -> Duration {
        self.margin.unwrap_or_else(|| default_margin(t))
    }

    /// How long after the anchor the lease holds: `T·(1 − drift) − margin`.
    pub(crate) fn budget(&self, t: Duration) -> Duration {
        if self.legacy() {
            let margin = self
                .margin
                .unwrap_or_else(|| (t / 4).max(Duration::from_millis(100)));
            return t.mul_f64(1.0 - self.drift).saturating_sub(margin);
        }
        t.mul_f64(1.0 - self.allowed_drift())
            .saturating_sub(self.margin(t))
    }

    /// The drift the budget and the pair gap allow for (none under the
    /// [`Mutant::IgnoreDrift`] flaw).
    fn allowed_drift(&self) -> f64 {
        match self.flaw.is(Mutant::IgnoreDrift) {
            true => 0.0,
            false => self.drift,
        }
    }

    /// The tickTime assumed for a session of `t`.
    pub(crate) fn tick(&self, t: Duration) -> Duration {
        self.tick.unwrap_or(t / 2)
    }

    /// `G`: the longest a follower may go between relaying a session's touches to the leader,
    /// `tickTime/2` on the leader's clock plus jitter.
    pub(crate) fn pair_gap(&self, t: Duration) -> Duration {
        (self.tick(t) / 2).mul_f64(1.0 + self.allowed_drift()) + self.margin(t)
    }

    /// Whether the lease can be renewed before it lapses: proofs arrive about every `G` plus a
    /// round trip and each anchors about `G` back, so the budget must cover two gaps and some
    /// round trips.
    pub(crate) fn check_feasible(&self, t: Duration) -> Result<(), Infeasible> {
        if self.legacy() {
            return Ok(());
        }
        let needed = self.pair_gap(t) * 2 + self.margin(t) * 2;
        if self.budget(t) >= needed {
            Ok(())
        } else {
            Err(Infeasible {
                session_timeout: t,
                tick: self.tick(t),
            })
        }
    }

    /// The longest gap between the watchdog ticker's runs that still counts as the process
    /// running throughout: the margin (a longer one is a pause; see "The cold proofs").
    pub(crate) fn stall(&self, t: Duration) -> Duration {
        self.margin(t)
    }

    /// Whether this policy is the [`Mutant::SyncLease`] flaw.
    pub(crate) fn legacy(&self) -> bool {
        self.flaw.is(Mutant::SyncLease)
    }
}

/// The most replies remembered. Past it, every other one is forgotten (the newest kept), so the
/// list covers its whole span at a coarser grain rather than losing its oldest part, which is
/// the part the next proofs pair with. Forgetting a reply only ever proves less.
const HISTORY: usize = 256;

/// What one session's replies have proven: the anchor, and the recent replies that later
/// committed writes can pair with.
#[derive(Debug)]
pub(crate) struct LeaseCell {
    /// The leader that can expire the session heard from it no earlier than this instant
    /// (nanoseconds from the epoch; [`NO_PROOF`] until the first proof).
    anchor: AtomicI64,
    /// `G` in nanoseconds: the largest any lock on this session asked for.
    gap: AtomicU64,
    /// The shortest lease budget of the locks on this session, in nanoseconds.
    budget: AtomicU64,
    /// When the newest committed write's reply arrived (the watchdog's next probe pairs with
    /// it); [`NO_PROOF`] before the first.
    newest_commit: AtomicI64,
    /// True from the watchdog's (re)start until a proof pairs with a reply sent since then and
    /// is at least as good as a lean one: until then committed writes lean on the client's
    /// keepalive.
    cold: AtomicBool,
    /// When the cold phase began ([`NO_PROOF`] when warm).
    cold_since: AtomicI64,
    /// The slowest commit of the cold phase, in nanoseconds (from send to reply).
    slowest_cold_commit: AtomicU64,
    /// `T/5` plus the largest margin, for the cold proof.
    keepalive: AtomicU64,
    /// `T/5`, the keepalive without its margin.
    client_keepalive: Duration,
    /// The longest gap between two runs of the watchdog's ticker that still counts as the
    /// process running throughout (the largest margin), in nanoseconds: a longer one is a
    /// pause, and a cold proof may lean only across a stretch without one.
    stall: AtomicU64,
    /// When the ticker last ran ([`NO_PROOF`]: never).
    last_ran: AtomicI64,
    /// Since when the ticker has run with no gap longer than `stall` ([`NO_PROOF`]: never).
    running_since: AtomicI64,
    /// Whether the ticker has found a break since its first run (then the process's record
    /// is not inherited; see [`LeaseCell::inherit`]). Not in the model's snapshots: the model
    /// does not inherit.
    broken: AtomicBool,
    /// A deliberate flaw (a mutant's): none in a service.
    flaw: Mutex<Flaw>,
    /// `(sent, replied)` of recent requests that got a server reply, sorted by reply time.
    replies: Mutex<VecDeque<(i64, i64)>>,
}

impl LeaseCell {
    pub(crate) fn new(session_timeout: Duration) -> LeaseCell {
        start_clock();
        LeaseCell {
            anchor: AtomicI64::new(NO_PROOF),
            gap: AtomicU64::new(0),
            budget: AtomicU64::new(u64::MAX),
            newest_commit: AtomicI64::new(NO_PROOF),
            cold: AtomicBool::new(true),
            cold_since: AtomicI64::new(to_nanos(clock::now())),
            slowest_cold_commit: AtomicU64::new(0),
            keepalive: AtomicU64::new(0),
            client_keepalive: client_keepalive(session_timeout),
            stall: AtomicU64::new(0),
            last_ran: AtomicI64::new(NO_PROOF),
            running_since: AtomicI64::new(NO_PROOF),
            broken: AtomicBool::new(false),
            flaw: Mutex::new(Flaw::default()),
            replies: Mutex::new(VecDeque::new()),
        }
    }

    /// A lock with `policy` uses this session: `G` becomes at least its gap, the budget at
    /// most its budget.
    pub(crate) fn adopt(&self, policy: &LeasePolicy, session_timeout: Duration) {
        let gap = nanos(policy.pair_gap(session_timeout)) as u64;
        self.gap.fetch_max(gap, Ordering::AcqRel);
        let budget = nanos(policy.budget(session_timeout)) as u64;
        self.budget.fetch_min(budget, Ordering::AcqRel);
        let keepalive = nanos(self.client_keepalive + policy.margin(session_timeout)) as u64;
        self.keepalive.fetch_max(keepalive, Ordering::AcqRel);
        let stall = nanos(policy.stall(session_timeout)) as u64;
        self.stall.fetch_max(stall, Ordering::AcqRel);
        if policy.flaw != Flaw::default() {
            *self.flaw.lock().unwrap_or_else(|e| e.into_inner()) = policy.flaw;
        }
    }

    /// The watchdog starts (or starts again after an idle spell): the next proofs are cold
    /// ones.
    pub(crate) fn restart(&self, now: Instant) {
        self.cold.store(true, Ordering::Release);
        self.cold_since.store(to_nanos(now), Ordering::Release);
        self.slowest_cold_commit.store(0, Ordering::Release);
    }

    /// Since when the lease is cold (no paired proof as good as a lean one yet), if it is.
    pub(crate) fn cold_since(&self) -> Option<Instant> {
        if !self.cold.load(Ordering::Acquire) {
            return None;
        }
        match self.cold_since.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    /// The slowest commit of the cold phase so far (zero before the first).
    pub(crate) fn slowest_cold_commit(&self) -> Duration {
        Duration::from_nanos(self.slowest_cold_commit.load(Ordering::Acquire))
    }

    /// How long a cold proof's anchor lies before its write was sent: `G`, the keepalive, the
    /// margin and the longest stall the ticker lets pass as running.
    pub(crate) fn lean(&self) -> Duration {
        self.gap() + Duration::from_nanos(self.keepalive.load(Ordering::Acquire)) + self.stall()
    }

    /// The longest gap between the ticker's runs that still counts as the process running.
    pub(crate) fn stall(&self) -> Duration {
        Duration::from_nanos(self.stall.load(Ordering::Acquire))
    }

    /// How often the watchdog's ticker runs: a quarter of the stall it tolerates (at least a
    /// millisecond), so that a gap past the stall is a pause, not a late timer. With no lock's
    /// policy adopted yet nothing can lean, and once a second will do.
    pub(crate) fn ticker_period(&self) -> Duration {
        match self.stall() {
            Duration::ZERO => Duration::from_secs(1),
            stall => (stall / 4).max(Duration::from_millis(1)),
        }
    }

    /// The watchdog's ticker ran at `now`: a gap longer than the stall since its last run (or
    /// no run before) is a break, and the process counts as running only from `now`. `true`
    /// while the ticker has found no break since its first run (gaps before a lock's policy
    /// set the stall do not count: nothing leans before that).
    pub(crate) fn ran(&self, now: Instant) -> bool {
        let now = to_nanos(now);
        let last = self.last_ran.load(Ordering::Acquire);
        let stall = self.stall.load(Ordering::Acquire) as i64;
        if last == NO_PROOF || now.saturating_sub(last) > stall {
            self.running_since.store(now, Ordering::Release);
            if last != NO_PROOF && stall > 0 {
                self.broken.store(true, Ordering::Release);
            }
        }
        self.last_ran.fetch_max(now, Ordering::AcqRel);
        !self.broken.load(Ordering::Acquire)
    }

    /// The process-wide record vouches that the process has run without a break since
    /// `since`, up to this cell's latest run of its own ticker (just recorded): a new session's
    /// watchdog starts with the history of the tickers already running in this process, so
    /// that only the first acquire of a process waits for a paired proof. Only while `unbroken`
    /// (what [`ran`](Self::ran) returned): a cell whose own ticker found a break keeps its own
    /// record, so another runtime's ticker cannot paper over it.
    pub(crate) fn inherit(&self, since: Instant, unbroken: bool) {
        if unbroken {
            self.running_since
                .fetch_min(to_nanos(since), Ordering::AcqRel);
        }
    }

    /// Whether the process is known to have run throughout the lean before a write sent at
    /// `sent` (nanoseconds): the ticker has run without a break since at least a lean before
    /// it, and its last run is no more than a stall before it (or after it: then the run that
    /// straddles `sent` was no break either). A write sent right after a resume, before the
    /// ticker has run, finds the last run from before the pause, too old.
    fn ran_through(&self, sent: i64) -> bool {
        if self.flaw().is(Mutant::LeanThroughPause) {
            return true;
        }
        let since = self.running_since.load(Ordering::Acquire);
        let last = self.last_ran.load(Ordering::Acquire);
        let stall = self.stall.load(Ordering::Acquire) as i64;
        let lean = nanos(self.lean());
        since != NO_PROOF && since <= sent.saturating_sub(lean) && sent - last <= stall
    }

    /// The earliest send time from which a cold proof can lean as things stand (a lean after
    /// the ticker's current run began); `None` before the ticker's first run.
    pub(crate) fn leans_from(&self) -> Option<Instant> {
        if self.flaw().is(Mutant::LeanThroughPause) {
            return self.cold_since();
        }
        match self.running_since.load(Ordering::Acquire) {
            NO_PROOF => None,
            since => Some(from_nanos(since.saturating_add(nanos(self.lean())))),
        }
    }

    /// This session's flaw (a mutant's), if any.
    pub(crate) fn flaw(&self) -> Flaw {
        *self.flaw.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn gap(&self) -> Duration {
        Duration::from_nanos(self.gap.load(Ordering::Acquire))
    }

    /// The shortest lease budget of the locks on this session.
    pub(crate) fn shortest_budget(&self) -> Duration {
        Duration::from_nanos(self.budget.load(Ordering::Acquire))
    }

    /// How often the watchdog probes: every pair gap (each probe then pairs with the one
    /// before it), but no more often than a quarter of what the budget leaves beyond one gap,
    /// which keeps at least three quarters of it in hand after every renewal.
    pub(crate) fn probe_period(&self) -> Duration {
        let gap = self.gap();
        gap.max(self.shortest_budget().saturating_sub(gap) / 4)
    }

    /// When a lease of `budget` ends: `anchor + budget`, long past before the first proof.
    pub(crate) fn deadline(&self, budget: Duration) -> Instant {
        let anchor = self.anchor.load(Ordering::Acquire);
        from_nanos(anchor.saturating_add(nanos(budget)))
    }

    /// Whether the lease can vouch at `now` for a hold of `budget` just granted, with a
    /// sixteenth of it to spare; else the grant waits for a probe (the queue's `prove`).
    pub(crate) fn vouches_for(&self, budget: Duration, now: Instant) -> bool {
        self.deadline(budget) > now + budget / 16
    }

    /// Whether an acquire granted at `now` may hand out its guard at once (the queue's
    /// `prove` and the model's grant): when the lease vouches for it, else only after a
    /// committed probe of the granted node.
    pub(crate) fn grants_at_once(&self, budget: Duration, now: Instant) -> bool {
        // A warm lease decides without the flaw's lock.
        self.vouches_for(budget, now) || self.flaw().is(Mutant::GrantWithoutProof)
    }

    /// The lease left at `now` for the shortest budget on this session.
    pub(crate) fn remaining(&self, now: Instant) -> Duration {
        self.deadline(self.shortest_budget())
            .saturating_duration_since(now)
    }

    /// When the newest committed write's reply arrived, if any has.
    pub(crate) fn newest_commit(&self) -> Option<Instant> {
        match self.newest_commit.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    pub(crate) fn is_legacy(&self) -> bool {
        self.flaw().is(Mutant::SyncLease)
    }

    fn replies(&self) -> std::sync::MutexGuard<'_, VecDeque<(i64, i64)>> {
        self.replies.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request sent at `sent` got a server reply (of any kind) at `at`: the server it was
    /// connected to saw the session by then.
    pub(crate) fn replied(&self, sent: Instant, at: Instant) {
        let (sent, at) = (to_nanos(sent), to_nanos(at));
        let mut replies = self.replies();
        // Callers record from different tasks: keep the list sorted by reply time.
        let index = replies.partition_point(|&(_, r)| r <= at);
        replies.insert(index, (sent, at));
        if replies.len() > HISTORY {
            let last = replies.len() - 1;
            let mut i = 0;
            replies.retain(|_| {
                i += 1;
                (i - 1) % 2 == 0 || i - 1 == last
            });
        }
    }

    /// A write sent at `sent` was committed, its reply arriving at `at`: moves the anchor to the
    /// latest send time among the replies that came back at least `G` before `sent` (see the
    /// module docs), or on a cold start to what the client's keepalive guarantees.
    pub(crate) fn committed(&self, sent: Instant, at: Instant) {
        if self.is_legacy() {
            self.synced(sent, at);
            return;
        }
        let flaw = self.flaw();
        let sent_at = to_nanos(sent);
        let gap = nanos(self.gap());
        let paired = self.paired_anchor(flaw, sent_at, gap);
        let mut candidate = paired;
        if self.cold.load(Ordering::Acquire) {
            candidate = self.cold_anchor(flaw, paired, sent, at, gap);
        }
        if let Some(candidate) = candidate {
            self.anchor.fetch_max(candidate, Ordering::AcqRel);
        }
        self.newest_commit.fetch_max(to_nanos(at), Ordering::AcqRel);
        self.replied(sent, at);
    }

    /// The anchor a write sent at `sent_at` (nanoseconds) proves by pairing, if any: the
    /// latest send time among the replies back at least `gap` (`G`) before it was sent. Keeps
    /// only the best of those replies.
    fn paired_anchor(&self, flaw: Flaw, sent_at: i64, gap: i64) -> Option<i64> {
        // The replies `k` can pair with: back at least `G` before it was sent.
        let pair_by = match flaw.is(Mutant::NoPairGap) {
            true => sent_at,
            false => sent_at - gap,
        };
        let mut replies = self.replies();
        let old_enough = replies.partition_point(|&(_, r)| r <= pair_by);
        let best = replies
            .iter()
            .take(old_enough)
            .copied()
            .max_by_key(|&(s, _)| s);
        // Every later proof finds all of these old enough too: only the best one matters.
        if let Some(best) = best {
            replies.drain(..old_enough);
            replies.push_front(best);
        }
        // The anchor is the reply's send time: its arrival at the server is no earlier.
        best.map(|(s, r)| if flaw.is(Mutant::ReceiveAnchor) { r } else { s })
    }

    /// The anchor a commit of the cold phase, sent at `sent` and replied at `at`, proves: the
    /// later of its pair's (`paired`) and a lean on the client's keepalive (when the process
    /// ran through the lean). Ends the cold phase when a pair with a reply of this phase does
    /// at least as well as the lean; else counts the commit's time toward the slowest one.
    fn cold_anchor(
        &self,
        flaw: Flaw,
        paired: Option<i64>,
        sent: Instant,
        at: Instant,
        gap: i64,
    ) -> Option<i64> {
        let sent_at = to_nanos(sent);
        // The cold phase: lean on the keepalive, until pairing does at least as well; but
        // only across a stretch the process is known to have run through (else the
        // keepalive may not have run either: the module's "The cold proofs").
        let lean = match flaw.is(Mutant::ColdWithoutKeepalive) {
            true => gap,
            false => nanos(self.lean()),
        };
        let leaning = self.ran_through(sent_at).then_some(sent_at - lean);
        let candidate = match (paired, leaning) {
            (Some(p), Some(l)) => Some(p.max(l)),
            (p, l) => p.or(l),
        };
        // Only a pair with a reply of this phase ends it: older ones, from before an idle
        // spell, prove too little for the regular probes to keep the lease from there.
        let since = self.cold_since.load(Ordering::Acquire);
        if paired.is_some_and(|p| p >= since && leaning.is_none_or(|l| p >= l)) {
            self.cold.store(false, Ordering::Release);
        } else {
            let took = nanos(at.saturating_duration_since(sent)) as u64;
            self.slowest_cold_commit.fetch_max(took, Ordering::AcqRel);
        }
        candidate
    }

    /// The session was created by a connect sent at `at` (no earlier): the leader that
    /// committed its creation started its timeout after that, so `at` anchors the lease as a
    /// paired proof's send time does (the module's "A new session's first lease").
    pub(crate) fn began(&self, at: Instant) {
        self.anchor.fetch_max(to_nanos(at), Ordering::AcqRel);
    }

    /// Sets the anchor directly (tests of the watchdog that only need a live lease).
    #[cfg(test)]
    pub(crate) fn prove(&self, anchor: Instant) {
        self.anchor.fetch_max(to_nanos(anchor), Ordering::AcqRel);
    }

    /// The anchor, once there is one.
    #[cfg(test)]
    fn anchor(&self) -> Option<Instant> {
        match self.anchor.load(Ordering::Acquire) {
            NO_PROOF => None,
            at => Some(from_nanos(at)),
        }
    }

    /// The `SyncLease` mutant's rule: a `sync` (or create) reply, arriving at `at`, extends the
    /// lease from its send time. Unsound when the ensemble is partitioned; only that mutant uses
    /// it.
    pub(crate) fn synced(&self, sent: Instant, at: Instant) {
        self.anchor.fetch_max(to_nanos(sent), Ordering::AcqRel);
        self.newest_commit.fetch_max(to_nanos(at), Ordering::AcqRel);
    }
}

/// A lease cell's content as a value, for the lease model (`crate::watchdog::model`).
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct LeaseSnapshot {
    anchor: i64,
    gap: u64,
    budget: u64,
    newest_commit: i64,
    cold: bool,
    cold_since: i64,
    slowest_cold_commit: u64,
    keepalive: u64,
    client_keepalive: Duration,
    stall: u64,
    last_ran: i64,
    running_since: i64,
    flaw: Flaw,
    replies: Vec<(i64, i64)>,
}

#[cfg(feature = "model")]
impl LeaseCell {
    /// This cell's content as a value.
    pub(crate) fn snapshot(&self) -> LeaseSnapshot {
        LeaseSnapshot {
            anchor: self.anchor.load(Ordering::Acquire),
            gap: self.gap.load(Ordering::Acquire),
            budget: self.budget.load(Ordering::Acquire),
            newest_commit: self.newest_commit.load(Ordering::Acquire),
            cold: self.cold.load(Ordering::Acquire),
            cold_since: self.cold_since.load(Ordering::Acquire),
            slowest_cold_commit: self.slowest_cold_commit.load(Ordering::Acquire),
            keepalive: self.keepalive.load(Ordering::Acquire),
            client_keepalive: self.client_keepalive,
            stall: self.stall.load(Ordering::Acquire),
            last_ran: self.last_ran.load(Ordering::Acquire),
            running_since: self.running_since.load(Ordering::Acquire),
            flaw: self.flaw(),
            replies: self.replies().iter().copied().collect(),
        }
    }

    /// A cell holding what `snapshot` holds.
    pub(crate) fn restore(snapshot: &LeaseSnapshot) -> LeaseCell {
        start_clock();
        LeaseCell {
            anchor: AtomicI64::new(snapshot.anchor),
            gap: AtomicU64::new(snapshot.gap),
            budget: AtomicU64::new(snapshot.budget),
            newest_commit: AtomicI64::new(snapshot.newest_commit),
            cold: AtomicBool::new(snapshot.cold),
            cold_since: AtomicI64::new(snapshot.cold_since),
            slowest_cold_commit: AtomicU64::new(snapshot.slowest_cold_commit),
            keepalive: AtomicU64::new(snapshot.keepalive),
            client_keepalive: snapshot.client_keepalive,
            stall: AtomicU64::new(snapshot.stall),
            last_ran: AtomicI64::new(snapshot.last_ran),
            running_since: AtomicI64::new(snapshot.running_since),
            broken: AtomicBool::new(false),
            flaw: Mutex::new(snapshot.flaw),
            replies: Mutex::new(snapshot.replies.iter().copied().collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(4);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn cell(policy: &LeasePolicy) -> LeaseCell {
        let cell = LeaseCell::new(T);
        cell.adopt(policy, T);
        cell
    }

    #[test]
    fn budget_gap_and_margin_follow_the_session_timeout() {
        let policy = LeasePolicy::default();
        assert_eq!(policy.margin(T), ms(200));
        assert_eq!(policy.budget(T), ms(3_760)); // 3.96 s - 200 ms
        assert_eq!(policy.pair_gap(T), ms(1_210)); // tick T/2: 1 s x 1.01 + 200 ms
        let known_tick = LeasePolicy {
            tick: Some(ms(200)),
            ..policy
        };
        assert_eq!(known_tick.pair_gap(T), ms(301));
        assert_eq!(default_margin(ms(400)), ms(20));
        assert_eq!(default_margin(Duration::from_secs(60)), ms(500));
    }

    #[test]
    fn a_lease_that_cannot_be_renewed_in_time_is_refused() {
        let policy = LeasePolicy::default();
        for t in [ms(400), T, Duration::from_secs(40)] {
            assert_eq!(policy.check_feasible(t), Ok(()), "{t:?} at tick T/2");
        }
        // A tick as long as the session timeout (minSessionTimeout lowered below 2 ticks).
        let slow = LeasePolicy {
            tick: Some(T),
            ..policy
        };
        assert_eq!(
            slow.check_feasible(T),
            Err(Infeasible {
                session_timeout: T,
                tick: T
            })
        );
    }

    #[test]
    fn probes_come_every_gap_or_a_quarter_of_the_spare_budget() {
        let default = cell(&LeasePolicy::default());
        assert_eq!(default.probe_period(), default.gap()); // 1.21 s
        let fast_tick = LeasePolicy {
            tick: Some(ms(200)),
            ..LeasePolicy::default()
        };
        let long = LeaseCell::new(Duration::from_secs(10));
        long.adopt(&fast_tick, Duration::from_secs(10));
        // budget 9.4 s, gap 0.601 s: (9.4 - 0.601) / 4
        assert_eq!(long.probe_period(), ms(2_199) + Duration::from_micros(750));
    }

    #[tokio::test(start_paused = true)]
    async fn a_committed_write_anchors_at_the_newest_reply_a_gap_before_it() {
        let policy = LeasePolicy {
            tick: Some(ms(400)),
            ..LeasePolicy::default()
        };
        let cell = cell(&policy);
        let gap = cell.gap(); // 202 ms + 200 ms
        assert_eq!(gap, ms(402));
        let t0 = Instant::now();
        cell.cold.store(false, Ordering::Release);
        // j1 sent at 0, answered at 10; j2 sent at 100, answered at 110.
        cell.replied(t0, t0 + ms(10));
        cell.replied(t0 + ms(100), t0 + ms(110));
        // k sent at 300: no reply is G before it, so nothing is proven yet.
        cell.committed(t0 + ms(300), t0 + ms(310));
        assert_eq!(cell.anchor(), None);
        assert!(cell.deadline(Duration::from_secs(60)) <= Instant::now());
        // k sent at 420: j1 (answered at 10 <= 420 - 402) qualifies, j2 does not.
        cell.committed(t0 + ms(420), t0 + ms(430));
        assert_eq!(cell.anchor(), Some(t0));
        // k sent at 720: the newest qualifying reply is the write at 300 (answered at 310).
        cell.committed(t0 + ms(720), t0 + ms(730));
        assert_eq!(cell.anchor(), Some(t0 + ms(300)));
        // Never its own send time: a write's reply alone proves the leader heard nothing.
        assert!(cell.anchor() < Some(t0 + ms(720)));
    }

    #[tokio::test(start_paused = true)]
    async fn among_old_enough_replies_the_latest_send_wins() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        // A slow request sent at 50 answered after a fast one sent at 80.
        cell.replied(t0 + ms(80), t0 + ms(90));
        cell.replied(t0 + ms(50), t0 + ms(95));
        let k = t0 + ms(95) + cell.gap();
        cell.committed(k, k + ms(5));
        assert_eq!(cell.anchor(), Some(t0 + ms(80)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_anchor_never_moves_back() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        let gap = cell.gap();
        cell.replied(t0 + ms(500), t0 + ms(510));
        cell.committed(t0 + ms(510) + gap, t0 + ms(520) + gap);
        assert_eq!(cell.anchor(), Some(t0 + ms(500)));
        // A slow write sent long ago and answered only now proves less: ignored.
        cell.committed(t0 + ms(600), t0 + ms(900) + gap);
        assert_eq!(cell.anchor(), Some(t0 + ms(500)));
    }

    /// The watchdog's ticker, running every period from now until `until` (paused time).
    async fn run_ticker(cell: &LeaseCell, until: Instant) {
        while Instant::now() < until {
            cell.ran(Instant::now());
            tokio::time::advance(cell.ticker_period()).await;
        }
        cell.ran(Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cold_proof_leans_only_across_a_stretch_the_process_ran_through() {
        let policy = LeasePolicy::default();
        let fresh = || cell(&policy);
        let lean = fresh().lean(); // G + T/5 + margin + stall
        assert_eq!(lean, fresh().gap() + ms(800) + ms(200) + ms(200));
        assert_eq!(fresh().ticker_period(), ms(50));

        // A first acquire (or one right after a pause) with nothing to show that the process
        // ran through the lean before its create: the keepalive may not have run, so the cold
        // proof gives no anchor (the rule before the ticker anchored it a lean back).
        let cell = fresh();
        tokio::time::advance(Duration::from_secs(30)).await;
        let s = Instant::now();
        cell.committed(s, s + ms(5));
        assert_eq!(cell.anchor(), None, "a cold proof leaned with no evidence");
        assert!(!cell.vouches_for(policy.budget(T), s + ms(5)));

        // The ticker has run, but not yet a whole lean before the write: no lean; a lean
        // after its start, the proof leans.
        let cell = fresh();
        let t0 = Instant::now();
        run_ticker(&cell, t0 + lean - ms(100)).await;
        let early = Instant::now();
        cell.committed(early, early + ms(5));
        assert_eq!(cell.anchor(), None, "leaned across the ticker's start");
        run_ticker(&cell, t0 + lean + ms(200)).await;
        let ran = Instant::now();
        cell.committed(ran, ran + ms(5));
        assert_eq!(cell.anchor(), Some(ran - lean));

        // A pause of 9 s (SIGSTOP) just before a write sent right after the resume, answered
        // before the ticker has run again: its last run is too old, no lean.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        let resumed = Instant::now();
        cell.committed(resumed, resumed + ms(5));
        assert_eq!(cell.anchor(), None, "leaned through a pause");
        // Pairing needs no keepalive: a write a gap after that reply pairs with it.
        let paired = resumed + ms(5) + cell.gap();
        cell.committed(paired, paired + ms(5));
        assert_eq!(cell.anchor(), Some(resumed));

        // The same pause, the ticker's first run after it before the write: a break, and the
        // process counts as running only from then on.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        cell.ran(Instant::now());
        tokio::time::advance(ms(1)).await;
        let after = Instant::now();
        cell.committed(after, after + ms(5));
        assert_eq!(cell.anchor(), None, "leaned across a detected pause");

        // A gap of the stall itself is no break (a late timer); a longer one is.
        let cell = cell_with_history().await;
        tokio::time::advance(cell.stall()).await;
        cell.ran(Instant::now());
        let at = Instant::now();
        cell.committed(at, at + ms(5));
        assert_eq!(cell.anchor(), Some(at - lean));
        tokio::time::advance(cell.stall() + ms(1)).await;
        cell.ran(Instant::now());
        let next = Instant::now();
        cell.committed(next, next + ms(5));
        assert_eq!(
            cell.anchor(),
            Some(at - lean),
            "leaned across a gap past the stall"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_process_record_passes_on_its_runs_and_every_break() {
        let (record, stall) = (RunRecord::new(), ms(200));
        let t0 = Instant::now();
        assert_eq!(record.ran(t0, stall), t0);
        // Runs a quarter of the stall apart, from any session's ticker: no break.
        for _ in 0..100 {
            tokio::time::advance(ms(50)).await;
            assert_eq!(record.ran(Instant::now(), stall), t0);
        }
        // A new session's lease starts from the record on its ticker's first run, and its
        // first cold proof leans at once.
        let cell = cell(&LeasePolicy::default());
        let now = Instant::now();
        cell.inherit(record.ran(now, cell.stall()), cell.ran(now));
        cell.committed(now, now + ms(5));
        assert_eq!(cell.anchor(), Some(now - cell.lean()));
        // A gap past the stall is a break, whichever ticker finds it.
        tokio::time::advance(ms(201)).await;
        let b = Instant::now();
        assert_eq!(record.ran(b, stall), b);
        // A ticker that tolerates more is judged by the smallest stall reported.
        tokio::time::advance(ms(300)).await;
        let c = Instant::now();
        assert_eq!(record.ran(c, ms(500)), c);
        // A ticker that read the clock before `c` and records after it takes nothing back.
        assert_eq!(record.ran(b + ms(10), stall), c);
        // A smaller stall than any before: the gaps so far were judged against a longer one.
        tokio::time::advance(ms(10)).await;
        let d = Instant::now();
        assert_eq!(record.ran(d, ms(20)), d);
        // A lease whose own ticker ran before keeps its own record: its break stands.
        let cell = cell_with_history().await;
        tokio::time::advance(Duration::from_secs(9)).await;
        let woke = Instant::now();
        cell.inherit(t0, cell.ran(woke));
        cell.committed(woke, woke + ms(5));
        assert_eq!(
            cell.anchor(),
            None,
            "a lease inherited across its own break"
        );
    }

    /// A cold cell whose ticker has run for twice a lean.
    async fn cell_with_history() -> LeaseCell {
        let cell = cell(&LeasePolicy::default());
        run_ticker(&cell, Instant::now() + cell.lean() * 2).await;
        cell
    }

    #[tokio::test(start_paused = true)]
    async fn cold_proofs_lean_on_the_keepalive_until_pairing_does_as_well() {
        let cell = cell_with_history().await;
        let gap = cell.gap();
        let lean = gap + ms(1_200); // G + T/5 + margin + stall
        assert_eq!(cell.lean(), lean);
        let s = Instant::now();
        // Cold: nothing known before it, the client pinged within T/5 (+ margin).
        cell.committed(s, s + ms(5));
        assert_eq!(cell.anchor(), Some(s - lean));
        assert!(cell.cold_since().is_some());
        // Still cold (nothing to pair with yet): a slow second write leans too.
        run_ticker(&cell, Instant::now() + Duration::from_millis(500)).await;
        let slow = Instant::now();
        cell.committed(slow, slow + ms(900));
        assert_eq!(cell.anchor(), Some(slow - lean));
        assert_eq!(cell.slowest_cold_commit(), ms(900));
        // A write a gap after the first reply pairs with it, as well as leaning would: warm.
        let paired = s + ms(5) + gap;
        cell.committed(paired, paired + ms(5));
        assert_eq!(cell.anchor(), Some(s));
        assert_eq!(cell.cold_since(), None);
        // Warm: a write with no reply G before it proves nothing new.
        run_ticker(&cell, Instant::now() + Duration::from_secs(4)).await;
        let later = Instant::now();
        cell.committed(later, later + ms(5));
        assert!(cell.anchor() < Some(later - lean), "a warm write leaned");
        // After a restart (the watchdog was idle), cold again.
        cell.restart(Instant::now());
        run_ticker(&cell, Instant::now() + ms(100)).await;
        let again = Instant::now();
        cell.committed(again, again + ms(5));
        assert_eq!(cell.anchor(), Some(again - lean));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dense_stream_of_replies_still_leaves_old_ones_to_pair_with() {
        // 1,000 acquires in 4 s on one session (each create a reply and a commit): the
        // history stays bounded, and a write sent a gap after the first replies pairs with
        // one of them rather than finding them forgotten.
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        for i in 0..1000u64 {
            cell.replied(t0 + ms(4 * i), t0 + ms(4 * i + 2));
        }
        assert!(cell.replies().len() <= HISTORY);
        let gap = cell.gap(); // 1.21 s
        cell.committed(t0 + ms(1_300) + gap, t0 + ms(1_305) + gap);
        let anchor = cell.anchor().expect("paired with an old reply");
        assert!(anchor <= t0 + ms(1_300), "{:?}", anchor - t0);
        assert!(anchor >= t0 + ms(1_000), "{:?}", anchor - t0);
    }

    #[tokio::test(start_paused = true)]
    async fn replies_recorded_out_of_order_are_sorted_and_history_is_bounded() {
        let cell = cell(&LeasePolicy::default());
        cell.cold.store(false, Ordering::Release);
        let t0 = Instant::now();
        cell.replied(t0 + ms(20), t0 + ms(30));
        cell.replied(t0, t0 + ms(10));
        let order: Vec<i64> = cell.replies().iter().map(|&(_, r)| r).collect();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        for i in 0..(HISTORY as u64 * 2) {
            cell.replied(t0 + ms(i), t0 + ms(i + 1));
        }
        assert!(cell.replies().len() <= HISTORY);
        // Thinned, not truncated: the oldest reply's era is still covered.
        assert!(cell
            .replies()
            .front()
            .is_some_and(|&(s, _)| s <= to_nanos(t0 + ms(30))));
        assert_eq!(cell.newest_commit(), None, "replies are not commits");
    }
}
