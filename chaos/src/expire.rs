//! Expiring another process's ZooKeeper session from outside, as an operator could.
//!
//! ZooKeeper derives a session's password from its id (`ZooKeeperServer.generatePasswd`: a
//! `java.util.Random` seeded with `id ^ 0xB3415C00`), so knowing the id is enough to reattach
//! to the session and close it. The server then deletes the session's ephemeral nodes and the
//! owner learns `SessionExpired` when it next reaches a server.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
pub fn session_password(id: i64) -> Vec<u8> {
    java_random_bytes(id ^ SUPER_SECRET, 16)
}

/// Reattaches to session `id` through one of `hosts` and closes it. Returns which server did it.
pub async fn close_session(hosts: &str, id: i64, timeout_ms: i32) -> Result<String, String> {
    let mut last = String::from("no server given");
    for host in hosts.split(',') {
        match tokio::time::timeout(Duration::from_secs(3), close_via(host, id, timeout_ms)).await {
            Ok(Ok(())) => return Ok(host.to_owned()),
            Ok(Err(err)) => last = format!("{host}: {err}"),
            Err(_) => last = format!("{host}: no answer within 3 s"),
        }
    }
    Err(last)
}

async fn close_via(host: &str, id: i64, timeout_ms: i32) -> std::io::Result<()> {
    let mut stream = TcpStream::connect(host).await?;
    let password = session_password(id);
    let mut connect = Vec::new();
    connect.extend_from_slice(&0i32.to_be_bytes()); // protocol version
    connect.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
    connect.extend_from_slice(&timeout_ms.to_be_bytes());
    connect.extend_from_slice(&id.to_be_bytes());
    connect.extend_from_slice(&(password.len() as i32).to_be_bytes());
    connect.extend_from_slice(&password);
    connect.push(0); // not read-only
                     // The close goes out with the connect: once the server moves the session to this
                     // connection, the owner reconnects at once and would take the session back (closing this
                     // connection) before a second round trip.
    let mut close = Vec::new();
    close.extend_from_slice(&1i32.to_be_bytes()); // xid
    close.extend_from_slice(&OP_CLOSE_SESSION.to_be_bytes());
    let mut out = Vec::new();
    for body in [&connect, &close] {
        out.extend_from_slice(&(body.len() as i32).to_be_bytes());
        out.extend_from_slice(body);
    }
    stream.write_all(&out).await?;
    // The server often closes the connection without answering once the session is closed;
    // only an explicit refusal is an error. The caller checks that the session's nodes went.
    match recv(&mut stream).await {
        Ok(reply) if reply.len() >= 16 => {
            if i64::from_be_bytes(reply[8..16].try_into().unwrap_or_default()) != id {
                return Err(std::io::Error::other(
                    "the server does not know the session (already expired?)",
                ));
            }
        }
        Ok(_) => return Err(std::io::Error::other("short connect response")),
        Err(_) => return Ok(()),
    }
    let _ = recv(&mut stream).await;
    Ok(())
}

async fn recv(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
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
