//! Reading Rust source as text: the files under a folder, a file's code without its tests and
//! comment lines, and the functions a text declares.

use std::path::{Path, PathBuf};

/// The `.rs` files under `dir` (none if it does not exist), in a stable order.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// A file's text up to its test module (tests may be long and repeat themselves: they are
/// read top to bottom): see [`before_test_module`].
pub(crate) fn before_tests(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    before_test_module(&text).to_string()
}

/// `text` up to its test module: the first `#[cfg(test)]` line whose next line declares a
/// `mod`. A `#[cfg(test)]` on anything else (a block inside a function, a test-only helper or
/// import, a mention in a comment) does not end it: what follows is read too.
pub(crate) fn before_test_module(text: &str) -> &str {
    let mut lines = text.split_inclusive('\n').peekable();
    let mut end = 0;
    while let Some(line) = lines.next() {
        let declares_mod = |next: &&str| next.split_whitespace().any(|word| word == "mod");
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(declares_mod) {
            return &text[..end];
        }
        end += line.len();
    }
    text
}

/// [`before_tests`], its comment lines left out.
pub(crate) fn code(file: &Path) -> String {
    let text = before_tests(file);
    let code: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    code.join("\n")
}

/// A function a text declares: its name, and its lines from the `fn` line to the one that
/// closes its first brace (0-based, inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Function {
    pub(crate) name: String,
    pub(crate) first: usize,
    pub(crate) last: usize,
}

/// The functions `text` declares, in order (nested ones too).
pub(crate) fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        let (mut depth, mut opened, mut last) = (0i64, false, i);
        for (j, l) in lines.iter().enumerate().skip(i) {
            let (opens, closes) = braces(l);
            depth += opens - closes;
            opened |= opens > 0;
            last = j;
            if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                break;
            }
        }
        found.push(Function {
            name: name.to_string(),
            first: i,
            last,
        });
    }
    found
}

/// The braces of a line that are code: none inside a string or a character literal, and none
/// after a `//` comment.
fn braces(line: &str) -> (i64, i64) {
    let (mut opens, mut closes) = (0, 0);
    let chars: Vec<char> = line.chars().collect();
    let (mut i, mut in_string) = (0, false);
    while i < chars.len() {
        match (chars[i], in_string) {
            ('\\', true) => i += 1,
            ('"', _) => in_string = !in_string,
            ('/', false) if chars.get(i + 1) == Some(&'/') => break,
            // A character literal: 'x' or '\x' (a lifetime has no closing quote).
            ('\'', false) if chars.get(i + 2) == Some(&'\'') => i += 2,
            ('\'', false) if chars.get(i + 1) == Some(&'\\') => {
                while i + 1 < chars.len() && chars[i + 1] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            ('{', false) => opens += 1,
            ('}', false) => closes += 1,
            _ => {}
        }
        i += 1;
    }
    (opens, closes)
}

/// The name of the function a line declares, if it declares one (any visibility, `const`,
/// `async`, `unsafe`).
pub(crate) fn function_name(line: &str) -> Option<&str> {
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

/// Whether the attributes and doc lines just above line `at` say `marker` (`long because`).
pub(crate) fn said_above(lines: &[&str], at: usize, marker: &str) -> bool {
    lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with("///") || l.trim_start().starts_with("#["))
        .any(|l| l.contains(marker))
}

/// Whether the attributes just above line `at` make the function a test.
pub(crate) fn is_test(lines: &[&str], at: usize) -> bool {
    lines[..at]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with("///") || l.trim_start().starts_with("#["))
        .any(|l| l.contains("test]") || l.contains("test("))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_run_from_their_line_to_their_closing_brace() {
        let text = "fn a() {\n    1\n}\npub(crate) async fn b<T>(x: T) {\n    if x {\n    }\n}\n";
        let found = functions(text);
        assert_eq!(
            found,
            [
                Function {
                    name: "a".into(),
                    first: 0,
                    last: 2
                },
                Function {
                    name: "b".into(),
                    first: 3,
                    last: 6
                },
            ]
        );
        assert_eq!(
            function_name("pub(in crate::a) const unsafe fn c() {"),
            Some("c")
        );
        assert_eq!(function_name("let f = 1;"), None);
        assert_eq!(braces(r#"if x == '{' { let s = "}}"; // }"#), (1, 0));
        assert_eq!(braces(r"match c { '\'' => {} }"), (2, 2));
        assert_eq!(braces("fn f<'a>(x: &'a str) {"), (1, 0));
    }
}
