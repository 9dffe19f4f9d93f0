//! The lease model at the CI bounds ([`Config::ci`]): the library's rule keeps every property
//! in every schedule, and each lease mutant breaks the central one with a counterexample,
//! printed as a trace (`cargo test -p zkfence-model --release -- --nocapture` shows them).
//!
//! The deep run is [`deep_run`], ignored by default.

use zkfence::Mutant;
use zkfence_model::checker::{FIRST_GRANT, ONE_HOLDER, RESUME};
use zkfence_model::{run, Config, Outcome, EXAMPLES, SAFETY};

/// Each lease mutant, as `mutants.rs` lists them.
const MUTANTS: [Mutant; 8] = [
    Mutant::SyncLease,
    Mutant::ResumeWithoutProof,
    Mutant::IgnoreDrift,
    Mutant::NoPairGap,
    Mutant::ReceiveAnchor,
    Mutant::ColdWithoutKeepalive,
    Mutant::LeanThroughPause,
    Mutant::AnchorOnReconnect,
];

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `config` and prints what the search took.
fn search(what: &str, config: Config, stop: Option<&'static str>) -> Outcome {
    let bounds = format!("horizon {}, {} fault(s)", config.horizon, config.faults);
    let outcome = run(config, threads(), stop);
    println!(
        "{what} ({bounds}): {} states ({} generated), depth {}, {:.1?}",
        outcome.states, outcome.generated, outcome.depth, outcome.took
    );
    outcome
}

/// Checks the library's rule under `config`: no safety property has a counterexample, and
/// every example is found (the model reaches a handoff and a resume).
fn the_library_rule_passes(config: Config) {
    let outcome = search("the library's rule", config, None);
    if let Err(why) = outcome.verdict(&SAFETY, &EXAMPLES) {
        panic!("the library's rule {why}");
    }
}

/// Checks that `mutant` breaks `property` under `config`, and prints the counterexample.
fn caught(config: Config, mutant: Mutant, property: &'static str) {
    let what = format!("{mutant:?}");
    search(&what, config, Some(property)).assert_caught(&what, property);
}

#[test]
fn the_library_rule_keeps_every_property_at_the_ci_bounds() {
    the_library_rule_passes(Config::ci(None));
}

#[test]
fn every_lease_mutant_is_caught_by_a_counterexample() {
    // `LeanThroughPause` and `AnchorOnReconnect` have tests of their own, below.
    let own_test = [Mutant::LeanThroughPause, Mutant::AnchorOnReconnect];
    for mutant in MUTANTS.into_iter().filter(|m| !own_test.contains(m)) {
        caught(Config::ci(Some(mutant)), mutant, ONE_HOLDER);
    }
    // Resuming on a sync's answer breaks the resume rule itself, before any overlap.
    let mutant = Mutant::ResumeWithoutProof;
    caught(Config::ci(Some(mutant)), mutant, RESUME);
}

/// `MUTANTS` is every lease mutant: each row of `src/mutants.rs`'s table that names the lease
/// module or the lease model is in it, so a new lease mutant cannot go unchecked.
#[test]
fn every_lease_mutant_of_the_library_is_run() {
    let table = include_str!("../../src/mutants.rs");
    let rows = table
        .lines()
        .filter(|row| row.starts_with("//! | [`Mutant::"));
    let mut lease = 0;
    let names_the_lease = |row: &&str| row.contains("lease module") || row.contains("lease model");
    for row in rows.filter(names_the_lease) {
        let name = row["//! | [`Mutant::".len()..]
            .split('`')
            .next()
            .unwrap_or_default();
        let listed = MUTANTS.iter().any(|mutant| format!("{mutant:?}") == name);
        assert!(listed, "{name} is a lease mutant the model does not run");
        lease += 1;
    }
    assert_eq!(
        lease,
        MUTANTS.len(),
        "the table of src/mutants.rs lists other lease mutants"
    );
}

/// The model's finding, now fixed: a cold proof leans on the client's keepalive having run in
/// the lean before its write, which a process paused there did not. The library leans only
/// across a stretch its watchdog's ticker shows the process ran through; the
/// `LeanThroughPause` mutant leans regardless, as the rule did before, and a pause right after
/// a first acquire breaks it (its CI search pauses clients anywhere).
#[test]
fn a_pause_just_before_a_cold_proof_breaks_its_lean() {
    let mutant = Mutant::LeanThroughPause;
    caught(Config::ci(Some(mutant)), mutant, ONE_HOLDER);
}

/// The connect world ([`Config::connect`]): A's session is one its connect created at tick 0,
/// in a process that just started, so its first lease anchors at the connect
/// (`LeaseCell::began`) and its first acquire is granted at once; and A's reconnects may come
/// late and reach a leader cut off from its quorum, which revalidates the session on its own.
/// The library's rule keeps every property there.
#[test]
fn the_library_rule_keeps_every_property_in_the_connect_world() {
    let outcome = search(
        "the library's rule, connect world",
        Config::connect(None),
        None,
    );
    // A first acquire granted at once: the connect's anchor is exercised.
    if let Err(why) = outcome.verdict(&SAFETY, &[FIRST_GRANT]) {
        panic!("the library's rule in the connect world {why}");
    }
}

/// Only a new session's connect anchors a lease: a resumed session is revalidated by whichever
/// server it reaches, a leader cut off from its quorum included. `AnchorOnReconnect` anchors at
/// every reconnect, and a holder that reconnects late to such a leader outlives its session.
#[test]
fn a_resumed_sessions_reconnect_anchors_nothing() {
    let mutant = Mutant::AnchorOnReconnect;
    caught(Config::connect(Some(mutant)), mutant, ONE_HOLDER);
}

/// The deep run ([`Config::deep`]): one fault to tick 24, then two faults to the CI horizon,
/// the library's rule and every mutant; about 10 minutes on two cores and 12 GiB of memory at
/// its peak (the README has the counts). Run it with
/// `CARGO_INCREMENTAL=0 cargo test -p zkfence-model --release --test check deep_run -- --ignored --nocapture`.
#[test]
#[ignore = "the deep run takes minutes; see its doc comment for the command"]
fn deep_run() {
    for config in Config::deep(None) {
        the_library_rule_passes(config);
    }
    for mutant in MUTANTS {
        for config in Config::deep(Some(mutant)) {
            caught(config, mutant, ONE_HOLDER);
        }
    }
}
