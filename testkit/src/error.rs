//! [`StartError`]: why a throwaway server could not be started.

use std::time::Duration;

/// Why a local server could not be started.
///
/// # Examples
///
/// ```
/// let err = zkfence_testkit::StartError::NotInstalled(zkfence_testkit::INSTALL_HINT);
/// assert!(err.to_string().contains("ZOOKEEPER_HOME"));
/// ```
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// ZooKeeper's jars or a Java runtime were not found; the message says what to install
    /// ([`INSTALL_HINT`](crate::INSTALL_HINT), [`JAVA_HINT`](crate::JAVA_HINT)).
    #[error("{0}")]
    NotInstalled(&'static str),
    /// Running `bash`/`java`, or writing the temp dir, failed.
    #[error("could not start zookeeper: {0}")]
    Io(#[from] std::io::Error),
    /// The server did not answer in time; the message carries the end of its log.
    #[error("zookeeper did not start within {timeout:?}; last log lines:\n{log}")]
    NotServing {
        /// How long we waited.
        timeout: Duration,
        /// The end of the server log.
        log: String,
    },
}
