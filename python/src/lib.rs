//! The native module of the `zkfence` Python package (`zkfence._zkfence`): the Rust library's
//! locks, their watchdog and their tokens, driven from Python.
//!
//! Every lock call runs on one Tokio runtime the module keeps for the process, so a hold's
//! watchdog keeps watching while Python code runs (or is frozen by the GIL, or by a signal):
//! the blocking calls release the GIL and wake every 50 ms to let Python's signal handlers run
//! (Ctrl-C stops an `acquire`); the async calls return an `asyncio` future that the runtime
//! resolves on the caller's event loop. The Python layer (`zkfence/__init__.py`) wraps these
//! in the package's API: `connect`, the lock kinds, `with`/`async with`, and the exceptions.
//!
//! ```text
//! >>> import zkfence
//! >>> zk = zkfence.connect("127.0.0.1:2181", session_timeout=10.0)
//! >>> with zkfence.FencedLock(zk, "/locks/orders").acquire() as guard:
//! ...     print(guard.token, guard.ticket)
//! ```

use pyo3::prelude::*;

mod bridge;
mod client;
mod errors;
mod hold;
mod locks;

/// What installs `store`'s fence (`postgres`, `mysql`, `redis`): the PostgreSQL script (in
/// `schema` when given), the MySQL/MariaDB script (its statements between `DELIMITER //` and
/// `DELIMITER ;`, each ended by a `//` line), the Redis function library.
#[pyfunction]
#[pyo3(signature = (store, schema = None))]
fn install_text(store: &str, schema: Option<String>) -> PyResult<String> {
    match store {
        "postgres" => {
            let fence = zkfence_postgres::PostgresFence::new();
            let fence = match schema {
                Some(schema) => fence
                    .with_schema(schema)
                    .map_err(|e| errors::usage(e.to_string()))?,
                None => fence,
            };
            Ok(fence.install_sql())
        }
        "mysql" => Ok(zkfence_mysql::MySqlFence::new().install_sql()),
        "redis" => Ok(zkfence_redis::RedisFence::new().library()),
        other => Err(errors::usage(format!(
            "no fence for {other:?}: give postgres, mysql or redis"
        ))),
    }
}

/// The Redis fence's claim and write scripts, for `EVAL`/`EVALSHA`.
#[pyfunction]
fn redis_scripts() -> (&'static str, &'static str) {
    (zkfence_redis::CLAIM_SCRIPT, zkfence_redis::WRITE_SCRIPT)
}

/// The module: `Client`, `connect`, the lock kinds and the hold.
#[pymodule]
fn _zkfence(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::Client>()?;
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_function(wrap_pyfunction!(install_text, m)?)?;
    m.add_function(wrap_pyfunction!(redis_scripts, m)?)?;
    m.add_class::<locks::Lock>()?;
    m.add_class::<hold::Hold>()?;
    m.add_class::<bridge::Canceller>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
