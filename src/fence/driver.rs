//! What every fence implementation runs its operations through: [`drive`] (the span, the
//! retries, the metrics), and the pieces it is made of, for fences that need them apart.

use std::fmt;
use std::future::Future;
use std::time::Instant;

use tracing::Instrument as _;

use super::error::FenceError;
use super::ticket::FenceTicket;

/// How one attempt at a fenced operation failed: for good, or in a way that running the whole
/// operation again may cure (the store rolled it back: a serialization failure, a deadlock),
/// with the reason, the `reason` label of
/// [`FENCE_RETRIES_TOTAL`](crate::metrics::FENCE_RETRIES_TOTAL).
///
/// # Examples
///
/// ```
/// use zkfence::fence::FenceError;
/// use zkfence::fence::author::Attempt;
/// let failed: Attempt<std::io::Error> = Attempt::Retry("deadlock", FenceError::Store(std::io::Error::other("1213")));
/// assert!(matches!(failed.into_error(), FenceError::Store(_)));
/// ```
#[derive(Debug)]
pub enum Attempt<E> {
    /// Failed for good: the operation's error.
    Done(FenceError<E>),
    /// Failed in a way a new attempt may cure; the error stands if no attempt is left.
    Retry(&'static str, FenceError<E>),
}

impl<E> Attempt<E> {
    /// The error, retryable or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::fence::FenceError;
    /// use zkfence::fence::author::Attempt;
    /// let done: Attempt<std::io::Error> = Attempt::Done(FenceError::Store(std::io::Error::other("x")));
    /// assert!(matches!(done.into_error(), FenceError::Store(_)));
    /// ```
    pub fn into_error(self) -> FenceError<E> {
        match self {
            Attempt::Done(err) | Attempt::Retry(_, err) => err,
        }
    }
}

impl<E> From<FenceError<E>> for Attempt<E> {
    fn from(err: FenceError<E>) -> Self {
        Attempt::Done(err)
    }
}

/// For fence implementations: runs a fenced operation (`op`, on `store`, for `ticket`) the way
/// every zkfence fence does, as a [`Run`]: in its span, `attempt` up to `max_attempts` times
/// while it fails with [`Attempt::Retry`], and the outcome recorded. An operation whose attempts
/// borrow what the next one needs again (a connection, the caller's closure) loops over a
/// [`Run`] itself.
///
/// # Errors
///
/// The last attempt's error.
///
/// # Cancel safety
///
/// As cancel safe as `attempt`: dropping the future drops the attempt under way.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// use zkfence::fence::{FenceError, FenceTicket};
/// use zkfence::fence::author::{drive, Attempt};
/// let ticket: FenceTicket = "5@4294967301::/locks/a".parse()?;
/// let mut tries = 0;
/// let outcome: Result<u32, FenceError<std::io::Error>> =
///     drive("my-store", "write", &ticket, 3, || {
///         tries += 1;
///         let this = tries;
///         async move {
///             match this {
///                 1 => Err(Attempt::Retry("deadlock", FenceError::Store(std::io::Error::other("1213")))),
///                 _ => Ok(this),
///             }
///         }
///     })
///     .await;
/// assert_eq!(outcome?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn drive<T, E, F, Fut>(
    store: &'static str,
    op: &'static str,
    ticket: &FenceTicket,
    max_attempts: u32,
    mut attempt: F,
) -> Result<T, FenceError<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt<E>>>,
    E: fmt::Display,
{
    let mut run = Run::new(store, op, ticket, max_attempts);
    let outcome = loop {
        match attempt().instrument(run.span()).await {
            Ok(value) => break Ok(value),
            Err(Attempt::Retry(reason, err)) => match run.again(reason).await {
                true => continue,
                false => break Err(err),
            },
            Err(Attempt::Done(err)) => break Err(err),
        }
    };
    run.finish(outcome)
}

/// For fence implementations: one fenced operation under way, as every zkfence fence runs it.
/// Its `fence` span (fields `store`, `op`, `scope`, `fencing_token`, and `path` and
/// `session_id` for an attempt to record where they apply) instruments each attempt
/// ([`span`](Run::span)); [`again`](Run::again) decides and waits for the next attempt after a
/// failure worth retrying; [`finish`](Run::finish) records the outcome ([`record`]). For the
/// operations [`drive`] cannot hold, whose attempts borrow what the next one needs again.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// use tracing::Instrument as _;
/// use zkfence::fence::{FenceError, FenceTicket};
/// use zkfence::fence::author::Run;
/// let ticket: FenceTicket = "5@4294967301::/locks/a".parse()?;
/// let mut run = Run::new("my-store", "transaction", &ticket, 3);
/// let mut conn = vec![]; // what each attempt borrows
/// let outcome: Result<usize, FenceError<std::io::Error>> = loop {
///     let attempt = async { conn.push(1); conn.len() }.instrument(run.span()).await;
///     if attempt < 2 && run.again("deadlock").await {
///         continue;
///     }
///     break Ok(attempt);
/// };
/// assert_eq!(run.finish(outcome)?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Run {
    store: &'static str,
    started: Instant,
    span: tracing::Span,
    tries: u32,
    max_attempts: u32,
}

impl Run {
    /// Starts a run of `op` on `store` for `ticket`, of at most `max_attempts` attempts.
    ///
    /// # Examples
    ///
    /// ```
    /// let ticket: zkfence::fence::FenceTicket = "5@4294967301::/locks/a".parse().unwrap();
    /// let run = zkfence::fence::author::Run::new("my-store", "claim", &ticket, 1);
    /// # let _ = run;
    /// ```
    pub fn new(
        store: &'static str,
        op: &'static str,
        ticket: &FenceTicket,
        max_attempts: u32,
    ) -> Run {
        let span = tracing::debug_span!(
            "fence",
            store,
            op,
            scope = ticket.scope(),
            fencing_token = %ticket.token(),
            path = tracing::field::Empty,
            session_id = tracing::field::Empty,
        );
        Run {
            store,
            started: Instant::now(),
            span,
            tries: 1,
            max_attempts: max_attempts.max(1),
        }
    }

    /// The run's span, to instrument an attempt with.
    ///
    /// # Examples
    ///
    /// ```
    /// # let ticket: zkfence::fence::FenceTicket = "5@4294967301::/locks/a".parse().unwrap();
    /// let run = zkfence::fence::author::Run::new("my-store", "claim", &ticket, 1);
    /// let _entered = run.span().entered();
    /// ```
    pub fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// After an attempt failed for `reason`, whether to make another: if attempts remain,
    /// counts the retry ([`record_retry`]), waits [`retry_backoff`], and returns `true`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while it waits, the run counts the retry and nothing else.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
    /// # let ticket: zkfence::fence::FenceTicket = "5@4294967301::/locks/a".parse()?;
    /// let mut run = zkfence::fence::author::Run::new("my-store", "transaction", &ticket, 2);
    /// assert!(run.again("deadlock").await);
    /// assert!(!run.again("deadlock").await);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn again(&mut self, reason: &'static str) -> bool {
        if self.tries >= self.max_attempts {
            return false;
        }
        record_retry(self.store, reason);
        tokio::time::sleep(retry_backoff(self.tries)).await;
        self.tries += 1;
        true
    }

    /// Records the run's `outcome` ([`record`], in its span) and returns it.
    ///
    /// # Examples
    ///
    /// ```
    /// # let ticket: zkfence::fence::FenceTicket = "5@4294967301::/locks/a".parse().unwrap();
    /// let run = zkfence::fence::author::Run::new("my-store", "claim", &ticket, 1);
    /// let outcome: Result<(), zkfence::fence::FenceError<std::io::Error>> = run.finish(Ok(()));
    /// assert!(outcome.is_ok());
    /// ```
    pub fn finish<T, E: fmt::Display>(
        self,
        outcome: Result<T, FenceError<E>>,
    ) -> Result<T, FenceError<E>> {
        let _entered = self.span.enter();
        record(self.store, self.started, &outcome);
        outcome
    }
}

/// For fence implementations: records a fenced write's `outcome` in the `zkfence_fence_*`
/// metrics ([`FENCE_WRITES_TOTAL`](crate::metrics::FENCE_WRITES_TOTAL),
/// [`FENCE_WRITE_DURATION_SECONDS`](crate::metrics::FENCE_WRITE_DURATION_SECONDS)) under the
/// label `store`, and logs a refusal at `warn` (a newer holder exists, or the data looks
/// reset) and other failures at `debug`.
///
/// # Examples
///
/// ```
/// let started = std::time::Instant::now();
/// let outcome: Result<(), zkfence::fence::FenceError<std::io::Error>> = Ok(());
/// zkfence::fence::author::record("my-store", started, &outcome);
/// ```
pub fn record<T, E: fmt::Display>(
    store: &'static str,
    started: std::time::Instant,
    outcome: &Result<T, FenceError<E>>,
) {
    let label = match outcome {
        Ok(_) => "committed",
        Err(FenceError::Refused { .. }) => "refused",
        Err(FenceError::LockLost { .. }) => "lock_lost",
        Err(FenceError::InDoubt { .. }) => "in_doubt",
        Err(FenceError::Store(_) | FenceError::Invalid(_)) => "error",
    };
    let labels = [("store", store), ("outcome", label)];
    metrics::counter!(crate::metrics::FENCE_WRITES_TOTAL, &labels).increment(1);
    metrics::histogram!(crate::metrics::FENCE_WRITE_DURATION_SECONDS, &labels)
        .record(started.elapsed().as_secs_f64());
    match outcome {
        Err(err @ FenceError::Refused { .. }) => {
            tracing::warn!(store, cause = %err, "fenced write refused")
        }
        Err(err) => tracing::debug!(store, cause = %err, "fenced write failed"),
        Ok(_) => tracing::debug!(store, "fenced write committed"),
    }
}

/// For fence implementations: counts a retry of a fenced write in
/// [`FENCE_RETRIES_TOTAL`](crate::metrics::FENCE_RETRIES_TOTAL), by `store` and `reason`.
///
/// # Examples
///
/// ```
/// zkfence::fence::author::record_retry("my-store", "raced");
/// ```
pub fn record_retry(store: &'static str, reason: &'static str) {
    let labels = [("store", store), ("reason", reason)];
    metrics::counter!(crate::metrics::FENCE_RETRIES_TOTAL, &labels).increment(1);
}

/// For fence implementations: the pause before retrying a fenced write for the `attempt`th
/// time (1 for the first retry): 5 ms doubling up to 160 ms, plus a random part of as much
/// again, so that writers that conflicted do not retry in step.
///
/// # Examples
///
/// ```
/// let pause = zkfence::fence::author::retry_backoff(1);
/// assert!(pause >= std::time::Duration::from_millis(10) && pause < std::time::Duration::from_millis(20));
/// ```
pub fn retry_backoff(attempt: u32) -> std::time::Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let base = 5u64 << attempt.min(5);
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(attempt);
    std::time::Duration::from_millis(base + random.finish() % base)
}

/// For fence implementations: the first error of type `T` in `err`'s `source()` chain,
/// `err` itself included; how a fence finds its store's error (a serialization failure to
/// retry) inside the error type of a caller's closure.
///
/// # Examples
///
/// ```
/// #[derive(Debug)]
/// struct Mine(std::io::Error);
/// impl std::fmt::Display for Mine {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("mine") }
/// }
/// impl std::error::Error for Mine {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> { Some(&self.0) }
/// }
/// let err = Mine(std::io::Error::other("deep"));
/// assert!(zkfence::fence::author::find_cause::<std::io::Error>(&err).is_some());
/// ```
pub fn find_cause<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}
