//! What the model is run with: the lease settings in ticks, the bounds of the search, and the
//! mutant under test.

use std::time::Duration;

use zkfence::model_api::Settings;
use zkfence::Mutant;

/// One tick of real time. Every event of the model happens on a tick; durations the library
/// computes (deadlines, gaps) are finer, and compared exactly.
pub const TICK: Duration = Duration::from_secs(1);

/// The session timeout `T`, in ticks: the leader expires a session `T` after it last heard of
/// it.
pub const SESSION_TICKS: i64 = 10;

/// The ensemble's tickTime, in ticks: a follower answers the leader's pings, relaying the
/// sessions it saw, every `tickTime/2` = one tick.
pub const TICK_TIME_TICKS: u64 = 2;

/// The most a follower waits before it relays a touch, in ticks (`tickTime/2`).
pub const RELAY_TICKS: i64 = TICK_TIME_TICKS as i64 / 2;

/// The drift bound: the clients' clocks run at `1 ± DRIFT` of the servers' (10%: one tick per
/// session timeout, so that a rule that ignores it shows on the tick grid).
pub const DRIFT: f64 = 0.1;

/// The lease margin the model's locks set (a tenth of a tick: the model has no jitter below a
/// tick for it to cover).
pub const MARGIN: Duration = Duration::from_millis(100);

/// The grace of the model's locks: a lapse is jeopardy for one session timeout.
pub const GRACE_TICKS: u64 = 10;

/// The clients' clock rates, in lease-clock nanoseconds per tick: slow and fast by the drift
/// bound, and exact.
pub const SLOW: i64 = 900_000_000;
/// A clock running fast by the drift bound.
pub const FAST: i64 = 1_100_000_000;
/// A clock at the servers' rate.
pub const EXACT: i64 = 1_000_000_000;

/// The bounds of one search and the rule under test.
#[derive(Debug, Clone)]
pub struct Config {
    /// The mutant under test; `None` for the library's rule.
    pub mutant: Option<Mutant>,
    /// The last tick explored: every schedule is followed until real time reaches it.
    pub horizon: i64,
    /// The most faults (partitions, connection breaks, pauses) in one schedule.
    pub faults: u8,
    /// How late a late reply comes back, in ticks (a probe's reply comes back at once or
    /// this late).
    pub reply_delay: i64,
    /// The most probes each client's watchdog sends in one schedule.
    pub probes: [u8; 2],
    /// Whether a client's process may pause at any time, or only while it holds with a warm
    /// lease. Anywhere for the `LeanThroughPause` mutant (whose flaw needs a pause before a
    /// cold proof), and for the library's rule at the CI bounds in the deep run
    /// ([`Config::anywhere`]); only warm holders for the library's rule and the other mutants
    /// in CI (their counterexamples need no pause, and the search stays short) and for the
    /// deep run's longer and wider searches (pauses anywhere multiply the states by about
    /// 2.3, past 16 GiB there).
    pub pause_anywhere: bool,
    /// The connect world: A's session may be one its connect created at tick 0 (its first
    /// lease anchored there, its process just started), and a client whose connection broke
    /// reconnects at once or up to the reply delay later, to any working server or to a
    /// leader cut off from its quorum (which revalidates the session on its own).
    pub connect: bool,
    /// Whether A's session is one that existed before the schedule (`false`) or one its
    /// connect created at tick 0 (`true`): each listed value is a set of initial states.
    pub new_sessions: &'static [bool],
    /// The lease settings of both clients' locks.
    pub settings: Settings,
}

impl Config {
    /// The library's rule (or `mutant`'s) with the CI bounds.
    pub fn ci(mutant: Option<Mutant>) -> Config {
        Config {
            mutant,
            horizon: 13,
            faults: 1,
            reply_delay: 3,
            probes: [2, 2],
            pause_anywhere: mutant == Some(Mutant::LeanThroughPause),
            connect: false,
            new_sessions: &[false],
            settings: settings(mutant),
        }
    }

    /// The connect world at the CI bounds: A's session created by its connect at tick 0, A's
    /// reconnects late and to a leader cut off from its quorum; one fault, warm holders
    /// pausing (about 4.9 million states).
    pub fn connect(mutant: Option<Mutant>) -> Config {
        Config {
            connect: true,
            new_sessions: &[true],
            pause_anywhere: false,
            ..Config::ci(mutant)
        }
    }

    /// The connect world in the deep run: A's session created by its connect or existing
    /// before the schedule, to tick 16.
    fn connect_deep(mutant: Option<Mutant>) -> Config {
        Config {
            new_sessions: &[false, true],
            horizon: 16,
            ..Config::connect(mutant)
        }
    }

    /// The deep run's bounds. For the library's rule three searches: the long and the wide
    /// (below), and the connect world with both kinds of session for A to tick 16; for
    /// `AnchorOnReconnect` that connect world; for every other mutant the long and the wide.
    pub fn deep(mutant: Option<Mutant>) -> Vec<Config> {
        match mutant {
            None => {
                let mut configs = Config::deep_of(None);
                configs.push(Config::connect_deep(None));
                configs.push(Config::anywhere());
                configs
            }
            Some(Mutant::AnchorOnReconnect) => vec![Config::connect_deep(mutant)],
            Some(_) => Config::deep_of(mutant),
        }
    }

    /// The library's rule at the CI bounds with clients paused anywhere, not only warm holders
    /// (about 9.8 million states against 4.2, 30–72 s on two cores): in the deep run, which
    /// CI leaves out for its time; CI pauses clients anywhere for `LeanThroughPause` alone.
    pub fn anywhere() -> Config {
        Config {
            pause_anywhere: true,
            ..Config::ci(None)
        }
    }

    /// The long and the wide search of `mutant` (or of the library's rule): a long one (one
    /// fault, schedules followed to tick 24, past a lapse's whole grace, so that jeopardy ends
    /// in a loss or a resume) and a wide one (two faults in a schedule, to the CI horizon):
    /// about 44 and 62 million states for the library's rule (two faults to a longer horizon
    /// would not fit 16 GiB). `LeanThroughPause`, whose schedules pause clients anywhere, gets
    /// the long search only: its counterexample needs one fault, and two faults with pauses
    /// anywhere outgrew 24 GiB before reaching it.
    fn deep_of(mutant: Option<Mutant>) -> Vec<Config> {
        let pause_anywhere = mutant == Some(Mutant::LeanThroughPause);
        let ci = Config {
            pause_anywhere,
            ..Config::ci(mutant)
        };
        let long = Config {
            horizon: 24,
            ..ci.clone()
        };
        match pause_anywhere {
            true => vec![long],
            false => vec![long, Config { faults: 2, ..ci }],
        }
    }

    /// `T/5` on a clock of `rate`, as real ticks, rounded down: the longest a client whose
    /// clock runs at `rate` goes without sending while connected (its keepalive).
    pub fn keepalive_ticks(&self, rate: i64) -> i64 {
        self.settings.keepalive().as_nanos() as i64 / rate
    }
}

/// The lease settings every client of the model uses: `T` = 10 ticks, tickTime 2 ticks, drift
/// 10%, a margin of a tenth of a tick, a grace of `T`, riding out disconnects (so that only
/// the lease stands between a partition and a second holder).
pub fn settings(mutant: Option<Mutant>) -> Settings {
    Settings::new(TICK * SESSION_TICKS as u32)
        .tick_time(TICK * TICK_TIME_TICKS as u32)
        .drift(DRIFT)
        .margin(MARGIN)
        .grace(TICK * GRACE_TICKS as u32)
        .ride_out(true)
        .mutant(mutant)
}
