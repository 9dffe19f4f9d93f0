//! The workspace's layout rules, checked on the source of each of its packages (the library's
//! `src/`, `cli/src`, `testkit/src`, `chaos/src`, and each store's fence: `postgres/src`,
//! `mysql/src`, `object-store/src`, `redis/src` (one file: only the function length)), and the
//! lease model, `model/src`:
//!
//! - the files import each other without a cycle: a module may use its children, its siblings
//!   and the crate's other files, and no chain of such uses leads back to it;
//! - so do the top-level modules, each with everything under it (`queue::kind` counts as
//!   `queue`): two modules that use each other through their children are one concept or
//!   share a type that belongs to a third. The crate root (`lib.rs`, `main.rs`) declares its
//!   children; a child that uses an item the root defines (rather than re-exports) closes a
//!   circle with it;
//! - no function runs past 80 lines unless the comment above it says why (`long because`).
//!
//! These read the sources as text: a `use crate::a::b` (brace groups too), a path
//! `crate::a::b::Item`, a `super::` reference and a `mod x;` declaration are the edges; a path
//! to an item that a module re-exports (`pub use b::Item`) leads to where the item is defined.
//! Tests (everything after a file's `#[cfg(test)]`) and comment lines are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;
use std::path::{Path, PathBuf};
use std::str::Chars;

const LONGEST_FUNCTION: usize = 80;

/// Each package's source directory, from the workspace root (also its name in messages).
const LIBRARY: &str = "src";
const CLI: &str = "cli/src";
const TESTKIT: &str = "testkit/src";
const CHAOS: &str = "chaos/src";
const POSTGRES: &str = "postgres/src";
const MYSQL: &str = "mysql/src";
const REDIS: &str = "redis/src";
const OBJECT_STORE: &str = "object-store/src";
const MODEL: &str = "model/src";

/// Who uses whom: module path (`queue::kind`; `""` is the crate root) to the modules it uses.
type Edges = BTreeMap<String, BTreeSet<String>>;

fn source_dir(package: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(package)
}

/// The package's files as module paths with their text, tests and comment lines left out.
fn modules(package: &str) -> BTreeMap<String, String> {
    let src = source_dir(package);
    let mut modules = BTreeMap::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).expect("under the source directory");
        let text = std::fs::read_to_string(&file).expect("readable source");
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect();
        modules.insert(module_path(relative), code.join("\n"));
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

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the source directory is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
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
    found
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

/// Fails on a cycle among `package`'s files or among its top-level modules; `sanity` is a
/// (module, used module) edge the check must see, or it is reading nothing.
fn assert_no_import_circle(package: &str, sanity: (&str, &str)) {
    let modules = modules(package);
    let edges = edges(&modules);
    let (from, to) = sanity;
    assert!(
        edges.get(from).is_some_and(|uses| uses.contains(to)),
        "{package}: the check no longer sees {from} -> {to}; the edges it sees: {edges:?}"
    );
    let files = cycles(&edges);
    assert!(
        files.is_empty(),
        "{package}: import cycles between files:\n{}",
        files.join("\n")
    );
    let top = cycles(&top_level(&edges));
    assert!(
        top.is_empty(),
        "{package}: import circles between top-level modules:\n{}",
        top.join("\n")
    );
}

#[test]
fn the_library_has_no_import_circle() {
    let modules = modules(LIBRARY);
    assert!(
        modules.contains_key("queue::kind") && modules.contains_key("watchdog::lease"),
        "the layout this test knows is gone: {:?}",
        modules.keys().collect::<Vec<_>>()
    );
    // The lock hands its contender to the queue.
    assert_no_import_circle(LIBRARY, ("lock", "queue"));
}

#[test]
fn the_cli_has_no_import_circle() {
    assert_no_import_circle(CLI, ("run", "connect"));
}

#[test]
fn the_testkit_has_no_import_circle() {
    assert_no_import_circle(TESTKIT, ("ensemble", "server"));
}

#[test]
fn the_store_fences_have_no_import_circle() {
    assert_no_import_circle(POSTGRES, ("", "sql"));
    assert_no_import_circle(MYSQL, ("", "sql"));
    assert_no_import_circle(OBJECT_STORE, ("fence", "header"));
}

#[test]
fn the_chaos_suite_has_no_import_circle() {
    assert_no_import_circle(CHAOS, ("controller", "checker"));
}

#[test]
fn the_lease_model_has_no_import_circle() {
    assert_no_import_circle(MODEL, ("checker", "step"));
}

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

/// The name of the function a line declares, if it declares one (any visibility, `const`,
/// `async`, `unsafe`).
fn function_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(after) = rest.strip_prefix("pub") {
        rest = match after.strip_prefix('(') {
            Some(scoped) => scoped.split_once(") ")?.1,
            None => after.strip_prefix(' ')?,
        };
    }
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    rest.split(['(', '<']).next()
}

/// The functions of `text` longer than the limit whose comment does not say why: name and
/// length. A function runs from its `fn` line to the line that closes its first brace.
fn long_functions(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
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

/// Fails on a function of `package` past the limit whose comment does not say why.
fn assert_no_long_function(package: &str) {
    let mut long = Vec::new();
    for file in rust_files(&source_dir(package)) {
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
fn no_function_of_the_library_runs_past_eighty_lines_without_saying_why() {
    assert_no_long_function(LIBRARY);
}

#[test]
fn no_function_of_the_cli_runs_past_eighty_lines_without_saying_why() {
    assert_no_long_function(CLI);
}

#[test]
fn no_function_of_the_testkit_runs_past_eighty_lines_without_saying_why() {
    assert_no_long_function(TESTKIT);
}

#[test]
fn no_function_of_the_store_fences_runs_past_eighty_lines_without_saying_why() {
    for package in [POSTGRES, MYSQL, REDIS, OBJECT_STORE] {
        assert_no_long_function(package);
    }
}

#[test]
fn no_function_of_the_chaos_suite_runs_past_eighty_lines_without_saying_why() {
    assert_no_long_function(CHAOS);
}

#[test]
fn no_function_of_the_lease_model_runs_past_eighty_lines_without_saying_why() {
    assert_no_long_function(MODEL);
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
    for declaration in [
        "pub(in crate::a) async fn big() {",
        "pub const unsafe fn big() {",
    ] {
        let long = format!("{declaration}\n{body}}}\n");
        assert_eq!(
            long_functions(&long),
            vec![("big".to_string(), LONGEST_FUNCTION + 2)]
        );
    }
}
