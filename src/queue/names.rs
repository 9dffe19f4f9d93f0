//! Queue node names: Apache Curator's protected mode `_c_<uuid>-<marker><seq>`, so a Curator
//! `InterProcessMutex` (`lock-`) or `InterProcessReadWriteLock` (`__READ__` / `__WRIT__`) and
//! a zkfence lock on the same path share one queue; their order across the 2³¹ sequence wrap;
//! and which paths may be lock paths.

use crate::error::{Error, Result};

/// Curator's mutex lock name, before the sequence in `InterProcessMutex` nodes (and ours).
pub(crate) const LOCK_NAME: &str = "lock-";
/// Curator's `InterProcessReadWriteLock` markers.
pub(crate) const READ_NAME: &str = "__READ__";
pub(crate) const WRITE_NAME: &str = "__WRIT__";
/// Semaphore leases (the name Curator's `InterProcessSemaphoreV2` gives its lease nodes).
pub(crate) const LEASE_NAME: &str = "lease-";
/// Curator's `LeaderLatch` participants (and zkfence's election candidates).
pub(crate) const LATCH_NAME: &str = "latch-";

/// Whether a queue node shares the lock with its neighbours (a reader) or excludes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Shared,
    Exclusive,
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
pub(crate) fn protected_prefix(id: &uuid::Uuid, marker: &str) -> String {
    format!("_c_{id}-{marker}")
}

/// A fresh id for one acquire's node: a random 128-bit base drawn once per process, plus a
/// counter, in a version-4 UUID's shape. Unique in this process, and across processes as
/// random ids are, without a system call per acquire. (A node is found again after a lost
/// reply by this id *and* our session, so the id need not be unpredictable, only unique.)
pub(crate) fn fresh_id() -> uuid::Uuid {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::LazyLock;
    static BASE: LazyLock<u128> = LazyLock::new(|| uuid::Uuid::new_v4().as_u128());
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    // The counter goes into the low 64 bits, which hold no version or variant bits.
    let bits = *BASE ^ u128::from(n);
    uuid::Builder::from_random_bytes(bits.to_be_bytes()).into_uuid()
}

/// The sequence number and role of a queue node's name, if it is one: the digits after the
/// last marker (Curator's rule), which are negative after the 2³¹ wrap. Unknown names are
/// not queue nodes. Readers (`__READ__`) share; every other marker excludes.
pub(crate) fn parse_node(name: &str) -> Option<(i32, Role)> {
    let (marker, seq) = parse_marked(name)?;
    let role = if marker == READ_NAME {
        Role::Shared
    } else {
        Role::Exclusive
    };
    Some((seq, role))
}

/// The marker and sequence of a queue node's name: the last marker in it, followed by at
/// least ten digits.
fn parse_marked(name: &str) -> Option<(&'static str, i32)> {
    let (at, marker) = [LOCK_NAME, READ_NAME, WRITE_NAME, LEASE_NAME, LATCH_NAME]
        .into_iter()
        .filter_map(|m| name.rfind(m).map(|at| (at, m)))
        .max_by_key(|&(at, _)| at)?;
    let digits = &name[at + marker.len()..];
    if digits.len() < 10 {
        return None;
    }
    digits.parse::<i32>().ok().map(|seq| (marker, seq))
}

/// The marker of a queue node's name (`lock-`, `__READ__`, `__WRIT__`, `lease-`), if it is one.
pub(crate) fn marker_of(name: &str) -> Option<&'static str> {
    parse_marked(name).map(|(marker, _)| marker)
}

/// Whether `name` is a node of a kind that holds alone (a mutex's `lock-` or a writer's
/// `__WRIT__`): when such a node's holder releases it, nothing sorted before it is left.
/// A reader or a semaphore lease may hold with others still ahead of it.
pub(crate) fn holds_alone(name: &str) -> bool {
    parse_marked(name).is_some_and(|(marker, _)| marker_holds_alone(marker))
}

/// Whether nodes with `marker` hold alone (see [`holds_alone`]).
pub(crate) fn marker_holds_alone(marker: &str) -> bool {
    matches!(marker, LOCK_NAME | WRITE_NAME)
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

/// Names of mutex queue nodes with these sequences, for tests.
#[cfg(test)]
pub(crate) fn mutex_names(seqs: &[i32]) -> Vec<String> {
    seqs.iter()
        .map(|s| format!("_c_0f-{LOCK_NAME}{s:010}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn fresh_ids_are_distinct_version_4_uuids() {
        let (a, b) = (super::fresh_id(), super::fresh_id());
        assert_ne!(a, b);
        assert_eq!(a.get_version_num(), 4);
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
    }

    use super::*;
    use crate::queue::kind::{Kind, Position};

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
        let ordered = queue_order(mutex_names(&[
            i32::MIN + 1,
            i32::MAX,
            i32::MIN,
            i32::MAX - 1,
        ]));
        let seqs: Vec<i32> = ordered.iter().map(|(_, s)| *s).collect();
        assert_eq!(seqs, vec![i32::MAX - 1, i32::MAX, i32::MIN, i32::MIN + 1]);
        let children = mutex_names(&[i32::MAX - 1, i32::MAX, i32::MIN]);
        let own = children[2].clone();
        let pos = Kind::Mutex.position(&children, &own, i32::MIN);
        assert_eq!(
            pos,
            Position {
                present: true,
                blocking: 2,
                watch: vec![children[1].clone()],
                others: 2,
                behind: 0,
            }
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
