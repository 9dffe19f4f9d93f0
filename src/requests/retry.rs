//! Requests across broken connections: telling a lost outcome from a server's answer, waiting
//! for the reconnect, and one retry loop for requests that are safe to repeat.

use std::future::Future;
use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};

/// Runs `request` until a server answers it, reconnecting across broken connections (whose
/// outcome is unknown, so the request is sent again). `Ok(answer)` is the server's answer, an
/// error included; `Err` means the session ended first.
///
/// Only for requests that are safe to repeat (reads, and writes whose repetition is detected,
/// such as a delete meeting `NoNode`).
pub(crate) async fn retrying<T, F, Fut>(
    client: &zk::Client,
    mut request: F,
) -> Result<std::result::Result<T, zk::Error>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, zk::Error>>,
{
    let mut attempt = 0;
    loop {
        match request().await {
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            answer => return Ok(answer),
        }
    }
}

/// Whether a request that failed with `err` reached a server, which then saw the session
/// (errors `zookeeper-client` makes up itself, without a server, do not count).
pub(crate) fn answered_by_server(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::NoNode
            | zk::Error::NoAuth
            | zk::Error::BadVersion
            | zk::Error::NodeExists
            | zk::Error::NotEmpty
            | zk::Error::NoChildrenForEphemerals
            | zk::Error::InvalidAcl
            | zk::Error::QuotaExceeded
            | zk::Error::RuntimeInconsistent
    )
}

/// Whether a request failed because the connection broke, so its outcome is unknown and it
/// may be retried once the client has reconnected. `zookeeper-client` 0.11 reports a clean
/// close as `ConnectionLoss`, but socket errors and its own "no response from connection"
/// timeout as `Custom`; all of them mean the same thing here.
pub(crate) fn is_connection_error(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// Waits until the client is connected again after a ConnectionLoss, or fails once the
/// session is over. A short pause first keeps a retry loop from spinning while the client has
/// not yet noticed the disconnect.
pub(crate) async fn await_reconnect(client: &zk::Client, attempt: &mut u32) -> Result<()> {
    let pause = Duration::from_millis(5u64 << (*attempt).min(5));
    *attempt += 1;
    tokio::time::sleep(pause).await;
    let mut states = client.state_watcher();
    loop {
        let state = states.state();
        if let Some(err) = Error::from_session_state(state, client.session_id()) {
            return Err(err);
        }
        if state == zk::SessionState::Disconnected {
            states.changed().await;
        } else {
            return Ok(());
        }
    }
}
