//! The lease watchdog: one task per ZooKeeper session that cancels the guards held on it as
//! soon as their lock may be gone.
//!
//! # What it watches
//!
//! - **Session events**, from `zookeeper-client`'s state channel, which keeps only the latest
//!   state: a change back to the state last seen means a flap that came and went unseen, and
//!   is taken as a Disconnected first (the client publishes only changes).
//! - **Each guard's own node**, with a data watch: deleted by an admin or a parent cleanup
//!   means [`LossReason::NodeDeleted`]. Past the session's watch share
//!   ([`HOLD_WATCH_BYTES`](crate::HOLD_WATCH_BYTES), the `nodes` module says why) a hold's
//!   node is read back once a probe period instead.
//! - **The lease** (the argument is [`lease`]'s): the driver keeps its proofs coming with a
//!   probe, a `multi` holding one `check` of a held node, which also finds a node that is gone.
//!
//! The lease is stored as an atomic next to the guards, so [`LockGuard::check`] compares it
//! with the monotonic clock synchronously: after a process pause (which `CLOCK_MONOTONIC`
//! keeps counting through) the check fails at once, before the watchdog task has even been
//! scheduled.
//!
//! [`LockGuard::check`]: crate::Held::check

pub(crate) mod clock;
mod core;
mod driver;
pub(crate) mod lease;
#[cfg(feature = "model")]
pub(crate) mod model;
mod nodes;
mod probe;
mod proving;
mod registry;
mod session;
mod state;

use std::sync::Arc;

use zookeeper_client as zk;

use crate::metrics::WATCHED_SESSIONS;

pub(crate) use self::core::Event;
use self::driver::Driver;
use self::lease::LeasePolicy;
pub use self::nodes::HOLD_WATCH_BYTES;
pub(crate) use self::nodes::REVOKE;
pub(crate) use self::registry::{session_began, Creating, WatchdogRef};
pub(crate) use self::state::{CheckError, GuardState, HoldTerms, LazyCancel};

/// The session's watchdog, started if it is not running, with one more unit of interest, for
/// a lock on `lock_path` leasing with `policy`.
pub(crate) fn watch_session(
    client: &zk::Client,
    policy: &LeasePolicy,
    lock_path: &str,
) -> WatchdogRef {
    let (interest, events) = registry::join(client, policy, lock_path);
    if let Some(events) = events {
        metrics::gauge!(WATCHED_SESSIONS).increment(1.0);
        let watch = Arc::downgrade(interest.watch());
        let client = interest.watch().root_handle(client);
        tokio::spawn(Driver::new(watch, events, Some(client)).run());
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

    fn terms(ride_out: bool, grace: Duration) -> HoldTerms {
        HoldTerms {
            budget: policy().budget(T),
            ride_out,
            grace,
            label: "".into(),
        }
    }

    fn register(watch: &Arc<SessionWatch>, ride_out: bool) -> (u64, Arc<GuardState>) {
        register_with(watch, terms(ride_out, Duration::ZERO))
    }

    fn register_with(watch: &Arc<SessionWatch>, terms: HoldTerms) -> (u64, Arc<GuardState>) {
        let state = Arc::new(watch.guard_state(terms));
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
        assert_eq!(
            strict.check(),
            Err(CheckError::Lost(LossReason::Disconnected))
        );
        assert!(strict.is_cancelled());
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
            patient.is_cancelled(),
            "the watchdog did not cancel at the deadline"
        );
        assert_eq!(
            patient.check(),
            Err(CheckError::Lost(LossReason::LeaseExpired))
        );
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
                assert_eq!(guard.check(), Err(CheckError::Lost(reason)), "{state}");
            }
            let (_, late) = register(&watch, true);
            settle().await;
            assert_eq!(
                late.check(),
                Err(CheckError::Lost(reason)),
                "registered after {state}"
            );
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
        assert_eq!(
            victim.check(),
            Err(CheckError::Lost(LossReason::NodeDeleted))
        );
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
        assert_eq!(
            guard.check(),
            Err(CheckError::Lost(LossReason::SessionChanged))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn check_fails_past_the_deadline_before_the_watchdog_runs() {
        // No driver at all: only the clock and the shared lease.
        let (watch, _events) = SessionWatch::new(7, T);
        watch.lease().prove(Instant::now());
        let guard = watch.guard_state(terms(false, Duration::ZERO));
        tokio::time::advance(Duration::from_millis(9_799)).await;
        assert_eq!(guard.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            guard.check(),
            Err(CheckError::Lost(LossReason::LeaseExpired))
        );
        assert!(guard.is_cancelled(), "check() cancels the token itself");
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
        assert_eq!(guard.check(), Err(CheckError::Lost(LossReason::Released)));
        assert!(
            !guard.lose(LossReason::NodeDeleted),
            "a second reason replaced the first"
        );
    }

    const GRACE: Duration = Duration::from_secs(5);

    /// A core with one guard registered under `terms`, its lease proven at the start.
    fn core_with(terms: HoldTerms) -> (core::Core, u64, Arc<GuardState>, Instant) {
        let (watch, _events) = SessionWatch::new(7, T);
        let start = clock::now();
        watch.lease().prove(start);
        let state = Arc::new(watch.guard_state(terms));
        let mut core = core::Core::new(7, watch.lease.clone());
        let node: Arc<str> = "/locks/a/n1".into();
        core.apply(
            Event::Register {
                id: 1,
                node,
                state: state.clone(),
                watch: None,
            },
            start,
        );
        (core, 1, state, start)
    }

    #[tokio::test(start_paused = true)]
    async fn a_lapse_under_a_grace_suspends_and_the_grace_running_out_cancels() {
        let (mut core, _, guard, start) = core_with(terms(false, GRACE));
        let deadline = guard.deadline();
        tokio::time::advance(deadline - start).await;
        core.check_lease(clock::now());
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        assert!(*guard.jeopardy().borrow());
        assert!(!guard.is_cancelled(), "the token fired in jeopardy");
        // The grace counts from the lapse: it runs out GRACE after the deadline.
        assert_eq!(core.next_deadline(), Some(deadline + GRACE));
        tokio::time::advance(GRACE - Duration::from_millis(1)).await;
        core.check_lease(clock::now());
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        tokio::time::advance(Duration::from_millis(1)).await;
        core.check_lease(clock::now());
        assert_eq!(
            guard.check(),
            Err(CheckError::Lost(LossReason::LeaseExpired))
        );
        assert!(guard.is_cancelled());
        assert!(!*guard.jeopardy().borrow());
        assert_eq!(
            core.next_deadline(),
            None,
            "a lost guard is still scheduled"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_committed_probe_of_the_node_sent_in_jeopardy_with_a_fresh_lease_resumes() {
        let (mut core, id, guard, start) = core_with(terms(false, GRACE));
        let deadline = guard.deadline();
        tokio::time::advance(deadline - start + Duration::from_secs(1)).await;
        // The guard's own check finds the lapse before the watchdog does.
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        core.check_lease(clock::now());
        // A probe sent before the spell began proves nothing about the spell.
        core.found(id, deadline - Duration::from_millis(1), clock::now());
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        // One sent after, while the lease is still past its deadline, does not resume either.
        let sent = clock::now();
        core.found(id, sent, clock::now());
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        // The lease holds again and a probe sent in the spell found the node: steady.
        core.lease.prove(sent);
        core.found(id, sent, clock::now());
        assert_eq!(guard.check(), Ok(()));
        assert!(!*guard.jeopardy().borrow());
        assert!(!guard.is_cancelled());
        // Its lease deadline is scheduled again, its grace no longer.
        assert_eq!(core.next_deadline(), Some(guard.deadline()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_disconnect_under_a_grace_suspends_a_strict_guard_and_leaves_a_riding_one() {
        let (mut core, id, strict, _) = core_with(terms(false, GRACE));
        let riding = Arc::new(GuardState::new(core.lease.clone(), terms(true, GRACE)));
        core.apply(
            Event::Register {
                id: 2,
                node: "/locks/a/n2".into(),
                state: riding.clone(),
                watch: None,
            },
            clock::now(),
        );
        core.apply(Event::State(zk::SessionState::Disconnected), clock::now());
        assert_eq!(strict.check(), Err(CheckError::Jeopardy));
        assert_eq!(riding.check(), Ok(()));
        core.apply(Event::State(zk::SessionState::SyncConnected), clock::now());
        assert_eq!(
            strict.check(),
            Err(CheckError::Jeopardy),
            "a reconnect alone resumed"
        );
        core.lease.prove(clock::now());
        core.found(id, clock::now(), clock::now());
        assert_eq!(strict.check(), Ok(()));
        // Expiry ends every hold, in jeopardy or not.
        core.apply(Event::State(zk::SessionState::Disconnected), clock::now());
        core.apply(Event::State(zk::SessionState::Expired), clock::now());
        assert_eq!(
            strict.check(),
            Err(CheckError::Lost(LossReason::SessionExpired))
        );
        assert_eq!(
            riding.check(),
            Err(CheckError::Lost(LossReason::SessionExpired))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deleted_node_ends_a_hold_in_jeopardy_at_once() {
        let (mut core, id, guard, start) = core_with(terms(false, GRACE));
        tokio::time::advance(guard.deadline() - start).await;
        core.check_lease(clock::now());
        assert_eq!(guard.check(), Err(CheckError::Jeopardy));
        core.apply(Event::NodeGone { id }, clock::now());
        assert_eq!(
            guard.check(),
            Err(CheckError::Lost(LossReason::NodeDeleted))
        );
        assert_eq!(core.next_deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_suspend_of_the_machine_fails_the_check_at_once_and_the_watchdog_cancels() {
        // Tokio's (monotonic) clock does not move during a suspend: only the correction does.
        let watch = start();
        watch.lease().prove(clock::now());
        let (_, checked) = register(&watch, false);
        let (_, watched) = register(&watch, false);
        settle().await;
        assert_eq!(checked.check(), Ok(()));
        clock::inject_suspend(T);
        assert_eq!(
            checked.check(),
            Err(CheckError::Lost(LossReason::LeaseExpired)),
            "check() passed after a suspend longer than the lease"
        );
        // The watchdog's timer slept on the monotonic clock; it wakes within its longest
        // sleep and finds the lapse on the lease clock, with nobody calling check().
        assert!(!watched.is_cancelled());
        tokio::time::advance(clock::LONGEST_SLEEP).await;
        settle().await;
        assert!(
            watched.is_cancelled(),
            "the watchdog slept through a suspend"
        );
    }
}
