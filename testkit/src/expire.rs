//! [`expire_session`]: ends a client's session on the server, with the client's own
//! credentials, as an operator or a partition long enough would.

use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

/// Why a session could not be expired.
///
/// # Examples
///
/// ```
/// let err = zkfence_testkit::ExpireError { session: 0x1234, last: "refused".into() };
/// assert!(err.to_string().contains("0x1234"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "session {session:#x} was still alive on the server after 30 s of closing it (last: {last})"
)]
pub struct ExpireError {
    /// The session id.
    pub session: i64,
    /// The last attempt's failure.
    pub last: String,
}

/// Expires `client`'s session on the server: attaches a second connection to the session with
/// the client's own id and password (what Curator's `KillSession` does), and closes it. The
/// server ends the session and deletes its ephemeral nodes (its locks) at once; `client` hears
/// `Expired` when it next reaches a server. Returns once the server refuses the session (a
/// fresh attach is answered "expired"); `hosts` is what `client` connected to (a chroot
/// suffix is fine).
///
/// While the close is on its way `client` may reconnect and take the session back; the close is
/// then sent again, for up to 30 s.
///
/// # Errors
///
/// [`ExpireError`] when the session still lives after 30 s (the servers unreachable, say).
///
/// # Cancel safety
///
/// Dropping the future may leave the session closed or not; nothing else.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zookeeper_client::Client) -> Result<(), zkfence_testkit::ExpireError> {
/// zkfence_testkit::expire_session(&client, "127.0.0.1:2181").await?;
/// // Every lock the client held is free for the next waiter now.
/// # Ok(()) }
/// ```
pub async fn expire_session(client: &zk::Client, hosts: &str) -> Result<(), ExpireError> {
    let session = client.session().clone();
    let id = session.id().0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::from("no attempt");
    let mut pause = Duration::from_millis(10);
    while Instant::now() < deadline {
        let attach = zk::Client::connector()
            .with_session(session.clone())
            .with_session_timeout(client.session_timeout())
            .connect(hosts);
        match tokio::time::timeout(Duration::from_secs(5), attach).await {
            Err(_) => last = "no answer within 5 s".into(),
            Ok(Err(zk::Error::SessionExpired)) => return Ok(()),
            Ok(Err(err)) => last = err.to_string(),
            // Dropping the last handle closes the session; the next attach checks it.
            Ok(Ok(attached)) => {
                drop(attached);
                last = "closed; the owner may have taken it back".into();
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
    Err(ExpireError { session: id, last })
}
