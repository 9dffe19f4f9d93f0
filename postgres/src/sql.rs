//! The SQL a fence installs and runs: the fence table, the claim function, and the statements
//! the Rust side sends; each built for a schema, and for a mutant where one is set.

use zkfence::fence::FenceTicket;

pub use zkfence::fence::{BAD_CLAIM, REFUSED};

/// How the claim function compares a token with the fence (the sound rule, or a mutant's).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compare {
    /// Refuse a lower token; accept an equal one; raise to a higher one.
    Sound,
    /// Refuse an equal token too (`>` for `>=`).
    StrictlyGreater,
    /// Accept only an equal token.
    Equality,
    /// Compare the decimal texts.
    Strings,
    /// Refuse a scope with no fence yet.
    NoUpsert,
}

/// A schema-qualified name: `"schema".name`, or `name` alone (the search path's).
pub(crate) fn qualified(schema: Option<&str>, name: &str) -> String {
    match schema {
        Some(schema) => format!("{}.{name}", quote_ident(schema)),
        None => name.to_owned(),
    }
}

/// `ident` as a quoted SQL identifier.
fn quote_ident(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// The script that creates (or updates) the fence table and the claim function in `schema`:
/// idempotent, safe to run on every start or from a migration tool.
pub(crate) fn install(schema: Option<&str>, compare: Compare) -> String {
    let table = qualified(schema, "zkfence_fence");
    let claim = qualified(schema, "zkfence_claim");
    let create_schema = match schema {
        Some(schema) => format!("CREATE SCHEMA IF NOT EXISTS {};\n", quote_ident(schema)),
        None => String::new(),
    };
    let refuse_if = match compare {
        Compare::Sound | Compare::NoUpsert => "p_token < seen",
        Compare::StrictlyGreater => "p_token <= seen",
        Compare::Equality => "p_token <> seen",
        Compare::Strings => "p_token::text < seen::text",
    };
    let first_claim = match compare {
        Compare::NoUpsert => format!(
            "RAISE EXCEPTION 'zkfence: refused: % has no fence yet; our token %; the fence holds none', p_scope, p_token
          USING ERRCODE = '{REFUSED}', DETAIL = '-1';"
        ),
        _ => format!(
            "INSERT INTO {table} AS f (scope, token) VALUES (p_scope, p_token) ON CONFLICT (scope) DO NOTHING;
      IF FOUND THEN
        RETURN NULL;
      END IF;"
        ),
    };
    format!(
        r#"{create_schema}-- zkfence: one row per scope (a lock path): the highest fencing token accepted.
CREATE TABLE IF NOT EXISTS {table} (
  scope   text PRIMARY KEY,
  token   bigint NOT NULL CHECK (token >= 0),
  claims  bigint NOT NULL DEFAULT 1,
  updated timestamptz NOT NULL DEFAULT now()
);

-- zkfence_claim(scope, token): raises the scope's fence to token, or raises SQLSTATE {REFUSED}
-- (DETAIL: the token the fence holds) when a newer holder has claimed it. Returns the token the
-- fence held before (NULL on the scope's first claim). Call it as the first statement of every
-- transaction that writes under the lock: the fence row stays locked until that transaction
-- ends, so no older holder's transaction can commit after it, and no newer holder's can start
-- its writes before it ends. Every claim updates the row (claims + 1), so that under REPEATABLE
-- READ or SERIALIZABLE a transaction whose snapshot predates another's fenced commit fails with
-- a serialization error (retry it) rather than read around that commit.
CREATE OR REPLACE FUNCTION {claim}(p_scope text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
-- The fence table is found where it was installed, whatever a caller's search_path is.
SET search_path FROM CURRENT
AS $zkfence$
DECLARE
  seen bigint;
BEGIN
  IF p_scope IS NULL OR p_scope = '' OR p_token IS NULL OR p_token < 0 THEN
    RAISE EXCEPTION 'zkfence_claim(%, %): give the lock path and its fencing token (a bigint from 0)', p_scope, p_token
      USING ERRCODE = '{BAD_CLAIM}';
  END IF;
  LOOP
    SELECT f.token INTO seen FROM {table} AS f WHERE f.scope = p_scope FOR UPDATE;
    IF FOUND THEN
      IF {refuse_if} THEN
        RAISE EXCEPTION 'zkfence: refused: a newer lock holder claimed %; our token %; the fence holds %', p_scope, p_token, seen
          USING ERRCODE = '{REFUSED}', DETAIL = seen::text,
                HINT = 'stop writing under this hold; if every holder is refused, see zkfence fence show';
      END IF;
      UPDATE {table} AS f SET token = p_token, claims = f.claims + 1, updated = now()
        WHERE f.scope = p_scope;
      RETURN seen;
    ELSE
      {first_claim}
    END IF;
  END LOOP;
END
$zkfence$;
"#
    )
}

/// The claim, as the Rust side sends it.
pub(crate) fn claim(schema: Option<&str>) -> String {
    format!("SELECT {}($1, $2)", qualified(schema, "zkfence_claim"))
}

/// The token the fence holds for a scope.
pub(crate) fn seen(schema: Option<&str>) -> String {
    format!(
        "SELECT token FROM {} WHERE scope = $1",
        qualified(schema, "zkfence_fence")
    )
}

/// Every scope's fence.
pub(crate) fn scopes(schema: Option<&str>) -> String {
    format!(
        "SELECT scope, token, claims, to_char(updated AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
         FROM {} ORDER BY scope",
        qualified(schema, "zkfence_fence")
    )
}

/// Sets a scope's fence to `$2` whatever it held (the operator's rebase), returning what it
/// held; no row when the scope has no fence.
pub(crate) fn rebase(schema: Option<&str>) -> String {
    let table = qualified(schema, "zkfence_fence");
    format!(
        "WITH old AS (SELECT scope, token FROM {table} WHERE scope = $1 FOR UPDATE)
         UPDATE {table} AS f SET token = $2, claims = f.claims + 1, updated = now()
         FROM old WHERE f.scope = old.scope RETURNING old.token"
    )
}

/// The claim's parameters for `ticket`.
pub(crate) fn params(ticket: &FenceTicket) -> (String, i64) {
    (ticket.scope().to_owned(), ticket.token().as_i64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(qualified(Some("ops"), "t"), "\"ops\".t");
        assert_eq!(qualified(Some("a\"b"), "t"), "\"a\"\"b\".t");
        assert_eq!(qualified(None, "t"), "t");
    }

    #[test]
    fn only_mutants_change_the_comparison() {
        let sound = install(None, Compare::Sound);
        assert!(sound.contains("IF p_token < seen THEN"));
        assert!(sound.contains("ON CONFLICT (scope) DO NOTHING"));
        let strict = install(None, Compare::StrictlyGreater);
        assert!(strict.contains("IF p_token <= seen THEN"));
        assert!(!install(None, Compare::NoUpsert).contains("INSERT"));
    }
}
