//! What a store gives the kit: [`FenceStore`], the hooks a case sets in a write, the setups
//! a store may need.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::fence::{FenceError, FenceTicket};

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
