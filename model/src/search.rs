//! One breadth-first search of a model (the lease model's or the queue model's), with its
//! counts, its time and each discovery's path rendered as a trace.

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

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

    /// For a mutant's test: prints how the flawed rule `what` broke `property` (`<what> breaks
    /// <property>:` and its trace).
    ///
    /// # Panics
    ///
    /// When the search found no counterexample to `property`: the mutant was not caught.
    pub fn assert_caught(&self, what: &str, property: &str) {
        match self.counterexample(property) {
            Some(trace) => println!("{what} breaks {property}:\n{trace}"),
            None => panic!("{what} keeps {property}: not caught"),
        }
    }

    /// Whether the rule searched passed: no property of `safety` has a counterexample (else
    /// `breaks <property>:` and its trace), and every one of `examples` was found (else
    /// `shows no <example>`: the model is vacuous there).
    pub fn verdict(&self, safety: &[&str], examples: &[&str]) -> Result<(), String> {
        if let Some((property, trace)) =
            (safety.iter()).find_map(|&p| self.counterexample(p).map(|trace| (p, trace)))
        {
            return Err(format!("breaks {property}:\n{trace}"));
        }
        match examples.iter().find(|&&e| self.counterexample(e).is_none()) {
            Some(example) => Err(format!("shows no {example}: the model is vacuous there")),
            None => Ok(()),
        }
    }
}

/// A path of `M`'s states, each with the action taken from it (none after the last).
type Steps<M> = Vec<(<M as Model>::State, Option<<M as Model>::Action>)>;

/// Searches `model` breadth first on `threads` threads, to the end or until `stop` has a
/// discovery, and renders each discovery's path with `render`.
pub(crate) fn search<M>(
    model: &M,
    threads: usize,
    stop: Option<&'static str>,
    render: fn(&M, Steps<M>) -> String,
) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Send + Sync + PartialEq,
    M::Action: Clone + std::fmt::Debug + Send + Sync + PartialEq,
{
    let started = Instant::now();
    let mut builder = model.clone().checker().threads(threads);
    if let Some(stop) = stop {
        builder = builder.finish_when(HasDiscoveries::AnyOf([stop].into()));
    }
    let checker = builder.spawn_bfs().join();
    let took = started.elapsed();
    let mut discoveries: Vec<(&'static str, String)> = (checker.discoveries().into_iter())
        .map(|(name, path)| (name, render(model, shortest(model, name, path))))
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
/// checker's threads may record a longer path for a property after the first. A liveness
/// property's path is kept whole (it breaks at its end).
fn shortest<M: Model>(
    model: &M,
    property: &'static str,
    path: Path<M::State, M::Action>,
) -> Steps<M> {
    let property = model.property(property);
    let found = |state: &M::State| match property.expectation {
        Expectation::Sometimes => (property.condition)(model, state),
        Expectation::Always => !(property.condition)(model, state),
        Expectation::Eventually => false,
    };
    let mut steps = path.into_vec();
    if let Some(end) = steps.iter().position(|(state, _)| found(state)) {
        steps.truncate(end + 1);
    }
    steps
}
