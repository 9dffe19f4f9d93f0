//! The architecture map, `ARCHITECTURE.md`, checked against the tree: its package table (between
//! `<!-- packages -->` and `<!-- /packages -->`) lists every package of the workspace with its
//! folder, whether it is published and the packages it depends on, as `cargo metadata` says;
//! every file of the library's `src/` is named in it; and every path it writes in backticks
//! exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::packages::Package;

/// The map's file, from the workspace root.
pub(crate) const MAP: &str = "ARCHITECTURE.md";

/// The package table's rows as the map should have them (for `zkfence-lint graph`): package,
/// folder, published, depends on.
pub(crate) fn rows(packages: &BTreeMap<String, Package>) -> Vec<[String; 4]> {
    packages
        .values()
        .map(|p| {
            let uses = if p.uses.is_empty() {
                "-".to_string()
            } else {
                p.uses
                    .iter()
                    .map(|u| format!("`{u}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            [
                format!("`{}`", p.name),
                format!("`{}`", p.folder),
                if p.published { "yes" } else { "no" }.to_string(),
                uses,
            ]
        })
        .collect()
}

/// The first four cells of each row of the table between the `packages` markers of `map`.
fn table(map: &str) -> Option<Vec<[String; 4]>> {
    let start = map.find("<!-- packages -->")?;
    let end = map.find("<!-- /packages -->")?;
    let rows = map[start..end]
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("---"))
        .skip(1)
        .filter_map(|l| {
            let cells: Vec<String> = l.split('|').map(|c| c.trim().to_string()).collect();
            (cells.len() > 4).then(|| {
                [
                    cells[1].clone(),
                    cells[2].clone(),
                    cells[3].clone(),
                    cells[4].clone(),
                ]
            })
        })
        .collect();
    Some(rows)
}

/// The paths `map` writes in backticks (a word with a `/` or a `.rs`/`.md` ending, no spaces,
/// no placeholders), from the workspace root: a bare file name (`lease.rs`) is read in the
/// folder its line names (`src/watchdog/`), or at the root when its line names none.
fn paths(map: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in map.lines() {
        let words: Vec<&str> = line
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| !w.contains(char::is_whitespace) && !w.contains(['<', '*', '{', ':', '$']))
            .filter(|w| w.contains('/') || w.ends_with(".rs") || w.ends_with(".md"))
            .filter(|w| !w.starts_with('/') && !w.contains("//"))
            .collect();
        let folders: Vec<&str> = words.iter().copied().filter(|w| w.ends_with('/')).collect();
        for word in words {
            match (word.contains('/'), folders.first()) {
                (false, Some(folder)) => found.insert(format!("{folder}{word}")),
                _ => found.insert(word.trim_end_matches('/').to_string()),
            };
        }
    }
    found
}

/// Every file of the library's `src/` as the map must name it (`src/x.rs`, `src/x/y.rs`, or
/// `y.rs` on a line that names `src/x/`), `src/lib.rs` aside. A folder's `mod.rs` is named by the
/// folder (`src/x/`) too.
fn library_files(root: &Path) -> Vec<(String, Option<String>)> {
    let mut files: Vec<(String, Option<String>)> = crate::source::rust_files(&root.join("src"))
        .into_iter()
        .filter_map(|f| Some(f.strip_prefix(root).ok()?.to_string_lossy().into_owned()))
        .filter(|f| f != "src/lib.rs")
        .map(|f| {
            let folder = (f.strip_suffix("/mod.rs")).map(str::to_owned);
            (f, folder)
        })
        .collect();
    files.sort();
    files
}

/// One line per place the map and the tree disagree.
pub(crate) fn check(root: &Path, packages: &BTreeMap<String, Package>) -> Vec<String> {
    let Ok(map) = std::fs::read_to_string(root.join(MAP)) else {
        return vec![format!(
            "{MAP} is missing: the map of packages, layers and concerns"
        )];
    };
    let mut problems = Vec::new();
    match table(&map) {
        None => problems.push(format!(
            "{MAP}: no package table between <!-- packages --> and <!-- /packages --> (zkfence-lint graph prints it)"
        )),
        Some(found) => {
            let want = rows(packages);
            for row in &want {
                if !found.contains(row) {
                    problems.push(format!("{MAP}: the package table lacks or differs from the row {}", row.join(" | ")));
                }
            }
            for row in &found {
                if !want.contains(row) {
                    problems.push(format!("{MAP}: the package table has a row the workspace does not: {}", row.join(" | ")));
                }
            }
        }
    }
    let named = paths(&map);
    for (file, folder) in library_files(root) {
        if !named.contains(&file) && !folder.is_some_and(|f| named.contains(&f)) {
            problems.push(format!(
                "{MAP}: the library's file `{file}` is not on the map: name it where its layer or concern is"
            ));
        }
    }
    for path in named {
        if !root.join(&path).exists() {
            problems.push(format!("{MAP}: `{path}` does not exist"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_and_the_paths_are_read() {
        let map = "intro `src/lock.rs` and `cli/` but not `cargo run -p x` or `<dir>/x.rs`\n\
                   `src/queue/`: `kind.rs`\n\
                   <!-- packages -->\n| package | folder | published | depends on | what |\n|---|---|---|---|---|\n\
                   | `a` | `.` | yes | - | the library |\n<!-- /packages -->\n";
        assert_eq!(
            table(map).unwrap(),
            vec![["`a`".to_string(), "`.`".into(), "yes".into(), "-".into()]]
        );
        assert_eq!(
            paths(map),
            BTreeSet::from([
                "src/lock.rs".to_string(),
                "cli".into(),
                "src/queue".into(),
                "src/queue/kind.rs".into()
            ])
        );
    }

    #[test]
    fn rows_say_what_cargo_says() {
        let packages = BTreeMap::from([(
            "cli".to_string(),
            Package {
                name: "cli".into(),
                folder: "cli".into(),
                published: true,
                uses: BTreeSet::from(["a".to_string(), "b".into()]),
            },
        )]);
        assert_eq!(
            rows(&packages),
            vec![[
                "`cli`".to_string(),
                "`cli`".into(),
                "yes".into(),
                "`a`, `b`".into()
            ]]
        );
    }
}
