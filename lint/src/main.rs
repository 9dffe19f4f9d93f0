//! `zkfence-lint`: the workspace's layout rules, in one place (`cargo run -p zkfence-lint`;
//! `scripts/test` runs it). It reads the workspace as text and as `cargo metadata` sees it:
//!
//! - `packages`: no published package depends on an unpublished one, and no package on itself;
//! - `imports`: no import circle among the files, or the top-level modules, of any package's
//!   `src/`;
//! - `length`: no function runs past 80 lines without saying why (`long because`), in any
//!   package's `src/`, `tests/` (test functions exempt) or `examples/`;
//! - `copies`: no two functions of the workspace with the same body;
//! - `map`: `ARCHITECTURE.md` agrees with the tree (its package table, the library's modules,
//!   the paths it names).
//!
//! Exit status 0: nothing found; 1: a line per problem on stdout. `zkfence-lint graph` prints
//! the package table the map must have.

mod copies;
mod imports;
mod length;
mod map;
mod packages;
mod source;

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
    if std::env::args().nth(1).as_deref() == Some("graph") {
        for row in map::rows(&packages) {
            println!("| {} |", row.join(" | "));
        }
        return ExitCode::SUCCESS;
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
            for file in source::rust_files(&folder.join(part)) {
                // The library's folder holds the others: theirs are read with them.
                let nested = |f: &PathBuf| f != folder && f.starts_with(folder);
                if folders.iter().any(|f| nested(f) && file.starts_with(f)) {
                    continue;
                }
                note("length", length::check(&file, tests));
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
