//! The lock kinds as Python sees them: the native side of `zkfence.FencedLock`,
//! `FencedRwLock`, `FencedSemaphore` and `FencedElection`, each an acquire (blocking or for
//! asyncio) that returns a [`Hold`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use zkfence::{
    Acquire as _, FencedElection, FencedLock, FencedRwLock, FencedSemaphore, LockOptions, Shared,
};

use crate::client::Client;
use crate::hold::{seconds, Hold, Releaser};
use crate::{bridge, errors};

/// What a [`Lock`] acquires.
#[derive(Clone)]
enum Kind {
    /// A lock, or a read/write lock's writer.
    Exclusive(FencedLock, &'static str),
    /// A read/write lock's reader.
    Read(FencedLock<Shared>),
    /// A semaphore's permit.
    Permit(Arc<FencedSemaphore>),
    /// An election's leadership, campaigning with the data.
    Leader(FencedElection, Vec<u8>),
}

/// How long an acquire waits.
#[derive(Clone, Copy)]
enum Patience {
    Forever,
    Never,
    For(Duration),
}

/// A future that yields a hold, or `None` when the wait ended without one.
type Acquiring = Pin<Box<dyn Future<Output = zkfence::Result<Option<Releaser>>> + Send>>;

impl Kind {
    fn path(&self) -> String {
        match self {
            Kind::Exclusive(l, _) => l.path().to_owned(),
            Kind::Read(l) => l.path().to_owned(),
            Kind::Permit(s) => s.path().to_owned(),
            Kind::Leader(e, _) => e.path().to_owned(),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Kind::Exclusive(_, label) => label,
            Kind::Read(_) => "read",
            Kind::Permit(_) => "permit",
            Kind::Leader(..) => "leader",
        }
    }

    /// The acquire, as a future that owns what it needs.
    fn acquiring(self, patience: Patience) -> Acquiring {
        macro_rules! acquire {
            ($lock:expr, $wrap:path) => {{
                let lock = $lock;
                Box::pin(async move {
                    let guard = match patience {
                        Patience::Forever => Some(lock.acquire().await?),
                        Patience::Never => lock.try_acquire().await?,
                        Patience::For(t) => lock.acquire_timeout(t).await?,
                    };
                    Ok(guard.map($wrap))
                })
            }};
        }
        match self {
            Kind::Exclusive(lock, _) => acquire!(lock, Releaser::Exclusive),
            Kind::Read(lock) => acquire!(lock, Releaser::Shared),
            Kind::Permit(semaphore) => acquire!(semaphore, Releaser::Shared),
            Kind::Leader(election, data) => Box::pin(async move {
                let leadership = match patience {
                    Patience::Forever => Some(election.campaign(data).await?),
                    Patience::Never => election.campaign_timeout(data, Duration::ZERO).await?,
                    Patience::For(t) => election.campaign_timeout(data, t).await?,
                };
                Ok(leadership.map(Releaser::Leader))
            }),
        }
    }
}

/// A lock of any kind (`zkfence.FencedLock` and its siblings wrap it).
#[pyclass(frozen, module = "zkfence._zkfence")]
pub(crate) struct Lock {
    kind: Kind,
}

impl Lock {
    /// The acquire's future and how it is reported: a hold, `None` after `try`, or
    /// `Timeout`.
    fn start(
        &self,
        timeout: Option<f64>,
        try_only: bool,
    ) -> PyResult<impl Future<Output = PyResult<Option<Hold>>> + Send + 'static> {
        let limit = seconds(timeout)?;
        let patience = match (try_only, limit) {
            (true, _) => Patience::Never,
            (false, None) => Patience::Forever,
            (false, Some(t)) => Patience::For(t),
        };
        let (path, label) = (self.kind.path(), self.kind.label());
        let acquiring = self.kind.clone().acquiring(patience);
        Ok(async move {
            match acquiring.await.map_err(errors::from_lib)? {
                Some(releaser) => Ok(Some(Hold::new(releaser, label))),
                None if try_only => Ok(None),
                None => Err(errors::timeout(&path, timeout.unwrap_or_default())),
            }
        })
    }
}

#[pymethods]
impl Lock {
    /// A lock at `path`.
    #[staticmethod]
    fn mutex(client: &Client, path: String) -> PyResult<Lock> {
        let lock = FencedLock::new(client.client.clone(), path, LockOptions::default())
            .map_err(errors::from_lib)?;
        Ok(Lock {
            kind: Kind::Exclusive(lock, "lock"),
        })
    }

    /// A read/write lock at `path`: its reader and its writer.
    #[staticmethod]
    fn rwlock(client: &Client, path: String) -> PyResult<(Lock, Lock)> {
        let rw = FencedRwLock::new(client.client.clone(), path, LockOptions::default())
            .map_err(errors::from_lib)?;
        Ok((
            Lock {
                kind: Kind::Read(rw.reader().clone()),
            },
            Lock {
                kind: Kind::Exclusive(rw.writer().clone(), "write"),
            },
        ))
    }

    /// A semaphore of `permits` at `path`.
    #[staticmethod]
    fn semaphore(client: &Client, path: String, permits: u32) -> PyResult<Lock> {
        let semaphore =
            FencedSemaphore::new(client.client.clone(), path, permits, LockOptions::default())
                .map_err(errors::from_lib)?;
        Ok(Lock {
            kind: Kind::Permit(Arc::new(semaphore)),
        })
    }

    /// An election at `path`, whose candidates campaign with `data`.
    #[staticmethod]
    #[pyo3(signature = (client, path, data = Vec::new()))]
    fn election(client: &Client, path: String, data: Vec<u8>) -> PyResult<Lock> {
        let election = FencedElection::new(client.client.clone(), path, LockOptions::default())
            .map_err(errors::from_lib)?;
        Ok(Lock {
            kind: Kind::Leader(election, data),
        })
    }

    /// The lock path.
    #[getter]
    fn path(&self) -> String {
        self.kind.path()
    }

    /// Acquires, blocking with the GIL released: a hold; `None` with `try_only` when another
    /// holds it; `Timeout` after `timeout` seconds.
    #[pyo3(signature = (timeout = None, try_only = false))]
    fn acquire(
        &self,
        py: Python<'_>,
        timeout: Option<f64>,
        try_only: bool,
    ) -> PyResult<Option<Hold>> {
        let acquiring = self.start(timeout, try_only)?;
        bridge::wait(py, acquiring)
    }

    /// The same acquire for asyncio: an awaitable. Cancelling it leaves the queue.
    #[pyo3(signature = (timeout = None, try_only = false))]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
        try_only: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let acquiring = self.start(timeout, try_only)?;
        bridge::awaitable(py, acquiring)
    }

    fn __repr__(&self) -> String {
        format!("<zkfence {} at {}>", self.kind.label(), self.kind.path())
    }
}
