//! `zkfence-lint`: the workspace's layout rules, in one place (`cargo run -p zkfence-lint`;
//! `scripts/test` runs it). It reads the workspace as text and as `cargo metadata` sees it:
//!
//! - `packages`: no published package depends on an unpublished one, and no package on itself;
//! - `imports`: no import circle among the files, or the top-level modules, of any package's
//!   `src/`;
//! - `length`: no function runs past 50 lines in the library's `src/`, nor past 80 in any other
//!   package's `src/` or in any `tests/` (test functions exempt) or `examples/`, without saying
//!   why (`long because`); no file of the library's `src/` past 600 lines before its tests;
//! - `copies`: no two functions of the workspace with the same body;
//! - `map`: `ARCHITECTURE.md` agrees with the tree (its package table, every file of the
//!   library's `src/`, the paths it names);
//! - `layers`: the library's imports keep the map's layer order (no layer uses one above it).
//!
//! Exit status 0: nothing found; 1: a line per problem on stdout. `zkfence-lint graph` prints
//! the package table the map must have; `zkfence-lint uses`, the library's top-level modules
//! and the ones each uses (the graph the layers are checked on).

mod copies;
mod imports;
mod layers;
mod length;
mod map;
mod packages;
mod source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the lint lives in a folder of the workspace")
        .to_path_buf();
    let packages = match packages::load(&root) {
        Ok(packages) => packages,
        Err(why) => {
            eprintln!("zkfence-lint: {why}");
            return ExitCode::from(2);
        }
    };
    if let Some(done) = subcommand(&root, &packages) {
        return done;
    }
    let folders: Vec<PathBuf> = (packages.values())
        .map(|p| {
            if p.folder == "." {
                root.clone()
            } else {
                root.join(&p.folder)
            }
        })
        .collect();
    let mut problems: Vec<(&str, String)> = Vec::new();
    let mut note =
        |check, found: Vec<String>| problems.extend(found.into_iter().map(|p| (check, p)));
    note("packages", packages::arrows(&packages));
    let mut every_file = Vec::new();
    for folder in &folders {
        note("imports", imports::circles(&folder.join("src")));
        for (part, tests) in [("src", false), ("tests", true), ("examples", false)] {
            // The library's own code is held to the shorter limit.
            let longest = match (folder == &root, part) {
                (true, "src") => length::LONGEST_IN_LIBRARY,
                _ => length::LONGEST,
            };
            for file in source::rust_files(&folder.join(part)) {
                // The library's folder holds the others: theirs are read with them.
                let nested = |f: &PathBuf| f != folder && f.starts_with(folder);
                if folders.iter().any(|f| nested(f) && file.starts_with(f)) {
                    continue;
                }
                note("length", length::check(&file, tests, longest));
                if folder == &root && part == "src" {
                    let long = length::check_file(&file, length::LONGEST_FILE_IN_LIBRARY);
                    note("length", long.into_iter().collect());
                }
                every_file.push(file);
            }
        }
    }
    let relative: Vec<PathBuf> = every_file
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap_or(f).to_path_buf())
        .collect();
    let _ = std::env::set_current_dir(&root);
    note("copies", copies::check(&relative));
    note("map", map::check(&root, &packages));
    note("layers", layers::check(&root, map::MAP));
    for (check, problem) in &problems {
        println!("[{check}] {problem}");
    }
    if problems.is_empty() {
        println!(
            "zkfence-lint: {} packages, {} files: no problem",
            packages.len(),
            every_file.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("zkfence-lint: {} problems", problems.len());
        ExitCode::FAILURE
    }
}

/// A module path as the lint prints it: the crate root as `(root)`.
fn display(module: &str) -> &str {
    if module.is_empty() {
        "(root)"
    } else {
        module
    }
}

/// `graph` and `uses`, the lint's two printouts, when the first argument names one.
fn subcommand(root: &Path, packages: &BTreeMap<String, packages::Package>) -> Option<ExitCode> {
    match std::env::args().nth(1).as_deref() {
        Some("uses") => {
            for (module, uses) in imports::top_level_uses(&root.join("src")) {
                let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
                println!("{} -> {}", display(&module), uses.join(", "));
            }
        }
        Some("graph") => {
            for row in map::rows(packages) {
                println!("| {} |", row.join(" | "));
            }
        }
        _ => return None,
    }
    Some(ExitCode::SUCCESS)
}
