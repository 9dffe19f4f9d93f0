//! [`History`]: checks a log of fenced writes for the one thing a fence promises.

use std::fmt;

/// A log of fenced writes, in the order the store applied (or refused) them, and the check
/// that no stale holder got through: **no accepted write carries a token below the highest
/// token accepted before it**. Feed it your own store's log (an audit table, a list of
/// versions): it needs only each write's token and whether it was accepted.
///
/// # Examples
///
/// ```
/// use zkfence_testkit::History;
/// let mut history = History::new();
/// history.accepted(10);
/// history.accepted(10); // the same holder, again
/// history.refused(7);   // a stale holder, refused: fine
/// history.accepted(12);
/// assert!(history.check().is_ok());
/// history.accepted(11); // a stale write that got through
/// let err = history.check().unwrap_err();
/// assert_eq!((err.token, err.after), (11, 12));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    writes: Vec<(i64, bool)>,
}

/// A write [`History::check`] found out of order.
///
/// # Examples
///
/// ```
/// let err = zkfence_testkit::History::from_accepted([5, 3]).check().unwrap_err();
/// assert!(err.to_string().contains("token 3"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleWrite {
    /// Its position in the history (0-based, refusals counted).
    pub index: usize,
    /// Its token.
    pub token: i64,
    /// The highest token accepted before it.
    pub after: i64,
}

impl fmt::Display for StaleWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write #{} with token {} was accepted after token {}: a stale holder got through",
            self.index, self.token, self.after
        )
    }
}

impl std::error::Error for StaleWrite {}

impl History {
    /// An empty history.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence_testkit::History::new().check().is_ok());
    /// ```
    pub fn new() -> History {
        History::default()
    }

    /// A history of accepted writes only, in commit order (a store that keeps no refusals).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence_testkit::History::from_accepted([1, 2, 2, 5]).check().is_ok());
    /// ```
    pub fn from_accepted(tokens: impl IntoIterator<Item = i64>) -> History {
        History {
            writes: tokens.into_iter().map(|t| (t, true)).collect(),
        }
    }

    /// Appends an accepted write.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut history = zkfence_testkit::History::new();
    /// history.accepted(3);
    /// assert_eq!(history.highest(), Some(3));
    /// ```
    pub fn accepted(&mut self, token: i64) {
        self.writes.push((token, true));
    }

    /// Appends a refused write.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut history = zkfence_testkit::History::new();
    /// history.refused(3);
    /// assert_eq!(history.refusals(), 1);
    /// ```
    pub fn refused(&mut self, token: i64) {
        self.writes.push((token, false));
    }

    /// The highest token accepted, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence_testkit::History::from_accepted([4, 9]).highest(), Some(9));
    /// ```
    pub fn highest(&self) -> Option<i64> {
        self.writes.iter().filter(|w| w.1).map(|w| w.0).max()
    }

    /// How many writes were refused.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence_testkit::History::from_accepted([4]).refusals(), 0);
    /// ```
    pub fn refusals(&self) -> usize {
        self.writes.iter().filter(|w| !w.1).count()
    }

    /// The first accepted write whose token is below one accepted before it.
    ///
    /// # Errors
    ///
    /// [`StaleWrite`], the first write out of order.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence_testkit::History::from_accepted([2, 1]).check().is_err());
    /// ```
    pub fn check(&self) -> Result<(), StaleWrite> {
        let mut highest: Option<i64> = None;
        for (index, &(token, accepted)) in self.writes.iter().enumerate() {
            if !accepted {
                continue;
            }
            if let Some(after) = highest.filter(|&h| token < h) {
                return Err(StaleWrite {
                    index,
                    token,
                    after,
                });
            }
            highest = Some(highest.map_or(token, |h| h.max(token)));
        }
        Ok(())
    }
}
