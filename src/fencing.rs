//! [`FencingToken`]: the number a holder passes to storage so that storage can refuse the
//! writes of a holder that lost the lock without knowing it.

use std::fmt;
use std::str::FromStr;

/// The fencing token of one lock acquisition.
///
/// A token carries two numbers:
///
/// - [`sequence`](FencingToken::sequence): the lock znode's sequence number, the one in its
///   name (`_c_…-lock-0000000042` has sequence 42). It is what people see in listings, but it
///   is **not** safe for storage: it is the parent's child counter, so it restarts at 0 when the
///   lock path is deleted and recreated (a container parent is reaped by the server when it is
///   empty) and wraps to a negative number after 2³¹−1 (ZOOKEEPER-2944).
/// - [`as_u64`](FencingToken::as_u64): the znode's creation zxid (`czxid`), read from the
///   create reply. ZooKeeper assigns zxids to every write of the ensemble in one total order
///   and assigns sequence numbers in that same order, so a later holder of the same lock path
///   always has a strictly greater `as_u64()`, across holders, sessions, clients in other
///   languages, parent recreation and sequence wrap, for as long as the ensemble keeps its
///   data. It fits a SQL `BIGINT` (it is below 2⁶³).
///
/// Tokens compare by `as_u64()`. `Display` writes `sequence@as_u64` (e.g. `42@4294967339`)
/// and `FromStr` reads that form back.
///
/// # Examples
///
/// ```
/// use zkfence::FencingToken;
///
/// let older: FencingToken = "42@4294967339".parse().unwrap();
/// let newer: FencingToken = "0@8589934593".parse().unwrap(); // parent recreated: sequence restarted
/// assert!(newer > older);
/// assert_eq!(older.sequence(), 42);
/// assert_eq!(older.as_u64(), 4294967339);
/// assert_eq!(older.to_string(), "42@4294967339");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken {
    // Field order matters: the derived `Ord` compares `zxid` first, which is the order storage
    // must use. `sequence` only breaks ties, and two distinct nodes never share a zxid.
    zxid: u64,
    sequence: i32,
}

impl FencingToken {
    /// Builds a token from a node's sequence and creation zxid.
    ///
    /// Storage code rarely needs this; it is for tests and for tools that read `czxid` from a
    /// node's `Stat` themselves.
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(7, 0x1_0000_0010);
    /// assert_eq!(token.as_u64(), 0x1_0000_0010);
    /// ```
    pub fn new(sequence: i32, czxid: u64) -> FencingToken {
        FencingToken {
            zxid: czxid,
            sequence,
        }
    }

    /// The lock znode's sequence number, as in its name `…-lock-0000000042`.
    ///
    /// Not monotonic across parent recreation or the 2³¹ wrap; give storage
    /// [`as_u64`](Self::as_u64) instead.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::FencingToken::new(42, 99).sequence(), 42);
    /// ```
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// The value storage compares: strictly increasing from holder to holder of one lock path
    /// for the life of the ensemble (the lock znode's creation zxid).
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(42, 99);
    /// // e.g. UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
    /// let fence_param = token.as_u64() as i64; // always fits a BIGINT
    /// assert_eq!(fence_param, 99);
    /// ```
    pub fn as_u64(&self) -> u64 {
        self.zxid
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.sequence, self.zxid)
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({self})")
    }
}

/// The error of parsing a [`FencingToken`] from a string not of the form `sequence@zxid`.
///
/// # Examples
///
/// ```
/// let err = "42".parse::<zkfence::FencingToken>().unwrap_err();
/// assert!(err.to_string().contains("sequence@zxid"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fencing token {0:?}: expected `sequence@zxid`, e.g. `42@4294967339`")]
pub struct ParseTokenError(String);

impl FromStr for FencingToken {
    type Err = ParseTokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseTokenError(s.to_owned());
        let (sequence, zxid) = s.split_once('@').ok_or_else(bad)?;
        let sequence = sequence.parse::<i32>().map_err(|_| bad())?;
        let zxid = zxid.parse::<u64>().map_err(|_| bad())?;
        if zxid > i64::MAX as u64 {
            return Err(bad());
        }
        Ok(FencingToken { zxid, sequence })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_by_zxid_not_sequence() {
        let before_wrap = FencingToken::new(i32::MAX, 100);
        let after_wrap = FencingToken::new(i32::MIN, 101);
        assert!(after_wrap > before_wrap);
        let before_recreate = FencingToken::new(500, 200);
        let after_recreate = FencingToken::new(0, 300);
        assert!(after_recreate > before_recreate);
    }

    #[test]
    fn display_round_trips_including_negative_sequence() {
        for token in [
            FencingToken::new(0, 1),
            FencingToken::new(i32::MIN, 42),
            FencingToken::new(7, i64::MAX as u64),
        ] {
            assert_eq!(token.to_string().parse::<FencingToken>(), Ok(token));
        }
    }

    #[test]
    fn rejects_malformed_tokens() {
        for bad in [
            "",
            "42",
            "@1",
            "1@",
            "x@1",
            "1@-1",
            "1@9223372036854775808",
            "1@2@3",
        ] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad:?} parsed");
        }
    }
}
