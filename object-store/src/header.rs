//! The header every fenced object starts with: the fence's token, the write's id, whether the
//! object holds a value, and the scope, on one line before the caller's payload.
//!
//! ```text
//! zkfence-fence 1 0000000004294967339 0b5d4f2c9c6e4f4e8a3e1d2c3b4a5f60 value /locks/orders\n<payload>
//! ```
//!
//! The token is **in the bytes** because that is what an object store's ETag covers: S3's is a
//! hash of the content alone, so a token kept in metadata (or nowhere) would leave two writes
//! of the same payload with one ETag, and a stale `If-Match` would pass (see the crate docs).
//! The write id makes every write's bytes, and so its ETag, unique, and lets a writer recognise
//! its own write when the store's client retried it after a lost reply.

use std::fmt::Write as _;

/// The first word of every fenced object.
const MAGIC: &str = "zkfence-fence";

/// The format's version, after the magic word.
const FORMAT: &str = "1";

/// How far into an object its header's newline may be: the fixed fields and a scope.
const MAX_HEADER: usize = 64 * 1024;

/// The width of a token in the header: every `i64` from 0 fits, zero-padded.
const TOKEN_DIGITS: usize = 19;

/// Whether a fenced object holds a value, or none (claimed before its first write, or deleted:
/// a tombstone, which keeps the fence's token).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Value,
    Empty,
}

impl State {
    fn word(self) -> &'static str {
        match self {
            State::Value => "value",
            State::Empty => "empty",
        }
    }
}

/// A write's id: 128 random bits, printed as 32 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WriteId(u128);

impl WriteId {
    /// A fresh, random id.
    pub(crate) fn new() -> WriteId {
        WriteId(uuid::Uuid::new_v4().as_u128())
    }

    /// The id the `EtagOnly` mutant writes every time (zkfence's own tests).
    pub(crate) const CONSTANT: WriteId = WriteId(0);
}

/// A header as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) token: i64,
    pub(crate) write_id: WriteId,
    pub(crate) state: State,
    pub(crate) scope: String,
    /// Where the payload starts.
    pub(crate) len: usize,
}

/// The header line of a write of `token` by `write_id` in `scope`, newline included.
pub(crate) fn encode(token: i64, write_id: WriteId, state: State, scope: &str) -> String {
    let mut line = String::with_capacity(80 + scope.len());
    let _ = writeln!(
        line,
        "{MAGIC} {FORMAT} {token:0width$} {:032x} {} {scope}",
        write_id.0,
        state.word(),
        width = TOKEN_DIGITS,
    );
    line
}

/// Reads the header at the start of `bytes`; `Err` says why it is not one.
pub(crate) fn parse(bytes: &[u8]) -> Result<Header, &'static str> {
    let window = &bytes[..bytes.len().min(MAX_HEADER)];
    let end = window
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let line = std::str::from_utf8(&window[..end]).map_err(|_| "a header that is not UTF-8")?;
    let mut fields = line.splitn(6, ' ');
    if fields.next() != Some(MAGIC) {
        return Err("no zkfence-fence header");
    }
    if fields.next() != Some(FORMAT) {
        return Err("a header of another format version");
    }
    let token = fields
        .next()
        .filter(|t| t.len() == TOKEN_DIGITS && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse::<i64>().ok())
        .ok_or("a header whose token is not 19 digits")?;
    let write_id = fields
        .next()
        .filter(|id| id.len() == 32)
        .and_then(|id| u128::from_str_radix(id, 16).ok())
        .map(WriteId)
        .ok_or("a header whose write id is not 32 hex digits")?;
    let state = match fields.next() {
        Some("value") => State::Value,
        Some("empty") => State::Empty,
        _ => return Err("a header whose state is neither `value` nor `empty`"),
    };
    let scope = fields
        .next()
        .filter(|s| !s.is_empty())
        .ok_or("a header without a scope")?;
    Ok(Header {
        token,
        write_id,
        state,
        scope: scope.to_owned(),
        len: end + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_ends_where_the_payload_starts() {
        let id = WriteId(0x0b5d4f2c9c6e4f4e8a3e1d2c3b4a5f60);
        for (token, state, scope) in [
            (0, State::Value, "/locks/a"),
            (4294967339, State::Empty, "/odd scope: with spaces"),
            (i64::MAX, State::Value, "x"),
        ] {
            let line = encode(token, id, state, scope);
            let mut object = line.clone().into_bytes();
            object.extend_from_slice(b"payload\nwith lines");
            let header = parse(&object).unwrap();
            assert_eq!(
                (header.token, header.write_id, header.state),
                (token, id, state)
            );
            assert_eq!(header.scope, scope);
            assert_eq!(&object[header.len..], b"payload\nwith lines");
        }
    }

    #[test]
    fn tokens_are_fixed_width() {
        let id = WriteId::CONSTANT;
        let a = encode(9, id, State::Value, "/s");
        let b = encode(10, id, State::Value, "/s");
        assert_eq!(a.len(), b.len());
        assert!(a.contains(" 0000000000000000009 "), "{a}");
    }

    #[test]
    fn what_is_not_a_header_says_why() {
        let good = encode(5, WriteId(1), State::Value, "/s");
        let cases = [
            (String::new(), "no header line"),
            ("plain data\n".to_owned(), "no zkfence-fence header"),
            (good.replace(" 1 ", " 2 "), "another format version"),
            (good.replace("0000000000000000005", "5"), "19 digits"),
            (
                good.replace("0000000000000000005", "-000000000000000005"),
                "19 digits",
            ),
            (good.replace(" value ", " other "), "neither"),
            (good.replace(" /s", ""), "without a scope"),
        ];
        for (text, why) in cases {
            let err = parse(text.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{text:?}: {err}");
        }
        assert!(parse(&vec![b'a'; MAX_HEADER + 10]).is_err());
    }
}
