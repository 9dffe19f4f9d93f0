//! The SQL a fence installs and sends: the fence table, the claim and seal procedures, and the
//! statements that begin and end a fenced transaction; each built for a database, and for a
//! mutant where one is set.

use std::fmt::Write as _;

pub use zkfence::fence::{BAD_CLAIM, REFUSED, ROLLED_BACK};

/// The longest scope, in bytes of UTF-8: the fence table's key is `VARBINARY(1024)` (InnoDB keys
/// are limited to 3072 bytes), holding the scope's UTF-8 (`utf8mb4`) bytes whatever the client's
/// character set.
pub const MAX_SCOPE_BYTES: usize = 1024;

/// How long a fenced transaction may sit idle after its claim by default before MariaDB ends it
/// ([`MySqlFence::with_idle_timeout`](crate::MySqlFence::with_idle_timeout)), in seconds.
pub(crate) const IDLE_BOUND_SECS: u64 = 10;

/// The parameter type of a scope: text, converted by the server from the client's character
/// set to `utf8mb4` (a mutant's: the bytes as sent). Room for more characters than the key
/// holds bytes, so that a long scope is refused by its length rather than cut short.
fn scope_param(claim: Claim) -> String {
    match claim {
        Claim::ClientCharsetScope => format!("VARBINARY({MAX_SCOPE_BYTES})"),
        _ => format!("VARCHAR({}) CHARACTER SET utf8mb4", 2 * MAX_SCOPE_BYTES),
    }
}

/// How the claim procedure decides (the sound rule, or a mutant's).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// `zkfence_claim` creates a missing fence row, then reads it `FOR UPDATE`;
    /// `zkfence_begin` upserts it where it accepts and reads it only otherwise. Both refuse a
    /// lower token, accept an equal one, raise to a higher one, and lower the session's idle
    /// transaction timeouts to the bound. A refusal (or any failed claim, or seal) dooms
    /// what it refused: rolled back, and the session read-only until it says otherwise.
    Sound,
    /// Refuses an equal token too.
    StrictlyGreater,
    /// Refuses a scope with no fence yet.
    NoUpsert,
    /// Reads the fence row without `FOR UPDATE`: a plain read, which waits for nothing (the
    /// claim id's write locks the row only after the decision).
    NoLockingRead,
    /// A refusal signals and leaves the transaction open and the session writable, as before
    /// the doom: a client that carries on commits its stale write.
    CommitAfterRefusal,
    /// The seal does nothing.
    NoOpSeal,
    /// The claim sets no idle bound on its transaction.
    NoIdleBound,
    /// The first claim reads the missing row `FOR UPDATE` before it inserts it: under
    /// REPEATABLE READ a gap lock, which blocks the first claims of unrelated scopes.
    GapLockingFirst,
    /// The scope parameters are `VARBINARY`: the bytes in the client's character set.
    ClientCharsetScope,
}

/// What the installed code is made of, besides the database: the claim's rule and the idle
/// bound it sets (`None`: none, as on Oracle MySQL, which has no idle transaction timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Code {
    pub(crate) claim: Claim,
    pub(crate) idle_bound: Option<u64>,
}

/// `name`, qualified with `database` when there is one.
pub(crate) fn qualified(database: Option<&str>, name: &str) -> String {
    match database {
        Some(db) => format!("`{db}`.{name}"),
        None => name.to_owned(),
    }
}

/// The install script's statements, each sent alone (a procedure's body holds semicolons).
pub(crate) fn install(database: Option<&str>, code: Code) -> Vec<String> {
    let table = qualified(database, "zkfence_fence");
    let mut statements = Vec::new();
    if let Some(db) = database {
        statements.push(format!("CREATE DATABASE IF NOT EXISTS `{db}`"));
    }
    statements.push(format!(
        "CREATE TABLE IF NOT EXISTS {table} (
  scope    VARBINARY({MAX_SCOPE_BYTES}) NOT NULL PRIMARY KEY,
  token    BIGINT NOT NULL,
  claims   BIGINT NOT NULL DEFAULT 1,
  updated  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  claim_id BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE = InnoDB"
    ));
    statements.extend(add_claim_id(database));
    for (name, body) in procedures(database, code) {
        statements.push(format!(
            "DROP PROCEDURE IF EXISTS {}",
            qualified(database, name)
        ));
        statements.push(body);
    }
    statements
}

/// The statements that give a fence table made before the claim ids their column: a procedure
/// that adds it when `information_schema` shows it missing, called, then dropped (Oracle MySQL
/// has no `ADD COLUMN IF NOT EXISTS`; a procedure may run DDL).
fn add_claim_id(database: Option<&str>) -> [String; 4] {
    let table = qualified(database, "zkfence_fence");
    let procedure = qualified(database, "zkfence_add_claim_id");
    let schema = match database {
        Some(db) => format!("'{db}'"),
        None => "DATABASE()".to_owned(),
    };
    [
        format!("DROP PROCEDURE IF EXISTS {procedure}"),
        format!(
            "CREATE PROCEDURE {procedure}()
  MODIFIES SQL DATA
BEGIN
  DECLARE waited INT DEFAULT @@session.lock_wait_timeout;
  -- Another install added it first: nothing left to do.
  DECLARE CONTINUE HANDLER FOR 1060 BEGIN END;
  DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN
    GET DIAGNOSTICS CONDITION 1 @zkfence_why = MESSAGE_TEXT;
    SET SESSION lock_wait_timeout = waited;
    SET @zkfence_why = CONCAT('zkfence: adding claim_id to the fence table: ', @zkfence_why, ' (a lock wait: end the open fenced transactions, then install again)');
    RESIGNAL SET MESSAGE_TEXT = @zkfence_why;
  END;
  IF NOT EXISTS (SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema}
      AND TABLE_NAME = 'zkfence_fence' AND COLUMN_NAME = 'claim_id') THEN
    -- The ALTER waits for every open transaction on the table, and the claims behind it wait
    -- for the ALTER: never for long.
    SET SESSION lock_wait_timeout = 30;
    ALTER TABLE {table} ADD COLUMN claim_id BIGINT UNSIGNED NOT NULL DEFAULT 0;
    SET SESSION lock_wait_timeout = waited;
  END IF;
END"
        ),
        format!("CALL {procedure}()"),
        format!("DROP PROCEDURE IF EXISTS {procedure}"),
    ]
}

/// The parameters a procedure of `code` declares, as `information_schema.PARAMETERS` shows
/// them: name, type (`DTD_IDENTIFIER`), character set.
#[cfg(feature = "conformance")]
pub(crate) fn parameters(name: &str, claim: Claim) -> Vec<(String, String, Option<String>)> {
    let scope = match claim {
        Claim::ClientCharsetScope => (format!("varbinary({MAX_SCOPE_BYTES})"), None),
        _ => (
            format!("varchar({})", 2 * MAX_SCOPE_BYTES),
            Some("utf8mb4".to_owned()),
        ),
    };
    let mut params = vec![("p_scope".to_owned(), scope.0, scope.1)];
    if name == CLAIM || name == BEGIN {
        params.push(("p_token_text".to_owned(), "varchar(255)".to_owned(), None));
    }
    params
}

/// The claim procedure's name.
pub(crate) const CLAIM: &str = "zkfence_claim";
/// The seal procedure's name.
pub(crate) const SEAL: &str = "zkfence_seal";
/// The claim that first turns autocommit off: a fenced transaction's first statement.
pub(crate) const BEGIN: &str = "zkfence_begin";
/// The seal followed by `COMMIT`: a fenced transaction's last statement.
pub(crate) const COMMIT: &str = "zkfence_commit";

/// The procedures' names and their `CREATE PROCEDURE` statements: the claim and the seal, and
/// the same two as a fenced transaction's first and last statements (`zkfence_begin` turns
/// autocommit off and claims, `zkfence_commit` seals and commits), so that a fenced
/// transaction costs the server no more statements than a plain one (`START TRANSACTION`, the
/// work, `COMMIT`).
pub(crate) fn procedures(database: Option<&str>, code: Code) -> [(&'static str, String); 4] {
    [
        (CLAIM, claim_procedure(database, code, Ends::Alone)),
        (SEAL, seal_procedure(database, code.claim, Ends::Alone)),
        (BEGIN, claim_procedure(database, code, Ends::Transaction)),
        (
            COMMIT,
            seal_procedure(database, code.claim, Ends::Transaction),
        ),
    ]
}

/// Whether a claim or seal procedure also opens or ends the transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ends {
    /// The claim or seal alone: the client turns autocommit off and commits.
    Alone,
    /// `zkfence_begin`, which turns autocommit off before its claim (and returns no result
    /// set), or `zkfence_commit`, which commits after its seal and turns autocommit back on.
    Transaction,
}

/// The body of a `CREATE PROCEDURE` statement (from its `BEGIN` line), as
/// `information_schema.ROUTINES.ROUTINE_DEFINITION` shows it.
#[cfg(feature = "conformance")]
pub(crate) fn body(statement: &str) -> &str {
    match statement.find("\nBEGIN\n") {
        Some(at) => &statement[at + 1..],
        None => statement,
    }
}

/// The idle bound, in seconds, that an installed claim's body sets (`None`: none).
#[cfg(feature = "conformance")]
pub(crate) fn idle_bound_of(body: &str) -> Option<u64> {
    let (_, rest) = body.split_once(IDLE_DECLARATION)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// How the claim declares its idle bound: the one place the installed code states it, which
/// [`idle_bound_of`] reads back.
const IDLE_DECLARATION: &str = "DECLARE idle_bound INT DEFAULT ";

/// The install script as one text for the `mysql`/`mariadb` command-line client.
pub(crate) fn install_script(database: Option<&str>, code: Code) -> String {
    let mut script = String::from(
        "-- zkfence: the fence table (one row per scope, a lock path: the highest fencing token\n\
         -- accepted) and its procedures. Idempotent; run it with the mysql or mariadb client.\n\
         DELIMITER //\n",
    );
    for statement in install(database, code) {
        let _ = write!(script, "{statement}\n//\n");
    }
    script.push_str("DELIMITER ;\n");
    script
}

fn claim_procedure(database: Option<&str>, code: Code, ends: Ends) -> String {
    let claim = code.claim;
    let table = qualified(database, "zkfence_fence");
    let doom = doom(claim);
    let bad = |why: &str| signal(BAD_CLAIM, why, doom);
    let (bound, bounded) = idle_bound_lines(code);
    let no_autocommit = bad("zkfence_claim: turn autocommit off first (SET autocommit = 0): a transaction begun with START TRANSACTION ends at a deadlock, and the statements after it would commit unfenced");
    let bad_args = bad("zkfence_claim: give the lock path (1 to 1024 bytes of UTF-8) and its fencing token as quoted text, a decimal integer from 0 to 9223372036854775807 (as ZKFENCE_TOKEN holds it)");
    let read_only = bad("zkfence_claim: this connection refuses writes since an earlier zkfence error: ROLLBACK; SET SESSION TRANSACTION READ WRITE; then claim again, with a token that still holds the lock");
    let scope_param = scope_param(claim);
    // zkfence_begin turns autocommit off itself; the claim alone insists on it.
    let (name, comment, autocommit, reply) = match ends {
        Ends::Alone => (
            CLAIM,
            "raises the scope''s fence to the token",
            format!("IF @@autocommit <> 0 THEN\n    {no_autocommit}\n  END IF;"),
            "\n  SELECT seen AS previous;",
        ),
        Ends::Transaction => (
            BEGIN,
            "turns autocommit off, then raises the scope''s fence to the token",
            "SET autocommit = 0;\n  SET @zkfence_sealable = ',';".to_owned(),
            "",
        ),
    };
    let name = qualified(database, name);
    format!(
        "CREATE PROCEDURE {name}(IN p_scope {scope_param}, IN p_token_text VARCHAR(255))
  MODIFIES SQL DATA
  COMMENT 'zkfence: {comment}, or signals SQLSTATE {REFUSED} and dooms the transaction; keeps the fence row locked to the end of the transaction'
BEGIN
  DECLARE seen BIGINT DEFAULT NULL;
  DECLARE v_claims BIGINT DEFAULT NULL;
  DECLARE v_prev BIGINT UNSIGNED DEFAULT 0;
  DECLARE v_id BIGINT UNSIGNED;
  DECLARE p_token BIGINT;
  DECLARE digits VARCHAR(255);
  DECLARE v_scope VARBINARY({MAX_SCOPE_BYTES});{bound}
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET seen = NULL;
  DECLARE EXIT HANDLER FOR SQLSTATE '25006' BEGIN {read_only} END;
  {autocommit}
  {arguments}{bounded}
  {decide}
  {SAVEPOINT_MARK}{reply}
END",
        arguments = arguments(&bad_args),
        decide = match (ends, claim) {
            (Ends::Transaction, Claim::NoUpsert | Claim::NoLockingRead | Claim::GapLockingFirst)
            | (Ends::Alone, _) => read_then_decide(claim, &table, doom),
            (Ends::Transaction, _) => decide_in_one(claim, &table, doom),
        },
    )
}

/// The claim's decision as a read of the fence row, then its write: `seen` (the token it held
/// before) and the previous claim id known, for the standalone claim's reply and its mark. A
/// mutant of the read, or of the first claim, decides this way in `zkfence_begin` too.
fn read_then_decide(claim: Claim, table: &str, doom: &str) -> String {
    let refuse_if = match claim {
        Claim::StrictlyGreater => "seen >= p_token",
        _ => "seen > p_token",
    };
    format!(
        "{read}
  SET v_id = UUID_SHORT();
  IF v_claims = 0 THEN
    {first}
  ELSEIF {refuse_if} THEN
    {refused}
  ELSEIF seen < p_token THEN
    UPDATE {table} SET token = p_token, claims = claims + 1, updated = CURRENT_TIMESTAMP(6),
      claim_id = v_id WHERE scope = v_scope;
  ELSE
    UPDATE {table} SET claim_id = v_id WHERE scope = v_scope;
  END IF;
  {MARK}
  SET @zkfence_previous = seen;",
        read = fence_read(claim, table),
        first = first_claim(claim, table, doom),
        refused = refuse("seen", doom),
    )
}

/// `zkfence_begin`'s decision, in one statement when it accepts (every claim but a scope's
/// first and a refused one): an insert of the row as a first claim leaves it, whose update of an
/// existing row writes the new claim id, and raises the token, only where the claim is
/// accepted. The server counts 2 rows for an update that changed the row, and a new claim id
/// always changes it: any other count (1 for an insert; 0, or 1 with `CLIENT_FOUND_ROWS`, for a
/// row left as it was) reads the row locked and decides from it. The insert locks the existing
/// record alone (the scope is the primary key: no gap), or the new one, as the read-first claim
/// does, and waits as its locking read waits for an open newer claim. The assignments hold under
/// MySQL's left-to-right evaluation and MariaDB's `SIMULTANEOUS_ASSIGNMENT` alike: each one's
/// condition reads `claims > 0`, which none changes, and the token only where nothing earlier
/// wrote it. The list of sealable ids is this claim's alone (the transaction's first claim), so
/// the id the row held before is not needed. About a third of the claim's server time less than
/// the read-first claim (one statement on the fence row instead of three: 68 µs of server time
/// down to 44, measured in a loop on the server).
fn decide_in_one(claim: Claim, table: &str, doom: &str) -> String {
    let accept = match claim {
        Claim::StrictlyGreater => "token < p_token",
        _ => "token <= p_token",
    };
    format!(
        "SET v_id = UUID_SHORT();
  INSERT INTO {table} (scope, token, claims, claim_id) VALUES (v_scope, p_token, 1, v_id)
    ON DUPLICATE KEY UPDATE
      claim_id = IF(claims > 0 AND {accept}, v_id, claim_id),
      updated = IF(claims > 0 AND token < p_token, CURRENT_TIMESTAMP(6), updated),
      claims = IF(claims > 0 AND token < p_token, claims + 1, claims),
      token = IF(claims > 0 AND token < p_token, p_token, token);
  IF ROW_COUNT() <> 2 THEN
    SELECT token, claims, claim_id INTO seen, v_claims, v_prev FROM {table} WHERE scope = v_scope FOR UPDATE;
    IF v_prev = v_id THEN
      SET seen = NULL;
    ELSEIF v_claims = 0 THEN
      UPDATE {table} SET claims = 1, claim_id = v_id WHERE scope = v_scope;
    ELSE
      {refused}
    END IF;
  END IF;
  SET @zkfence_sealable = CONCAT(',', v_id, ',');",
        refused = refuse("seen", doom),
    )
}

/// The claim's reading of its arguments into `p_token` and `v_scope`, or `bad_args`.
fn arguments(bad_args: &str) -> String {
    format!(
        "-- The token in any decimal text form a client sends (42, 0042, +42), compared as the
  -- integer it spells; anything else (-1, 4.2e1, past i64::MAX) is no token. Never MySQL's
  -- own string-to-integer cast, which reads 'abc' as 0 and clips 1e30 to the largest BIGINT.
  -- The form every zkfence client sends (no sign, no leading zero, at most 18 digits) is read
  -- at once; the others are trimmed to it first.
  IF p_token_text REGEXP '^[1-9][0-9]{{0,17}}$' THEN
    SET p_token = CAST(p_token_text AS SIGNED);
  ELSE
    IF p_token_text IS NULL OR NOT (p_token_text REGEXP '^[+]?[0-9]+$') THEN
      {bad_args}
    END IF;
    SET digits = TRIM(LEADING '0' FROM TRIM(LEADING '+' FROM p_token_text));
    IF digits = '' THEN
      SET digits = '0';
    END IF;
    IF LENGTH(digits) > 19 OR (LENGTH(digits) = 19 AND digits > '9223372036854775807') THEN
      {bad_args}
    END IF;
    SET p_token = CAST(digits AS SIGNED);
  END IF;
  -- The scope as UTF-8 bytes, whatever the client's character set (the server converted it).
  IF p_scope IS NULL OR LENGTH(p_scope) = 0 OR LENGTH(p_scope) > {MAX_SCOPE_BYTES} THEN
    {bad_args}
  END IF;
  SET v_scope = CONVERT(p_scope USING binary);"
    )
}

/// What the claim does on a scope's first claim (a fence row with 0 claims, or none).
fn first_claim(claim: Claim, table: &str, doom: &str) -> String {
    match claim {
        Claim::NoUpsert => signal(
            REFUSED,
            "zkfence: refused: the scope has no fence yet; the fence holds 0",
            doom,
        ),
        Claim::NoLockingRead | Claim::GapLockingFirst => {
            format!("INSERT INTO {table} (scope, token, claim_id) VALUES (v_scope, p_token, v_id);")
        }
        _ => format!("UPDATE {table} SET claims = 1, claim_id = v_id WHERE scope = v_scope;\n    SET seen = NULL;"),
    }
}

/// The claim's read of the fence row, into `seen`, `v_claims` and `v_prev` (its claim id): the sound claim inserts a
/// missing row first (an insert locks only its own record) and then reads an existing record
/// `FOR UPDATE` (a record lock, no gap); a locking read of a missing row would take a gap lock
/// under REPEATABLE READ, which blocks every first claim of a scope in that gap. A row it
/// inserted has 0 claims.
fn fence_read(claim: Claim, table: &str) -> String {
    match claim {
        Claim::NoLockingRead => {
            format!("SELECT token, claims, claim_id INTO seen, v_claims, v_prev FROM {table} WHERE scope = v_scope;\n  IF seen IS NULL THEN\n    SET v_claims = 0;\n  END IF;")
        }
        Claim::GapLockingFirst => format!(
            "SELECT token, claims, claim_id INTO seen, v_claims, v_prev FROM {table} WHERE scope = v_scope FOR UPDATE;\n  IF seen IS NULL THEN\n    SET v_claims = 0;\n  END IF;"
        ),
        _ => format!(
            "INSERT INTO {table} (scope, token, claims) VALUES (v_scope, p_token, 0)\n    ON DUPLICATE KEY UPDATE token = token;\n  SELECT token, claims, claim_id INTO seen, v_claims, v_prev FROM {table} WHERE scope = v_scope FOR UPDATE;"
        ),
    }
}

/// The claim's idle bound: its declaration, and the statements that lower the session's idle
/// transaction timeouts to it (both empty: no bound).
fn idle_bound_lines(code: Code) -> (String, String) {
    let bound = match (code.claim, code.idle_bound) {
        (Claim::NoIdleBound, _) | (_, None) => String::new(),
        (_, Some(secs)) => format!("\n  {IDLE_DECLARATION}{secs};"),
    };
    // MariaDB ends a transaction idle longer than these (closing its connection, which rolls
    // it back and frees the fence row); each lowered to the bound, never raised.
    let bounded = match bound.is_empty() {
        true => String::new(),
        false => ["idle_transaction_timeout", "idle_write_transaction_timeout", "idle_readonly_transaction_timeout"]
            .iter()
            .map(|v| format!("\n  IF @@session.{v} = 0 OR @@session.{v} > idle_bound THEN\n    SET SESSION {v} = idle_bound;\n  END IF;"))
            .collect(),
    };
    (bound, bounded)
}

/// The claim's mark for the seal. Every claim writes a new claim id (`UUID_SHORT()`, unique on
/// the server) on the fence row, in its transaction, and adds it to the session's list of ids
/// it may seal (`@zkfence_sealable`, `,id,id,`: a user variable, which no rollback undoes),
/// dropping the id the row held before (a transaction of this session that claimed and ended
/// without its seal cannot pass for this one). The seal finds the row's id in the list only in
/// the transaction of its latest claim by this session: a rollback under the work puts the
/// row's previous id back, and a later claim by anyone writes another. `zkfence_begin` (a
/// transaction's first claim) and the driver's rollback start the list afresh, so ids of
/// claims never sealed do not pile up on a long-lived connection; past 8 KiB all the same, the
/// list restarts with this claim's id alone: an older claim, or an earlier one of the same
/// transaction, then fails its seal (`ZF003`), which is safe. The list and the row are all the state: no table per
/// session, where the temporary tables of the marks before it cost a tenth of a fenced
/// transaction's server time.
const MARK: &str = "SET @zkfence_sealable = REPLACE(IFNULL(@zkfence_sealable, ','), CONCAT(',', v_prev, ','), ',');
  IF LENGTH(@zkfence_sealable) > 8192 THEN
    SET @zkfence_sealable = ',';
  END IF;
  SET @zkfence_sealable = CONCAT(@zkfence_sealable, v_id, ',');";

/// The claim's mark for `zkfence_commit`, its last statements once it has accepted: a
/// savepoint, which moves to each later claim of the transaction, and the scope it claimed, in
/// a session variable. The savepoint lives exactly as long as the claim's write: a rollback of
/// the transaction (a deadlock, a lock wait timeout with `innodb_rollback_on_timeout`, a
/// `ROLLBACK`), a rollback to a savepoint set before the claim, and an implicit commit (DDL,
/// `SET autocommit = 1`) remove it, and nothing else does. `zkfence_commit` releases it (the
/// server says `1305` if it is gone) instead of reading the fence row, the read that cost the
/// seal a third of a fenced transaction's server time (a `SELECT … INTO` in a procedure costs
/// the server more than an `UPDATE` of the same row). While the claim's write stands, its row
/// lock keeps every later claim out, so the row still holds the claim.
const SAVEPOINT_MARK: &str = "SAVEPOINT zkfence_claim;\n  SET @zkfence_claimed = v_scope;";

/// What a failed claim or seal does before it signals: rolls back what it refused and leaves
/// the session read-only, so that a client that carries on (`mariadb --force`, an exception
/// caught and followed by `COMMIT`) commits nothing, in this transaction or in autocommit
/// after it. The mutant's does nothing.
fn doom(claim: Claim) -> &'static str {
    match claim {
        Claim::CommitAfterRefusal => "",
        _ => "ROLLBACK;\n    SET SESSION TRANSACTION READ ONLY;\n    ",
    }
}

/// The statements that doom, then signal `state` with `message`.
fn signal(state: &str, message: &str, doom: &str) -> String {
    format!("{doom}SIGNAL SQLSTATE '{state}' SET MESSAGE_TEXT = '{message}';")
}

/// The statements that doom, then signal a refusal, `seen` the token to name.
fn refuse(seen: &str, doom: &str) -> String {
    format!(
        "SET @zkfence_refusal = CONCAT('zkfence: refused: a newer lock holder claimed this scope; the fence holds ', {seen});
    {doom}SIGNAL SQLSTATE '{REFUSED}' SET MESSAGE_TEXT = @zkfence_refusal;"
    )
}

fn seal_procedure(database: Option<&str>, claim: Claim, ends: Ends) -> String {
    let (name, comment, commit) = match ends {
        Ends::Alone => (SEAL, "call last before COMMIT: checks", ""),
        Ends::Transaction => (
            COMMIT,
            "the last statement of a fenced transaction: commits it if",
            "\n  COMMIT;\n  SET autocommit = 1;",
        ),
    };
    let name = qualified(database, name);
    let table = qualified(database, "zkfence_fence");
    let gone = signal(
        ROLLED_BACK,
        "zkfence: this transaction holds no claim of the scope (rolled back under its work by a deadlock or lock wait timeout it did not pass on, or never claimed): nothing of it commits",
        doom(claim),
    );
    let scope_param = scope_param(claim);
    let head = format!(
        "CREATE PROCEDURE {name}(IN p_scope {scope_param})
  MODIFIES SQL DATA
  COMMENT 'zkfence: {comment} this transaction still holds the scope''s latest claim, else dooms it'
"
    );
    if claim == Claim::NoOpSeal {
        return format!("{head}BEGIN\n  DO 0;{commit}\nEND");
    }
    if ends == Ends::Transaction {
        // The claim's savepoint stands and the transaction's latest claim was of this scope:
        // see SAVEPOINT_MARK. The commit ends every claim of the transaction: the list of
        // sealable ids starts afresh.
        return format!(
            "{head}BEGIN
  DECLARE v_scope VARBINARY({MAX_SCOPE_BYTES});
  DECLARE EXIT HANDLER FOR 1305 BEGIN
    {gone}
  END;
  SET v_scope = CONVERT(p_scope USING binary);
  IF NOT (@zkfence_claimed <=> v_scope) THEN
    {gone}
  END IF;
  RELEASE SAVEPOINT zkfence_claim;
  SET @zkfence_sealable = ',';{commit}
END"
        );
    }
    format!(
        "{head}BEGIN
  DECLARE latest BIGINT UNSIGNED DEFAULT NULL;
  DECLARE v_scope VARBINARY({MAX_SCOPE_BYTES});
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET latest = NULL;
  SET v_scope = CONVERT(p_scope USING binary);
  SELECT claim_id INTO latest FROM {table} WHERE scope = v_scope;
  IF latest IS NULL OR latest = 0
      OR LOCATE(CONCAT(',', latest, ','), IFNULL(@zkfence_sealable, ',')) = 0 THEN
    {gone}
  END IF;
  SET @zkfence_sealable = REPLACE(@zkfence_sealable, CONCAT(',', latest, ','), ',');{commit}
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
/// fails if a transaction is already open on the connection), then `zkfence_begin` with the
/// first claim (autocommit off, so that nothing after a rollback under the work commits on its
/// own) and `zkfence_claim` with the others, in order; with no claims (or `claims` false, a
/// mutant's), autocommit off alone.
pub(crate) fn begin(
    database: Option<&str>,
    level: mysql_async::IsolationLevel,
    tickets: &[(String, i64)],
    claims: bool,
) -> String {
    let mut sql = format!("SET TRANSACTION ISOLATION LEVEL {level}");
    let tickets = match claims {
        true => tickets,
        false => &[],
    };
    if tickets.is_empty() {
        sql.push_str("; SET autocommit = 0");
    }
    for (i, (scope, token)) in tickets.iter().enumerate() {
        let claim = qualified(database, if i == 0 { BEGIN } else { CLAIM });
        let _ = write!(sql, "; CALL {claim}({}, {token})", hex(scope.as_bytes()));
    }
    sql
}

/// The statements that end a fenced transaction, sent as one: `zkfence_seal` for each scope
/// but the last, then `zkfence_commit` for the last (its seal, `COMMIT`, autocommit back on);
/// with no scopes, `COMMIT` and autocommit on. A failed seal stops the rest (the server runs no
/// statement after a failed one).
pub(crate) fn commit(database: Option<&str>, scopes: &[&str]) -> String {
    let Some((last, others)) = scopes.split_last() else {
        return "COMMIT; SET autocommit = 1".to_owned();
    };
    let seal = qualified(database, SEAL);
    let mut sql = String::new();
    for scope in others {
        let _ = write!(sql, "CALL {seal}({}); ", hex(scope.as_bytes()));
    }
    let commit = qualified(database, COMMIT);
    let _ = write!(sql, "CALL {commit}({})", hex(last.as_bytes()));
    sql
}

/// Ends whatever the fenced transaction left open, and lifts the doom of a failed claim or
/// seal (the Rust side hands the error on; a client that carries on is not this one).
pub(crate) const ROLLBACK: &str =
    "ROLLBACK; SET SESSION TRANSACTION READ WRITE; SET autocommit = 1; SET @zkfence_sealable = NULL";

/// The standalone claim, committed on its own (autocommit off; `zkfence_claim`, which leaves
/// the token the fence held before in `@zkfence_previous`; then `zkfence_commit`, which seals
/// and commits it and turns autocommit back on): text statements sent as one, one round trip
/// (a prepared one costs a prepare on each new connection).
pub(crate) fn claim(database: Option<&str>, scope: &str, token: i64) -> String {
    let claim = qualified(database, CLAIM);
    let commit = qualified(database, COMMIT);
    let scope = hex(scope.as_bytes());
    format!("SET autocommit = 0; CALL {claim}({scope}, {token}); CALL {commit}({scope})")
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
        let sound = Code {
            claim: Claim::Sound,
            idle_bound: Some(10),
        };
        let script = install_script(Some("ops"), sound);
        assert!(script.contains("CREATE PROCEDURE `ops`.zkfence_claim"));
        assert!(script.contains("FOR UPDATE"));
        assert!(script.trim_end().ends_with("DELIMITER ;"));
        let mutant = Code {
            claim: Claim::NoLockingRead,
            ..sound
        };
        assert!(!install_script(None, mutant).contains("FOR UPDATE"));
    }

    #[test]
    fn the_idle_bound_is_read_back_from_the_claim() {
        let code = |idle_bound| Code {
            claim: Claim::Sound,
            idle_bound,
        };
        let [(_, claim), (_, seal), (_, begin), (_, commit)] = procedures(None, code(Some(17)));
        assert!(body(&claim).starts_with("BEGIN\n"));
        assert_eq!(idle_bound_of(body(&claim)), Some(17));
        assert_eq!(idle_bound_of(body(&begin)), Some(17));
        assert_eq!(idle_bound_of(body(&seal)), None);
        assert_eq!(idle_bound_of(body(&commit)), None);
        let [(_, unbounded), ..] = procedures(None, code(None));
        assert_eq!(idle_bound_of(body(&unbounded)), None);
    }

    #[test]
    fn begin_claims_in_the_order_given() {
        let sql = begin(
            None,
            mysql_async::IsolationLevel::ReadCommitted,
            &[("/a".into(), 5), ("/b".into(), 7)],
            true,
        );
        assert_eq!(
            sql,
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; \
             CALL zkfence_begin(X'2f61', 5); CALL zkfence_claim(X'2f62', 7)"
        );
        let unclaimed = begin(None, mysql_async::IsolationLevel::ReadCommitted, &[], true);
        assert!(unclaimed.ends_with("; SET autocommit = 0"));
    }

    #[test]
    fn commit_seals_every_scope_and_commits_with_the_last() {
        assert_eq!(
            commit(Some("ops"), &["/a", "/b"]),
            "CALL `ops`.zkfence_seal(X'2f61'); CALL `ops`.zkfence_commit(X'2f62')"
        );
        assert_eq!(commit(None, &[]), "COMMIT; SET autocommit = 1");
    }

    #[test]
    fn begin_and_commit_open_and_end_the_transaction() {
        let code = Code {
            claim: Claim::Sound,
            idle_bound: Some(10),
        };
        let [(_, claim), (_, seal), (_, begin), (_, commit)] = procedures(None, code);
        assert!(
            claim.contains("IF @@autocommit <> 0") && claim.contains("SELECT seen AS previous")
        );
        assert!(begin.contains("SET autocommit = 0;") && !begin.contains("SELECT seen"));
        assert!(!seal.contains("COMMIT;"));
        assert!(commit
            .trim_end()
            .ends_with("COMMIT;\n  SET autocommit = 1;\nEND"));
    }
}
