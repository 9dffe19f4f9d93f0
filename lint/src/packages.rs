//! The workspace's packages, from `cargo metadata`: where each lives, whether it is published,
//! and which of the others it depends on (normal dependencies: what its users build). No
//! published package may depend on an unpublished one, and the arrows go one way.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A package of the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Package {
    pub(crate) name: String,
    /// Its folder, relative to the workspace root (`.` for the library).
    pub(crate) folder: String,
    pub(crate) published: bool,
    /// The workspace's packages it depends on (normal and build dependencies).
    pub(crate) uses: BTreeSet<String>,
}

/// The workspace's packages by name, read from `cargo metadata` run in `root`.
pub(crate) fn load(root: &Path) -> Result<BTreeMap<String, Package>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata's output: {e}"))?;
    parse(root, &metadata)
}

/// The packages `metadata` (`cargo metadata`'s JSON) describes.
fn parse(root: &Path, metadata: &serde_json::Value) -> Result<BTreeMap<String, Package>, String> {
    let listed = metadata["packages"]
        .as_array()
        .ok_or("cargo metadata lists no packages")?;
    let names: BTreeSet<&str> = listed.iter().filter_map(|p| p["name"].as_str()).collect();
    let mut packages = BTreeMap::new();
    for package in listed {
        let name = package["name"].as_str().unwrap_or_default().to_string();
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let folder = manifest
            .parent()
            .and_then(|f| f.strip_prefix(root).ok())
            .map(|f| f.display().to_string())
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| ".".into());
        // `publish`: null for any registry, an empty list for none.
        let published = package["publish"]
            .as_array()
            .is_none_or(|registries| !registries.is_empty());
        let uses = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(d))
            .map(String::from)
            .collect();
        packages.insert(
            name.clone(),
            Package {
                name,
                folder,
                published,
                uses,
            },
        );
    }
    Ok(packages)
}

/// A line per arrow from a published package to an unpublished one, and per circle.
pub(crate) fn arrows(packages: &BTreeMap<String, Package>) -> Vec<String> {
    let mut problems = Vec::new();
    for package in packages.values().filter(|p| p.published) {
        for used in &package.uses {
            if packages.get(used).is_some_and(|u| !u.published) {
                problems.push(format!(
                    "{} is published and depends on {used}, which is not: its users could not build it",
                    package.name
                ));
            }
        }
    }
    for package in packages.keys() {
        if reaches(packages, package, package) {
            problems.push(format!("{package} depends on itself through others"));
        }
    }
    problems
}

/// Whether `to` is reachable from `from`'s dependencies.
fn reaches(packages: &BTreeMap<String, Package>, from: &str, to: &str) -> bool {
    let mut stack: Vec<&str> = packages[from].uses.iter().map(String::as_str).collect();
    let mut seen = BTreeSet::new();
    while let Some(at) = stack.pop() {
        if at == to {
            return true;
        }
        if seen.insert(at) {
            stack.extend(packages[at].uses.iter().map(String::as_str));
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(name: &str, published: bool, uses: &[&str]) -> (String, Package) {
        let package = Package {
            name: name.into(),
            folder: name.into(),
            published,
            uses: uses.iter().map(|u| u.to_string()).collect(),
        };
        (name.into(), package)
    }

    #[test]
    fn a_published_package_on_an_unpublished_one_is_an_error() {
        let packages = BTreeMap::from([
            package("lib", true, &[]),
            package("cli", true, &["lib", "helpers"]),
            package("helpers", false, &["lib"]),
        ]);
        let problems = arrows(&packages);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("cli is published and depends on helpers"));
    }

    #[test]
    fn metadata_is_read_with_folders_and_publishing() {
        let root = Path::new("/w");
        let metadata = serde_json::json!({"packages": [
            {"name": "a", "manifest_path": "/w/Cargo.toml", "publish": null,
             "dependencies": [{"name": "b", "kind": null}, {"name": "c", "kind": "dev"}, {"name": "tokio", "kind": null}]},
            {"name": "b", "manifest_path": "/w/b/Cargo.toml", "publish": null, "dependencies": []},
            {"name": "c", "manifest_path": "/w/c/Cargo.toml", "publish": [], "dependencies": [{"name": "a", "kind": null}]}
        ]});
        let packages = parse(root, &metadata).unwrap();
        assert_eq!(packages["a"].folder, ".");
        assert_eq!(packages["a"].uses, BTreeSet::from(["b".to_string()]));
        assert!(!packages["c"].published && packages["b"].published);
        assert!(arrows(&packages).is_empty());
    }
}
