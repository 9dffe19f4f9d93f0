//! The lint on the workspace as it is: every rule holds, and `ARCHITECTURE.md` agrees with the
//! tree. A failure prints the lint's lines.

#[test]
fn the_workspace_keeps_its_layout_rules_and_its_map() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zkfence-lint"))
        .output()
        .expect("the lint runs");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(report.contains("no problem"), "{report}");
}
