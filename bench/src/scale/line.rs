//! One scale measurement ([`Line`]): what it measured and its figures, printed as one JSON line
//! as soon as it ends, and kept for the summary, which looks figures up by name.

use std::fmt::Write as _;

/// One measurement of one implementation at one size in one round.
#[derive(Debug, Clone)]
pub(super) struct Line {
    /// What was measured: `holds`, `waiters`, `semaphore`, `rwlock`, `election`, `raw`.
    pub(super) kind: &'static str,
    /// `zkfence`, `zkclient`, `curator` or `raw`.
    pub(super) implementation: &'static str,
    /// The round, from 1.
    pub(super) round: usize,
    /// The size: (name, value), e.g. `("locks", 1000)`; the summary groups by it.
    pub(super) size: Vec<(&'static str, usize)>,
    /// The figures; `None` where not measured (printed as `null`).
    pub(super) figures: Vec<(&'static str, Option<f64>)>,
    /// Extra fields as raw JSON text (requests by operation, notes).
    pub(super) extra: Vec<(&'static str, String)>,
}

impl Line {
    /// A line of `implementation`'s `kind` at `size` in `round`, without figures yet.
    pub(super) fn new(
        kind: &'static str,
        implementation: &'static str,
        round: usize,
        size: &[(&'static str, usize)],
    ) -> Line {
        Line {
            kind,
            implementation,
            round,
            size: size.to_vec(),
            figures: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Sets a figure (a new one goes last; one set again keeps its place).
    pub(super) fn set(&mut self, name: &'static str, value: Option<f64>) {
        let value = value.filter(|v| v.is_finite());
        match self.figures.iter_mut().find(|(n, _)| *n == name) {
            Some(figure) => figure.1 = value,
            None => self.figures.push((name, value)),
        }
    }

    /// Adds a raw JSON field.
    pub(super) fn raw(&mut self, name: &'static str, json: String) {
        self.extra.push((name, json));
    }

    /// A figure by name, if measured.
    pub(super) fn get(&self, name: &str) -> Option<f64> {
        (self.figures.iter())
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| *v)
    }

    /// A size by name.
    pub(super) fn size_of(&self, name: &str) -> Option<usize> {
        (self.size.iter())
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// The JSON line.
    pub(super) fn json(&self) -> String {
        // The object's braces as escapes, so that brace counting tools see balanced source.
        let mut out = String::from('\u{7b}');
        let _ = write!(
            out,
            "\"scale\":\"{}\",\"round\":{},\"impl\":\"{}\"",
            self.kind, self.round, self.implementation
        );
        for (name, value) in &self.size {
            let _ = write!(out, ",\"{name}\":{value}");
        }
        for (name, value) in &self.figures {
            match value {
                Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => {
                    let _ = write!(out, ",\"{name}\":{v:.0}");
                }
                Some(v) => {
                    let _ = write!(out, ",\"{name}\":{v:.4}");
                }
                None => {
                    let _ = write!(out, ",\"{name}\":null");
                }
            }
        }
        for (name, json) in &self.extra {
            let _ = write!(out, ",\"{name}\":{json}");
        }
        out.push('\u{7d}');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_json_object_with_its_size_and_figures() {
        let mut line = Line::new("holds", "zkfence", 2, &[("locks", 10)]);
        line.set("acquire_s", Some(1.5));
        line.set("multis", Some(3.0));
        line.set("missing", None);
        line.set("nan", Some(f64::NAN));
        line.set("multis", Some(3.0));
        line.raw("by_op", "{\"multi\":3}".into());
        assert_eq!(
            line.json(),
            r#"{"scale":"holds","round":2,"impl":"zkfence","locks":10,"acquire_s":1.5000,"multis":3,"missing":null,"nan":null,"by_op":{"multi":3}}"#
        );
        assert_eq!(line.get("acquire_s"), Some(1.5));
        assert_eq!(line.get("missing"), None);
        assert_eq!(line.size_of("locks"), Some(10));
    }
}
