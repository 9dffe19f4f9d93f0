//! What every fence implementation runs its operations through: [`drive_on`] and
//! [`drive_once`] (the span, the retries, the metrics), and the pieces they are made of, for
//! fences that need them apart.

use std::fmt;
use std::future::Future;
use std::time::Instant;

use tracing::Instrument as _;

use super::error::FenceError;
use super::ticket::FenceTicket;

/// What one try of a fenced operation failed with: an error for good, or one that running the
/// whole operation again may cure (the store rolled it back: a serialization failure, a
/// deadlock), with the reason, the `reason` label of
/// [`FENCE_RETRIES_TOTAL`](crate::metrics::FENCE_RETRIES_TOTAL).
///
/// # Examples
///
/// ```
/// use zkfence::fence::FenceError;
/// use zkfence::fence::author::TryFailure;
/// let failed: TryFailure<std::io::Error> = TryFailure::Retry("deadlock", FenceError::Store(std::io::Error::other("1213")));
/// assert!(matches!(failed.into_error(), FenceError::Store(_)));
/// ```
#[derive(Debug)]
pub enum TryFailure<E> {
    /// Failed for good: the operation's error.
    Done(FenceError<E>),
    /// Failed in a way another try may cure; the error stands if no try is left.
    Retry(&'static str, FenceError<E>),
}

impl<E> TryFailure<E> {
    /// The error, retryable or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::fence::FenceError;
    /// use zkfence::fence::author::TryFailure;
    /// let done: TryFailure<std::io::Error> = TryFailure::Done(FenceError::Store(std::io::Error::other("x")));
    /// assert!(matches!(done.into_error(), FenceError::Store(_)));
    /// ```
    pub fn into_error(self) -> FenceError<E> {
        match self {
            TryFailure::Done(err) | TryFailure::Retry(_, err) => err,
        }
    }

    /// The same failure, with the store's error converted by `f` (as
    /// [`FenceError::map_store`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence::fence::FenceError;
    /// use zkfence::fence::author::TryFailure;
    /// let failed: TryFailure<&str> = TryFailure::Retry("deadlock", FenceError::Store("1213"));
    /// let wide: TryFailure<String> = failed.map_store(str::to_owned);
    /// assert!(matches!(wide, TryFailure::Retry("deadlock", FenceError::Store(_))));
    /// ```
    pub fn map_store<F>(self, f: impl FnOnce(E) -> F) -> TryFailure<F> {
        match self {
            TryFailure::Done(err) => TryFailure::Done(err.map_store(f)),
            TryFailure::Retry(reason, err) => TryFailure::Retry(reason, err.map_store(f)),
        }
    }
}

impl<E> From<FenceError<E>> for TryFailure<E> {
    fn from(err: FenceError<E>) -> Self {
        TryFailure::Done(err)
    }
}

/// The fenced operations' retry loop, written once for every zkfence fence: runs `op` (on
/// `store`, for `ticket`) in its `fence` span (fields `store`, `op`, `scope`,
/// `fencing_token`, and `path` and `session_id` for a try to record where they apply), one try
/// (`once`) after another, up to `max_tries`, while it fails with [`TryFailure::Retry`]
/// (each retry counted, [`record_retry`], after [`retry_backoff`]), and the outcome recorded
/// ([`record`]). `on` is what every try works on and the next needs again (the store's
/// connection, the caller's work): each try takes it and hands it back with its outcome, as
/// the SQL fences' transactions do.
///
/// # Errors
///
/// The last try's error.
///
/// # Cancel safety
///
/// As cancel safe as `once`: dropping the future drops the try under way (and `on` with it),
/// or the backoff before the next one.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// use zkfence::fence::{FenceError, FenceTicket};
/// use zkfence::fence::author::{drive_on, TryFailure};
/// let ticket: FenceTicket = "5@4294967301::/locks/a".parse()?;
/// let mut conn: Vec<u32> = Vec::new(); // what each try borrows
/// let outcome: Result<usize, FenceError<std::io::Error>> =
///     drive_on("my-store", "write", &ticket, 3, &mut conn, |conn| async move {
///         conn.push(1);
///         let outcome = match conn.len() {
///             1 => Err(TryFailure::Retry("deadlock", FenceError::Store(std::io::Error::other("1213")))),
///             tries => Ok(tries),
///         };
///         (conn, outcome)
///     })
///     .await;
/// assert_eq!(outcome?, 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn drive_on<S, T, E, F, Fut>(
    store: &'static str,
    op: &'static str,
    ticket: &FenceTicket,
    max_tries: u32,
    mut on: S,
    mut once: F,
) -> Result<T, FenceError<E>>
where
    F: FnMut(S) -> Fut,
    Fut: Future<Output = (S, Result<T, TryFailure<E>>)>,
    E: fmt::Display,
{
    let mut operation = Operation::new(store, op, ticket, max_tries);
    let outcome = loop {
        let (back, outcome) = once(on).instrument(operation.span.clone()).await;
        on = back;
        match outcome {
            Ok(value) => break Ok(value),
            Err(TryFailure::Retry(reason, err)) => match operation.again(reason).await {
                true => continue,
                false => break Err(err),
            },
            Err(TryFailure::Done(err)) => break Err(err),
        }
    };
    operation.finish(outcome)
}

/// For fence implementations: runs `work`, a fenced operation made of one try (whatever it
/// retries inside, as an object store's races), in the operation's `fence` span, and records
/// its outcome: [`drive_on`] for an operation with nothing to carry from one try to the next
/// and no try to make again.
///
/// # Errors
///
/// `work`'s error.
///
/// # Cancel safety
///
/// As cancel safe as `work`: dropping the future drops it.
///
/// # Examples
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use zkfence::fence::{FenceError, FenceTicket};
/// let ticket: FenceTicket = "5@4294967301::/locks/a".parse()?;
/// let work = async { Ok::<u32, FenceError<std::io::Error>>(7) };
/// let outcome = zkfence::fence::author::drive_once("my-store", "write", &ticket, work).await;
/// assert_eq!(outcome?, 7);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn drive_once<T, E, Fut>(
    store: &'static str,
    op: &'static str,
    ticket: &FenceTicket,
    work: Fut,
) -> Result<T, FenceError<E>>
where
    Fut: Future<Output = Result<T, FenceError<E>>>,
    E: fmt::Display,
{
    let operation = Operation::new(store, op, ticket, 1);
    let outcome = work.instrument(operation.span.clone()).await;
    operation.finish(outcome)
}

/// One fenced operation under way ([`drive_on`]'s and [`drive_once`]'s): its span, when it started, and its tries.
#[derive(Debug)]
struct Operation {
    store: &'static str,
    started: Instant,
    span: tracing::Span,
    tries: u32,
    max_tries: u32,
}

impl Operation {
    /// An operation `op` on `store` for `ticket`, of at most `max_tries` tries.
    fn new(store: &'static str, op: &'static str, ticket: &FenceTicket, max_tries: u32) -> Self {
        let span = tracing::debug_span!(
            "fence",
            store,
            op,
            scope = ticket.scope(),
            fencing_token = %ticket.token(),
            path = tracing::field::Empty,
            session_id = tracing::field::Empty,
        );
        Operation {
            store,
            started: Instant::now(),
            span,
            tries: 1,
            max_tries: max_tries.max(1),
        }
    }

    /// After a try failed for `reason`, whether to make another: if tries remain,
    /// counts the retry ([`record_retry`]), waits [`retry_backoff`], and returns `true`.
    /// Dropped while it waits, the retry is counted and nothing else.
    async fn again(&mut self, reason: &'static str) -> bool {
        if self.tries >= self.max_tries {
            return false;
        }
        record_retry(self.store, reason);
        tokio::time::sleep(retry_backoff(self.tries)).await;
        self.tries += 1;
        true
    }

    /// Records the operation's `outcome` ([`record`], in its span) and returns it.
    fn finish<T, E: fmt::Display>(
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

/// For fence implementations: the pause before the `retry`th retry of a fenced write (1 for
/// the first): 5 ms doubling up to 160 ms, plus a random part of as much again, so that
/// writers that conflicted do not retry in step.
///
/// # Examples
///
/// ```
/// let pause = zkfence::fence::author::retry_backoff(1);
/// assert!(pause >= std::time::Duration::from_millis(10) && pause < std::time::Duration::from_millis(20));
/// ```
pub fn retry_backoff(retry: u32) -> std::time::Duration {
    use std::hash::{BuildHasher as _, Hasher as _};
    let base = 5u64 << retry.min(5);
    let mut random = std::collections::hash_map::RandomState::new().build_hasher();
    random.write_u32(retry);
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
