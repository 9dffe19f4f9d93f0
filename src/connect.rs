//! Connecting a new session whose creation anchors its first lease.

use std::future::Future;

use zookeeper_client as zk;

use crate::watchdog::{clock, session_began};

/// Connects a new ZooKeeper session with `connector`, through `connect` (which calls
/// [`Connector::connect`](zk::Connector::connect) or `secure_connect` on the connector it is
/// given), and tells zkfence when the connect began.
///
/// A session's first lease needs a proof that the ensemble heard from the session lately. A
/// session created here has one: its creation is committed by the leader after the connect was
/// sent, so the first acquire soon after it is granted at once. Any other client works too,
/// and its process's first acquire waits for a paired proof instead (about half the tick time
/// plus a margin; the lease module's "A new session's first lease" says why).
///
/// Nothing is anchored for a connector that resumes a session (`with_session`) or allows a
/// read-only one (`with_readonly(true)`): neither proves what a new session's creation does.
/// `connect` must connect with the connector it is given; another one would anchor a session
/// on a connect this function did not see begin.
///
/// # Errors
///
/// What `connect` returns.
///
/// # Cancel safety
///
/// Cancel safe: dropping it drops `connect`'s future, and nothing is recorded.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zookeeper_client::Error> {
/// use std::time::Duration;
/// use zookeeper_client::Client;
///
/// let connector = Client::connector().with_session_timeout(Duration::from_secs(10));
/// let client = zkfence::connect(connector, |c| c.connect("127.0.0.1:2181")).await?;
/// # let _ = client; Ok(()) }
/// ```
pub async fn connect<F, Fut>(connector: zk::Connector, connect: F) -> Result<zk::Client, zk::Error>
where
    F: FnOnce(zk::Connector) -> Fut,
    Fut: Future<Output = Result<zk::Client, zk::Error>>,
{
    let new_session = creates_a_session(&connector);
    let began = clock::now();
    let client = connect(connector).await?;
    if new_session && client.state() == zk::SessionState::SyncConnected {
        session_began(client.session_id().0, began, client.session_timeout());
    }
    Ok(client)
}

/// Whether `connector` creates a new read-write session: none given to resume, read-only not
/// allowed. Its fields are private, so this reads its `Debug` form; a form this does not
/// recognise reads as "no", which costs a first acquire its wait and nothing else (a test pins
/// the form of the `zookeeper-client` in use).
fn creates_a_session(connector: &zk::Connector) -> bool {
    let form = format!("{connector:?}");
    form.contains("session: None") && form.contains("readonly: false")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_connector_creates_a_session_and_a_read_only_one_does_not() {
        assert!(creates_a_session(&zk::Client::connector()));
        let tuned = zk::Client::connector()
            .with_session_timeout(std::time::Duration::from_secs(4))
            .with_fail_eagerly();
        assert!(creates_a_session(&tuned));
        assert!(!creates_a_session(
            &zk::Client::connector().with_readonly(true)
        ));
    }
}
