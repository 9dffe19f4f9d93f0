//! Curator's side of the recipes at scale: `bench/java/CuratorScaleBench.java` in a JVM of its own
//! ([`Worker`]), compiled at run time against Debian's jars, with its sessions through counting
//! proxies of this process; driven one command at a time, and counted here between its `go`
//! and its `done` exactly as zkfence's side is (`recipes`, `election`).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::bed::Bed;
use super::count::{await_nodes, settle, Counts, Seen, Window};
use super::line::Line;
use super::proxy::Proxy;

/// The class path that runs the worker (`bench/java/CuratorScaleBench.java`), compiled on
/// first use.
fn classpath() -> Result<String, String> {
    let source = include_str!("../../java/CuratorScaleBench.java");
    zkfence_harness::curator::worker("CuratorScaleBench", source)
}

/// A running worker: its sessions (through `proxy`), and the proxy its election observers use.
#[derive(Debug)]
pub(super) struct Worker {
    /// The JVM, killed when dropped.
    child: Child,
    /// Where commands go.
    stdin: ChildStdin,
    /// Where its answers come from, a line each.
    stdout: Lines<BufReader<ChildStdout>>,
    /// The proxy of its sessions (contenders, candidates).
    proxy: Proxy,
    /// The proxy of its election observers' sessions.
    observers: Proxy,
}

impl Worker {
    /// Starts a worker with `sessions` sessions of timeout T; returns once they are connected.
    pub(super) async fn start(bed: &Bed<'_>, sessions: usize) -> Result<Worker, String> {
        let classpath = tokio::task::spawn_blocking(classpath)
            .await
            .map_err(|e| format!("compiling the Curator worker: {e}"))??;
        let (proxy, observers) = (bed.server.proxy().await, bed.server.proxy().await);
        let mut child = tokio::process::Command::new("java")
            .args(["-Xmx1g", "-Xss512k", "-cp", &classpath, "CuratorScaleBench"])
            .arg(bed.server.direct())
            .arg(bed.server.via(&proxy))
            .arg(bed.server.via(&observers))
            .arg(sessions.to_string())
            .arg(bed.session_timeout().as_millis().to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run java: {e}"))?;
        let stdin = child.stdin.take().ok_or("the worker has no stdin")?;
        let stdout = child.stdout.take().ok_or("the worker has no stdout")?;
        let mut worker = Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            proxy,
            observers,
        };
        let wait = Duration::from_secs(120) + Duration::from_millis(20 * sessions as u64);
        worker.expect("connected", wait).await?;
        Ok(worker)
    }

    /// Sends one command line.
    async fn send(&mut self, line: &str) -> Result<(), String> {
        let line = format!("{line}\n");
        let sent = self.stdin.write_all(line.as_bytes()).await;
        sent.map_err(|e| format!("the Curator worker is gone: {e}"))?;
        self.stdin.flush().await.map_err(|e| e.to_string())
    }

    /// Reads lines until one starting with `word` (its other words), within `wait`; an `error`
    /// line, the end of the output or the time running out is an error.
    async fn expect(&mut self, word: &str, wait: Duration) -> Result<Vec<String>, String> {
        let read = async {
            while let Some(line) = self.stdout.next_line().await.map_err(|e| e.to_string())? {
                let mut words = line.split_whitespace().map(str::to_owned);
                match words.next().as_deref() {
                    Some(w) if w == word => return Ok(words.collect()),
                    Some("error") => return Err(format!("the Curator worker: {line}")),
                    _ => {}
                }
            }
            Err(format!("the Curator worker ended before {word:?}"))
        };
        tokio::time::timeout(wait, read)
            .await
            .map_err(|_| format!("the Curator worker did not say {word:?} within {wait:?}"))?
    }

    /// Opens the window, says `go`, and closes it at `done`: what the window saw (through the
    /// worker's session proxy), and the JVM's CPU time and errors from `done`.
    async fn go(&mut self, bed: &Bed<'_>) -> Result<(Seen, Duration, u64), String> {
        let window = Window::open(&bed.server, &[&self.proxy]).await;
        self.send("go").await?;
        let done = self.expect("done", Duration::from_secs(600)).await?;
        let mut seen = window.close(&bed.server, &[&self.proxy]).await;
        let number = |i: usize| done.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let jvm = Duration::from_nanos(number(1));
        seen.client_cpu = jvm;
        Ok((seen, jvm, number(2)))
    }

    /// Closes every session and ends the worker.
    pub(super) async fn quit(mut self) {
        let _ = self.send("quit").await;
        let _ = self.expect("bye", Duration::from_secs(30)).await;
        let _ = self.child.kill().await;
    }
}

/// Curator's `InterProcessMutex` with `waiters` of the worker's sessions queued behind its
/// first session's hold: what they send while they wait (as long as zkfence's waiters are
/// counted), the server's watches, and the drain from the holder's release to the last
/// waiter's: the line, per handoff.
pub(super) async fn mutex(
    bed: &Bed<'_>,
    worker: &mut Worker,
    round: usize,
    waiters: usize,
) -> Result<Line, String> {
    let path = bed.path(&format!("w{round}-{waiters}-curator"));
    bed.mkdir(&path).await?;
    let baseline = bed.server.mntr().await;
    let hold = bed.args.hold.as_nanos();
    worker
        .send(&format!("mutex {path} {waiters} {hold}"))
        .await?;
    worker.expect("started", Duration::from_secs(120)).await?;
    await_nodes(&bed.admin, &[&path], waiters + 1).await?;
    settle(&worker.proxy, waiters).await;
    let mut line = Line::new("waiters", "curator", round, &[("waiters", waiters)]);
    line.set("hold_ms", Some(bed.args.hold.as_secs_f64() * 1e3));
    super::waiters::watches(bed, &baseline, &mut line, waiters).await;
    super::waiters::idle_peer(bed, &worker.proxy, &mut line).await;
    let (seen, _, errors) = worker.go(bed).await?;
    seen.per(&mut line, waiters as f64, "handoff");
    line.set("errors", Some(errors as f64));
    Ok(line)
}

/// Curator's `InterProcessSemaphoreV2` of `permits` with `contenders` of the worker's sessions:
/// the line, per release.
pub(super) async fn semaphore(
    bed: &Bed<'_>,
    worker: &mut Worker,
    round: usize,
    permits: u32,
    contenders: usize,
) -> Result<Line, String> {
    let path = bed.path(&format!("s{round}-{permits}-curator"));
    let baseline = bed.server.mntr().await;
    worker
        .send(&format!("semaphore {path} {permits} {contenders}"))
        .await?;
    worker.expect("started", Duration::from_secs(120)).await?;
    // The holders' leases; past the permits, one more lease waiting at the gate while holding
    // the semaphore's mutex, and the rest queued on that mutex.
    let (leases, locks) = (format!("{path}/leases"), format!("{path}/locks"));
    let nodes = match (permits as usize) < contenders {
        true => contenders + 1,
        false => contenders,
    };
    await_nodes(&bed.admin, &[&leases, &locks], nodes).await?;
    settle(&worker.proxy, contenders).await;
    let mut line = Line::new(
        "semaphore",
        "curator",
        round,
        &[("permits", permits as usize), ("contenders", contenders)],
    );
    super::recipes::queued(bed, &baseline, &mut line, contenders).await;
    let (seen, _, errors) = worker.go(bed).await?;
    seen.per(&mut line, contenders as f64, "release");
    line.set("errors", Some(errors as f64));
    Ok(line)
}

/// Curator's `InterProcessReadWriteLock` with `writers` writers first and `readers` readers
/// behind them: the line, per writer release.
pub(super) async fn rwlock(
    bed: &Bed<'_>,
    worker: &mut Worker,
    round: usize,
    writers: usize,
    readers: usize,
) -> Result<Line, String> {
    let path = bed.path(&format!("rw{round}-curator"));
    let baseline = bed.server.mntr().await;
    worker
        .send(&format!("rwlock {path} {writers} {readers}"))
        .await?;
    worker.expect("started", Duration::from_secs(300)).await?;
    await_nodes(&bed.admin, &[&path], writers + readers).await?;
    settle(&worker.proxy, writers + readers).await;
    let mut line = Line::new(
        "rwlock",
        "curator",
        round,
        &[("writers", writers), ("readers", readers)],
    );
    super::recipes::queued(bed, &baseline, &mut line, writers + readers).await;
    let (seen, _, errors) = worker.go(bed).await?;
    seen.per(&mut line, writers as f64, "release");
    line.set("errors", Some(errors as f64));
    Ok(line)
}

/// Curator's `LeaderLatch` with `candidates` of the worker's sessions, and `observers` new
/// sessions watching the latch's children: the line, per observer and change.
pub(super) async fn election(
    bed: &Bed<'_>,
    worker: &mut Worker,
    round: usize,
    candidates: usize,
    observers: usize,
) -> Result<Line, String> {
    let changes = bed.args.changes.min(candidates.saturating_sub(1)).max(1);
    let path = bed.path(&format!("e{round}-{candidates}-{observers}-curator"));
    bed.mkdir(&path).await?;
    worker
        .send(&format!(
            "election {path} {candidates} {observers} {changes}"
        ))
        .await?;
    worker.expect("ready", Duration::from_secs(300)).await?;
    let before = Counts::of(&[&worker.observers]);
    let (campaigned, _, errors) = worker.go(bed).await?;
    let observed = Counts::of(&[&worker.observers]).since(&before);
    worker.send("end").await?;
    worker.expect("ended", Duration::from_secs(120)).await?;
    let mut line = Line::new(
        "election",
        "curator",
        round,
        &[("candidates", candidates), ("observers", observers)],
    );
    // The window counted the candidates (the worker's sessions); the observers' proxy apart.
    let seen = Seen {
        counts: observed,
        ..campaigned.clone()
    };
    super::election::figures(&mut line, &seen, &campaigned.counts, observers, changes);
    line.set("errors", Some(errors as f64));
    Ok(line)
}
