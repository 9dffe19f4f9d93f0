//! A hold as Python sees it: the native side of `zkfence.Guard` (its token, ticket, loss flag,
//! check and release).

use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use zkfence::{Held, Leadership, LockGuard, LossReason, Shared};

use crate::{bridge, errors};

/// The handle of a hold: exclusive (a lock, a write lock, a leadership) or shared (a read lock,
/// a semaphore's permit). Shared holds have no ticket: their token is not unique to one holder.
#[derive(Clone)]
pub(crate) enum AnyHeld {
    Exclusive(Held),
    Shared(Held<Shared>),
}

macro_rules! each {
    ($held:expr, $h:ident => $body:expr) => {
        match $held {
            AnyHeld::Exclusive($h) => $body,
            AnyHeld::Shared($h) => $body,
        }
    };
}

impl AnyHeld {
    fn check(&self) -> zkfence::Result<()> {
        each!(self, h => h.check())
    }

    fn lock_path(&self) -> String {
        each!(self, h => h.lock_path().to_owned())
    }

    fn cancelled(&self) -> tokio_util::sync::CancellationToken {
        each!(self, h => h.cancellation_token())
    }

    /// Why the hold ended, once it has. The check itself notices a lapsed lease (before the
    /// watchdog's timer may have: a process resumed from a pause checks first).
    fn reason(&self) -> Option<LossReason> {
        match self.check() {
            Err(zkfence::Error::LockLost(reason)) => Some(reason),
            _ if self.cancelled().is_cancelled() => Some(LossReason::Released),
            _ => None,
        }
    }
}

/// What releases the hold: the guard, or the leadership (which resigns).
pub(crate) enum Releaser {
    Exclusive(LockGuard),
    Shared(LockGuard<Shared>),
    Leader(Leadership),
}

impl Releaser {
    async fn release(self) -> zkfence::Result<()> {
        match self {
            Releaser::Exclusive(g) => g.release().await,
            Releaser::Shared(g) => g.release().await,
            Releaser::Leader(l) => l.resign().await,
        }
    }
}

/// A hold (`zkfence.Guard` wraps it).
#[pyclass(frozen, module = "zkfence._zkfence")]
pub(crate) struct Hold {
    held: AnyHeld,
    releaser: Mutex<Option<Releaser>>,
    kind: &'static str,
}

impl Hold {
    pub(crate) fn new(releaser: Releaser, kind: &'static str) -> Hold {
        let held = match &releaser {
            Releaser::Exclusive(g) => AnyHeld::Exclusive(g.held()),
            Releaser::Shared(g) => AnyHeld::Shared(g.held()),
            Releaser::Leader(l) => AnyHeld::Exclusive(Held::clone(l)),
        };
        // The loss flag's token exists from the start: the watchdog cancels it on a loss.
        held.cancelled();
        Hold {
            held,
            releaser: Mutex::new(Some(releaser)),
            kind,
        }
    }

    /// The releaser, taken once; `None` after a release.
    fn take(&self) -> Option<Releaser> {
        self.releaser.lock().ok().and_then(|mut r| r.take())
    }
}

impl Drop for Hold {
    /// A hold dropped unreleased (its Python object collected) is released the way the
    /// library's guard releases on drop: by a task on the runtime, whose context the drop
    /// needs (Python collects on its own threads).
    fn drop(&mut self) {
        let _context = bridge::runtime().enter();
        drop(self.take());
    }
}

#[pymethods]
impl Hold {
    /// The fencing token: the lock node's sequence and epoch, as an int that only grows
    /// across holders.
    #[getter]
    fn token(&self) -> i64 {
        each!(&self.held, h => h.token().as_i64())
    }

    /// The token's text form, `<sequence>@<zxid>`.
    #[getter]
    fn token_text(&self) -> String {
        each!(&self.held, h => h.token().to_string())
    }

    /// The lock path: the fences' scope.
    #[getter]
    fn scope(&self) -> String {
        self.held.lock_path()
    }

    /// The hold's node.
    #[getter]
    fn node(&self) -> String {
        each!(&self.held, h => h.node_path().to_owned())
    }

    /// The session that holds it (hex).
    #[getter]
    fn session_id(&self) -> String {
        each!(&self.held, h => format!("{:#x}", h.session_id().0))
    }

    /// `lock`, `read`, `write`, `permit` or `leader`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// `(scope, token, text)` for a fence: `None` for a shared hold, whose token is not its
    /// own.
    #[getter]
    fn ticket(&self) -> Option<(String, i64, String)> {
        match &self.held {
            AnyHeld::Exclusive(h) => {
                let ticket = h.ticket();
                Some((
                    ticket.scope().to_owned(),
                    ticket.token().as_i64(),
                    ticket.to_string(),
                ))
            }
            AnyHeld::Shared(_) => None,
        }
    }

    /// Seconds until the lease lapses unless the session proves itself alive meanwhile.
    #[getter]
    fn lease_remaining(&self) -> f64 {
        let deadline = each!(&self.held, h => h.lease_deadline());
        deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .as_secs_f64()
    }

    /// Whether the hold has ended (lost, or released).
    fn is_lost(&self) -> bool {
        self.held.reason().is_some()
    }

    /// Why it ended (`session_expired`, `lease_expired`, `released`, ...); `None` while held.
    fn reason(&self) -> Option<&'static str> {
        self.held.reason().map(|r| r.as_str())
    }

    /// Raises `LockLost` if the hold has ended (`ZkfenceError` while it is in jeopardy).
    fn check(&self) -> PyResult<()> {
        match self.held.reason() {
            Some(reason) => Err(errors::lost(reason, &self.held.lock_path())),
            None => self.held.check().map_err(errors::from_lib),
        }
    }

    /// Blocks until the hold ends or `timeout` seconds pass (`None`: no limit), the GIL
    /// released; whether it ended.
    #[pyo3(signature = (timeout = None))]
    fn wait_lost(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        if self.held.reason().is_some() {
            return Ok(true);
        }
        let cancelled = self.held.cancelled();
        let limit = seconds(timeout)?;
        bridge::wait(py, async move {
            match limit {
                Some(limit) => Ok(tokio::time::timeout(limit, cancelled.cancelled())
                    .await
                    .is_ok()),
                None => {
                    cancelled.cancelled().await;
                    Ok(true)
                }
            }
        })
    }

    /// An `asyncio` future that resolves to the reason when the hold ends.
    fn lost_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let held = self.held.clone();
        bridge::awaitable(py, async move {
            held.cancelled().cancelled().await;
            Ok(held.reason().unwrap_or(LossReason::Released).as_str())
        })
    }

    /// Releases the hold (deletes its node), blocking; a second release does nothing.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        let Some(releaser) = self.take() else {
            return Ok(());
        };
        bridge::wait(py, async move {
            releaser.release().await.map_err(errors::from_lib)
        })
    }

    /// Releases the hold from asyncio: an awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let releaser = self.take();
        bridge::awaitable(py, async move {
            match releaser {
                Some(releaser) => releaser.release().await.map_err(errors::from_lib),
                None => Ok(()),
            }
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<zkfence hold {} of {} token={} node={}>",
            self.kind,
            self.held.lock_path(),
            self.token(),
            self.node()
        )
    }
}

/// A timeout in seconds from Python (`None`: no limit), checked.
pub(crate) fn seconds(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if (0.0..1e9).contains(&t) => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(errors::usage(format!(
            "timeout must be None or a number of seconds from 0, not {t}"
        ))),
    }
}
