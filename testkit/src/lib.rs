//! zkfence's test kit: throwaway ZooKeeper servers and 3-server ensembles from Debian's
//! `zookeeper` package, the faults a lock must survive, and session expiry from outside. The
//! library's tests, the `zkfence` CLI's demo and bench, and the chaos suite use it.
//!
//! - [`LocalZooKeeper`]: one standalone server (`ZooKeeperServerMain`) on a free loopback port
//!   with a temp data dir and a 200 ms tick, so sessions from 400 ms to 30 s can be negotiated;
//!   [`pause`](LocalZooKeeper::pause) (SIGSTOP), [`resume`](LocalZooKeeper::resume),
//!   [`kill`](LocalZooKeeper::kill) (SIGKILL), [`restart`](LocalZooKeeper::restart).
//! - [`LocalEnsemble`]: three `QuorumPeerMain` servers, on loopback or each in a network
//!   namespace of its own ([`EnsembleOptions`]), where [`LocalEnsemble::cut`] drops, resets or
//!   loses the packets one server sends another.
//! - [`CountingProxy`]: counts requests by opcode and watch notifications; blackholes, cuts
//!   off (a blackhole that also hides the server's close), delays, holds the replies to
//!   writes, drops replies, refuses and resets connections. [`RawProxy`]: the same lost reply
//!   for any protocol (PostgreSQL's, Redis's).
//! - [`conformance`]: the cases every storage fence must pass, each catching a fence mutant.
//! - [`expire_session`]: ends another client's session from outside, the way an operator would.
//! - [`curator`]: Apache Curator's jars from Debian, and `javac` for workers compiled at run
//!   time (the interop tests, `zkfence bench --impl curator`).
//! - [`LocalRedis`]: a throwaway `redis-server` (Debian's package), the lock peer the bench
//!   measures against.
//! - [`LocalPostgres`], [`LocalMariaDb`]: throwaway database servers (Debian's packages) for
//!   the storage fences' tests, the examples and the chaos suite.
//! - [`stats`]: the one percentile definition (nearest rank) the bench and the chaos suite share.
//!
//! The JVM runs under a small `bash` wrapper that kills it and removes the data dir when this
//! process goes away, however it goes (the wrapper waits on a pipe from us), so a crashed test
//! or demo leaves no server behind.
//!
//! # Not published
//!
//! This crate stays in the workspace (`publish = false`): [`expire_session`] closes any
//! session whose id it is given, by deriving the password the server gave it (a session
//! hijack, fine in a test, wrong in a crate meant for services); the servers come from the
//! paths of Debian's package; the namespaced ensemble needs root. A service testing its own use
//! of zkfence is better served by a ZooKeeper of its own choosing.
//!
//! # Examples
//!
//! ```no_run
//! let zk = zkfence_testkit::LocalZooKeeper::start()?;
//! println!("connect to {}", zk.addr());
//! # Ok::<(), zkfence_testkit::StartError>(())
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

pub mod conformance;
pub mod curator;
mod ensemble;
pub mod harness;
mod mariadb;
mod options;
mod postgres;
mod proxy;
mod raw_proxy;
mod redis;
mod run_as;
mod server;
mod session;
pub mod stats;
mod tied;

pub use crate::ensemble::{LinkFault, LocalEnsemble};
pub use crate::mariadb::LocalMariaDb;
pub use crate::options::EnsembleOptions;
pub use crate::postgres::{LocalPostgres, POSTGRES_USER};
pub use crate::proxy::CountingProxy;
pub use crate::raw_proxy::RawProxy;
pub use crate::redis::LocalRedis;
pub use crate::server::{four_letter, LocalZooKeeper, StartError, INSTALL_HINT};
pub use crate::session::expire_session;
