//! Locks held at once (each `--locks` count, over `--hold-sessions` sessions), through a
//! counting proxy: the time to acquire them all, the memory, server nodes and watches each takes,
//! the watchdog's writes while they are held (target: one probe per period per session, flat in
//! the count), and, on the local server, how long after a restart every hold is steady again
//! under a grace of T (target: two probe periods).

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use zkfence::{Acquire, FencedLock, LockGuard, LockOptions, ParentMode, SESSION_NODE_BYTES};
use zookeeper_client as zk;

use super::bed::{Bed, Mntr, DEFAULT_JUTE_MAXBUFFER};
use super::count::{over_probes, sessions, Seen, Window, OP_GET_DATA, OP_MULTI, OP_MULTI_READ};
use super::line::Line;
use super::proxy::Proxy;

/// Bytes of a lock node's name: `_c_<uuid>-lock-<10 digits>`, and jute's 4-byte length.
const NODE_NAME_BYTES: usize = 3 + 36 + 6 + 10 + 4;

/// Acquires and releases in flight at once, per session.
const IN_FLIGHT: usize = 64;

/// `locks` held at once in `round`: the line.
pub(super) async fn holds(bed: &Bed<'_>, round: usize, locks: usize) -> Result<Line, String> {
    let parent = bed.path(&format!("h{round}-{locks}-zkfence"));
    bed.mkdir(&parent).await?;
    paths(&bed.admin, &parent, locks).await?;
    let (options, session_count, budget) = options(bed, &parent, locks);
    let proxy = bed.server.proxy().await;
    let t = bed.session_timeout();
    let clients = sessions(&bed.server.via(&proxy), session_count, t).await?;
    warm(&clients[0], &parent, &options, locks.clamp(1, 100)).await?;
    let mut line = Line::new(
        "holds",
        "zkfence",
        round,
        &[("locks", locks), ("sessions", session_count)],
    );
    line.set("session_node_budget_bytes", Some(budget as f64));
    line.set(
        "jute_maxbuffer",
        bed.server.jute_maxbuffer().map(|j| j as f64),
    );
    let before = Footprint::now(bed).await;
    let window = Window::open(&bed.server, &[&proxy]).await;
    let guards = hold_all(&clients, &parent, locks, &options).await?;
    let acquired = window.close(&bed.server, &[&proxy]).await;
    armed(&proxy).await;
    let after = Footprint::now(bed).await;
    acquisition(&mut line, &acquired, locks);
    before.per_hold(&after, &mut line, locks);
    let idle = over_probes(bed, &proxy, session_count, &[&proxy]).await;
    holding(bed, &mut line, &idle, session_count);
    if bed.server.can_restart() {
        restart(bed, &guards, &mut line).await?;
    }
    let released = Instant::now();
    release_all(guards, IN_FLIGHT * session_count).await;
    line.set("release_all_s", Some(released.elapsed().as_secs_f64()));
    remove(&bed.admin, &parent, locks).await;
    Ok(line)
}

/// Creates the lock paths under `parent`, 256 at a time, before the count: zkfence's and
/// zookeeper-client's holds are measured on paths that exist (zookeeper-client's lock creates
/// none).
pub(super) async fn paths(admin: &zk::Client, parent: &str, locks: usize) -> Result<(), String> {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let mut pending = JoinSet::new();
    for path in (0..locks).map(|i| format!("{parent}/{i}")) {
        let (admin, persistent) = (admin.clone(), persistent.clone());
        pending.spawn(async move {
            match admin.create(&path, &[], &persistent).await {
                Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
                Err(err) => Err(format!("cannot create {path}: {err}")),
            }
        });
        if pending.len() >= 256 {
            if let Some(done) = pending.join_next().await {
                done.map_err(|e| e.to_string())??;
            }
        }
    }
    while let Some(done) = pending.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Deletes the lock paths under `parent` (and it), 256 at a time; what remains is left.
pub(super) async fn remove(admin: &zk::Client, parent: &str, locks: usize) {
    let mut pending = JoinSet::new();
    for path in (0..locks).map(|i| format!("{parent}/{i}")) {
        let admin = admin.clone();
        pending.spawn(async move {
            let _ = admin.delete(&path, None).await;
        });
        if pending.len() >= 256 {
            pending.join_next().await;
        }
    }
    while pending.join_next().await.is_some() {}
    for i in 0..100 {
        let _ = admin.delete(&format!("{parent}-warm/{i}"), None).await;
    }
    let _ = admin.delete(&format!("{parent}-warm"), None).await;
    let _ = admin.delete(parent, None).await;
}

/// The locks' options (a grace of T; a node budget of half the server's `jute.maxbuffer`, at
/// least the default), the sessions to spread `locks` over (--hold-sessions, more where one
/// session's share would pass the budget) and the budget.
fn options(bed: &Bed<'_>, parent: &str, locks: usize) -> (LockOptions, usize, usize) {
    let jute = (bed.server.jute_maxbuffer()).unwrap_or(DEFAULT_JUTE_MAXBUFFER);
    let budget = SESSION_NODE_BYTES.max(jute / 2);
    let node_bytes = parent.len() + 1 + locks.to_string().len() + 1 + NODE_NAME_BYTES;
    // The warm-up's nodes are gone before these are taken; a margin of 5% all the same.
    let per_session = (budget * 95 / 100 / node_bytes).max(1);
    let wanted = bed.args.hold_sessions.clamp(1, locks.max(1));
    let session_count = wanted.max(locks.div_ceil(per_session));
    if session_count > wanted {
        eprintln!(
            "bench: {locks} locks at ~{node_bytes} bytes of path each pass one session's node budget of {budget} bytes (half the server's jute.maxbuffer of {jute}): spread over {session_count} sessions"
        );
    }
    // Persistent lock paths, deleted once released: containers would be reaped by the server
    // a minute later, in the middle of another measurement.
    let options = LockOptions::default()
        .with_grace(bed.session_timeout())
        .with_session_node_bytes(budget)
        .with_parent_mode(ParentMode::Persistent);
    (options, session_count, budget)
}

/// Takes and releases `locks` locks (up to 100) on `client`, so that the memory baseline is
/// not the cold process's.
async fn warm(
    client: &zk::Client,
    parent: &str,
    options: &LockOptions,
    locks: usize,
) -> Result<(), String> {
    for i in 0..locks {
        let path = format!("{parent}-warm/{i}");
        let lock = FencedLock::new(client.clone(), path, options.clone());
        let guard = lock.map_err(|e| e.to_string())?.acquire().await;
        let guard = guard.map_err(|e| format!("warm-up: {e}"))?;
        guard.release().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Acquires `locks` locks under `parent`, lock `i` on session `i mod sessions`, 64 in flight
/// per session.
async fn hold_all(
    clients: &[zk::Client],
    parent: &str,
    locks: usize,
    options: &LockOptions,
) -> Result<Vec<LockGuard>, String> {
    let mut guards = Vec::with_capacity(locks);
    let mut pending = JoinSet::new();
    for i in 0..locks {
        let client = clients[i % clients.len()].clone();
        let lock = FencedLock::new(client, format!("{parent}/{i}"), options.clone())
            .map_err(|e| e.to_string())?;
        pending.spawn(async move { lock.acquire().await });
        while pending.len() >= IN_FLIGHT * clients.len() || (i + 1 == locks && !pending.is_empty())
        {
            let Some(done) = pending.join_next().await else {
                break;
            };
            let guard = done.map_err(|e| e.to_string())?;
            guards.push(guard.map_err(|e| format!("acquiring lock {}: {e}", guards.len()))?);
        }
    }
    Ok(guards)
}

/// Waits (up to two minutes) until the watchdog has armed the held locks' node watches (one
/// getData each, as many as its watch share takes): the count stops growing for a second.
async fn armed(proxy: &Proxy) {
    let by = Instant::now() + Duration::from_secs(120);
    let mut seen = count(proxy, OP_GET_DATA);
    while Instant::now() < by {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = count(proxy, OP_GET_DATA);
        if now == seen {
            break;
        }
        seen = now;
    }
}

/// The requests with `opcode` `proxy` has passed on so far.
fn count(proxy: &Proxy, opcode: i32) -> u64 {
    proxy.counting().counts().get(&opcode).copied().unwrap_or(0)
}

/// What acquiring them all took: the time, and per lock the requests and CPU.
pub(super) fn acquisition(line: &mut Line, seen: &Seen, locks: usize) {
    let per = locks.max(1) as f64;
    line.set("acquire_all_s", Some(seen.seconds));
    line.set("acquisitions_per_s", Some(per / seen.seconds.max(1e-9)));
    line.set(
        "acquire_requests_per_lock",
        Some(seen.counts.requests() as f64 / per),
    );
    line.set(
        "acquire_client_cpu_us_per_lock",
        Some(seen.client_cpu.as_secs_f64() * 1e6 / per),
    );
    line.set(
        "acquire_server_cpu_us_per_lock",
        seen.server_cpu.map(|c| c.as_secs_f64() * 1e6 / per),
    );
}

/// This process's memory and tasks, and the server's `mntr`, at one moment.
pub(super) struct Footprint {
    /// Resident memory, bytes.
    rss: u64,
    /// The allocator's bytes in use (chunks with their headers), as glibc counts them.
    heap: u64,
    /// Tokio tasks alive.
    tasks: usize,
    /// The server's figures.
    mntr: Mntr,
}

impl Footprint {
    /// The footprint now.
    pub(super) async fn now(bed: &Bed<'_>) -> Footprint {
        Footprint {
            rss: rss_bytes(),
            heap: heap_bytes(),
            tasks: tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            mntr: bed.server.mntr().await,
        }
    }

    /// What each of `locks` holds took between `self` and `later`: memory, tasks, server
    /// ephemerals, watches and data.
    pub(super) fn per_hold(&self, later: &Footprint, line: &mut Line, locks: usize) {
        let per = locks.max(1) as f64;
        let rss = later.rss.saturating_sub(self.rss) as f64;
        line.set("rss_bytes_per_hold", Some(rss / per));
        let heap = later.heap as f64 - self.heap as f64;
        line.set("heap_bytes_per_hold", Some(heap / per));
        let tasks = later.tasks as f64 - self.tasks as f64;
        line.set("tasks_per_hold", Some(tasks / per));
        for (name, key) in [
            ("server_ephemerals_per_hold", "zk_ephemerals_count"),
            ("server_watches_per_hold", "zk_watch_count"),
            ("server_znodes_per_hold", "zk_znode_count"),
            ("server_data_bytes_per_hold", "zk_approximate_data_size"),
        ] {
            line.set(name, self.mntr.grown(&later.mntr, key).map(|v| v / per));
        }
    }
}

/// Resident memory of this process, from /proc/self/statm, after the allocator has given the
/// pages of its free memory back (`malloc_trim`): without that, memory freed by an earlier
/// measurement (a thousand sessions' buffers) is reused for the holds without any growth, and
/// the holds look free.
fn rss_bytes() -> u64 {
    // SAFETY: malloc_trim only returns free memory to the system.
    unsafe { libc::malloc_trim(0) };
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64
}

/// The bytes the allocator has handed out and not got back, in every arena and in mapped
/// chunks, each chunk counted with its header and rounding (glibc's `mallinfo2`): what the
/// holds cost the heap, without the page-sized steps and the allocator's spare pages that make
/// the resident size noisy.
fn heap_bytes() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

/// The watchdog's cost while holding: probes (multis) per second and per probe period per
/// session, every request, the server's writes, both ends' CPU per second.
fn holding(bed: &Bed<'_>, line: &mut Line, idle: &Seen, sessions: usize) {
    let seconds = idle.seconds.max(1e-9);
    let periods = seconds / bed.probe_period().as_secs_f64();
    let multis = idle.counts.op(OP_MULTI) as f64;
    line.set(
        "probe_period_ms",
        Some(bed.probe_period().as_secs_f64() * 1e3),
    );
    line.set(
        "measured_probe_period_ms",
        (multis > 0.0).then(|| seconds * 1e3 * sessions as f64 / multis),
    );
    line.set("held_seconds", Some(seconds));
    // The holds past the watchdog's watch share, read back once a probe period.
    let reads = idle.counts.op(OP_MULTI_READ) as f64;
    line.set(
        "multi_reads_per_period_per_session",
        Some(reads / periods / sessions.max(1) as f64),
    );
    line.set("bytes_per_s", Some(idle.counts.bytes() as f64 / seconds));
    line.set("multis_per_s", Some(multis / seconds));
    line.set(
        "multis_per_period_per_session",
        Some(multis / periods / sessions.max(1) as f64),
    );
    line.set(
        "requests_per_s",
        Some(idle.counts.requests() as f64 / seconds),
    );
    line.set(
        "server_writes_per_s",
        idle.server_writes.map(|w| w as f64 / seconds),
    );
    line.set(
        "client_cpu_ms_per_s",
        Some(idle.client_cpu.as_secs_f64() * 1e3 / seconds),
    );
    line.set(
        "server_cpu_ms_per_s",
        idle.server_cpu.map(|c| c.as_secs_f64() * 1e3 / seconds),
    );
}

/// Restarts the server under the held locks and times how long after it serves again every
/// hold that went into jeopardy is steady again (`Held::steady`), in milliseconds and in probe
/// periods; how many went into jeopardy (each is watched from before the kill: a hold not yet
/// in jeopardy when the server is back would pass `steady` at once), and how many were lost.
async fn restart(bed: &Bed<'_>, guards: &[LockGuard], line: &mut Line) -> Result<(), String> {
    let t = bed.session_timeout();
    let mut through = JoinSet::new();
    for guard in guards {
        through.spawn(through_jeopardy(guard.held(), t));
    }
    let killed = Instant::now();
    bed.server.restart()?;
    let up = Instant::now();
    let (mut entered, mut lost, mut last) = (0, 0, None::<Instant>);
    let limit = t * 3 + Duration::from_secs(60);
    let waited = tokio::time::timeout(limit, async {
        while let Some(done) = through.join_next().await {
            match done {
                Ok(Passage::Steady(at)) => {
                    entered += 1;
                    last = last.max(Some(at));
                }
                Ok(Passage::Untouched) => {}
                Ok(Passage::Lost) | Err(_) => lost += 1,
            }
        }
    })
    .await;
    let period = bed.probe_period().as_secs_f64();
    line.set("restart_down_ms", Some((up - killed).as_secs_f64() * 1e3));
    line.set("in_jeopardy", Some(f64::from(entered + lost)));
    line.set("lost_in_restart", Some(f64::from(lost)));
    let all_steady = waited.is_ok() && lost == 0;
    let after = |from: Instant| {
        let ms = last.map_or(0.0, |at| {
            at.saturating_duration_since(from).as_secs_f64() * 1e3
        });
        all_steady.then_some(ms)
    };
    line.set("steady_after_up_ms", after(up));
    line.set(
        "steady_after_up_periods",
        after(up).map(|ms| ms / 1e3 / period),
    );
    line.set("steady_after_kill_ms", after(killed));
    Ok(())
}

/// What a restart did to one hold.
enum Passage {
    /// It went into jeopardy and was steady again at this instant.
    Steady(Instant),
    /// It never went into jeopardy (within T of the kill) and is steady.
    Untouched,
    /// It was lost.
    Lost,
}

/// Follows `held` through the restart about to happen: its jeopardy (if it comes within `t`),
/// then its end, steady again or lost.
async fn through_jeopardy(held: zkfence::Held, t: Duration) -> Passage {
    let mut jeopardy = held.jeopardy();
    let entered =
        (tokio::time::timeout(t, jeopardy.wait_for(|j| *j)).await).is_ok_and(|seen| seen.is_ok());
    match (held.steady().await, entered) {
        (Err(_), _) => Passage::Lost,
        (Ok(()), true) => Passage::Steady(Instant::now()),
        (Ok(()), false) => Passage::Untouched,
    }
}

/// Releases every guard, `in_flight` at a time.
async fn release_all(guards: Vec<LockGuard>, in_flight: usize) {
    let mut pending = JoinSet::new();
    for guard in guards {
        pending.spawn(async move {
            let _ = guard.release().await;
        });
        if pending.len() >= in_flight {
            pending.join_next().await;
        }
    }
    while pending.join_next().await.is_some() {}
}
