//! One session's watchdog as a value, for the lease model (`model/`, the `zkfence-model`
//! package): the model checker keeps [`Watchdog`] in its states, and every step restores the
//! library's own `Core`, `LeaseCell` and guard state from it, makes the call the driver
//! or an acquire would make, and takes the result back as a value. Nothing here decides
//! anything: the anchor, the deadline, jeopardy, resume and loss are the library's.
//!
//! Times are nanoseconds on the model's lease clock (any origin; the model starts at zero).
//! Built only with the `model` feature, which also turns on `mutants`.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::clock;
use super::core::{Answer, Core, CoreSnapshot, Event};
use super::lease::{client_keepalive, LeaseCell, LeasePolicy};
use super::state::{CheckError, GuardState, HoldTerms};
use crate::loss::LossReason;
use crate::mutants::{Flaw, Mutant};

/// The instant the model's zero stands for: a day after the lease clock's start, so that
/// anchors before the model's zero are still instants.
static ORIGIN: LazyLock<Instant> = LazyLock::new(|| {
    super::lease::start_clock();
    clock::now() + Duration::from_secs(86_400)
});

fn at(nanos: i64) -> Instant {
    match u64::try_from(nanos) {
        Ok(after) => *ORIGIN + Duration::from_nanos(after),
        Err(_) => *ORIGIN - Duration::from_nanos(nanos.unsigned_abs()),
    }
}

/// `at` in nanoseconds from the model's zero; one too far off for an `i64` saturates (a
/// lease with no proof yet ends long before any instant the model reaches).
fn nanos(at: Instant) -> i64 {
    match at.checked_duration_since(*ORIGIN) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => i64::try_from((*ORIGIN - at).as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

fn nanos_of(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A lock's lease settings, as [`LockOptions`](crate::LockOptions) sets them, and the session
/// timeout.
#[derive(Debug, Clone)]
pub struct Settings {
    session_timeout: Duration,
    policy: LeasePolicy,
    grace: Duration,
    ride_out: bool,
}

impl Settings {
    /// The defaults of `LockOptions` for a session of `session_timeout`.
    pub fn new(session_timeout: Duration) -> Settings {
        Settings {
            session_timeout,
            policy: LeasePolicy::default(),
            grace: Duration::ZERO,
            ride_out: false,
        }
    }

    /// `LockOptions::with_tick_time`.
    pub fn tick_time(mut self, tick: Duration) -> Settings {
        self.policy.tick = Some(tick);
        self
    }

    /// `LockOptions::with_lease_drift`.
    pub fn drift(mut self, drift: f64) -> Settings {
        self.policy.drift = drift;
        self
    }

    /// `LockOptions::with_lease_margin`.
    pub fn margin(mut self, margin: Duration) -> Settings {
        self.policy.margin = Some(margin);
        self
    }

    /// `LockOptions::with_grace`: a lapse is jeopardy for this long before it is a loss.
    pub fn grace(mut self, grace: Duration) -> Settings {
        self.grace = grace;
        self
    }

    /// `LockOptions::with_ride_out`: a disconnect leaves the hold until the lease lapses.
    pub fn ride_out(mut self, ride_out: bool) -> Settings {
        self.ride_out = ride_out;
        self
    }

    /// `LockOptions::with_mutant`.
    pub fn mutant(mut self, mutant: Option<Mutant>) -> Settings {
        self.policy.flaw = mutant.map(Flaw::of).unwrap_or_default();
        self
    }

    /// How long after the anchor the lease holds.
    pub fn budget(&self) -> Duration {
        self.policy.budget(self.session_timeout)
    }

    /// `G`, the pair gap.
    pub fn pair_gap(&self) -> Duration {
        self.policy.pair_gap(self.session_timeout)
    }

    /// How far a cold proof's anchor lies before its write: `G`, the client's keepalive, the
    /// margin and the stall the watchdog's ticker lets pass as running.
    pub fn lean(&self) -> Duration {
        let t = self.session_timeout;
        self.pair_gap() + client_keepalive(t) + self.policy.margin(t) + self.policy.stall(t)
    }

    /// The client's keepalive, `T/5`: the longest `zookeeper-client` leaves a connection idle.
    pub fn keepalive(&self) -> Duration {
        client_keepalive(self.session_timeout)
    }

    /// Whether `FencedLock::new` accepts these settings.
    pub fn feasible(&self) -> bool {
        self.policy.check_feasible(self.session_timeout).is_ok()
    }

    fn terms(&self) -> HoldTerms {
        HoldTerms {
            budget: self.budget(),
            ride_out: self.ride_out,
            grace: self.grace,
            label: "".into(),
        }
    }
}

/// What came back for a probe, as the driver tells it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The check-only `multi` was committed.
    Committed,
    /// A `sync` was answered (the mutants' probes).
    Synced,
    /// A server refused it; `true` when the checked node is missing.
    Refused(bool),
}

/// The only guard's id: the model's clients each take one lock once.
const GUARD: u64 = 1;

/// One session's watchdog (its lease cell, its core and its one guard), as a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Watchdog(CoreSnapshot);

impl Watchdog {
    /// The session's watchdog starts at `now` for an acquire with `settings`: a fresh lease
    /// cell, cold since `now` (`registry::join`).
    pub fn start(settings: &Settings, now: i64) -> Watchdog {
        let lease = Arc::new(LeaseCell::new(settings.session_timeout));
        lease.adopt(&settings.policy, settings.session_timeout);
        lease.restart(at(now));
        Watchdog(Core::new(0, lease).snapshot())
    }

    /// Restores the core, applies `step` to it, and keeps the result.
    fn with(&mut self, step: impl FnOnce(&mut Core)) {
        let mut core = Core::restore(&self.0);
        step(&mut core);
        self.0 = core.snapshot();
    }

    /// The process ran throughout `(from, to]` on the lease clock: the watchdog's ticker runs
    /// at every ticker period after `from`, and at `to` (`LeaseCell::ran`, as the driver's
    /// timer calls it).
    pub fn ran(&mut self, from: i64, to: i64) {
        let lease = LeaseCell::restore(&self.0.lease);
        let period = nanos_of(lease.ticker_period());
        let mut now = from;
        while now < to {
            now = (now + period).min(to);
            lease.ran(at(now));
        }
        self.0.lease = lease.snapshot();
    }

    /// The session was created by a connect sent at `at` (`Connect::connect`, through the
    /// registry: `LeaseCell::began`).
    pub fn began(&mut self, at: i64) {
        self.with(|core| core.lease.began(self::at(at)));
    }

    /// A request sent at `sent` got a server reply at `now` (`LeaseCell::replied`).
    pub fn replied(&mut self, sent: i64, now: i64) {
        self.with(|core| core.lease.replied(at(sent), at(now)));
    }

    /// A write sent at `sent` was committed, its reply arriving at `now` (the acquire's create:
    /// `LeaseCell::committed`).
    pub fn committed(&mut self, sent: i64, now: i64) {
        self.with(|core| core.lease.committed(at(sent), at(now)));
    }

    /// The acquire was granted at `now`: whether the lease vouches for the hold at once (the
    /// queue's `prove`). If not, the grant waits for a proof, and, as the driver's `prove`
    /// does, a session that wanted no proofs until then (it held nothing: `holding` false)
    /// starts cold.
    pub fn grant(&mut self, settings: &Settings, holding: bool, now: i64) -> bool {
        let vouches = Core::restore(&self.0)
            .lease
            .grants_at_once(settings.budget(), at(now));
        if !vouches && !holding && !self.proven(settings, now) {
            self.with(|core| core.lease.restart(at(now)));
        }
        vouches
    }

    /// Whether the lease holds for a grant at `now` (the driver's `settle_provers`).
    pub fn proven(&self, settings: &Settings, now: i64) -> bool {
        let lease = LeaseCell::restore(&self.0.lease);
        lease.deadline(settings.budget()) > at(now)
    }

    /// The guard is registered with the watchdog at `now`, on `node` (`Event::Register`).
    pub fn register(&mut self, settings: &Settings, node: &str, now: i64) {
        self.with(|core| {
            let state = GuardState::new(core.lease.clone(), settings.terms());
            let register = Event::Register {
                id: GUARD,
                node: node.into(),
                state: Arc::new(state),
                watch: None,
            };
            core.apply(register, at(now));
        });
    }

    /// Whether the watchdog's next probe is a `sync` (the mutants') rather than a committed
    /// write (`Core::probes_by_sync`).
    pub fn probes_by_sync(&self) -> bool {
        Core::restore(&self.0).probes_by_sync()
    }

    /// The answer to a probe sent at `sent` arrived at `now`; `checked_guard` when the probe
    /// checked the guard's node (`Core::probed`, as the driver's `record_probe` calls it).
    pub fn probed(&mut self, reply: Reply, sent: i64, checked_guard: bool, now: i64) {
        let answer = match reply {
            Reply::Committed => Answer::Committed,
            Reply::Synced => Answer::Synced,
            Reply::Refused(gone) => Answer::Refused(gone.then_some(0)),
        };
        let checked = [checked_guard.then_some(GUARD)];
        self.with(|core| {
            core.probed(answer, at(sent), &checked, at(now));
        });
    }

    /// A session state change at `now` (`Event::State`).
    pub fn session(&mut self, state: zk::SessionState, now: i64) {
        self.with(|core| drop(core.apply(Event::State(state), at(now))));
    }

    /// The guard's node watch fired: deleted (`Event::NodeGone`).
    pub fn node_gone(&mut self, now: i64) {
        self.with(|core| drop(core.apply(Event::NodeGone { id: GUARD }, at(now))));
    }

    /// The watchdog's timer at `now` (`Core::check_lease`).
    pub fn check_lease(&mut self, now: i64) {
        self.with(|core| core.check_lease(at(now)));
    }

    /// What the guard's `check()` answers at `now` (`GuardState::check`), on a copy: the
    /// value is left as it was. `None` without a guard.
    pub fn check(&self, now: i64) -> Option<Result<(), CheckError>> {
        let state = &self.0.guards.first()?.state;
        let lease = Arc::new(LeaseCell::restore(&self.0.lease));
        Some(GuardState::restore(state, lease).check_at(at(now)))
    }

    /// Whether a guard was registered.
    pub fn registered(&self) -> bool {
        !self.0.guards.is_empty()
    }

    /// When the lease for `settings`' budget ends, on the lease clock.
    pub fn deadline(&self, settings: &Settings) -> i64 {
        nanos(LeaseCell::restore(&self.0.lease).deadline(settings.budget()))
    }

    /// Since when the guard is in jeopardy, if it is.
    pub fn jeopardy_since(&self) -> Option<i64> {
        let state = &self.0.guards.first()?.state;
        state.spell.map(|spell| nanos(spell.since))
    }

    /// Why the guard is over, if it is.
    pub fn lost(&self) -> Option<LossReason> {
        let state = &self.0.guards.first()?.state;
        state.reason
    }

    /// Whether the lease is in its cold phase.
    pub fn cold(&self) -> bool {
        LeaseCell::restore(&self.0.lease).cold_since().is_some()
    }
}
