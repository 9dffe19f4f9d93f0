//! An exhaustive model of what zkfence's lease rests on (ZooKeeper's session tracking, leader
//! changes, partitions, process pauses and drifting clocks), driving the library's own lease,
//! jeopardy and resume code ([`zkfence::model_api`]), checked with `stateright`.
//!
//! The argument the model checks, and what it leaves out, are written in the library's lease
//! module (`src/watchdog/lease.rs`, "What the model checks"); the state counts, run times and
//! each mutant's counterexample are in this package's README.
//!
//! # Layout
//!
//! Split by what each module models. Every side of the world is a set of methods of one
//! [`State`], each module with its own `impl State`:
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
//! - [`step`]: the world's steps: the [`Action`]s, which are enabled, and applying each (a
//!   tick, the servers' and the clients' actions, the faults) by calling the two sides;
//! - [`checker`]: the `stateright` model: its initial states and properties, its actions and
//!   next states taken from [`step`];
//! - [`trace`]: counterexamples as readable traces;
//! - [`run`] (here): one search, with its counts and time.
//!
//! Calls go one way, down the order `checker` → `step` → `client` → `ensemble` → `state` →
//! `config`: a module calls those below it, never one above. The steps call both sides. A
//! client calls the servers' side where its request reaches its server (a send touches the
//! session, a probe is answered, a reconnect revalidates). The servers' side calls neither:
//! what the clients must hear of a change there (an expiry, a server's clients dropped) the
//! steps pass on. The checker calls the steps, and the clients' `send` for the initial
//! creates. `trace` and this file sit above them all (a search and its traces). As every
//! side is a method of [`State`], the compiler does not keep this order: `tests/calls.rs`
//! checks it on the source.

pub mod checker;
mod client;
pub mod config;
mod ensemble;
pub mod state;
pub mod step;
pub mod trace;

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use crate::state::State;
use crate::step::Action;

pub use crate::checker::LeaseModel;
pub use crate::config::Config;

/// What one search found.
#[derive(Debug)]
pub struct Outcome {
    /// The distinct states visited.
    pub states: usize,
    /// The states generated, repeats included.
    pub generated: usize,
    /// The longest path explored.
    pub depth: usize,
    /// How long it took.
    pub took: Duration,
    /// Each property that failed (or, for an example, was found), with its path as a trace.
    pub discoveries: Vec<(&'static str, String)>,
}

impl Outcome {
    /// The trace that broke `property`, if one did.
    pub fn counterexample(&self, property: &str) -> Option<&str> {
        (self.discoveries.iter())
            .find(|(name, _)| *name == property)
            .map(|(_, trace)| trace.as_str())
    }
}

/// Runs the search of `config` breadth first (so each counterexample is a shortest one) on
/// `threads` threads: to the end, or until `stop` (a property's name) has a discovery.
pub fn run(config: Config, threads: usize, stop: Option<&'static str>) -> Outcome {
    let model = LeaseModel::new(config);
    let started = Instant::now();
    let mut builder = model.clone().checker().threads(threads);
    if let Some(stop) = stop {
        builder = builder.finish_when(HasDiscoveries::AnyOf([stop].into()));
    }
    let checker = builder.spawn_bfs().join();
    let took = started.elapsed();
    let mut discoveries: Vec<(&'static str, String)> = (checker.discoveries().into_iter())
        .map(|(name, path)| (name, trace::render(&model, shortest(&model, name, path))))
        .collect();
    discoveries.sort();
    Outcome {
        states: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth(),
        took,
        discoveries,
    }
}

/// `path` up to its first state that breaks `property` (or, for an example, shows it): the
/// checker's threads may record a longer path for a property after the first.
fn shortest(
    model: &LeaseModel,
    property: &'static str,
    path: Path<State, Action>,
) -> Vec<(State, Option<Action>)> {
    let property = model.property(property);
    let found = |state: &State| match property.expectation {
        Expectation::Sometimes => (property.condition)(model, state),
        _ => !(property.condition)(model, state),
    };
    let mut steps = path.into_vec();
    if let Some(end) = steps.iter().position(|(state, _)| found(state)) {
        steps.truncate(end + 1);
    }
    steps
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
