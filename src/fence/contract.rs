//! The fence contract: [`Fence`], what every store's fence offers with the same verbs and the
//! same arguments, on a connection it holds; and [`ConfigError`], the one error a fence's
//! configuration gives.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use super::error::FenceError;
use super::ticket::FenceTicket;

/// A boxed, `Send` error: the store's own error behind [`Fence`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed, `Send` future, as [`Fence`]'s methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store's fence, as every store has it: the same verbs, with the same arguments in the same
/// order, whatever the store. Each fence package implements it on its fence bound to a
/// connection it holds, `Connected` in every package (`zkfence_postgres::Connected`,
/// `zkfence_mysql::Connected`, `zkfence_redis::Connected`, `zkfence_object_store::Connected`:
/// the fenced objects under a prefix), and [`ZooKeeperFence`](super::ZooKeeperFence), which is
/// what `zkfence fence` drives for every store alike. The fenced write itself (a transaction,
/// a script, a `multi`, an object) is each store's own: see each package.
///
/// A **scope** is a lock path: a row of the SQL stores' fence table, a Redis fence key, the
/// fence a ZooKeeper fence node holds, the header of each fenced object under an object
/// store prefix.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(fence: &dyn zkfence::fence::Fence) -> Result<(), zkfence::fence::BoxError> {
/// for state in fence.fences().await? {
///     println!("{} {} {}", fence.store(), state.scope, state.token);
/// }
/// # Ok(()) }
/// ```
pub trait Fence: Send + Sync {
    /// The store, as the `store` label of the `zkfence_fence_*` metrics names it.
    fn store(&self) -> &'static str;

    /// Raises `ticket`'s scope's fence to its token, or refuses a lower one
    /// ([`FenceError::Refused`]); the token it held before (`None` on the scope's first
    /// claim). Committed at once.
    ///
    /// # Cancel safety
    ///
    /// A claim already sent may apply after the future is dropped; a claim only refuses older
    /// holders, so that is harmless.
    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<Option<i64>, FenceError<BoxError>>>;

    /// The token `scope`'s fence holds; `None` before its first claim.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, BoxError>>;

    /// Sets `scope`'s fence to `to` whatever it holds (the operator's way out after the
    /// ZooKeeper ensemble's data was reset); what it held, `None` if it had no fence (nothing
    /// is set then). Only once no holder of the old ensemble can write any more: a fence set
    /// lower lets their late writes in.
    ///
    /// # Cancel safety
    ///
    /// A rebase already sent may apply after the future is dropped.
    fn rebase<'a>(
        &'a self,
        scope: &'a str,
        to: i64,
    ) -> BoxFuture<'a, Result<Option<i64>, BoxError>>;

    /// Every fence the store keeps, by scope.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    fn fences(&self) -> BoxFuture<'_, Result<Vec<FenceState>, BoxError>>;
}

/// One fence as a store keeps it ([`Fence::fences`]).
///
/// # Examples
///
/// ```
/// let state = zkfence::fence::FenceState::new("/locks/orders", 4294967339);
/// assert_eq!(state.token >> 32, 1);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceState {
    /// The scope (a lock path).
    pub scope: String,
    /// The highest token accepted.
    pub token: i64,
    /// Where the store keeps it when that is not the scope itself: a fenced object's path, a
    /// fence node's path.
    pub at: Option<String>,
    /// How many claims created or raised it, where the store counts them.
    pub claims: Option<i64>,
    /// When it last changed, UTC, as `YYYY-MM-DDTHH:MM:SSZ`, where the store knows.
    pub updated: Option<String>,
}

impl FenceState {
    /// A fence of `scope` at `token`, with nothing else known.
    ///
    /// # Examples
    ///
    /// ```
    /// let state = zkfence::fence::FenceState::new("/locks/a", 7);
    /// assert!(state.at.is_none() && state.claims.is_none());
    /// ```
    pub fn new(scope: impl Into<String>, token: i64) -> FenceState {
        FenceState {
            scope: scope.into(),
            token,
            at: None,
            claims: None,
            updated: None,
        }
    }

    /// The same fence, kept at `at`.
    ///
    /// # Examples
    ///
    /// ```
    /// let state = zkfence::fence::FenceState::new("/locks/a", 7).at("reports/manifest");
    /// assert_eq!(state.at.as_deref(), Some("reports/manifest"));
    /// ```
    pub fn at(mut self, at: impl Into<String>) -> FenceState {
        self.at = Some(at.into());
        self
    }

    /// The same fence, with its claim count and last change.
    ///
    /// # Examples
    ///
    /// ```
    /// let state = zkfence::fence::FenceState::new("/locks/a", 7).counted(3, "2026-11-27T12:00:00Z");
    /// assert_eq!(state.claims, Some(3));
    /// ```
    pub fn counted(mut self, claims: i64, updated: impl Into<String>) -> FenceState {
        self.claims = Some(claims);
        self.updated = Some(updated.into());
        self
    }
}

/// A fence configured with a value it cannot use (a schema, a database, a key prefix, a bucket
/// prefix, a store URL): the one configuration error of every fence package. Says what was
/// given and what to give instead.
///
/// # Examples
///
/// ```
/// let err = zkfence::fence::ConfigError::new("schema name", "", "a non-empty name, e.g. \"ops\"");
/// assert_eq!(err.to_string(), "invalid schema name \"\": give a non-empty name, e.g. \"ops\"");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    what: &'static str,
    given: String,
    instead: &'static str,
}

impl ConfigError {
    /// `given` is no valid `what`; `instead` says what is.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = zkfence::fence::ConfigError::new("database name", "a;b", "letters, digits, `_` or `$`");
    /// assert!(err.to_string().contains("a;b"));
    /// ```
    pub fn new(what: &'static str, given: impl Into<String>, instead: &'static str) -> ConfigError {
        ConfigError {
            what,
            given: given.into(),
            instead,
        }
    }

    /// What was given.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = zkfence::fence::ConfigError::new("prefix", "x", "y");
    /// assert_eq!(err.given(), "x");
    /// ```
    pub fn given(&self) -> &str {
        &self.given
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} {:?}: give {}",
            self.what, self.given, self.instead
        )
    }
}

impl std::error::Error for ConfigError {}
