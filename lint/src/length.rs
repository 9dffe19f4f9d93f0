//! Long functions: none runs past 50 lines in the library's own `src/`, nor past 80 anywhere
//! else (the other packages' `src/`, every `tests/` and `examples/`), unless the comment above
//! it says why (`long because`). Long files: none of the library's `src/` runs past 600 lines
//! before its test module (a room a newcomer can read). Tests are exempt (they read top to bottom): a file's test
//! module (a `mod` under `#[cfg(test)]`), and in a `tests/` folder every `#[test]` function
//! (its helpers are not). Code after a `#[cfg(test)]` on anything else (a block, a helper) is
//! held to the limit like the rest.

use std::path::Path;

use crate::source::{before_tests, functions, is_test, said_above};

/// The longest a function may run, in lines, without saying why: the tools', the fences', the
/// tests' and the examples'.
pub(crate) const LONGEST: usize = 80;

/// The longest a function of the library's own `src/` may run without saying why: the code a
/// reader of the product reads, each step a function of its own.
pub(crate) const LONGEST_IN_LIBRARY: usize = 50;

/// The most lines a file of the library's own `src/` may have before its test module.
pub(crate) const LONGEST_FILE_IN_LIBRARY: usize = 600;

/// The functions of `text` longer than `longest` lines whose comment does not say why: name
/// and length. `tests`: the text is a test file's, whose test functions are exempt.
pub(crate) fn long_functions(text: &str, tests: bool, longest: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    functions(text)
        .into_iter()
        .filter(|f| !(tests && is_test(&lines, f.first)))
        .filter(|f| !said_above(&lines, f.first, "long because"))
        .map(|f| (f.name, f.last - f.first + 1))
        .filter(|(_, length)| *length > longest)
        .collect()
}

/// One line per function of `file` past `longest` lines. `tests`: a file of a `tests/` folder.
pub(crate) fn check(file: &Path, tests: bool, longest: usize) -> Vec<String> {
    long_functions(&before_tests(file), tests, longest)
        .into_iter()
        .map(|(name, length)| {
            format!(
                "{}: {name} runs {length} lines (at most {longest}): split it, or say why it is \
                 long (`long because`)",
                file.display()
            )
        })
        .collect()
}

/// A problem if `file` (of the library's `src/`) has more than `longest` lines before its test
/// module.
pub(crate) fn check_file(file: &Path, longest: usize) -> Option<String> {
    let lines = before_tests(file).lines().count();
    (lines > longest).then(|| {
        format!(
            "{}: {lines} lines before its tests (at most {longest}): split it by concern",
            file.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::before_test_module;

    #[test]
    fn the_length_check_counts_a_long_function() {
        let body = "    let x = 1;\n".repeat(LONGEST);
        let long = format!("fn big() {{\n{body}}}\n");
        assert_eq!(
            long_functions(&long, false, LONGEST),
            vec![("big".to_string(), LONGEST + 2)]
        );
        let explained = format!("/// long because: one table.\n{long}");
        assert!(long_functions(&explained, false, LONGEST).is_empty());
        let short = format!("fn small() {{\n{}}}\n", "    let x = 1;\n".repeat(10));
        assert!(long_functions(&short, false, LONGEST).is_empty());
        for declaration in [
            "pub(in crate::a) async fn big() {",
            "pub const unsafe fn big() {",
        ] {
            let long = format!("{declaration}\n{body}}}\n");
            assert_eq!(
                long_functions(&long, false, LONGEST),
                vec![("big".to_string(), LONGEST + 2)]
            );
        }
    }

    #[test]
    fn the_library_is_held_to_the_shorter_limit() {
        // A function of 52 lines: too long for the library, short enough for the others.
        let body = "    let x = 1;\n".repeat(LONGEST_IN_LIBRARY);
        let function = format!("fn middling() {{\n{body}}}\n");
        assert_eq!(
            long_functions(&function, false, LONGEST_IN_LIBRARY),
            vec![("middling".to_string(), LONGEST_IN_LIBRARY + 2)]
        );
        assert!(long_functions(&function, false, LONGEST).is_empty());
        let explained = format!("/// long because: one table.\n{function}");
        assert!(long_functions(&explained, false, LONGEST_IN_LIBRARY).is_empty());
        // At the limit exactly, it passes.
        let body = "    let x = 1;\n".repeat(LONGEST_IN_LIBRARY - 2);
        let function = format!("fn fits() {{\n{body}}}\n");
        assert!(long_functions(&function, false, LONGEST_IN_LIBRARY).is_empty());
    }

    #[test]
    fn only_the_test_module_is_left_out() {
        let body = "    let x = 1;\n".repeat(LONGEST_IN_LIBRARY);
        let long = format!("fn big() {{\n{body}}}\n");
        let gated = format!("fn ran() {{\n    #[cfg(test)]\n    {{\n    }}\n}}\n{long}");
        assert_eq!(before_test_module(&gated), gated);
        assert_eq!(
            long_functions(before_test_module(&gated), false, LONGEST_IN_LIBRARY).len(),
            1
        );
        let module = format!("fn small() {{\n}}\n#[cfg(test)]\nmod tests {{\n{long}}}\n");
        assert_eq!(before_test_module(&module), "fn small() {\n}\n");
        let public = "fn small() {\n}\n#[cfg(test)]\npub(crate) mod support;\n";
        assert_eq!(before_test_module(public), "fn small() {\n}\n");
    }

    #[test]
    fn a_long_file_is_found_and_its_tests_do_not_count() {
        let dir = std::env::temp_dir().join(format!("zkfence-lint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("long.rs");
        let code = "fn a() {}\n".repeat(10);
        std::fs::write(&file, &code).unwrap();
        assert_eq!(check_file(&file, 10), None);
        std::fs::write(&file, format!("{code}fn b() {{}}\n")).unwrap();
        let found = check_file(&file, 10).expect("an 11-line file past 10");
        assert!(found.contains("11 lines"), "{found}");
        let tests = format!("{code}#[cfg(test)]\nmod tests {{\n{code}}}\n");
        std::fs::write(&file, tests).unwrap();
        assert_eq!(check_file(&file, 10), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_test_may_be_long_and_its_helpers_may_not() {
        let body = "    let x = 1;\n".repeat(LONGEST);
        let test =
            format!("#[tokio::test(flavor = \"multi_thread\")]\nasync fn big() {{\n{body}}}\n");
        assert!(long_functions(&test, true, LONGEST).is_empty());
        let helper = format!("fn helper() {{\n{body}}}\n");
        assert_eq!(long_functions(&helper, true, LONGEST).len(), 1);
    }
}
