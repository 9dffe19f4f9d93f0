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
//! - [`config`]: the lease settings in ticks, the search's bounds, the mutant under test;
//! - [`state`]: servers, the leader's session tracker, the lock's nodes, two clients, each with
//!   the library's watchdog as a value;
//! - [`step`]: the actions and how the ensemble and time move; `ensemble` (faults,
//!   elections) and `client` (replies, grants, reconnects) beside it;
//! - [`checker`]: the `stateright` model, its initial states and properties;
//! - [`trace`]: counterexamples as readable traces;
//! - [`run`]: one search, with its counts and time.

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
