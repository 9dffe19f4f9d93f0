//! One run's figures ([`Report`]): its JSON line, and the look-up the tables and the chart
//! share.

use std::fmt::Write as _;

use super::options::{Impl, Mode, Run};
use super::stats::{per_second, Latencies};

/// One run's figures, printed as one JSON line.
#[derive(Debug, Clone, Default)]
pub(super) struct Report {
    pub(super) implementation: &'static str,
    pub(super) mode: &'static str,
    pub(super) contenders: usize,
    pub(super) seconds: f64,
    pub(super) acquisitions: u64,
    pub(super) cycle_p50_us: f64,
    pub(super) cycle_p99_us: f64,
    pub(super) handoff_p50_us: Option<f64>,
    pub(super) handoff_p99_us: Option<f64>,
    pub(super) read_p50_us: Option<f64>,
    /// Raw: a create with the listing pipelined behind it + delete (uncontended only).
    pub(super) listed_cycle_p50_us: Option<f64>,
    /// The server's transactions per acquisition in the measured window (zxid probes).
    pub(super) writes_per_acq: Option<f64>,
    pub(super) violations: u64,
    pub(super) errors: u64,
    /// CPU time per acquisition in the measured window, in microseconds: the contenders'
    /// process (this one, or Curator's JVM) and the ZooKeeper server (when the bench started
    /// it).
    pub(super) client_cpu_us: Option<f64>,
    pub(super) server_cpu_us: Option<f64>,
    /// Contended: the largest share of the acquisitions one contender made (a fair lock's is
    /// about 1/N; an unfair one lets the releaser take it back).
    pub(super) max_share: Option<f64>,
}

impl Report {
    /// The report of `run`, with its acquisitions and the percentiles of its cycles and (when
    /// contended) handoffs; every other figure empty, for the caller to fill.
    pub(super) fn of(
        run: Run,
        acquisitions: u64,
        cycles: &Latencies,
        handoffs: &Latencies,
    ) -> Report {
        let contended = run.mode == Mode::Contended;
        Report {
            implementation: run.implementation.name(),
            mode: run.mode.name(),
            contenders: run.contenders,
            seconds: run.seconds,
            acquisitions,
            cycle_p50_us: cycles.percentile_or_zero(0.5),
            cycle_p99_us: cycles.percentile_or_zero(0.99),
            handoff_p50_us: contended.then(|| handoffs.percentile_or_zero(0.5)),
            handoff_p99_us: contended.then(|| handoffs.percentile_or_zero(0.99)),
            ..Report::default()
        }
    }

    /// Acquisitions per measured second.
    pub(super) fn acq_per_s(&self) -> f64 {
        per_second(self.acquisitions, self.seconds)
    }

    /// The run's JSON line.
    pub(super) fn json(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("null".to_owned(), |v| format!("{v:.1}"));
        let mut out = format!(
            "{{\"impl\":\"{}\",\"mode\":\"{}\",\"contenders\":{},\"seconds\":{},\"acquisitions\":{},\"acq_per_s\":{:.1},\
             \"cycle_p50_us\":{:.1},\"cycle_p99_us\":{:.1},\"handoff_p50_us\":{},\"handoff_p99_us\":{},\"violations\":{},\"errors\":{}",
            self.implementation,
            self.mode,
            self.contenders,
            self.seconds,
            self.acquisitions,
            self.acq_per_s(),
            self.cycle_p50_us,
            self.cycle_p99_us,
            opt(self.handoff_p50_us),
            opt(self.handoff_p99_us),
            self.violations,
            self.errors
        );
        if let Some(read) = self.read_p50_us {
            let _ = write!(out, ",\"read_p50_us\":{read:.1}");
        }
        if let Some(listed) = self.listed_cycle_p50_us {
            let _ = write!(out, ",\"listed_cycle_p50_us\":{listed:.1}");
        }
        if let Some(writes) = self.writes_per_acq {
            let _ = write!(out, ",\"writes_per_acq\":{writes:.2}");
        }
        if let Some(cpu) = self.client_cpu_us {
            let _ = write!(out, ",\"client_cpu_us_per_acq\":{cpu:.1}");
        }
        if let Some(cpu) = self.server_cpu_us {
            let _ = write!(out, ",\"server_cpu_us_per_acq\":{cpu:.1}");
        }
        if let Some(share) = self.max_share {
            let _ = write!(out, ",\"max_share\":{share:.3}");
        }
        out.push('}');
        out
    }
}

impl Report {
    /// A run's JSON line ([`Report::json`]) read back.
    pub(super) fn parse(line: &str) -> Result<Report, String> {
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("a run's line {line:?}: {e}"))?;
        let text = |key: &str| value[key].as_str().unwrap_or_default().to_owned();
        let number = |key: &str| value[key].as_f64();
        let count = |key: &str| value[key].as_u64().unwrap_or(0);
        let implementation = <Impl as clap::ValueEnum>::from_str(&text("impl"), false)
            .map_err(|_| format!("a run's line without a known impl: {line}"))?
            .name();
        let mode = <Mode as clap::ValueEnum>::from_str(&text("mode"), false)
            .map_err(|_| format!("a run's line without a known mode: {line}"))?
            .name();
        Ok(Report {
            implementation,
            mode,
            contenders: count("contenders") as usize,
            seconds: number("seconds").unwrap_or(0.0),
            acquisitions: count("acquisitions"),
            cycle_p50_us: number("cycle_p50_us").unwrap_or(0.0),
            cycle_p99_us: number("cycle_p99_us").unwrap_or(0.0),
            handoff_p50_us: number("handoff_p50_us"),
            handoff_p99_us: number("handoff_p99_us"),
            read_p50_us: number("read_p50_us"),
            listed_cycle_p50_us: number("listed_cycle_p50_us"),
            writes_per_acq: number("writes_per_acq"),
            violations: count("violations"),
            errors: count("errors"),
            client_cpu_us: number("client_cpu_us_per_acq"),
            server_cpu_us: number("server_cpu_us_per_acq"),
            max_share: number("max_share"),
        })
    }
}

/// The report of `implementation` in the configuration (`mode`, `contenders`), if it ran.
pub(super) fn find(
    reports: &[Report],
    implementation: Impl,
    mode: Mode,
    contenders: usize,
) -> Option<&Report> {
    reports.iter().find(|r| {
        r.implementation == implementation.name()
            && r.mode == mode.name()
            && r.contenders == contenders
    })
}
