//! How the scale measurements count: the requests and notifications of counting proxies between
//! two moments ([`Counts`], [`Window`], with the server's writes and both ends' CPU), many
//! sessions opened at once ([`sessions`]), and waiting for a queue to form ([`await_nodes`]).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client as zk;

use super::bed::{Bed, Server};
use super::line::Line;
use super::proxy::Proxy;
use crate::cpu;

/// ZooKeeper's closeSession opcode: a session's end, not its work.
const OP_CLOSE_SESSION: i32 = -11;
/// ZooKeeper's multi opcode: the watchdog's probe (a multi of checks).
pub(super) const OP_MULTI: i32 = 14;
/// ZooKeeper's getData opcode: a held lock's node watch.
pub(super) const OP_GET_DATA: i32 = 4;
/// `multiRead`: the watchdog reading back the holds past its watch share.
pub(super) const OP_MULTI_READ: i32 = 22;
/// The opcodes that write (each a transaction): create, delete, setData, setACL, multi,
/// create2, createContainer, createTTL.
const WRITES: [i32; 8] = [1, 2, 5, 7, 14, 15, 19, 21];

/// Requests by opcode and notifications, summed over some proxies.
#[derive(Debug, Clone, Default)]
pub(super) struct Counts {
    /// Requests by opcode.
    by_op: HashMap<i32, u64>,
    /// Watch notifications from the server.
    notifications: u64,
    /// Bytes from the clients (requests and pings).
    bytes_sent: u64,
    /// Bytes to the clients (replies, notifications and pings).
    bytes_received: u64,
}

impl Counts {
    /// What `proxies` have counted so far, together.
    pub(super) fn of(proxies: &[&Proxy]) -> Counts {
        let mut counts = Counts::default();
        for proxy in proxies {
            let (bytes_sent, bytes_received) = proxy.bytes();
            counts.add(&Counts {
                by_op: proxy.counting().counts(),
                notifications: proxy.counting().notifications(),
                bytes_sent,
                bytes_received,
            });
        }
        counts
    }

    /// Adds `other`'s counts to these.
    fn add(&mut self, other: &Counts) {
        for (op, n) in &other.by_op {
            *self.by_op.entry(*op).or_default() += n;
        }
        self.notifications += other.notifications;
        self.bytes_sent += other.bytes_sent;
        self.bytes_received += other.bytes_received;
    }

    /// What was counted after `earlier`.
    pub(super) fn since(&self, earlier: &Counts) -> Counts {
        let by_op = (self.by_op.iter())
            .map(|(op, n)| (*op, n - earlier.by_op.get(op).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Counts {
            by_op,
            notifications: self.notifications - earlier.notifications,
            bytes_sent: self.bytes_sent - earlier.bytes_sent,
            bytes_received: self.bytes_received - earlier.bytes_received,
        }
    }

    /// Requests (pings and session closes left out).
    pub(super) fn requests(&self) -> u64 {
        (self.by_op.iter())
            .filter(|(op, _)| **op != OP_CLOSE_SESSION)
            .map(|(_, n)| n)
            .sum()
    }

    /// Write requests: each a transaction of the ensemble.
    pub(super) fn writes(&self) -> u64 {
        WRITES.iter().map(|op| self.op(*op)).sum()
    }

    /// Requests with opcode `op`.
    pub(super) fn op(&self, op: i32) -> u64 {
        self.by_op.get(&op).copied().unwrap_or(0)
    }

    /// Watch notifications.
    pub(super) fn notifications(&self) -> u64 {
        self.notifications
    }

    /// Bytes both ways.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes_sent + self.bytes_received
    }

    /// Requests by operation name, per `per` (a JSON object).
    pub(super) fn by_op_json(&self, per: f64) -> String {
        let mut ops: Vec<(&i32, &u64)> = self.by_op.iter().collect();
        ops.sort();
        let fields: Vec<String> = (ops.iter())
            .map(|(op, n)| {
                format!(
                    "\"{}\":{:.3}",
                    crate::measure::opcode_name(**op),
                    **n as f64 / per
                )
            })
            .collect();
        // The object's braces as escapes, so that brace counting tools see balanced source.
        let mut json = String::from('\u{7b}');
        json.push_str(&fields.join(","));
        json.push('\u{7d}');
        json
    }
}

/// A counted stretch of time: opened, then closed into what it saw.
#[derive(Debug)]
pub(super) struct Window {
    /// Each proxy's counts when the window opened.
    counts: Vec<Counts>,
    /// Both ends' CPU time when it opened.
    cpu: cpu::Sample,
    /// The server's last zxid when it opened.
    zxid: Option<i64>,
    /// When it opened.
    opened: Instant,
}

/// What a window saw.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    /// How long the window was open.
    pub(super) seconds: f64,
    /// Every proxy's counts together.
    pub(super) counts: Counts,
    /// Each proxy's, in the order given.
    pub(super) parts: Vec<Counts>,
    /// This process's CPU time (the sessions measured in it, and the proxies).
    pub(super) client_cpu: Duration,
    /// The server's, when the bench started it.
    pub(super) server_cpu: Option<Duration>,
    /// The server's transactions (zxids), the whole ensemble's.
    pub(super) server_writes: Option<u64>,
}

impl Window {
    /// Opens a window on `proxies` and `server` now.
    pub(super) async fn open(server: &Server<'_>, proxies: &[&Proxy]) -> Window {
        let zxid = server.zxid().await;
        Window {
            counts: proxies.iter().map(|p| Counts::of(&[p])).collect(),
            cpu: cpu::Sample::now(server.pid()),
            zxid,
            opened: Instant::now(),
        }
    }

    /// Closes the window: what it saw.
    pub(super) async fn close(self, server: &Server<'_>, proxies: &[&Proxy]) -> Seen {
        let seconds = self.opened.elapsed().as_secs_f64();
        let parts: Vec<Counts> = (proxies.iter().zip(&self.counts))
            .map(|(proxy, then)| Counts::of(&[proxy]).since(then))
            .collect();
        let mut counts = Counts::default();
        for part in &parts {
            counts.add(part);
        }
        let cpu = cpu::Sample::now(server.pid());
        let zxid = server.zxid().await;
        Seen {
            seconds,
            counts,
            parts,
            client_cpu: cpu.own.saturating_sub(self.cpu.own),
            server_cpu: match (self.cpu.server, cpu.server) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            },
            server_writes: match (self.zxid, zxid) {
                (Some(a), Some(b)) if b >= a => Some((b - a) as u64),
                _ => None,
            },
        }
    }
}

impl Seen {
    /// Adds what this window saw to `line`, per `per` (releases, handoffs, changes) under
    /// `unit` (`release`, `handoff`, ...): requests, notifications, bytes, writes, CPU, the
    /// rate.
    pub(super) fn per(&self, line: &mut Line, per: f64, unit: &str) {
        let each = |n: f64| Some(n / per.max(1.0));
        let names: [&'static str; 7] = match unit {
            "handoff" => [
                "requests_per_handoff",
                "notifications_per_handoff",
                "bytes_per_handoff",
                "server_writes_per_handoff",
                "client_cpu_us_per_handoff",
                "server_cpu_us_per_handoff",
                "handoffs_per_s",
            ],
            "change" => [
                "requests_per_change",
                "notifications_per_change",
                "bytes_per_change",
                "server_writes_per_change",
                "client_cpu_us_per_change",
                "server_cpu_us_per_change",
                "changes_per_s",
            ],
            _ => [
                "requests_per_release",
                "notifications_per_release",
                "bytes_per_release",
                "server_writes_per_release",
                "client_cpu_us_per_release",
                "server_cpu_us_per_release",
                "releases_per_s",
            ],
        };
        line.set(names[0], each(self.counts.requests() as f64));
        line.set(names[1], each(self.counts.notifications() as f64));
        line.set(names[2], each(self.counts.bytes() as f64));
        line.set(names[3], self.server_writes.and_then(|w| each(w as f64)));
        line.set(names[4], each(self.client_cpu.as_secs_f64() * 1e6));
        line.set(
            names[5],
            self.server_cpu.and_then(|c| each(c.as_secs_f64() * 1e6)),
        );
        line.set(names[6], Some(per / self.seconds.max(1e-9)));
        line.set("seconds", Some(self.seconds));
        line.raw(
            "requests_by_op_per_unit",
            self.counts.by_op_json(per.max(1.0)),
        );
    }
}

/// A window over whole probe periods of the `sessions` holding sessions behind `probes`
/// (through `proxies`): opened just after one of their probes (a `multi`) passed, closed just
/// after --scale-periods probes per session more. Counting whole periods, the figures carry no
/// error of a probe more or less in the window (a quarter at four periods); a period with no
/// probe ends the window all the same, after two periods more.
pub(super) async fn over_probes(
    bed: &Bed<'_>,
    probes: &Proxy,
    sessions: usize,
    proxies: &[&Proxy],
) -> Seen {
    let period = bed.probe_period();
    let periods = bed.args.scale_periods.max(1.0).round() as u32;
    let multis = || Counts::of(&[probes]).op(OP_MULTI);
    let first = multis();
    until(|| multis() > first, period * 2).await;
    // At both ends the probe just seen is let commit first, so that the server's zxid counts
    // what the proxies count: the first probe in neither, the last in both.
    tokio::time::sleep(COMMITTED).await;
    let window = Window::open(&bed.server, proxies).await;
    let last = multis() + u64::from(periods) * sessions as u64;
    until(|| multis() >= last, period * (periods + 2)).await;
    tokio::time::sleep(COMMITTED).await;
    window.close(&bed.server, proxies).await
}

/// Long enough for a request seen at a proxy to have committed on a local server.
const COMMITTED: Duration = Duration::from_millis(50);

/// Waits until `done` holds (checked every 2 ms), at most `limit`.
async fn until(done: impl Fn() -> bool, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `n` sessions of timeout `t` to `connect`, 64 connecting at once.
pub(super) async fn sessions(
    connect: &str,
    n: usize,
    t: Duration,
) -> Result<Vec<zk::Client>, String> {
    let mut clients = Vec::with_capacity(n);
    for from in (0..n).step_by(64) {
        let mut pending = tokio::task::JoinSet::new();
        for _ in from..(from + 64).min(n) {
            let connect = connect.to_owned();
            pending.spawn(async move {
                zk::Client::connector()
                    .with_session_timeout(t)
                    .connect(&connect)
                    .await
            });
        }
        while let Some(done) = pending.join_next().await {
            let client = done.map_err(|e| e.to_string())?;
            clients.push(client.map_err(|e| format!("cannot connect to {connect}: {e}"))?);
        }
    }
    Ok(clients)
}

/// Sessions of their own, each through one counting proxy: a recipe's contenders.
#[derive(Debug)]
pub(super) struct Pool {
    /// The proxy every session of the pool goes through, which counts them all.
    pub(super) proxy: Proxy,
    /// The sessions, one per contender.
    pub(super) clients: Vec<zk::Client>,
}

impl Pool {
    /// `n` sessions of timeout T through a new proxy in front of the bed's server.
    pub(super) async fn open(bed: &Bed<'_>, n: usize) -> Result<Pool, String> {
        let proxy = bed.server.proxy().await;
        let clients = sessions(&bed.server.via(&proxy), n, bed.session_timeout()).await?;
        Ok(Pool { proxy, clients })
    }
}

/// Waits until `paths` have `n` children together (up to two minutes, and a millisecond per
/// node more).
pub(super) async fn await_nodes(
    admin: &zk::Client,
    paths: &[&str],
    n: usize,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120) + Duration::from_millis(n as u64);
    loop {
        let mut seen = 0;
        for path in paths {
            seen += admin.list_children(path).await.map_or(0, |c| c.len());
        }
        if seen >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{paths:?} held {seen} nodes, not {n}, after two minutes"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits for `contenders` just queued to settle: until the sessions behind `proxy` have sent
/// nothing (pings aside) for a quarter of a second, so that the last of them has armed its
/// watches and left its queueing behind (at most a minute; a quiet proxy of the server's own,
/// as when the waiters connect straight, passes at once), and 100 ms and a millisecond a
/// contender more (at most half a second) for the watches of the last replies to land.
pub(super) async fn settle(proxy: &Proxy, contenders: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Counts::of(&[proxy]).requests();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = Counts::of(&[proxy]).requests();
        if now == seen {
            break;
        }
        seen = now;
    }
    let ms = (100 + contenders as u64).min(500);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// This process's open file limit (soft): each counted session takes three descriptors here
/// (its socket and the proxy's two).
pub(super) fn open_file_limit() -> u64 {
    // SAFETY: getrlimit fills the struct it is given.
    let limit = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit
    };
    limit.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_subtract_and_leave_the_session_close_out() {
        let earlier = Counts {
            by_op: [(14, 2), (4, 1)].into(),
            notifications: 3,
            bytes_sent: 100,
            bytes_received: 50,
        };
        let later = Counts {
            by_op: [(14, 5), (4, 1), (-11, 1), (2, 4)].into(),
            notifications: 7,
            bytes_sent: 300,
            bytes_received: 70,
        };
        let seen = later.since(&earlier);
        assert_eq!(seen.requests(), 7);
        assert_eq!(seen.writes(), 7);
        assert_eq!(seen.op(OP_MULTI), 3);
        assert_eq!(seen.notifications(), 4);
        assert_eq!(seen.bytes(), 220);
        assert_eq!(
            seen.by_op_json(1.0),
            r#"{"closeSession":1.000,"delete":4.000,"multi":3.000}"#
        );
    }
}
