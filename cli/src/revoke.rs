//! `zkfence revoke`: ask a lock's holder to let go (Apache Curator's revocation, which
//! `run --on-revoke`, zkfence's library and Curator's revocable locks heed), or take the lock
//! from it (`--force`: delete its node).

use std::time::Duration;

use zkfence::{Error, FencedLock, LockOptions};

use crate::connect::Connection;
use crate::exit::fail;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
A request writes Curator's marker (__REVOKE__) into the holder's node: a zkfence holder hears it
(Held::revocation_requested; `zkfence run` stops its command, --on-revoke), as does a Curator
lock made revocable. --force deletes the node instead: the holder is cancelled as for any
deletion of its node, and the next waiter takes the lock; work the holder still has in flight is
stopped only by its fencing token at your storage.

Examples:
  zkfence revoke --connect 127.0.0.1:2181 --lock /locks/nightly
  zkfence revoke --connect 127.0.0.1:2181 --lock /locks/nightly --force
  zkfence revoke --connect 127.0.0.1:2181 --lock /locks/nightly --node _c_...-lock-0000000042")]
pub(crate) struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The lock path.
    #[arg(long, env = "ZKFENCE_LOCK")]
    lock: String,
    /// The node to revoke (its name, as `zkfence holders` shows it); default: every node that
    /// holds the lock (one, or the readers that share it; for a semaphore, name the lease).
    #[arg(long)]
    node: Option<String>,
    /// Take the lock: delete the node instead of asking.
    #[arg(long)]
    force: bool,
}

pub(crate) async fn revoke(args: Args) -> u8 {
    if let Err(err) = FencedLock::check_path(&args.lock) {
        return fail("bad --lock", &err);
    }
    let client = match args.connection.open(Duration::from_secs(10), None).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let lock = match FencedLock::new(client, args.lock.clone(), LockOptions::default()) {
        Ok(lock) => lock,
        Err(err) => return fail("cannot use the lock", &err),
    };
    let nodes = match &args.node {
        Some(node) => vec![node.clone()],
        None => match lock.holders().await {
            Ok(holders) => holders.into_iter().map(|h| h.node).collect(),
            Err(Error::NoParent { .. }) => Vec::new(),
            Err(err) => return fail(&format!("cannot list {}", args.lock), &err),
        },
    };
    if nodes.is_empty() {
        eprintln!("zkfence: nobody holds {}", args.lock);
    }
    for node in nodes {
        let path = format!("{}/{node}", args.lock);
        let done = if args.force {
            lock.force_revocation(&path).await
        } else {
            lock.request_revocation(&path).await
        };
        match (done, args.force) {
            (Ok(true), true) => println!("deleted {node}: the lock is taken from its holder"),
            (Ok(false), true) => println!("{node} is gone already"),
            (Ok(true), false) => println!("asked {node} to let go"),
            (Ok(false), false) => println!("{node} does not hold the lock (left alone)"),
            (Err(err), _) => return fail(&format!("cannot revoke {path}"), &err),
        }
    }
    0
}
