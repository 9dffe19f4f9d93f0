//! The bench's Curator driver: `bench/java/CuratorBench.java` (Apache Curator's
//! `InterProcessMutex` under the workload the Rust drivers run), compiled once per process
//! against Debian's jars and run in a JVM of its own; its samples are summarised here, with the
//! same percentile.

use super::options::Run;
use super::report::Report;
use super::stats::{writes_per_acquisition, Latencies};

/// The class path that runs the worker (`bench/java/CuratorBench.java`, built into the binary
/// so that the bench runs from anywhere), compiled on first use.
fn classpath() -> Result<String, String> {
    zkfence_harness::curator::worker("CuratorBench", include_str!("../java/CuratorBench.java"))
}

/// One run of Curator's mutex on `path` (which exists, with its `zxid` probe node).
pub(super) async fn run(run: Run, hosts: &str, path: &str) -> Result<Report, String> {
    let classpath = tokio::task::spawn_blocking(classpath)
        .await
        .map_err(|e| format!("compiling the Curator worker: {e}"))??;
    let output = tokio::process::Command::new("java")
        .args(["-Xmx256m", "-cp", &classpath, "CuratorBench", hosts, path])
        .arg(run.mode.name())
        .arg(run.contenders.to_string())
        .arg(run.warmup.to_string())
        .arg(run.seconds.to_string())
        .arg(run.hold.as_nanos().to_string())
        .arg(run.server_pid.unwrap_or(0).to_string())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run java: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the Curator worker failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse(run, &stdout)
}

/// The worker's report, one `name value...` line per figure.
fn parse(run: Run, stdout: &str) -> Result<Report, String> {
    let values = |name: &str| -> Result<Vec<u64>, String> {
        let line = stdout
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)
                    .filter(|rest| rest.is_empty() || rest.starts_with(' '))
            })
            .ok_or_else(|| format!("the Curator worker printed no {name:?} line: {stdout:?}"))?;
        line.split_whitespace()
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("bad {name} value {v:?} from the Curator worker"))
            })
            .collect()
    };
    let one = |name: &str| -> Result<u64, String> {
        values(name)?
            .first()
            .copied()
            .ok_or_else(|| format!("the Curator worker printed an empty {name:?} line"))
    };
    let zxids = values("zxids")?;
    let [first, last] = zxids[..] else {
        return Err(format!("the Curator worker printed zxids {zxids:?}"));
    };
    let cycles = Latencies::from_nanos(&values("cycles")?);
    let handoffs = Latencies::from_nanos(&values("handoffs")?);
    let acquisitions = one("acquisitions")?;
    // Nanoseconds of CPU in the measured window: the JVM's, and the server's (0: unknown).
    let cpu = values("cpu")?;
    let per = |ns: u64| ns as f64 / 1000.0 / acquisitions.max(1) as f64;
    let (client_cpu_us, server_cpu_us) = match cpu[..] {
        [jvm, server] => (
            Some(per(jvm)),
            (run.server_pid.is_some()).then(|| per(server)),
        ),
        _ => return Err(format!("the Curator worker printed cpu {cpu:?}")),
    };
    Ok(Report {
        writes_per_acq: Some(writes_per_acquisition(
            first as i64,
            last as i64,
            acquisitions,
        )),
        violations: one("violations")?,
        errors: one("errors")?,
        client_cpu_us,
        server_cpu_us,
        ..Report::of(run, acquisitions, &cycles, &handoffs)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Impl, Mode};

    fn run() -> Run {
        Run {
            implementation: Impl::Curator,
            mode: Mode::Contended,
            contenders: 2,
            seconds: 1.0,
            warmup: 0.0,
            hold: std::time::Duration::ZERO,
            server_pid: None,
            redis: None,
        }
    }

    #[test]
    fn parses_the_workers_report() {
        let out = "acquisitions 3\nviolations 0\nerrors 1\nzxids 100 110\ncpu 3000 0\ncycles 3000 1000 2000\nhandoffs 500\n";
        let report = parse(run(), out).unwrap();
        assert_eq!(report.acquisitions, 3);
        assert_eq!(report.errors, 1);
        assert_eq!(report.cycle_p50_us, 2.0);
        assert_eq!(report.handoff_p50_us, Some(0.5));
        assert_eq!(report.writes_per_acq, Some(3.0));
        assert_eq!(report.client_cpu_us, Some(1.0));
        assert_eq!(report.server_cpu_us, None);
    }

    #[test]
    fn a_report_missing_a_line_is_an_error_not_a_zero() {
        let err = parse(
            run(),
            "acquisitions 3\nviolations 0\nerrors 0\ncycles\nhandoffs\n",
        )
        .unwrap_err();
        assert!(err.contains("zxids"), "{err}");
    }
}
