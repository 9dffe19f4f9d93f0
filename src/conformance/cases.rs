//! The cases on the store's own side: its preconditions, order, edge tokens, concurrent first
//! claims, a stale writer, lost replies, a lost hold, a serialization failure.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::fence::{FenceError, FenceTicket};
use crate::{Acquire, FencedLock, LockOptions};

use super::outcome::*;
use super::store::*;

/// The store enforces what its fence stands on ([`FenceStore::preconditions`]): an object
/// store that ignores `If-None-Match`/`If-Match` (an emulator, an older server, a gateway that
/// strips headers) accepts every write, a stale holder's too. Stores whose fence runs in the
/// store pass at once.
///
/// # Errors
///
/// [`Failure::Violation`] saying what the store ignored.
pub async fn preconditions_enforced<S: FenceStore>(store: &S) -> Outcome {
    match store.preconditions() {
        None => Ok(()),
        Some(check) => check.await.map_err(violation),
    }
}

/// Claims then increments: t1 and t2 (t1 < t2) accepted in turn, t1 refused after t2, t2
/// accepted again (a holder writes more than once: `>=`, not `>`); the scope's first claim
/// creates its fence (an `UPDATE … WHERE fence <= $t` finds no row there and looks refused).
///
/// # Errors
///
/// [`Failure::Violation`] naming the step that went wrong.
pub async fn order<S: FenceStore>(store: &S) -> Outcome {
    let scope = "/kit/order";
    let (t1, t2) = (
        ticket(scope, epoch_token(41)),
        ticket(scope, epoch_token(42)),
    );
    expect_accepted("the scope's first claim (t1)", store.claim(&t1).await)?;
    expect_accepted(
        "t1's write after its claim",
        store.increment(&t1, "order", Hooks::default()).await,
    )?;
    expect_accepted("t2's claim after t1", store.claim(&t2).await)?;
    let seen = t2.token().as_i64();
    expect_refused("t1's claim after t2's", store.claim(&t1).await, seen)?;
    expect_refused(
        "t1's write after t2's claim",
        store.increment(&t1, "order", Hooks::default()).await,
        seen,
    )?;
    expect_accepted("t2's claim again", store.claim(&t2).await)?;
    expect_accepted(
        "t2's write",
        store.increment(&t2, "order", Hooks::default()).await,
    )?;
    expect_accepted(
        "t2's second write",
        store.increment(&t2, "order", Hooks::default()).await,
    )?;
    let log = store.log("order").await.map_err(broken)?;
    let expected = vec![t1.token().as_i64(), seen, seen];
    if log != expected {
        return Err(violation(format!(
            "the commit log is {}, expected {}",
            tokens(&log),
            tokens(&expected)
        )));
    }
    match store.seen(scope).await.map_err(broken)? {
        Some(s) if s == seen => Ok(()),
        other => Err(violation(format!("{}, expected {seen}", holds(other)))),
    }
}

/// The tokens where comparisons break, each claimed in turn on one scope (each accepted, the
/// one before refused after it, itself accepted again): 0; 9 and 10, 99 and 100 (a string
/// compare puts `"10"` below `"9"`); 0xFFFF_FFFF and 0x1_0000_0000 (the zxid epoch boundary);
/// 2⁵³ and 2⁵³+1 (equal as doubles, as Lua and JavaScript numbers are); `i64::MAX`.
///
/// # Errors
///
/// [`Failure::Violation`] naming the pair that went wrong.
pub async fn edge_tokens<S: FenceStore>(store: &S) -> Outcome {
    let scope = "/kit/edges";
    let tokens = [
        0,
        1,
        9,
        10,
        99,
        100,
        0xFFFF_FFFF,
        0x1_0000_0000,
        1 << 53,
        (1 << 53) + 1,
        i64::MAX - 1,
        i64::MAX,
    ];
    let first = ticket(scope, tokens[0]);
    expect_accepted("the first claim, token 0", store.claim(&first).await)?;
    for pair in tokens.windows(2) {
        let (older, newer) = (ticket(scope, pair[0]), ticket(scope, pair[1]));
        expect_accepted(
            &format!("{} after {}", pair[1], pair[0]),
            store.claim(&newer).await,
        )?;
        expect_refused(
            &format!("{} after {}", pair[0], pair[1]),
            store.claim(&older).await,
            pair[1],
        )?;
        expect_accepted(&format!("{} again", pair[1]), store.claim(&newer).await)?;
    }
    match store.seen(scope).await.map_err(broken)? {
        Some(i64::MAX) => Ok(()),
        other => Err(violation(format!(
            "{}, expected {} (i64::MAX)",
            holds(other),
            i64::MAX
        ))),
    }
}

/// Two first claims of a scope at once, twenty times (each on a scope of its own): the higher
/// token is always accepted and the fence ends at it; the lower one is accepted or refused,
/// never lost or misreported.
///
/// # Errors
///
/// [`Failure::Violation`] naming the round.
pub async fn concurrent_first_claims<S: FenceStore>(store: &S) -> Outcome {
    for round in 0..20 {
        let scope = format!("/kit/first/{round}");
        let (low, high) = (
            ticket(&scope, epoch_token(7)),
            ticket(&scope, epoch_token(8)),
        );
        // Alternate who is sent first.
        let (a, b) = if round % 2 == 0 {
            (&low, &high)
        } else {
            (&high, &low)
        };
        let (ra, rb) = tokio::join!(store.claim(a), store.claim(b));
        let (r_low, r_high) = if round % 2 == 0 { (ra, rb) } else { (rb, ra) };
        expect_accepted(&format!("round {round}: the higher first claim"), r_high)?;
        match r_low {
            Ok(()) | Err(FenceError::Refused { .. }) => {}
            Err(FenceError::Store(err)) => {
                return Err(store_error(&format!("round {round}"), &err))
            }
            Err(err) => {
                return Err(violation(format!(
                    "round {round}: the lower first claim: {err}"
                )))
            }
        }
        let seen = store.seen(&scope).await.map_err(broken)?;
        if seen != Some(high.token().as_i64()) {
            return Err(violation(format!(
                "round {round}: after two first claims {}, not the higher {}",
                holds(seen),
                high.token().as_i64()
            )));
        }
    }
    Ok(())
}

/// A stale writer (token t1) is held between its read and its commit while the new holder
/// (t2) claims and increments; then the stale writer goes on. Whatever the store does with the
/// two (a lock that makes the new holder wait; a refusal of the stale one), the commit log
/// must never show a token going down, and the counter must equal the accepted increments.
///
/// # Errors
///
/// [`Failure::Violation`] when the stale write lands after the newer one.
pub async fn stale_writer_paused_before_commit<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/stale", "stale");
    let (old, new) = (
        ticket(scope, epoch_token(100)),
        ticket(scope, epoch_token(200)),
    );
    expect_accepted("the old holder's claim", store.claim(&old).await)?;
    let (paused_tx, paused_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let between: BoxFuture<'static, ()> = Box::pin(async move {
        let _ = paused_tx.send(());
        let _ = go_rx.await;
    });
    let hooks = Hooks {
        between: Some(between),
        before_commit: None,
    };
    let stale = store.increment(&old, key, hooks);
    let newer = new_holder_while_stale_waits(store, &new, key, paused_rx, go_tx);
    let (stale, newer) = tokio::join!(stale, newer);
    newer?;
    match stale {
        Ok(_) | Err(FenceError::Refused { .. }) => {}
        Err(FenceError::Store(err)) => return Err(store_error("the stale writer", &err)),
        Err(err) => return Err(violation(format!("the stale writer: {err}"))),
    }
    check_log(store, key).await
}

/// The new holder's side of [`stale_writer_paused_before_commit`]: once the stale writer has
/// read and waits (`paused`), claims and increments with `new`, and lets the stale writer go
/// on (`go`) once that is done or waits for the stale writer's lock. The new holder's write.
pub(super) async fn new_holder_while_stale_waits<S: FenceStore>(
    store: &S,
    new: &FenceTicket,
    key: &str,
    paused: tokio::sync::oneshot::Receiver<()>,
    go: tokio::sync::oneshot::Sender<()>,
) -> Result<i64, Failure> {
    // The stale writer has read, and waits: now the new holder claims and writes.
    paused
        .await
        .map_err(|_| broken("the stale increment ended before its pause"))?;
    let claim = store.claim(new);
    let write = async {
        expect_accepted("the new holder's claim", claim.await)?;
        expect_accepted(
            "the new holder's write",
            store.increment(new, key, Hooks::default()).await,
        )
    };
    tokio::pin!(write);
    // Until the new holder is done, or waits for the stale writer's lock: then let the
    // stale writer go on.
    let done = done_or_waiting(store, write.as_mut()).await?;
    let _ = go.send(());
    match done {
        Some(done) => done,
        None => write.await,
    }
}

/// Drives `write` until it is done (`Some`, its outcome) or the store says a fenced write
/// waits for another's lock (`None`: `write` is still to finish), looking every 20 ms; a
/// failure after 30 s of neither.
pub(super) async fn done_or_waiting<S: FenceStore, T>(
    store: &S,
    mut write: Pin<&mut impl Future<Output = Result<T, Failure>>>,
) -> Result<Option<Result<T, Failure>>, Failure> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        tokio::select! {
            done = &mut write => return Ok(Some(done)),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if store.waiting().await.map_err(broken)? {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Err(broken(
                "the new holder neither finished nor waited within 30 s",
            ));
        }
    }
}

/// The commit log of `key` never goes down, and the counter equals its length.
pub(super) async fn check_log<S: FenceStore>(store: &S, key: &str) -> Outcome {
    let log = store.log(key).await.map_err(broken)?;
    if let Some(pair) = log.windows(2).find(|pair| pair[1] < pair[0]) {
        return Err(violation(format!(
            "the commit log goes down: {} committed after {} (log: {})",
            pair[1],
            pair[0],
            tokens(&log)
        )));
    }
    let value = store.value(key).await.map_err(broken)?;
    if value != log.len() as i64 {
        return Err(violation(format!(
            "the counter is {value} but {} increments were accepted (lost updates)",
            log.len()
        )));
    }
    Ok(())
}

/// Five holders in turn, each claiming and incrementing while the one before it goes on
/// writing late (its increments must be refused once the newer one has claimed), all at once:
/// the counter equals the accepted increments and the commit log never goes down.
///
/// # Errors
///
/// [`Failure::Violation`] for a lost update or a token going down.
pub async fn counter_equals_accepted_increments<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/counter", "counter");
    let holders: Vec<FenceTicket> = (1..=5)
        .map(|n| ticket(scope, epoch_token(n * 10)))
        .collect();
    let mut accepted = 0u64;
    for pair in holders.windows(2) {
        let (old, new) = (&pair[0], &pair[1]);
        expect_accepted("a holder's claim", store.claim(old).await)?;
        // The old holder writes three times while the new one claims and writes three times.
        let late = async {
            let mut n = 0;
            for _ in 0..3 {
                match store.increment(old, key, Hooks::default()).await {
                    Ok(_) => n += 1,
                    Err(FenceError::Refused { .. }) => {}
                    Err(err) => return Err(broken(format!("a late write: {}", error_chain(&err)))),
                }
            }
            Ok(n)
        };
        let current = async {
            expect_accepted("the newer holder's claim", store.claim(new).await)?;
            for _ in 0..3 {
                expect_accepted(
                    "the newer holder's write",
                    store.increment(new, key, Hooks::default()).await,
                )?;
            }
            Ok::<u64, Failure>(3)
        };
        let (late, current) = tokio::join!(late, current);
        accepted += late? + current?;
    }
    check_log(store, key).await?;
    let log = store.log(key).await.map_err(broken)?;
    if log.len() as u64 != accepted {
        return Err(violation(format!(
            "{accepted} increments were reported accepted, the commit log holds {}",
            log.len()
        )));
    }
    Ok(())
}

/// The commit is sent and its reply lost (the server's replies dropped right before it, then
/// the connection closed once the write shows up in the store): the fence must say `InDoubt`
/// (the write may have applied), never that it committed or was refused; the write is in the
/// store exactly once.
///
/// # Errors
///
/// [`Failure::Violation`] for any other report.
pub async fn lost_reply_is_in_doubt<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/doubt", "doubt");
    let t = ticket(scope, epoch_token(5));
    expect_accepted("the claim", store.claim(&t).await)?;
    let switch = store.reply_switch();
    let (muted_tx, muted_rx) = tokio::sync::oneshot::channel::<()>();
    let hooks = Hooks {
        between: None,
        // Synchronously, right before the commit goes out: its reply will be dropped.
        before_commit: Some(Box::new(move || {
            switch(true);
            let _ = muted_tx.send(());
        })),
    };
    let write = store.increment(&t, key, hooks);
    let watch = close_once_committed(store, key, muted_rx);
    let (outcome, applied) = tokio::join!(write, watch);
    let applied = applied?;
    expect_write_in_doubt(outcome)?;
    if !applied {
        return Err(broken("the commit never showed in the store within 30 s"));
    }
    check_log(store, key).await
}

/// The watch of [`lost_reply_is_in_doubt`]: once the commit is on its way with its reply
/// dropped (`muted`), waits for it to show in `key`'s commit log, then closes the fence's
/// connections. Whether it showed within 30 s.
pub(super) async fn close_once_committed<S: FenceStore>(
    store: &S,
    key: &str,
    muted: tokio::sync::oneshot::Receiver<()>,
) -> Result<bool, Failure> {
    let deadline = Instant::now() + Duration::from_secs(30);
    muted
        .await
        .map_err(|_| broken("the increment ended before its commit"))?;
    // The commit is on its way with its reply dropped: once it shows in the store, close
    // the connection, so that the client learns the reply is not coming.
    let switch = store.reply_switch();
    loop {
        if store.log(key).await.map_err(broken)?.len() == 1 {
            switch(false);
            return Ok(true);
        }
        if Instant::now() > deadline {
            switch(false);
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that a write whose reply was lost was reported `InDoubt`.
pub(super) fn expect_write_in_doubt<E: std::error::Error + 'static>(
    outcome: Result<i64, FenceError<E>>,
) -> Outcome {
    match outcome {
        Err(FenceError::InDoubt { .. }) => Ok(()),
        Ok(value) => Err(violation(format!(
            "a commit whose reply was lost was reported done (value {value}); a fence cannot know that"
        ))),
        Err(err) => Err(violation(format!(
            "a commit whose reply was lost was reported as: {err}"
        ))),
    }
}

/// A claim sent with the server's replies dropped (then the connection closed once the claim
/// shows in the store): the fence must say `InDoubt`, never that it claimed or was refused.
///
/// # Errors
///
/// [`Failure::Violation`] for any other report.
pub async fn lost_claim_reply_is_in_doubt<S: FenceStore>(store: &S) -> Outcome {
    let scope = "/kit/claim-doubt";
    let t = ticket(scope, epoch_token(6));
    let switch = store.reply_switch();
    switch(true);
    let claim = store.claim(&t);
    let watch = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // The replies come back on every way out, an error of the read too: the claim
            // waits for them.
            let seen = match store.seen(scope).await {
                Ok(seen) => seen,
                Err(err) => {
                    switch(false);
                    return Err(broken(err));
                }
            };
            if seen == Some(t.token().as_i64()) {
                switch(false);
                return Ok(());
            }
            if Instant::now() > deadline {
                switch(false);
                return Err(broken("the claim never showed in the store within 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (outcome, shown) = tokio::join!(claim, watch);
    shown?;
    match outcome {
        Err(FenceError::InDoubt { .. }) => Ok(()),
        Ok(()) => Err(violation("a claim whose reply was lost was reported done")),
        Err(err) => Err(violation(format!(
            "a claim whose reply was lost was reported as: {err}"
        ))),
    }
}

/// A real hold whose node is deleted (a forced revocation) while its holder is between its
/// read and its commit: the fence's check before the commit fails, and nothing is written.
///
/// # Errors
///
/// [`Failure::Violation`] when the write commits or is reported otherwise.
pub async fn lost_hold_writes_nothing<S: FenceStore>(store: &S, client: &zk::Client) -> Outcome {
    let key = "lost";
    let lock = FencedLock::new(client.clone(), "/kit/lost-hold", LockOptions::default())
        .map_err(broken)?;
    let guard = lock.acquire().await.map_err(broken)?;
    let held = guard.held();
    let ticket = guard.ticket();
    let node = guard.node_path().to_owned();
    let before = store.value(key).await.map_err(broken)?;
    let between: BoxFuture<'static, ()> = Box::pin({
        let lock = lock.clone();
        async move {
            let _ = lock.force_revocation(&node).await;
            let _ = tokio::time::timeout(Duration::from_secs(30), held.lost()).await;
        }
    });
    let hooks = Hooks {
        between: Some(between),
        before_commit: None,
    };
    let outcome = store.increment(&ticket, key, hooks).await;
    drop(guard);
    match outcome {
        Err(FenceError::LockLost { .. }) => {}
        Err(FenceError::Store(err)) => return Err(store_error("the write", &err)),
        Ok(_) => return Err(violation("a hold lost before its commit wrote")),
        Err(err) => {
            return Err(violation(format!(
                "a hold lost before its commit: expected LockLost, got: {err}"
            )))
        }
    }
    let after = store.value(key).await.map_err(broken)?;
    if after != before {
        return Err(violation(format!(
            "the counter moved from {before} to {after} under a lost hold"
        )));
    }
    Ok(())
}

/// An increment whose first attempt is refused at its commit for serialization (the store
/// reports it: [`FenceStore::increment_through_conflict`]) is run again and applied once: the
/// fence reports success only for a commit that happened. Stores without serialization
/// failures pass at once.
///
/// # Errors
///
/// [`Failure::Violation`] when success is reported for a write the store does not hold.
pub async fn serialization_failure_retried<S: FenceStore>(store: &S) -> Outcome {
    let (scope, key) = ("/kit/serialization", "serialization");
    let t = ticket(scope, epoch_token(9));
    expect_accepted("the claim", store.claim(&t).await)?;
    let before = store.value(key).await.map_err(broken)?;
    let Some(conflicted) = store.increment_through_conflict(&t, key) else {
        return Ok(());
    };
    let (value, attempts) = expect_accepted("the conflicted increment", conflicted.await)?;
    let after = store.value(key).await.map_err(broken)?;
    if after != before + 1 || value != after {
        return Err(violation(format!(
            "the increment was reported done with {value} after {attempts} attempt(s), but the counter went from {before} to {after}"
        )));
    }
    if attempts < 2 {
        return Err(broken(
            "the conflict did not happen: the first attempt committed",
        ));
    }
    check_log(store, key).await
}
