//! [`Link`]: a connection to what a URL names, a Redis server or a Redis Cluster. One node's URL
//! is enough for a cluster (as redis-py's `RedisCluster.from_url` takes it): the node says
//! whether it is one (`INFO cluster`: `cluster_enabled:1`), and then redis's cluster client
//! learns the slots from it and follows `MOVED` and `ASK`. What must reach every primary
//! (the function library, a `SCAN`, the checks of a deployment) goes to each on a connection of
//! its own, found with `CLUSTER NODES` and dialed through [`crate::dial`] with the URL's
//! credentials and TLS.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};
use zkfence::fence::{BoxError, ConfigError};

use crate::dial::{authority, node_url, Dial};

/// A connection to a Redis server, or to a Redis Cluster through one node's URL: commands on a
/// cluster go to the node of their keys' slot (redirections followed), so a fenced call whose
/// keys share the fence key's hash tag runs where its slot lives. Cheap to clone (each clone
/// shares the connections).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(ticket: zkfence::fence::FenceTicket) -> Result<(), zkfence::fence::BoxError> {
/// use zkfence_redis::{Link, RedisFence};
/// let mut redis = Link::open("redis://10.0.0.7:7000/").await?; // any node of the cluster
/// println!("cluster: {}", redis.is_cluster());
/// RedisFence::new().claim(&mut redis, &ticket).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Link {
    conn: Conn,
    /// The URL it was opened from, to dial a node of the cluster with its credentials.
    url: Option<Arc<str>>,
}

#[derive(Clone)]
enum Conn {
    Server(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("cluster", &self.is_cluster())
            .finish_non_exhaustive()
    }
}

impl From<MultiplexedConnection> for Link {
    fn from(conn: MultiplexedConnection) -> Link {
        Link {
            conn: Conn::Server(conn),
            url: None,
        }
    }
}

impl Link {
    /// Connects to `url` (`redis://host:port/db`, or `rediss://` with the `tls` feature, as
    /// [`Connected::connect`](crate::Connected::connect) takes it). When the node is one of a
    /// Redis Cluster (`INFO cluster` says `cluster_enabled:1`), a cluster connection seeded
    /// with it: any node's URL reaches the whole cluster.
    ///
    /// # Errors
    ///
    /// Redis's error (unreachable, refused, a bad URL); a cluster URL naming a database other
    /// than 0.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// let redis = zkfence_redis::Link::open("redis://cache:6379/").await?;
    /// # let _ = redis; Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<Link, BoxError> {
        let dial = Dial::parse(url)?;
        let mut first = dial.open().await?;
        if !is_cluster_node(&mut first).await? {
            return Ok(Link {
                conn: Conn::Server(first),
                url: Some(url.into()),
            });
        }
        let info = dial.info().clone();
        if info.redis_settings().db() != 0 {
            let why = format!("database {}", info.redis_settings().db());
            let instead = "a URL without a database (a Redis Cluster has database 0 alone)";
            return Err(ConfigError::new("Redis Cluster URL", why, instead).into());
        }
        // A reply's deadline (redis's cluster client has none: a stopped primary would hold
        // every call for ever), long enough for `RedisFence::with_wait`'s WAIT.
        let builder = redis::cluster::ClusterClientBuilder::new([info])
            .connection_timeout(Duration::from_secs(1))
            .response_timeout(Duration::from_secs(10));
        // The URL's certificates (ssl_ca_certs, ssl_certfile), for every node the client
        // reaches, not only the first.
        #[cfg(feature = "tls")]
        let builder = match crate::dial::certificates(url)? {
            Some(certificates) => builder.certs(certificates),
            None => builder,
        };
        let cluster = builder.build()?;
        Ok(Link {
            conn: Conn::Cluster(cluster.get_async_connection().await?),
            url: Some(url.into()),
        })
    }

    /// Whether it reaches a Redis Cluster.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// let redis = zkfence_redis::Link::open("redis://cache:6379/").await?;
    /// if redis.is_cluster() {
    ///     println!("a cluster: keys of one call must share a hash tag");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// Every primary, each on a connection of its own (a server alone is its own primary),
    /// sorted by address; on a cluster, the nodes `CLUSTER NODES` flags `master` and not
    /// failed.
    pub(crate) async fn primaries(&self) -> Result<Vec<Node>, BoxError> {
        self.nodes(true).await
    }

    /// Every replica of a cluster, each on a connection of its own (none for a server).
    #[cfg(feature = "conformance")]
    pub(crate) async fn replicas(&self) -> Result<Vec<Node>, BoxError> {
        self.nodes(false).await
    }

    async fn nodes(&self, primaries: bool) -> Result<Vec<Node>, BoxError> {
        let cluster = match &self.conn {
            Conn::Server(_) if !primaries => return Ok(Vec::new()),
            Conn::Server(conn) => {
                let addr = self.url.as_deref().map_or("the server".into(), authority);
                let slots = vec![(0, 16383)];
                let conn = conn.clone();
                return Ok(vec![Node { addr, slots, conn }]);
            }
            Conn::Cluster(cluster) => cluster,
        };
        let Some(url) = self.url.as_deref() else {
            return Err("a cluster connection without its URL".into());
        };
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut cluster.clone())
            .await?;
        let mut found = Vec::new();
        for (addr, slots) in parse_nodes(&text, primaries) {
            let conn = Dial::open_url(&node_url(url, &addr)).await.map_err(|e| {
                format!("cannot reach the cluster's node {addr} (as CLUSTER NODES names it): {e}")
            })?;
            found.push(Node { addr, slots, conn });
        }
        found.sort_by(|a, b| a.addr.cmp(&b.addr));
        Ok(found)
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.conn {
            Conn::Server(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.conn {
            Conn::Server(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            Conn::Server(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// A node of a cluster (or the server alone), on a connection to it alone.
#[derive(Clone)]
pub(crate) struct Node {
    /// `host:port`, as `CLUSTER NODES` gives it (the URL's, for a server alone).
    pub(crate) addr: String,
    /// The slot ranges it serves (a replica's: none); read by the conformance kit's check of
    /// every primary.
    #[cfg_attr(not(feature = "conformance"), allow(dead_code))]
    pub(crate) slots: Vec<(u16, u16)>,
    pub(crate) conn: MultiplexedConnection,
}

impl Node {
    /// Whether it serves `slot`.
    #[cfg(feature = "conformance")]
    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(from, to)| (from..=to).contains(&slot))
    }
}

/// Whether the server on `conn` is a node of a Redis Cluster: `INFO cluster` says
/// `cluster_enabled:1`, or, where an ACL or a rename refuses `INFO`, `CLUSTER INFO` answers
/// (a server without cluster support refuses it). Both refused: taken for a server alone.
async fn is_cluster_node(conn: &mut MultiplexedConnection) -> Result<bool, RedisError> {
    let refused = |err: &RedisError| matches!(err.kind(), redis::ErrorKind::Server(_));
    match redis::cmd("INFO")
        .arg("cluster")
        .query_async::<String>(conn)
        .await
    {
        Ok(info) => Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1")),
        Err(err) if refused(&err) => {
            let mut asked = redis::cmd("CLUSTER");
            asked.arg("INFO");
            match asked.query_async::<String>(conn).await {
                Ok(_) => Ok(true),
                Err(err) if refused(&err) => Ok(false),
                Err(err) => Err(err),
            }
        }
        Err(err) => Err(err),
    }
}

/// The nodes of a `CLUSTER NODES` reply, primaries (`master`) or replicas, leaving out those
/// flagged failed or without an address: each `host:port` and the slot ranges it serves
/// (`[slot-importing]` and `[slot-migrating]` entries left out: the slot is still its owner's).
fn parse_nodes(text: &str, primaries: bool) -> Vec<(String, Vec<(u16, u16)>)> {
    (text.lines())
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags: Vec<&str> = fields.get(2)?.split(',').collect();
            let gone = ["fail", "noaddr", "handshake"]
                .iter()
                .any(|f| flags.contains(f));
            let replica = flags.contains(&"slave");
            if gone || replica == primaries || (primaries && !flags.contains(&"master")) {
                return None;
            }
            let addr = fields.get(1)?.split(['@', ',']).next()?.to_owned();
            let slots = (fields.iter().skip(8))
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    Some((from.parse().ok()?, to.parse().ok()?))
                })
                .collect();
            Some((addr, slots))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_are_read() {
        let text = "\
07c3 127.0.0.1:30004@31004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@31001,host myself,master - 0 0 1 connected 0-5460 5462 [5461->-67ed]
67ed 127.0.0.1:30002@31002 master,fail - 0 0 2 disconnected 5461 5463-10922
";
        let primaries = parse_nodes(text, true);
        assert_eq!(
            primaries,
            [("127.0.0.1:30001".to_owned(), vec![(0, 5460), (5462, 5462)])]
        );
        let replicas = parse_nodes(text, false);
        assert_eq!(replicas, [("127.0.0.1:30004".to_owned(), vec![])]);
    }
}
