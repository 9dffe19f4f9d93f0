//! The SQL a fence installs and sends: the fence table, the claim and seal procedures, and the
//! statements that begin and end a fenced transaction; each built for a database, and for a
//! mutant where one is set.

use std::fmt::Write as _;

/// The SQLSTATE `zkfence_claim` signals when it refuses a token: a newer holder has claimed
/// the scope. The message ends with the token the fence holds, in decimal.
pub const REFUSED: &str = "ZF001";

/// The SQLSTATE `zkfence_seal` signals when the fenced transaction it was to seal is gone:
/// rolled back under the work (a deadlock or a lock wait timeout that the work swallowed), so
/// that the statements since ran in another transaction, which is rolled back in its turn.
pub const ROLLED_BACK: &str = "ZF002";

/// The longest scope, in bytes: the fence table's key is `VARBINARY(1024)` (InnoDB keys are
/// limited to 3072 bytes).
pub const MAX_SCOPE_BYTES: usize = 1024;

/// How the claim procedure decides (the sound rule, or a mutant's).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// Reads the fence row `FOR UPDATE`; refuses a lower token, accepts an equal one, raises
    /// to a higher one; creates a missing row.
    Sound,
    /// Refuses an equal token too.
    StrictlyGreater,
    /// Refuses a scope with no fence yet.
    NoUpsert,
    /// Reads the fence row without `FOR UPDATE`: a plain read, which locks nothing.
    NoLockingRead,
}

/// `name`, qualified with `database` when there is one.
pub(crate) fn qualified(database: Option<&str>, name: &str) -> String {
    match database {
        Some(db) => format!("`{db}`.{name}"),
        None => name.to_owned(),
    }
}

/// The install script's statements, each sent alone (a procedure's body holds semicolons).
pub(crate) fn install(database: Option<&str>, claim: Claim) -> Vec<String> {
    let table = qualified(database, "zkfence_fence");
    let mut statements = Vec::new();
    if let Some(db) = database {
        statements.push(format!("CREATE DATABASE IF NOT EXISTS `{db}`"));
    }
    statements.push(format!(
        "CREATE TABLE IF NOT EXISTS {table} (
  scope   VARBINARY({MAX_SCOPE_BYTES}) NOT NULL PRIMARY KEY,
  token   BIGINT NOT NULL,
  claims  BIGINT NOT NULL DEFAULT 1,
  updated TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE = InnoDB"
    ));
    for (name, body) in [
        ("zkfence_claim", claim_procedure(database, claim)),
        ("zkfence_seal", seal_procedure(database)),
    ] {
        statements.push(format!(
            "DROP PROCEDURE IF EXISTS {}",
            qualified(database, name)
        ));
        statements.push(body);
    }
    statements
}

/// The install script as one text for the `mysql`/`mariadb` command-line client.
pub(crate) fn install_script(database: Option<&str>, claim: Claim) -> String {
    let mut script = String::from(
        "-- zkfence: the fence table (one row per scope, a lock path: the highest fencing token\n\
         -- accepted) and its procedures. Idempotent; run it with the mysql or mariadb client.\n\
         DELIMITER //\n",
    );
    for statement in install(database, claim) {
        let _ = write!(script, "{statement}\n//\n");
    }
    script.push_str("DELIMITER ;\n");
    script
}

fn claim_procedure(database: Option<&str>, claim: Claim) -> String {
    let table = qualified(database, "zkfence_fence");
    let name = qualified(database, "zkfence_claim");
    let read = match claim {
        Claim::NoLockingRead => "",
        _ => " FOR UPDATE",
    };
    let refuse_if = match claim {
        Claim::StrictlyGreater => "seen >= p_token",
        _ => "seen > p_token",
    };
    let first = match claim {
        Claim::NoUpsert => refuse("0"),
        _ => format!("INSERT INTO {table} (scope, token) VALUES (p_scope, p_token);"),
    };
    let refused = refuse("seen");
    format!(
        "CREATE PROCEDURE {name}(IN p_scope VARBINARY({MAX_SCOPE_BYTES}), IN p_token BIGINT)
  MODIFIES SQL DATA
  COMMENT 'zkfence: raises the scope''s fence to p_token, or signals SQLSTATE {REFUSED}; keeps the fence row locked to the end of the transaction'
BEGIN
  DECLARE seen BIGINT DEFAULT NULL;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET seen = NULL;
  IF p_scope IS NULL OR LENGTH(p_scope) = 0 OR p_token IS NULL OR p_token < 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'zkfence_claim: needs a scope and a token of 0 or more';
  END IF;
  SELECT token INTO seen FROM {table} WHERE scope = p_scope{read};
  IF seen IS NULL THEN
    {first}
  ELSEIF {refuse_if} THEN
    {refused}
  ELSEIF seen < p_token THEN
    UPDATE {table} SET token = p_token, claims = claims + 1, updated = CURRENT_TIMESTAMP(6)
      WHERE scope = p_scope;
  END IF;
  SELECT seen AS previous;
END"
    )
}

/// The statements that signal a refusal, `seen` the token to name.
fn refuse(seen: &str) -> String {
    format!(
        "SET @zkfence_refusal = CONCAT('zkfence: refused: a newer lock holder claimed this scope; the fence holds ', {seen});
    SIGNAL SQLSTATE '{REFUSED}' SET MESSAGE_TEXT = @zkfence_refusal;"
    )
}

fn seal_procedure(database: Option<&str>) -> String {
    let name = qualified(database, "zkfence_seal");
    let held = qualified(database, "zkfence_held");
    format!(
        "CREATE PROCEDURE {name}(IN p_scope VARBINARY({MAX_SCOPE_BYTES}))
  MODIFIES SQL DATA
  COMMENT 'zkfence: checks that the fenced transaction that claimed p_scope is still the open one'
BEGIN
  IF NOT EXISTS (SELECT 1 FROM {held} WHERE scope = p_scope) THEN
    SIGNAL SQLSTATE '{ROLLED_BACK}' SET MESSAGE_TEXT = 'zkfence: the fenced transaction was rolled back under its work (a deadlock or lock wait timeout it did not pass on); nothing of it commits';
  END IF;
  DELETE FROM {held} WHERE scope = p_scope;
END"
    )
}

/// `bytes` as a hexadecimal string literal (`X'2f61'`): a scope in a text statement, with
/// nothing to escape.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(3 + 2 * bytes.len());
    out.push_str("X'");
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out.push('\'');
    out
}

/// The statements that open a fenced transaction, sent as one: the isolation level (which
/// fails if a transaction is already open on the connection), autocommit off (so that nothing
/// after a rollback under the work commits on its own), the marker table, then per scope (in
/// order) the claim, unless `claims` is false (a mutant's), and its marker row.
pub(crate) fn begin(
    database: Option<&str>,
    level: mysql_async::IsolationLevel,
    tickets: &[(String, i64)],
    claims: bool,
) -> String {
    let held = qualified(database, "zkfence_held");
    let mut sql = format!(
        "SET TRANSACTION ISOLATION LEVEL {level}; SET autocommit = 0; \
         CREATE TEMPORARY TABLE IF NOT EXISTS {held} (scope VARBINARY({MAX_SCOPE_BYTES}) NOT NULL PRIMARY KEY) ENGINE = InnoDB"
    );
    for (scope, token) in tickets {
        let scope = hex(scope.as_bytes());
        if claims {
            let claim = qualified(database, "zkfence_claim");
            let _ = write!(sql, "; CALL {claim}({scope}, {token})");
        }
        let _ = write!(sql, "; INSERT INTO {held} (scope) VALUES ({scope})");
    }
    sql
}

/// The statements that end a fenced transaction, sent as one: the seals, `COMMIT`, autocommit
/// back on. A failed seal stops the rest (the server runs no statement after a failed one).
pub(crate) fn commit(database: Option<&str>, scopes: &[&str]) -> String {
    let seal = qualified(database, "zkfence_seal");
    let mut sql = String::new();
    for scope in scopes {
        let _ = write!(sql, "CALL {seal}({}); ", hex(scope.as_bytes()));
    }
    sql.push_str("COMMIT; SET autocommit = 1");
    sql
}

/// Ends whatever the fenced transaction left open.
pub(crate) const ROLLBACK: &str = "ROLLBACK; SET autocommit = 1";

/// The standalone claim (in its own transaction, or the caller's): a text statement, one
/// round trip (a prepared one costs a prepare on each new connection).
pub(crate) fn claim(database: Option<&str>, scope: &str, token: i64) -> String {
    let claim = qualified(database, "zkfence_claim");
    format!("CALL {claim}({}, {token})", hex(scope.as_bytes()))
}

/// A scope's fence.
pub(crate) fn seen(database: Option<&str>) -> String {
    let table = qualified(database, "zkfence_fence");
    format!("SELECT token FROM {table} WHERE scope = ?")
}

/// Every scope's fence.
pub(crate) fn scopes(database: Option<&str>) -> String {
    let table = qualified(database, "zkfence_fence");
    format!(
        "SELECT scope, token, claims, DATE_FORMAT(CONVERT_TZ(updated, @@session.time_zone, '+00:00'), '%Y-%m-%dT%H:%i:%SZ') \
         FROM {table} ORDER BY scope"
    )
}

/// The rows-affected mutant's claim: an update that counts on its affected rows.
pub(crate) fn conditional_update(database: Option<&str>) -> String {
    let table = qualified(database, "zkfence_fence");
    format!(
        "UPDATE {table} SET token = ?, claims = claims + 1, updated = CURRENT_TIMESTAMP(6) \
         WHERE scope = ? AND token <= ?"
    )
}

/// The rows-affected mutant's first claim.
pub(crate) fn insert(database: Option<&str>) -> String {
    let table = qualified(database, "zkfence_fence");
    format!("INSERT INTO {table} (scope, token) VALUES (?, ?)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_travel_as_hex() {
        assert_eq!(hex(b"/a'b"), "X'2f612762'");
        assert_eq!(hex(b""), "X''");
    }

    #[test]
    fn the_script_delimits_procedures() {
        let script = install_script(Some("ops"), Claim::Sound);
        assert!(script.contains("CREATE PROCEDURE `ops`.zkfence_claim"));
        assert!(script.contains("FOR UPDATE"));
        assert!(script.trim_end().ends_with("DELIMITER ;"));
        let mutant = install_script(None, Claim::NoLockingRead);
        assert!(!mutant.contains("FOR UPDATE"));
    }

    #[test]
    fn begin_claims_in_the_order_given() {
        let sql = begin(
            None,
            mysql_async::IsolationLevel::ReadCommitted,
            &[("/a".into(), 5), ("/b".into(), 7)],
            true,
        );
        let a = sql.find("zkfence_claim(X'2f61', 5)").unwrap();
        let b = sql.find("zkfence_claim(X'2f62', 7)").unwrap();
        assert!(sql.starts_with("SET TRANSACTION ISOLATION LEVEL READ COMMITTED"));
        assert!(a < b);
    }
}
