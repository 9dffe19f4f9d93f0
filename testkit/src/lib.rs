//! Chaos tests of your own service against real ZooKeeper, the way zkfence tests itself:
//! throwaway servers and ensembles, a session expired on the server, a process frozen at the
//! worst moment, a partitioned client, and a check of the fenced writes that got through.
//!
//! - [`LocalZooKeeper`]: one server on a free loopback port with a temp data dir and a 200 ms
//!   tick (sessions from 400 ms to 30 s); [`pause`](LocalZooKeeper::pause) (SIGSTOP),
//!   [`resume`](LocalZooKeeper::resume), [`kill`](LocalZooKeeper::kill) (`kill -9`),
//!   [`restart`](LocalZooKeeper::restart). [`LocalEnsemble`]: three servers, on loopback or each
//!   in a network namespace of its own (Linux, as root: [`EnsembleOptions`]), where
//!   [`LocalEnsemble::cut`] drops, resets or loses the packets one server sends another. Java and
//!   ZooKeeper's jars are found where `ZOOKEEPER_HOME`, Debian or Homebrew put them
//!   ([`Distribution`]); the error says what to install otherwise.
//! - [`expire_session`]: the server ends your client's session (its own credentials, as
//!   Curator's `KillSession`), deleting its locks at once.
//! - [`Service`]: your service as a child process (one of your test binary's own tests), to
//!   freeze ([`pause`], [`resume`]), kill, or stop at the worst moment: [`pause_point`], right
//!   after its lease check and before its write.
//! - [`CountingProxy`]: a ZooKeeper client's link to partition (blackhole, cut off, delay, drop
//!   replies, reset), counting requests by opcode; [`RawProxy`]: a lost reply for any protocol
//!   (your database's).
//! - [`History`]: a log of fenced writes checked for the fence's promise (no write accepted
//!   below a token accepted before it); [`conformance`]: the cases a storage fence must pass,
//!   for a fence of your own.
//!
//! Every server and child dies with the test process, however it dies: the JVM runs under a
//! `bash` wrapper that kills it when a pipe from us closes, and children get the kernel's
//! parent-death signal (Linux).
//!
//! For servers of your own: [`spawn_tied`] (a child that dies with the test), [`free_port`],
//! [`temp_dir`]; for a command-line tool that starts its own ZooKeeper,
//! [`start_local_zookeeper`].
//!
//! # Examples
//!
//! Your service holds a lock and writes behind a fence; frozen right after its lease check
//! past its session timeout, it must find its write refused once a successor wrote:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use zkfence_testkit::{LocalZooKeeper, Service, ServiceOptions};
//!
//! let zk = LocalZooKeeper::start()?;
//! let options = ServiceOptions::new("service").env("ZK", zk.addr()).pause_at("after-check");
//! let mut service = Service::spawn(options)?;
//! service.wait_paused(Duration::from_secs(30)).await?; // its session expires meanwhile
//! // ... a successor acquires and writes ...
//! service.resume()?;
//! service.wait_line(|l| l == "refused", Duration::from_secs(30)).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

/// The conformance kit for storage fences, [`zkfence::conformance`], here for the tests
/// that use it ([`conformance_tests!`] writes one test per case).
pub use zkfence::conformance;
mod distribution;
mod ensemble;
mod error;
mod expire;
mod history;
mod local;
mod options;
mod process;
mod proxy;
mod raw_proxy;
mod server;
mod tied;

pub use crate::distribution::{Distribution, INSTALL_HINT, JAVA_HINT};
pub use crate::ensemble::{LinkFault, LocalEnsemble};
pub use crate::error::StartError;
pub use crate::expire::{expire_session, ExpireError};
pub use crate::history::{History, StaleWrite};
pub use crate::local::start_local_zookeeper;
pub use crate::options::EnsembleOptions;
pub use crate::process::{
    is_alive, is_paused, is_service, pause, pause_point, resume, Service, ServiceError,
    ServiceOptions,
};
pub use crate::proxy::CountingProxy;
pub use crate::raw_proxy::RawProxy;
pub use crate::server::{four_letter, free_port, temp_dir, LocalZooKeeper};
pub use crate::tied::{die_with_spawner, spawn_tied, Keeper};

/// One `#[tokio::test]` per case, each on a fresh store from `$new(test_name)` (an async
/// constructor): `conformance_tests!(MyStore::new);` for every case that needs nothing but the
/// store (named `conformance_<case>`), or `conformance_tests!(MyStore::new; my_order: order);`
/// for the named ones. The kit's own stores use it; so can yours.
#[macro_export]
macro_rules! conformance_tests {
    ($new:expr) => {
        $crate::conformance_tests!($new;
            conformance_order: order,
            conformance_edge_tokens: edge_tokens,
            conformance_concurrent_first_claims: concurrent_first_claims,
            conformance_stale_writer_paused_before_commit: stale_writer_paused_before_commit,
            conformance_counter_equals_accepted_increments: counter_equals_accepted_increments,
            conformance_lost_reply_is_in_doubt: lost_reply_is_in_doubt,
            conformance_lost_claim_reply_is_in_doubt: lost_claim_reply_is_in_doubt,
            conformance_serialization_failure_retried: serialization_failure_retried,
            conformance_tokens_in_any_text_form: tokens_in_any_text_form,
            conformance_carrying_on_after_a_refusal_commits_nothing: carrying_on_after_a_refusal_commits_nothing,
            conformance_carrying_on_after_a_rollback_under_work_commits_nothing: carrying_on_after_a_rollback_under_work_commits_nothing,
            conformance_installed_fence_is_current: installed_fence_is_current,
            conformance_deployment_keeps_fences: deployment_keeps_fences,
            conformance_frozen_holder_does_not_block: frozen_holder_does_not_block,
        );
    };
    ($new:expr; $($name:ident: $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let store = $new(stringify!($name)).await;
            $crate::conformance::$case(&store).await.unwrap();
        }
    )*};
}
