//! [`DelayProxy`]: a TCP proxy that delays every byte by a fixed time each way, as a network
//! link with a round trip would, for benches that show what a round trip costs where this
//! machine's kernel has no `netem`.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A loopback TCP proxy in front of `upstream` that holds each chunk of bytes for `one_way`
/// before it passes it on, in both directions: a round trip through it takes twice that longer.
/// A delay line, not a queue: bytes sent back to back leave back to back, so pipelined requests
/// stay pipelined. Each direction of each connection has a reader and a writer thread; the
/// writer sleeps with the operating system's precision (tens of microseconds), where a tokio
/// timer would round every delay up to a millisecond.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// let proxy = zkfence_harness::DelayProxy::start("127.0.0.1:5432", Duration::from_micros(500))?;
/// println!("connect to 127.0.0.1:{}: a 1 ms round trip", proxy.port());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct DelayProxy {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`, each way
    /// `one_way` late.
    ///
    /// # Errors
    ///
    /// The error of binding the loopback port.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let proxy = zkfence_harness::DelayProxy::start("127.0.0.1:6379", Duration::from_micros(500))?;
    /// assert!(proxy.port() > 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start(upstream: &str, one_way: Duration) -> std::io::Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let upstream = upstream.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                match TcpStream::connect(&upstream) {
                    Ok(server) => link(client, server, one_way),
                    Err(err) => eprintln!("DelayProxy: cannot reach {upstream}: {err}"),
                }
            }
        });
        Ok(DelayProxy { port, stop })
    }

    /// The loopback port clients connect to.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let proxy = zkfence_harness::DelayProxy::start("127.0.0.1:6379", std::time::Duration::ZERO)?;
    /// let addr = format!("127.0.0.1:{}", proxy.port());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for DelayProxy {
    /// Stops accepting (open connections last until either end closes them).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Starts both directions of one proxied connection.
fn link(client: TcpStream, server: TcpStream, one_way: Duration) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (Ok(client_out), Ok(server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    pump(client, server_out, one_way);
    pump(server, client_out, one_way);
}

/// Forwards what `from` reads to `to`, each chunk `delay` after it was read; closes `to`'s
/// sending side once `from` has ended and every chunk is out.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (chunks, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = from.read(&mut buf) {
            if chunks
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    });
    std::thread::spawn(move || {
        for (at, chunk) in due {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                return;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server through the proxy: the bytes come back whole and in order, and a round
    /// trip takes at least twice the one-way delay.
    #[test]
    fn bytes_pass_both_ways_late_and_in_order() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut conn, _) = echo.accept().unwrap();
            let mut buf = [0; 1024];
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                conn.write_all(&buf[..n]).unwrap();
            }
        });
        let proxy = DelayProxy::start(&upstream, Duration::from_millis(5)).unwrap();
        let mut conn = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        let began = Instant::now();
        conn.write_all(b"one ").unwrap();
        conn.write_all(b"two").unwrap();
        let mut got = [0; 7];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"one two");
        assert!(
            began.elapsed() >= Duration::from_millis(10),
            "{:?}",
            began.elapsed()
        );
    }
}
