//! The ways of writing `bench --fences` measures, each store's unfenced, fenced and floor
//! variants.

/// One way of writing, timed on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Variant {
    /// BEGIN; UPDATE; COMMIT.
    PgUnfenced,
    /// The same in `PostgresFence::transaction`: BEGIN; claim; UPDATE; check; COMMIT.
    PgFenced,
    /// The same with a bare update of a fence-like row pipelined with the work: the floor.
    PgFloor,
    /// A plain `set_data`.
    ZkSetData,
    /// `ZooKeeperFence::new`: one multi, check(holder's node) + set_data.
    ZkNodeCheck,
    /// `ZooKeeperFence::with_fence_node`: one multi (the fence remembers the node's version
    /// from its last commit; a read first only when another writer moved it),
    /// check(holder's node) + the fence node's version check + set_data.
    ZkFenceNode,
    /// MySQL: START TRANSACTION; UPDATE; COMMIT.
    MyUnfenced,
    /// The same in `MySqlFence::transaction`.
    MyFenced,
    /// The same with a bare row update batched with its start: the floor.
    MyFloor,
    /// Redis: a plain SET.
    RedisSet,
    /// The same SET in `RedisFence::write`'s script.
    RedisFenced,
    /// The same through the fence's function library (`FCALL`).
    RedisFcall,
    /// The same SET in the least script: a compare and the write.
    RedisFloor,
    /// An object store: a plain put.
    S3Put,
    /// `ObjectFence::put` of the same bytes.
    S3Fenced,
}

impl Variant {
    /// The variant as the JSON lines name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Variant::PgUnfenced => "postgres_unfenced",
            Variant::PgFenced => "postgres_fenced",
            Variant::PgFloor => "postgres_floor",
            Variant::ZkSetData => "zookeeper_set_data",
            Variant::ZkNodeCheck => "zookeeper_fenced_node_check",
            Variant::ZkFenceNode => "zookeeper_fenced_fence_node",
            Variant::MyUnfenced => "mysql_unfenced",
            Variant::MyFenced => "mysql_fenced",
            Variant::MyFloor => "mysql_floor",
            Variant::RedisSet => "redis_set",
            Variant::RedisFenced => "redis_fenced",
            Variant::RedisFcall => "redis_fenced_fcall",
            Variant::RedisFloor => "redis_floor",
            Variant::S3Put => "object_store_put",
            Variant::S3Fenced => "object_store_fenced",
        }
    }

    /// The variant in the summary, beside its throughput.
    pub(super) fn label(self) -> &'static str {
        match self {
            Variant::PgUnfenced | Variant::MyUnfenced => "unfenced",
            Variant::ZkSetData => "set_data",
            Variant::RedisSet => "SET",
            Variant::S3Put => "put",
            Variant::PgFloor | Variant::MyFloor | Variant::RedisFloor => "floor",
            Variant::RedisFcall => "FCALL",
            _ => "fenced",
        }
    }

    /// What one operation is called, in throughputs (`tx/s`, `writes/s`).
    pub(super) fn unit(self) -> &'static str {
        match self {
            Variant::PgUnfenced
            | Variant::PgFenced
            | Variant::PgFloor
            | Variant::MyUnfenced
            | Variant::MyFenced
            | Variant::MyFloor => "tx",
            _ => "writes",
        }
    }
}
