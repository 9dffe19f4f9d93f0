//! The library's layout rules, checked on its source: the modules import each other without a
//! cycle (file by file: a module may use its children, its siblings and the crate's other
//! files, and no chain of such uses leads back to it), and no function runs past 80 lines
//! unless the comment above it says why (`long because`).
//!
//! These read `src/` as text: a `use crate::a::b`, a path `crate::a::b::Item`, a
//! `super::` reference and a `mod x;` declaration are the edges; tests (everything after a
//! file's `#[cfg(test)]`) and comments are not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LONGEST_FUNCTION: usize = 80;

/// The library's files as module paths (`queue::kind`; `""` is the crate root) with their
/// text, tests and comment lines left out.
fn modules() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    let mut modules = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let mut segments: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(segments.last().map(String::as_str), Some("mod" | "lib")) {
            segments.pop();
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        modules.insert(segments.join("::"), code.join("\n"));
    }
    modules
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// The identifier-ish words of `text` after each occurrence of `prefix`, split on `::`:
/// `crate::queue::kind::Kind` gives `["queue", "kind", "Kind"]`.
fn paths_after<'a>(text: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        paths.push(rest[..end].split("::").filter(|s| !s.is_empty()).collect());
    }
    paths
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}::{child}")
    }
}

/// Who uses whom, module by module.
fn edges(modules: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges = BTreeMap::new();
    for (module, text) in modules {
        let mut uses = BTreeSet::new();
        // `crate::a::b::Item`: the longest prefix that is a module.
        for path in paths_after(text, "crate::") {
            if let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|m| modules.contains_key(m))
            {
                uses.insert(target);
            }
        }
        // `super::x`: the sibling `x`, or else an item of the parent (`super::{A, B}` too).
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        for path in paths_after(text, "super::") {
            let sibling = path.first().map(|s| join(parent, s));
            match sibling.filter(|s| modules.contains_key(s)) {
                Some(sibling) => uses.insert(sibling),
                None => uses.insert(parent.to_string()),
            };
        }
        // `mod x;`: the module's own children.
        for line in text.lines() {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            if let Some(child) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
                uses.insert(join(module, child));
            }
        }
        uses.remove(module);
        edges.insert(module.clone(), uses);
    }
    edges
}

/// A cycle through `from`, if there is one: the modules along it.
fn cycle_from(edges: &BTreeMap<String, BTreeSet<String>>, from: &str) -> Option<Vec<String>> {
    // Depth-first, keeping the path; a path back to `from` is the cycle.
    let mut stack = vec![(from.to_string(), vec![from.to_string()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in edges.get(&at).into_iter().flatten() {
            if next == from {
                let mut cycle = path.clone();
                cycle.push(from.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

#[test]
fn the_modules_import_each_other_without_a_cycle() {
    let modules = modules();
    assert!(
        modules.contains_key("queue::kind") && modules.contains_key("watchdog::lease"),
        "the layout this test knows is gone: {:?}",
        modules.keys().collect::<Vec<_>>()
    );
    let edges = edges(&modules);
    // The check must see edges: the queue uses the guard it hands its node to.
    assert!(edges["queue"].contains("guard"), "{:?}", edges["queue"]);
    let cycles: Vec<String> = modules
        .keys()
        .filter_map(|m| cycle_from(&edges, m))
        .map(|c| c.join(" -> "))
        .collect();
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut modules = BTreeMap::new();
    modules.insert("a".to_string(), "use crate::b::Thing;".to_string());
    modules.insert("b".to_string(), "mod c;".to_string());
    modules.insert("b::c".to_string(), "use super::{Thing};".to_string());
    modules.insert("d".to_string(), "fn f() { crate::a::g() }".to_string());
    let edges = edges(&modules);
    assert_eq!(
        cycle_from(&edges, "b"),
        Some(vec!["b".into(), "b::c".into(), "b".into()])
    );
    assert_eq!(cycle_from(&edges, "a"), None);
    assert_eq!(cycle_from(&edges, "d"), None);
}

/// The functions of `text` longer than the limit whose comment does not say why: name and
/// length. A function runs from its `fn` line to the line that closes its first brace.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(name) = [
            "fn ",
            "async fn ",
            "pub(crate) fn ",
            "pub(crate) async fn ",
            "pub fn ",
            "pub async fn ",
            "pub(super) fn ",
            "pub(super) async fn ",
        ]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p))
        .map(|rest| rest.split(['(', '<']).next().unwrap_or(rest)) else {
            continue;
        };
        let (mut depth, mut opened, mut end) = (0i64, false, i);
        for (j, l) in lines.iter().enumerate().skip(i) {
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            end = j;
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
        let length = end - i + 1;
        let explained = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with("///") || l.trim_start().starts_with("#["))
            .any(|l| l.contains("long because"));
        if length > LONGEST_FUNCTION && !explained {
            long.push((name.to_string(), length));
        }
    }
    long
}

#[test]
fn no_function_runs_past_eighty_lines_without_saying_why() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    let mut long = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        // Tests may be long: they are read top to bottom.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (name, length) in long_functions(text) {
            long.push(format!("{}: {name} ({length} lines)", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these, or say why they are long (`long because`):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_check_counts_a_long_function() {
    let body = "    let x = 1;\n".repeat(LONGEST_FUNCTION);
    let long = format!("fn big() {{\n{body}}}\n");
    assert_eq!(
        long_functions(&long),
        vec![("big".to_string(), LONGEST_FUNCTION + 2)]
    );
    let explained = format!("/// long because: one table.\n{long}");
    assert!(long_functions(&explained).is_empty());
    let short = format!("fn small() {{\n{}}}\n", "    let x = 1;\n".repeat(10));
    assert!(long_functions(&short).is_empty());
}
