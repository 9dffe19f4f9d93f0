//! The library's layers, checked against its imports: the map's table "The library's layers"
//! lists the top-level modules of `src/` layer by layer, from the bottom up; a module may use
//! its own layer and the ones below, never one above. The row `beside every layer` holds
//! modules every layer may use (the options, the error, the metrics); they use only each other.
//! A module the table does not place, or places twice, is a problem too: the order is only as
//! good as the table is whole.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::imports::Edges;

/// The heading of the map's section that holds the table.
const SECTION: &str = "## The library's layers";

/// The first cell of the row whose modules any layer may use.
const BESIDE: &str = "beside every layer";

/// Where a module stands: its layer's number from the bottom (0 first) and name, or beside.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// In a layer: its rank from the bottom, and its name.
    Layer(usize, String),
    /// Beside every layer.
    Beside,
}

/// The modules a table cell names: `src/x.rs` and `src/x/` both name `x`.
fn modules_named(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|w| w.strip_prefix("src/"))
        .filter(|w| !w.trim_end_matches('/').contains('/'))
        .map(|w| w.trim_end_matches('/').trim_end_matches(".rs").to_string())
        .collect()
}

/// Each module's place, as the layers' table of `map` gives it, or the problems reading it.
fn places(map: &str) -> Result<BTreeMap<String, Place>, Vec<String>> {
    let Some(start) = map.find(SECTION) else {
        return Err(vec![format!(
            "no section `{SECTION}` with the layers' table"
        )]);
    };
    let section = &map[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let rows = section
        .lines()
        .filter(|l| l.starts_with('|') && !l.contains("---"))
        .skip(1);
    let (mut places, mut problems) = (BTreeMap::new(), Vec::new());
    for (rank, row) in rows.enumerate() {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(name), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let place = match *name {
            BESIDE => Place::Beside,
            name => Place::Layer(rank, name.to_string()),
        };
        for module in modules_named(modules) {
            if places.insert(module.clone(), place.clone()).is_some() {
                problems.push(format!("the layers' table places `{module}` twice"));
            }
        }
    }
    if places.is_empty() {
        return Err(vec!["the layers' table places no module".into()]);
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(places)
}

/// One line per use the places forbid: a layer using one above it, a module beside the layers
/// using a layer, or a module the table does not place.
fn misuses(uses: &Edges, places: &BTreeMap<String, Place>) -> Vec<String> {
    let mut problems = BTreeSet::new();
    let named = |m: &str| format!("`{m}`");
    for (from, tos) in uses.iter().filter(|(from, _)| !from.is_empty()) {
        let Some(at) = places.get(from) else {
            problems.insert(format!(
                "{} is in no layer: add it to the layers' table",
                named(from)
            ));
            continue;
        };
        // A use of the crate root is a circle, which the imports' check reports.
        for to in tos.iter().filter(|to| !to.is_empty()) {
            let problem = match (at, places.get(to)) {
                (_, None) => format!("{} is in no layer: add it to the layers' table", named(to)),
                (_, Some(Place::Beside)) => continue,
                (Place::Beside, Some(Place::Layer(_, layer))) => format!(
                    "{} (beside every layer) uses {} (layer `{layer}`): move what it needs beside the layers, or the module into a layer",
                    named(from),
                    named(to)
                ),
                (Place::Layer(low, below), Some(Place::Layer(high, above))) if high > low => {
                    format!(
                        "{} (layer `{below}`) uses {} (layer `{above}`, above it): move what it needs down, or correct the table",
                        named(from),
                        named(to)
                    )
                }
                _ => continue,
            };
            problems.insert(problem);
        }
    }
    problems.into_iter().collect()
}

/// One line per place the library's imports break the layer order of the map `map_file`.
pub(crate) fn check(root: &Path, map_file: &str) -> Vec<String> {
    let Ok(map) = std::fs::read_to_string(root.join(map_file)) else {
        return Vec::new(); // The map's own check says it is missing.
    };
    let problems = match places(&map) {
        Err(unread) => unread,
        Ok(places) => misuses(&crate::imports::top_level_uses(&root.join("src")), &places),
    };
    problems
        .into_iter()
        .map(|p| format!("{map_file}: {p}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &str = "## The library's layers\n\n\
        | layer | modules | what |\n| --- | --- | --- |\n\
        | requests | `src/requests/`, `src/wait.rs` | x |\n\
        | locks | `src/lock.rs` | y |\n\
        | beside every layer | `src/error.rs` | z |\n\n## Next\n| a | `src/other.rs` | |\n";

    fn uses(edges: &[(&str, &str)]) -> Edges {
        let mut uses = Edges::new();
        for (from, to) in edges {
            uses.entry(from.to_string())
                .or_default()
                .insert(to.to_string());
        }
        uses
    }

    #[test]
    fn the_table_is_read_bottom_first_and_only_its_own_section() {
        let places = places(MAP).unwrap();
        assert_eq!(places["requests"], Place::Layer(0, "requests".into()));
        assert_eq!(places["wait"], Place::Layer(0, "requests".into()));
        assert_eq!(places["lock"], Place::Layer(1, "locks".into()));
        assert_eq!(places["error"], Place::Beside);
        assert!(!places.contains_key("other"));
    }

    #[test]
    fn a_layer_may_use_itself_below_and_beside_but_not_above() {
        let places = places(MAP).unwrap();
        let fine = uses(&[
            ("lock", "requests"),
            ("requests", "wait"),
            ("requests", "error"),
            ("", "lock"),
        ]);
        assert!(misuses(&fine, &places).is_empty());
        let up = misuses(&uses(&[("requests", "lock")]), &places);
        assert_eq!(up.len(), 1);
        assert!(
            up[0].contains("`requests` (layer `requests`) uses `lock`"),
            "{up:?}"
        );
        let beside = misuses(&uses(&[("error", "requests")]), &places);
        assert!(beside[0].contains("beside every layer"), "{beside:?}");
        let unplaced = misuses(&uses(&[("lock", "other")]), &places);
        assert!(
            unplaced[0].contains("`other` is in no layer"),
            "{unplaced:?}"
        );
    }

    #[test]
    fn a_module_placed_twice_is_a_problem() {
        let twice = MAP.replace("`src/lock.rs`", "`src/lock.rs`, `src/wait.rs`");
        assert!(places(&twice).unwrap_err()[0].contains("`wait` twice"));
    }
}
