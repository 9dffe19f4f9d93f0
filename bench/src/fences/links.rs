//! The links `--fences` writes through: direct, or each through a delaying proxy
//! (`--latency-ms`).

use std::time::Duration;

use zkfence_harness::DelayProxy;

/// The links the variants write through: direct, or each through a [`DelayProxy`] of its own
/// (`--latency-ms`), which live as long as the stores.
pub(crate) struct Links {
    one_way: Option<Duration>,
    proxies: Vec<DelayProxy>,
}

impl Links {
    /// Direct links for a latency of 0 ms, else links that add `latency_ms` to a round trip.
    pub(super) fn new(latency_ms: f64) -> Links {
        let one_way = (latency_ms > 0.0).then(|| Duration::from_secs_f64(latency_ms / 2e3));
        Links {
            one_way,
            proxies: Vec::new(),
        }
    }

    /// The address (`host:port`) through which the variants reach the server at `addr`.
    pub(crate) fn reach(&mut self, addr: &str) -> Result<String, String> {
        let Some(one_way) = self.one_way else {
            return Ok(addr.to_owned());
        };
        let proxy = DelayProxy::start(addr, one_way)
            .map_err(|e| format!("a delaying proxy in front of {addr}: {e}"))?;
        let reached = format!("127.0.0.1:{}", proxy.port());
        self.proxies.push(proxy);
        Ok(reached)
    }
}
