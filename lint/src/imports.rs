//! Import circles, read from the source as text: a package's files import each other without a
//! cycle (a module may use its children, its siblings and the crate's other files, and no chain
//! of such uses leads back to it), and so do its top-level modules, each with everything under
//! it (`queue::kind` counts as `queue`): two modules that use each other through their children
//! are one concept, or share a type that belongs to a third. The crate root (`lib.rs`,
//! `main.rs`) declares its children; a child that uses an item the root defines (rather than
//! re-exports) closes a circle with it.
//!
//! The edges: a `use crate::a::b` (brace groups too), a path `crate::a::b::Item`, a `super::`
//! reference and a `mod x;` declaration; a path to an item that a module re-exports (`pub use
//! b::Item`) leads to where the item is defined. Tests (everything after a file's
//! `#[cfg(test)]`) and comment lines are not read; an inline module (`mod x { ... }`) counts
//! as part of its file.

use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::path::Path;
use std::str::Chars;

/// Who uses whom: module path (`queue::kind`; `""` is the crate root) to the modules it uses.
pub(crate) type Edges = BTreeMap<String, BTreeSet<String>>;

/// The files under `src` as module paths with their text, tests and comment lines left out.
pub(crate) fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut modules = BTreeMap::new();
    for file in crate::source::rust_files(src) {
        let relative = file.strip_prefix(src).expect("under the source directory");
        modules.insert(module_path(relative), crate::source::code(&file));
    }
    modules
}

/// `queue/kind.rs` is `queue::kind`; `queue/mod.rs` is `queue`; `lib.rs` and `main.rs` are
/// the crate root, `""`.
fn module_path(relative: &Path) -> String {
    let mut segments: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let root = segments.len() == 1 && matches!(segments[0].as_str(), "lib" | "main");
    if root || segments.last().is_some_and(|s| s == "mod") {
        segments.pop();
    }
    segments.join("::")
}

/// The paths a use tree names, each split on `::`, for every occurrence of `prefix` in `text`
/// that starts a path (not `x::crate::`, not `my_crate::`, not a macro's `$crate::`, which
/// names the crate from where the macro is used): after `crate::`,
/// `a::{b, c::D}` gives `[a, b]` and `[a, c, D]`; `a::f(x)` gives `[a, f]`.
fn paths_after(text: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':' || c == '$') {
            continue;
        }
        use_tree(&mut rest.chars().peekable(), &[], &mut paths);
    }
    paths
}

/// Reads one use tree (`a::b`, `a::{b, c::{d, E}}`, `a::*`) below `prefix` into `paths`.
fn use_tree(chars: &mut Peekable<Chars<'_>>, prefix: &[String], paths: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    loop {
        skip_whitespace(chars);
        if chars.next_if_eq(&'{').is_some() {
            use_group(chars, &path, paths);
            return;
        }
        let mut word = String::new();
        while let Some(c) = chars.next_if(|c| c.is_alphanumeric() || *c == '_') {
            word.push(c);
        }
        if word.is_empty() {
            break;
        }
        path.push(word);
        if chars.next_if_eq(&':').is_none() || chars.next_if_eq(&':').is_none() {
            break;
        }
    }
    if path.len() > prefix.len() {
        paths.push(path);
    }
}

/// The rest of a brace group `{b, c::D}` (its `{` read), each member below `prefix`.
fn use_group(chars: &mut Peekable<Chars<'_>>, prefix: &[String], paths: &mut Vec<Vec<String>>) {
    loop {
        use_tree(chars, prefix, paths);
        skip_whitespace(chars);
        // Skips an alias (`b as c`) up to the member's end.
        while chars.next_if(|c| !matches!(c, ',' | '}')).is_some() {}
        if chars.next() != Some(',') {
            return;
        }
    }
}

fn skip_whitespace(chars: &mut Peekable<Chars<'_>>) {
    while chars.next_if(|c| c.is_whitespace()).is_some() {}
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}::{child}")
    }
}

/// The absolute path (from the crate root) of a path written in `module`: `crate::a`,
/// `super::a` (any number of `super`s), `self::a`, or `a` for a child `a` of `module`. `None`
/// for a path into another crate.
fn absolute(
    modules: &BTreeMap<String, String>,
    module: &str,
    path: &[String],
) -> Option<Vec<String>> {
    let mut base: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        Some(first) if modules.contains_key(&join(module, first)) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The items each module re-exports (`pub use`, `pub(crate) use`, `pub(super) use`): name to
/// the absolute path of what it names.
fn reexports(
    modules: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut found = BTreeMap::new();
    for (module, text) in modules {
        let mut names = BTreeMap::new();
        for visibility in ["pub use ", "pub(crate) use ", "pub(super) use "] {
            for path in paths_after(text, visibility) {
                if let (Some(name), Some(target)) = (path.last(), absolute(modules, module, &path))
                {
                    names.insert(name.clone(), target);
                }
            }
        }
        found.insert(module.clone(), names);
    }
    // A `#[macro_export]` macro is an item of the crate root, defined in its own file: a path
    // to it (`crate::m`, the re-export that puts it in a module) leads to that file.
    for (module, text) in modules {
        for name in exported_macros(text) {
            let mut source: Vec<String> = module
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            source.push(name.clone());
            if let Some(root) = found.get_mut("") {
                root.entry(name).or_insert(source);
            }
        }
    }
    found
}

/// The names of the `#[macro_export]` macros `text` defines.
fn exported_macros(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[macro_export]") {
        rest = &rest[at..];
        let Some(at) = rest.find("macro_rules!") else {
            break;
        };
        rest = &rest[at + "macro_rules!".len()..];
        let name: String = (rest.trim_start().chars())
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// The module an absolute path leads to: its longest prefix that is a module, or, when the
/// next segment is an item that module re-exports, where the re-export leads.
fn target(
    modules: &BTreeMap<String, String>,
    reexports: &BTreeMap<String, BTreeMap<String, Vec<String>>>,
    path: &[String],
) -> Option<String> {
    let mut path = path.to_vec();
    // A bound, in case two modules re-export each other's names.
    for _ in 0..8 {
        let n = (0..=path.len())
            .rev()
            .find(|&n| modules.contains_key(&path[..n].join("::")))?;
        let module = path[..n].join("::");
        match path.get(n).and_then(|item| reexports[&module].get(item)) {
            Some(source) if *source != path[..=n] => path = source.clone(),
            _ => return Some(module),
        }
    }
    None
}

/// Who uses whom, file by file.
fn edges(modules: &BTreeMap<String, String>) -> Edges {
    let reexports = reexports(modules);
    let mut edges = Edges::new();
    for (module, text) in modules {
        let written = paths_after(text, "crate::")
            .into_iter()
            .map(|p| [vec!["crate".to_string()], p].concat())
            .chain(
                paths_after(text, "super::")
                    .into_iter()
                    .map(|p| [vec!["super".to_string()], p].concat()),
            );
        let mut uses: BTreeSet<String> = written
            .filter_map(|p| absolute(modules, module, &p))
            .filter_map(|p| target(modules, &reexports, &p))
            .collect();
        uses.extend(children_declared(module, text));
        uses.remove(module);
        edges.insert(module.clone(), uses);
    }
    edges
}

/// The children a module declares (`mod x;`, `pub mod x;`, `pub(crate) mod x;`).
fn children_declared(module: &str, text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = ["pub(crate) ", "pub(super) ", "pub "]
                .iter()
                .find_map(|v| line.strip_prefix(v))
                .unwrap_or(line);
            line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';'))
        })
        .map(|child| join(module, child))
        .collect()
}

/// The same edges between top-level modules: `a::b -> c::d` is `a -> c`; the root stays `""`.
fn top_level(edges: &Edges) -> Edges {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut collapsed = Edges::new();
    for (from, to) in edges {
        let uses = collapsed.entry(top(from)).or_default();
        uses.extend(to.iter().map(|m| top(m)).filter(|m| *m != top(from)));
    }
    collapsed
}

/// A cycle through `from`, if there is one: the modules along it.
fn cycle_from(edges: &Edges, from: &str) -> Option<Vec<String>> {
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

/// Every cycle found, one line each (`a -> b -> a`; the root shows as `(root)`).
fn cycles(edges: &Edges) -> Vec<String> {
    let name = |m: &String| {
        if m.is_empty() {
            "(root)".to_string()
        } else {
            m.clone()
        }
    };
    edges
        .keys()
        .filter_map(|m| cycle_from(edges, m))
        .map(|c| c.iter().map(name).collect::<Vec<_>>().join(" -> "))
        .collect()
}

/// The circles among the files under `src` and among its top-level modules, one line each,
/// and a line if a crate of several files shows no edge at all (the reading broke).
pub(crate) fn circles(src: &Path) -> Vec<String> {
    let modules = modules(src);
    let edges = edges(&modules);
    let shown = src.display();
    if modules.len() > 1 && edges.values().all(BTreeSet::is_empty) {
        return vec![format!(
            "{shown}: no import seen among {} files: the reading broke",
            modules.len()
        )];
    }
    let files = cycles(&edges)
        .into_iter()
        .map(|c| format!("{shown}: files import each other in a circle: {c}"));
    let top = cycles(&top_level(&edges))
        .into_iter()
        .map(|c| format!("{shown}: top-level modules import each other in a circle: {c}"));
    files.chain(top).collect()
}

/// Who uses whom among the top-level modules of the package whose source is `src` (`queue`
/// for everything under `src/queue/`; the crate root is `""`).
pub(crate) fn top_level_uses(src: &Path) -> Edges {
    top_level(&edges(&modules(src)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(m, text)| (m.to_string(), text.to_string()))
            .collect()
    }

    #[test]
    fn the_cycle_check_finds_a_cycle() {
        let modules = synthetic(&[
            ("a", "use crate::b::Thing;"),
            ("b", "mod c;"),
            ("b::c", "use super::{Thing};"),
            ("d", "fn f() { crate::a::g() }"),
        ]);
        let edges = edges(&modules);
        assert_eq!(
            cycle_from(&edges, "b"),
            Some(vec!["b".into(), "b::c".into(), "b".into()])
        );
        assert_eq!(cycle_from(&edges, "a"), None);
        assert_eq!(cycle_from(&edges, "d"), None);
    }

    #[test]
    fn the_top_level_check_finds_a_circle_the_file_check_does_not() {
        // a::x uses b::y (through the root's re-export, which leads to where Y is defined), and
        // b::z uses a.
        let modules = synthetic(&[
            ("", "mod a;\nmod b;\npub use crate::b::y::Y;"),
            ("a", "mod x;\npub(crate) fn g() {}"),
            ("a::x", "use crate::Y;"),
            ("b", "mod y;\nmod z;"),
            ("b::y", "pub struct Y;"),
            ("b::z", "fn f() { crate::a::g() }"),
        ]);
        let edges = edges(&modules);
        assert_eq!(edges["a::x"], ["b::y".to_string()].into());
        assert!(cycles(&edges).is_empty(), "{:?}", cycles(&edges));
        assert_eq!(cycles(&top_level(&edges)), ["a -> b -> a", "b -> a -> b"]);
    }

    #[test]
    fn a_macro_exported_from_a_child_is_that_childs() {
        // `#[macro_export]` puts the macro at the root; its re-export in a sibling leads to the
        // file that defines it, not to the root.
        let modules = synthetic(&[
            ("", "mod a;\nmod b;\npub use crate::b::B;"),
            (
                "a",
                "#[doc(hidden)]\n#[macro_export]\nmacro_rules! __m { () => {} }",
            ),
            (
                "b",
                "pub struct B;\npub mod api {\n    pub use crate::__m as m;\n}",
            ),
        ]);
        let edges = edges(&modules);
        assert_eq!(edges["b"], ["a".to_string()].into());
        assert!(cycles(&top_level(&edges)).is_empty());
    }

    #[test]
    fn a_child_using_an_item_the_root_defines_closes_a_circle() {
        // What `Mode` in the chaos suite's main.rs was: main.rs declares `schedule`, which uses it.
        let modules = synthetic(&[
            ("", "mod schedule;\npub(crate) enum Mode { Smoke }"),
            ("schedule", "use crate::{Mode, rng::Rng};"),
        ]);
        let edges = edges(&modules);
        assert_eq!(
            cycles(&top_level(&edges)),
            [
                "(root) -> schedule -> (root)",
                "schedule -> (root) -> schedule"
            ]
        );
    }
}
