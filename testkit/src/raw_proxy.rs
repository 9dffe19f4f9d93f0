//! [`RawProxy`]: a byte-level TCP proxy that can lose a server's replies, for any protocol.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy in front of any server (PostgreSQL, Redis, an HTTP store) that forwards bytes
/// both ways and can **drop the server's replies** while requests still reach it: the
/// fault that makes a commit's outcome unknown to its client. [`reset`](RawProxy::reset) then
/// closes every connection, which is how the client learns that the reply is not coming.
/// [`CountingProxy`](crate::CountingProxy) is the ZooKeeper-aware one.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// let proxy = zkfence_testkit::RawProxy::start("127.0.0.1:5432").await?;
/// // connect the client to proxy.addr() ...
/// proxy.drop_replies(true); // the next commit is applied, its reply lost
/// proxy.reset();            // the client sees its connection close
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RawProxy {
    addr: String,
    mute: Arc<AtomicBool>,
    /// Bumped by `reset`: every connection open before it closes.
    generation: watch::Sender<u64>,
    dropped: Arc<AtomicU64>,
    _accept: tokio::task::JoinHandle<()>,
}

impl RawProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    ///
    /// # Errors
    ///
    /// The error of binding the loopback port.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> std::io::Result<()> {
    /// let proxy = zkfence_testkit::RawProxy::start("127.0.0.1:6379").await?;
    /// println!("connect to {}", proxy.addr());
    /// # Ok(()) }
    /// ```
    pub async fn start(upstream: &str) -> std::io::Result<RawProxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let mute = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (generation, _) = watch::channel(0);
        let accept = tokio::spawn(accept(
            listener,
            upstream.to_owned(),
            mute.clone(),
            dropped.clone(),
            generation.clone(),
        ));
        Ok(RawProxy {
            addr,
            mute,
            generation,
            dropped,
            _accept: accept,
        })
    }

    /// The address clients connect to.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// let (host, port) = proxy.addr().split_once(':').unwrap();
    /// # let _ = (host, port); }
    /// ```
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The port clients connect to, on 127.0.0.1.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// println!("host=127.0.0.1 port={}", proxy.port());
    /// # }
    /// ```
    pub fn port(&self) -> u16 {
        (self.addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    /// Drops every byte the server sends while `on` (requests still go through).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// proxy.drop_replies(true);
    /// # }
    /// ```
    pub fn drop_replies(&self, on: bool) {
        self.mute.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection (new ones are accepted), and stops dropping replies.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// proxy.reset();
    /// # }
    /// ```
    pub fn reset(&self) {
        self.generation.send_modify(|g| *g += 1);
        self.mute.store(false, Ordering::SeqCst);
    }

    /// Server bytes dropped so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// assert_eq!(proxy.dropped(), 0);
    /// # }
    /// ```
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for RawProxy {
    fn drop(&mut self) {
        self._accept.abort();
        self.generation.send_modify(|g| *g += 1);
    }
}

async fn accept(
    listener: TcpListener,
    upstream: String,
    mute: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    generation: watch::Sender<u64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let reset = generation.subscribe();
        tokio::spawn(pipe(client, server, mute.clone(), dropped.clone(), reset));
    }
}

/// Forwards one connection both ways until either side closes or the proxy resets.
async fn pipe(
    client: TcpStream,
    server: TcpStream,
    mute: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    mut reset: watch::Receiver<u64>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            server_write.write_all(&buf[..n]).await?;
        }
    };
    let stale = reset.clone();
    let downstream = async {
        let reset = stale;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            if n == 0 {
                return Ok::<(), std::io::Error>(());
            }
            // A reset unmutes only the connections that come after it: this one, about to
            // close, must not let through the rest of a reply whose start was dropped.
            if mute.load(Ordering::SeqCst) || reset.has_changed().unwrap_or(true) {
                dropped.fetch_add(n as u64, Ordering::SeqCst);
                continue;
            }
            client_write.write_all(&buf[..n]).await?;
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = reset.changed() => {}
    }
}
