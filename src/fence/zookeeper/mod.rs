//! [`ZooKeeperFence`]: writes to ZooKeeper data, committed only while the hold stands.
//!
//! By file: `fence.rs` (the type, its building, `claim` and `write`, its `Fence` contract),
//! `commit.rs` (a commit's attempts against the fence node as remembered or read),
//! `transaction.rs` (the `multi`: the fence's checks, then the caller's operations, and what its
//! failure means), `fence_node.rs` (the fence node's data and reads, `seen`, `fences`,
//! `rebase`).

mod commit;
mod fence;
mod fence_node;
mod transaction;

pub use self::fence::ZooKeeperFence;
