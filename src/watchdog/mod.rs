//! The lease watchdog: one task per ZooKeeper session that cancels the guards held on it as
//! soon as their lock may be gone.
//!
//! # What it watches
//!
//! - **Session events**, from a persistent watch (every Disconnected/SyncConnected/Expired is
//!   delivered, even a quick flap that `zookeeper-client`'s latest-value state channel would
//!   hide) and from the state channel as a backstop.
//! - **Each guard's own node**, with a data watch: deleted by an admin or a parent cleanup
//!   means [`LossReason::NodeDeleted`].
//! - **The lease** (the argument is [`lease`]'s): the driver keeps its proofs coming with a
//!   probe, a `multi` holding one `check` of a held node, which also finds a node that is gone.
//!
//! The lease is stored as an atomic next to the guards, so [`LockGuard::check`] compares it
//! with the monotonic clock synchronously: after a process pause (which `CLOCK_MONOTONIC`
//! keeps counting through) the check fails at once, before the watchdog task has even been
//! scheduled.
//!
//! [`LockGuard::check`]: crate::Held::check

mod core;
mod driver;
pub(crate) mod lease;
mod registry;

use std::sync::Arc;

use zookeeper_client as zk;

use crate::metrics::WATCHED_SESSIONS;

pub(crate) use self::core::{Event, GuardState};
use self::driver::Driver;
use self::lease::LeasePolicy;
pub(crate) use self::registry::Interest;

/// The session's watchdog, started if it is not running, with one more unit of interest, for
/// a lock on `lock_path` leasing with `policy`.
pub(crate) fn watch_session(
    client: &zk::Client,
    policy: &LeasePolicy,
    lock_path: &str,
) -> Interest {
    let (interest, events) = registry::join(client, policy, lock_path);
    if let Some(events) = events {
        metrics::gauge!(WATCHED_SESSIONS).increment(1.0);
        let watch = Arc::downgrade(interest.watch());
        tokio::spawn(Driver::new(watch, events, Some(client.clone())).run());
    }
    interest
}

#[cfg(test)]
mod tests {
    //! The state machine, driven through its channel with paused time.

    use super::registry::SessionWatch;
    use super::*;
    use crate::loss::LossReason;
    use std::time::Duration;
    use tokio::time::Instant;

    const T: Duration = Duration::from_secs(10);
    fn policy() -> LeasePolicy {
        LeasePolicy {
            margin: Some(Duration::from_millis(100)),
            ..LeasePolicy::default()
        }
    }

    /// A session watchdog with no ZooKeeper behind it: events come only from the test.
    fn start() -> Arc<SessionWatch> {
        let (watch, rx) = SessionWatch::new(7, T);
        let watch = Arc::new(watch);
        tokio::spawn(Driver::new(Arc::downgrade(&watch), rx, None).run());
        watch
    }

    fn register(watch: &Arc<SessionWatch>, ride_out: bool) -> (u64, Arc<GuardState>) {
        let state = Arc::new(watch.guard_state(policy().budget(T), ride_out, String::new()));
        let id = watch.next_id();
        let node: Arc<str> = format!("/locks/a/n{id}").into();
        watch.send(Event::Register {
            id,
            node,
            state: state.clone(),
            watch: None,
        });
        (id, state)
    }

    /// Lets the driver task run until it has handled what was sent.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_follows_the_anchor_and_the_guards_budget() {
        let watch = start();
        let anchor = Instant::now();
        watch.lease().prove(anchor);
        let (_, guard) = register(&watch, false);
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(9_800));
        watch.lease().prove(anchor + Duration::from_secs(3));
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(12_800));
        // An older proof never moves the deadline back.
        watch.lease().prove(anchor + Duration::from_secs(1));
        assert_eq!(guard.deadline(), anchor + Duration::from_millis(12_800));
    }

    #[tokio::test(start_paused = true)]
    async fn disconnect_cancels_at_once_unless_riding_out() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, strict) = register(&watch, false);
        let (_, patient) = register(&watch, true);
        settle().await;
        watch.send(Event::State(zk::SessionState::Disconnected));
        settle().await;
        assert_eq!(strict.check(), Err(LossReason::Disconnected));
        assert!(strict.token.is_cancelled());
        assert_eq!(patient.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(9_799)).await;
        settle().await;
        assert_eq!(
            patient.check(),
            Ok(()),
            "cancelled before the lease deadline"
        );
        tokio::time::advance(Duration::from_millis(2)).await;
        settle().await;
        assert!(
            patient.token.is_cancelled(),
            "the watchdog did not cancel at the deadline"
        );
        assert_eq!(patient.check(), Err(LossReason::LeaseExpired));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconnect_with_fresh_replies_keeps_a_riding_out_guard() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, patient) = register(&watch, true);
        watch.send(Event::State(zk::SessionState::Disconnected));
        tokio::time::advance(Duration::from_secs(5)).await;
        watch.send(Event::State(zk::SessionState::SyncConnected));
        watch.lease().prove(Instant::now());
        tokio::time::advance(Duration::from_secs(9)).await;
        settle().await;
        assert_eq!(patient.check(), Ok(()));
        // A guard registered while connected again is not cancelled for the old disconnect.
        let (_, later) = register(&watch, false);
        settle().await;
        assert_eq!(later.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn terminal_states_cancel_every_guard_and_every_later_one() {
        for (state, reason) in [
            (zk::SessionState::Expired, LossReason::SessionExpired),
            (zk::SessionState::Closed, LossReason::ClientClosed),
            (zk::SessionState::AuthFailed, LossReason::AuthFailed),
        ] {
            let watch = start();
            watch.lease().prove(Instant::now());
            let guards: Vec<_> = (0..3).map(|i| register(&watch, i == 0).1).collect();
            watch.send(Event::State(state));
            settle().await;
            for guard in &guards {
                assert_eq!(guard.check(), Err(reason), "{state}");
            }
            let (_, late) = register(&watch, true);
            settle().await;
            assert_eq!(late.check(), Err(reason), "registered after {state}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_cancels_only_its_guard() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (gone, victim) = register(&watch, false);
        let (_, bystander) = register(&watch, false);
        watch.send(Event::NodeGone { id: gone });
        settle().await;
        assert_eq!(victim.check(), Err(LossReason::NodeDeleted));
        assert_eq!(bystander.check(), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn another_session_id_cancels_with_session_changed() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (_, guard) = register(&watch, true);
        watch.send(Event::SessionId(7));
        settle().await;
        assert_eq!(guard.check(), Ok(()));
        watch.send(Event::SessionId(8));
        settle().await;
        assert_eq!(guard.check(), Err(LossReason::SessionChanged));
    }

    #[tokio::test(start_paused = true)]
    async fn check_fails_past_the_deadline_before_the_watchdog_runs() {
        // No driver at all: only the clock and the shared lease.
        let (watch, _events) = SessionWatch::new(7, T);
        watch.lease().prove(Instant::now());
        let guard = watch.guard_state(policy().budget(T), false, String::new());
        tokio::time::advance(Duration::from_millis(9_799)).await;
        assert_eq!(guard.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(guard.check(), Err(LossReason::LeaseExpired));
        assert!(
            guard.token.is_cancelled(),
            "check() cancels the token itself"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn release_wins_over_later_losses_and_unregistered_guards_are_ignored() {
        let watch = start();
        watch.lease().prove(Instant::now());
        let (id, guard) = register(&watch, false);
        settle().await;
        assert!(guard.lose(LossReason::Released));
        watch.send(Event::Unregister { id });
        watch.send(Event::NodeGone { id });
        watch.send(Event::State(zk::SessionState::Disconnected));
        settle().await;
        assert_eq!(guard.check(), Err(LossReason::Released));
        assert!(
            !guard.lose(LossReason::NodeDeleted),
            "a second reason replaced the first"
        );
    }
}
