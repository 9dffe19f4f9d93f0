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
//! from 10 (`model/README.md`; the
//! [`Mutant::LeanThroughPause`](crate::Mutant::LeanThroughPause) mutant keeps that rule).
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
//!
//! # Where the code is
//!
//! - `policy.rs`: [`LeasePolicy`], the knobs, and the arithmetic of a session's timeout (the
//!   budget, `G`, the margin, whether a lease can be kept at all);
//! - `cell.rs`: [`LeaseCell`], what one session's replies have proven, and what it vouches for;
//! - `anchor.rs`: the anchor: the replies remembered, and what a committed write proves
//!   ("What a reply proves", "A new session's first lease");
//! - `cold.rs`: the cold phase, its lean and the ticker's record that allows it ([`RunRecord`]:
//!   "Leaning needs a running process");
//! - `epoch.rs`: the lease clock's instants as nanoseconds, for the atomics.

mod anchor;
mod cell;
mod cold;
mod epoch;
mod policy;

pub(crate) use self::cell::LeaseCell;
#[cfg(feature = "model")]
pub(crate) use self::cell::LeaseSnapshot;
pub(crate) use self::cold::RunRecord;
pub(crate) use self::policy::LeasePolicy;
// For the lease model's code (the `model` feature), at the paths they had before the lease
// module became a folder.
#[cfg(feature = "model")]
pub(crate) use self::epoch::start_clock;
#[cfg(feature = "model")]
pub(crate) use self::policy::client_keepalive;
