//! The proxy every counted session goes through ([`Proxy`]): the test kit's `CountingProxy`,
//! which counts requests by operation and watch notifications, behind a forwarder of this
//! module that counts the bytes each way. The kit's proxy counts no bytes, and the bytes a
//! handoff or a probe costs are what a network between client and ensemble carries.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zkfence_testkit::CountingProxy;

/// Bytes counted each way, over every connection of one [`Proxy`].
#[derive(Debug, Default)]
struct Bytes {
    /// Client to server: requests (and pings).
    sent: AtomicU64,
    /// Server to client: replies and notifications.
    received: AtomicU64,
}

/// A counting proxy in front of the server, with the bytes counted in front of it.
#[derive(Debug)]
pub(super) struct Proxy {
    /// What clients connect to: the byte counter's loopback address.
    pub(super) addr: String,
    /// The request and notification counter behind it.
    counting: CountingProxy,
    /// The bytes through it so far.
    bytes: Arc<Bytes>,
}

impl Proxy {
    /// A new proxy in front of `upstream` (`host:port`).
    pub(super) async fn start(upstream: &str) -> Proxy {
        let counting = CountingProxy::start(upstream).await;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = (listener.local_addr()).map_or(String::new(), |a| a.to_string());
        let bytes = Arc::new(Bytes::default());
        tokio::spawn(accept(listener, counting.addr.clone(), bytes.clone()));
        Proxy {
            addr,
            counting,
            bytes,
        }
    }

    /// The counting proxy behind: requests by opcode, notifications.
    pub(super) fn counting(&self) -> &CountingProxy {
        &self.counting
    }

    /// Bytes so far: (client to server, server to client).
    pub(super) fn bytes(&self) -> (u64, u64) {
        (
            self.bytes.sent.load(Ordering::Relaxed),
            self.bytes.received.load(Ordering::Relaxed),
        )
    }
}

/// Accepts clients for as long as the process runs (a bench's proxies live until it ends, as
/// the test kit's do), each connection forwarded by a task of its own.
async fn accept(listener: TcpListener, upstream: String, bytes: Arc<Bytes>) {
    while let Ok((client, _)) = listener.accept().await {
        let (upstream, bytes) = (upstream.clone(), bytes.clone());
        tokio::spawn(async move {
            if let Ok(server) = TcpStream::connect(&upstream).await {
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let up = copy(client_read, server_write, &bytes.sent);
                let down = copy(server_read, client_write, &bytes.received);
                // Either side closing ends both, as a TCP connection between them would.
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
            }
        });
    }
}

/// Copies `from` to `to` until either ends, adding every byte to `count`.
async fn copy(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: &AtomicU64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
    }
}
