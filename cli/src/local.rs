//! A throwaway local ZooKeeper (Debian's package, through the test kit) for `zkfence demo`
//! without `--connect`.

use crate::exit::{EXIT_FAILURE, EXIT_UNAVAILABLE};

/// Starts a throwaway local ZooKeeper (Debian's package) with `start` (one of
/// `LocalZooKeeper`'s starters), or says why not on one line.
pub(crate) async fn start_local_zookeeper(
    start: impl FnOnce() -> Result<zkfence_testkit::LocalZooKeeper, zkfence_testkit::StartError>
        + Send
        + 'static,
) -> Result<zkfence_testkit::LocalZooKeeper, u8> {
    let started = match tokio::task::spawn_blocking(start).await {
        Ok(started) => started.map_err(|err| (err.to_string(), EXIT_UNAVAILABLE)),
        Err(err) => Err((err.to_string(), EXIT_FAILURE)),
    };
    started.map_err(|(message, code)| {
        eprintln!("zkfence: {message}");
        code
    })
}
