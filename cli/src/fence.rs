//! `zkfence fence`: the PostgreSQL fence's operator commands: install its table and function,
//! show each scope's fence, and rebase a scope after the ZooKeeper ensemble's data was reset.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use tokio_postgres::NoTls;
use zkfence_postgres::{FenceRow, PostgresFence};

use crate::exit::{EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::json::json_string;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

/// Where the fence lives.
#[derive(clap::Args, Debug)]
struct Database {
    /// The database, as a URL (`postgresql://user@host/db`) or `key=value` pairs
    /// (`host=... user=... dbname=...`), as tokio-postgres takes them (no TLS).
    #[arg(long, env = "DATABASE_URL", value_name = "URL")]
    database_url: String,
    /// The schema of the fence table and function (default: the search path's, usually public).
    #[arg(long, env = "ZKFENCE_FENCE_SCHEMA")]
    schema: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Create the fence table and the zkfence_claim function (idempotent), or print the script.
    #[command(after_help = "\
Then, in any client, the first statement of a transaction that writes under the lock:
  SELECT zkfence_claim('/locks/orders', 4294967339);  -- SQLSTATE ZF001 if a newer holder claimed

Examples:
  zkfence fence install --database-url postgresql://app@db/orders
  zkfence fence install --print > migrations/0042_zkfence.sql")]
    Install {
        /// The database, as for `show` (not needed with --print).
        #[arg(
            long,
            env = "DATABASE_URL",
            value_name = "URL",
            required_unless_present = "print"
        )]
        database_url: Option<String>,
        /// The schema of the fence table and function (default: the search path's).
        #[arg(long, env = "ZKFENCE_FENCE_SCHEMA")]
        schema: Option<String>,
        /// Print the script instead of running it (no database needed).
        #[arg(long)]
        print: bool,
    },
    /// Show each scope's fence: the highest token accepted, its ZooKeeper epoch, the claims.
    #[command(after_help = "\
Examples:
  zkfence fence show --database-url postgresql://app@db/orders
  zkfence fence show --database-url postgresql://app@db/orders --scope /locks/orders --json")]
    Show {
        #[command(flatten)]
        database: Database,
        /// Only this scope (lock path).
        #[arg(long)]
        scope: Option<String>,
        /// One JSON object per line instead of a table.
        #[arg(long, env = "ZKFENCE_JSON")]
        json: bool,
    },
    /// Set a scope's fence to a lower token, after the ZooKeeper ensemble was rebuilt from
    /// empty data (its new tokens are all below the old fence, and every holder is refused).
    #[command(after_help = "\
Only once no holder of the old ensemble can write any more: a fence set lower lets their late
writes in. Asks to type the scope unless --yes.

Examples:
  zkfence fence rebase --database-url postgresql://app@db/orders --scope /locks/orders
  zkfence fence rebase --database-url ... --scope /locks/orders --to 4294967300 --yes")]
    Rebase {
        #[command(flatten)]
        database: Database,
        /// The scope (lock path) to rebase.
        #[arg(long)]
        scope: String,
        /// The token to set the fence to (0: the next claim of any holder is accepted).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..))]
        to: i64,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

pub(crate) async fn fence(args: Args) -> u8 {
    match args.action {
        Action::Install {
            print: true,
            schema,
            ..
        } => match fence_in(schema.as_deref()) {
            Ok(fence) => {
                print!("{}", fence.install_sql());
                0
            }
            Err(code) => code,
        },
        Action::Install {
            database_url,
            schema,
            ..
        } => {
            let database = Database {
                database_url: database_url.unwrap_or_default(),
                schema,
            };
            install(&database).await
        }
        Action::Show {
            database,
            scope,
            json,
        } => show(&database, scope.as_deref(), json).await,
        Action::Rebase {
            database,
            scope,
            to,
            yes,
        } => rebase(&database, &scope, to, yes).await,
    }
}

fn fence_in(schema: Option<&str>) -> Result<PostgresFence, u8> {
    match schema {
        None => Ok(PostgresFence::new()),
        Some(schema) => PostgresFence::new().with_schema(schema).map_err(|err| {
            eprintln!("zkfence: --schema: {err}");
            EXIT_USAGE
        }),
    }
}

/// The fence and a connection to its database.
async fn open(database: &Database) -> Result<(PostgresFence, tokio_postgres::Client), u8> {
    let fence = fence_in(database.schema.as_deref())?;
    let config: tokio_postgres::Config = database.database_url.parse().map_err(|err| {
        eprintln!("zkfence: --database-url: {err}; give a URL (postgresql://user@host/db) or key=value pairs");
        EXIT_USAGE
    })?;
    let (client, connection) = config.connect(NoTls).await.map_err(|err| {
        eprintln!("zkfence: cannot connect to the database: {err}");
        EXIT_UNAVAILABLE
    })?;
    tokio::spawn(connection);
    Ok((fence, client))
}

fn database_error(what: &str, err: &tokio_postgres::Error) -> u8 {
    match err.as_db_error() {
        Some(db) => eprintln!("zkfence: {what}: {} ({})", db.message(), db.code().code()),
        None => eprintln!("zkfence: {what}: {err}"),
    }
    EXIT_FAILURE
}

async fn install(database: &Database) -> u8 {
    let (fence, client) = match open(database).await {
        Ok(open) => open,
        Err(code) => return code,
    };
    match fence.install(&client).await {
        Ok(()) => {
            println!("zkfence: the fence table zkfence_fence and the function zkfence_claim(scope, token) are installed");
            0
        }
        Err(err) => database_error("cannot install the fence", &err),
    }
}

async fn show(database: &Database, scope: Option<&str>, json: bool) -> u8 {
    let (fence, client) = match open(database).await {
        Ok(open) => open,
        Err(code) => return code,
    };
    let rows = match fence.scopes(&client).await {
        Ok(rows) => rows,
        Err(err) => return database_error("cannot read the fences (installed?)", &err),
    };
    let rows: Vec<&FenceRow> = (rows.iter())
        .filter(|r| scope.is_none_or(|s| r.scope == s))
        .collect();
    if json {
        for r in rows {
            println!(
                "{{\"scope\":{},\"token\":{},\"epoch\":{},\"claims\":{},\"updated\":{}}}",
                json_string(&r.scope),
                r.token,
                r.token >> 32,
                r.claims,
                json_string(&r.updated)
            );
        }
    } else if rows.is_empty() {
        println!(
            "no fence yet{}",
            scope.map_or(String::new(), |s| format!(" for {s}"))
        );
    } else {
        println!(
            "{:<20} {:>6} {:>10}  {:<20} SCOPE",
            "TOKEN", "EPOCH", "CLAIMS", "UPDATED"
        );
        for r in rows {
            println!(
                "{:<20} {:>6} {:>10}  {:<20} {}",
                r.token,
                r.token >> 32,
                r.claims,
                r.updated,
                r.scope
            );
        }
    }
    0
}

async fn rebase(database: &Database, scope: &str, to: i64, yes: bool) -> u8 {
    let (fence, client) = match open(database).await {
        Ok(open) => open,
        Err(code) => return code,
    };
    let current = match fence.seen(&client, scope).await {
        Ok(Some(current)) => current,
        Ok(None) => {
            eprintln!("zkfence: {scope} has no fence: nothing to rebase");
            return EXIT_FAILURE;
        }
        Err(err) => return database_error("cannot read the fence (installed?)", &err),
    };
    if !yes {
        if let Err(code) = confirm(scope, current, to) {
            return code;
        }
    }
    match fence.rebase(&client, scope, to).await {
        Ok(Some(old)) => {
            println!(
                "zkfence: the fence of {scope} moved from {old} (epoch {}) to {to}",
                old >> 32
            );
            0
        }
        Ok(None) => {
            eprintln!("zkfence: {scope}'s fence vanished meanwhile: nothing rebased");
            EXIT_FAILURE
        }
        Err(err) => database_error("cannot rebase", &err),
    }
}

/// Asks the operator to type the scope; refuses without a terminal.
fn confirm(scope: &str, current: i64, to: i64) -> Result<(), u8> {
    eprintln!(
        "zkfence: {scope}'s fence holds {current} (ZooKeeper epoch {}); rebasing sets it to {to}.\n\
         Do this only once no holder of the old ensemble can write any more: a lower fence lets\n\
         their late writes in.",
        current >> 32
    );
    if !std::io::stdin().is_terminal() {
        eprintln!("zkfence: no terminal to confirm on: pass --yes to rebase without asking");
        return Err(EXIT_USAGE);
    }
    eprint!("Type the scope to confirm: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if answer.trim_end_matches(['\n', '\r']) != scope {
        eprintln!("zkfence: not confirmed; nothing changed");
        return Err(EXIT_USAGE);
    }
    Ok(())
}
