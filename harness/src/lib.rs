//! zkfence's own test harness: what its tests, bench and chaos suite share, and users do not
//! need (they get [`zkfence_testkit`], whose API this builds on).
//!
//! - [`shared`]: one ZooKeeper server per test binary, a fresh chroot per test ([`chroot`]),
//!   connections ([`connect`]), conditions waited on with deadlines ([`wait_until`]), and the
//!   same for PostgreSQL and MariaDB ([`shared_postgres`], [`shared_mariadb`]).
//! - Throwaway stores from Debian's packages and PyPI: [`LocalPostgres`], [`LocalMariaDb`],
//!   [`LocalRedis`], [`LocalRedisCluster`] (three primaries, a replica each), [`LocalS3`]
//!   (`moto`), each with TLS from a [`TestCa`] where the store serves it (client certificates
//!   required too, `start_mtls`), the SQL servers and Redis with [`StoreFaults`] (paused,
//!   crashed and restarted on their data);
//!   [`LocalPgBouncer`], Debian's PgBouncer in front of a PostgreSQL server in a [`PoolMode`];
//!   [`python_clients`], the Python clients of the cross-language tests.
//! - The conformance kit's stores in the fence packages' tests, written once: a proxy that
//!   loses replies in front of a store ([`through_reply_proxy`]), the kit's store built through
//!   it ([`proxied_kit_store!`]) or on a deployment ([`deployed_kit_store!`]), and the fence
//!   mutants' table ([`mutants_caught!`]).
//! - [`curator`]: Apache Curator's jars and `javac`, for the interop tests and the bench's
//!   Curator peers; [`stats`]: one definition of a percentile.
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() {
//! use zkfence_harness::{chroot, connect, shared};
//! let hosts = chroot(shared(), "my-test").await; // "127.0.0.1:port/zkfence-tests/my-test-…"
//! let client = connect(&hosts, std::time::Duration::from_secs(10)).await;
//! # let _ = client; }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod curator;
mod database;
mod delay;
mod faults;
mod kit;
mod mariadb;
mod pgbouncer;
mod postgres;
mod python;
mod redis;
mod redis_cluster;
mod run_as;
mod s3;
mod shared;
pub mod stats;
mod tls;

pub use crate::delay::DelayProxy;
pub use crate::faults::StoreFaults;
pub use crate::kit::{port_of, reply_switch, through_reply_proxy, with_port};
pub use crate::mariadb::LocalMariaDb;
pub use crate::pgbouncer::{LocalPgBouncer, PoolMode};
pub use crate::postgres::{LocalPostgres, POSTGRES_USER};
pub use crate::python::{python_clients, CLIENTS};
pub use crate::redis::LocalRedis;
pub use crate::redis_cluster::LocalRedisCluster;
pub use crate::s3::{s3_client, s3_client_timed, s3_object_versions, LocalS3, Preconditions};
pub use crate::shared::{
    children, chroot, connect, expire_session, free_port, output, shared, shared_mariadb,
    shared_postgres, text, wait_until, watchers_of, watches, ZooKeeper,
};
pub use crate::tls::TestCa;
