//! What the bench's modes share around single runs: the server's warm-up, and the counted runs
//! (through a counting proxy: requests by operation and watch notifications per acquisition).

use zkfence_testkit::CountingProxy;

use super::options::{Args, Impl, Mode, Run};
use super::report::Report;
use super::stats::per_acquisition;

/// What a counted run sent and received, per acquisition (pings and the session's close left
/// out).
#[derive(Debug, Clone)]
pub(super) struct Counted {
    pub(super) requests: f64,
    /// NaN where not counted (the Redis peers).
    pub(super) notifications: f64,
    /// Requests by operation name, sorted by opcode.
    pub(super) by_op: Vec<(String, f64)>,
}

impl Counted {
    /// The counts `proxy` made over a run of `acquisitions`.
    pub(super) fn from_proxy(proxy: &CountingProxy, acquisitions: u64) -> Counted {
        let mut counts: Vec<(i32, u64)> = proxy.counts().into_iter().collect();
        counts.retain(|(op, _)| *op != OP_CLOSE_SESSION);
        counts.sort();
        Counted {
            requests: per_acquisition(counts.iter().map(|(_, n)| n).sum(), acquisitions),
            notifications: per_acquisition(proxy.notifications(), acquisitions),
            by_op: counts
                .iter()
                .map(|(op, n)| (opcode_name(*op), per_acquisition(*n, acquisitions)))
                .collect(),
        }
    }

    /// Nothing counted (an uncounted run).
    pub(super) fn none() -> Counted {
        Counted {
            requests: f64::NAN,
            notifications: f64::NAN,
            by_op: Vec::new(),
        }
    }

    /// `report`'s JSON line, with these counts if anything was counted.
    pub(super) fn line(&self, report: &Report) -> String {
        match self.requests.is_nan() {
            true => report.json(),
            false => self.json(report),
        }
    }

    /// `report`'s JSON line with these counts added.
    pub(super) fn json(&self, report: &Report) -> String {
        let json = report.json();
        let by_op: Vec<String> = (self.by_op.iter())
            .map(|(op, n)| format!("\"{op}\":{n:.3}"))
            .collect();
        let notifications = match self.notifications.is_nan() {
            true => "null".to_owned(),
            false => format!("{:.3}", self.notifications),
        };
        format!(
            "{},\"counted\":true,\"requests_per_acq\":{:.3},\"notifications_per_acq\":{notifications},\"requests_by_op\":{{{}}}}}",
            &json[..json.len() - 1],
            self.requests,
            by_op.join(",")
        )
    }
}

/// ZooKeeper's closeSession opcode.
const OP_CLOSE_SESSION: i32 = -11;

/// ZooKeeper's opcodes by name, as the counted runs report them.
pub(crate) fn opcode_name(op: i32) -> String {
    let name = match op {
        OP_CLOSE_SESSION => "closeSession",
        1 => "create",
        2 => "delete",
        3 => "exists",
        4 => "getData",
        5 => "setData",
        8 => "getChildren",
        9 => "sync",
        12 => "getChildren2",
        13 => "check",
        14 => "multi",
        15 => "create2",
        17 => "checkWatches",
        18 => "removeWatches",
        19 => "createContainer",
        22 => "multiRead",
        101 => "setWatches",
        105 => "setWatches2",
        106 => "addWatch",
        op => return format!("op{op}"),
    };
    name.to_owned()
}

/// One run of a Redis peer, counting the commands the Redis server processed (its own count,
/// `INFO stats`; the few this count and the connections cost included) per acquisition; no
/// notification count.
pub(super) async fn counted_redis(run: Run, lock: &str) -> Result<(Report, Counted), String> {
    let addr = run.redis.ok_or("no Redis server")?.to_string();
    let count = || async {
        crate::redis_lock::commands_processed(&addr)
            .await
            .map_err(|e| format!("cannot count Redis commands: {e}"))
    };
    let before = count().await?;
    let run = Run { warmup: 0.0, ..run };
    let report = run.execute("", lock).await?;
    let after = count().await?;
    let counted = Counted {
        requests: per_acquisition(after.saturating_sub(before), report.acquisitions),
        notifications: f64::NAN,
        by_op: Vec::new(),
    };
    Ok((report, counted))
}

/// One run of `run` through a counting proxy in front of the first of `hosts`, with no warmup (every
/// request it sends is divided by every acquisition it made): its report and counts.
pub(super) async fn counted(
    run: Run,
    hosts: &str,
    lock: &str,
) -> Result<(Report, Counted), String> {
    // The proxy stands in for the first server; a chroot stays on the connect string.
    let (servers, chroot) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
    let first = servers.split(',').next().unwrap_or(servers);
    let proxy = CountingProxy::start(first).await;
    let run = Run { warmup: 0.0, ..run };
    let report = run
        .execute(&format!("{}{chroot}", proxy.addr), lock)
        .await?;
    let counted = Counted::from_proxy(&proxy, report.acquisitions);
    Ok((report, counted))
}

/// Requests each impl sends per acquisition, through a counting proxy, over 2 s.
pub(super) async fn requests_per_acquisition(
    hosts: &str,
    args: &Args,
    implementation: Impl,
    mode: Mode,
    contenders: usize,
) -> Result<f64, String> {
    let run = Run {
        seconds: 2.0,
        ..Run::new(args, implementation, mode, contenders)
    };
    let (_, counted) = counted(run, hosts, &args.lock).await?;
    Ok(counted.requests)
}

/// Runs contended and uncontended cycles, unmeasured, for `--server-warmup` seconds, so that
/// the server's JIT has compiled its hot paths before the first measured run: a fresh server
/// runs its first seconds several times slower, which would fall on whichever run came first.
pub(super) async fn warm_up(args: &Args, hosts: &str) -> Result<(), String> {
    if args.server_warmup <= 0.0 {
        return Ok(());
    }
    eprintln!(
        "bench: warming the server up for {} s ...",
        args.server_warmup
    );
    for (implementation, mode, contenders) in [
        (Impl::Raw, Mode::Uncontended, 1),
        (Impl::Zkfence, Mode::Contended, 8),
    ] {
        let run = Run {
            seconds: 0.0,
            warmup: args.server_warmup / 2.0,
            ..Run::new(args, implementation, mode, contenders)
        };
        run.execute(hosts, &args.lock).await?;
    }
    Ok(())
}
