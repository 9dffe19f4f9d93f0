//! The cases of other languages' clients and of a deployment: a token in any text form,
//! clients that carry on after a refusal or a rollback, the install, a frozen holder.

use std::time::{Duration, Instant};

use crate::fence::FenceTicket;

use super::cases::check_log;
use super::outcome::*;
use super::store::*;

/// What a claim from another language must come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Foreign {
    Accepted,
    Refused,
    /// Any error but a refusal: a token that is not one.
    Error,
}

impl Foreign {
    /// In a failure's words.
    pub(super) fn said(self) -> &'static str {
        match self {
            Foreign::Accepted => "accepted",
            Foreign::Refused => "refused",
            Foreign::Error => "an error (not a claim)",
        }
    }
}

/// The claim from another language ([`FenceStore::foreign_claim`]) with the token in every text
/// form a client may send, on one scope: plain and zero-padded (the Rust fences of earlier
/// versions padded to 19 digits), with a `+`; 9 after 10 and 9999999999 after 10000000000 (a
/// string compare of unpadded tokens gets both wrong, of a padded and an unpadded one too); an
/// equal token in another form accepted. A refusal must be the store's refusal error (a client
/// that reads an ordinary reply believes it claimed), and a text that is no token (negative,
/// a float, past `i64::MAX`, empty, letters) an error, never a claim. Stores without such a
/// path pass at once.
///
/// # Errors
///
/// [`Failure::Violation`] naming the step.
pub async fn tokens_in_any_text_form<S: FenceStore>(store: &S) -> Outcome {
    use Foreign::*;
    let scope = "/kit/forms";
    let steps = [
        ("10", Accepted),
        ("9", Refused),
        ("0000000000000000009", Refused),
        ("+9", Refused),
        ("0000000000000000010", Accepted),
        ("+10", Accepted),
        ("11", Accepted),
        ("9999999999", Accepted),
        ("10000000000", Accepted),
        ("9999999999", Refused),
        ("0009999999999", Refused),
        ("0000000010000000000", Accepted),
        ("-1", Error),
        ("4.2e1", Error),
        ("9223372036854775808", Error),
        ("", Error),
        ("ten", Error),
    ];
    for (text, expected) in steps {
        let Some(claim) = store.foreign_claim(scope, text) else {
            return Ok(());
        };
        let got = match claim.await {
            Ok(true) => Accepted,
            Ok(false) => Refused,
            Err(_) => Error,
        };
        if got != expected {
            return Err(violation(format!(
                "the claim of '{text}' from another client was {}, where it must be {}",
                got.said(),
                expected.said()
            )));
        }
    }
    match store.seen(scope).await.map_err(broken)? {
        Some(10_000_000_000) => Ok(()),
        other => Err(violation(format!(
            "after the claims in every text form {}, expected 10000000000",
            holds(other)
        ))),
    }
}

/// Clients of another language that carry on after their refused claim
/// ([`FenceStore::carry_on`]), after a newer holder claimed: ignoring every error, and inside
/// savepoints they roll back to (the refused claim's savepoint rolled back, the write in a
/// savepoint of its own), each with the token plain and zero-padded: no increment may land, and
/// the newer holder still writes. A way a store has no path for passes at once.
///
/// # Errors
///
/// [`Failure::Violation`] when a stale increment landed.
pub async fn carrying_on_after_a_refusal_commits_nothing<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/carry-on", "carry-on");
    let (old, new) = (epoch_token(1), ticket(scope, epoch_token(2)));
    expect_accepted("the newer holder's claim", store.claim(&new).await)?;
    let before = store.value(key).await.map_err(broken)?;
    for how in [CarryOn::Ignoring, CarryOn::InSavepoints] {
        for text in [old.to_string(), format!("{old:019}")] {
            let Some(attempt) = store.carry_on(scope, &text, key, how) else {
                continue;
            };
            if attempt.await.map_err(broken)? {
                return Err(violation(format!(
                    "a client that carried on after the refusal of '{text}' ({}) committed its increment",
                    carried(how)
                )));
            }
        }
    }
    let after = store.value(key).await.map_err(broken)?;
    if after != before {
        return Err(violation(format!(
            "the counter moved from {before} to {after} under refused claims"
        )));
    }
    expect_accepted(
        "the newer holder's write after them",
        store.increment(&new, key, Hooks::default()).await,
    )?;
    check_log(store, key).await
}

/// How a client went on, in a failure's words.
pub(super) fn carried(how: CarryOn) -> &'static str {
    match how {
        CarryOn::Ignoring => "ignoring the error and committing",
        CarryOn::InSavepoints => "rolling back to its savepoint and committing",
        CarryOn::AfterRollbackUnderWork => "after its transaction was rolled back under its work",
    }
}

/// A client of another language whose fenced transaction is rolled back under its work after
/// its claim was accepted (a deadlock's victim, [`CarryOn::AfterRollbackUnderWork`]) and that
/// goes on with its write, the recipe's last steps and `COMMIT`: the statements after the
/// rollback would run in a new transaction that holds no claim, so nothing of them may commit
/// (MySQL's seal). Stores without such a path pass at once.
///
/// # Errors
///
/// [`Failure::Violation`] when the write after the rollback landed.
pub async fn carrying_on_after_a_rollback_under_work_commits_nothing<S: FenceStore>(
    store: &S,
) -> Outcome {
    let (scope, key) = ("/kit/rolled-back", "rolled-back");
    let token = epoch_token(7).to_string();
    let how = CarryOn::AfterRollbackUnderWork;
    let Some(attempt) = store.carry_on(scope, &token, key, how) else {
        return Ok(());
    };
    if attempt.await.map_err(broken)? {
        return Err(violation(format!(
            "a client that went on {} committed its write with no claim held",
            carried(how)
        )));
    }
    if store.value(key).await.map_err(broken)? != 0 {
        return Err(violation(
            "the counter moved though nothing may have committed",
        ));
    }
    Ok(())
}

/// The fence the store has installed is there and is the code this version installs
/// ([`FenceStore::installed`]): a missing, an older or a hand-edited install fails, with the
/// command that mends it.
///
/// # Errors
///
/// [`Failure::Violation`] saying what differs.
pub async fn installed_fence_is_current<S: FenceStore>(store: &S) -> Outcome {
    match store.installed() {
        None => Ok(()),
        Some(check) => check.await.map_err(violation),
    }
}

/// The deployment keeps every fence it acknowledged ([`FenceStore::durable`]): a fence lost to
/// a restart without an append-only file, to an eviction policy or to a replica's failover lets
/// a stale holder's token through.
///
/// # Errors
///
/// [`Failure::Violation`] saying what to change.
pub async fn deployment_keeps_fences<S: FenceStore>(store: &S) -> Outcome {
    match store.durable() {
        None => Ok(()),
        Some(check) => check.await.map_err(violation),
    }
}

/// A holder frozen inside its open fenced transaction, right after its scope's first claim
/// ([`FenceStore::frozen_claim`]), must block nobody for long: a first claim of another new
/// scope goes through at once (no gap lock between unrelated scopes), and the successor's claim
/// and write go through within the bound the installed fence sets
/// ([`FenceStore::frozen_bound`]) and a few seconds; the frozen holder's transaction then
/// commits nothing. Stores whose claim holds nothing open pass at once.
///
/// # Errors
///
/// [`Failure::Violation`] naming what waited, and how long.
pub async fn frozen_holder_does_not_block<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/frozen", "frozen");
    let (old, new) = (ticket(scope, epoch_token(1)), ticket(scope, epoch_token(2)));
    let Some(frozen) = store.frozen_claim(&old) else {
        return Ok(());
    };
    let bound = store.frozen_bound().await.map_err(broken)?;
    let frozen = frozen.await.map_err(broken)?;
    unrelated_first_claim_passes(store).await?;
    let waited = successor_passes_within(store, &new, key, bound).await?;
    drop(frozen);
    match store.seen(scope).await.map_err(broken)? {
        Some(seen) if seen == new.token().as_i64() => {}
        other => {
            return Err(violation(format!(
                "after the successor's write (waited {} ms) {}, expected {}",
                waited.as_millis(),
                holds(other),
                new.token().as_i64()
            )))
        }
    }
    check_log(store, key).await
}

/// With a holder frozen in its scope's first claim, a first claim of another new scope goes
/// through within 5 s (no gap lock between unrelated scopes).
pub(super) async fn unrelated_first_claim_passes<S: FenceStore>(store: &S) -> Outcome {
    let other = ticket("/kit/frozen-other", epoch_token(1));
    let quick = Duration::from_secs(5);
    match tokio::time::timeout(quick, store.claim(&other)).await {
        Err(_) => Err(violation(format!(
            "a first claim of an unrelated scope waited over {} s behind a frozen holder's \
             first claim of its own scope (a gap lock)",
            quick.as_secs()
        ))),
        Ok(claimed) => expect_accepted("the unrelated scope's first claim", claimed),
    }
}

/// With a holder frozen in its open transaction, the successor's (`new`'s) claim and write of
/// `key` go through within the installed `bound` and 10 s. How long they waited.
pub(super) async fn successor_passes_within<S: FenceStore>(
    store: &S,
    new: &FenceTicket,
    key: &str,
    bound: Option<Duration>,
) -> Result<Duration, Failure> {
    let started = Instant::now();
    let limit = bound.unwrap_or_default() + Duration::from_secs(10);
    let installed = match bound {
        Some(bound) => format!("the installed bound is {} ms", bound.as_millis()),
        None => "the installed fence sets no bound: install it again".to_owned(),
    };
    match tokio::time::timeout(limit, store.increment(new, key, Hooks::default())).await {
        Err(_) => {
            return Err(violation(format!(
                "the successor's claim and write waited over {} s behind a holder frozen in its \
                 open transaction ({installed})",
                limit.as_secs(),
            )))
        }
        Ok(written) => expect_accepted("the successor's write", written)?,
    };
    Ok(started.elapsed())
}
