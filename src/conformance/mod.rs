//! The conformance kit for storage fences: the cases every fence (ZooKeeper's, PostgreSQL's,
//! and those to come) must pass against a real server, each aimed at one way a fence goes
//! wrong, and each catching a mutant of zkfence's own fences
//! (`crate::FenceMutant`, behind its `mutants` feature).
//!
//! A store plugs in through [`FenceStore`]: a claim, a fenced read-modify-write increment of
//! a counter (with a commit log of the tokens it accepted, in commit order), and reads of what
//! the store holds. The cases build their own tickets (tokens of their choosing, as a service
//! that received them over the wire would), except [`lost_hold_writes_nothing`], which takes a
//! real lock.
//!
//! | case | what it attacks | the fence mutant it catches |
//! | --- | --- | --- |
//! | [`order`] | t1, t2 accepted; t1 refused; t2 again accepted; the first claim of a scope | `StrictlyGreater`, `Equality`, `NoUpsert` |
//! | [`edge_tokens`] | 0, 9/10, 99/100, the epoch boundary 0xFFFF_FFFF/0x1_0000_0000, 2⁵³/2⁵³+1, `i64::MAX`, each in turn | `StringCompare` (and a double compare) |
//! | [`concurrent_first_claims`] | two first claims of a scope at once: the higher wins | (a check-then-insert race) |
//! | [`stale_writer_paused_before_commit`] | a stale writer held between its read and its commit while the new holder claims and writes: no token goes down in the commit log | `CheckOutsideTransaction` |
//! | [`counter_equals_accepted_increments`] | holders one after another, each older one writing late: the counter equals the accepted increments | (lost updates) |
//! | [`lost_reply_is_in_doubt`], [`lost_claim_reply_is_in_doubt`] | the commit (a claim) applied and its reply lost: reported in doubt, never as done or refused | (a lost reply taken for a refusal) |
//! | [`lost_hold_writes_nothing`] | the hold lost before the commit: nothing written | (no check before commit) |
//! | [`serialization_failure_retried`] | a commit refused for serialization is run again, once applied | `SerializationAsSuccess` |
//! | [`tokens_in_any_text_form`] | the claim from another language with the token as text (plain, padded, signed, malformed): compared as integers, a refusal an error | `NoFormCheck` |
//! | [`carrying_on_after_a_refusal_commits_nothing`] | a client of another language that ignores the refusal and commits, or rolls back to a savepoint around it and commits | `CommitAfterRefusal`, `RefusalInSavepoint` |
//! | [`carrying_on_after_a_rollback_under_work_commits_nothing`] | a deadlock's victim that goes on with its writes and commits | `NoOpSeal` |
//! | [`installed_fence_is_current`] | an install that is missing, older or edited | (an edited install) |
//! | [`deployment_keeps_fences`] | a store that can lose an acknowledged fence (no append-only file, eviction) | (a volatile deployment) |
//! | [`frozen_holder_does_not_block`] | a holder frozen in its open transaction: its successor's claim, first claims of other scopes | `NoIdleBound` |
//! | [`preconditions_enforced`] | an object store that ignores conditional writes | (a store that ignores them; the skipped probe, `NoProbe`, is caught on such a store by the paused stale writer) |
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo<S: zkfence::conformance::FenceStore>(store: S) {
//! use zkfence::conformance;
//! conformance::order(&store).await.expect("order");
//! conformance::edge_tokens(&store).await.expect("edge tokens");
//! # }
//! ```

mod cases;
mod clients;
mod outcome;
mod store;
mod zookeeper;

pub use self::cases::*;
pub use self::clients::*;
pub use self::outcome::*;
pub use self::store::*;
pub use self::zookeeper::ZooKeeperStore;

/// The cases `zkfence fence verify` runs against a deployment, in order ([`run`] runs one by
/// name): every case of the store's side, leaving out those that need a proxy in front of the
/// store or a lock of the test's own.
pub const DEPLOYMENT: [&str; 13] = [
    "installed_fence_is_current",
    "deployment_keeps_fences",
    "preconditions_enforced",
    "order",
    "edge_tokens",
    "concurrent_first_claims",
    "stale_writer_paused_before_commit",
    "counter_equals_accepted_increments",
    "serialization_failure_retried",
    "tokens_in_any_text_form",
    "carrying_on_after_a_refusal_commits_nothing",
    "carrying_on_after_a_rollback_under_work_commits_nothing",
    "frozen_holder_does_not_block",
];

/// The cases of [`DEPLOYMENT`] that need nothing but claims and reads of the fence (a store
/// whose read-modify-write the kit cannot follow on a deployment: an object store, whose
/// commit log needs a versioned bucket of the test's own).
pub const CLAIMS_ONLY: [&str; 4] = [
    "installed_fence_is_current",
    "preconditions_enforced",
    "edge_tokens",
    "concurrent_first_claims",
];

/// Runs the case named `case` (one of [`DEPLOYMENT`]) on `store`; `None` for a name that is
/// none of them.
///
/// # Examples
///
/// ```no_run
/// # async fn demo<S: zkfence::conformance::FenceStore>(store: S) {
/// use zkfence::conformance::{run, DEPLOYMENT};
/// for case in DEPLOYMENT {
///     println!("{case}: {:?}", run(case, &store).await);
/// }
/// # }
/// ```
pub async fn run<S: FenceStore>(case: &str, store: &S) -> Option<Outcome> {
    Some(match case {
        "preconditions_enforced" => preconditions_enforced(store).await,
        "order" => order(store).await,
        "edge_tokens" => edge_tokens(store).await,
        "concurrent_first_claims" => concurrent_first_claims(store).await,
        "stale_writer_paused_before_commit" => stale_writer_paused_before_commit(store).await,
        "counter_equals_accepted_increments" => counter_equals_accepted_increments(store).await,
        "serialization_failure_retried" => serialization_failure_retried(store).await,
        "tokens_in_any_text_form" => tokens_in_any_text_form(store).await,
        "carrying_on_after_a_refusal_commits_nothing" => {
            carrying_on_after_a_refusal_commits_nothing(store).await
        }
        "carrying_on_after_a_rollback_under_work_commits_nothing" => {
            carrying_on_after_a_rollback_under_work_commits_nothing(store).await
        }
        "installed_fence_is_current" => installed_fence_is_current(store).await,
        "deployment_keeps_fences" => deployment_keeps_fences(store).await,
        "frozen_holder_does_not_block" => frozen_holder_does_not_block(store).await,
        _ => return None,
    })
}
