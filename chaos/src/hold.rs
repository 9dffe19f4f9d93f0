//! A hold as every kind of worker drives it ([`Hold`]): the lease gate before each side
//! effect, the grant, fenced writes and reads of one store row, the polled lease of a
//! stretched hold; and the log ([`Log`]) they write their events to. A hold is checked through
//! a [`Lease`]: a lock's or a leadership's [`Held`], or a multi-lock's `MultiHeld`, whose
//! check covers all its paths.

use crate::clock::now_ns;
use crate::event::{Ev, Event, OpKind, Role};
use crate::rng::Rng;
use crate::store::{Op, Outcome, Store};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use zkfence::fence::FenceTicket;
use zkfence::{Exclusive, Held, Mode, Shared};

/// Where a worker's events go: one JSON line each on stdout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Log {
    pub id: u32,
    pub pid: u32,
}

impl Log {
    /// Writes one event; `t` is taken by the caller where the event's time matters.
    pub(crate) fn at(&self, t: i64, ev: Ev) {
        let event = Event {
            t,
            w: self.id,
            pid: self.pid,
            ev,
        };
        let mut out = std::io::stdout().lock();
        // One write per line: a SIGKILL loses at most the line being written.
        let _ = out.write_all(format!("{}\n", event.to_json_line()).as_bytes());
        let _ = out.flush();
    }

    pub(crate) fn now(&self, ev: Ev) {
        self.at(now_ns(), ev);
    }
}

/// Set by SIGUSR1: the controller wants the current hold stretched to `--long-ms` from now
/// (a partition is about to be aimed at it).
pub(crate) static EXTEND: AtomicBool = AtomicBool::new(false);

/// Sets [`EXTEND`] on every SIGUSR1.
pub(crate) fn listen_for_stretch() {
    if let Ok(mut usr1) =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
    {
        tokio::spawn(async move {
            while usr1.recv().await.is_some() {
                EXTEND.store(true, Ordering::SeqCst);
            }
        });
    }
}

/// Whether the controller asked for a stretch since the last call (and forgets the ask).
pub(crate) fn stretch_asked() -> bool {
    EXTEND.swap(false, Ordering::SeqCst)
}

/// Ops invoked so far by this process (for op ids).
static OPS: AtomicU64 = AtomicU64::new(0);

/// When this process made its first op id: with its pid, what tells it from an earlier worker
/// process that had the same pid (a long run wraps `pid_max`, 32,768 by default, and two
/// workers' op ids alike would pass one's writes off as the other's).
static INCARNATION: std::sync::LazyLock<i64> = std::sync::LazyLock::new(now_ns);

/// A hold's fence ticket, if its mode has one: an exclusive hold's (its writes are fenced),
/// none for a reader's.
pub(crate) trait Ticketed {
    fn fence_ticket(&self) -> Option<FenceTicket>;
}

impl Ticketed for Held<Exclusive> {
    fn fence_ticket(&self) -> Option<FenceTicket> {
        Some(self.ticket())
    }
}

impl Ticketed for Held<Shared> {
    fn fence_ticket(&self) -> Option<FenceTicket> {
        None
    }
}

/// What a hold is checked through: its lease, its deadline, and the wait out of jeopardy.
pub(crate) trait Lease {
    /// `Held::check`: fails once the hold is lost or its lease has lapsed (or in jeopardy).
    fn check(&self) -> zkfence::Result<()>;
    /// When the lease ends unless ZooKeeper replies again.
    fn deadline(&self) -> Instant;
    /// `Held::steady`: until the hold is steady again, or lost.
    async fn steady(&self) -> zkfence::Result<()>;
}

impl<M: Mode> Lease for Held<M> {
    fn check(&self) -> zkfence::Result<()> {
        Held::check(self)
    }

    fn deadline(&self) -> Instant {
        self.lease_deadline()
    }

    async fn steady(&self) -> zkfence::Result<()> {
        Held::steady(self).await
    }
}

/// One hold of one lock path, as a worker drives it: its [`Held`] (the node, the session, the
/// loss to watch), the [`Lease`] its checks go through, the token it writes with (the lock's
/// token, a leader's epoch), and the store row its path writes.
pub(crate) struct Hold<'a, L, M: Mode = Exclusive> {
    pub held: &'a Held<M>,
    /// What its writes go to the fence with (a reader's hold writes nothing, and has none).
    pub ticket: Option<FenceTicket>,
    pub lease: &'a L,
    pub token: u64,
    pub row: i32,
    pub log: &'a Log,
    /// Whether the worker checks its lease before each write (not in the watchdog-off mutant).
    pub heed_watchdog: bool,
    pub read: bool,
}

/// The role a hold logs.
pub(crate) fn role(read: bool) -> Role {
    if read {
        Role::Read
    } else {
        Role::Write
    }
}

impl<L: Lease, M: Mode> Hold<'_, L, M> {
    /// Takes the time first, then checks the lease, then reads the deadline: if the check passed,
    /// the logged time is before the cancellation and the lease left is positive. The
    /// watchdog-off mutant skips the check and so logs a negative lease left after a pause.
    fn try_gate(&self) -> zkfence::Result<(i64, i64)> {
        let t = now_ns();
        let at = Instant::now();
        if self.heed_watchdog {
            self.lease.check()?;
        }
        let deadline = self.lease.deadline();
        let left_ms = if deadline >= at {
            (deadline - at).as_millis() as i64
        } else {
            -((at - deadline).as_millis() as i64)
        };
        Ok((t, left_ms))
    }

    /// The lease gate before a side effect ([`Hold::try_gate`]). In jeopardy (a grace runs) it
    /// does not pass: it logs `jeopardy`, awaits `steady()` (logging `steady`), then checks
    /// again with a time of its own; a loss, or the grace running out, fails it.
    pub(crate) async fn gate(&self) -> Result<(i64, i64), String> {
        loop {
            match self.try_gate() {
                Err(zkfence::Error::Jeopardy) => self.sit_out_jeopardy().await?,
                result => return result.map_err(|e| e.to_string()),
            }
        }
    }

    /// Waits until the hold is steady again, or lost.
    async fn sit_out_jeopardy(&self) -> Result<(), String> {
        let token = self.token;
        let since = now_ns();
        self.log.at(since, Ev::Jeopardy { token });
        self.lease.steady().await.map_err(|e| e.to_string())?;
        let waited_ms = ((now_ns() - since).max(0) / 1_000_000) as u64;
        self.log.now(Ev::Steady { token, waited_ms });
        Ok(())
    }

    fn next_op(&self) -> Op {
        let n = OPS.fetch_add(1, Ordering::Relaxed) + 1;
        Op {
            id: format!("w{}-{}.{:x}-{n}", self.log.id, self.log.pid, *INCARNATION),
            worker: self.log.id,
            row: self.row,
        }
    }

    /// Logs the grant at `t` (valid if the lease check passes right after it) and starts the
    /// task that logs a watchdog cancellation. `None`: the grant was already stale. A grant in
    /// jeopardy (the lease lapsed while it queued) goes on only once `steady()` returned and a
    /// check passed; it is logged valid but `jeopardy`, which is not a passing check.
    ///
    /// `t` is taken before the check: `now_ns()` right after the acquire returned, or for a
    /// path of a multi-lock the moment that path was granted (its lease held from then on if
    /// it holds now).
    pub(crate) async fn granted(&self, t: i64, long: bool) -> Option<tokio::task::JoinHandle<()>> {
        let token = self.token;
        let seq = self.held.token().sequence();
        let (ok, jeopardy) = match self.heed_watchdog.then(|| self.lease.check()) {
            None | Some(Ok(())) => (true, false),
            Some(Err(zkfence::Error::Jeopardy)) => {
                let steady = self.sit_out_jeopardy().await.is_ok();
                (steady && self.lease.check().is_ok(), true)
            }
            Some(Err(_)) => (false, false),
        };
        self.log.at(
            t,
            Ev::Granted {
                token,
                seq: i64::from(seq),
                node: self.held.node_path().to_owned(),
                session: self.held.session_id().0,
                valid: ok,
                long,
                role: role(self.read),
                jeopardy,
                row: self.row as u32,
            },
        );
        if !ok {
            return None;
        }
        let observer = self.held.clone();
        let log = *self.log;
        Some(tokio::spawn(async move {
            let reason = observer.lost().await;
            if reason != zkfence::LossReason::Released {
                log.now(Ev::Cancel {
                    token,
                    reason: reason.as_str().to_owned(),
                });
            }
        }))
    }

    /// A reader's hold: reads of the counter and the fence, each between two lease checks.
    /// While the lease holds, no writer after us can have been granted, so the fence (the
    /// newest writer's token the store accepted) must be below our token.
    pub(crate) async fn observe(&self, store: &mut Store, rng: &mut Rng, reads: u32) {
        let Some(watcher) = self.granted(now_ns(), false).await else {
            return;
        };
        let token = self.token;
        for _ in 0..reads {
            if let Err(why) = self.gate().await {
                self.log.now(Ev::CheckFailed { token, error: why });
                break;
            }
            let Ok((counter, fence)) = store.peek(self.row, self.held.lock_path()).await else {
                break;
            };
            // The time logged is the one taken before this second check; in jeopardy the read
            // is not vouched for.
            let (t, valid) = match self.try_gate() {
                Ok((t, _)) => (t, true),
                Err(_) => (now_ns(), false),
            };
            self.log.at(
                t,
                Ev::Observe {
                    token,
                    counter,
                    fence,
                    valid,
                },
            );
            if !valid {
                break;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(10, 40))).await;
        }
        drop(watcher);
    }

    /// A writer's hold: raise the fence, then `increments` read-modify-write increments (and
    /// more for `stretch` once the controller asks for it with SIGUSR1).
    pub(crate) async fn work(
        &self,
        store: &mut Store,
        rng: &mut Rng,
        increments: u32,
        long: bool,
        stretch: Duration,
    ) {
        let Some(watcher) = self.granted(now_ns(), long).await else {
            return;
        };
        let token = self.token;
        let mut until = Instant::now();
        // First raise the fence: from here on every older holder is refused.
        if self.fence(store).await.is_some() {
            let mut done = 0;
            while done < increments || Instant::now() < until {
                done += 1;
                if stretch_asked() {
                    until = until.max(Instant::now() + stretch);
                    self.log.now(Ev::Extended { token });
                }
                if self.increment(store, rng).await.is_none() {
                    break;
                }
            }
        }
        // A stretched hold (a partition is aimed at it) that the store stopped still asks its
        // lease, as a holder polling `check()` would: how long it stays valid after a newer
        // holder took over is what the lease invariant measures.
        poll_lease(std::slice::from_ref(self), until).await;
        drop(watcher); // detaches: it still reports a loss during release
    }

    /// Raises the store row's fence to the token: from then on every older holder is refused.
    /// `None` ends the hold.
    pub(crate) async fn fence(&self, store: &mut Store) -> Option<()> {
        self.step(store, OpKind::Fence, None).await
    }

    /// One read-modify-write increment of the store row: read (the think phase), then the
    /// fenced write. `None` ends the hold.
    pub(crate) async fn increment(&self, store: &mut Store, rng: &mut Rng) -> Option<()> {
        self.log.now(Ev::Read { token: self.token });
        let counter = store.read(self.row).await.ok()?;
        tokio::time::sleep(Duration::from_millis(rng.range(10, 40))).await;
        self.step(store, OpKind::Write, Some(counter + 1)).await
    }

    /// One fenced write; `None` ends the hold (refused, unknown, or the lease gate closed).
    async fn step(&self, store: &mut Store, kind: OpKind, value: Option<i64>) -> Option<()> {
        let token = self.token;
        let (t, left_ms) = match self.gate().await {
            Ok(gate) => gate,
            Err(why) => {
                self.log.now(Ev::CheckFailed { token, error: why });
                return None;
            }
        };
        let op = self.next_op();
        self.log.at(
            t,
            Ev::Invoke {
                op: op.id.clone(),
                kind,
                token,
                value,
                lease_left_ms: left_ms,
                checked: self.heed_watchdog,
            },
        );
        if kind == OpKind::Write {
            // Preparing the write (serialising a payload, a slow disk): a pause here lands after
            // the check, so only the fence can stop the write.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let Some(ticket) = &self.ticket else {
            return None; // a reader's hold writes nothing
        };
        // What users get: the fence's check of the hold just before the commit, then the
        // token's compare. The watchdog-off mutant's workers check nothing: their tickets
        // carry no hold, as a service that only received the ticket would have it.
        let ticket = match self.heed_watchdog {
            true => ticket.clone(),
            false => ticket.detached(),
        };
        let outcome = match value {
            Some(value) => store.write(&op, &ticket, value).await,
            None => store.raise_fence(&op, &ticket).await,
        };
        let op = op.id;
        let ended = match outcome {
            Outcome::Ok => {
                self.log.now(Ev::Ok { op, token });
                return Some(());
            }
            Outcome::Refused => Ev::Fail {
                op,
                token,
                why: "refused".into(),
            },
            Outcome::LockLost => Ev::Fail {
                op,
                token,
                why: "lock lost".into(),
            },
            Outcome::Unknown(error) => Ev::Unknown { op, token, error },
            Outcome::NotApplied(error) => Ev::NotApplied { op, token, error },
        };
        self.log.now(ended);
        None
    }
}

/// Calls `check()` every 10 ms until it fails or `until` passes (sitting out jeopardy, see
/// [`Hold::gate`]), logging a `lease` event (with the time taken before the check) for each
/// pass, at most every 20 ms, for each of `holds` (the paths of one multi-lock share its
/// check; a lock's hold is alone).
pub(crate) async fn poll_lease<L: Lease, M: Mode>(holds: &[Hold<'_, L, M>], until: Instant) {
    let Some(first) = holds.first() else {
        return;
    };
    let mut logged = None;
    while Instant::now() < until {
        match first.gate().await {
            Ok((t, left_ms)) => {
                if logged.is_none_or(|at: i64| t - at >= 20_000_000) {
                    for hold in holds {
                        let token = hold.token;
                        let lease_left_ms = left_ms;
                        hold.log.at(
                            t,
                            Ev::Lease {
                                token,
                                lease_left_ms,
                            },
                        );
                    }
                    logged = Some(t);
                }
            }
            Err(why) => {
                for hold in holds {
                    let (token, error) = (hold.token, why.clone());
                    hold.log.now(Ev::CheckFailed { token, error });
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
