//! The cases, each a function of a [`FenceStore`], and what they share.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use crate::fence::{FenceError, FenceTicket};
use crate::{Acquire, FencedLock, FencingToken, LockOptions};

/// A boxed, `Send` future, as [`FenceStore`]'s methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An increment through a serialization conflict: its value and its number of attempts (see
/// [`FenceStore::increment_through_conflict`]).
pub type Conflicted<'a, E> = BoxFuture<'a, Result<(i64, u32), FenceError<E>>>;

/// See [`FenceStore::reply_switch`].
pub type ReplySwitch = Arc<dyn Fn(bool) + Send + Sync>;

/// What [`FenceStore::frozen_claim`] hands back: the frozen holder's connection, kept open
/// (and silent) until dropped.
pub type Frozen = Box<dyn std::any::Any + Send>;

/// How a client of another language goes on after an error ([`FenceStore::carry_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarryOn {
    /// Every error ignored and the transaction committed all the same: `psql` without
    /// `ON_ERROR_STOP`, `mariadb --force`, an exception caught before `COMMIT`.
    Ignoring,
    /// Every statement in a savepoint of its own, rolled back to after an error, and the
    /// transaction committed: `psql -v ON_ERROR_ROLLBACK=on`, psycopg's nested
    /// `transaction()`, Django's nested `atomic()`, SQLAlchemy's `begin_nested()`, pgjdbc's
    /// `autosave=always`.
    InSavepoints,
    /// The claim accepted, then the whole transaction rolled back under the work (a deadlock's
    /// victim), the client going on with its writes, the recipe's last steps and `COMMIT`: what
    /// a victim that does not pass the error on does.
    AfterRollbackUnderWork,
}

/// What the kit hands an increment: a pause between its read and its write (the think phase of
/// a read-modify-write, where a holder stalls), and a hook run just before its commit is sent.
#[derive(Default)]
pub struct Hooks {
    /// Awaited after the read, before the write.
    pub between: Option<BoxFuture<'static, ()>>,
    /// Called once, right before the commit is sent: at the end of a transaction's work, or
    /// just before a `multi` goes out.
    pub before_commit: Option<Box<dyn FnOnce() + Send>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("between", &self.between.is_some())
            .field("before_commit", &self.before_commit.is_some())
            .finish()
    }
}

/// One store's fence, as the kit drives it. Give each test a fresh one (its own schema,
/// chroot or key prefix): the cases use fixed scope and key names.
pub trait FenceStore: Send + Sync {
    /// The store's own error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Raises `ticket`'s fence (the store's claim).
    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<Self::Error>>>;

    /// One fenced read-modify-write of counter `key` (0 when missing), fenced by `ticket`: read,
    /// await `hooks.between`, write the value read plus one and append the ticket's token to
    /// `key`'s commit log, call `hooks.before_commit`, commit. Returns the value written.
    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<Self::Error>>>;

    /// Counter `key`'s value (0 when missing), read apart from the fence's connection.
    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>>;

    /// `key`'s commit log: the tokens of the increments it accepted, in commit order.
    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>>;

    /// The token `scope`'s fence holds (`None` before its first claim).
    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>>;

    /// Whether a fenced write is waiting for another's lock now (PostgreSQL: a claim blocked
    /// on the fence row). Stores without locks answer `false`.
    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>>;

    /// A switch over the fence's connections: `true` drops the server's replies from then on
    /// (requests still reach it); `false` closes those connections and lets replies through
    /// again. Called from a synchronous hook, so it must act at once.
    fn reply_switch(&self) -> ReplySwitch;

    /// An increment whose first attempt meets a serialization failure at its commit, and the
    /// number of attempts it took; `None` for stores without serialization failures.
    fn increment_through_conflict<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
    ) -> Option<Conflicted<'a, Self::Error>> {
        let _ = (ticket, key);
        None
    }

    /// The claim as a client of another language makes it (`psql`, `mariadb`, `redis-cli`, a
    /// Python driver), with the token as the text `token` and nothing else of the library:
    /// `Ok(true)` accepted, `Ok(false)` refused by the store's refusal error (`ZF001`,
    /// [`REFUSED`](crate::fence::REFUSED)), `Err` with the store's answer for anything else (a bad
    /// token's error, an ordinary reply that is not an acceptance). `None` for a store whose
    /// protocol other languages follow only through the library's code (ZooKeeper's).
    fn foreign_claim<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        let _ = (scope, token);
        None
    }

    /// A client of another language that carries on after every error: the store's published
    /// recipe for incrementing counter `key` under the token `token` (appending it to the
    /// commit log), on a connection of its own, each error ignored and the transaction
    /// committed all the same, as `mariadb --force`, `psql` without `ON_ERROR_STOP` or an
    /// exception caught before `COMMIT` do. Whether the increment landed. `None` as for
    /// [`foreign_claim`](Self::foreign_claim).
    fn carry_on<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
        key: &'a str,
        how: CarryOn,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        let _ = (scope, token, key, how);
        None
    }

    /// Whether the fence installed in the store is there, and is the code this version
    /// installs (compared with it: an edited, an older or a missing install fails): `Err` with
    /// one line that says what differs and the command that mends it (`zkfence fence install
    /// <URL>`). `None` for a store with nothing installed (ZooKeeper, object stores).
    fn installed(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        None
    }

    /// Whether the deployment keeps every fence it acknowledged (persistence on every write,
    /// no eviction that can reach a fence, no replica or cluster setting that loses a write it
    /// acknowledged, where the store can tell): `Err` with one line that says what to change.
    /// `None` for a store whose commits are durable by construction (a SQL database's,
    /// ZooKeeper's quorum, an object store's).
    fn durable(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        None
    }

    /// A holder frozen inside its open fenced transaction: a connection of its own claims
    /// `ticket` in a transaction (as the store's recipe does), then sends nothing more while the
    /// returned handle lives (dropping it closes that connection). Resolves once the claim
    /// returned (`Err` with the store's answer when it did not). `None` for stores whose claim
    /// holds nothing open (Redis, object stores, ZooKeeper).
    fn frozen_claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> Option<BoxFuture<'a, Result<Frozen, String>>> {
        let _ = ticket;
        None
    }

    /// How long the installed fence lets a frozen holder's open transaction keep its fence row
    /// before the store ends that transaction (`None`: no bound, or no
    /// [`frozen_claim`](Self::frozen_claim)).
    fn frozen_bound(&self) -> BoxFuture<'_, Result<Option<Duration>, String>> {
        Box::pin(async { Ok(None) })
    }

    /// Whether the store enforces what its fence stands on beyond the fence's own code (an
    /// object store's conditional writes): `Ok` if it does, `Err` saying what it ignored.
    /// `None` for a store whose fence runs in the store (SQL, Lua, ZooKeeper's `multi`).
    fn preconditions(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        None
    }
}

/// Where a store's [`FenceStore`] finds its fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// A fence installed afresh in the store's own scratch space (a schema, a database, a key
    /// prefix): zkfence's own tests, mutants included.
    Fresh,
    /// The fence as the deployment has it installed (`zkfence fence install`), its scopes
    /// under `/zkfence-verify/<scratch name>/`, removed afterwards: `zkfence fence verify`,
    /// which so checks what is deployed (an old version, a hand-edited one, missing
    /// privileges), not a copy of its own.
    Deployed,
}

impl Setup {
    /// The scopes' prefix of a store named `scratch` set up this way: none for a fresh fence,
    /// `/zkfence-verify/<scratch>` for a deployed one.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::conformance::Setup;
    /// assert_eq!(Setup::Fresh.scopes("zkfence_verify_a"), "");
    /// assert_eq!(Setup::Deployed.scopes("zkfence_verify_a"), "/zkfence-verify/zkfence_verify_a");
    /// ```
    pub fn scopes(self, scratch: &str) -> String {
        match self {
            Setup::Fresh => String::new(),
            Setup::Deployed => format!("/zkfence-verify/{scratch}"),
        }
    }
}

/// `ticket` with its scope under `prefix` (a [`Setup::Deployed`] store's), detached from any
/// hold; `ticket` itself when `prefix` is empty.
///
/// # Examples
///
/// ```
/// use zkfence::conformance::{rescoped, ticket};
/// let t = rescoped(&ticket("/kit/order", 5), "/zkfence-verify/x");
/// assert_eq!(t.scope(), "/zkfence-verify/x/kit/order");
/// ```
pub fn rescoped(ticket: &FenceTicket, prefix: &str) -> FenceTicket {
    if prefix.is_empty() {
        return ticket.clone();
    }
    let scope = format!("{prefix}{}", ticket.scope());
    FenceTicket::new(scope, ticket.token()).unwrap_or_else(|_| ticket.clone())
}

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

/// How a case failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The fence broke the rule the case checks.
    Violation(String),
    /// The case could not run (the store failed, a wait ran out): not a verdict on the fence.
    Broken(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Violation(why) => write!(f, "fence rule broken: {why}"),
            Failure::Broken(why) => write!(f, "case could not run: {why}"),
        }
    }
}

impl std::error::Error for Failure {}

impl Failure {
    /// Whether this is a [`Failure::Violation`].
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::conformance::Failure;
    /// assert!(Failure::Violation("x".into()).is_violation());
    /// ```
    pub fn is_violation(&self) -> bool {
        matches!(self, Failure::Violation(_))
    }
}

/// A case's outcome.
pub type Outcome = Result<(), Failure>;

/// For a mutant's test: `outcome` must be a [`Failure::Violation`] (the case caught `mutant`
/// for the rule it breaks), printed; panics when the case passed, or broke instead.
///
/// # Panics
///
/// When the mutant was not caught, or the case could not run.
///
/// # Examples
///
/// ```
/// use zkfence::conformance::{expect_caught, Failure};
/// expect_caught("StrictlyGreater", Err(Failure::Violation("t2 again refused".into())));
/// ```
pub fn expect_caught(mutant: &str, outcome: Outcome) {
    match outcome {
        Err(Failure::Violation(why)) => eprintln!("{mutant} caught: {why}"),
        Err(Failure::Broken(why)) => panic!("{mutant}: the case broke instead: {why}"),
        Ok(()) => panic!("{mutant} was not caught"),
    }
}

/// The name of a store's scratch space (a schema, a database, a key prefix) for a run named
/// `name`: `zkfence_verify_` and `name` in lowercase letters, digits and `_`, shortened to
/// `max` bytes with a hash of the whole name in its last 8 when longer (SQL identifiers have
/// limits: 63 bytes in PostgreSQL, 64 in MySQL), so that two names stay apart.
///
/// # Examples
///
/// ```
/// use zkfence::conformance::scratch_name;
/// assert_eq!(scratch_name("order-1", 63), "zkfence_verify_order_1");
/// let long = scratch_name(&"x".repeat(100), 63);
/// assert_eq!(long.len(), 63);
/// assert_ne!(long, scratch_name(&"x".repeat(101), 63));
/// ```
pub fn scratch_name(name: &str, max: usize) -> String {
    let plain: String = (name.chars())
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    let full = format!("zkfence_verify_{plain}");
    if full.len() <= max {
        return full;
    }
    // FNV-1a of the name as given: the shortened names of two names differ.
    let hash = (name.bytes()).fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let keep = max.saturating_sub(9).min(full.len());
    format!("{}_{:08x}", &full[..keep], hash as u32)
}

fn violation(why: impl Into<String>) -> Failure {
    Failure::Violation(why.into())
}

fn broken(why: impl fmt::Display) -> Failure {
    Failure::Broken(why.to_string())
}

/// An error and its causes, each cause that adds something, in plain words: what a store's
/// generic message (tokio-postgres's `db error`) leaves to its source, the server's own.
///
/// # Examples
///
/// ```
/// use zkfence::conformance::error_chain;
/// let err = std::io::Error::other("connection refused");
/// assert_eq!(error_chain(&err), "connection refused");
/// ```
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(err);
    while let Some(e) = next {
        let own = e.to_string().replace('\n', " ");
        next = e.source();
        // A generic head (`db error`) says nothing its source does not say better.
        if own.is_empty() || (own == "db error" && next.is_some()) || text.contains(&own) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&own);
    }
    text
}

/// A store error of a case, with its causes.
fn store_error<E: std::error::Error + 'static>(what: &str, err: &E) -> Failure {
    broken(format!("{what}: {}", error_chain(err)))
}

/// What a fence holds, in a failure's words: `the fence holds 7`, `the fence holds nothing`.
fn holds(seen: Option<i64>) -> String {
    match seen {
        Some(token) => format!("the fence holds {token}"),
        None => "the fence holds nothing (no claim reached it)".to_owned(),
    }
}

/// A commit log in a failure's words: its tokens in commit order, or `empty`.
fn tokens(log: &[i64]) -> String {
    if log.is_empty() {
        return "empty".to_owned();
    }
    let tokens: Vec<String> = log.iter().map(i64::to_string).collect();
    tokens.join(", ")
}

/// A ticket for `scope` with zxid `zxid` (the sequence is its low bits), as a service that
/// received it would rebuild it: nothing to check but the token.
pub fn ticket(scope: &str, zxid: i64) -> FenceTicket {
    let token = FencingToken::new((zxid & 0x7FFF_FFFF) as i32, zxid).expect("a zxid from 0");
    FenceTicket::new(scope, token).expect("a scope")
}

/// Tokens of one ZooKeeper epoch, as successive holders of a lock get them.
fn epoch_token(n: i64) -> i64 {
    0x1_0000_0000 + n
}

/// Asserts that `outcome` is a refusal that names `seen`.
fn expect_refused<T, E: std::error::Error + 'static>(
    what: &str,
    outcome: Result<T, FenceError<E>>,
    seen: i64,
) -> Outcome {
    match outcome {
        Err(FenceError::Refused { seen: s, .. }) if s == seen => Ok(()),
        Err(FenceError::Refused { seen: s, .. }) => Err(violation(format!(
            "{what}: refused, but naming {s} where the fence holds {seen}"
        ))),
        Err(FenceError::Store(err)) => Err(store_error(what, &err)),
        Err(err) => Err(violation(format!(
            "{what}: must be refused, but failed otherwise: {}",
            error_chain(&err)
        ))),
        Ok(_) => Err(violation(format!(
            "{what}: accepted below the fence's {seen}"
        ))),
    }
}

/// Asserts that `outcome` was accepted.
fn expect_accepted<T, E: std::error::Error + 'static>(
    what: &str,
    outcome: Result<T, FenceError<E>>,
) -> Result<T, Failure> {
    match outcome {
        Ok(value) => Ok(value),
        Err(FenceError::Store(err)) => Err(store_error(what, &err)),
        Err(err) => Err(violation(format!(
            "{what}: must be accepted, but: {}",
            error_chain(&err)
        ))),
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
async fn new_holder_while_stale_waits<S: FenceStore>(
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
async fn done_or_waiting<S: FenceStore, T>(
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
async fn check_log<S: FenceStore>(store: &S, key: &str) -> Outcome {
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
async fn close_once_committed<S: FenceStore>(
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
fn expect_write_in_doubt<E: std::error::Error + 'static>(
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

/// What a claim from another language must come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Foreign {
    Accepted,
    Refused,
    /// Any error but a refusal: a token that is not one.
    Error,
}

impl Foreign {
    /// In a failure's words.
    fn said(self) -> &'static str {
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
fn carried(how: CarryOn) -> &'static str {
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
async fn unrelated_first_claim_passes<S: FenceStore>(store: &S) -> Outcome {
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
async fn successor_passes_within<S: FenceStore>(
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver's error as tokio-postgres reports one: a generic head, the server's words in
    /// its source.
    #[derive(Debug)]
    struct Db(&'static str, Option<Box<Db>>);

    impl fmt::Display for Db {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Db {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn db_error() -> Db {
        let server = Db("ERROR: permission denied for table zkfence_fence", None);
        Db("db error", Some(Box::new(server)))
    }

    /// The text of every failure the helpers render, for the cases' usual mistakes.
    fn rendered() -> Vec<String> {
        let refused = |seen| FenceError::<Db>::Refused {
            scope: "/kit/order".into(),
            token: 5,
            seen,
            live: false,
        };
        let failures = [
            expect_refused("t1's claim after t2's", Ok::<(), FenceError<Db>>(()), 42),
            expect_refused("t1's write", Ok::<i64, FenceError<Db>>(3), 42),
            expect_refused("t1's claim", Err::<(), _>(refused(41)), 42),
            expect_refused(
                "t1's claim",
                Err::<(), _>(FenceError::Store(db_error())),
                42,
            ),
            expect_accepted("t2's claim", Err::<(), _>(refused(43))).map(|_| ()),
            expect_accepted("t2's claim", Err::<(), _>(FenceError::Store(db_error()))),
        ];
        let mut texts: Vec<String> = failures
            .into_iter()
            .map(|f| f.expect_err("each is a failure").to_string())
            .collect();
        texts.extend([
            holds(Some(7)),
            holds(None),
            tokens(&[]),
            tokens(&[1, 2]),
            Foreign::Accepted.said().to_owned(),
            Foreign::Error.said().to_owned(),
        ]);
        texts
    }

    #[test]
    fn failures_read_as_plain_language() {
        let texts = rendered();
        for text in &texts {
            for debug in [
                "Some(", "None", "(())", "Ok(", "Err(", "[", "\"", "db error",
            ] {
                assert!(!text.contains(debug), "{debug} in {text:?}");
            }
        }
        assert!(
            texts[0].ends_with("accepted below the fence's 42"),
            "{}",
            texts[0]
        );
        assert!(
            texts[3].contains("permission denied for table zkfence_fence"),
            "{}",
            texts[3]
        );
        assert_eq!(texts[6], "the fence holds 7");
        assert!(
            texts[7].starts_with("the fence holds nothing"),
            "{}",
            texts[7]
        );
        assert_eq!(texts[9], "1, 2");
    }

    #[test]
    fn an_error_chain_keeps_the_servers_words() {
        assert_eq!(
            error_chain(&db_error()),
            "ERROR: permission denied for table zkfence_fence"
        );
        let plain = Db("connection refused", None);
        assert_eq!(error_chain(&plain), "connection refused");
    }
}
