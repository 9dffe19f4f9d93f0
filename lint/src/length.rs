//! Long functions: none runs past 80 lines unless the comment above it says why (`long
//! because`). Tests are exempt (they read top to bottom): a file's `#[cfg(test)]` part, and
//! in a `tests/` folder every `#[test]` function (its helpers are not).

use std::path::Path;

use crate::source::{functions, is_test, said_above};

/// The longest a function may run, in lines, without saying why.
pub(crate) const LONGEST: usize = 80;

/// The functions of `text` longer than the limit whose comment does not say why: name and
/// length. `tests`: the text is a test file's, whose test functions are exempt.
pub(crate) fn long_functions(text: &str, tests: bool) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    functions(text)
        .into_iter()
        .filter(|f| !(tests && is_test(&lines, f.first)))
        .filter(|f| !said_above(&lines, f.first, "long because"))
        .map(|f| (f.name, f.last - f.first + 1))
        .filter(|(_, length)| *length > LONGEST)
        .collect()
}

/// One line per function of `file` past the limit. `tests`: a file of a `tests/` folder.
pub(crate) fn check(file: &Path, tests: bool) -> Vec<String> {
    let text = crate::source::before_tests(file);
    long_functions(&text, tests)
        .into_iter()
        .map(|(name, length)| {
            format!(
                "{}: {name} runs {length} lines: split it, or say why it is long (`long because`)",
                file.display()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_check_counts_a_long_function() {
        let body = "    let x = 1;\n".repeat(LONGEST);
        let long = format!("fn big() {{\n{body}}}\n");
        assert_eq!(
            long_functions(&long, false),
            vec![("big".to_string(), LONGEST + 2)]
        );
        let explained = format!("/// long because: one table.\n{long}");
        assert!(long_functions(&explained, false).is_empty());
        let short = format!("fn small() {{\n{}}}\n", "    let x = 1;\n".repeat(10));
        assert!(long_functions(&short, false).is_empty());
        for declaration in [
            "pub(in crate::a) async fn big() {",
            "pub const unsafe fn big() {",
        ] {
            let long = format!("{declaration}\n{body}}}\n");
            assert_eq!(
                long_functions(&long, false),
                vec![("big".to_string(), LONGEST + 2)]
            );
        }
    }

    #[test]
    fn a_test_may_be_long_and_its_helpers_may_not() {
        let body = "    let x = 1;\n".repeat(LONGEST);
        let test =
            format!("#[tokio::test(flavor = \"multi_thread\")]\nasync fn big() {{\n{body}}}\n");
        assert!(long_functions(&test, true).is_empty());
        let helper = format!("fn helper() {{\n{body}}}\n");
        assert_eq!(long_functions(&helper, true).len(), 1);
    }
}
