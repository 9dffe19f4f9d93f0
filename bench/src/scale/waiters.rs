//! Waiters on one lock (each `--waiters` count), each with its own session, queued behind a
//! holder: zkfence's `FencedLock` and zookeeper-client's own `Client::lock`. What the waiters
//! cost while they just wait (zkfence's: target about zero writes, flat in the count), the
//! server's watches, and the drain once the holder lets go: acquisitions per second (against
//! the raw delete→notification rate, [`raw`]), requests and notifications per handoff. The
//! holder and the waiters go through counting proxies of their own; past what this process's
//! open file limit allows (three descriptors a counted session) the waiters connect straight
//! and only the server's figures are kept.

use tokio::task::JoinSet;
use zkfence::{Acquire, FencedLock, LockGuard, LockOptions};
use zookeeper_client as zk;

use super::bed::{Bed, Mntr};
use super::count::{await_nodes, open_file_limit, over_probes, sessions, settle, Window, OP_MULTI};
use super::line::Line;
use super::proxy::Proxy;
use crate::options::{Impl, Mode, Run};

/// The lock the waiters queue on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Peer {
    /// zkfence's `FencedLock`.
    Zkfence,
    /// zookeeper-client's `Client::lock` (Curator's node names).
    Zkclient,
    /// Curator's `InterProcessMutex`, in the Curator worker (`curator::mutex`).
    Curator,
}

impl Peer {
    /// The implementation as the lines name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Peer::Zkfence => "zkfence",
            Peer::Zkclient => "zkclient",
            Peer::Curator => "curator",
        }
    }
}

/// `waiters` waiters on one lock of `peer` in `round` (0: the holder alone, the baseline of
/// the idle writes): the line.
pub(super) async fn waiters(
    bed: &Bed<'_>,
    round: usize,
    waiters: usize,
    peer: Peer,
) -> Result<Line, String> {
    let counted = 3 * waiters as u64 + 512 < open_file_limit();
    let lock_path = bed.path(&format!("w{round}-{waiters}-{}", peer.name()));
    bed.mkdir(&lock_path).await?;
    let proxies = [bed.server.proxy().await, bed.server.proxy().await];
    let t = bed.session_timeout();
    let holder = sessions(&bed.server.via(&proxies[0]), 1, t).await?;
    let holder = Contender::new(peer, holder[0].clone(), &lock_path)?;
    let held = holder.acquire().await?;
    let connect = match counted {
        true => bed.server.via(&proxies[1]),
        false => bed.server.direct(),
    };
    let clients = sessions(&connect, waiters, t).await?;
    let baseline = bed.server.mntr().await;
    let mut tasks = JoinSet::new();
    let hold = bed.args.hold;
    for client in clients {
        let contender = Contender::new(peer, client, &lock_path)?;
        tasks.spawn(async move {
            let held = contender.acquire().await?;
            if !hold.is_zero() {
                tokio::time::sleep(hold).await; // the critical section (--hold)
            }
            held.release().await?;
            Ok::<_, String>(contender) // its session lives until every waiter is done
        });
    }
    await_nodes(&bed.admin, &[&lock_path], waiters + 1).await?;
    settle(&proxies[1], waiters).await; // every waiter's watches land
    let mut line = Line::new("waiters", peer.name(), round, &[("waiters", waiters)]);
    line.set("counted", Some(f64::from(u8::from(counted))));
    line.set("hold_ms", Some(hold.as_secs_f64() * 1e3));
    watches(bed, &baseline, &mut line, waiters).await;
    match peer {
        Peer::Zkfence => idle(bed, &proxies, &mut line).await,
        _ => idle_peer(bed, &proxies[1], &mut line).await,
    }
    if !counted {
        for figure in [
            "idle_writes_per_s",
            "idle_waiter_requests_per_s",
            "idle_waiter_writes_per_s",
            "idle_waiter_bytes_per_s",
        ] {
            line.set(figure, None);
        }
    }
    if waiters > 0 {
        let refs = [&proxies[0], &proxies[1]];
        let window = Window::open(&bed.server, &refs).await;
        held.release().await?;
        let mut kept = Vec::with_capacity(waiters);
        while let Some(done) = tasks.join_next().await {
            kept.push(done.map_err(|e| e.to_string())??);
        }
        let seen = window.close(&bed.server, &refs).await;
        seen.per(&mut line, waiters as f64, "handoff");
        if !counted {
            line.set("requests_per_handoff", None);
            line.set("notifications_per_handoff", None);
        }
    } else {
        held.release().await?;
    }
    Ok(line)
}

/// The server's watches per waiter now, against `baseline` (taken before they queued).
pub(super) async fn watches(bed: &Bed<'_>, baseline: &Mntr, line: &mut Line, waiters: usize) {
    let queued = bed.server.mntr().await;
    let watches = baseline.grown(&queued, "zk_watch_count");
    line.set(
        "server_watches_per_waiter",
        watches.map(|w| w / waiters.max(1) as f64),
    );
}

/// What a peer's waiters send while they just wait, through `proxy`: as long as zkfence's are
/// counted (--scale-periods of zkfence's probe period; a peer's holder has no probe to count
/// whole periods of), their requests and writes per second.
pub(super) async fn idle_peer(bed: &Bed<'_>, proxy: &Proxy, line: &mut Line) {
    let window = Window::open(&bed.server, &[proxy]).await;
    tokio::time::sleep(bed.probe_period().mul_f64(bed.args.scale_periods.max(1.0))).await;
    let seen = window.close(&bed.server, &[proxy]).await;
    let seconds = seen.seconds.max(1e-9);
    let rate = |n: u64| Some(n as f64 / seconds);
    line.set("idle_seconds", Some(seconds));
    line.set("idle_writes_per_s", rate(seen.counts.writes()));
    line.set("idle_waiter_requests_per_s", rate(seen.counts.requests()));
    line.set("idle_waiter_writes_per_s", rate(seen.counts.writes()));
    line.set("idle_waiter_bytes_per_s", rate(seen.counts.bytes()));
}

/// What the waiters and the holder send while the waiters just wait, over whole probe periods
/// of the holder: the writes of both per second (the figure of issue 27's target), the
/// waiters' own requests and writes (their proxy), the holder's probes, and the server's writes
/// per second (every transaction of the ensemble: other sessions' closes and reaped containers
/// included).
async fn idle(bed: &Bed<'_>, proxies: &[Proxy; 2], line: &mut Line) {
    let seen = over_probes(bed, &proxies[0], 1, &[&proxies[0], &proxies[1]]).await;
    let (holder, waiting) = (&seen.parts[0], &seen.parts[1]);
    let seconds = seen.seconds.max(1e-9);
    let rate = |n: u64| Some(n as f64 / seconds);
    line.set("idle_seconds", Some(seconds));
    line.set("idle_writes_per_s", rate(seen.counts.writes()));
    line.set("idle_waiter_requests_per_s", rate(waiting.requests()));
    line.set("idle_waiter_writes_per_s", rate(waiting.writes()));
    line.set("idle_waiter_bytes_per_s", rate(waiting.bytes()));
    line.set("idle_holder_multis_per_s", rate(holder.op(OP_MULTI)));
    line.set(
        "idle_server_writes_per_s",
        seen.server_writes.and_then(rate),
    );
    line.set(
        "idle_client_cpu_ms_per_s",
        Some(seen.client_cpu.as_secs_f64() * 1e3 / seconds),
    );
    line.set(
        "idle_server_cpu_ms_per_s",
        seen.server_cpu.map(|c| c.as_secs_f64() * 1e3 / seconds),
    );
}

/// The raw limit the drain is held against: one client's delete to another's watch firing
/// (the bench's raw contended run, --seconds or 3 s, through a counting proxy as the drains
/// are), as a rate: one over its median.
pub(super) async fn raw(bed: &Bed<'_>, round: usize) -> Result<Line, String> {
    let proxy = bed.server.proxy().await;
    let seconds = bed.args.seconds.unwrap_or(3.0);
    let run = Run {
        seconds,
        warmup: (seconds / 6.0).min(0.5),
        ..Run::new(bed.args, Impl::Raw, Mode::Contended, 2)
    };
    let report = run.execute(&bed.server.via(&proxy), &bed.args.lock).await?;
    let mut line = Line::new("raw", "raw", round, &[]);
    line.set("notification_p50_us", report.handoff_p50_us);
    line.set("notification_p99_us", report.handoff_p99_us);
    line.set(
        "notifications_per_s",
        report.handoff_p50_us.map(|us| 1e6 / us),
    );
    Ok(line)
}

/// One contender of the lock.
enum Contender {
    /// zkfence's lock on its path.
    Zkfence(FencedLock),
    /// zookeeper-client's lock on this path.
    Zkclient(zk::Client, String),
}

/// A contender's hold.
enum Hold {
    /// zkfence's guard.
    Zkfence(LockGuard),
    /// The session and its lock node.
    Zkclient(zk::Client, String),
}

impl Contender {
    /// `peer`'s contender for `path` on `client`.
    fn new(peer: Peer, client: zk::Client, path: &str) -> Result<Contender, String> {
        Ok(match peer {
            Peer::Zkfence => Contender::Zkfence(
                FencedLock::new(client, path.to_owned(), LockOptions::default())
                    .map_err(|e| e.to_string())?,
            ),
            Peer::Zkclient => Contender::Zkclient(client, path.to_owned()),
            Peer::Curator => return Err("Curator's waiters are the Curator worker's".into()),
        })
    }

    /// Waits for the lock.
    async fn acquire(&self) -> Result<Hold, String> {
        match self {
            Contender::Zkfence(lock) => lock
                .acquire()
                .await
                .map(Hold::Zkfence)
                .map_err(|e| e.to_string()),
            Contender::Zkclient(client, path) => {
                let prefix =
                    zk::LockPrefix::new_curator(path, "lock-").map_err(|e| e.to_string())?;
                let locked = client.lock(prefix, b"", zk::Acls::anyone_all()).await;
                let locked = locked.map_err(|e| e.to_string())?;
                let node = locked.lock_path().to_owned();
                // Released below by an awaited delete: the lock client's own delete on drop
                // would be a second one.
                std::mem::forget(locked);
                Ok(Hold::Zkclient(client.clone(), node))
            }
        }
    }
}

impl Hold {
    /// Lets go: zkfence's release, or the delete of the node.
    async fn release(self) -> Result<(), String> {
        match self {
            Hold::Zkfence(guard) => guard.release().await.map_err(|e| e.to_string()),
            Hold::Zkclient(client, node) => {
                client.delete(&node, None).await.map_err(|e| e.to_string())
            }
        }
    }
}
