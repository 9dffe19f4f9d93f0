//! `zkfence fence`: every store's fence, named by its URL. Install it (or print its script),
//! print what other languages need, show and rebase its fences, and verify a deployment with
//! the conformance kit's cases. `show` and `rebase` are the fence contract
//! ([`zkfence::fence::Fence`]), the same for every store; `install`, `script` and `verify` are
//! each store's own.

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use zkfence::fence::conformance::{self, FenceStore, Outcome};
use zkfence::fence::{BoxError, ConfigError, Fence, FenceState};

use crate::exit::{EXIT_FAILURE, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::json::json_string;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

/// Where the fence lives.
#[derive(clap::Args, Debug)]
struct At {
    /// The store, by URL: postgresql://user@host/db, mysql://user:password@host/db
    /// (mariadb:// too), redis://host:port/db, s3://bucket/prefix (credentials, region and
    /// endpoint from the usual AWS_* variables), zk://host:port[,host:port]/fence-node.
    /// TLS: PostgreSQL as libpq's ?sslmode= (verify-full checks the server) and
    /// &sslrootcert=FILE; MySQL ?ssl-mode=REQUIRED|VERIFY_CA|VERIFY_IDENTITY&ssl-ca=FILE;
    /// rediss:// (roots from SSL_CERT_FILE or the system's); S3 over https by default.
    #[arg(value_name = "URL", env = "ZKFENCE_FENCE_URL")]
    url: String,
    /// PostgreSQL: the schema of the fence table and function (default: the search path's).
    #[arg(long, env = "ZKFENCE_FENCE_SCHEMA")]
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    schema: Option<String>,
    /// Redis: the fence keys' prefix (default: zkfence:fence:).
    #[arg(long, env = "ZKFENCE_FENCE_PREFIX")]
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    prefix: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Install the fence in the store (idempotent), or print what would be installed.
    #[command(after_help = "\
What each store gets: PostgreSQL the table zkfence_fence and the function zkfence_claim;
MySQL/MariaDB the table and the procedures zkfence_claim and zkfence_seal; Redis the function
library zkfence (zkfence_claim, zkfence_write; Redis 7); an object store nothing (install runs
the probe of its conditional writes); ZooKeeper nothing (the fence node is created by the
first claim).

Examples:
  zkfence fence install postgresql://app@db/orders
  zkfence fence install --print postgresql:// > migrations/0042_zkfence.sql
  zkfence fence install redis://cache:6379/")]
    Install {
        #[command(flatten)]
        at: At,
        /// Print the script instead of running it (only the URL's scheme is read).
        #[arg(long)]
        print: bool,
    },
    /// Print what a client of another language needs: the SQL, the Redis scripts and
    /// functions, the object format and write protocol, the fence node's format.
    #[command(after_help = "\
Examples:
  zkfence fence script mysql://
  zkfence fence script s3://")]
    Script {
        #[command(flatten)]
        at: At,
    },
    /// Show each fence: the highest token accepted, its ZooKeeper epoch, where it is kept.
    #[command(after_help = "\
Examples:
  zkfence fence show postgresql://app@db/orders
  zkfence fence show redis://cache/ --scope /locks/orders --json")]
    Show {
        #[command(flatten)]
        at: At,
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
  zkfence fence rebase postgresql://app@db/orders --scope /locks/orders
  zkfence fence rebase s3://reports/fenced --scope /locks/reports --to 4294967300 --yes")]
    Rebase {
        #[command(flatten)]
        at: At,
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
    /// Check a deployment: the conformance kit's cases against the store, in a scratch scope
    /// that it removes afterwards; a table of the cases, and a non-zero exit on any failure.
    #[command(after_help = "\
The cases: the store enforces conditional writes (object stores); tokens in order, equal,
at the edges (9/10, the epoch boundary, 2^53, i64::MAX); two first claims at once; a stale
writer paused before its commit while a newer one writes, on a second connection; holders
writing late; a serialization failure retried; the claim from another language with the
token in every text form, a refusal read as an error; a client that carries on after a
refusal commits nothing. An object store runs the first three (its read-modify-write cases
need a versioned bucket of their own: zkfence's tests run them).

It checks the fence as installed (zkfence fence install first), on scopes of its own under
/zkfence-verify/, and catches what only a deployment shows: a pooler in statement mode, a
proxy that passes no scripts, an emulator that ignores If-Match, an old or edited install,
missing privileges. Needs to create a scratch schema (PostgreSQL), database (MySQL), keys,
objects or nodes, and removes them and its scopes' fences afterwards.

Exit status: 0 every case passed; 1 a case failed (the fence is not safe there); 69 the store
could not be reached; 64 a bad URL.

Examples:
  zkfence fence verify postgresql://app@db/orders
  zkfence fence verify s3://reports/zkfence-checks")]
    Verify {
        #[command(flatten)]
        at: At,
        /// One JSON object per case instead of a table.
        #[arg(long, env = "ZKFENCE_JSON")]
        json: bool,
    },
}

/// A store, as its URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Store {
    #[cfg(feature = "postgres")]
    Postgres(String),
    #[cfg(feature = "mysql")]
    MySql(String),
    #[cfg(feature = "redis")]
    Redis(String),
    #[cfg(feature = "s3")]
    S3 {
        bucket: String,
        prefix: String,
    },
    ZooKeeper {
        hosts: String,
        node: String,
    },
}

/// The error for a store whose feature this build left out.
#[allow(dead_code)] // with every feature on
fn without(store: &str, feature: &str) -> String {
    format!("this zkfence was built without the {feature} feature, which {store} needs: cargo install zkfence-cli --features {feature} (every store's is on by default)")
}

impl Store {
    /// The store `url` names, or what to give instead.
    fn parse(url: &str) -> Result<Store, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(format!(
                "{url:?} is no store URL: give postgresql://…, mysql://…, redis://…, s3://bucket/prefix or zk://hosts/fence-node"
            ));
        };
        Ok(match scheme {
            #[cfg(feature = "postgres")]
            "postgresql" | "postgres" => Store::Postgres(url.to_owned()),
            #[cfg(not(feature = "postgres"))]
            "postgresql" | "postgres" => return Err(without("PostgreSQL", "postgres")),
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => Store::MySql(format!("mysql://{rest}")),
            #[cfg(not(feature = "mysql"))]
            "mysql" | "mariadb" => return Err(without("MySQL/MariaDB", "mysql")),
            #[cfg(feature = "redis")]
            "redis" | "rediss" => Store::Redis(url.to_owned()),
            #[cfg(not(feature = "redis"))]
            "redis" | "rediss" => return Err(without("Redis", "redis")),
            #[cfg(not(feature = "s3"))]
            "s3" => return Err(without("S3", "s3")),
            #[cfg(feature = "s3")]
            "s3" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(format!("{url:?}: give the bucket, s3://bucket/prefix"));
                }
                Store::S3 {
                    bucket: bucket.to_owned(),
                    prefix: prefix.trim_end_matches('/').to_owned(),
                }
            }
            "zk" | "zookeeper" => {
                let (hosts, node) = rest.split_once('/').unwrap_or((rest, ""));
                Store::ZooKeeper {
                    hosts: hosts.to_owned(),
                    node: format!("/{node}"),
                }
            }
            other => {
                return Err(format!(
                    "{other}:// is no store zkfence fences: give postgresql://, mysql:// (mariadb://), redis://, s3:// or zk://"
                ))
            }
        })
    }
}

/// How a command failed: its message and exit code.
struct Failed(String, u8);

impl Failed {
    fn usage(why: impl std::fmt::Display) -> Failed {
        Failed(why.to_string(), EXIT_USAGE)
    }

    fn unavailable(why: impl std::fmt::Display) -> Failed {
        Failed(why.to_string(), EXIT_UNAVAILABLE)
    }

    fn store(what: &str, why: impl std::fmt::Display) -> Failed {
        Failed(format!("{what}: {why}"), EXIT_FAILURE)
    }

    /// The store could not be reached (69), or its URL cannot be used (64: a
    /// [`ConfigError`] anywhere in the chain); the message names each cause in turn.
    fn reaching(doing: &str, e: &(dyn std::error::Error + 'static)) -> Failed {
        let mut why = e.to_string();
        let mut config = e.is::<ConfigError>();
        let mut cause = e.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !why.contains(&text) {
                why = format!("{why}: {text}");
            }
            config |= c.is::<ConfigError>();
            cause = c.source();
        }
        if config {
            Failed::usage(why)
        } else {
            Failed::unavailable(format!("{doing}: {why}"))
        }
    }
}

pub(crate) async fn fence(args: Args) -> u8 {
    let outcome = match args.action {
        Action::Install { at, print: true } => script(&at, true).map(|text| print!("{text}")),
        Action::Install { at, print: false } => install(&at).await,
        Action::Script { at } => script(&at, false).map(|text| print!("{text}")),
        Action::Show { at, scope, json } => show(&at, scope.as_deref(), json).await,
        Action::Rebase { at, scope, to, yes } => rebase(&at, &scope, to, yes).await,
        Action::Verify { at, json } => return verify(&at, json).await,
    };
    match outcome {
        Ok(()) => 0,
        Err(Failed(why, code)) => {
            eprintln!("zkfence: {why}");
            code
        }
    }
}

#[cfg(feature = "postgres")]
fn postgres_fence(at: &At) -> Result<zkfence_postgres::PostgresFence, Failed> {
    let fence = zkfence_postgres::PostgresFence::new();
    match &at.schema {
        None => Ok(fence),
        Some(schema) => fence
            .with_schema(schema)
            .map_err(|e| Failed::usage(format!("--schema: {e}"))),
    }
}

#[cfg(feature = "redis")]
fn redis_fence(at: &At) -> zkfence_redis::RedisFence {
    let fence = zkfence_redis::RedisFence::new();
    match &at.prefix {
        None => fence,
        Some(prefix) => fence.with_prefix(prefix.clone()),
    }
}

#[cfg(feature = "s3")]
/// An S3 client of `bucket`, configured from the AWS environment (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT` for S3-compatible stores,
/// `AWS_ALLOW_HTTP`), with conditional puts.
fn s3(bucket: &str) -> Result<zkfence_object_store::ObjectFence, Failed> {
    use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
    let store = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .map_err(|e| Failed::usage(format!("s3://{bucket}: {e} (set AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; AWS_ENDPOINT for an S3-compatible store)")))?;
    Ok(zkfence_object_store::ObjectFence::new(std::sync::Arc::new(
        store,
    )))
}

/// A ZooKeeper client of `hosts`, with the CLI's connect defaults.
async fn zk_client(hosts: &str) -> Result<zookeeper_client::Client, Failed> {
    let connect = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(hosts);
    match tokio::time::timeout(Duration::from_secs(10), connect).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(Failed::unavailable(format!(
            "cannot connect to ZooKeeper at {hosts}: {e}"
        ))),
        Err(_) => Err(Failed::unavailable(format!(
            "cannot connect to ZooKeeper at {hosts} within 10 s"
        ))),
    }
}

/// A store that could not be reached, or whose URL cannot be used.
#[allow(dead_code)] // with only ZooKeeper's and S3's fences, which connect otherwise
fn cannot_connect(e: BoxError) -> Failed {
    Failed::reaching("cannot connect to the store", &*e)
}

/// The store's fence on a connection of its own: the fence contract.
async fn connect(at: &At) -> Result<Box<dyn Fence>, Failed> {
    Ok(match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => Box::new(
            zkfence_postgres::Connected::connect(&url, postgres_fence(at)?)
                .await
                .map_err(cannot_connect)?,
        ),
        #[cfg(feature = "mysql")]
        Store::MySql(url) => Box::new(
            zkfence_mysql::Connected::connect(&url, zkfence_mysql::MySqlFence::new())
                .await
                .map_err(cannot_connect)?,
        ),
        #[cfg(feature = "redis")]
        Store::Redis(url) => Box::new(
            zkfence_redis::Connected::connect(&url, redis_fence(at))
                .await
                .map_err(cannot_connect)?,
        ),
        #[cfg(feature = "s3")]
        Store::S3 { bucket, prefix } => Box::new(zkfence_object_store::Prefixed::new(
            s3(&bucket)?,
            prefix.into(),
        )),
        Store::ZooKeeper { hosts, node } => {
            let client = zk_client(&hosts).await?;
            Box::new(
                zkfence::fence::ZooKeeperFence::with_fence_node(client, node)
                    .map_err(Failed::usage)?,
            )
        }
    })
}

/// What the store installs (`print`), or what other languages need (the script, the format).
#[cfg_attr(not(feature = "redis"), allow(unused_variables))] // `print` is Redis's alone
fn script(at: &At, print: bool) -> Result<String, Failed> {
    Ok(match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(_) => postgres_fence(at)?.install_sql(),
        #[cfg(feature = "mysql")]
        Store::MySql(_) => zkfence_mysql::MySqlFence::new().install_sql(),
        #[cfg(feature = "redis")]
        Store::Redis(_) if print => zkfence_redis::FUNCTIONS.to_owned(),
        #[cfg(feature = "redis")]
        Store::Redis(_) => format!(
            "-- zkfence_claim and zkfence_write, for FUNCTION LOAD (zkfence fence install) and FCALL:\n{}\n\
             -- The claim alone, for EVAL where functions cannot be loaded (before Redis 7):\n{}\n\
             -- The fenced write, for EVAL:\n{}",
            zkfence_redis::FUNCTIONS,
            zkfence_redis::CLAIM_SCRIPT,
            zkfence_redis::WRITE_SCRIPT
        ),
        #[cfg(feature = "s3")]
        Store::S3 { .. } => zkfence_object_store::PROTOCOL.to_owned(),
        Store::ZooKeeper { .. } => zkfence::fence::ZOOKEEPER_FORMAT.to_owned(),
    })
}

async fn install(at: &At) -> Result<(), Failed> {
    let done = match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            let fence = zkfence_postgres::Connected::connect(&url, postgres_fence(at)?)
                .await
                .map_err(cannot_connect)?;
            (fence.fence().install(fence.client()).await)
                .map_err(|e| Failed::store("cannot install the fence", e))?;
            "the table zkfence_fence and the function zkfence_claim(scope, token)"
        }
        #[cfg(feature = "mysql")]
        Store::MySql(url) => {
            let fence = zkfence_mysql::Connected::connect(&url, zkfence_mysql::MySqlFence::new())
                .await
                .map_err(cannot_connect)?;
            (fence.install().await).map_err(|e| Failed::store("cannot install the fence", e))?;
            "the table zkfence_fence and the procedures zkfence_claim(scope, token) and zkfence_seal(scope)"
        }
        #[cfg(feature = "redis")]
        Store::Redis(url) => {
            let fence = zkfence_redis::Connected::connect(&url, redis_fence(at))
                .await
                .map_err(cannot_connect)?;
            (fence.install().await)
                .map_err(|e| Failed::store("cannot load the function library", e))?;
            "the function library zkfence: FCALL zkfence_claim, FCALL zkfence_write"
        }
        #[cfg(feature = "s3")]
        Store::S3 { bucket, prefix } => {
            let fence = s3(&bucket)?;
            (fence.probe(&prefix.clone().into()).await)
                .map_err(|e| Failed::store(&format!("s3://{bucket}/{prefix} cannot fence"), e))?;
            "nothing (an object carries its own fence); the store enforces conditional writes"
        }
        Store::ZooKeeper { .. } => "nothing (the fence node is created by the first claim)",
    };
    println!("zkfence: installed {done}");
    Ok(())
}

async fn show(at: &At, scope: Option<&str>, json: bool) -> Result<(), Failed> {
    let fence = connect(at).await?;
    let states = (fence.fences().await)
        .map_err(|e| Failed::store("cannot read the fences (installed?)", e))?;
    let states: Vec<&FenceState> = (states.iter())
        .filter(|s| scope.is_none_or(|scope| s.scope == scope))
        .collect();
    if json {
        for s in states {
            let number = |n: Option<i64>| n.map_or("null".to_owned(), |n| n.to_string());
            let text = |t: &Option<String>| t.as_deref().map_or("null".to_owned(), json_string);
            println!(
                "{{\"scope\":{},\"token\":{},\"epoch\":{},\"at\":{},\"claims\":{},\"updated\":{}}}",
                json_string(&s.scope),
                s.token,
                s.token >> 32,
                text(&s.at),
                number(s.claims),
                text(&s.updated)
            );
        }
        return Ok(());
    }
    if states.is_empty() {
        println!(
            "no fence yet{}",
            scope.map_or(String::new(), |s| format!(" for {s}"))
        );
        return Ok(());
    }
    println!(
        "{:<20} {:>6} {:>8}  {:<20} SCOPE",
        "TOKEN", "EPOCH", "CLAIMS", "UPDATED"
    );
    for s in states {
        let claims = s.claims.map_or("-".to_owned(), |c| c.to_string());
        let at =
            s.at.as_deref()
                .map_or(String::new(), |at| format!(" (at {at})"));
        println!(
            "{:<20} {:>6} {:>8}  {:<20} {}{at}",
            s.token,
            s.token >> 32,
            claims,
            s.updated.as_deref().unwrap_or("-"),
            s.scope
        );
    }
    Ok(())
}

async fn rebase(at: &At, scope: &str, to: i64, yes: bool) -> Result<(), Failed> {
    let fence = connect(at).await?;
    let current = match fence.seen(scope).await {
        Ok(Some(current)) => current,
        Ok(None) => {
            return Err(Failed(
                format!("{scope} has no fence: nothing to rebase"),
                EXIT_FAILURE,
            ))
        }
        Err(e) => return Err(Failed::store("cannot read the fence (installed?)", e)),
    };
    if !yes {
        confirm(scope, current, to)?;
    }
    match fence.rebase(scope, to).await {
        Ok(Some(old)) => {
            println!(
                "zkfence: the fence of {scope} moved from {old} (epoch {}) to {to}",
                old >> 32
            );
            Ok(())
        }
        Ok(None) => Err(Failed(
            format!("{scope}'s fence vanished meanwhile: nothing rebased"),
            EXIT_FAILURE,
        )),
        Err(e) => Err(Failed::store("cannot rebase", e)),
    }
}

/// Asks the operator to type the scope; refuses without a terminal.
fn confirm(scope: &str, current: i64, to: i64) -> Result<(), Failed> {
    eprintln!(
        "zkfence: {scope}'s fence holds {current} (ZooKeeper epoch {}); rebasing sets it to {to}.\n\
         Do this only once no holder of the old ensemble can write any more: a lower fence lets\n\
         their late writes in.",
        current >> 32
    );
    if !std::io::stdin().is_terminal() {
        return Err(Failed::usage(
            "no terminal to confirm on: pass --yes to rebase without asking",
        ));
    }
    eprint!("Type the scope to confirm: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if answer.trim_end_matches(['\n', '\r']) != scope {
        return Err(Failed::usage("not confirmed; nothing changed"));
    }
    Ok(())
}

/// One case's result.
struct Checked {
    case: &'static str,
    outcome: Outcome,
    took: Duration,
}

/// Runs `cases` on `store`, in order.
async fn run_cases<S: FenceStore>(store: &S, cases: &[&'static str]) -> Vec<Checked> {
    let mut checked = Vec::new();
    for &case in cases {
        let started = Instant::now();
        let outcome = match conformance::run(case, store).await {
            Some(outcome) => outcome,
            None => Err(conformance::Failure::Broken(format!("no case {case}"))),
        };
        checked.push(Checked {
            case,
            outcome,
            took: started.elapsed(),
        });
    }
    checked
}

/// The name of this run's scratch space.
fn scratch() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}_{nanos:x}", std::process::id())
}

/// Runs the deployment's cases on the store; removes the scratch space after.
async fn check(at: &At) -> Result<Vec<Checked>, Failed> {
    let cannot = |e: BoxError| {
        Failed::reaching(
            "cannot set up a scratch space in the store (connect, privileges)",
            &*e,
        )
    };
    let name = scratch();
    let cases = &conformance::DEPLOYMENT[..];
    Ok(match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            let fence = postgres_fence(at)?;
            let setup = conformance::Setup::Deployed;
            let store = zkfence_postgres::ConformanceStore::create(&url, fence, &name, setup, None)
                .await
                .map_err(cannot)?;
            let checked = run_cases(&store, cases).await;
            (store.remove().await)
                .map_err(|e| Failed::store("cannot remove the scratch schema and scopes", e))?;
            checked
        }
        #[cfg(feature = "mysql")]
        Store::MySql(url) => {
            let fence = zkfence_mysql::MySqlFence::new();
            let setup = conformance::Setup::Deployed;
            let store = zkfence_mysql::ConformanceStore::create(&url, fence, &name, setup, None)
                .await
                .map_err(cannot)?;
            let checked = run_cases(&store, cases).await;
            (store.remove().await)
                .map_err(|e| Failed::store("cannot remove the scratch database and scopes", e))?;
            checked
        }
        #[cfg(feature = "redis")]
        Store::Redis(url) => {
            let store = zkfence_redis::ConformanceStore::create(
                &url,
                redis_fence(at),
                &name,
                conformance::Setup::Deployed,
                None,
            )
            .await
            .map_err(cannot)?;
            let checked = run_cases(&store, cases).await;
            (store.clear().await)
                .map_err(|e| Failed::store("cannot remove the scratch keys", e))?;
            checked
        }
        #[cfg(feature = "s3")]
        Store::S3 { bucket, prefix } => {
            let store =
                zkfence_object_store::ConformanceStore::new(s3(&bucket)?, &prefix.into(), &name);
            let checked = run_cases(&store, &conformance::CLAIMS_ONLY).await;
            (store.clear().await)
                .map_err(|e| Failed::store("cannot remove the scratch objects", e))?;
            checked
        }
        Store::ZooKeeper { hosts, node } => {
            let client = zk_client(&hosts).await?;
            let store =
                zkfence::fence::ZooKeeperStore::create(client.clone(), client, &node, &name, None)
                    .await
                    .map_err(|e| cannot(e.into()))?;
            let checked = run_cases(&store, cases).await;
            (store.clear().await)
                .map_err(|e| Failed::store("cannot remove the scratch nodes", e))?;
            checked
        }
    })
}

async fn verify(at: &At, json: bool) -> u8 {
    let checked = match check(at).await {
        Ok(checked) => checked,
        Err(Failed(why, code)) => {
            eprintln!("zkfence: {why}");
            return code;
        }
    };
    let verdict = |o: &Outcome| match o {
        Ok(()) => ("pass", String::new()),
        Err(conformance::Failure::Violation(why)) => ("FAIL", why.clone()),
        Err(conformance::Failure::Broken(why)) => ("BROKEN", why.clone()),
    };
    if json {
        for c in &checked {
            let (verdict, why) = verdict(&c.outcome);
            println!(
                "{{\"case\":{},\"verdict\":{},\"ms\":{},\"why\":{}}}",
                json_string(c.case),
                json_string(verdict),
                c.took.as_millis(),
                json_string(&why)
            );
        }
    } else {
        println!("{:<46} {:<7} {:>7}", "CASE", "VERDICT", "TIME");
        for c in &checked {
            let (verdict, why) = verdict(&c.outcome);
            let ms = format!("{} ms", c.took.as_millis());
            println!("{:<46} {:<7} {ms:>7}", c.case, verdict);
            if !why.is_empty() {
                println!("    {why}");
            }
        }
    }
    let failed = checked.iter().filter(|c| c.outcome.is_err()).count();
    if failed == 0 {
        println!(
            "zkfence: {} cases passed: the fence holds on this store",
            checked.len()
        );
        0
    } else {
        eprintln!("zkfence: {failed} of {} cases failed: do not rely on this store's fence until they pass", checked.len());
        1
    }
}

#[cfg(all(test, feature = "mysql", feature = "s3"))]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_stores() {
        assert_eq!(
            Store::parse("mariadb://app@db/orders"),
            Ok(Store::MySql("mysql://app@db/orders".into()))
        );
        assert_eq!(
            Store::parse("s3://reports/fenced/"),
            Ok(Store::S3 {
                bucket: "reports".into(),
                prefix: "fenced".into()
            })
        );
        assert_eq!(
            Store::parse("zk://a:2181,b:2181/app/fence"),
            Ok(Store::ZooKeeper {
                hosts: "a:2181,b:2181".into(),
                node: "/app/fence".into()
            })
        );
        assert!(Store::parse("db.internal")
            .unwrap_err()
            .contains("postgresql://"));
        assert!(Store::parse("ftp://x").unwrap_err().contains("no store"));
        assert!(Store::parse("s3:///x").unwrap_err().contains("bucket"));
    }
}
