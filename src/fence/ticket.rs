//! [`FenceTicket`]: what a fence needs from a hold, how a hold hands one out
//! ([`Held::ticket`], built in one place: `FenceTicket::of_hold`), and its text form.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::error::FenceError;
use crate::guard::Held;
use crate::mode::{Exclusive, Mode};
use crate::token::FencingToken;

/// What a fence needs from a hold: the **scope** its fence is kept for (the lock path), the
/// **token** it compares, and a [`check`](FenceTicket::check) of the hold that a fence runs just
/// before it commits.
///
/// An exclusive hold hands one out ([`Held::ticket`], [`MultiHeld::tickets`], a
/// [`Leadership`]'s through its `Held`); a read lock and a semaphore lease do not (see
/// [`Shared`](crate::Shared)). A service that received a ticket over the wire, as text,
/// rebuilds it with [`FromStr`] (Chubby's sequencer model): such a ticket has no hold to check,
/// so the fence's token comparison is all that stands between it and a stale write.
///
/// [`MultiHeld::tickets`]: crate::MultiHeld::tickets
/// [`Leadership`]: crate::Leadership
///
/// # Text form
///
/// `<sequence>@<zxid>:<node>:<scope>`: the [`FencingToken`]'s text, the holder's lock node
/// name (empty when not known), and the scope, which is the rest of the line and may contain
/// `:`. For example `42@4294967339:_c_0b5d…-lock-0000000042:/locks/orders`. `zkfence run`
/// exports it as `ZKFENCE_TICKET`. A ticket that carries its node lets a
/// [`ZooKeeperFence`](crate::fence::ZooKeeperFence) check, in the same transaction as the write, that the holder's node still
/// exists.
///
/// # Examples
///
/// ```
/// use zkfence::FencingToken;
/// use zkfence::fence::FenceTicket;
///
/// // A service that only received the holder's ticket:
/// let ticket: FenceTicket = "42@4294967339::/locks/orders".parse()?;
/// assert_eq!(ticket.scope(), "/locks/orders");
/// assert_eq!(ticket.token().as_i64(), 4294967339);
/// assert!(ticket.check().is_ok()); // no hold here to check: the fence's compare decides
///
/// let rebuilt = FenceTicket::new("/locks/orders", FencingToken::new(42, 4294967339)?)?;
/// assert_eq!(rebuilt.to_string(), "42@4294967339::/locks/orders");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct FenceTicket {
    scope: Arc<str>,
    token: FencingToken,
    /// The holder's lock node name, when known.
    node: Option<Arc<str>>,
    /// The hold, when this process has it.
    held: Option<Held>,
}

impl FenceTicket {
    /// The ticket of a hold of this process: its lock path, token and node, and, for an
    /// exclusive hold, the hold itself to check (`check` is `None` for the shared-ticket mutant,
    /// whose hold a ticket cannot carry).
    fn of_hold<M: Mode>(held: &Held<M>, check: Option<Held>) -> FenceTicket {
        let node = held.node_path().rsplit('/').next().map(Arc::from);
        FenceTicket {
            scope: held.lock_path().into(),
            token: held.token(),
            node,
            held: check,
        }
    }

    /// A ticket rebuilt from its parts, by a service that received them from the holder (or
    /// for a fence scope of your own naming): nothing to check but the token.
    ///
    /// # Errors
    ///
    /// [`TicketError`] for an empty scope or one with a control character (a newline, say).
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::{fence::FenceTicket, FencingToken};
    /// let ticket = FenceTicket::new("/locks/orders", FencingToken::new(7, 99)?)?;
    /// assert_eq!(ticket.token().as_i64(), 99);
    /// assert!(FenceTicket::new("", FencingToken::new(7, 99)?).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(scope: impl Into<String>, token: FencingToken) -> Result<FenceTicket, TicketError> {
        let scope = scope.into();
        check_scope(&scope).map_err(|why| TicketError::new(&scope, why))?;
        Ok(FenceTicket {
            scope: scope.into(),
            token,
            node: None,
            held: None,
        })
    }

    /// The fence's scope: the lock path (or the election path) the token was issued for.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert_eq!(ticket.scope(), "/locks/a");
    /// ```
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The token the fence compares ([`FencingToken::as_i64`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert_eq!(ticket.token().as_i64(), 5);
    /// ```
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The holder's lock node (its full path), when the ticket carries it.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "7@5:_c_x-lock-0000000007:/locks/a".parse().unwrap();
    /// assert_eq!(ticket.node_path().as_deref(), Some("/locks/a/_c_x-lock-0000000007"));
    /// ```
    pub fn node_path(&self) -> Option<String> {
        let node = self.node.as_deref()?;
        Some(crate::requests::nodes::child_path(&self.scope, node))
    }

    /// The hold's check, as [`Held::check`]: fails once the hold is lost, released, in
    /// jeopardy, or its lease has lapsed. Every fence calls it just before it commits. A ticket
    /// rebuilt from text has no hold in this process, and its check always passes.
    ///
    /// # Errors
    ///
    /// [`Error::LockLost`](crate::Error::LockLost), [`Error::Jeopardy`](crate::Error::Jeopardy).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// use zkfence::Acquire;
    /// let guard = lock.acquire().await?;
    /// let ticket = guard.ticket();
    /// guard.release().await?;
    /// assert!(ticket.check().is_err()); // released: nothing may be written under it
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> crate::Result<()> {
        self.held.as_ref().map_or(Ok(()), Held::check)
    }

    /// Whether this process holds the hold, so that [`check`](Self::check) checks something.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert!(!ticket.is_held());
    /// ```
    pub fn is_held(&self) -> bool {
        self.held.is_some()
    }

    /// The same ticket without its hold, as a service that received its text would have it:
    /// its [`check`](Self::check) always passes. For tests that must reach a fence with a stale
    /// token (the fence must refuse it on its own), and for handing the ticket to code that
    /// must not keep the hold alive.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert_eq!(ticket.detached().to_string(), ticket.to_string());
    /// ```
    pub fn detached(&self) -> FenceTicket {
        FenceTicket {
            held: None,
            ..self.clone()
        }
    }

    /// Whether the hold was still valid when a fence refused it (then no newer holder of this
    /// ensemble can have claimed the scope: see [`FenceError::looks_reset`]).
    pub(crate) fn still_valid(&self) -> bool {
        self.held.as_ref().is_some_and(|held| held.check().is_ok())
    }

    /// For fence implementations: the refusal of this ticket by a fence that holds `seen`,
    /// noting whether the hold is still valid (see [`FenceError::looks_reset`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// let err: zkfence::fence::FenceError<std::io::Error> = ticket.refused(9);
    /// assert!(err.is_refused());
    /// ```
    pub fn refused<E>(&self, seen: i64) -> FenceError<E> {
        FenceError::Refused {
            scope: self.scope.to_string(),
            token: self.token.as_i64(),
            seen,
            live: self.still_valid(),
        }
    }

    /// For fence implementations: the check a fence runs just before it commits, as a fence
    /// error ([`FenceError::LockLost`]: nothing was written).
    ///
    /// # Errors
    ///
    /// [`FenceError::LockLost`] when [`check`](Self::check) fails.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert!(ticket.check_before_commit::<std::io::Error>().is_ok());
    /// ```
    pub fn check_before_commit<E>(&self) -> Result<(), FenceError<E>> {
        self.check().map_err(|cause| FenceError::LockLost {
            scope: self.scope.to_string(),
            token: self.token.as_i64(),
            cause,
        })
    }

    /// For fence implementations: a commit of this ticket's whose reply `cause` cut off.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "1@5::/locks/a".parse().unwrap();
    /// assert!(ticket.in_doubt(std::io::Error::other("reset")).is_in_doubt());
    /// ```
    pub fn in_doubt<E>(&self, cause: E) -> FenceError<E> {
        FenceError::InDoubt {
            scope: self.scope.to_string(),
            token: self.token.as_i64(),
            cause,
        }
    }
}

/// Why a scope cannot be one.
fn check_scope(scope: &str) -> Result<(), &'static str> {
    if scope.is_empty() {
        return Err("it is empty");
    }
    if scope.chars().any(char::is_control) {
        return Err("it holds a control character");
    }
    Ok(())
}

impl fmt::Display for FenceTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = self.node.as_deref().unwrap_or("");
        write!(f, "{}:{}:{}", self.token, node, self.scope)
    }
}

impl fmt::Debug for FenceTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceTicket")
            .field("scope", &self.scope)
            .field("token", &self.token)
            .field("node", &self.node)
            .field("held", &self.held.is_some())
            .finish()
    }
}

impl FromStr for FenceTicket {
    type Err = TicketError;

    /// Reads the text form, `<sequence>@<zxid>:<node>:<scope>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| TicketError::new(s, why);
        let mut parts = s.splitn(3, ':');
        let (Some(token), Some(node), Some(scope)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("expected `<sequence>@<zxid>:<node>:<scope>`"));
        };
        let token: FencingToken = token
            .parse()
            .map_err(|_| bad("its token is not `<sequence>@<zxid>`"))?;
        let mut ticket = FenceTicket::new(scope, token).map_err(|e| bad(e.why))?;
        if !node.is_empty() {
            match crate::queue::names::parse_node(node) {
                Some((sequence, _)) if sequence == token.sequence() && !node.contains('/') => {}
                _ => {
                    return Err(bad(
                        "its node is not a lock node name with the token's sequence",
                    ))
                }
            }
            ticket.node = Some(node.into());
        }
        Ok(ticket)
    }
}

/// A [`FenceTicket`] that cannot be: text not in the ticket's form, or a bad scope.
///
/// # Examples
///
/// ```
/// let err = "42".parse::<zkfence::fence::FenceTicket>().unwrap_err();
/// assert!(err.to_string().contains("<sequence>@<zxid>:<node>:<scope>"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fence ticket {text:?}: {why}; a ticket reads `<sequence>@<zxid>:<node>:<scope>`, e.g. `42@4294967339::/locks/orders`, as FenceTicket's Display writes it")]
pub struct TicketError {
    text: String,
    why: &'static str,
}

impl TicketError {
    fn new(text: &str, why: &'static str) -> TicketError {
        TicketError {
            text: text.to_owned(),
            why,
        }
    }
}

impl Held<Exclusive> {
    /// The [`FenceTicket`] of this hold: its scope (the lock path), its token, and this
    /// handle's [`check`](Held::check), which every fence in [`crate::fence`] runs just before
    /// it commits. Give it to a fence (a [`ZooKeeperFence`](crate::fence::ZooKeeperFence), the
    /// `zkfence-postgres` package's), or send its text form to a service that writes on your
    /// behalf ([`FenceTicket::from_str`](std::str::FromStr)).
    ///
    /// Only an exclusive hold has one: a read lock's or a semaphore lease's token must never
    /// raise a fence (see [`Shared`](crate::Shared)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(lock: zkfence::FencedLock) -> zkfence::Result<()> {
    /// use zkfence::Acquire;
    /// let guard = lock.acquire().await?;
    /// let ticket = guard.ticket();
    /// assert_eq!(ticket.scope(), "/locks/orders");
    /// assert_eq!(ticket.token(), guard.token());
    /// println!("ZKFENCE_TICKET={ticket}"); // what `zkfence run` exports
    /// # Ok(()) }
    /// ```
    pub fn ticket(&self) -> FenceTicket {
        FenceTicket::of_hold(self, Some(self.clone()))
    }
}

/// **The shared-ticket mutant** (feature `mutant-shared-ticket`, zkfence's own CI only): a read
/// lock's or a semaphore lease's token handed out as a ticket, so that it could raise a fence.
/// The compile-fail examples on [`Mode`](crate::Mode) must fail to fail with it.
#[cfg(feature = "mutant-shared-ticket")]
impl Held<crate::mode::Shared> {
    #[doc(hidden)]
    #[allow(missing_docs)]
    pub fn ticket(&self) -> FenceTicket {
        FenceTicket::of_hold(self, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips_with_and_without_a_node() {
        for text in [
            "42@4294967339::/locks/orders",
            "7@5:_c_0b5d4f2c-9c6e-4f4e-8a3e-1d2c3b4a5f60-lock-0000000007:/locks/a",
            "-5@9223372036854775807::/odd:scope with: colons",
            "0@0::orders",
        ] {
            let ticket: FenceTicket = text.parse().unwrap();
            assert_eq!(ticket.to_string(), text);
            assert!(!ticket.is_held());
        }
    }

    #[test]
    fn bad_tickets_say_what_is_wrong() {
        for bad in [
            "",
            "42@1",
            "42@1:/a",
            "x@1::/a",
            "1@-1::/a",
            "1@5::",
            "1@5::a\nb",
            "7@5:_c_x-lock-0000000008:/locks/a",
            "7@5:not-a-node:/locks/a",
        ] {
            let err = bad.parse::<FenceTicket>().unwrap_err();
            assert!(err.to_string().contains("fence ticket"), "{bad:?}: {err}");
        }
    }
}
