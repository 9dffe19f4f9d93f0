//! One failover trial: a leader process and a queued standby on a fresh election path, a fault
//! injected into the leader (kill -9, or SIGSTOP until the standby leads), and what followed:
//! the standby's first step, and for a pause the steps the old leader still took after it.

use std::time::Duration;

use zookeeper_client as zk;

use super::candidate::unix_nanos;
use super::process::{Candidate, Setup, Side};

/// How long a candidate may take to start and lead an empty election (a JVM included).
const START: Duration = Duration::from_secs(30);
/// Between the standby's node appearing and the fault: its first listing and its watch on the
/// leader's node are in place, as a long-running standby's would be.
const SETTLE: Duration = Duration::from_millis(250);

/// The fault injected into the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    /// SIGKILL: the process is gone, its session lives on until the server expires it.
    Kill,
    /// SIGSTOP until the standby leads, then SIGCONT: a GC pause or a stalled VM.
    Pause,
}

impl Fault {
    /// The fault as the JSON lines name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
        }
    }

    /// The fault as the tables describe it.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Fault::Kill => "kill -9 of the leader",
            Fault::Pause => "SIGSTOP of the leader until the standby leads, then SIGCONT",
        }
    }
}

/// Which trial to run.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    /// The round (from 1).
    pub(super) round: usize,
    /// The fault injected into the leader.
    pub(super) fault: Fault,
    /// Whose candidates run: both leader and standby are of one implementation.
    pub(super) side: Side,
    /// A fresh election path for this trial alone.
    pub(super) path: String,
}

/// What a paused leader did once it woke up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stale {
    /// Steps it reported with a time after the standby's first step: moments at which it
    /// still believed it led while the standby led.
    pub(super) steps: usize,
    /// From the standby's first step to the old leader's `deposed` (`None`: not within 2·T
    /// of its SIGCONT).
    pub(super) window_ns: Option<u64>,
    /// From its SIGCONT to its `deposed`.
    pub(super) after_resume_ns: Option<u64>,
}

/// One trial's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trial {
    /// The round (from 1).
    pub(super) round: usize,
    /// The fault injected into the leader.
    pub(super) fault: Fault,
    /// Whose candidates ran.
    pub(super) side: Side,
    /// The session timeout the candidates asked for.
    pub(super) asked_ms: u64,
    /// The session timeout the server granted the leader: T, below which no failover can be
    /// counted from the leader's last contact.
    pub(super) granted_ms: u64,
    /// From the fault to the standby's first step.
    pub(super) failover_ns: u64,
    /// From the fault to a third client's notice that the leader's node is gone (its session
    /// expired): the part of the failover that the server's expiry takes. `None` if the notice
    /// did not come (the observer's own session had trouble).
    pub(super) node_gone_ns: Option<u64>,
    /// The leader's epoch (zkfence) or node sequence (Curator).
    pub(super) leader_epoch: u64,
    /// The standby's, greater.
    pub(super) successor_epoch: u64,
    /// For a pause, what the old leader did once it woke up.
    pub(super) stale: Option<Stale>,
}

impl Trial {
    /// The failover in milliseconds.
    pub(super) fn failover_ms(&self) -> f64 {
        self.failover_ns as f64 / 1e6
    }

    /// The failover beyond the granted session timeout, in milliseconds (negative when the
    /// server expired the leader's session less than T after the fault: it counts from the
    /// leader's last contact, which came before).
    pub(super) fn over_timeout_ms(&self) -> f64 {
        self.failover_ms() - self.granted_ms as f64
    }

    /// From the third client's notice that the leader's node is gone to the standby's first
    /// step, in milliseconds: the implementation's own part of the failover (negative when the
    /// standby was notified, and led, before the observer was notified).
    pub(super) fn handoff_ms(&self) -> Option<f64> {
        self.node_gone_ns
            .map(|gone| (self.failover_ns as f64 - gone as f64) / 1e6)
    }

    /// The trial's JSON line.
    pub(super) fn json(&self) -> String {
        let ms =
            |ns: Option<u64>| ns.map_or("null".to_owned(), |ns| format!("{:.3}", ns as f64 / 1e6));
        let stale = match &self.stale {
            Some(stale) => format!(
                "\"stale_steps\":{},\"stale_window_ms\":{},\"deposed_after_resume_ms\":{}",
                stale.steps,
                ms(stale.window_ns),
                ms(stale.after_resume_ns)
            ),
            None => {
                "\"stale_steps\":null,\"stale_window_ms\":null,\"deposed_after_resume_ms\":null"
                    .to_owned()
            }
        };
        format!(
            "{{\"bench\":\"failover\",\"round\":{},\"fault\":\"{}\",\"impl\":\"{}\",\"session_timeout_ms\":{},\"granted_timeout_ms\":{},\"failover_ms\":{:.3},\"over_timeout_ms\":{:.3},\"node_gone_ms\":{},\"handoff_ms\":{},\"leader_epoch\":{},\"successor_epoch\":{},{stale}}}",
            self.round,
            self.fault.name(),
            self.side.name(),
            self.asked_ms,
            self.granted_ms,
            self.failover_ms(),
            self.over_timeout_ms(),
            ms(self.node_gone_ns),
            self.handoff_ms()
                .map_or("null".to_owned(), |ms| format!("{ms:.3}")),
            self.leader_epoch,
            self.successor_epoch,
        )
    }
}

/// Runs one trial; every process it started is killed and reaped before it returns.
pub(super) async fn run(setup: &Setup, admin: &zk::Client, spec: &Spec) -> Result<Trial, String> {
    let mut leader = Candidate::start(spec.side, setup, &spec.path)?;
    let mut standby = None;
    let trial = drive(setup, admin, spec, &mut leader, &mut standby).await;
    leader.kill().await;
    if let Some(standby) = standby {
        standby.kill().await;
    }
    trial
}

/// The trial's steps, with its processes owned by [`run`].
async fn drive(
    setup: &Setup,
    admin: &zk::Client,
    spec: &Spec,
    leader: &mut Candidate,
    standby: &mut Option<Candidate>,
) -> Result<Trial, String> {
    let (granted_ms, leader_epoch, _) = leader.lead(START).await?;
    let next = standby.insert(Candidate::start(spec.side, setup, &spec.path)?);
    let head = queued(admin, &spec.path, next).await?;
    let gone = node_gone(admin, &format!("{}/{head}", spec.path)).await?;
    tokio::time::sleep(SETTLE).await;

    let fault_at = unix_nanos();
    leader.signal(match spec.fault {
        Fault::Kill => libc::SIGKILL,
        Fault::Pause => libc::SIGSTOP,
    });
    let (_, successor_epoch, led_at) = next.lead(setup.session_timeout * 3 + START).await?;
    let gone_at = tokio::time::timeout(Duration::from_secs(1), gone)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
    let stale = match spec.fault {
        Fault::Kill => {
            // It is dead: its lines end at once. Only a deposal before the fault matters.
            let (_, deposed) = leader.until_deposed(Duration::from_secs(1)).await;
            deposed_before(deposed, fault_at)?;
            None
        }
        Fault::Pause => {
            let resumed_at = unix_nanos();
            leader.signal(libc::SIGCONT);
            let (steps, deposed) = leader.until_deposed(setup.session_timeout * 2).await;
            deposed_before(deposed, fault_at)?;
            Some(Stale {
                steps: steps.iter().filter(|&&at| at > led_at).count(),
                window_ns: deposed.map(|at| at.saturating_sub(led_at)),
                after_resume_ns: deposed.map(|at| at.saturating_sub(resumed_at)),
            })
        }
    };
    if successor_epoch <= leader_epoch {
        return Err(format!(
            "{}: the successor's epoch {successor_epoch} is not above the leader's {leader_epoch}",
            spec.path
        ));
    }
    Ok(Trial {
        round: spec.round,
        fault: spec.fault,
        side: spec.side,
        asked_ms: u64::try_from(setup.session_timeout.as_millis()).unwrap_or(u64::MAX),
        granted_ms,
        failover_ns: led_at.saturating_sub(fault_at),
        node_gone_ns: gone_at.map(|at| at.saturating_sub(fault_at)),
        leader_epoch,
        successor_epoch,
        stale,
    })
}

/// A leader deposed before the fault (its lease lapsed under load, say) makes the trial
/// meaningless: the standby took over from a leader that had already let go.
fn deposed_before(deposed: Option<u64>, fault_at: u64) -> Result<(), String> {
    match deposed {
        Some(at) if at < fault_at => Err(format!(
            "the leader was deposed {:.1} ms before the fault; the trial measures nothing",
            (fault_at - at) as f64 / 1e6
        )),
        _ => Ok(()),
    }
}

/// Waits until the standby's candidate node is queued behind the leader's: two candidates under
/// `path`; the leader's node (the lower sequence).
async fn queued(admin: &zk::Client, path: &str, standby: &mut Candidate) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + START;
    loop {
        let children = admin
            .list_children(path)
            .await
            .map_err(|e| format!("cannot list {path}: {e}"))?;
        let mut candidates: Vec<&String> =
            children.iter().filter(|c| c.contains("-latch-")).collect();
        if candidates.len() >= 2 {
            // Both names end in the ten-digit sequence, which orders them.
            candidates.sort_by_key(|c| c.rsplit('-').next().unwrap_or_default().to_owned());
            return Ok(candidates[0].clone());
        }
        if !standby.running() {
            return Err(standby.ended().await);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "the standby (pid {}) did not queue on {path} within {START:?}",
                standby.pid()
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Watches `node` (the leader's) from the bench's own session: the unix time at which its
/// deletion was noticed, once it is (`None` for any other event, such as a disconnect).
async fn node_gone(
    admin: &zk::Client,
    node: &str,
) -> Result<tokio::task::JoinHandle<Option<u64>>, String> {
    let (stat, watcher) = admin
        .check_and_watch_stat(node)
        .await
        .map_err(|e| format!("cannot watch {node}: {e}"))?;
    if stat.is_none() {
        return Err(format!(
            "the leader's node {node} vanished before the fault"
        ));
    }
    Ok(tokio::spawn(async move {
        let event = watcher.changed().await;
        (event.event_type == zk::EventType::NodeDeleted).then(unix_nanos)
    }))
}
