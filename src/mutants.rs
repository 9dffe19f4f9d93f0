//! Deliberate flaws, for zkfence's own tests: each one breaks one safety rule, and a named test
//! or chaos scenario must catch it. This is the one place that lists them; production code asks
//! [`Flaw::is`], which is `false` unless the crate is built with the `mutants` feature (then
//! only [`LockOptions::with_mutant`](crate::LockOptions::with_mutant) sets one).
//!
//! | mutant | the rule it breaks | what must catch it |
//! | --- | --- | --- |
//! | [`Mutant::MarkedWithdrawal`] | a waiter that gives up never writes the release marker (`queue::handoff`'s "The handoff") | `tests/lock.rs::the_marked_withdrawal_mutant_is_caught`: its successor walks past the holder; the queue model: `grants_in_queue_order` |
//! | [`Mutant::AnyReleaseAdmits`] | only the marked release of a node that held alone admits a successor with no request | `tests/kinds.rs::the_any_release_admits_mutant_is_caught`: a writer walks past a reader; the queue model: `grants_in_queue_order` (lock-delay on) |
//! | [`Mutant::DataChangeAdmits`] | only a node's deletion (a child watch) admits its successor; a data change counts only as the marker in front of a deletion (`queue::handoff`'s "The handoff") | `tests/revocation.rs::the_data_change_admits_mutant_is_caught`: a revocation request lets the waiter in beside the holder; the queue model: `one_holder_at_a_time` |
//! | [`Mutant::UnpinnedDowngrade`] | a downgrade keeps the write lock while writers queued between it and the read lock (`FencedRwLock`'s "Downgrade") | `tests/reentrancy.rs::the_unpinned_downgrade_mutant_is_caught`: the queued writer writes beside our reader |
//! | [`Mutant::SyncLease`] | only committed writes prove the lease (the lease module's argument); this is the older rule that trusted `sync` replies | the chaos suite's `sync-lease` mutant, caught by its valid-lease-overlap invariant under partitions inside the ensemble |
//! | [`Mutant::ResumeWithoutProof`] | a guard leaves jeopardy only on a committed probe that finds its node (the lease module's "Jeopardy") | the chaos suite's `resume-without-proof` mutant (with a grace), caught by the same invariant under the same partitions; the lease model's `resume_only_on_a_committed_proof` |
//! | [`Mutant::IgnoreDrift`] | the budget and the pair gap allow for clock drift (the lease module's "Assumptions") | the lease model (`model/`): `one_holder_at_a_time`, a holder whose clock runs slow |
//! | [`Mutant::NoPairGap`] | a committed write pairs only with replies back `G` before it was sent (the lease module's point 4) | the lease model: `one_holder_at_a_time`, a follower cut off before it relays the touch |
//! | [`Mutant::ReceiveAnchor`] | the anchor is a reply's send time, not its arrival (point 4) | the lease model: `one_holder_at_a_time`, a reply that came back late |
//! | [`Mutant::ColdWithoutKeepalive`] | a cold proof leans on the client's keepalive, `T/5` plus the margin, besides `G` (the cold phase) | the lease model: `one_holder_at_a_time`, a first lease on a session last heard `T/5` before |
//! | [`Mutant::LeanThroughPause`] | a cold proof leans only across a stretch the watchdog's ticker shows the process ran through (the lease module's "The cold proofs") | the lease model: `one_holder_at_a_time`, a holder paused right after its first acquire whose probe on waking leans |
//! | [`Mutant::UnmarkedAdmits`] | only a marked release of the node it watches admits a successor that queued behind more than one node (`queue::handoff`'s "The handoff") | the queue model (`model/`): `grants_in_queue_order`, a waiter between the holder and the successor gives up |
//! | [`Mutant::GrantWithoutProof`] | a grant the lease cannot vouch for waits for a committed probe of the granted node (the queue's `prove`) | the queue model: `grants_on_a_proven_lease`, a grant after a wait longer than the lease |
//! | [`Mutant::UnreadAfterLockDelay`] | a grant after a lock-delay rests on a read of its own node answered after the vanish (the queue's `reread`) | the queue model: `grants_on_a_live_node`, a waiter deleted in one transaction with its session's holder; and `tests/kinds.rs::the_unread_after_lock_delay_mutant_is_caught`: a semaphore waiter deleted so is granted |
//! | [`Mutant::AnchorOnReconnect`] | only a new session's connect anchors its lease, never a resumed session's reconnect (the lease module's "A new session's first lease") | the lease model's connect world: `one_holder_at_a_time`, a holder that reconnects late to a leader cut off from its quorum |
//! | [`Mutant::SilentAdmission`] | a semaphore waiter admitted with others behind it announces it (`queue::watches`' "The semaphore's gate"); a liveness rule | `tests/kinds.rs::the_silent_admission_mutant_is_caught`: the follower sits out a free permit |
//! | [`Mutant::UnseenAnnouncement`] | a follower whose watch came after its predecessor's announcement lists again (same section); liveness | `tests/kinds.rs::the_unseen_announcement_mutant_is_caught`: a waiter whose replies come a second late sits out the free permit |
//! | [`Mutant::ZxidBlind`] | on 3.9+, a deletion counts as a marked release only if its zxid is the data change's (`queue::handoff`'s "The handoff") | `tests/zookeeper_39.rs::the_zxid_blind_mutant_is_caught`, on a real 3.9 server (CI's "tests on ZooKeeper 3.9"): a write into the waiting node and its later deletion let the waiter in beside the holder |
//! | [`Mutant::WatchEveryHold`] | a session's holds keep at most `HOLD_WATCH_BYTES` of node paths watched, the rest read back once a probe period (the watchdog's "Why a share"); a rule for holds to outlive a disconnect | `tests/grace.rs::the_watch_every_hold_mutant_is_caught`: the session never reconnects, and every hold is lost |
//!
//! The lease model (`model/`, `cargo test -p zkfence-model`) checks every lease mutant above
//! (`SyncLease` to `LeanThroughPause`, and `AnchorOnReconnect`) exhaustively and prints each one's counterexample; its
//! queue model checks the queue's mutants (`MarkedWithdrawal`, `AnyReleaseAdmits`,
//! `DataChangeAdmits`, `UnmarkedAdmits`, `GrantWithoutProof`, `UnreadAfterLockDelay`) the same way, driving the
//! library's own queue predicates and handoff (`model_api::queue`).
//!
//! The storage fences have mutants of their own, [`FenceMutant`], one per rule of
//! `crate::fence`'s "What a fence does"; the conformance kit (`zkfence_testkit::conformance`)
//! must catch each by the case that attacks it:
//!
//! | fence mutant | the rule it breaks | the kit's case that catches it |
//! | --- | --- | --- |
//! | [`FenceMutant::CheckOutsideTransaction`] | compare and write in one atomic step | `stale_writer_paused_before_commit`: the stale write lands after the newer claim |
//! | [`FenceMutant::StrictlyGreater`] | accept `>=` | `order`: the holder's second write is refused |
//! | [`FenceMutant::Equality`] | accept `>=`, raise on `>` | `order`: the newer holder is refused |
//! | [`FenceMutant::StringCompare`] | compare integers | `edge_tokens`: 10 is refused after 9 |
//! | [`FenceMutant::NoUpsert`] | the first claim of a scope creates its fence | `order`: the first claim is refused |
//! | [`FenceMutant::SerializationAsSuccess`] | a serialization failure retries the transaction (PostgreSQL) | `serialization_failure_retried`: the write reported done never happened |
//! | [`FenceMutant::DoubleCompare`] | compare integers (Redis) | `edge_tokens`: 2⁵³ accepted after 2⁵³+1 |
//! | [`FenceMutant::KeyOutsideSlot`] | one hash slot per fence (Redis) | the Redis fence's own test: a key outside the slot written |
//! | [`FenceMutant::EtagOnly`] | the token travels inside the object (object stores) | the object store fence's own test: the same-content rewrite lets a stale write through |
//! | [`FenceMutant::RowsAffected`] | decide from the fence row, never rows-affected (MySQL/MariaDB) | `order`: an equal token's second write refused (0 rows changed) |
//! | [`FenceMutant::NoLockingRead`] | read the fence row `FOR UPDATE` (MySQL/MariaDB) | the MySQL fence's own test: a stale claim sent while a newer claim is open, not yet committed, is accepted once the newer commits (every claim writes the row, so the paused stale writer no longer tells) |
//! | [`FenceMutant::UnsealedCommit`] | commit only the transaction that claimed (MySQL/MariaDB) | the MySQL fence's own test: a swallowed deadlock commits the work's second half alone |
//! | [`FenceMutant::NoFormCheck`] | compare integers, whatever text a client sends (Redis) | `tokens_in_any_text_form`: an unpadded 9 accepted over a padded 10 |
//! | [`FenceMutant::CommitAfterRefusal`] | a refusal ends what it refused (MySQL/MariaDB) | `carrying_on_after_a_refusal_commits_nothing`: the stale write after a refused claim commits |
//! | [`FenceMutant::NoProbe`] | check that the store enforces conditional writes (object stores) | on a store that ignores them, `preconditions_enforced` passes and `stale_writer_paused_before_commit` catches the stale write |
//!
//! A shared hold raising the fence (a reader's or a lease's token) cannot be written as a
//! runtime mutant: a shared guard has no ticket, which the compile-fail examples on
//! [`Mode`](crate::Mode) pin.
#![cfg_attr(not(feature = "mutants"), allow(unreachable_pub, dead_code))]

/// **For zkfence's own tests.** A deliberate flaw in a safety rule; see the module's table for
/// what each breaks and which test must catch it. Only settable with the `mutants` feature.
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "mutants")] {
/// use zkfence::{LockOptions, Mutant};
/// let mutant = LockOptions::default().with_mutant(Mutant::MarkedWithdrawal);
/// # let _ = mutant;
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// A waiter that gives up deletes its node with the release marker, as if it had held the
    /// lock: its successor walks past the nodes still ahead.
    MarkedWithdrawal,
    /// Any marked release admits the successor, whatever kind the released node was: a writer
    /// walks past the readers still ahead of the reader that released.
    AnyReleaseAdmits,
    /// The lease rule zkfence had before it learnt that a leader answers its own clients'
    /// syncs without a quorum: each `sync` reply extends the lease from its send time, with a
    /// margin of `T/4`. Unsound when the ensemble is partitioned.
    SyncLease,
    /// A waiter takes any data change of a node it watches for that node's release, as the
    /// handoff did before revocation existed: a revocation request written into the holder's
    /// node (by zkfence or by Curator's `Revoker`) lets the next waiter in while the holder
    /// still holds.
    DataChangeAdmits,
    /// A read lock taken under the write lock (a downgrade) never keeps the write lock, as
    /// Curator's downgrade does: a writer that queued behind our write lock before the read
    /// lock takes the lock while we still read.
    UnpinnedDowngrade,
    /// A guard in jeopardy resumes on the answer to a `sync` of its node, without a committed
    /// probe that finds the node: the old rule's flaw again, where the jeopardy argument (the
    /// lease module) needs a commit. A holder on a leader cut off from its followers resumes
    /// while the others elect, expire its session and grant the lock.
    ResumeWithoutProof,
    /// The lease allows for no clock drift: the budget is `T − margin` and the pair gap
    /// `tickTime/2 + margin`, as if our clock and the servers' ran at one rate. A holder whose
    /// clock runs slow keeps its lease past the session's expiry.
    IgnoreDrift,
    /// A committed write pairs with any reply that came back before it was sent, not only with
    /// those back `G` before: the follower may not have relayed that reply's touch yet when it
    /// forwarded the write.
    NoPairGap,
    /// The anchor is the paired reply's arrival, not its send time: the server saw the request
    /// when it arrived there, and the reply may have taken long to come back.
    ReceiveAnchor,
    /// A cold proof leans only `G` back from its write, forgetting that the follower may have
    /// last seen the session a keepalive (`T/5`) before relaying.
    ColdWithoutKeepalive,
    /// A cold proof leans on the client's keepalive whether or not the process ran through the
    /// lean before its write, as the rule did before the watchdog's ticker: a process paused
    /// there sent no keepalive, and its lease outlasts its session.
    LeanThroughPause,
    /// A successor that queued behind more than one node proceeds on the deletion of the
    /// node it watches whether or not the deletion carried the release marker: a waiter ahead
    /// that gave up (or whose session expired) lets it in while the holder further ahead
    /// still holds.
    UnmarkedAdmits,
    /// A grant after a wait takes no proof even when the lease cannot vouch for it (the queue's
    /// `prove` skipped): after a wait longer than the lease, the guard is handed out on a
    /// lease that lapsed while the session only waited.
    GrantWithoutProof,
    /// A reconnect of the session (resumed on whichever server it reaches) is taken for a new
    /// session's connect, and the lease anchors where it came back: a leader cut off from its
    /// quorum revalidates the session on its own, and the lease outlasts the session the
    /// others expire.
    AnchorOnReconnect,
    /// A semaphore waiter admitted with others queued behind it writes nothing into its node:
    /// the waiter right behind it, watching its data, never learns that it became the head of
    /// the waiters, and sits out a free permit until its predecessor goes.
    SilentAdmission,
    /// A semaphore waiter that sets its watch on its predecessor after that predecessor
    /// announced its admission waits for an announcement that already happened.
    UnseenAnnouncement,
    /// A grant after a lock-delay does not read its own node again: the node that vanished
    /// may have gone in one transaction with ours (a session closed from outside, an
    /// administrator's `multi`), and a waiter that watches nothing of its own (a semaphore's)
    /// is granted a node that is gone, on a lease proved before the vanish.
    UnreadAfterLockDelay,
    /// The watchdog watches every held node, however many: past 128 KiB of watched paths
    /// `zookeeper-client` 0.11 cannot set them again after a disconnect, and the session never
    /// reconnects.
    WatchEveryHold,
    /// A data change followed by a deletion counts as a marked release whatever their zxids:
    /// the handoff forgets to compare them (as it must on 3.8, whose events carry none), and on
    /// 3.9 a write into a waiting node (a revocation request aimed at it) followed by its
    /// withdrawal lets the waiter behind it in beside the holder.
    ZxidBlind,
}

/// The mutant a lock is built with, if any: never one without the `mutants` feature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Flaw(Option<Mutant>);

impl Flaw {
    /// The flaw of `mutant`.
    #[cfg(feature = "mutants")]
    pub(crate) fn of(mutant: Mutant) -> Flaw {
        Flaw(Some(mutant))
    }

    /// Whether this is `mutant`'s flaw; a constant `false` without the `mutants` feature.
    pub(crate) fn is(self, mutant: Mutant) -> bool {
        cfg!(feature = "mutants") && self.0 == Some(mutant)
    }
}

/// **For zkfence's own tests.** A deliberate flaw in a storage fence; see the module's table.
/// Only settable with the `mutants` feature (`ZooKeeperFence::with_mutant`, and the
/// `mutants` feature of each store's fence package).
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "mutants")] {
/// let flaw = zkfence::FenceMutant::StringCompare;
/// # let _ = flaw;
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMutant {
    /// The fence is compared in one step and the write committed in another, with nothing
    /// tying the two (the check outside the transaction).
    CheckOutsideTransaction,
    /// A token equal to the fence's is refused (`>` for `>=`): a holder's second write fails.
    StrictlyGreater,
    /// Only a token equal to the fence's is accepted: a newer holder cannot raise it.
    Equality,
    /// Tokens are compared as decimal strings.
    StringCompare,
    /// A scope with no fence yet refuses (the `UPDATE … WHERE fence <= $t` that finds no row).
    NoUpsert,
    /// A serialization failure is taken for a commit (PostgreSQL).
    SerializationAsSuccess,
    /// Tokens compared as doubles (Redis: `tonumber` in Lua): above 2⁵³ neighbours are equal.
    DoubleCompare,
    /// A key outside the fence key's hash slot is written (Redis): in a cluster the script
    /// fails there, or (on another node's slot) its compare and its write part.
    KeyOutsideSlot,
    /// An object store's conditional write checks the ETag only (a hash of the content), not
    /// the token inside the object: a fresh holder that writes identical bytes lets a stale
    /// `If-Match` through.
    EtagOnly,
    /// A SQL fence decided from the rows an `UPDATE` affected (MySQL counts changed rows, not
    /// matched ones, unless the client sets found-rows).
    RowsAffected,
    /// The fence row read without `FOR UPDATE` (MySQL/MariaDB: a snapshot under REPEATABLE
    /// READ, and no lock).
    NoLockingRead,
    /// A fenced transaction commits without first checking that it is still the transaction
    /// that claimed (MySQL/MariaDB: a deadlock the work swallowed rolled the claim back, and the
    /// statements since ran in a new transaction that holds no fence).
    UnsealedCommit,
    /// A token's text compared as it came (Redis: the scripts before the form check, which
    /// took an unpadded `9` for more than a padded `…010`).
    NoFormCheck,
    /// A refused claim leaves its transaction open and its connection writable (MySQL/MariaDB:
    /// a client that carries on after the error, `mariadb --force` or a caught exception,
    /// commits its stale write).
    CommitAfterRefusal,
    /// An object store's conditional writes taken on trust, never probed (the check of a
    /// deployment skips it): a store that ignores them passes.
    NoProbe,
    /// A refused claim only raises its error (PostgreSQL): inside a savepoint the client rolls
    /// back to (psql's `ON_ERROR_ROLLBACK`, a nested psycopg `transaction()`, Django's nested
    /// `atomic()`), the refusal is undone with the savepoint and the stale write commits.
    RefusalInSavepoint,
    /// The seal does nothing (MySQL/MariaDB): a deadlock's victim that carries on commits its
    /// writes in a new transaction that holds no claim.
    NoOpSeal,
    /// The claim sets no bound on how long its transaction may sit idle (PostgreSQL,
    /// MySQL/MariaDB): a holder frozen after its claim keeps the fence row locked, and its
    /// successor waits until it wakes.
    NoIdleBound,
    /// The first claim of a scope reads the missing row with a locking read (MySQL/MariaDB
    /// under REPEATABLE READ: a gap lock), so that a frozen first claim blocks the first
    /// claims of unrelated scopes.
    GapLockingFirstClaim,
    /// The scope compared as the bytes the client sent (MySQL/MariaDB: a `VARBINARY` scope in
    /// the connection's character set): a latin1 client's scope is another fence than a utf8mb4
    /// client's, and its stale token passes.
    ClientCharsetScope,
    /// The claim raises any key it is given (Redis): a claim on a key that is not a fence key
    /// overwrites the number it holds.
    AnyKeyClaim,
}

/// The fence mutant a fence is built with, if any: never one without the `mutants` feature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FenceFlaw(Option<FenceMutant>);

impl FenceFlaw {
    /// The flaw of `mutant`.
    #[cfg(feature = "mutants")]
    pub(crate) fn of(mutant: FenceMutant) -> FenceFlaw {
        FenceFlaw(Some(mutant))
    }

    /// Whether this is `mutant`'s flaw; a constant `false` without the `mutants` feature.
    pub(crate) fn is(self, mutant: FenceMutant) -> bool {
        cfg!(feature = "mutants") && self.0 == Some(mutant)
    }

    /// Whether `token` is accepted against a fence holding `seen` (`None`: no fence yet),
    /// and whether the fence must be raised: the rule every fence applies, flawed as set.
    /// `Err(())` is a refusal.
    pub(crate) fn admits(self, token: i64, seen: Option<i64>) -> Result<bool, ()> {
        let Some(seen) = seen else {
            return match self.is(FenceMutant::NoUpsert) {
                true => Err(()),
                false => Ok(true),
            };
        };
        let accepted = if self.is(FenceMutant::StrictlyGreater) {
            token > seen
        } else if self.is(FenceMutant::Equality) {
            token == seen
        } else if self.is(FenceMutant::StringCompare) {
            token.to_string() >= seen.to_string()
        } else {
            token >= seen
        };
        match accepted {
            true => Ok(token != seen),
            false => Err(()),
        }
    }
}
