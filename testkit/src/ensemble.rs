//! [`LocalEnsemble`]: three servers, on loopback or in network namespaces of their own.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::StartError;
use crate::options::EnsembleOptions;
use crate::server::{base_config, four_letter, free_port, temp_dir, Node, QUORUM, START_TIMEOUT};

/// A 3-server ZooKeeper ensemble (`QuorumPeerMain`) on loopback ports, for leader and quorum
/// faults. Servers are numbered 0, 1, 2.
///
/// # Examples
///
/// ```no_run
/// let ensemble = zkfence_testkit::LocalEnsemble::start()?;
/// let leader = ensemble.leader().expect("a leader was elected");
/// ensemble.kill(leader);            // the others elect a new leader
/// ensemble.restart(leader)?;
/// println!("connect to {}", ensemble.addr());
/// # Ok::<(), zkfence_testkit::StartError>(())
/// ```
#[derive(Debug)]
pub struct LocalEnsemble {
    nodes: Vec<Node>,
    /// Set when each server has its own network namespace (see [`EnsembleOptions`]).
    isolated: bool,
}

/// What [`LocalEnsemble::cut`] does to the packets one server sends another.
///
/// # Examples
///
/// ```
/// let fault = zkfence_testkit::LinkFault::Lossy(0.3);
/// # let _ = fault;
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkFault {
    /// They vanish: the sender learns nothing until its own timeouts fire.
    Drop,
    /// They are answered with a TCP reset: the sender's connection fails at once.
    Reset,
    /// Each one is lost with this probability (TCP retransmits: a slow, jittery link).
    Lossy(f64),
}

/// The ensembles this process has put in network namespaces, for unique names and addresses.
static NAMESPACED: AtomicU64 = AtomicU64::new(0);

/// Runs `ip`/`iptables` (or any command) and fails with its stderr.
fn run(program: &str, args: &[&str]) -> Result<(), StartError> {
    let out = Command::new(program).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(StartError::Io(std::io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))))
    }
}

/// The bridge every namespaced server hangs off, made once per process, after checking that
/// this process has a network namespace of its own.
fn bridge() -> Result<(), StartError> {
    static BRIDGE: Mutex<bool> = Mutex::new(false);
    let mut made = BRIDGE.lock().unwrap_or_else(|e| e.into_inner());
    if *made {
        return Ok(());
    }
    // A namespace made for us has nothing but `lo`; the machine's own has its real interfaces.
    let links = Command::new("ip").args(["-o", "link", "show"]).output()?;
    let names: Vec<String> = String::from_utf8_lossy(&links.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|name| name.trim().split('@').next().unwrap_or("").to_owned())
        .collect();
    if names.iter().any(|name| name != "lo") {
        return Err(StartError::Io(std::io::Error::other(
            "servers in network namespaces need a private network namespace: run this process under `unshare --net --mount` (chaos/run does)",
        )));
    }
    run("ip", &["link", "set", "lo", "up"])?;
    run("ip", &["link", "add", "zkfbr0", "type", "bridge"])?;
    run("ip", &["addr", "add", "10.77.0.1/16", "dev", "zkfbr0"])?;
    run("ip", &["link", "set", "zkfbr0", "up"])?;
    *made = true;
    Ok(())
}

/// Server `i` of namespaced ensemble `n`: its own namespace, a veth on the bridge, an address.
fn namespace(n: u64, i: usize) -> Result<(String, String), StartError> {
    let netns = format!("zkf-{}-{n}-{i}", std::process::id());
    let veth = format!("zkf{n}v{i}");
    let addr = format!("10.77.{}.{}", n + 1, i + 1);
    run("ip", &["netns", "add", &netns])?;
    run(
        "ip",
        &[
            "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ],
    )?;
    run("ip", &["link", "set", &veth, "master", "zkfbr0", "up"])?;
    run(
        "ip",
        &[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{addr}/16"),
            "dev",
            "eth0",
        ],
    )?;
    run("ip", &["-n", &netns, "link", "set", "eth0", "up"])?;
    run("ip", &["-n", &netns, "link", "set", "lo", "up"])?;
    Ok((netns, addr))
}

impl LocalEnsemble {
    /// Starts three servers and waits until each serves requests (a leader is elected).
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`](crate::LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start() -> Result<LocalEnsemble, StartError> {
        LocalEnsemble::start_with(EnsembleOptions::default())
    }

    /// Starts three servers set up as `options` says, and waits until each serves requests.
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`](crate::LocalZooKeeper::start); with namespaces, also when this process is not root or
    /// not in a private network namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use zkfence_testkit::{EnsembleOptions, LocalEnsemble};
    /// let options = EnsembleOptions::default().with_tick(std::time::Duration::from_secs(2));
    /// let ensemble = LocalEnsemble::start_with(options)?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn start_with(options: EnsembleOptions) -> Result<LocalEnsemble, StartError> {
        // (host, client port, peer port, election port, namespace) per server.
        let mut places = Vec::new();
        if options.namespaces {
            bridge()?;
            let n = NAMESPACED.fetch_add(1, Ordering::Relaxed);
            for i in 0..3 {
                let (netns, addr) = namespace(n, i)?;
                places.push((addr, 2181, 2888, 3888, Some(netns)));
            }
        } else {
            for _ in 0..3 {
                let host = "127.0.0.1".to_owned();
                places.push((host, free_port()?, free_port()?, free_port()?, None));
            }
        }
        let servers: String = places
            .iter()
            .enumerate()
            .map(|(i, (host, _, peer, election, _))| {
                format!("server.{}={host}:{peer}:{election}\n", i + 1)
            })
            .collect();
        let mut ensemble = LocalEnsemble {
            nodes: Vec::new(),
            isolated: options.namespaces,
        };
        for (i, (host, client, _, _, netns)) in places.into_iter().enumerate() {
            let dir = temp_dir("ensemble")?;
            std::fs::write(dir.join("data").join("myid"), format!("{}\n", i + 1))?;
            let config = format!("{}{servers}", base_config(&dir, &host, client, &options));
            let node = Node::new(
                &host,
                client,
                dir,
                QUORUM,
                &config,
                netns,
                options.jvm_flags.clone(),
            )?;
            ensemble.nodes.push(node);
        }
        for node in &ensemble.nodes {
            node.spawn()?;
        }
        for node in &ensemble.nodes {
            node.wait_serving(START_TIMEOUT)?;
        }
        Ok(ensemble)
    }

    /// Makes server `from`'s packets to server `to` suffer `fault` (one direction; cut both
    /// for a symmetric partition). Only traffic between servers is touched: clients reach
    /// every server as before. Needs [`EnsembleOptions::with_own_network_namespaces`].
    ///
    /// # Errors
    ///
    /// When the ensemble has no namespaces, or `iptables` fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// use zkfence_testkit::LinkFault;
    /// // The leader cut off from both followers, the way real networks often do it: their
    /// // packets to it are reset, its packets to them vanish.
    /// let leader = ensemble.leader().unwrap();
    /// for f in (0..3).filter(|&f| f != leader) {
    ///     ensemble.cut(f, leader, LinkFault::Reset)?;
    ///     ensemble.cut(leader, f, LinkFault::Drop)?;
    /// }
    /// ensemble.heal()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn cut(&self, from: usize, to: usize, fault: LinkFault) -> Result<(), StartError> {
        let netns = self.nodes[from].netns.as_deref().ok_or_else(|| {
            StartError::Io(std::io::Error::other(
                "cutting links needs EnsembleOptions::with_own_network_namespaces(true)",
            ))
        })?;
        let peer = self.nodes[to].host.clone();
        let mut rule = vec![
            "netns", "exec", netns, "iptables", "-A", "OUTPUT", "-d", &peer,
        ];
        let probability;
        match fault {
            LinkFault::Drop => rule.extend(["-j", "DROP"]),
            LinkFault::Reset => {
                rule.extend(["-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"])
            }
            LinkFault::Lossy(p) => {
                probability = format!("{:.3}", p.clamp(0.0, 1.0));
                rule.extend([
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &probability,
                    "-j",
                    "DROP",
                ]);
            }
        }
        run("ip", &rule)
    }

    /// Removes every link fault: all servers reach each other again.
    ///
    /// # Errors
    ///
    /// When `iptables` fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.heal()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn heal(&self) -> Result<(), StartError> {
        for node in &self.nodes {
            if let Some(netns) = &node.netns {
                run("ip", &["netns", "exec", netns, "iptables", "-F", "OUTPUT"])?;
            }
        }
        Ok(())
    }

    /// Whether each server has its own network namespace (links can be cut).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// assert!(!ensemble.is_isolated());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn is_isolated(&self) -> bool {
        self.isolated
    }

    /// The connect string of all three servers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// assert_eq!(ensemble.addr().split(',').count(), 3);
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn addr(&self) -> String {
        self.nodes
            .iter()
            .map(Node::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string of server `i` alone.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// println!("{}", ensemble.server_addr(0));
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn server_addr(&self, i: usize) -> String {
        self.nodes[i].addr()
    }

    /// The server that currently says it leads, if any.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// println!("leader: {:?}", ensemble.leader());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn leader(&self) -> Option<usize> {
        self.nodes.iter().position(|n| {
            four_letter(&n.addr(), "srvr").is_some_and(|s| s.contains("Mode: leader"))
        })
    }

    /// SIGSTOP server `i`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.pause(0);
    /// ensemble.resume(0);
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn pause(&self, i: usize) {
        self.nodes[i].signal(libc::SIGSTOP);
    }

    /// SIGCONT server `i`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.pause(0);
    /// ensemble.resume(0);
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn resume(&self, i: usize) {
        self.nodes[i].signal(libc::SIGCONT);
    }

    /// SIGKILL server `i`, keeping its data.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.kill(1);
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn kill(&self, i: usize) {
        self.nodes[i].kill();
    }

    /// Kills server `i` if it runs, starts it again, and waits until it serves.
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`](crate::LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.restart(1)?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn restart(&self, i: usize) -> Result<(), StartError> {
        self.nodes[i].kill();
        self.nodes[i].spawn()?;
        self.nodes[i].wait_serving(START_TIMEOUT)
    }
}

impl Drop for LocalEnsemble {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.jvm.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(netns) = &node.netns {
                let _ = run("ip", &["netns", "del", netns]);
            }
        }
    }
}

impl LocalEnsemble {
    /// Kills every server that still runs, starts all three again on their ports and data,
    /// and waits until each serves (a quorum restart: one server alone never serves).
    ///
    /// # Errors
    ///
    /// As [`LocalZooKeeper::start`](crate::LocalZooKeeper::start).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let ensemble = zkfence_testkit::LocalEnsemble::start()?;
    /// ensemble.restart_all()?;
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn restart_all(&self) -> Result<(), StartError> {
        for node in &self.nodes {
            node.kill();
        }
        for node in &self.nodes {
            node.spawn()?;
        }
        for node in &self.nodes {
            node.wait_serving(START_TIMEOUT)?;
        }
        Ok(())
    }
}
