//! [`start_local_zookeeper`]: a throwaway local ZooKeeper for a command-line tool that starts
//! one itself (`zkfence demo` without `--connect`, `zkfence-bench`).

use crate::error::StartError;
use crate::server::LocalZooKeeper;

/// The exit status of a server that could not be started (sysexits' `EX_UNAVAILABLE`).
const EXIT_UNAVAILABLE: u8 = 69;
/// The exit status of a starter that failed inside (sysexits' `EX_SOFTWARE`).
const EXIT_FAILURE: u8 = 70;

/// Starts a throwaway local ZooKeeper with `start` (one of [`LocalZooKeeper`]'s starters,
/// which block until the server serves) on tokio's blocking pool, for a command-line tool: or
/// says why not on one line of stderr, after `program`'s name, and gives the exit status to end
/// with, sysexits' `EX_UNAVAILABLE` (69) when the server could not be started, `EX_SOFTWARE`
/// (70) when `start` panicked.
///
/// # Errors
///
/// The exit status, once the reason is printed.
///
/// # Cancel safety
///
/// Dropped while it waits, the server still starts in the background and is stopped as it
/// comes up (its [`LocalZooKeeper`] dropped there).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> u8 {
/// let zk = match zkfence_testkit::start_local_zookeeper("my-tool", zkfence_testkit::LocalZooKeeper::start).await {
///     Ok(zk) => zk,
///     Err(code) => return code,
/// };
/// println!("ZooKeeper is up at {}", zk.addr());
/// # 0 }
/// ```
pub async fn start_local_zookeeper(
    program: &str,
    start: impl FnOnce() -> Result<LocalZooKeeper, StartError> + Send + 'static,
) -> Result<LocalZooKeeper, u8> {
    let started = match tokio::task::spawn_blocking(start).await {
        Ok(started) => started.map_err(|err| (err.to_string(), EXIT_UNAVAILABLE)),
        Err(err) => Err((err.to_string(), EXIT_FAILURE)),
    };
    started.map_err(|(message, code)| {
        eprintln!("{program}: {message}");
        code
    })
}
