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
/// - [`as_i64`](FencingToken::as_i64): the znode's creation zxid (`czxid`), read from the
///   create reply. ZooKeeper assigns zxids to every write of the ensemble in one total order
///   and assigns sequence numbers in that same order, so a later holder of the same lock path
///   always has a strictly greater `as_i64()`, across holders, sessions, clients in other
///   languages, parent recreation and sequence wrap, for as long as the ensemble keeps its
///   data.
///
/// **Storage compares it as a signed 64-bit integer**: a SQL `BIGINT`, a Redis integer, an
/// 8-byte big-endian field. A zxid is a Java `long` that ZooKeeper never makes negative, and
/// every token is checked to lie in `0..=i64::MAX` when it is built, so [`as_i64`] never
/// fails and [`as_u64`] is the same number. Never compare tokens as strings (`"9" > "10"`) or
/// as doubles (above 2⁵³ neighbours compare equal): the fences in [`crate::fence`] and the
/// conformance kit hold every store to that.
///
/// The high 32 bits of a zxid are the ZooKeeper leader's epoch ([`epoch`](Self::epoch)). An
/// ensemble rebuilt from empty data starts its zxids over, so its tokens fall below the fences
/// storage kept; a fence refusal says so when the numbers point that way.
///
/// Tokens compare by `as_i64()`. `Display` writes `sequence@zxid` (e.g. `42@4294967339`) and
/// `FromStr` reads that form back.
///
/// [`as_i64`]: FencingToken::as_i64
/// [`as_u64`]: FencingToken::as_u64
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
/// assert_eq!(older.as_i64(), 4294967339);
/// assert_eq!(older.epoch(), 1);
/// assert_eq!(older.to_string(), "42@4294967339");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken {
    // Field order matters: the derived `Ord` compares `zxid` first, which is the order storage
    // must use. `sequence` only breaks ties, and two distinct nodes never share a zxid.
    /// In `0..=i64::MAX`, checked by every constructor.
    zxid: i64,
    sequence: i32,
}

impl FencingToken {
    /// Builds a token from a node's sequence and creation zxid (`Stat::czxid`, as the server
    /// reports it).
    ///
    /// Storage code rarely needs this; it is for tests and for tools that read `czxid` from a
    /// node's `Stat` themselves.
    ///
    /// # Errors
    ///
    /// [`TokenError`] for a negative zxid, which no ZooKeeper server issues.
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(7, 0x1_0000_0010).unwrap();
    /// assert_eq!(token.as_i64(), 0x1_0000_0010);
    /// assert!(zkfence::FencingToken::new(7, -1).is_err());
    /// ```
    pub fn new(sequence: i32, czxid: i64) -> Result<FencingToken, TokenError> {
        if czxid < 0 {
            return Err(TokenError(format!("{sequence}@{czxid}")));
        }
        Ok(FencingToken {
            zxid: czxid,
            sequence,
        })
    }

    /// The token of a node the server reported, whose `czxid` a server never makes negative;
    /// one that did would read as 0, below every token, which every fence refuses.
    pub(crate) fn of_node(sequence: i32, czxid: i64) -> FencingToken {
        FencingToken {
            zxid: czxid.max(0),
            sequence,
        }
    }

    /// The lock znode's sequence number, as in its name `…-lock-0000000042`.
    ///
    /// Not monotonic across parent recreation or the 2³¹ wrap; give storage
    /// [`as_i64`](Self::as_i64) instead.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence::FencingToken::new(42, 99).unwrap().sequence(), 42);
    /// ```
    pub fn sequence(&self) -> i32 {
        self.sequence
    }

    /// The value storage compares, as a signed 64-bit integer (a SQL `BIGINT`): strictly
    /// increasing from holder to holder of one lock path for the life of the ensemble's data
    /// (the lock znode's creation zxid). Never negative.
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(42, 99).unwrap();
    /// // SELECT zkfence_claim('/locks/orders', $1)  -- $1 a BIGINT
    /// assert_eq!(token.as_i64(), 99);
    /// ```
    pub fn as_i64(&self) -> i64 {
        self.zxid
    }

    /// [`as_i64`](Self::as_i64) as an unsigned number (the same value: it is never negative),
    /// for stores that keep unsigned integers.
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(42, 99).unwrap();
    /// assert_eq!(token.as_u64(), 99);
    /// ```
    pub fn as_u64(&self) -> u64 {
        self.zxid.unsigned_abs()
    }

    /// The ZooKeeper leader epoch that issued the token: the zxid's high 32 bits. It grows by
    /// one or more with every leader election, and starts over when an ensemble is rebuilt
    /// from empty data.
    ///
    /// # Examples
    ///
    /// ```
    /// let token = zkfence::FencingToken::new(0, 0x3_0000_0007).unwrap();
    /// assert_eq!(token.epoch(), 3);
    /// ```
    pub fn epoch(&self) -> u32 {
        (self.zxid >> 32) as u32
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

/// A [`FencingToken`] that cannot be: text not of the form `sequence@zxid`, or a zxid outside
/// `0..=i64::MAX`.
///
/// # Examples
///
/// ```
/// let err = "42".parse::<zkfence::FencingToken>().unwrap_err();
/// assert!(err.to_string().contains("sequence@zxid"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fencing token {0:?}: expected `sequence@zxid` with a zxid from 0 to 9223372036854775807, e.g. `42@4294967339`")]
pub struct TokenError(String);

impl FromStr for FencingToken {
    type Err = TokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || TokenError(s.to_owned());
        let (sequence, zxid) = s.split_once('@').ok_or_else(bad)?;
        let sequence = sequence.parse::<i32>().map_err(|_| bad())?;
        // Digits only: `i64::from_str` would take a sign.
        if zxid.is_empty() || !zxid.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let zxid = zxid.parse::<i64>().map_err(|_| bad())?;
        FencingToken::new(sequence, zxid).map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(sequence: i32, zxid: i64) -> FencingToken {
        FencingToken::new(sequence, zxid).unwrap()
    }

    #[test]
    fn orders_by_zxid_not_sequence() {
        let before_wrap = token(i32::MAX, 100);
        let after_wrap = token(i32::MIN, 101);
        assert!(after_wrap > before_wrap);
        let before_recreate = token(500, 200);
        let after_recreate = token(0, 300);
        assert!(after_recreate > before_recreate);
    }

    #[test]
    fn display_round_trips_including_negative_sequence() {
        for token in [token(0, 0), token(i32::MIN, 42), token(7, i64::MAX)] {
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
            "1@+1",
            "1@9223372036854775808",
            "1@2@3",
        ] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad:?} parsed");
        }
    }

    /// The promise storage relies on: every token fits a signed 64-bit column, and `as_u64`
    /// is the same number.
    #[test]
    fn every_token_fits_a_signed_64_bit_column() {
        assert!(FencingToken::new(0, -1).is_err());
        assert!(FencingToken::new(0, i64::MIN).is_err());
        for zxid in [
            0,
            1,
            0xFFFF_FFFF,
            0x1_0000_0000,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX,
        ] {
            let t = token(1, zxid);
            assert_eq!(t.as_i64(), zxid);
            assert_eq!(t.as_u64(), zxid as u64);
            assert_eq!(i64::try_from(t.as_u64()), Ok(t.as_i64()));
        }
    }

    #[test]
    fn epoch_is_the_high_half() {
        assert_eq!(token(0, 0xFFFF_FFFF).epoch(), 0);
        assert_eq!(token(0, 0x1_0000_0000).epoch(), 1);
        assert_eq!(token(0, i64::MAX).epoch(), 0x7FFF_FFFF);
    }
}
