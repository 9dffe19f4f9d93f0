//! [`RawProxy`]: a byte-level TCP proxy that can lose a server's replies, for any protocol.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

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
    /// Armed by `drop_replies_after`: the request bytes that start dropping replies.
    trigger: Trigger,
    _accept: tokio::task::JoinHandle<()>,
}

/// The request bytes that, once a client sends them, start dropping the server's replies.
type Trigger = Arc<Mutex<Option<Vec<u8>>>>;

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
        let trigger = Trigger::default();
        let accept = tokio::spawn(accept(
            listener,
            upstream.to_owned(),
            (mute.clone(), dropped.clone(), trigger.clone()),
            generation.clone(),
        ));
        Ok(RawProxy {
            addr,
            mute,
            generation,
            dropped,
            trigger,
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

    /// Drops every byte the server sends from the moment a client sends `request` (bytes
    /// anywhere in one read of a client's stream, say `b"COMMIT"`): that request still reaches
    /// the server, its reply and every later one are lost, until [`reset`](RawProxy::reset).
    /// So a commit is applied and its client cannot know. Armed once; see
    /// [`replies_dropped`](RawProxy::replies_dropped) for whether it fired.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// proxy.drop_replies_after(b"COMMIT"); // PostgreSQL's or MySQL's commit
    /// while !proxy.replies_dropped() {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// proxy.reset(); // the client's connection closes: its commit is in doubt
    /// # }
    /// ```
    pub fn drop_replies_after(&self, request: &[u8]) {
        *self.trigger.lock().unwrap_or_else(|e| e.into_inner()) = Some(request.to_vec());
    }

    /// Whether the server's replies are being dropped ([`drop_replies`](RawProxy::drop_replies)
    /// or a fired [`drop_replies_after`](RawProxy::drop_replies_after)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// assert!(!proxy.replies_dropped());
    /// # }
    /// ```
    pub fn replies_dropped(&self) -> bool {
        self.mute.load(Ordering::SeqCst)
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
        *self.trigger.lock().unwrap_or_else(|e| e.into_inner()) = None;
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
    (mute, dropped, trigger): (Arc<AtomicBool>, Arc<AtomicU64>, Trigger),
    generation: watch::Sender<u64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let reset = generation.subscribe();
        let faults = (mute.clone(), dropped.clone(), trigger.clone());
        tokio::spawn(pipe(client, server, faults, reset));
    }
}

/// Whether `sent` holds the armed trigger's request; it is disarmed if so.
fn fires(trigger: &Trigger, sent: &[u8]) -> bool {
    let mut armed = trigger.lock().unwrap_or_else(|e| e.into_inner());
    let found = (armed.as_deref())
        .is_some_and(|request| sent.windows(request.len().max(1)).any(|w| w == request));
    if found {
        *armed = None;
    }
    found
}

/// Forwards one connection both ways until either side closes or the proxy resets.
async fn pipe(
    client: TcpStream,
    server: TcpStream,
    (mute, dropped, trigger): (Arc<AtomicBool>, Arc<AtomicU64>, Trigger),
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
            // Muted before the request goes on, so that no byte of its reply slips through.
            if fires(&trigger, &buf[..n]) {
                mute.store(true, Ordering::SeqCst);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// An echo server on a free loopback port.
    async fn echo() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = conn.read(&mut buf).await {
                        let _ = conn.write_all(&buf[..n]).await;
                    }
                });
            }
        });
        addr
    }

    async fn reply(client: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(within, client.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => Some(buf[..n].to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn replies_stop_from_the_armed_request_on_which_still_reaches_the_server() {
        let proxy = RawProxy::start(&echo().await).await.unwrap();
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.drop_replies_after(b"COMMIT");
        client.write_all(b"BEGIN").await.unwrap();
        let second = Duration::from_secs(1);
        assert_eq!(
            reply(&mut client, second).await.as_deref(),
            Some(&b"BEGIN"[..])
        );
        assert!(!proxy.replies_dropped());

        client.write_all(b"x COMMIT y").await.unwrap();
        let short = Duration::from_millis(300);
        assert_eq!(
            reply(&mut client, short).await,
            None,
            "the armed request's reply came"
        );
        assert!(proxy.replies_dropped());
        // The request reached the server: its echo was dropped, counted.
        let deadline = tokio::time::Instant::now() + second;
        while proxy.dropped() < 10 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(proxy.dropped(), 10);

        proxy.reset();
        assert_eq!(reply(&mut client, second).await, None);
        assert!(!proxy.replies_dropped());
        // A new connection is served again, and the trigger is spent.
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        again.write_all(b"COMMIT").await.unwrap();
        assert_eq!(
            reply(&mut again, second).await.as_deref(),
            Some(&b"COMMIT"[..])
        );
    }
}
