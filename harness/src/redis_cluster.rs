//! [`LocalRedisCluster`]: a throwaway Redis Cluster of Debian's `redis-server`, three primaries
//! with a replica each, every node durable (`appendonly yes`, `appendfsync always`), on free
//! loopback ports in temp dirs, in the clear or over TLS alone (clients, the cluster bus and
//! replication, client certificates required); stopped (each node killed by its pid, its dir
//! removed) when dropped or when this process dies.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zkfence_testkit::{spawn_tied, Keeper};

use crate::TestCa;

/// Where Debian's package puts the server and its client.
const REDIS_SERVER: &str = "/usr/bin/redis-server";
const REDIS_CLI: &str = "/usr/bin/redis-cli";

/// How many nodes: three primaries, a replica each.
const NODES: usize = 6;

/// How long the cluster may take to form, or a failover to settle.
const SETTLE: Duration = Duration::from_secs(30);

/// A node: its process, its client and bus ports, its dir.
#[derive(Debug)]
struct Node {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// Dropped after the node is stopped (see [`zkfence_testkit::spawn_tied`]).
    _keeper: Keeper,
}

/// A Redis Cluster that lives as long as this value: three primaries, each with one replica,
/// every node with an append-only file synced on every write.
///
/// # Examples
///
/// ```no_run
/// let cluster = zkfence_harness::LocalRedisCluster::start()?;
/// println!("one node: {}", cluster.url());
/// assert_eq!(cluster.primaries()?.len(), 3);
/// # Ok::<(), String>(())
/// ```
#[derive(Debug)]
pub struct LocalRedisCluster {
    nodes: Vec<Node>,
    /// `redis-cli`'s TLS arguments (`--tls --cacert … --cert … --key …`), none in the clear.
    tls: Vec<OsString>,
}

/// One line of `CLUSTER NODES`, the fields the harness reads.
#[derive(Debug, Clone)]
struct Line {
    id: String,
    addr: String,
    primary: bool,
    /// The primary's id, for a replica.
    of: Option<String>,
}

impl LocalRedisCluster {
    /// Starts six durable `redis-server`s in cluster mode on free loopback ports (each with a
    /// bus port of its own), joins them with `redis-cli --cluster create … --cluster-replicas
    /// 1`, and waits (up to 30 s) until every node says `cluster_state:ok` and knows all six,
    /// and every replica's link to its primary is up.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed (the nodes' logs are in their dirs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// assert_eq!(cluster.replicas()?.len(), 3);
    /// # Ok::<(), String>(())
    /// ```
    pub fn start() -> Result<LocalRedisCluster, String> {
        LocalRedisCluster::start_with(None)
    }

    /// [`start`](LocalRedisCluster::start), serving TLS alone: every node has no plain port
    /// (`--port 0`) and a TLS one with `ca`'s server certificate, speaks TLS on the cluster
    /// bus and for replication, and requires a client certificate `ca` signed
    /// (`--tls-auth-clients yes`), showing `ca`'s client certificate to the other nodes (the
    /// server certificate is for `serverAuth` alone, which a node checking its peer refuses).
    /// The harness's own `redis-cli` calls use `ca`'s files: `ca` must outlive the cluster.
    ///
    /// # Errors
    ///
    /// A message saying what to install or what failed (the nodes' logs are in their dirs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let ca = zkfence_harness::TestCa::new()?;
    /// let cluster = zkfence_harness::LocalRedisCluster::start_tls(&ca)?;
    /// println!(
    ///     "{}?ssl_ca_certs={}&ssl_certfile={}&ssl_keyfile={}",
    ///     cluster.url(), // rediss://127.0.0.1:<port>/
    ///     ca.ca_cert().display(),
    ///     ca.client_cert().display(),
    ///     ca.client_key().display(),
    /// );
    /// # Ok::<(), String>(())
    /// ```
    pub fn start_tls(ca: &TestCa) -> Result<LocalRedisCluster, String> {
        LocalRedisCluster::start_with(Some(ca))
    }

    /// Starts, joins and waits for the nodes, over TLS with `ca`'s certificates if given.
    fn start_with(ca: Option<&TestCa>) -> Result<LocalRedisCluster, String> {
        for binary in [REDIS_SERVER, REDIS_CLI] {
            if !std::path::Path::new(binary).exists() {
                return Err(format!("{binary} is missing: install Debian's redis-server and redis-tools packages (`sudo apt-get install -y redis-server`; scripts/test does it)"));
            }
        }
        sweep();
        let mut nodes = Vec::with_capacity(NODES);
        for _ in 0..NODES {
            nodes.push(start_node(ca)?);
        }
        let tls = ca.map_or_else(Vec::new, cli_tls);
        let cluster = LocalRedisCluster { nodes, tls };
        for node in &cluster.nodes {
            cluster.wait(&format!("127.0.0.1:{} to answer PING", node.port), || {
                if !zkfence_testkit::is_alive(node.child.id()) {
                    return Err(format!("it exited; its log ends: {}", log_tail(node)));
                }
                match cluster.cli(node.port, &["PING"])?.trim() {
                    "PONG" => Ok(true),
                    other => Err(format!("it answered {other:?}")),
                }
            })?;
        }
        cluster.create()?;
        cluster.wait_settled()?;
        Ok(cluster)
    }

    /// `redis-cli --cluster create`: the first three nodes primaries, a replica each.
    fn create(&self) -> Result<(), String> {
        let mut cmd = Command::new("timeout");
        cmd.args(["120", REDIS_CLI]);
        cmd.args(&self.tls).arg("--cluster").arg("create");
        for node in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port));
        }
        cmd.args(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {REDIS_CLI} --cluster create: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    }

    /// Waits until every node says `cluster_state:ok` and knows all six, agreeing on three
    /// primaries, and every replica's link to its primary is up.
    fn wait_settled(&self) -> Result<(), String> {
        self.wait(
            "the cluster to settle (state ok, 3 primaries, replicas linked)",
            || {
                for node in &self.nodes {
                    let info = self.cli(node.port, &["CLUSTER", "INFO"])?;
                    let ok = info.lines().any(|l| l.trim() == "cluster_state:ok")
                        && info.lines().any(|l| l.trim() == "cluster_known_nodes:6");
                    let lines = parse_nodes(&self.cli(node.port, &["CLUSTER", "NODES"])?);
                    let primaries = lines.iter().filter(|l| l.primary).count();
                    if !ok || primaries != NODES / 2 {
                        return Ok(false);
                    }
                    let role = self.cli(node.port, &["INFO", "replication"])?;
                    let replica = role.lines().any(|l| l.trim() == "role:slave");
                    if replica && !role.lines().any(|l| l.trim() == "master_link_status:up") {
                        return Ok(false);
                    }
                }
                Ok(true)
            },
        )
    }

    /// Polls `ready` every 50 ms until it says so, or fails after [`SETTLE`] naming `what`.
    fn wait(
        &self,
        what: &str,
        mut ready: impl FnMut() -> Result<bool, String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + SETTLE;
        let mut last = String::new();
        loop {
            match ready() {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => last = e,
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = (self.nodes.iter())
                    .map(|n| n.dir.join("redis.log").display().to_string())
                    .collect();
                return Err(format!(
                    "timed out after {SETTLE:?} waiting for {what} (last error: {last:?}); logs: {}",
                    logs.join(", ")
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis-cli -p port args`' output (over TLS with the CA's client certificate for a
    /// cluster [`start_tls`](LocalRedisCluster::start_tls) started), or its failure; a call
    /// that has no answer within 60 s fails.
    fn cli(&self, port: u16, args: &[&str]) -> Result<String, String> {
        // coreutils' `timeout`: a node paused by a test (SIGSTOP) would hold redis-cli, and
        // every wait above it, for ever.
        let out = Command::new("timeout")
            .args(["60", REDIS_CLI])
            .args(&self.tls)
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run {REDIS_CLI}: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        match out.status.success() && !text.starts_with("Could not connect") {
            true => Ok(text),
            false => Err(format!(
                "redis-cli -p {port} {}: {text}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }

    /// The URL of the first node, `redis://127.0.0.1:<port>/` (`rediss://` for a cluster
    /// [`start_tls`](LocalRedisCluster::start_tls) started): any node's URL reaches the whole
    /// cluster through a cluster client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// assert!(cluster.url().starts_with("redis://127.0.0.1:"));
    /// # Ok::<(), String>(())
    /// ```
    pub fn url(&self) -> String {
        self.node_url(&format!("127.0.0.1:{}", self.nodes[0].port))
    }

    /// The URL of the node at `addr` (`127.0.0.1:<port>`): `redis://127.0.0.1:<port>/`
    /// (`rediss://` over TLS).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// let replica = &cluster.replicas()?[0];
    /// println!("{}", cluster.node_url(replica));
    /// # Ok::<(), String>(())
    /// ```
    pub fn node_url(&self, addr: &str) -> String {
        let scheme = if self.tls.is_empty() {
            "redis"
        } else {
            "rediss"
        };
        format!("{scheme}://{addr}/")
    }

    /// The primaries' addresses (`127.0.0.1:<port>`, sorted), as the cluster sees them now
    /// (after a [`failover`](Self::failover), the promoted replica is among them).
    ///
    /// # Errors
    ///
    /// `redis-cli`'s error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// for primary in cluster.primaries()? {
    ///     println!("{primary}");
    /// }
    /// # Ok::<(), String>(())
    /// ```
    pub fn primaries(&self) -> Result<Vec<String>, String> {
        Ok(self.role_of(true)?.into_iter().map(|l| l.addr).collect())
    }

    /// The replicas' addresses (`127.0.0.1:<port>`, sorted), as the cluster sees them now.
    ///
    /// # Errors
    ///
    /// `redis-cli`'s error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// assert_eq!(cluster.replicas()?.len(), 3);
    /// # Ok::<(), String>(())
    /// ```
    pub fn replicas(&self) -> Result<Vec<String>, String> {
        Ok(self.role_of(false)?.into_iter().map(|l| l.addr).collect())
    }

    /// The replica of the primary at `primary` (`127.0.0.1:<port>`), if it has one.
    ///
    /// # Errors
    ///
    /// `redis-cli`'s error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// let primary = &cluster.primaries()?[0];
    /// let replica = cluster.replica_of(primary)?.expect("a replica each");
    /// cluster.failover(&replica)?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn replica_of(&self, primary: &str) -> Result<Option<String>, String> {
        let lines = self.lines()?;
        let Some(id) = lines.iter().find(|l| l.addr == primary).map(|l| &l.id) else {
            return Err(format!("{primary} is no node of this cluster"));
        };
        Ok((lines.iter())
            .find(|l| l.of.as_ref() == Some(id))
            .map(|l| l.addr.clone()))
    }

    /// The nodes of one role, sorted by address, as the first node that answers sees them.
    fn role_of(&self, primary: bool) -> Result<Vec<Line>, String> {
        let mut lines: Vec<Line> = (self.lines()?.into_iter())
            .filter(|l| l.primary == primary)
            .collect();
        lines.sort_by(|a, b| a.addr.cmp(&b.addr));
        Ok(lines)
    }

    /// `CLUSTER NODES` of the first node that answers.
    fn lines(&self) -> Result<Vec<Line>, String> {
        let mut last = String::from("no node");
        for node in &self.nodes {
            match self.cli(node.port, &["CLUSTER", "NODES"]) {
                Ok(out) => return Ok(parse_nodes(&out)),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Promotes `replica` (`127.0.0.1:<port>`) with `CLUSTER FAILOVER` (the coordinated
    /// kind: its primary stops writes until the replica has caught up, then hands over), and
    /// waits (up to 30 s) until it reports itself primary, every node sees it so, the cluster
    /// is ok again and the old primary's link to it is up.
    ///
    /// # Errors
    ///
    /// `redis-cli`'s error, a node that is not a replica, or a failover that did not settle.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// let replica = cluster.replicas()?.remove(0);
    /// cluster.failover(&replica)?;
    /// assert!(cluster.primaries()?.contains(&replica));
    /// # Ok::<(), String>(())
    /// ```
    pub fn failover(&self, replica: &str) -> Result<(), String> {
        let port = self.port_of(replica)?;
        let out = self.cli(port, &["CLUSTER", "FAILOVER"])?;
        if out.trim() != "OK" {
            return Err(format!("CLUSTER FAILOVER on {replica}: {}", out.trim()));
        }
        self.wait(&format!("{replica} to be promoted"), || {
            let role = self.cli(port, &["INFO", "replication"])?;
            Ok(role.lines().any(|l| l.trim() == "role:master"))
        })?;
        self.wait(&format!("every node to see {replica} as a primary"), || {
            for node in &self.nodes {
                let lines = parse_nodes(&self.cli(node.port, &["CLUSTER", "NODES"])?);
                if !lines.iter().any(|l| l.addr == replica && l.primary) {
                    return Ok(false);
                }
            }
            Ok(true)
        })?;
        self.wait_settled()
    }

    /// The port of the node at `addr`.
    fn port_of(&self, addr: &str) -> Result<u16, String> {
        (self.nodes.iter())
            .map(|n| n.port)
            .find(|port| format!("127.0.0.1:{port}") == addr)
            .ok_or_else(|| format!("{addr} is no node of this cluster"))
    }

    /// Runs `redis-cli -p <port> args` against the node at `addr` (with the CA's client
    /// certificate over TLS) and returns its output (an error reply is in it, as `redis-cli`
    /// prints it): for a test's own commands on one node (`FUNCTION DELETE` on one primary,
    /// `CONFIG SET`).
    ///
    /// # Errors
    ///
    /// An address that is no node of this cluster, `redis-cli` failing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// let primary = &cluster.primaries()?[0];
    /// println!("{}", cluster.command(primary, &["DBSIZE"])?);
    /// # Ok::<(), String>(())
    /// ```
    pub fn command(&self, addr: &str, args: &[&str]) -> Result<String, String> {
        self.cli(self.port_of(addr)?, args)
    }

    /// The process id of the node at `addr` (`127.0.0.1:<port>`): to pause it
    /// (`zkfence_testkit::pause`), as a replica that stops acknowledging.
    ///
    /// # Errors
    ///
    /// An address that is no node of this cluster.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// let replica = cluster.replicas()?.remove(0);
    /// zkfence_testkit::pause(cluster.pid(&replica)?).map_err(|e| e.to_string())?;
    /// zkfence_testkit::resume(cluster.pid(&replica)?).map_err(|e| e.to_string())?;
    /// # Ok::<(), String>(())
    /// ```
    pub fn pid(&self, addr: &str) -> Result<u32, String> {
        let port = self.port_of(addr)?;
        (self.nodes.iter())
            .find(|n| n.port == port)
            .map(|n| n.child.id())
            .ok_or_else(|| format!("{addr} is no node of this cluster"))
    }

    /// The nodes' process ids, in the order they were started.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # let cluster = zkfence_harness::LocalRedisCluster::start()?;
    /// assert_eq!(cluster.pids().len(), 6);
    /// # Ok::<(), String>(())
    /// ```
    pub fn pids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.child.id() as i32).collect()
    }
}

/// Removes the node dirs of test processes that have exited: a cluster a test binary shares
/// (in a `static`) is never dropped, its nodes die with the binary and their dirs stay (and so
/// does the dir of the [`TestCa`] a shared TLS cluster keeps beside it).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let pid = (["zkfence-redis-cluster-", "zkfence-tls-"].iter())
            .find_map(|prefix| name.strip_prefix(prefix))
            .and_then(|rest| rest.split('-').next()?.parse::<u32>().ok());
        let gone = pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if gone {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The last lines of a node's log, for an error.
fn log_tail(node: &Node) -> String {
    let log = std::fs::read_to_string(node.dir.join("redis.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// Starts one durable cluster-mode node on a free port (its bus port another free one), over
/// TLS alone with `ca`'s certificates if given.
fn start_node(ca: Option<&TestCa>) -> Result<Node, String> {
    let dir = zkfence_testkit::temp_dir("redis-cluster").map_err(|e| format!("temp dir: {e}"))?;
    let free = || zkfence_testkit::free_port().map_err(|e| format!("no free port: {e}"));
    let (port, bus) = (free()?, free()?);
    let mut cmd = Command::new(REDIS_SERVER);
    match ca {
        None => cmd.args(["--port", &port.to_string()]),
        Some(ca) => cmd
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(serve_tls(ca)),
    };
    cmd.args(["--cluster-port", &bus.to_string()])
        .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
        .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
        .arg("--cluster-config-file")
        .arg(dir.join("nodes.conf"))
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .args(["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"])
        .arg("--dir")
        .arg(&dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let (child, _keeper) =
        spawn_tied(cmd, libc::SIGKILL).map_err(|e| format!("start redis-server: {e}"))?;
    Ok(Node {
        child,
        port,
        dir,
        _keeper,
    })
}

/// The lines of a `CLUSTER NODES` reply: id, `ip:port@bus`, flags, primary id, ….
fn parse_nodes(text: &str) -> Vec<Line> {
    (text.lines())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (id, addr, flags, of) = (
                fields.first()?,
                fields.get(1)?,
                fields.get(2)?,
                fields.get(3)?,
            );
            let addr = addr.split(['@', ',']).next()?.to_owned();
            let flags: Vec<&str> = flags.split(',').collect();
            Some(Line {
                id: (*id).to_owned(),
                addr,
                primary: flags.contains(&"master"),
                of: (*of != "-").then(|| (*of).to_owned()),
            })
        })
        .collect()
}

/// A node's TLS beyond its port: `ca`'s server certificate, TLS on the cluster bus and for
/// replication, client certificates `ca` signed required; to the other nodes it shows `ca`'s
/// client certificate (a node refuses a peer showing one for `serverAuth` alone).
fn serve_tls(ca: &TestCa) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["--tls-cluster", "yes", "--tls-replication", "yes"]
        .into_iter()
        .chain(["--tls-auth-clients", "yes"])
        .map(OsString::from)
        .collect();
    for (flag, file) in [
        ("--tls-cert-file", ca.server_cert()),
        ("--tls-key-file", ca.server_key()),
        ("--tls-client-cert-file", ca.client_cert()),
        ("--tls-client-key-file", ca.client_key()),
        ("--tls-ca-cert-file", ca.ca_cert()),
    ] {
        args.extend([flag.into(), file.into_os_string()]);
    }
    args
}

/// `redis-cli`'s TLS arguments for a cluster with `ca`'s certificates: trusting `ca`, showing
/// its client certificate.
fn cli_tls(ca: &TestCa) -> Vec<OsString> {
    let mut args = vec![OsString::from("--tls")];
    for (flag, file) in [
        ("--cacert", ca.ca_cert()),
        ("--cert", ca.client_cert()),
        ("--key", ca.client_key()),
    ] {
        args.extend([flag.into(), file.into_os_string()]);
    }
    args
}

impl Drop for LocalRedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            // SAFETY: kill(2) on our own child, by its pid (SIGCONT first: a paused node).
            unsafe {
                libc::kill(node.child.id() as i32, libc::SIGCONT);
                libc::kill(node.child.id() as i32, libc::SIGKILL);
            }
            let _ = node.child.wait();
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// It forms, fails over, and goes (processes and dirs) with its value.
    #[test]
    fn a_cluster_forms_fails_over_and_goes_with_its_value() {
        let started = Instant::now();
        let cluster = LocalRedisCluster::start().unwrap_or_else(|e| panic!("{e}"));
        eprintln!("formed in {:?}", started.elapsed());
        let (primaries, replicas) = (cluster.primaries().unwrap(), cluster.replicas().unwrap());
        assert_eq!((primaries.len(), replicas.len()), (3, 3));
        let replica = cluster.replica_of(&primaries[0]).unwrap().unwrap();
        let started = Instant::now();
        cluster.failover(&replica).unwrap();
        eprintln!("failed over in {:?}", started.elapsed());
        let now = cluster.primaries().unwrap();
        assert!(
            now.contains(&replica) && !now.contains(&primaries[0]),
            "{now:?}"
        );
        let (pids, dirs): (Vec<i32>, Vec<PathBuf>) = (
            cluster.pids(),
            cluster.nodes.iter().map(|n| n.dir.clone()).collect(),
        );
        drop(cluster);
        for (pid, dir) in pids.iter().zip(&dirs) {
            assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
            assert!(!dir.exists());
        }
    }

    /// Over TLS alone: it forms, answers its own `redis-cli` calls and fails over.
    #[test]
    fn a_tls_cluster_forms_and_fails_over() {
        let ca = TestCa::new().unwrap_or_else(|e| panic!("{e}"));
        let cluster = LocalRedisCluster::start_tls(&ca).unwrap_or_else(|e| panic!("{e}"));
        assert!(cluster.url().starts_with("rediss://127.0.0.1:"));
        let replica = cluster.replicas().unwrap().remove(0);
        cluster.failover(&replica).unwrap();
        assert!(cluster.primaries().unwrap().contains(&replica));
        let plain = Command::new(REDIS_CLI)
            .args(["-p", &cluster.nodes[0].port.to_string(), "PING"])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&plain.stdout).contains("PONG"));
    }

    #[test]
    fn cluster_nodes_lines_are_read() {
        let text = "\
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@31001,host myself,master - 0 0 1 connected 0-5460
";
        let lines = parse_nodes(text);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].addr, "127.0.0.1:30004");
        assert_eq!(lines[0].of.as_deref(), Some("e7d1"));
        assert!(!lines[0].primary && lines[1].primary);
        assert_eq!(lines[1].addr, "127.0.0.1:30001");
    }
}
