//! [`FenceError`]: how a fenced write or claim failed, the same for every store.

use std::fmt;

use crate::error::Error;

/// How a fenced write or claim failed, the same for every store; `E` is the store's own error.
///
/// See the [module docs](crate::fence) for what each variant means and what to do. The messages are
/// lowercase and say what to do; match on the variant rather than the text.
///
/// # Examples
///
/// ```
/// use zkfence::fence::FenceError;
///
/// let refused: FenceError<std::io::Error> = FenceError::Refused {
///     scope: "/locks/orders".into(),
///     token: 0x1_0000_0005,
///     seen: 0x1_0000_0009,
///     live: false,
/// };
/// assert!(refused.is_refused());
/// assert!(!refused.looks_reset());
/// assert!(refused.to_string().contains("a newer holder"));
/// ```
#[non_exhaustive]
#[derive(Debug)]
pub enum FenceError<E> {
    /// The fence holds a newer token than ours: nothing was written.
    Refused {
        /// The fence's scope.
        scope: String,
        /// Our token.
        token: i64,
        /// The token the fence holds.
        seen: i64,
        /// Whether our hold was still valid when refused: then no newer holder of this
        /// ensemble can have claimed the scope (see [`FenceError::looks_reset`]).
        live: bool,
    },
    /// The hold's check before the commit failed (lost, released, in jeopardy, lease
    /// lapsed): nothing was written.
    LockLost {
        /// The fence's scope.
        scope: String,
        /// Our token.
        token: i64,
        /// [`Error::LockLost`] or [`Error::Jeopardy`].
        cause: Error,
    },
    /// The commit was sent and its reply lost: it may or may not have applied. Read back
    /// before anything else; a retry of a non-idempotent write may apply it twice.
    InDoubt {
        /// The fence's scope.
        scope: String,
        /// Our token.
        token: i64,
        /// The store's error that cut the reply off.
        cause: E,
    },
    /// The store's own error, before anything was committed (or from the caller's closure).
    Store(E),
    /// The fenced write could not be made as asked (a ticket a fence cannot use, no ticket,
    /// a fence node of another scope): nothing was sent.
    Invalid(Error),
}

impl<E> FenceError<E> {
    /// True for [`FenceError::Refused`].
    ///
    /// # Examples
    ///
    /// ```
    /// let err: zkfence::fence::FenceError<std::io::Error> =
    ///     zkfence::fence::FenceError::Refused { scope: "/a".into(), token: 1, seen: 2, live: false };
    /// assert!(err.is_refused());
    /// ```
    pub fn is_refused(&self) -> bool {
        matches!(self, FenceError::Refused { .. })
    }

    /// True for [`FenceError::InDoubt`]: the write may have applied.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = zkfence::fence::FenceError::InDoubt {
    ///     scope: "/a".into(), token: 1, cause: std::io::Error::other("reset"),
    /// };
    /// assert!(err.is_in_doubt());
    /// ```
    pub fn is_in_doubt(&self) -> bool {
        matches!(self, FenceError::InDoubt { .. })
    }

    /// True when the refusal points at a reset ensemble (or tokens of another one in this
    /// scope) rather than a newer holder: a refusal of a hold that was still valid, whose
    /// fence holds a token of a later ZooKeeper epoch. Rebase the scope (`zkfence fence
    /// rebase`) once no holder of the old ensemble can write any more.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::fence::FenceError;
    /// let err: FenceError<std::io::Error> = FenceError::Refused {
    ///     scope: "/locks/orders".into(), token: 0x1_0000_0003, seen: 0x7_0000_0042, live: true,
    /// };
    /// assert!(err.looks_reset());
    /// assert!(err.to_string().contains("zkfence fence rebase"));
    /// ```
    pub fn looks_reset(&self) -> bool {
        match self {
            FenceError::Refused {
                token, seen, live, ..
            } => *live && (seen >> 32) > (token >> 32),
            _ => false,
        }
    }

    /// The same error with the store's error mapped by `f`.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::fence::FenceError;
    /// let err: FenceError<std::io::Error> = FenceError::Store(std::io::Error::other("down"));
    /// let err: FenceError<String> = err.map_store(|e| e.to_string());
    /// assert!(matches!(err, FenceError::Store(text) if text == "down"));
    /// ```
    pub fn map_store<F, T>(self, f: T) -> FenceError<F>
    where
        T: FnOnce(E) -> F,
    {
        match self {
            FenceError::Refused {
                scope,
                token,
                seen,
                live,
            } => FenceError::Refused {
                scope,
                token,
                seen,
                live,
            },
            FenceError::LockLost {
                scope,
                token,
                cause,
            } => FenceError::LockLost {
                scope,
                token,
                cause,
            },
            FenceError::InDoubt {
                scope,
                token,
                cause,
            } => FenceError::InDoubt {
                scope,
                token,
                cause: f(cause),
            },
            FenceError::Store(err) => FenceError::Store(f(err)),
            FenceError::Invalid(err) => FenceError::Invalid(err),
        }
    }
}

impl<E: fmt::Display> fmt::Display for FenceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Refused {
                scope,
                token,
                seen,
                live,
            } => {
                write!(f, "fence {scope} refused token {token}: it has accepted {seen}")?;
                let (ours, theirs) = (token >> 32, seen >> 32);
                if self.looks_reset() {
                    write!(f, ", a token of ZooKeeper epoch {theirs} while ours is of epoch {ours} and our hold is still valid, so no later holder of this ensemble can have claimed it: the ensemble's data looks reset (an ensemble rebuilt from empty data starts its zxids over), or another ensemble fences this scope; once no holder of the old ensemble can write any more, rebase the scope to {token}: {REBASE}")
                } else if *live {
                    write!(f, " although our hold is still valid: another ensemble or another lock fences this scope, or its fence was set by hand; find out which before rebasing the scope to {token}: {REBASE}")
                } else {
                    write!(f, ", a newer holder's: nothing was written; stop working under this hold")
                }
            }
            FenceError::LockLost {
                scope,
                token,
                cause,
            } => write!(
                f,
                "nothing was written to fence {scope} with token {token}, the hold's check before the commit failed: {cause}"
            ),
            FenceError::InDoubt {
                scope,
                token,
                cause,
            } => write!(
                f,
                "a fenced commit in {scope} with token {token} may or may not have applied (its reply was lost: {cause}); read back before retrying"
            ),
            FenceError::Store(err) => write!(f, "{err}"),
            FenceError::Invalid(err) => write!(f, "no fenced write was made: {err}"),
        }
    }
}

/// How to rebase a scope, in every store.
const REBASE: &str = "`zkfence fence rebase URL --scope SCOPE --to TOKEN` with the store's URL (postgresql://, mysql://, redis://, s3://bucket/prefix, zk://hosts/fence-node), or the fence's `rebase`; never delete a fence";

impl<E: std::error::Error + 'static> std::error::Error for FenceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FenceError::Refused { .. } => None,
            FenceError::LockLost { cause, .. } => Some(cause),
            FenceError::InDoubt { cause, .. } => Some(cause),
            // Transparent: its message is the store error's own, so its cause is the next one.
            FenceError::Store(cause) => cause.source(),
            FenceError::Invalid(cause) => Some(cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_of_a_live_hold_from_a_later_epoch_looks_reset() {
        let refused = |token: i64, seen: i64, live| FenceError::<Error>::Refused {
            scope: "/a".into(),
            token,
            seen,
            live,
        };
        assert!(refused(0x1_0000_0001, 0x5_0000_0000, true).looks_reset());
        assert!(!refused(0x1_0000_0001, 0x5_0000_0000, false).looks_reset());
        assert!(!refused(0x1_0000_0001, 0x1_0000_0009, true).looks_reset());
        let live_same_epoch = refused(0x1_0000_0001, 0x1_0000_0009, true).to_string();
        assert!(live_same_epoch.contains("still valid"), "{live_same_epoch}");
    }
}
