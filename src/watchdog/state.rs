//! What one guard shares with the watchdog: its cancellation and loss reason, its lease, and
//! its jeopardy (the lease lapsed with no evidence of loss, and a grace period is set: the hold
//! is suspended, not lost).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::clock;
use super::lease::LeaseCell;
use crate::error::Error;
use crate::loss::LossReason;

/// How a guard holds: what its owner chose, per guard.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct HoldTerms {
    /// How long after the lease's anchor the hold stands.
    pub(crate) budget: Duration,
    /// Whether a disconnect leaves the hold standing until the lease lapses.
    pub(crate) ride_out: bool,
    /// How long the hold may stay in jeopardy before it is lost; zero: a lapse is a loss.
    pub(crate) grace: Duration,
    /// The `lock` label of its metrics.
    pub(crate) label: Arc<str>,
}

/// Why `check()` refused.
// Public in a private module: named by the section runner's `Fenceable`, never by users.
#[allow(unreachable_pub)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckError {
    /// Suspended: the lease lapsed (or the connection dropped) with no evidence of loss; the
    /// hold resumes when a committed probe finds its node, or is lost when the grace runs out.
    Jeopardy,
    /// Over, for this reason (`Released` once its owner let go).
    Lost(LossReason),
}

/// What `check()` reports for a failed check, for every kind of hold alike.
impl From<CheckError> for Error {
    fn from(failure: CheckError) -> Error {
        match failure {
            CheckError::Jeopardy => Error::Jeopardy,
            CheckError::Lost(reason) => Error::LockLost(reason),
        }
    }
}

/// A jeopardy spell: since when (on the lease clock) and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct JeopardySpell {
    pub(crate) since: Instant,
    /// The loss it becomes if the grace runs out: `LeaseExpired` or `Disconnected`.
    pub(crate) cause: LossReason,
}

/// A cancellation whose token is made only when someone asks for one: most holds are never
/// asked, and a token is an allocation (about 130 bytes with its parent's record of it).
#[derive(Debug, Default)]
pub(crate) struct LazyCancel {
    /// Set once cancelled (read without the lock).
    cancelled: AtomicBool,
    /// Made and cancelled under this lock, which `cancelled` is set under too, so a token made
    /// after the cancel is made cancelled.
    token: Mutex<Option<CancellationToken>>,
}

impl LazyCancel {
    /// Whether it was cancelled.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Cancels it, and the token if one was made.
    pub(crate) fn cancel(&self) {
        let token = self.token.lock().unwrap_or_else(|e| e.into_inner());
        self.cancelled.store(true, Ordering::Release);
        if let Some(token) = token.as_ref() {
            token.cancel();
        }
    }

    /// Its token, `make` made on the first call (and cancelled if this is already): cancelled
    /// with it, and by whatever cancels what `make` derives it from.
    pub(crate) fn token(&self, make: impl FnOnce() -> CancellationToken) -> CancellationToken {
        let mut token = self.token.lock().unwrap_or_else(|e| e.into_inner());
        (token.get_or_insert_with(|| {
            let made = make();
            if self.cancelled.load(Ordering::Acquire) {
                made.cancel();
            }
            made
        }))
        .clone()
    }
}

/// What one guard shares with the watchdog.
#[derive(Debug)]
pub(crate) struct GuardState {
    /// Cancelled when the hold ends, lost or released.
    cancel: LazyCancel,
    reason: OnceLock<LossReason>,
    lease: Arc<LeaseCell>,
    pub(crate) terms: HoldTerms,
    /// The spell, while one is on.
    spell: Mutex<Option<JeopardySpell>>,
    /// `spell.is_some()`, readable without the lock (`check()` runs before every poll of a
    /// section).
    in_jeopardy: AtomicBool,
    /// Whether someone asked the holder to let go (a revocation request in the node's data).
    revoked: AtomicBool,
    /// Who waits for a jeopardy or a revocation, made by the first of them.
    signals: OnceLock<Box<Signals>>,
}

/// What a hold's waiters wait on (`Held::jeopardy()`, `Held::steady()`, `Held::revoked()`),
/// made by the first of them: a watch channel is about 400 bytes and a `Notify` 32 inline, and
/// most holds never have a waiter. Made, and told, only under the guard's `spell` lock: a
/// waiter that makes it (or subscribes) under the lock and then reads the state misses no
/// change made after the read.
#[derive(Debug)]
struct Signals {
    /// Reads `true` while the hold is in jeopardy.
    jeopardy: watch::Sender<bool>,
    /// Notified once, when a revocation is requested.
    revocation: Notify,
}

impl GuardState {
    pub(super) fn new(lease: Arc<LeaseCell>, terms: HoldTerms) -> Self {
        GuardState {
            cancel: LazyCancel::default(),
            reason: OnceLock::new(),
            lease,
            terms,
            spell: Mutex::new(None),
            in_jeopardy: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            signals: OnceLock::new(),
        }
    }

    /// The hold's cancellation token, made on the first call: cancelled when it ends.
    pub(crate) fn token(&self) -> CancellationToken {
        self.cancel.token(CancellationToken::new)
    }

    /// Whether the hold has ended, lost or released.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// The current lease deadline, on the lease clock.
    pub(crate) fn deadline(&self) -> Instant {
        self.lease.deadline(self.terms.budget)
    }

    /// The reason, once lost or released (a token cancelled by its owner counts as released).
    pub(crate) fn reason(&self) -> Option<LossReason> {
        self.reason
            .get()
            .copied()
            .or_else(|| self.cancel.is_cancelled().then_some(LossReason::Released))
    }

    /// Records `reason` and cancels, once; returns whether this call did it. A spell in
    /// progress ends with it.
    pub(crate) fn lose(&self, reason: LossReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.cancel.cancel();
        let mut spell = self.spell();
        if spell.take().is_some() {
            self.in_jeopardy.store(false, Ordering::Release);
            self.tell_jeopardy(&spell);
        }
        first
    }

    /// The synchronous check: lost, released, in jeopardy, or past the lease deadline by the
    /// lease clock (which puts the hold in jeopardy if it has a grace, and loses it otherwise).
    pub(crate) fn check(&self) -> Result<(), CheckError> {
        self.check_at(clock::now())
    }

    /// [`Self::check`] at `now` on the lease clock.
    pub(crate) fn check_at(&self, now: Instant) -> Result<(), CheckError> {
        if let Some(reason) = self.reason() {
            return Err(CheckError::Lost(reason));
        }
        if self.in_jeopardy.load(Ordering::Acquire) {
            return Err(CheckError::Jeopardy);
        }
        let deadline = self.deadline();
        if now < deadline {
            return Ok(());
        }
        if self.terms.grace.is_zero() {
            self.lose(LossReason::LeaseExpired);
            return Err(CheckError::Lost(
                self.reason().unwrap_or(LossReason::LeaseExpired),
            ));
        }
        self.enter_jeopardy(JeopardySpell {
            since: deadline,
            cause: LossReason::LeaseExpired,
        });
        match self.reason() {
            Some(reason) => Err(CheckError::Lost(reason)),
            None => Err(CheckError::Jeopardy),
        }
    }

    /// Starts `spell`, unless the hold is lost or in jeopardy already; returns whether this
    /// call started it.
    pub(crate) fn enter_jeopardy(&self, spell: JeopardySpell) -> bool {
        let mut current = self.spell();
        if current.is_some() || self.reason().is_some() {
            return false;
        }
        *current = Some(spell);
        self.in_jeopardy.store(true, Ordering::Release);
        self.tell_jeopardy(&current);
        true
    }

    /// Ends the spell, if one is on, began no later than `proof_sent` (the send time of a
    /// committed probe that found this guard's node) and the lease holds again at `now`.
    /// Returns the spell it ended.
    pub(crate) fn resume(&self, proof_sent: Instant, now: Instant) -> Option<JeopardySpell> {
        let mut current = self.spell();
        let spell = (*current)?;
        if spell.since > proof_sent || now >= self.deadline() || self.reason().is_some() {
            return None;
        }
        *current = None;
        self.in_jeopardy.store(false, Ordering::Release);
        self.tell_jeopardy(&current);
        Some(spell)
    }

    /// The spell in progress, if any.
    pub(crate) fn current_spell(&self) -> Option<JeopardySpell> {
        *self.spell()
    }

    /// Someone asked the holder to let go: Apache Curator's revocation marker was found in the
    /// node's data.
    pub(crate) fn revocation_requested(&self) {
        if !self.revoked.swap(true, Ordering::AcqRel) {
            let _spell = self.spell();
            if let Some(signals) = self.signals.get() {
                signals.revocation.notify_waiters();
            }
        }
    }

    /// Whether a revocation was requested.
    pub(crate) fn is_revocation_requested(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Resolves once a revocation was requested.
    pub(crate) async fn revocation(&self) {
        loop {
            // Made under the lock that the request notifies under: a request after it is made
            // wakes it (a `Notified` hears `notify_waiters` from its making on), and one before
            // shows in the flag read below.
            let notified = {
                let spell = self.spell();
                self.signals(&spell).revocation.notified()
            };
            if self.is_revocation_requested() {
                return;
            }
            notified.await;
        }
    }

    /// A receiver that reads `true` while the hold is in jeopardy.
    pub(crate) fn jeopardy(&self) -> watch::Receiver<bool> {
        let spell = self.spell();
        // Marked changed: its first `changed()` resolves at once with the state as it is, so a
        // loop over `changed()` also acts on a jeopardy that began before it subscribed.
        let mut receiver = self.signals(&spell).jeopardy.subscribe();
        receiver.mark_changed();
        receiver
    }

    /// The hold's signals, made on the first call with the jeopardy that `spell` (the locked
    /// spell) says.
    fn signals(&self, spell: &Option<JeopardySpell>) -> &Signals {
        self.signals.get_or_init(|| {
            Box::new(Signals {
                jeopardy: watch::Sender::new(spell.is_some()),
                revocation: Notify::new(),
            })
        })
    }

    /// Tells the jeopardy's receivers, if there are any, what `spell` (the locked spell,
    /// just changed) now says.
    fn tell_jeopardy(&self, spell: &Option<JeopardySpell>) {
        if let Some(signals) = self.signals.get() {
            signals.jeopardy.send_replace(spell.is_some());
        }
    }

    fn spell(&self) -> std::sync::MutexGuard<'_, Option<JeopardySpell>> {
        self.spell.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A guard's state as a value, for the lease model (`crate::watchdog::model`).
#[cfg(feature = "model")]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct StateSnapshot {
    pub(crate) terms: HoldTerms,
    pub(crate) reason: Option<LossReason>,
    pub(crate) cancelled: bool,
    pub(crate) spell: Option<JeopardySpell>,
}

#[cfg(feature = "model")]
impl GuardState {
    /// This guard's state as a value.
    pub(crate) fn snapshot(&self) -> StateSnapshot {
        StateSnapshot {
            terms: self.terms.clone(),
            reason: self.reason.get().copied(),
            cancelled: self.cancel.is_cancelled(),
            spell: self.current_spell(),
        }
    }

    /// A guard in the state `snapshot` describes, on `lease`.
    pub(crate) fn restore(snapshot: &StateSnapshot, lease: Arc<LeaseCell>) -> GuardState {
        let state = GuardState::new(lease, snapshot.terms.clone());
        if let Some(spell) = snapshot.spell {
            state.enter_jeopardy(spell);
        }
        if let Some(reason) = snapshot.reason {
            state.lose(reason);
        } else if snapshot.cancelled {
            state.cancel.cancel();
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lazy_cancel_makes_its_token_once_and_cancels_it_whenever_it_was_made() {
        let before = LazyCancel::default();
        let token = before.token(CancellationToken::new);
        let again = before.token(|| panic!("made twice"));
        assert!(!before.is_cancelled() && !token.is_cancelled());
        before.cancel();
        assert!(before.is_cancelled() && token.is_cancelled() && again.is_cancelled());

        let after = LazyCancel::default();
        after.cancel();
        assert!(after.is_cancelled());
        assert!(after.token(CancellationToken::new).is_cancelled());

        // A child made of a parent's lazy token is cancelled with the parent.
        let (parent, child) = (LazyCancel::default(), LazyCancel::default());
        let token = child.token(|| parent.token(CancellationToken::new).child_token());
        parent.cancel();
        assert!(token.is_cancelled() && !child.is_cancelled());
    }

    fn state() -> GuardState {
        let terms = HoldTerms {
            budget: Duration::from_secs(9),
            ride_out: false,
            grace: Duration::from_secs(30),
            label: "".into(),
        };
        GuardState::new(Arc::new(LeaseCell::new(Duration::from_secs(10))), terms)
    }

    #[tokio::test]
    async fn signals_are_made_by_the_first_waiter_and_miss_nothing_before_or_after() {
        use futures_util::FutureExt as _;
        // Nobody waited: a revocation and a jeopardy make nothing.
        let quiet = state();
        quiet.revocation_requested();
        quiet.enter_jeopardy(JeopardySpell {
            since: clock::now(),
            cause: LossReason::Disconnected,
        });
        assert!(quiet.signals.get().is_none());
        // A request before the wait: it resolves at once.
        assert!(quiet.revocation().now_or_never().is_some());
        // A jeopardy that began before the subscription reads true, and its end is told.
        let mut receiver = quiet.jeopardy();
        assert!(*receiver.borrow_and_update());
        assert!(quiet.lose(LossReason::Disconnected));
        assert!(receiver.has_changed().unwrap() && !*receiver.borrow_and_update());

        // A request while one waits wakes it.
        let waited = Arc::new(state());
        let waiting = tokio::spawn({
            let waited = waited.clone();
            async move { waited.revocation().await }
        });
        while waited.signals.get().is_none() {
            tokio::task::yield_now().await;
        }
        waited.revocation_requested();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter to wake")
            .unwrap();
    }

    #[test]
    fn a_halt_is_the_error_check_reports() {
        assert_eq!(Error::from(CheckError::Jeopardy), Error::Jeopardy);
        assert_eq!(
            Error::from(CheckError::Lost(LossReason::NodeDeleted)),
            Error::LockLost(LossReason::NodeDeleted)
        );
    }
}
