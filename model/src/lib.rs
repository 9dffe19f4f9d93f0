//! An exhaustive model of what zkfence's lease rests on (ZooKeeper's session tracking, leader
//! changes, partitions, process pauses and drifting clocks), driving the library's own lease,
//! jeopardy and resume code ([`zkfence::model_api`]), checked with `stateright`.
//!
//! The argument the model checks, and what it leaves out, are written in the library's lease
//! module (`src/watchdog/lease/mod.rs`, "What the model checks"); the state counts, run times and
//! each mutant's counterexample are in this package's README.
//!
//! # Layout
//!
//! Split by what each module models. Every side of the world is a set of methods of one
//! [`State`](state::State), each module with its own `impl State`:
//!
//! - [`config`]: the lease settings in ticks, the search's bounds, the mutant under test;
//! - [`state`]: the state as data (servers, the leader's session tracker, the lock's nodes,
//!   two clients each with the library's watchdog as a value, what the properties watch) and
//!   the queries every side reads (the leader, whether a server works, a client's clock);
//! - `ensemble`: the servers' side: touches, relays, answers (commits and syncs), expiry,
//!   revalidation on a reconnect, what a partition does to the servers' roles, elections;
//! - `client`: the clients' side: connections (sends, messages in order, breaks, reconnects),
//!   each process's tick, the acquire, and the watchdog's decisions through
//!   [`zkfence::model_api`];
//! - [`step`]: the world's steps: the [`Action`](step::Action)s, which are enabled, and applying each (a
//!   tick, the servers' and the clients' actions, the faults) by calling the two sides;
//! - [`checker`]: the `stateright` model: its initial states and properties, its actions and
//!   next states taken from [`step`];
//! - [`trace`]: counterexamples as readable traces;
//! - [`run`] (here): one search, with its counts and time.
//!
//! [`queue`] is a second model, of the queue (three contenders, one server, the library's
//! queue predicates and handoff through `zkfence::model_api::queue`), with modules of its own;
//! it shares only [`Outcome`] and the search with the lease model.
//!
//! Calls go one way, down the order `checker` → `step` → `client` → `ensemble` → `state` →
//! `config`: a module calls those below it, never one above. The steps call both sides. A
//! client calls the servers' side where its request reaches its server (a send touches the
//! session, a probe is answered, a reconnect revalidates). The servers' side calls neither:
//! what the clients must hear of a change there (an expiry, a server's clients dropped) the
//! steps pass on. The checker calls the steps, and the clients' `send` for the initial
//! creates. `trace` and this file sit above them all (a search and its traces). As every
//! side is a method of [`State`](state::State), the compiler does not keep this order: `tests/calls.rs`
//! checks it on the source.

pub mod checker;
mod client;
pub mod config;
mod ensemble;
pub mod queue;
mod search;
pub mod state;
pub mod step;
pub mod trace;

use stateright::Model;

pub use crate::checker::LeaseModel;
pub use crate::config::Config;
use crate::search::search;
pub use crate::search::Outcome;

/// Runs the search of `config` breadth first (so each counterexample is a shortest one) on
/// `threads` threads: to the end, or until `stop` (a property's name) has a discovery.
pub fn run(config: Config, threads: usize, stop: Option<&'static str>) -> Outcome {
    search(&LeaseModel::new(config), threads, stop, trace::render)
}

/// The properties a run must keep (a discovery for any of these is a counterexample).
pub const SAFETY: [&str; 4] = [
    checker::ONE_HOLDER,
    checker::RESUME,
    checker::TOKENS,
    checker::WAITER,
];

/// The examples a run of the library's rule must find (else the model is vacuous there).
pub const EXAMPLES: [&str; 2] = [checker::RESUMES, checker::HANDOFF];

/// The model's properties, by name (for a check that every one is listed).
pub fn property_names(config: &Config) -> Vec<&'static str> {
    let model = LeaseModel::new(config.clone());
    model.properties().iter().map(|p| p.name).collect()
}
