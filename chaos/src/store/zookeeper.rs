//! The fenced store on ZooKeeper data, through the library's own fence
//! ([`ZooKeeperFence`] with a fence node), on a ZooKeeper server of the scenario's own: not the
//! ensemble the lock lives on, so the holder's node cannot be checked there, and each write is
//! fenced by the fence node alone, as a ticket rebuilt from its text (`zkfence run`'s) is. The
//! worker still runs its ticket's check before sending, as the fence does for a ticket from a
//! hold.
//!
//! Under the URL's chroot, per store row `r`: the counter `/counter-r` (its data the value), the
//! fence node `/fence-r`, and the log `/log-r`, whose persistent sequential children (data: the
//! entry) each fenced write creates in the `multi` that compares and raises the fence: so the
//! children's sequence is the commit order of accepted writes.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use zkfence::fence::{FenceTicket, ZooKeeperFence};
use zkfence::Connect;
use zookeeper_client as zk;

use super::record::{chain, entry, in_doubt, parse_entry, recorded, Op, Outcome, Row, Step};

/// The session timeout of the store's clients.
const SESSION: Duration = Duration::from_secs(10);

/// A session on `url` (`zk://host:port/chroot`), giving up after 5 s.
async fn open(url: &str) -> Result<zk::Client, String> {
    let hosts = url.strip_prefix("zk://").unwrap_or(url);
    let connect = Connect::new(hosts).with_session_timeout(SESSION).connect();
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(client) => client.map_err(|e| format!("{url}: {e}")),
        Err(_) => Err(format!("{url}: no session within 5 s")),
    }
}

fn counter(row: i32) -> String {
    format!("/counter-{row}")
}

fn fence_node(row: i32) -> String {
    format!("/fence-{row}")
}

fn log(row: i32) -> String {
    format!("/log-{row}")
}

/// The bytes of a fenced write's request on the wire: its log entry's path, in no other
/// request a worker sends.
pub(super) const COMMIT: &[u8] = b"/log-";

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn sequential() -> zk::CreateOptions<'static> {
    zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all())
}

/// (Re)creates the chroot's tree for one run: `rows` counters at 0, empty logs, no fence
/// nodes (a fence's first claim creates its node).
pub(super) async fn reset(url: &str, rows: u32) -> Result<(), String> {
    let hosts = url.strip_prefix("zk://").unwrap_or(url);
    let (server, chroot) = hosts.split_once('/').unwrap_or((hosts, ""));
    let root = open(&format!("zk://{server}")).await?;
    let base = format!("/{chroot}");
    match root.create(&base, b"", &persistent()).await {
        Ok(_) | Err(zk::Error::NodeExists) => {}
        Err(err) => return Err(format!("create {base}: {err}")),
    }
    drop(root);
    let client = open(url).await?;
    for row in 1..=rows as i32 {
        for (path, data) in [(counter(row), &b"0"[..]), (log(row), &b""[..])] {
            match client.create(&path, data, &persistent()).await {
                Ok(_) => {}
                Err(zk::Error::NodeExists) => {
                    return Err(format!("{path} exists: the store is reset once per run"))
                }
                Err(err) => return Err(format!("create {path}: {err}")),
            }
        }
    }
    Ok(())
}

/// A counter node's value.
fn value_of(data: &[u8]) -> Result<i64, String> {
    let text = std::str::from_utf8(data).map_err(|e| e.to_string())?;
    text.trim()
        .parse()
        .map_err(|e| format!("counter {text:?}: {e}"))
}

/// The accepted writes (each store row's log in sequence order, the rows in order), and each
/// store row's final counter.
pub(super) async fn dump(url: &str) -> Result<(Vec<Row>, BTreeMap<i32, i64>), String> {
    let client = open(url).await?;
    let mut all = Vec::new();
    let mut counters = BTreeMap::new();
    for row in 1.. {
        let children = match client.list_children(&log(row)).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => break,
            Err(err) => return Err(format!("list {}: {err}", log(row))),
        };
        let mut children: Vec<String> = children;
        // `op-NNNNNNNNNN`: ten digits sort as numbers.
        children.sort();
        for child in children {
            let path = format!("{}/{child}", log(row));
            let (data, _) = (client.get_data(&path).await).map_err(|e| format!("{path}: {e}"))?;
            let text = String::from_utf8_lossy(&data);
            all.push(parse_entry(&text).ok_or_else(|| format!("{path}: a bad entry {text:?}"))?);
        }
        let (data, _) =
            (client.get_data(&counter(row)).await).map_err(|e| format!("{}: {e}", counter(row)))?;
        counters.insert(row, value_of(&data)?);
    }
    for (seq, row) in all.iter_mut().enumerate() {
        row.seq = seq as i64 + 1;
    }
    Ok((all, counters))
}

/// A worker's session on the store, and a fence per store row (none in the fencing-off
/// mutant, whose writes are plain `multi`s).
pub(crate) struct ZkStore {
    url: String,
    fencing: bool,
    client: Option<zk::Client>,
    fences: HashMap<i32, ZooKeeperFence>,
}

impl ZkStore {
    pub(super) fn new(url: &str, fencing: bool) -> ZkStore {
        ZkStore {
            url: url.to_owned(),
            fencing,
            client: None,
            fences: HashMap::new(),
        }
    }

    /// The worker's session, opened again if it is over (expired while the store was paused
    /// or down: its fences are rebuilt on the new one).
    pub(super) async fn ensure(&mut self) -> Result<&zk::Client, String> {
        let over = (self.client.as_ref()).is_some_and(|c| c.state().is_terminated());
        if over || self.client.is_none() {
            self.fences.clear();
            self.client = Some(open(&self.url).await?);
        }
        self.client.as_ref().ok_or_else(|| "no session".into())
    }

    /// Store row `row`'s counter.
    pub(super) async fn read(&mut self, row: i32) -> Result<i64, String> {
        let client = self.ensure().await?;
        let (data, _) = (client.get_data(&counter(row)).await).map_err(|e| e.to_string())?;
        value_of(&data)
    }

    /// Store row `row`'s counter and `scope`'s fence (0 before its first claim), for readers.
    pub(super) async fn peek(&mut self, row: i32, scope: &str) -> Result<(i64, i64), String> {
        let value = self.read(row).await?;
        let fence = self.fence(row).await?;
        let seen = (fence.seen(scope).await).map_err(|e| chain(&e))?;
        Ok((value, seen.unwrap_or(0)))
    }

    async fn fence(&mut self, row: i32) -> Result<ZooKeeperFence, String> {
        let client = self.ensure().await?.clone();
        if let Some(fence) = self.fences.get(&row) {
            return Ok(fence.clone());
        }
        let fence =
            ZooKeeperFence::with_fence_node(client, fence_node(row)).map_err(|e| chain(&e))?;
        self.fences.insert(row, fence.clone());
        Ok(fence)
    }

    /// One fenced write: the ticket's check, then the fence node's compare and raise and the
    /// step's operations (the counter set, the log entry created) in one `multi` (without the
    /// compare in the fencing-off mutant).
    pub(super) async fn fenced(&mut self, op: &Op, ticket: &FenceTicket, step: Step) -> Outcome {
        if let Err(err) = ticket.check_before_commit::<zk::Error>() {
            return recorded(Err(err));
        }
        let fence = match self.fence(op.row).await {
            Ok(fence) => fence,
            Err(err) => return Outcome::NotApplied(err),
        };
        let token = ticket.token().as_i64();
        let (kind, value) = match step {
            Step::Write(value) => ("write", value),
            Step::Fence => ("fence", 0),
        };
        let entry = entry(op, kind, token, value);
        let (counter_path, log_path) = (counter(op.row), format!("{}/op-", log(op.row)));
        let mut ops = |w: &mut zk::MultiWriter<'_>| {
            if let Step::Write(value) = step {
                w.add_set_data(&counter_path, value.to_string().as_bytes(), None)?;
            }
            w.add_create(&log_path, entry.as_bytes(), &sequential())
        };
        match self.fencing {
            true => {
                // The lock's node is on another ensemble: the fence node alone fences.
                let bare = match FenceTicket::new(ticket.scope(), ticket.token()) {
                    Ok(bare) => bare,
                    Err(err) => return Outcome::NotApplied(err.to_string()),
                };
                recorded((fence.write(&bare, &mut ops).await).map(|_| ()))
            }
            false => {
                let client = match self.ensure().await {
                    Ok(client) => client,
                    Err(err) => return Outcome::NotApplied(err),
                };
                let mut writer = client.new_multi_writer();
                if let Err(err) = ops(&mut writer) {
                    return Outcome::NotApplied(err.to_string());
                }
                let committed = writer.commit().await.map(|_| ());
                recorded(committed.map_err(|e| in_doubt(ticket, e)))
            }
        }
    }
}
