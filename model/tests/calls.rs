//! The model's calls go one way, as `lib.rs`'s "Layout" says: `checker` → `step` → `client` →
//! `ensemble` → `state` → `config`. Every side is a method of one `State`, so the compiler
//! does not keep this order; this reads the sources as text. A file may not call a method or
//! function defined in a file above it (`.name(`, `Self::name(`, or a bare `name(` of a free
//! function), nor name a module above it (`crate::step`). Comment lines are not read.

use std::collections::BTreeSet;
use std::path::Path;

/// The model's files, bottom first. `trace` and `lib` sit above them all; only the order
/// among the others is checked (those two only read the checker, the steps and the state).
const ORDER: [&str; 6] = ["config", "state", "ensemble", "client", "step", "checker"];

/// The text of `model/src/<module>.rs`, comment lines left out.
fn source(module: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(format!("{module}.rs"));
    let text = std::fs::read_to_string(&path).expect("readable source");
    (text.lines())
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names of the functions and methods `text` defines.
fn defined(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("fn ") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + 3..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String = (rest.chars())
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.insert(name);
        }
    }
    names
}

/// Whether `text` calls `name`: as a method (`.name(`), an associated function
/// (`Self::name(`), or a free function (`name(` not after a letter, `_`, `.`, `:` or `fn `).
fn calls(text: &str, name: &str) -> bool {
    let pattern = format!("{name}(");
    let mut rest = text;
    while let Some(at) = rest.find(&pattern) {
        let before = &rest[..at];
        rest = &rest[at + pattern.len()..];
        let last = before.chars().next_back();
        let method = last == Some('.') || before.ends_with("Self::");
        let free = !last.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | ':'))
            && !before.ends_with("fn ");
        if method || free {
            return true;
        }
    }
    false
}

/// Each call or path from a file up to one above it: `(caller, callee's file, name)`.
fn upward_calls(files: &[(&str, String)]) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for (i, (module, text)) in files.iter().enumerate() {
        for (above, above_text) in &files[i + 1..] {
            if text.contains(&format!("crate::{above}")) {
                found.push((module.to_string(), above.to_string(), "(path)".to_string()));
            }
            for name in defined(above_text) {
                if calls(text, &name) {
                    found.push((module.to_string(), above.to_string(), name));
                }
            }
        }
    }
    found
}

#[test]
fn the_models_calls_go_one_way() {
    let files: Vec<(&str, String)> = ORDER.iter().map(|m| (*m, source(m))).collect();
    // The check reads something: the steps call both sides, a client's send touches its server.
    let text = |module: &str| &files.iter().find(|(m, _)| *m == module).unwrap().1;
    assert!(calls(text("step"), "disconnect") && calls(text("step"), "expire"));
    assert!(calls(text("client"), "touch") && defined(text("ensemble")).contains("touch"));
    let upward = upward_calls(&files);
    assert!(
        upward.is_empty(),
        "calls up the model's order ({ORDER:?}, bottom first):\n{}",
        (upward.iter())
            .map(|(from, to, name)| format!("{from} calls {name} of {to}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_check_finds_a_call_up() {
    let files = [
        (
            "ensemble",
            "fn expire(&mut self) { self.disconnect(0) }".to_string(),
        ),
        (
            "client",
            "pub(crate) fn disconnect(&mut self, c: usize) {}".to_string(),
        ),
    ];
    assert_eq!(
        upward_calls(&files),
        [("ensemble".into(), "client".into(), "disconnect".into())]
    );
    let files = [
        (
            "client",
            "fn send(&mut self) { std::mem::take(&mut x); }".to_string(),
        ),
        (
            "step",
            "fn take(&mut self) {} fn tick(&mut self) { self.send() }".to_string(),
        ),
    ];
    assert!(upward_calls(&files).is_empty());
}
