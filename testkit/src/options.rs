//! [`EnsembleOptions`]: the settings of the servers the test kit starts (tick, limits, extra
//! JVM flags and `zoo.cfg` lines), which a standalone [`LocalZooKeeper`](crate::LocalZooKeeper)
//! shares with a [`LocalEnsemble`](crate::LocalEnsemble), and whether an ensemble's servers
//! get network namespaces of their own.

use std::time::Duration;

/// How a [`LocalEnsemble`](crate::LocalEnsemble) is set up: its tick and limits, extra JVM flags, and whether each
/// server gets a network namespace of its own so that the links between servers can be cut.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let options = zkfence_testkit::EnsembleOptions::default()
///     .with_tick(Duration::from_millis(2000))
///     .with_sync_limit(5);
/// assert_eq!(options.tick(), Duration::from_secs(2));
/// ```
#[derive(Debug, Clone)]
pub struct EnsembleOptions {
    pub(crate) tick: Duration,
    pub(crate) sync_limit: u32,
    pub(crate) init_limit: u32,
    pub(crate) namespaces: bool,
    pub(crate) jvm_flags: Vec<String>,
    /// Extra `zoo.cfg` lines.
    pub(crate) config: Vec<String>,
}

impl Default for EnsembleOptions {
    /// A 200 ms tick, `syncLimit=5`, `initLimit=10`, every server on loopback.
    fn default() -> Self {
        EnsembleOptions {
            tick: Duration::from_millis(200),
            sync_limit: 5,
            init_limit: 10,
            namespaces: false,
            jvm_flags: Vec::new(),
            config: Vec::new(),
        }
    }
}

impl EnsembleOptions {
    /// The servers' `tickTime` (default 200 ms). Sessions from 2 to 20 ticks (at least 30 s)
    /// can be negotiated.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_tick(std::time::Duration::from_secs(2));
    /// # let _ = options;
    /// ```
    pub fn with_tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// The servers' `syncLimit` in ticks (default 5): how long a leader keeps leading without
    /// hearing from a quorum, and a follower following a silent leader.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_sync_limit(10);
    /// # let _ = options;
    /// ```
    pub fn with_sync_limit(mut self, ticks: u32) -> Self {
        self.sync_limit = ticks.max(1);
        self
    }

    /// The servers' `initLimit` in ticks (default 10).
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_init_limit(20);
    /// # let _ = options;
    /// ```
    pub fn with_init_limit(mut self, ticks: u32) -> Self {
        self.init_limit = ticks.max(1);
        self
    }

    /// One more JVM flag for every server, e.g. `-Dreadonlymode.enabled=true`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_jvm_flag("-Dreadonlymode.enabled=true");
    /// # let _ = options;
    /// ```
    pub fn with_jvm_flag(mut self, flag: impl Into<String>) -> Self {
        self.jvm_flags.push(flag.into());
        self
    }

    /// One more `zoo.cfg` setting for every server, e.g. `localSessionsEnabled=true`.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_config("localSessionsEnabled", "true");
    /// # let _ = options;
    /// ```
    pub fn with_config(mut self, key: &str, value: &str) -> Self {
        self.config.push(format!("{key}={value}"));
        self
    }

    /// Gives each server a network namespace and an address of its own (`10.77.<n>.<i>`, on a
    /// bridge in this process's namespace), so that [`LocalEnsemble::cut`](crate::LocalEnsemble::cut) can cut the links
    /// between servers while clients still reach every server. Needs root, and this process
    /// must already run in a private network and mount namespace (`unshare --net --mount`):
    /// it adds a bridge, and it refuses to touch the machine's own network.
    ///
    /// # Examples
    ///
    /// ```
    /// let options = zkfence_testkit::EnsembleOptions::default().with_own_network_namespaces(true);
    /// # let _ = options;
    /// ```
    pub fn with_own_network_namespaces(mut self, on: bool) -> Self {
        self.namespaces = on;
        self
    }

    /// The tick.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence_testkit::EnsembleOptions::default().tick().as_millis(), 200);
    /// ```
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// The sync limit, in ticks.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(zkfence_testkit::EnsembleOptions::default().sync_limit(), 5);
    /// ```
    pub fn sync_limit(&self) -> u32 {
        self.sync_limit
    }
}
