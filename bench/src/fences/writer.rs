//! One writer of `bench --fences`: its own connection to each store, its own lock (whose
//! ticket fences its writes) and its own scope, row, keys and nodes, so that `--fence-writers
//! N` writers write side by side without queueing on one another.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;
use zkfence::fence::{FenceTicket, ZooKeeperFence};
use zkfence::{FencedLock, LockOptions};
use zkfence_postgres::PostgresFence;
use zookeeper_client as zk;

use super::others::{Clients, Servers};
use super::variant::Variant;
use crate::workload::connect_raw;

/// Where each writer's ZooKeeper nodes live: its data node, fence node and lock.
const ROOT: &str = "/bench-fence";
/// What the ZooKeeper variants write.
const PAYLOAD: &[u8] = b"zkfence-bench --fences";

/// One writer's clients and lock.
pub(super) struct Writer {
    /// The PostgreSQL connection.
    pg: tokio_postgres::Client,
    /// The PostgreSQL fence (installed in the throwaway database).
    pg_fence: PostgresFence,
    /// The writer's one PostgreSQL statement: its own row (leaked, a few bytes per writer,
    /// so that the fenced transaction's closure can hold it).
    pg_update: &'static str,
    /// The floor's statement: a bare update of the writer's fence-like row.
    pg_floor: String,
    /// The writer's ZooKeeper session (it also holds the lock).
    zk: zk::Client,
    /// The node every ZooKeeper variant of this writer writes.
    data: String,
    /// The fence by the holder's node.
    node_check: ZooKeeperFence,
    /// The fence with a fence node.
    fence_node: ZooKeeperFence,
    /// MySQL, Redis and the object store.
    others: Clients,
    /// The writer's lock: its ticket fences the fenced variants.
    pub(super) lock: FencedLock,
}

/// One variant's samples from one writer: the nanoseconds of each operation and the window.
pub(super) struct Samples {
    pub(super) nanos: Vec<u64>,
    pub(super) seconds: f64,
}

impl Writer {
    /// Writer `index` (from 0): a session to `hosts`, its nodes and lock under `root`, its
    /// PostgreSQL connection (`conninfo`) and the other stores' clients.
    pub(super) async fn new(
        index: usize,
        hosts: &str,
        conninfo: &str,
        servers: &Servers,
    ) -> Result<Writer, String> {
        let zk = connect_raw(hosts).await?;
        let data = format!("{}/data-{index}", ROOT);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        (zk.mkdir(&data, &persistent).await).map_err(|e| format!("create {data}: {e}"))?;
        let path = format!("{}/lock-{index}", ROOT);
        let lock = FencedLock::new(zk.clone(), &path, LockOptions::default())
            .map_err(|e| format!("lock {path}: {e}"))?;
        let fence_path = format!("{}/fence-{index}", ROOT);
        let (pg, connection) = tokio_postgres::connect(conninfo, NoTls)
            .await
            .map_err(|e| format!("cannot reach the throwaway PostgreSQL: {e}"))?;
        tokio::spawn(connection);
        let id = index + 1;
        Ok(Writer {
            pg,
            pg_fence: PostgresFence::new(),
            pg_update: String::leak(format!("UPDATE bench_counter SET v = v + 1 WHERE id = {id}")),
            pg_floor: format!(
                "UPDATE bench_floor SET token = 1, claims = claims + 1, updated = now() WHERE id = {id} AND token <= 1"
            ),
            node_check: ZooKeeperFence::new(zk.clone()),
            fence_node: ZooKeeperFence::with_fence_node(zk.clone(), &fence_path)
                .map_err(|e| e.to_string())?,
            zk,
            data,
            others: servers.clients(index, &path).await?,
            lock,
        })
    }

    /// Claims the writer's fence node with `ticket` (once per round, before it is measured).
    pub(super) async fn claim_fence_node(&self, ticket: &FenceTicket) -> Result<(), String> {
        (self.fence_node.claim(ticket).await)
            .map(drop)
            .map_err(|e| format!("claim the fence node of {}: {e}", self.lock.path()))
    }

    /// One operation of `variant`, fenced (where it is) by `ticket`.
    async fn once(&mut self, variant: Variant, ticket: &FenceTicket) -> Result<(), String> {
        let pg = |e: tokio_postgres::Error| format!("postgres: {e}");
        let zk = |e: zk::Error| format!("zookeeper set_data: {e}");
        let data = self.data.as_str();
        let write = |ops: &mut zk::MultiWriter<'_>| ops.add_set_data(data, PAYLOAD, None);
        match variant {
            Variant::PgUnfenced => {
                let tx = self.pg.transaction().await.map_err(pg)?;
                tx.execute(self.pg_update, &[]).await.map_err(pg)?;
                tx.commit().await.map_err(pg)?;
            }
            Variant::PgFloor => {
                // The floor's update pipelined with the work, as the fence pipelines its claim.
                let tx = self.pg.transaction().await.map_err(pg)?;
                let (floor, work) = tokio::join!(
                    tx.execute(&self.pg_floor, &[]),
                    tx.execute(self.pg_update, &[])
                );
                floor.and(work).map_err(pg)?;
                tx.commit().await.map_err(pg)?;
            }
            Variant::PgFenced => {
                let update = self.pg_update;
                self.pg_fence
                    .transaction(&mut self.pg, ticket, |tx| {
                        Box::pin(async move { tx.execute(update, &[]).await })
                    })
                    .await
                    .map_err(|e| format!("postgres fenced transaction: {e}"))?;
            }
            Variant::ZkSetData => {
                self.zk.set_data(data, PAYLOAD, None).await.map_err(zk)?;
            }
            Variant::ZkNodeCheck => {
                (self.node_check.write(ticket, write).await)
                    .map_err(|e| format!("zookeeper fenced write (node check): {e}"))?;
            }
            Variant::ZkFenceNode => {
                (self.fence_node.write(ticket, write).await)
                    .map_err(|e| format!("zookeeper fenced write (fence node): {e}"))?;
            }
            other => self.others.once(other, ticket).await?,
        }
        Ok(())
    }

    /// `variant`'s operations, one after the other, for `seconds`.
    pub(super) async fn measure(
        &mut self,
        variant: Variant,
        ticket: &FenceTicket,
        seconds: f64,
    ) -> Result<Samples, String> {
        let mut nanos = Vec::new();
        let start = Instant::now();
        let until = start + Duration::from_secs_f64(seconds);
        loop {
            let begun = Instant::now();
            if begun >= until {
                break;
            }
            self.once(variant, ticket).await?;
            nanos.push(u64::try_from(begun.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        let seconds = start.elapsed().as_secs_f64();
        Ok(Samples { nanos, seconds })
    }
}

/// The writers' operations of `variant` side by side, each for `seconds` with its own ticket;
/// the writers come back with their samples, in their order.
pub(super) async fn measure_all(
    writers: Vec<(Writer, FenceTicket)>,
    variant: Variant,
    seconds: f64,
) -> Result<(Vec<(Writer, FenceTicket)>, Vec<Samples>), String> {
    let tasks: Vec<_> = (writers.into_iter())
        .map(|(mut writer, ticket)| {
            tokio::spawn(async move {
                let samples = writer.measure(variant, &ticket, seconds).await;
                (writer, ticket, samples)
            })
        })
        .collect();
    let mut back = Vec::new();
    let mut samples = Vec::new();
    let mut failed = None;
    for task in tasks {
        let (writer, ticket, measured) = task.await.map_err(|e| e.to_string())?;
        back.push((writer, ticket));
        match measured {
            Ok(s) => samples.push(s),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok((back, samples)),
    }
}
