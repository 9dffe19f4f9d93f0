//! Whether the fence installed in a database is this version's, for the conformance kit's
//! `installed_fence_is_current` and `zkfence fence verify` (with the `conformance` feature).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::fence::{is_mariadb, MySqlFence};
use crate::sql::{self, MAX_SCOPE_BYTES};

impl MySqlFence {
    /// The database the fence lives in: this fence's, else the connection's (`None`: none).
    pub(crate) async fn home(&self, conn: &mut Conn) -> Result<Option<String>, mysql_async::Error> {
        match self.database() {
            Some(db) => Ok(Some(db.to_owned())),
            None => Ok(conn
                .query_first::<Option<String>, _>("SELECT DATABASE()")
                .await?
                .flatten()),
        }
    }

    /// Whether the fence installed where this fence looks is the code this version installs
    /// (with the idle bound it was installed with): `Ok(Err(why))` with one line that says what
    /// differs and what to run.
    pub(crate) async fn check_installed(
        &self,
        conn: &mut Conn,
    ) -> Result<Result<(), String>, mysql_async::Error> {
        let Some(db) = self.home(conn).await? else {
            return Ok(Err(
                "no database selected: name the fence's database in the URL (mysql://…/DB)".into(),
            ));
        };
        let again = format!("run `zkfence fence install mysql://…/{db}` again");
        let columns: Vec<Column> = conn
            .exec(
                "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'zkfence_fence' \
                 ORDER BY ORDINAL_POSITION",
                (&db,),
            )
            .await?;
        let routines: Vec<(String, Option<String>)> = conn
            .exec(
                "SELECT ROUTINE_NAME, ROUTINE_DEFINITION FROM information_schema.ROUTINES \
                 WHERE ROUTINE_SCHEMA = ? AND ROUTINE_TYPE = 'PROCEDURE' \
                 AND ROUTINE_NAME IN (?, ?, ?, ?)",
                (&db, sql::CLAIM, sql::SEAL, sql::BEGIN, sql::COMMIT),
            )
            .await?;
        if columns.is_empty() && routines.is_empty() {
            return Ok(Err(format!(
                "the fence is not installed in `{db}`: run `zkfence fence install mysql://…/{db}`"
            )));
        }
        if let Some(why) = table_differs(&db, &again, &columns) {
            return Ok(Err(why));
        }
        let installed_claim = routines
            .iter()
            .find(|(name, _)| name == "zkfence_claim")
            .and_then(|(_, body)| body.clone());
        let mariadb = is_mariadb(conn).await?;
        let mut code = self.code(mariadb);
        if let Some(bound) = installed_claim.as_deref().and_then(sql::idle_bound_of) {
            code.idle_bound = Some(bound).filter(|_| mariadb);
        }
        for (name, statement) in sql::procedures(self.database(), code) {
            if let Some(why) = body_differs(&db, &again, name, &statement, &routines) {
                return Ok(Err(why));
            }
            if let Some(why) = parameters_differ(conn, &db, &again, name, code.claim).await? {
                return Ok(Err(why));
            }
        }
        Ok(Ok(()))
    }

    /// The idle bound the installed claim sets (`Ok(None)`: none), or why there can be none
    /// (Oracle MySQL).
    pub(crate) async fn installed_idle_bound(
        &self,
        conn: &mut Conn,
    ) -> Result<Result<Option<Duration>, String>, mysql_async::Error> {
        if !is_mariadb(conn).await? {
            return Ok(Err(ORACLE_MYSQL_IDLE.to_owned()));
        }
        let Some(db) = self.home(conn).await? else {
            return Ok(Ok(None));
        };
        let body: Option<Option<String>> = conn
            .exec_first(
                "SELECT ROUTINE_DEFINITION FROM information_schema.ROUTINES \
                 WHERE ROUTINE_SCHEMA = ? AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = 'zkfence_claim'",
                (&db,),
            )
            .await?;
        let bound = body.flatten().as_deref().and_then(sql::idle_bound_of);
        Ok(Ok(bound.map(Duration::from_secs)))
    }
}

/// What Oracle MySQL does with a frozen holder, and what to do.
pub(crate) const ORACLE_MYSQL_IDLE: &str = "this is Oracle MySQL, which has no \
    idle_transaction_timeout (MariaDB's): a holder frozen inside its fenced transaction keeps \
    the fence row locked until its connection dies, and each successor fails after \
    innodb_lock_wait_timeout (50 s by default) meanwhile; give fenced connections a short \
    wait_timeout (SET SESSION wait_timeout = 10, on connections that idle no longer than that \
    between statements), or kill sessions idle in a transaction from an EVENT (see \
    docs/fences.md, MySQL and MariaDB)";

/// `text` with its runs of whitespace as one space, trimmed.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A column of the fence table as `information_schema.COLUMNS` shows it: name, type, maximum
/// length, key.
type Column = (String, String, Option<u64>, String);

/// Why the fence table's `columns` are not this version's (`None`: they are).
fn table_differs(db: &str, again: &str, columns: &[Column]) -> Option<String> {
    let shape: Vec<Column> = [
        ("scope", "varbinary", Some(MAX_SCOPE_BYTES as u64), "PRI"),
        ("token", "bigint", None, ""),
        ("claims", "bigint", None, ""),
        ("updated", "timestamp", None, ""),
        ("claim_id", "bigint", None, ""),
    ]
    .iter()
    .map(|(n, t, l, k)| (n.to_string(), t.to_string(), *l, k.to_string()))
    .collect();
    let lower = |c: &Column| {
        (
            c.0.to_lowercase(),
            c.1.to_lowercase(),
            c.2,
            c.3.to_uppercase(),
        )
    };
    if columns.iter().map(lower).collect::<Vec<_>>() != shape {
        let found: Vec<String> = columns.iter().map(|c| format!("{} {}", c.0, c.1)).collect();
        return Some(format!(
            "the table `{db}`.zkfence_fence is not this version's (columns: {}): {again}",
            match found.is_empty() {
                true => "none".to_owned(),
                false => found.join(", "),
            }
        ));
    }
    None
}

/// Why the installed procedure `name` is not `statement` (`None`: it is): missing, unreadable,
/// or a different text. `routines`: the installed procedures' names and texts.
fn body_differs(
    db: &str,
    again: &str,
    name: &str,
    statement: &str,
    routines: &[(String, Option<String>)],
) -> Option<String> {
    let Some((_, body)) = routines.iter().find(|(n, _)| n == name) else {
        return Some(format!("the procedure `{db}`.{name} is missing: {again}"));
    };
    let Some(body) = body else {
        return Some(format!(
            "cannot read the text of `{db}`.{name} (ROUTINE_DEFINITION is NULL: connect \
             as its definer, or grant SELECT on mysql.proc) to compare it with this \
             version's"
        ));
    };
    if squeeze(body) != squeeze(sql::body(statement)) {
        return Some(format!(
            "the procedure `{db}`.{name} differs from this version's (an older version, \
             or edited): {again}"
        ));
    }
    None
}

/// Why the installed procedure `name`'s parameters are not those of `claim`'s (`None`: they
/// are).
async fn parameters_differ(
    conn: &mut Conn,
    db: &str,
    again: &str,
    name: &str,
    claim: sql::Claim,
) -> Result<Option<String>, mysql_async::Error> {
    let params: Vec<(String, String, Option<String>)> = conn
        .exec(
            "SELECT PARAMETER_NAME, DTD_IDENTIFIER, CHARACTER_SET_NAME \
             FROM information_schema.PARAMETERS WHERE SPECIFIC_SCHEMA = ? \
             AND SPECIFIC_NAME = ? AND PARAMETER_NAME IS NOT NULL ORDER BY ORDINAL_POSITION",
            (db, name),
        )
        .await?;
    let expected = sql::parameters(name, claim);
    let same = params.len() == expected.len()
        && params.iter().zip(&expected).all(|(got, want)| {
            got.0 == want.0
                && got.1.eq_ignore_ascii_case(&want.1)
                && (want.2.is_none() || got.2 == want.2)
        });
    if same {
        return Ok(None);
    }
    Ok(Some(format!(
        "the parameters of `{db}`.{name} differ from this version's ({}): {again}",
        expected
            .iter()
            .map(|(n, t, c)| match c {
                Some(c) => format!("{n} {t} CHARACTER SET {c}"),
                None => format!("{n} {t}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    )))
}
