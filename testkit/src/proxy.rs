//! [`CountingProxy`]: a TCP proxy that counts a client's requests and injects link faults.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP proxy in front of a server that counts the requests clients send through it
/// (pings excluded), by opcode, and can blackhole traffic both ways (a partition: bytes are
/// accepted and dropped, connections stay open), cut clients off (a blackhole that also hides
/// the server closing a connection), drop only the server's replies, delay every frame (a slow
/// link), hold the replies to writes (a slow commit), refuse new connections and reset the open
/// ones (to steer a client to other servers).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// let proxy = zkfence_testkit::CountingProxy::start("127.0.0.1:2181").await;
/// // connect clients to proxy.addr ...
/// println!("{} requests so far", proxy.total());
/// proxy.blackhole(true); // a partition
/// # }
/// ```
#[derive(Debug)]
pub struct CountingProxy {
    /// The address clients connect to.
    pub addr: String,
    counts: Arc<Mutex<HashMap<i32, u64>>>,
    notifications: Arc<AtomicU64>,
    link: Link,
}

impl CountingProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound (a test tool: there is no way on without one).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() {
    /// let proxy = zkfence_testkit::CountingProxy::start("127.0.0.1:2181").await;
    /// # }
    /// ```
    pub async fn start(upstream: &str) -> CountingProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let counts: Arc<Mutex<HashMap<i32, u64>>> = Arc::default();
        let notifications = Arc::new(AtomicU64::new(0));
        let link = Link::default();
        tokio::spawn(accept_clients(
            listener,
            upstream.to_owned(),
            counts.clone(),
            notifications.clone(),
            link.clone(),
        ));
        CountingProxy {
            addr,
            counts,
            notifications,
            link,
        }
    }

    /// Requests by opcode so far (1 create, 2 delete, 3 exists, 4 getData, 8 getChildren, ...).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// let creates = proxy.counts().get(&15).copied().unwrap_or(0); // create2
    /// # }
    /// ```
    pub fn counts(&self) -> HashMap<i32, u64> {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// All requests so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// println!("{}", proxy.total());
    /// # }
    /// ```
    pub fn total(&self) -> u64 {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// Watch notifications the server has sent through the proxy so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// println!("{} notifications", proxy.notifications());
    /// # }
    /// ```
    pub fn notifications(&self) -> u64 {
        self.notifications.load(Ordering::Relaxed)
    }

    /// Drops every frame both ways while `on`, without closing connections.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.blackhole(true);
    /// proxy.blackhole(false);
    /// # }
    /// ```
    pub fn blackhole(&self, on: bool) {
        self.link.hole.store(on, Ordering::SeqCst);
    }

    /// Cuts the clients off while `on`, as a network partition does: like
    /// [`blackhole`](CountingProxy::blackhole), and a server that closes a connection
    /// meanwhile (a follower that drops its clients to join an election, say) does not close
    /// the client's side, which stays open and silent, so the client learns nothing until its
    /// own timeouts fire. Turning it off closes those connections.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.cut_off(true);
    /// proxy.cut_off(false);
    /// # }
    /// ```
    pub fn cut_off(&self, on: bool) {
        self.link.cut.store(on, Ordering::SeqCst);
    }

    /// Drops the server's frames (replies, notifications) while `on`; requests still reach the
    /// server. Turning it off closes every open connection, so that no client goes on with a
    /// reply missing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.drop_replies(true);  // the next request is applied, its reply lost
    /// proxy.drop_replies(false);
    /// # }
    /// ```
    pub fn drop_replies(&self, on: bool) {
        if on {
            self.link.mute.store(true, Ordering::SeqCst);
        } else if self.link.mute.load(Ordering::SeqCst) {
            // Close the muted connections before unmuting, so that no reply they held back
            // slips through on them.
            self.reset();
            self.link.mute.store(false, Ordering::SeqCst);
        }
    }

    /// Holds every frame, both ways, for `delay` before forwarding it (zero: no delay).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.delay(std::time::Duration::from_millis(300)); // a slow link
    /// proxy.delay(std::time::Duration::ZERO);
    /// # }
    /// ```
    pub fn delay(&self, delay: Duration) {
        self.link
            .delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Holds the server's replies to the next `count` write requests (create, delete,
    /// setData, multi) until `delay` after each request went through, as a slow commit (an
    /// fsync stall) looks to the client: writes sent together come back together, each
    /// `delay` after it was sent. Replies stay in order, so what follows a held reply on its
    /// connection (a ping's reply, a read's) waits behind it, as it would behind a slow commit.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.delay_writes(std::time::Duration::from_secs(1), 2); // the next two commits
    /// # }
    /// ```
    pub fn delay_writes(&self, delay: Duration, count: u32) {
        let mut slow = self
            .link
            .slow_writes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *slow = (delay, count);
    }

    /// While `on`, closes every new connection at once (the client tries its next server).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.refuse(true);
    /// proxy.reset(); // clients behind this proxy move to their other servers
    /// # }
    /// ```
    pub fn refuse(&self, on: bool) {
        self.link.refuse.store(on, Ordering::SeqCst);
    }

    /// Closes every open connection now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// proxy.reset();
    /// # }
    /// ```
    pub fn reset(&self) {
        let mut token = self.link.reset.lock().unwrap_or_else(|e| e.into_inner());
        token.cancel();
        *token = tokio_util::sync::CancellationToken::new();
    }

    /// The longest the clients went without sending a frame (pings included), over the
    /// connections open at the time, since the proxy started or since the last call.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// let quiet = proxy.longest_client_silence(); // how often an idle client pings
    /// # }
    /// ```
    pub fn longest_client_silence(&self) -> Duration {
        let mut silence = self.link.silence.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut silence.1)
    }

    /// How many client connections are open through this proxy.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(proxy: zkfence_testkit::CountingProxy) {
    /// let on_this_server = proxy.connections() > 0;
    /// # }
    /// ```
    pub fn connections(&self) -> u64 {
        self.link.open.load(Ordering::SeqCst)
    }
}

/// The faults a proxy applies to its connections, shared by all of them.
#[derive(Debug, Clone, Default)]
struct Link {
    hole: Arc<AtomicBool>,
    /// A blackhole that also hides the server's closing of a connection (`cut_off`).
    cut: Arc<AtomicBool>,
    /// Drop the server's frames only.
    mute: Arc<AtomicBool>,
    delay_ms: Arc<AtomicU64>,
    refuse: Arc<AtomicBool>,
    /// Cancelled (and replaced) by `reset`.
    reset: Arc<Mutex<tokio_util::sync::CancellationToken>>,
    open: Arc<AtomicU64>,
    /// When a client last sent a frame, and the longest gap seen between two.
    silence: Arc<Mutex<(Option<Instant>, Duration)>>,
    /// How long to hold the replies to write requests, and to how many more of them.
    slow_writes: Arc<Mutex<(Duration, u32)>>,
}

impl Link {
    /// Whether a request with opcode `op` is one whose reply is to be held (and counts it).
    fn hold_reply_to(&self, op: i32) -> Option<Duration> {
        const WRITES: [i32; 7] = [1, 2, 5, 14, 15, 19, 21];
        if !WRITES.contains(&op) {
            return None;
        }
        let mut slow = self.slow_writes.lock().unwrap_or_else(|e| e.into_inner());
        if slow.1 == 0 {
            return None;
        }
        slow.1 -= 1;
        Some(slow.0)
    }
}

impl Link {
    fn reset_token(&self) -> tokio_util::sync::CancellationToken {
        self.reset.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Counts one open connection until the returned guard drops.
    fn open(&self) -> OpenConnection {
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenConnection(self.open.clone())
    }
}

struct OpenConnection(Arc<AtomicU64>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accepts clients until the listener fails, each forwarded to `upstream` by a task of its own
/// (or closed at once while the link refuses connections).
async fn accept_clients(
    listener: tokio::net::TcpListener,
    upstream: String,
    counts: Arc<Mutex<HashMap<i32, u64>>>,
    notifications: Arc<AtomicU64>,
    link: Link,
) {
    while let Ok((client, _)) = listener.accept().await {
        // The reset token before the refusal flag: `refuse(true)` then `reset()` either
        // cancels the token taken here or sets the flag read below, so a connection accepted
        // while the link is being cut never survives the cut.
        let reset = link.reset_token();
        if link.refuse.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        tokio::spawn(forward_connection(
            client,
            upstream.clone(),
            counts.clone(),
            notifications.clone(),
            link.clone(),
            reset,
        ));
    }
}

/// Forwards one client's connection to `upstream`, counting its requests by opcode and the
/// server's watch notifications, until either direction ends or the link is reset.
async fn forward_connection(
    client: tokio::net::TcpStream,
    upstream: String,
    counts: Arc<Mutex<HashMap<i32, u64>>>,
    notifications: Arc<AtomicU64>,
    link: Link,
    reset: tokio_util::sync::CancellationToken,
) {
    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    let _open = link.open();
    // Without this, Nagle's algorithm and delayed ACKs add ~40 ms to small frames.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let back = link.clone();
    let (closed, closed_back) = (reset.clone(), reset.clone());
    // Replies to hold back until an instant, by the xid of their request (this connection's).
    let held: Arc<Mutex<HashMap<i32, Instant>>> = Arc::default();
    let held_back = held.clone();
    let replies = async {
        // Replies carry their request's xid; watch notifications carry -1.
        let _ = forward_frames(
            &mut server_rx,
            &mut client_tx,
            &back,
            &closed_back,
            true,
            |frame| {
                let xid = header_field(frame, 0);
                if xid == -1 {
                    notifications.fetch_add(1, Ordering::Relaxed);
                }
                let mut held = held_back.lock().unwrap_or_else(|e| e.into_inner());
                let until = held.remove(&xid);
                until.map_or(Duration::ZERO, |u| {
                    u.saturating_duration_since(Instant::now())
                })
            },
        )
        .await;
    };
    // Requests: xid, then the opcode; pings (11) are not counted.
    let requests = forward_frames(
        &mut client_rx,
        &mut server_tx,
        &link,
        &closed,
        false,
        |frame| note_request(frame, &counts, &link, &held),
    );
    // Either direction ending, or a reset, closes both sockets; but while the clients are cut
    // off, the server's side ending is hidden from the client until the cut ends.
    let server_closed = tokio::select! {
        _ = replies => true,
        _ = requests => false,
        _ = reset.cancelled() => false,
    };
    if server_closed && link.cut.load(Ordering::SeqCst) {
        hide_the_close(&mut client_rx, &link, &reset).await;
    }
    drop(client_tx);
}

/// Keeps a client's connection open and silent, dropping what it sends, until the link is no
/// longer cut off, the client closes it, or a reset.
async fn hide_the_close(
    client_rx: &mut tokio::net::tcp::OwnedReadHalf,
    link: &Link,
    reset: &tokio_util::sync::CancellationToken,
) {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 4096];
    while link.cut.load(Ordering::SeqCst) {
        tokio::select! {
            read = client_rx.read(&mut sink) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
            }
            _ = reset.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Counts a client's request by opcode (pings not), and marks the reply to hold back if the
/// link delays writes; requests themselves go on at once.
fn note_request(
    frame: &[u8],
    counts: &Mutex<HashMap<i32, u64>>,
    link: &Link,
    held: &Mutex<HashMap<i32, Instant>>,
) -> Duration {
    let op = header_field(frame, 4);
    if op != 11 {
        *counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(op)
            .or_default() += 1;
    }
    if let Some(delay) = link.hold_reply_to(op) {
        let until = Instant::now() + delay;
        let xid = header_field(frame, 0);
        held.lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(xid, until);
    }
    Duration::ZERO
}

/// Forwards length-prefixed ZooKeeper frames from `from` to `to`, handing each frame after the
/// first (the connect request or response, which has no header) to `seen` (which says how much
/// longer to hold it), dropping frames
/// while the link is blackholed (or, from the server, muted) and delaying them while it is
/// slow.
async fn forward_frames(
    from: &mut tokio::net::tcp::OwnedReadHalf,
    to: &mut tokio::net::tcp::OwnedWriteHalf,
    link: &Link,
    closed: &tokio_util::sync::CancellationToken,
    from_server: bool,
    seen: impl Fn(&[u8]) -> Duration,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut first = true;
    loop {
        let len = from.read_i32().await?;
        let mut frame = vec![0u8; len.max(0) as usize];
        from.read_exact(&mut frame).await?;
        if !from_server {
            let mut silence = link.silence.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            if let Some(last) = silence.0 {
                silence.1 = silence.1.max(now - last);
            }
            silence.0 = Some(now);
        }
        if link.hole.load(Ordering::SeqCst)
            || link.cut.load(Ordering::SeqCst)
            || (from_server && link.mute.load(Ordering::SeqCst))
        {
            continue;
        }
        if closed.is_cancelled() {
            // Reset: nothing more goes through, not even a frame read while the link was faulty
            // and looked at only now that the fault is lifted.
            return Ok(());
        }
        let delay = link.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if !first && frame.len() >= 8 {
            let hold = seen(&frame);
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
        }
        first = false;
        to.write_i32(len).await?;
        to.write_all(&frame).await?;
    }
}

fn header_field(frame: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]])
}
