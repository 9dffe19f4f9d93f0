//! Rust futures run on the module's runtime, awaited from Python two ways: blocking the calling
//! thread with the GIL released ([`wait`]), or as an `asyncio` future of the running event
//! loop ([`awaitable`]).

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt as _;

/// The process's runtime: every ZooKeeper session, watchdog and acquire of the module runs on
/// it, on two threads of its own, whatever Python's threads do.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("zkfence")
            .enable_all()
            .build()
            .expect("zkfence: cannot start the runtime's threads")
    })
}

/// How often a blocked call wakes to let Python run its signal handlers (a Ctrl-C).
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// Runs `fut` to its end on this thread (the runtime's `block_on`, so the reply's wake-up
/// comes straight here rather than through a task and a channel), the GIL released. Every 50 ms
/// it takes the GIL back to let Python run its signal handlers: one that raises (Ctrl-C's
/// `KeyboardInterrupt`) stops the wait and drops `fut`, which is how every cancel-safe call of
/// the library is cancelled.
pub(crate) fn wait<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let mut fut = Box::pin(fut);
    let outcome = loop {
        // The timer is made inside `block_on`, in the runtime's context.
        let slice = async { tokio::time::timeout(SIGNAL_POLL, fut.as_mut()).await };
        match py.detach(|| runtime().block_on(slice)) {
            Ok(out) => break out,
            Err(_elapsed) => {
                if let Err(err) = py.check_signals() {
                    break Err(err);
                }
            }
        }
    };
    // Dropped in the runtime's context: a cancelled acquire's drop spawns its cleanup there.
    let _context = runtime().enter();
    drop(fut);
    outcome
}

/// Runs `fut` on the runtime and returns an `asyncio.Future` of the running loop that it
/// resolves (through `loop.call_soon_threadsafe`). Cancelling that future (a task's
/// cancellation) drops `fut` on the runtime.
pub(crate) fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let (target, on_loop) = (future.clone().unbind(), event_loop.unbind());
    let task = runtime().spawn(async move {
        let out = fut.await;
        Python::attach(|py| {
            let outcome = out.and_then(|value| value.into_py_any(py));
            let (ok, value) = match outcome {
                Ok(value) => (true, value),
                Err(err) => (false, err.into_value(py).into_any()),
            };
            // The package's helper sets the result unless the future was cancelled meanwhile.
            let resolve = py.import("zkfence._resolve")?.getattr("resolve")?;
            on_loop
                .bind(py)
                .call_method1("call_soon_threadsafe", (resolve, target, ok, value))
                .map(drop)
        })
        // A loop closed meanwhile has nobody left to tell.
        .ok();
    });
    let canceller = Canceller {
        task: Mutex::new(Some(task.abort_handle())),
    };
    future.call_method1("add_done_callback", (canceller,))?;
    Ok(future)
}

/// Called when an [`awaitable`]'s future is done: if it was cancelled, aborts its task.
#[pyclass(frozen, module = "zkfence._zkfence")]
pub(crate) struct Canceller {
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

#[pymethods]
impl Canceller {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        let cancelled: bool = future.call_method0("cancelled")?.extract()?;
        let task = self.task.lock().ok().and_then(|mut t| t.take());
        if let (true, Some(task)) = (cancelled, task) {
            task.abort();
        }
        Ok(())
    }
}
