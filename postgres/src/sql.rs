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

/// What the installed claim does beyond the comparison: the sound fence's rules, or a
/// mutant's with one of them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    /// How a token is compared with the fence.
    pub(crate) compare: Compare,
    /// Whether a refusal inside a subtransaction ends the session (off: the mutant
    /// `RefusalInSavepoint`, whose refusal a savepoint's rollback undoes).
    pub(crate) doom_in_savepoint: bool,
    /// The longest a claimed transaction may sit idle before the server ends its session, in
    /// milliseconds; 0 for no bound (the mutant `NoIdleBound`, or a user's choice).
    pub(crate) idle_ms: u64,
}

/// The idle bound the claim sets when nobody says otherwise: 10 s.
pub(crate) const DEFAULT_IDLE_MS: u64 = 10_000;

/// The line of the claim's body that holds its idle bound, up to the number.
const IDLE_LINE: &str = "idle_limit constant bigint := ";

/// The script that creates (or updates) the fence table and the claim function in `schema`:
/// idempotent, safe to run on every start or from a migration tool.
pub(crate) fn install(schema: Option<&str>, rules: Rules) -> String {
    let table = qualified(schema, "zkfence_fence");
    let claim = qualified(schema, "zkfence_claim");
    let create_schema = match schema {
        Some(schema) => format!("CREATE SCHEMA IF NOT EXISTS {};\n", quote_ident(schema)),
        None => String::new(),
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
-- A refusal inside a savepoint (psql's ON_ERROR_ROLLBACK, a nested psycopg transaction(),
-- Django's nested atomic()) would be undone by the savepoint's rollback, and the writes after it
-- would commit: there the refusal also ends the session (pg_terminate_backend of its own
-- backend), so that nothing of the transaction commits. A claim also bounds how long its
-- transaction may sit idle (idle_in_transaction_session_timeout, SET LOCAL, never raised), so
-- that a holder frozen inside its open transaction releases the fence row to its successor.
CREATE OR REPLACE FUNCTION {claim}(p_scope text, p_token bigint) RETURNS bigint
LANGUAGE plpgsql
-- The fence table is found where it was installed, whatever a caller's search_path is.
SET search_path FROM CURRENT
AS $zkfence${body}$zkfence$;
"#,
        body = claim_body(&table, rules),
    )
}

/// The claim function's body (its `prosrc`), as [`install`] writes it and as the installed
/// one must read.
pub(crate) fn claim_body(table: &str, rules: Rules) -> String {
    let refuse_if = match rules.compare {
        Compare::Sound | Compare::NoUpsert => "p_token < seen",
        Compare::StrictlyGreater => "p_token <= seen",
        Compare::Equality => "p_token <> seen",
        Compare::Strings => "p_token::text < seen::text",
    };
    let bound = "IF idle_limit > 0 THEN
        current_limit := extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000;
        IF current_limit = 0 OR current_limit > idle_limit THEN
          PERFORM set_config('idle_in_transaction_session_timeout', idle_limit::text, true);
        END IF;
      END IF;";
    let first_claim = match rules.compare {
        Compare::NoUpsert => format!(
            "RAISE EXCEPTION 'zkfence: refused: % has no fence yet; our token %; the fence holds none', p_scope, p_token
          USING ERRCODE = '{REFUSED}', DETAIL = '-1';"
        ),
        _ => format!(
            "INSERT INTO {table} AS f (scope, token) VALUES (p_scope, p_token) ON CONFLICT (scope) DO NOTHING;
      IF FOUND THEN
        {bound}
        RETURN NULL;
      END IF;"
        ),
    };
    let (mark, hint) = refusal_doom(table, rules.doom_in_savepoint);
    format!(
        r#"
DECLARE
  seen bigint;
  {IDLE_LINE}{idle_ms};
  current_limit bigint;
  refused_xmin xid;
BEGIN
  IF p_scope IS NULL OR p_scope = '' OR p_token IS NULL OR p_token < 0 THEN
    RAISE EXCEPTION 'zkfence_claim(%, %): give the lock path and its fencing token (a bigint from 0)', p_scope, p_token
      USING ERRCODE = '{BAD_CLAIM}';
  END IF;
  LOOP
    SELECT f.token INTO seen FROM {table} AS f WHERE f.scope = p_scope FOR UPDATE;
    IF FOUND THEN
      IF {refuse_if} THEN
        {mark}
        RAISE EXCEPTION 'zkfence: refused: a newer lock holder claimed %; our token %; the fence holds %', p_scope, p_token, seen
          USING ERRCODE = '{REFUSED}', DETAIL = seen::text,
                HINT = {hint};
      END IF;
      UPDATE {table} AS f SET token = p_token, claims = f.claims + 1, updated = now()
        WHERE f.scope = p_scope;
      {bound}
      RETURN seen;
    ELSE
      {first_claim}
    END IF;
  END LOOP;
END
"#,
        idle_ms = rules.idle_ms,
    )
}

/// What a refusal does before it raises, and its HINT: inside a subtransaction (`doom`), the
/// row version the refusal writes carries the subtransaction's xid, not the top-level
/// transaction's; that is how the claim knows a savepoint could undo it, and there the HINT's
/// evaluation ends the session (so the client reads the refusal first). A read-only
/// transaction can commit no write: its refusal needs nothing more.
fn refusal_doom(table: &str, doom: bool) -> (String, &'static str) {
    const PLAIN: &str =
        "'stop writing under this hold; if every holder is refused, see zkfence fence show'";
    if !doom {
        return (String::new(), PLAIN);
    }
    let mark = format!(
        "IF current_setting('transaction_read_only') = 'off' THEN
          UPDATE {table} AS f SET claims = f.claims WHERE f.scope = p_scope RETURNING f.xmin INTO refused_xmin;
        END IF;"
    );
    let hint = "CASE WHEN refused_xmin IS NULL
                   OR refused_xmin::text::bigint = (pg_current_xact_id()::text::bigint & 4294967295)
                  THEN 'stop writing under this hold; if every holder is refused, see zkfence fence show'
                  ELSE 'stop writing under this hold: the claim ran inside a savepoint, whose rollback would undo the refusal, so this session ends now'
                       || CASE WHEN pg_terminate_backend(pg_backend_pid()) THEN '' ELSE ' (it could not end itself)' END
             END";
    (mark, hint)
}

/// The idle bound a claim function's body sets, in milliseconds (0: none); `None` for a body
/// that is not one of this version's.
#[cfg(feature = "conformance")]
pub(crate) fn idle_bound_of(body: &str) -> Option<u64> {
    let rest = &body[body.find(IDLE_LINE)? + IDLE_LINE.len()..];
    rest[..rest.find(';')?].trim().parse().ok()
}

/// The installed claim function's body and its table, for `schema`'s fence; no row when there
/// is no such function.
#[cfg(feature = "conformance")]
pub(crate) fn installed(schema: Option<&str>) -> String {
    let claim = qualified(schema, "zkfence_claim");
    format!(
        "SELECT p.prosrc FROM pg_catalog.pg_proc AS p WHERE p.oid = to_regprocedure({}::text)",
        literal(&format!("{claim}(text,bigint)"))
    )
}

/// `text` as a SQL string literal.
#[cfg(feature = "conformance")]
pub(crate) fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
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
        let rules = |compare| Rules {
            compare,
            doom_in_savepoint: true,
            idle_ms: DEFAULT_IDLE_MS,
        };
        let sound = install(None, rules(Compare::Sound));
        assert!(sound.contains("IF p_token < seen THEN"));
        assert!(sound.contains("ON CONFLICT (scope) DO NOTHING"));
        assert!(sound.contains("pg_terminate_backend"));
        let strict = install(None, rules(Compare::StrictlyGreater));
        assert!(strict.contains("IF p_token <= seen THEN"));
        assert!(!install(None, rules(Compare::NoUpsert)).contains("INSERT"));
    }

    #[test]
    fn the_idle_bound_reads_back_from_the_body() {
        let rules = Rules {
            compare: Compare::Sound,
            doom_in_savepoint: true,
            idle_ms: 2_500,
        };
        assert_eq!(idle_bound_of(&claim_body("t", rules)), Some(2_500));
        assert_eq!(idle_bound_of("BEGIN RETURN 1; END"), None);
    }
}
