//! The queue model: the library's queue keeps every property with three contenders of each
//! mix of kinds, with and without lock-delay, and each queue mutant breaks one with a
//! shortest counterexample, printed as a trace (`cargo test -p zkfence-model --release --test
//! queue -- --nocapture` shows them).

use zkfence::model_api::queue::LockKind::{self, Mutex, Read, Write};
use zkfence::Mutant;
use zkfence_model::queue::checker::{
    EXAMPLES, LIVE, MARKER, ONE_HOLDER, ORDER, PROVEN, REREAD, SAFETY,
};
use zkfence_model::queue::{run, QueueConfig};
use zkfence_model::Outcome;

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The mixes of kinds checked, each with lock-delay off and on.
const MIXES: [[LockKind; 3]; 3] = [
    [Mutex, Mutex, Mutex],
    [Read, Read, Write],
    [Write, Write, Read],
];

fn search(what: &str, config: QueueConfig, stop: Option<&'static str>) -> Outcome {
    let session = if config.shared {
        ", A and B on one session"
    } else {
        ""
    };
    let bounds = format!(
        "{:?}, lock-delay {}{session}, {} fault(s)",
        config.kinds, config.lock_delay, config.faults
    );
    let outcome = run(config, threads(), stop);
    println!(
        "{what} ({bounds}): {} states ({} generated), depth {}, {:.1?}",
        outcome.states, outcome.generated, outcome.depth, outcome.took
    );
    outcome
}

#[test]
fn the_library_queue_keeps_every_property() {
    for kinds in MIXES {
        for lock_delay in [false, true] {
            let outcome = search(
                "the library's queue",
                QueueConfig::new(kinds, lock_delay, None),
                None,
            );
            if let Err(why) = outcome.verdict(&SAFETY, &EXAMPLES) {
                panic!("the library's queue ({kinds:?}, lock-delay {lock_delay}) {why}");
            }
            if kinds != [Read, Read, Write] {
                assert!(
                    outcome.counterexample(MARKER).is_some(),
                    "no marker handoff in {kinds:?}"
                );
            }
        }
    }
}

/// The mixes checked with A and B acquiring on one session (it holds and waits), whose nodes
/// a close it is not told of deletes in one transaction.
const SHARED_MIXES: [[LockKind; 3]; 2] = [[Mutex, Mutex, Mutex], [Write, Write, Read]];

#[test]
fn a_session_holding_and_waiting_keeps_every_property_when_both_nodes_go_at_once() {
    for kinds in SHARED_MIXES {
        for lock_delay in [false, true] {
            let config = QueueConfig::new(kinds, lock_delay, None).sharing();
            let outcome = search("the library's queue", config, None);
            if let Err(why) = outcome.verdict(&SAFETY, &EXAMPLES) {
                panic!("the library's queue ({kinds:?}, lock-delay {lock_delay}, shared) {why}");
            }
            if lock_delay {
                assert!(
                    outcome.counterexample(REREAD).is_some(),
                    "no waiter found its node gone after a lock-delay in {kinds:?}"
                );
            }
        }
    }
}

/// Checks that `mutant` breaks `property` in `config`, and prints the counterexample.
fn caught_in(config: QueueConfig, property: &'static str) {
    let mutant = config.mutant.expect("a mutant");
    let what = format!("{mutant:?}");
    search(&what, config, Some(property)).assert_caught(&what, property);
}

/// Checks that `mutant` breaks `property` with `kinds` and lock-delay as given, and prints
/// the counterexample.
fn caught(mutant: Mutant, kinds: [LockKind; 3], lock_delay: bool, property: &'static str) {
    caught_in(QueueConfig::new(kinds, lock_delay, Some(mutant)), property);
}

#[test]
fn every_queue_mutant_is_caught_by_a_counterexample() {
    caught(Mutant::UnmarkedAdmits, [Mutex; 3], false, ORDER);
    caught(Mutant::MarkedWithdrawal, [Mutex; 3], false, ORDER);
    caught(Mutant::DataChangeAdmits, [Mutex; 3], false, ONE_HOLDER);
    caught(Mutant::AnyReleaseAdmits, [Read, Read, Write], true, ORDER);
    caught(Mutant::GrantWithoutProof, [Mutex; 3], false, PROVEN);
    let unread = QueueConfig::new([Mutex; 3], true, Some(Mutant::UnreadAfterLockDelay));
    caught_in(unread.sharing(), LIVE);
}

/// The deep run: two faults in a schedule, every mix, with and without lock-delay. Run it
/// with `cargo test -p zkfence-model --release --test queue deep_run -- --ignored --nocapture`.
#[test]
#[ignore = "the deep run takes minutes; see its doc comment for the command"]
fn deep_run() {
    for kinds in MIXES {
        for lock_delay in [false, true] {
            let config = QueueConfig {
                faults: 2,
                ..QueueConfig::new(kinds, lock_delay, None)
            };
            let outcome = search("the library's queue, deep", config, None);
            if let Err(why) = outcome.verdict(&SAFETY, &[]) {
                panic!("the library's queue ({kinds:?}, lock-delay {lock_delay}) {why}");
            }
        }
    }
    for kinds in SHARED_MIXES {
        for lock_delay in [false, true] {
            let config = QueueConfig {
                faults: 2,
                ..QueueConfig::new(kinds, lock_delay, None).sharing()
            };
            let outcome = search("the library's queue, deep", config, None);
            if let Err(why) = outcome.verdict(&SAFETY, &[]) {
                panic!("the library's queue ({kinds:?}, lock-delay {lock_delay}, shared) {why}");
            }
        }
    }
}
