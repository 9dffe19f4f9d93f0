//! The queue protocol shared by the lock kinds: node names, queue order, finding our node
//! after a lost create reply, and deletes that survive ConnectionLoss.
//!
//! Node names follow Apache Curator's protected mode, `_c_<uuid>-<marker><seq>`, so a Curator
//! `InterProcessMutex` (`lock-`) or `InterProcessReadWriteLock` (`__READ__` / `__WRIT__`) and
//! a zkfence lock on the same path share one queue.
//!
//! Every kind uses the same queue loop; only [`Kind::position`], the "may I proceed, and what
//! do I watch?" predicate, differs (Curator's driver idea).

use std::time::Duration;

use zookeeper_client as zk;

use crate::error::{Error, Result};

/// Curator's mutex lock name, before the sequence in `InterProcessMutex` nodes (and ours).
pub(crate) const LOCK_NAME: &str = "lock-";
/// Curator's `InterProcessReadWriteLock` markers.
pub(crate) const READ_NAME: &str = "__READ__";
pub(crate) const WRITE_NAME: &str = "__WRIT__";
/// The data a release writes into its node just before deleting it when lock-delay is on.
pub(crate) const RELEASED: &[u8] = b"released";
/// Semaphore leases (the name Curator's `InterProcessSemaphoreV2` gives its lease nodes).
pub(crate) const LEASE_NAME: &str = "lease-";

/// Whether a queue node shares the lock with its neighbours (a reader) or excludes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Shared,
    Exclusive,
}

/// The lock kinds, each a predicate over the one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One holder; waits for every earlier node.
    Mutex,
    /// Shares with other readers; waits only for earlier exclusive nodes.
    Read,
    /// A write lock: one holder; waits for every earlier node, readers included.
    Write,
    /// Up to `n` holders: proceeds when fewer than `n` nodes sort before it.
    Semaphore(u32),
}

impl Kind {
    /// The marker before the sequence in this kind's node names.
    pub(crate) fn marker(self) -> &'static str {
        match self {
            Kind::Mutex => LOCK_NAME,
            Kind::Read => READ_NAME,
            Kind::Write => WRITE_NAME,
            Kind::Semaphore(_) => LEASE_NAME,
        }
    }

    /// The kind's name in traces.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Semaphore(_) => "semaphore",
        }
    }

    /// Whether this kind queues in-process first (one ZooKeeper contender per process).
    pub(crate) fn exclusive(self) -> bool {
        matches!(self, Kind::Mutex | Kind::Write)
    }

    /// Where our node (`own`, sequence `own_seq`) stands in `children`, in linear time
    /// without sorting the listing: how many nodes block us, and the ones to watch (the
    /// nearest blockers).
    pub(crate) fn position(self, children: &[String], own: &str, own_seq: i32) -> Position {
        let mut present = false;
        let mut ahead: Vec<(i32, &String, Role)> = Vec::new();
        for child in children {
            if child == own {
                present = true;
                continue;
            }
            let Some((seq, role)) = parse_node(child) else {
                continue;
            };
            let d = distance(own_seq, seq);
            if d < 0 {
                ahead.push((d, child, role));
            }
        }
        let watch_nearest = |mut nodes: Vec<(i32, &String, Role)>, n: usize| -> Vec<String> {
            // The n nearest (largest, least negative distances) in linear time: a listing of a
            // long queue is never sorted; only the n picked are ordered, nearest first.
            let nearest = std::cmp::Reverse;
            if nodes.len() > n && n > 0 {
                nodes.select_nth_unstable_by_key(n - 1, |&(d, _, _)| nearest(d));
                nodes.truncate(n);
            }
            nodes.sort_unstable_by_key(|&(d, _, _)| nearest(d));
            nodes.into_iter().map(|(_, name, _)| name.clone()).collect()
        };
        let (blocking, watch) = match self {
            Kind::Mutex | Kind::Write => {
                let blocking = ahead.len();
                (blocking, watch_nearest(ahead, 1))
            }
            Kind::Read => {
                let writers: Vec<_> = ahead
                    .into_iter()
                    .filter(|&(_, _, role)| role == Role::Exclusive)
                    .collect();
                (writers.len(), watch_nearest(writers, 1))
            }
            Kind::Semaphore(n) => {
                // Any of the n nearest nodes ahead going away admits us when exactly n are
                // ahead; nodes further ahead going away never do (those n still block).
                let n = n.max(1) as usize;
                let blocking = (ahead.len() + 1).saturating_sub(n);
                (blocking, watch_nearest(ahead, n))
            }
        };
        Position {
            present,
            blocking,
            watch: if blocking > 0 { watch } else { Vec::new() },
        }
    }
}

/// Checks that `path` can be a lock path: an absolute ZooKeeper path, not the root, not under
/// the reserved `/zookeeper` tree, and free of what the server would refuse.
pub(crate) fn validate_lock_path(path: &str) -> Result<()> {
    let bad = |reason| {
        Err(Error::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    if path.is_empty() {
        return bad("it is empty");
    }
    if !path.starts_with('/') {
        return bad("it must start with '/'");
    }
    if path == "/" {
        return bad("the root cannot be a lock path");
    }
    if path.ends_with('/') {
        return bad("it must not end with '/'");
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return bad("/zookeeper is reserved by the server");
    }
    for segment in path[1..].split('/') {
        match segment {
            "" => return bad("it has an empty segment ('//')"),
            "." | ".." => return bad("'.' and '..' segments are not allowed"),
            _ => {}
        }
    }
    if path.chars().any(is_forbidden_char) {
        return bad("it contains a control or reserved character");
    }
    Ok(())
}

/// Characters ZooKeeper's `PathUtils.validatePath` refuses.
fn is_forbidden_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
}

/// The name prefix of one contender: `_c_<uuid>-<marker>`. The server appends the sequence.
pub(crate) fn protected_prefix(id: &uuid::Uuid, kind: Kind) -> String {
    format!("_c_{id}-{}", kind.marker())
}

/// The sequence number and role of a queue node's name, if it is one: the digits after the
/// last marker (Curator's rule), which are negative after the 2³¹ wrap. Unknown names are
/// not queue nodes. Readers (`__READ__`) share; every other marker excludes.
pub(crate) fn parse_node(name: &str) -> Option<(i32, Role)> {
    let (at, marker) = [LOCK_NAME, READ_NAME, WRITE_NAME, LEASE_NAME]
        .into_iter()
        .filter_map(|m| name.rfind(m).map(|at| (at, m)))
        .max_by_key(|&(at, _)| at)?;
    let digits = &name[at + marker.len()..];
    if digits.len() < 10 {
        return None;
    }
    let role = if marker == READ_NAME {
        Role::Shared
    } else {
        Role::Exclusive
    };
    digits.parse::<i32>().ok().map(|seq| (seq, role))
}

/// The sequence number of a queue node's name (see [`parse_node`]).
pub(crate) fn parse_sequence(name: &str) -> Option<i32> {
    parse_node(name).map(|(seq, _)| seq)
}

/// Queue order between two sequences, by serial-number arithmetic (RFC 1982): `a` precedes
/// `b` when `b - a`, taken modulo 2³², is positive as an `i32`. This stays right across the
/// 2³¹ wrap as long as the live queue spans fewer than 2³¹ sequence numbers.
pub(crate) fn distance(from: i32, to: i32) -> i32 {
    to.wrapping_sub(from)
}

/// Where we stand in one listing of the lock path's children.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Position {
    /// Is our node in the listing at all.
    pub(crate) present: bool,
    /// How many nodes must go before we may proceed (0: proceed now).
    pub(crate) blocking: usize,
    /// The nodes we watch: the nearest blockers (one for a mutex, writer or reader; `n` for
    /// a semaphore of `n`). When one of them goes and `blocking` was 1, we proceed with no
    /// further request.
    pub(crate) watch: Vec<String>,
}

/// Sorts lock node names into queue order (serial order relative to the first one), dropping
/// names that are not lock nodes.
pub(crate) fn queue_order(children: Vec<String>) -> Vec<(String, i32)> {
    let mut nodes: Vec<(String, i32)> = children
        .into_iter()
        .filter_map(|name| parse_sequence(&name).map(|seq| (name, seq)))
        .collect();
    if let Some(&(_, base)) = nodes.first() {
        nodes.sort_by_key(|&(_, seq)| distance(base, seq));
    }
    nodes
}

/// Joins a parent path and a child name.
pub(crate) fn child_path(parent: &str, name: &str) -> String {
    let mut path = String::with_capacity(parent.len() + 1 + name.len());
    path.push_str(parent);
    path.push('/');
    path.push_str(name);
    path
}

/// Whether a request failed because the connection broke, so its outcome is unknown and it
/// may be retried once the client has reconnected. `zookeeper-client` 0.11 reports a clean
/// close as `ConnectionLoss`, but socket errors and its own "no response from connection"
/// timeout as `Custom`; all of them mean the same thing here.
pub(crate) fn is_connection_error(err: &zk::Error) -> bool {
    matches!(
        err,
        zk::Error::ConnectionLoss | zk::Error::Custom(_) | zk::Error::Timeout
    )
}

/// Waits until the client is connected again after a ConnectionLoss, or fails once the
/// session is over. A short pause first keeps a retry loop from spinning while the client has
/// not yet noticed the disconnect.
pub(crate) async fn await_reconnect(client: &zk::Client, attempt: &mut u32) -> Result<()> {
    let pause = Duration::from_millis(5u64 << (*attempt).min(5));
    *attempt += 1;
    tokio::time::sleep(pause).await;
    let mut states = client.state_watcher();
    loop {
        let state = states.state();
        if let Some(err) = Error::from_session_state(state, client.session_id()) {
            return Err(err);
        }
        if state == zk::SessionState::Disconnected {
            states.changed().await;
        } else {
            return Ok(());
        }
    }
}

/// Why our node vanished: `Ok(())` if the session is still alive (someone deleted the node),
/// the session's error if it is over. A session closed from outside deletes its ephemeral
/// nodes, and fires their watches, before its connection is closed, so a node's deletion can be
/// the first sign of an expiry. One `sync` tells the two apart.
pub(crate) async fn session_alive(client: &zk::Client, path: &str) -> Result<()> {
    let mut attempt = 0;
    loop {
        match client.sync(path).await {
            Ok(()) | Err(zk::Error::NoNode) => return Ok(()),
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            Err(err) => return Err(Error::zk("sync", path, client.session_id(), err)),
        }
    }
}

/// What [`delete_node`] found out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deleted {
    /// The server answered our delete: we deleted the node.
    Confirmed,
    /// The node was gone before our first attempt.
    Absent,
    /// An attempt lost its reply, and a retry found the node gone: either our delete went
    /// through, or someone else deleted the node first. Nothing the server keeps tells the two
    /// apart (a deletion leaves no trace of who made it).
    Unconfirmed,
}

/// Deletes `path`, retrying across ConnectionLoss until the node is known to be gone or the
/// session is over; see [`Deleted`] for what the outcome proves.
pub(crate) async fn delete_node(client: &zk::Client, path: &str, mark: bool) -> Result<Deleted> {
    let mut attempt = 0;
    loop {
        let deleted = if mark {
            // The release marker for lock-delay: the data change fires the successor's watch
            // before the node goes, in the same transaction.
            let mut multi = client.new_multi_writer();
            let marked = match multi
                .add_set_data(path, RELEASED, None)
                .and_then(|()| multi.add_delete(path, None))
            {
                Ok(()) => multi.commit().await.map(|_| ()).map_err(zk::Error::from),
                Err(err) => Err(err),
            };
            match marked {
                // The node's ACL does not let us write it: delete it plainly.
                Err(zk::Error::NoAuth) => client.delete(path, None).await,
                other => other,
            }
        } else {
            client.delete(path, None).await
        };
        match deleted {
            Ok(()) => return Ok(Deleted::Confirmed),
            Err(zk::Error::NoNode) if attempt == 0 => return Ok(Deleted::Absent),
            Err(zk::Error::NoNode) => return Ok(Deleted::Unconfirmed),
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            Err(err) => return Err(Error::zk("delete", path, client.session_id(), err)),
        }
    }
}

/// After a create whose reply was lost: our node in `parent` whose name starts with `prefix`
/// (our UUID) **and** whose `ephemeralOwner` is our session, with its `Stat`. Another
/// session's node is never taken for ours.
pub(crate) async fn find_own_node(
    client: &zk::Client,
    parent: &str,
    prefix: &str,
) -> Result<Option<(String, zk::Stat)>> {
    let mut attempt = 0;
    let children = loop {
        // After a reconnect, the server we reach may lag behind the one that took our create;
        // sync first so that a create already applied is in the listing.
        let synced = client.sync(parent);
        let listed = client.list_children(parent);
        let _ = synced.await;
        match listed.await {
            Ok(children) => break children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            Err(err) => return Err(Error::zk("list", parent, client.session_id(), err)),
        }
    };
    let session = client.session_id().0;
    for name in children.into_iter().filter(|name| name.starts_with(prefix)) {
        let path = child_path(parent, &name);
        let mut attempt = 0;
        loop {
            match client.get_data(&path).await {
                Ok((_, stat)) if stat.ephemeral_owner == session => return Ok(Some((name, stat))),
                Ok(_) | Err(zk::Error::NoNode) => break,
                Err(err) if is_connection_error(&err) => {
                    await_reconnect(client, &mut attempt).await?
                }
                Err(err) => return Err(Error::zk("get", &path, client.session_id(), err)),
            }
        }
    }
    Ok(None)
}

/// Creates the missing ancestors of `path` and `path` itself (`mkdir -p`), with `mode`
/// (persistent or container) and `acls`.
pub(crate) async fn create_parents(
    client: &zk::Client,
    path: &str,
    mode: zk::CreateMode,
    acls: &[zk::Acl],
) -> Result<()> {
    let options = mode.with_acls(zk::Acls::new(acls));
    // Walk down from the first missing ancestor; most calls find only the last one missing.
    let mut end = path.len();
    let mut attempt = 0;
    loop {
        match client.create(&path[..end], &[], &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {
                if end == path.len() {
                    return Ok(());
                }
                end = path[end + 1..]
                    .find('/')
                    .map_or(path.len(), |i| end + 1 + i);
            }
            Err(zk::Error::NoNode) => match path[..end].rfind('/') {
                Some(i) if i > 0 => end = i,
                _ => {
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    })
                }
            },
            Err(err) if is_connection_error(&err) => await_reconnect(client, &mut attempt).await?,
            Err(err) => return Err(Error::zk("create", &path[..end], client.session_id(), err)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(seqs: &[i32]) -> Vec<String> {
        seqs.iter()
            .map(|s| format!("_c_0f-{LOCK_NAME}{s:010}"))
            .collect()
    }

    #[test]
    fn parses_curator_names_including_wrapped_sequences() {
        assert_eq!(
            parse_sequence("_c_6a1b7d3e-2c1f-4e55-9e2e-1c7f0e4d3b2a-lock-0000000042"),
            Some(42)
        );
        assert_eq!(parse_sequence("_c_x-lock--2147483648"), Some(i32::MIN));
        assert_eq!(parse_sequence("_c_x-lock-2147483647"), Some(i32::MAX));
        assert_eq!(parse_sequence("some-other-node"), None);
        assert_eq!(parse_sequence("_c_x-lock-12"), None);
        assert_eq!(parse_sequence("_c_x-lock-00000000zz"), None);
    }

    #[test]
    fn sorts_numerically_not_as_strings() {
        let ordered = queue_order(vec![
            "a-lock-0000000010".into(),
            "b-lock-0000000009".into(),
            "junk".into(),
        ]);
        assert_eq!(
            ordered,
            vec![
                ("b-lock-0000000009".to_owned(), 9),
                ("a-lock-0000000010".to_owned(), 10)
            ]
        );
    }

    #[test]
    fn orders_across_the_sequence_wrap() {
        // 2147483646, 2147483647, then the server wraps to -2147483648, -2147483647.
        let ordered = queue_order(names(&[i32::MIN + 1, i32::MAX, i32::MIN, i32::MAX - 1]));
        let seqs: Vec<i32> = ordered.iter().map(|(_, s)| *s).collect();
        assert_eq!(seqs, vec![i32::MAX - 1, i32::MAX, i32::MIN, i32::MIN + 1]);
        let children = names(&[i32::MAX - 1, i32::MAX, i32::MIN]);
        let own = children[2].clone();
        let pos = Kind::Mutex.position(&children, &own, i32::MIN);
        assert_eq!(
            pos,
            Position {
                present: true,
                blocking: 2,
                watch: vec![children[1].clone()]
            }
        );
    }

    #[test]
    fn a_mutex_watches_only_the_immediate_predecessor() {
        let children = names(&[3, 7, 5, 9, 1]);
        let pos = Kind::Mutex.position(&children, &children[3], 9);
        assert_eq!(
            pos,
            Position {
                present: true,
                blocking: 4,
                watch: vec![children[1].clone()]
            }
        );
        let first = Kind::Mutex.position(&children, &children[4], 1);
        assert_eq!(
            first,
            Position {
                present: true,
                blocking: 0,
                watch: vec![]
            }
        );
        let gone = Kind::Mutex.position(&children, "_c_0f-lock-0000000004", 4);
        assert!(!gone.present);
        assert_eq!(gone.blocking, 2);
    }

    fn rw(spec: &[(char, i32)]) -> Vec<String> {
        spec.iter()
            .map(|&(k, s)| {
                let marker = if k == 'r' { READ_NAME } else { WRITE_NAME };
                format!("_c_{k}{s}-{marker}{s:010}")
            })
            .collect()
    }

    #[test]
    fn a_reader_waits_only_for_the_nearest_earlier_writer() {
        // R1 W2 R3 W4 R5: R5 is blocked by two writers and watches W4, the nearest.
        let children = rw(&[('r', 1), ('w', 2), ('r', 3), ('w', 4), ('r', 5)]);
        let r5 = Kind::Read.position(&children, &children[4], 5);
        assert_eq!(
            (r5.blocking, r5.watch.clone()),
            (2, vec![children[3].clone()])
        );
        // R3 waits for W2 only, not for R1.
        let r3 = Kind::Read.position(&children, &children[2], 3);
        assert_eq!(
            (r3.blocking, r3.watch.clone()),
            (1, vec![children[1].clone()])
        );
        // R1 proceeds; a second reader right behind it proceeds too.
        assert_eq!(Kind::Read.position(&children, &children[0], 1).blocking, 0);
        let readers = rw(&[('r', 1), ('r', 2)]);
        assert_eq!(Kind::Read.position(&readers, &readers[1], 2).blocking, 0);
        // W2 waits for R1; W4 for everything before it, watching R3.
        let w2 = Kind::Write.position(&children, &children[1], 2);
        assert_eq!(
            (w2.blocking, w2.watch.clone()),
            (1, vec![children[0].clone()])
        );
        let w4 = Kind::Write.position(&children, &children[3], 4);
        assert_eq!((w4.blocking, w4.watch), (3, vec![children[2].clone()]));
    }

    #[test]
    fn curator_mutex_nodes_exclude_readers() {
        let mut children = rw(&[('r', 2)]);
        children.push("_c_x-lock-0000000001".into());
        let r = Kind::Read.position(&children, &children[0], 2);
        assert_eq!(r.blocking, 1);
    }

    #[test]
    fn a_semaphore_of_n_watches_its_n_nearest_predecessors() {
        let children = names(&[1, 2, 3, 4, 5]);
        // With 3 permits: nodes 1, 2, 3 hold; 4 is blocked by one (any of 1..3 leaving
        // admits it) and watches all three; 5 is blocked by two and watches 2, 3, 4.
        for (i, seq) in [(0, 1), (1, 2), (2, 3)] {
            assert_eq!(
                Kind::Semaphore(3)
                    .position(&children, &children[i], seq)
                    .blocking,
                0
            );
        }
        let four = Kind::Semaphore(3).position(&children, &children[3], 4);
        assert_eq!(four.blocking, 1);
        assert_eq!(
            four.watch,
            vec![
                children[2].clone(),
                children[1].clone(),
                children[0].clone()
            ]
        );
        let five = Kind::Semaphore(3).position(&children, &children[4], 5);
        assert_eq!(five.blocking, 2);
        assert_eq!(
            five.watch,
            vec![
                children[3].clone(),
                children[2].clone(),
                children[1].clone()
            ]
        );
        // One permit is a mutex.
        assert_eq!(
            Kind::Semaphore(1).position(&children, &children[4], 5),
            Kind::Mutex.position(&children, &children[4], 5)
        );
    }

    #[test]
    fn parses_every_marker() {
        assert_eq!(
            parse_node("_c_x-__READ__0000000007"),
            Some((7, Role::Shared))
        );
        assert_eq!(
            parse_node("_c_x-__WRIT__0000000008"),
            Some((8, Role::Exclusive))
        );
        assert_eq!(
            parse_node("_c_x-lease-0000000009"),
            Some((9, Role::Exclusive))
        );
        // The last marker wins, as in Curator's fixForSorting.
        assert_eq!(
            parse_node("_c_lock-x-__READ__0000000010"),
            Some((10, Role::Shared))
        );
    }

    #[test]
    fn validates_lock_paths() {
        for ok in ["/locks/orders", "/a", "/zookeeperish/x"] {
            assert!(validate_lock_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "locks",
            "/",
            "/locks/",
            "/a//b",
            "/a/./b",
            "/a/../b",
            "/zookeeper",
            "/zookeeper/x",
            "/a\u{1}b",
        ] {
            assert!(
                matches!(validate_lock_path(bad), Err(Error::InvalidPath { .. })),
                "{bad:?}"
            );
        }
    }
}
