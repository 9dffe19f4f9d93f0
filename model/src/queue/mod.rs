//! The queue model: three contenders on one lock path of one ZooKeeper server, driving the
//! library's own queue code (`zkfence::model_api::queue`: where a node stands in a listing and
//! what it watches, what each event on a watched node means, whether a release or a
//! withdrawal is marked) and its lease's grant rule (`zkfence::model_api::Watchdog::grant`),
//! checked breadth first with `stateright`.
//!
//! The lease model (the rest of this package) checks what a grant's lease rests on with the
//! queue reduced to two nodes; this one checks the queue with the lease reduced to two
//! clock readings (soon after the create, or after a wait longer than the lease). The server
//! is linearizable (the queue's argument needs no more than ZooKeeper's sequential
//! consistency per session, its atomic `multi` and its watches firing in the order of the
//! transactions, in order with replies).
//!
//! - [`state`]: the state as data;
//! - [`world`]: the steps (the server's side, the contenders' side, the faults);
//! - [`checker`]: the `stateright` model and its properties;
//! - [`trace`]: counterexamples as readable traces.

pub mod checker;
pub mod state;
pub mod trace;
pub mod world;

pub use checker::QueueModel;
pub use world::QueueConfig;

use crate::search::{search, Outcome};

/// Runs the search of `config` breadth first on `threads` threads: to the end, or until
/// `stop` (a property's name) has a discovery.
pub fn run(config: QueueConfig, threads: usize, stop: Option<&'static str>) -> Outcome {
    let model = QueueModel::new(config);
    search(&model, threads, stop, trace::render)
}
