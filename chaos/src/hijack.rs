//! [`expire_session`]: ends a worker's session from outside, knowing only its id. The chaos
//! suite's workers are processes of their own, so the suite has no client to borrow
//! credentials from: it derives the password, a session hijack that is fine in our own fault
//! injector and stays here (the published test kit's `expire_session` uses the client's own
//! credentials, as Curator's KillSession does).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

const SUPER_SECRET: i64 = 0xB341_5C00;
const OP_CLOSE_SESSION: i32 = -11;

/// The bytes `java.util.Random(seed).nextBytes(new byte[n])` produces.
fn java_random_bytes(seed: i64, n: usize) -> Vec<u8> {
    const MULT: u64 = 0x5_DEEC_E66D;
    const MASK: u64 = (1 << 48) - 1;
    let mut state = (seed as u64 ^ MULT) & MASK;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        state = state.wrapping_mul(MULT).wrapping_add(0xB) & MASK;
        let mut word = (state >> 16) as u32;
        for _ in 0..(n - out.len()).min(4) {
            out.push(word as u8);
            word >>= 8;
        }
    }
    out
}

/// The password the server gave session `id`.
fn session_password(id: i64) -> Vec<u8> {
    java_random_bytes(id ^ SUPER_SECRET, 16)
}

/// Expires another client's session from outside, as an operator or a chaos test would: it
/// reattaches to session `session` through one of `hosts` (a plain `host:port` list, no
/// chroot) and closes it. The server deletes the session's ephemeral nodes at once, and the
/// owner learns `SessionExpired` when it next reaches a server. Returns the server that
/// took the close.
///
/// ZooKeeper derives a session's password from its id (`ZooKeeperServer.generatePasswd`: a
/// `java.util.Random` seeded with `id ^ 0xB3415C00`), so the id is all it needs. The connect
/// and the close go out in one write: once the server moves the session to our connection,
/// the owner reconnects at once and would take it back before a second round trip.
///
/// # Errors
///
/// A message naming the server when it does not know the session (it never existed, or has
/// already ended), or the last failure when no attempt got a close acknowledged.
///
pub(crate) async fn expire_session(hosts: &str, session: zk::SessionId) -> Result<String, String> {
    let (id, timeout_ms) = (session.0, 30_000);
    let mut last = String::from("no server given");
    // The owner may win the session back before our close is read (the server then drops
    // our connection unanswered): try again until a close is acknowledged or the server no
    // longer knows the session.
    for attempt in 0..20u64 {
        for host in hosts.split(',') {
            let tried =
                tokio::time::timeout(Duration::from_secs(3), close_via(host, id, timeout_ms));
            match tried.await {
                Ok(Ok(Closing::Closed)) => return Ok(host.to_owned()),
                Ok(Ok(Closing::Gone)) if attempt > 0 => return Ok(host.to_owned()),
                Ok(Ok(Closing::Gone)) => {
                    return Err(format!(
                        "{host}: the server does not know session {:#x}",
                        id
                    ))
                }
                Ok(Ok(Closing::Unknown)) => {
                    last = format!("{host}: the connection closed unanswered")
                }
                Ok(Err(err)) => last = format!("{host}: {err}"),
                Err(_) => last = format!("{host}: no answer within 3 s"),
            }
        }
        tokio::time::sleep(Duration::from_millis(20 * (attempt + 1))).await;
    }
    Err(last)
}

/// What one reattach-and-close attempt achieved.
enum Closing {
    /// The server acknowledged the close.
    Closed,
    /// The server refused to reattach: the session no longer exists.
    Gone,
    /// The connection closed before the close was answered (the owner took the session back,
    /// or the server closed the session without answering).
    Unknown,
}

async fn close_via(host: &str, id: i64, timeout_ms: i32) -> std::io::Result<Closing> {
    let mut stream = tokio::net::TcpStream::connect(host).await?;
    let password = session_password(id);
    let mut connect = Vec::new();
    connect.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    connect.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    connect.extend_from_slice(&timeout_ms.to_be_bytes());
    connect.extend_from_slice(&id.to_be_bytes());
    connect.extend_from_slice(&(password.len() as i32).to_be_bytes());
    connect.extend_from_slice(&password);
    connect.push(0); // not read-only
    let mut close = Vec::new();
    close.extend_from_slice(&1i32.to_be_bytes()); // xid
    close.extend_from_slice(&OP_CLOSE_SESSION.to_be_bytes());
    // The close goes out with the connect: once the server moves the session to this
    // connection, the owner reconnects at once and would take the session back (closing this
    // connection) before a second round trip.
    let mut out = Vec::new();
    for body in [&connect, &close] {
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
    }
    stream.write_all(&out).await?;
    // ConnectResponse: protocol version (4), negotiated timeout (4), session id (8), ...
    match recv(&mut stream).await {
        Ok(reply) if reply.len() >= 16 => {
            if i64::from_be_bytes(reply[8..16].try_into().unwrap_or_default()) != id {
                return Ok(Closing::Gone);
            }
        }
        Ok(_) => return Err(std::io::Error::other("short connect response")),
        Err(_) => return Ok(Closing::Unknown),
    }
    // ReplyHeader: xid (4), zxid (8), err (4).
    match recv(&mut stream).await {
        Ok(reply) if reply.len() >= 16 && reply[12..16] == [0, 0, 0, 0] => Ok(Closing::Closed),
        Ok(reply) => Err(std::io::Error::other(format!(
            "closeSession answered {:?}",
            reply.get(12..16)
        ))),
        Err(_) => Ok(Closing::Unknown),
    }
}

async fn recv(stream: &mut tokio::net::TcpStream) -> std::io::Result<Vec<u8>> {
    let len = stream.read_i32().await?;
    let mut body = vec![0u8; len.clamp(0, 1 << 20) as usize];
    stream.read_exact(&mut body).await?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_random_matches_the_jdk() {
        // new java.util.Random(42).nextInt() == -1170105035
        let bytes = java_random_bytes(42, 4);
        assert_eq!(i32::from_le_bytes(bytes.try_into().unwrap()), -1170105035);
    }
}
