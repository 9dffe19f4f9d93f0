//! The suite's command line, as `chaos/run` calls it. (Its being here also makes `cargo test
//! --workspace` build the `zkfence-chaos` binary with the workspace's features, which
//! `scripts/test` then hands to `chaos/run` rather than build it a second time.)

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_zkfence-chaos");

#[test]
fn every_mode_is_offered_and_a_bad_argument_says_what_to_give() {
    let help = Command::new(BIN)
        .arg("--help")
        .output()
        .expect("run the suite");
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    for mode in [
        "smoke",
        "long",
        "partition",
        "failover",
        "election",
        "multi",
    ] {
        assert!(text.contains(mode), "{mode} missing from --help:\n{text}");
    }
    let bad = Command::new(BIN)
        .args(["long", "--minutes", "soon"])
        .output()
        .expect("run the suite");
    assert_eq!(bad.status.code(), Some(2), "a usage error");
    let text = String::from_utf8_lossy(&bad.stderr);
    assert!(text.contains("--minutes"), "{text}");
}
