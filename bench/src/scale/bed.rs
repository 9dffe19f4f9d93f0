//! What the scale measurements run on ([`Bed`]): the server ([`Server`]: the throwaway local one
//! the bench started, or `--connect`'s first host), what they read from it (`mntr`, its last
//! zxid, its pid for the CPU), its restart, and the settings every measurement shares (the
//! session timeout, the watchdog's probe period, where the nodes go).

use std::collections::HashMap;
use std::time::Duration;

use zkfence_testkit::LocalZooKeeper;
use zookeeper_client as zk;

use super::proxy::Proxy;
use crate::options::Args;

/// ZooKeeper's default `jute.maxbuffer`: 1 MiB − 1.
pub(super) const DEFAULT_JUTE_MAXBUFFER: usize = 0xfffff;

/// The server the measurements talk to: straight (the bench's own requests, never counted) or
/// through counting proxies in front of its first host.
#[derive(Debug)]
pub(super) struct Server<'a> {
    /// The first host, `host:port`: where proxies forward and four-letter words go.
    first: String,
    /// The connect string's chroot (`/x`, or empty), kept on every connect string.
    chroot: String,
    /// The local server, when the bench started it: its pid (CPU), its restart, its log.
    local: Option<&'a LocalZooKeeper>,
}

impl<'a> Server<'a> {
    /// The server of connect string `hosts` (only its first host is used), `local` if the
    /// bench started it.
    pub(super) fn new(hosts: &str, local: Option<&'a LocalZooKeeper>) -> Server<'a> {
        let (servers, chroot) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
        Server {
            first: servers.split(',').next().unwrap_or(servers).to_owned(),
            chroot: chroot.to_owned(),
            local,
        }
    }

    /// The connect string straight to the server.
    pub(super) fn direct(&self) -> String {
        format!("{}{}", self.first, self.chroot)
    }

    /// A new counting proxy in front of the server.
    pub(super) async fn proxy(&self) -> Proxy {
        Proxy::start(&self.first).await
    }

    /// The connect string through `proxy`.
    pub(super) fn via(&self, proxy: &Proxy) -> String {
        format!("{}{}", proxy.addr, self.chroot)
    }

    /// The server's pid, if the bench started it (it changes with a restart).
    pub(super) fn pid(&self) -> Option<i32> {
        self.local.map(|l| l.pid()).filter(|&pid| pid > 0)
    }

    /// Whether the bench can restart the server (it started it).
    pub(super) fn can_restart(&self) -> bool {
        self.local.is_some()
    }

    /// Kills the server and starts it again on the same port and data; returns once it serves.
    /// It blocks this worker thread, and tells the runtime so: the other tasks (the sessions,
    /// their watchdogs) go on meanwhile.
    pub(super) fn restart(&self) -> Result<(), String> {
        let local = self.local.ok_or("not a local server: no restart")?;
        tokio::task::block_in_place(|| local.restart()).map_err(|e| e.to_string())
    }

    /// The server's `jute.maxbuffer`: what the `JAVA_TOOL_OPTIONS` its JVM picked up set (the
    /// test kit's start takes no JVM flags, but the JVM reads that variable from the
    /// environment it inherits), else the default; `None` for a server the bench did not start.
    pub(super) fn jute_maxbuffer(&self) -> Option<usize> {
        let log = self.local?.log();
        let picked = log
            .lines()
            .find(|l| l.contains("Picked up JAVA_TOOL_OPTIONS"));
        Some(picked.and_then(jute_flag).unwrap_or(DEFAULT_JUTE_MAXBUFFER))
    }

    /// The server's `mntr` (empty if it does not answer).
    pub(super) async fn mntr(&self) -> Mntr {
        Mntr::parse(&self.four_letter("mntr").await.unwrap_or_default())
    }

    /// The last zxid the server has processed (from `srvr`: no write of its own).
    pub(super) async fn zxid(&self) -> Option<i64> {
        let srvr = self.four_letter("srvr").await?;
        let hex = srvr.lines().find_map(|l| l.strip_prefix("Zxid: 0x"))?;
        i64::from_str_radix(hex.trim(), 16).ok()
    }

    /// A four-letter word's answer, off the async workers.
    async fn four_letter(&self, word: &'static str) -> Option<String> {
        let addr = self.first.clone();
        tokio::task::spawn_blocking(move || zkfence_testkit::four_letter(&addr, word))
            .await
            .ok()
            .flatten()
    }
}

/// `-Djute.maxbuffer=N` in a line of JVM options.
fn jute_flag(line: &str) -> Option<usize> {
    let at = line.find("-Djute.maxbuffer=")? + "-Djute.maxbuffer=".len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A server's `mntr` figures by name (the numeric ones).
#[derive(Debug, Clone, Default)]
pub(super) struct Mntr(HashMap<String, f64>);

impl Mntr {
    /// The figures of `mntr`'s answer: `name<TAB>value` lines.
    fn parse(text: &str) -> Mntr {
        Mntr(
            (text.lines())
                .filter_map(|l| l.split_once('\t'))
                .filter_map(|(k, v)| Some((k.trim().to_owned(), v.trim().parse().ok()?)))
                .collect(),
        )
    }

    /// A figure (`zk_watch_count`, `zk_ephemerals_count`, `zk_approximate_data_size`,
    /// `zk_znode_count`).
    pub(super) fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }

    /// `later`'s figure minus this one's.
    pub(super) fn grown(&self, later: &Mntr, name: &str) -> Option<f64> {
        Some(later.get(name)? - self.get(name)?)
    }
}

/// What every scale measurement shares.
#[derive(Debug)]
pub(super) struct Bed<'a> {
    /// The command line: the sizes, the session timeout, the peers.
    pub(super) args: &'a Args,
    /// The server measured on.
    pub(super) server: Server<'a>,
    /// A session straight to the server (never counted): paths, waiting for queues.
    pub(super) admin: zk::Client,
    /// Where this process's nodes go: `<--lock>/scale-<pid>`.
    pub(super) base: String,
}

impl Bed<'_> {
    /// The session timeout T of every session.
    pub(super) fn session_timeout(&self) -> Duration {
        self.args.scale_session_timeout
    }

    /// How often a session's watchdog probes while it holds, for a session of T under the
    /// default options: the library's `probe_period` (src/watchdog/lease/cell.rs), `max(G, (budget
    /// − G)/4)` with `G = tickTime/2 · 1.01 + margin`, tickTime taken as T/2, the budget
    /// `0.99·T − margin`, the margin T/20 within 20–500 ms. The bench reports in these.
    pub(super) fn probe_period(&self) -> Duration {
        probe_period(self.session_timeout())
    }

    /// `<base>/<name>`.
    pub(super) fn path(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }

    /// Creates `path` and its parents, persistent.
    pub(super) async fn mkdir(&self, path: &str) -> Result<(), String> {
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        self.admin
            .mkdir(path, &persistent)
            .await
            .map_err(|e| format!("cannot create {path}: {e}"))
    }
}

/// See [`Bed::probe_period`].
pub(super) fn probe_period(t: Duration) -> Duration {
    let margin = (t / 20).clamp(Duration::from_millis(20), Duration::from_millis(500));
    let gap = (t / 4).mul_f64(1.01) + margin;
    let budget = t.mul_f64(0.99).saturating_sub(margin);
    gap.max(budget.saturating_sub(gap) / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_period_is_the_librarys() {
        // tests/watchdog.rs's cases without a declared tickTime.
        assert_eq!(
            probe_period(Duration::from_secs(2)),
            Duration::from_millis(605)
        );
        assert_eq!(
            probe_period(Duration::from_secs(10)),
            Duration::from_millis(3025)
        );
    }

    #[test]
    fn mntr_and_the_jute_flag_are_read() {
        let mntr = Mntr::parse("zk_version\t3.8.0\nzk_watch_count\t12\nzk_znode_count\t5\n");
        assert_eq!(mntr.get("zk_watch_count"), Some(12.0));
        assert_eq!(mntr.get("zk_version"), None);
        let later = Mntr::parse("zk_watch_count\t20\n");
        assert_eq!(mntr.grown(&later, "zk_watch_count"), Some(8.0));
        assert_eq!(
            jute_flag("Picked up JAVA_TOOL_OPTIONS: -Xss1m -Djute.maxbuffer=4194304 -Dx=1"),
            Some(4194304)
        );
        assert_eq!(jute_flag("Picked up JAVA_TOOL_OPTIONS: -Xss1m"), None);
    }
}
