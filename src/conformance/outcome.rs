//! A case's verdict ([`Failure`], [`Outcome`]) and the helpers the cases share to reach one.

use std::fmt;

use crate::fence::{FenceError, FenceTicket};
use crate::FencingToken;

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

pub(super) fn violation(why: impl Into<String>) -> Failure {
    Failure::Violation(why.into())
}

pub(super) fn broken(why: impl fmt::Display) -> Failure {
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
pub(super) fn store_error<E: std::error::Error + 'static>(what: &str, err: &E) -> Failure {
    broken(format!("{what}: {}", error_chain(err)))
}

/// What a fence holds, in a failure's words: `the fence holds 7`, `the fence holds nothing`.
pub(super) fn holds(seen: Option<i64>) -> String {
    match seen {
        Some(token) => format!("the fence holds {token}"),
        None => "the fence holds nothing (no claim reached it)".to_owned(),
    }
}

/// A commit log in a failure's words: its tokens in commit order, or `empty`.
pub(super) fn tokens(log: &[i64]) -> String {
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
pub(super) fn epoch_token(n: i64) -> i64 {
    0x1_0000_0000 + n
}

/// Asserts that `outcome` is a refusal that names `seen`.
pub(super) fn expect_refused<T, E: std::error::Error + 'static>(
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
pub(super) fn expect_accepted<T, E: std::error::Error + 'static>(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::clients::Foreign;

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
