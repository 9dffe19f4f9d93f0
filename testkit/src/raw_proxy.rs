//! [`RawProxy`]: a byte-level TCP proxy that can lose a server's replies, for any protocol.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP proxy in front of any server (PostgreSQL, Redis, an HTTP store) that forwards bytes
/// both ways and can **drop the server's replies** while requests still reach it: the
/// fault that makes a commit's outcome unknown to its client. [`reset`](RawProxy::reset) then
/// closes every connection, which is how the client learns that the reply is not coming. It
/// can also answer one request in the server's stead ([`answer_next`](RawProxy::answer_next)):
/// an HTTP server's error, after the request applied or before it was sent.
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
    /// Armed by `drop_replies_after` or `answer_next`: the request bytes that start the fault.
    trigger: Trigger,
    /// Requests `answer_next` answered in the server's stead.
    answered: Arc<AtomicU64>,
    _accept: tokio::task::JoinHandle<()>,
}

/// The request bytes that, once a client sends them, start a fault, and which fault.
type Trigger = Arc<Mutex<Option<Armed>>>;

/// What an armed request sets off.
#[derive(Debug, Clone)]
enum Armed {
    /// Every reply dropped from the request on ([`RawProxy::drop_replies_after`]).
    DropReplies(Vec<u8>),
    /// The request answered with `reply` in the server's stead, and its connection closed
    /// ([`RawProxy::answer_next`]).
    Answer {
        request: Vec<u8>,
        reply: Vec<u8>,
        forward: bool,
    },
}

impl Armed {
    fn request(&self) -> &[u8] {
        match self {
            Armed::DropReplies(request) | Armed::Answer { request, .. } => request,
        }
    }
}

/// The counters and the trigger every connection shares.
#[derive(Clone)]
struct Faults {
    mute: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
    trigger: Trigger,
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
        let trigger = Trigger::default();
        let answered = Arc::new(AtomicU64::new(0));
        let faults = Faults {
            mute: mute.clone(),
            dropped: dropped.clone(),
            answered: answered.clone(),
            trigger: trigger.clone(),
        };
        let accept = tokio::spawn(accept(
            listener,
            upstream.to_owned(),
            faults,
            generation.clone(),
        ));
        Ok(RawProxy {
            addr,
            mute,
            generation,
            dropped,
            trigger,
            answered,
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
        self.arm(Armed::DropReplies(request.to_vec()));
    }

    /// Answers the next request that holds `request` (bytes anywhere in one read of a
    /// client's stream, say `b"PUT /"`) with `reply` in the server's stead, then ends that
    /// connection's sending side (and drops what either side sends after it, until the client
    /// closes): an HTTP server's error, say. With `forward` the request (and the rest of it,
    /// its body) still reaches the server, whose reply is replaced: it is applied, and the
    /// client is told it failed. Without, the server never sees it. Armed once, until it fires
    /// or [`reset`](RawProxy::reset) disarms it ([`armed`](RawProxy::armed));
    /// [`answered`](RawProxy::answered) counts the answers sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// let error = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    /// proxy.answer_next(b"PUT /", error, true); // the next PUT applied, and reported failed
    /// while proxy.answered() == 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// # }
    /// ```
    pub fn answer_next(&self, request: &[u8], reply: &[u8], forward: bool) {
        self.arm(Armed::Answer {
            request: request.to_vec(),
            reply: reply.to_vec(),
            forward,
        });
    }

    /// Answers sent in the server's stead so far ([`answer_next`](RawProxy::answer_next)), each
    /// counted once written to its client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// assert_eq!(proxy.answered(), 0);
    /// # }
    /// ```
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::SeqCst)
    }

    /// Whether a fault armed by [`drop_replies_after`](RawProxy::drop_replies_after) or
    /// [`answer_next`](RawProxy::answer_next) still waits for its request.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// proxy.answer_next(b"PUT /", b"HTTP/1.1 503 Slow Down\r\n\r\n", false);
    /// assert!(proxy.armed());
    /// # }
    /// ```
    pub fn armed(&self) -> bool {
        self.trigger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn arm(&self, armed: Armed) {
        *self.trigger.lock().unwrap_or_else(|e| e.into_inner()) = Some(armed);
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

    /// Closes every open connection (new ones are accepted), stops dropping replies, and
    /// disarms a fault whose request has not come.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::RawProxy) {
    /// proxy.reset();
    /// # }
    /// ```
    pub fn reset(&self) {
        self.trigger
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        self.generation.send_modify(|g| *g += 1);
        self.mute.store(false, Ordering::SeqCst);
    }

    /// Server bytes dropped so far (a reply replaced by an answer in the server's stead
    /// included).
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
    faults: Faults,
    generation: watch::Sender<u64>,
) {
    while let Ok((client, _)) = listener.accept().await {
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let reset = generation.subscribe();
        tokio::spawn(pipe(client, server, faults.clone(), reset));
    }
}

/// The fault `sent` sets off, when it holds the armed request; disarmed if so.
fn fires(trigger: &Trigger, sent: &[u8]) -> Option<Armed> {
    let mut armed = trigger.lock().unwrap_or_else(|e| e.into_inner());
    let request = armed.as_ref().map(Armed::request)?;
    let found = sent.windows(request.len().max(1)).any(|w| w == request);
    found.then(|| armed.take()).flatten()
}

/// How long a connection answered in the server's stead waits for its client to close, once
/// the server has.
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Where one connection's answer in the server's stead stands.
enum Answer {
    None,
    /// The request went on: the server's next bytes are replaced with these.
    Pending(Vec<u8>),
    /// Answered: the client's further bytes and the server's are dropped until the client
    /// closes (read to the end, so that closing sends no reset over the answer), or for
    /// [`DRAIN`] once the server has closed.
    Sent,
}

/// One connection's halves toward the client, and where its answer in the server's stead
/// stands: what both directions of a [`pipe`] share.
struct Conn<'a> {
    faults: &'a Faults,
    answer: Mutex<Answer>,
    client_write: tokio::sync::Mutex<OwnedWriteHalf>,
}

impl Conn<'_> {
    fn answer(&self) -> std::sync::MutexGuard<'_, Answer> {
        self.answer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `reply` to the client in the server's stead, and ends the client's half.
    async fn send_answer(&self, reply: Vec<u8>) -> std::io::Result<()> {
        *self.answer() = Answer::Sent;
        let mut client = self.client_write.lock().await;
        client.write_all(&reply).await?;
        client.shutdown().await?;
        self.faults.answered.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The client's bytes to the server, but for a request answered in the server's stead.
    async fn upstream(
        &self,
        mut client_read: OwnedReadHalf,
        mut server_write: OwnedWriteHalf,
    ) -> std::io::Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = client_read.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            let (sent, pending) = {
                let state = self.answer();
                (
                    matches!(*state, Answer::Sent),
                    matches!(*state, Answer::Pending(_)),
                )
            };
            if sent {
                // Answered: drained, so that our close sends no reset over the answer.
                continue;
            }
            // While an answer is pending, the rest of its request (its body, say) goes on.
            let fired = match pending {
                true => None,
                false => fires(&self.faults.trigger, &buf[..n]),
            };
            match fired {
                // Muted before the request goes on, so that no byte of its reply slips through.
                Some(Armed::DropReplies(_)) => self.faults.mute.store(true, Ordering::SeqCst),
                Some(Armed::Answer { reply, forward, .. }) => match forward {
                    true => *self.answer() = Answer::Pending(reply),
                    false => {
                        self.send_answer(reply).await?;
                        continue;
                    }
                },
                None => {}
            }
            server_write.write_all(&buf[..n]).await?;
        }
    }

    /// The server's bytes to the client, but for those dropped or answered in its stead.
    async fn downstream(
        &self,
        mut server_read: OwnedReadHalf,
        reset: watch::Receiver<u64>,
    ) -> std::io::Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = server_read.read(&mut buf).await?;
            let pending = match &mut *self.answer() {
                Answer::None => None,
                Answer::Pending(reply) => Some(std::mem::take(reply)),
                Answer::Sent => Some(Vec::new()),
            };
            if n == 0 {
                // The server closed: an answer still due is sent all the same (the request
                // reached it); after one, the client's own close (or a while) ends the pipe.
                match pending {
                    None => return Ok(()),
                    Some(reply) if !reply.is_empty() => self.send_answer(reply).await?,
                    Some(_) => {}
                }
                tokio::time::sleep(DRAIN).await;
                return Ok(());
            }
            if let Some(reply) = pending {
                self.faults.dropped.fetch_add(n as u64, Ordering::SeqCst);
                if !reply.is_empty() {
                    self.send_answer(reply).await?;
                }
                continue;
            }
            // A reset unmutes only the connections that come after it: this one, about to
            // close, must not let through the rest of a reply whose start was dropped.
            if self.faults.mute.load(Ordering::SeqCst) || reset.has_changed().unwrap_or(true) {
                self.faults.dropped.fetch_add(n as u64, Ordering::SeqCst);
                continue;
            }
            self.client_write.lock().await.write_all(&buf[..n]).await?;
        }
    }
}

/// Forwards one connection both ways until either side closes or the proxy resets.
async fn pipe(
    client: TcpStream,
    server: TcpStream,
    faults: Faults,
    mut reset: watch::Receiver<u64>,
) {
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let conn = Conn {
        faults: &faults,
        answer: Mutex::new(Answer::None),
        client_write: tokio::sync::Mutex::new(client_write),
    };
    tokio::select! {
        _ = conn.upstream(client_read, server_write) => {}
        _ = conn.downstream(server_read, reset.clone()) => {}
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

    /// A server that records what it receives and answers `ok` to each request, which ends
    /// with a `.` (a request may come in several reads).
    async fn recorder() -> (String, Arc<Mutex<Vec<u8>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = kept.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = conn.read(&mut buf).await {
                        seen.lock().unwrap().extend_from_slice(&buf[..n]);
                        if buf[..n].ends_with(b".") {
                            let _ = conn.write_all(b"ok").await;
                        }
                    }
                });
            }
        });
        (addr, seen)
    }

    /// Everything the client reads until the proxy closes its side (within `within`).
    async fn to_the_end(client: &mut TcpStream, within: Duration) -> Vec<u8> {
        let mut all = Vec::new();
        let read = tokio::time::timeout(within, client.read_to_end(&mut all)).await;
        assert!(read.is_ok(), "the proxy did not close the connection");
        all
    }

    #[tokio::test]
    async fn an_armed_request_is_answered_in_the_servers_stead_applied_or_not() {
        let (upstream, seen) = recorder().await;
        let proxy = RawProxy::start(&upstream).await.unwrap();
        let second = Duration::from_secs(1);

        // Forwarded: the server gets the whole request, its body in a later read too, and its
        // reply is replaced.
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.answer_next(b"PUT /", b"500", true);
        assert!(proxy.armed());
        client.write_all(b"GET /a.").await.unwrap();
        assert_eq!(
            reply(&mut client, second).await.as_deref(),
            Some(&b"ok"[..])
        );
        client.write_all(b"PUT /b").await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        client.write_all(b" body.").await.unwrap();
        assert_eq!(to_the_end(&mut client, second).await, b"500");
        assert_eq!((proxy.answered(), proxy.armed()), (1, false));
        let deadline = tokio::time::Instant::now() + second;
        while proxy.dropped() < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(proxy.dropped(), 2, "the server's own reply was let through");
        assert_eq!(&seen.lock().unwrap()[..], b"GET /a.PUT /b body.");

        // Not forwarded: the server never sees it; the trigger fired once and is spent.
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.answer_next(b"PUT /", b"503", false);
        client.write_all(b"PUT /c.").await.unwrap();
        assert_eq!(to_the_end(&mut client, second).await, b"503");
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        again.write_all(b"PUT /d.").await.unwrap();
        assert_eq!(reply(&mut again, second).await.as_deref(), Some(&b"ok"[..]));
        assert_eq!(proxy.answered(), 2);
        assert_eq!(&seen.lock().unwrap()[..], b"GET /a.PUT /b body.PUT /d.");

        // A reset disarms a fault whose request has not come.
        proxy.answer_next(b"PUT /", b"500", true);
        proxy.reset();
        assert!(!proxy.armed());
    }
}
