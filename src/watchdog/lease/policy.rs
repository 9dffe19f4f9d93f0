//! How zkfence turns proofs into a lease: [`LeasePolicy`], the knobs of
//! [`LockOptions`](crate::LockOptions), and the durations a session's timeout gives with them
//! (the budget, the pair gap `G`, the margin, the stall), as the lease module argues them.

use std::time::Duration;

use crate::mutants::{Flaw, Mutant};

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

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(4);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
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
}
