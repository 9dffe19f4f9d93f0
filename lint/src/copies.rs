//! Copied functions: two functions of the workspace (its sources, tests and examples) whose
//! bodies are the same line for line, indentation and comments set aside, with at least
//! [`SHORTEST`] lines. One should call the other, or both a third in a place they share.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::source::functions;

/// The fewest body lines that make a copy worth a line of the report.
pub(crate) const SHORTEST: usize = 6;

/// A function's body as the comparison sees it: its lines trimmed, blank ones left out.
fn body(lines: &[&str]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// One line per group of functions with the same body among `texts` (a place's name, its
/// text).
pub(crate) fn copies(texts: &[(String, String)]) -> Vec<String> {
    let mut seen: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for (place, text) in texts {
        let lines: Vec<&str> = text.lines().collect();
        for function in functions(text) {
            let body = body(&lines[function.first + 1..=function.last]);
            if body.len() >= SHORTEST {
                let at = format!("{place}:{} ({})", function.first + 1, function.name);
                seen.entry(body).or_default().push(at);
            }
        }
    }
    seen.into_values()
        .filter(|places| places.len() > 1)
        .map(|places| {
            format!(
                "the same function body in {}: keep one, and call it from the others",
                places.join(" and ")
            )
        })
        .collect()
}

/// [`copies`] among `files`, read up to their test modules.
pub(crate) fn check(files: &[PathBuf]) -> Vec<String> {
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.display().to_string(), crate::source::code(f)))
        .collect();
    copies(&texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_found_whatever_its_name_and_indentation() {
        let body = (0..SHORTEST)
            .map(|i| format!("    let x{i} = {i};\n"))
            .collect::<String>();
        let a = format!("fn one() {{\n{body}}}\n");
        let b = format!("impl X {{\n    fn two() {{\n{body}    }}\n}}\n");
        let found = copies(&[("a.rs".into(), a.clone()), ("b.rs".into(), b)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("a.rs:1 (one)") && found[0].contains("b.rs:2 (two)"));
        let short = "fn s() {\n    1\n}\n".to_string();
        assert!(copies(&[("a.rs".into(), short.clone()), ("b.rs".into(), short)]).is_empty());
        let other = a.replace("let x0 = 0", "let x0 = 7");
        assert!(copies(&[("a.rs".into(), a), ("c.rs".into(), other)]).is_empty());
    }

    /// A copy after a `#[cfg(test)]` helper is read (the check once stopped at any
    /// `#[cfg(test)]`); one inside the test module is not.
    #[test]
    fn a_copy_after_a_test_helper_is_found_and_one_in_the_tests_is_not() {
        let body = (0..SHORTEST)
            .map(|i| format!("    let x{i} = {i};\n"))
            .collect::<String>();
        let dir = std::env::temp_dir().join(format!("zkfence-lint-copies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let helper = "#[cfg(test)]\nfn helper() {}\n";
        let a = write("a.rs", format!("{helper}fn one() {{\n{body}}}\n"));
        let b = write("b.rs", format!("fn two() {{\n{body}}}\n"));
        let c = write(
            "c.rs",
            format!("#[cfg(test)]\nmod tests {{\n    fn three() {{\n{body}    }}\n}}\n"),
        );
        assert_eq!(check(&[a.clone(), b.clone()]).len(), 1);
        assert!(check(&[b, c]).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
