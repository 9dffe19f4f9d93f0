//! `zkfence fence`: every store's fence, named by its URL. Install it (or print its script),
//! print what other languages need, show and rebase its fences, and verify a deployment with
//! the conformance kit's cases. `show` and `rebase` are the fence contract
//! ([`zkfence::fence::Fence`]), the same for every store; `install`, `script` and `verify` are
//! each store's own.

use std::error::Error as StdError;
use std::future::Future;
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zkfence::conformance::{self, FenceStore};
use zkfence::fence::{BoxError, ConfigError, Fence, FenceError, FenceState};

use crate::exit::{EXIT_FAILURE, EXIT_NO_PERMISSION, EXIT_UNAVAILABLE, EXIT_USAGE};
use crate::json::json_string;

/// Whether stdout was found closed (a reader such as `head -1` that went away) or unwritable.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Prints to stdout without ever panicking: once stdout is closed (`| head -1`) the rest of the
/// output is dropped quietly and the command carries on to its usual exit status; another
/// write error (a full disk) is said once on stderr.
fn emit(text: std::fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(text).and_then(|()| out.flush()) {
        STDOUT_GONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("zkfence: cannot write to stdout: {e}; the rest of the output is dropped");
        }
    }
}

/// `print!` through [`emit`].
macro_rules! say {
    ($($arg:tt)*) => { emit(format_args!($($arg)*)) };
}

/// `println!` through [`emit`].
macro_rules! sayln {
    ($($arg:tt)*) => { emit(format_args!("{}\n", format_args!($($arg)*))) };
}

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
MySQL/MariaDB the table and the procedures zkfence_claim, zkfence_seal, zkfence_begin and
zkfence_commit; Redis the function
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
        /// PostgreSQL, MariaDB: how long a transaction may sit idle after its claim before the
        /// server ends its session, so that a holder frozen inside its open transaction
        /// releases the fence row to its successor (0: no bound; MariaDB rounds up to whole
        /// seconds; Oracle MySQL has no such setting).
        #[arg(long, value_parser = crate::duration::parse_duration, default_value = "10s",
              env = "ZKFENCE_FENCE_IDLE_TIMEOUT")]
        #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
        idle_timeout: Duration,
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
writes in. Asks to type the scope unless --yes. A --to above the current fence is refused (exit
64) unless --raise: it would refuse every holder below it.

Examples:
  zkfence fence rebase postgresql://app@db/orders --scope /locks/orders
  zkfence fence rebase s3://reports/fenced --scope /locks/reports --to 4294967300 --yes")]
    Rebase {
        #[command(flatten)]
        at: At,
        /// The scope (lock path) to rebase.
        #[arg(long)]
        scope: String,
        /// The token to set the fence to (0: the next claim of any holder is accepted); at most
        /// the fence's current token unless --raise.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..))]
        to: i64,
        /// Allow a --to above the current fence (a claim raises a fence; rebase is for lowering
        /// it): refuses every holder below --to.
        #[arg(long)]
        raise: bool,
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

When the fence is missing (installed_fence_is_current fails and a claim cannot run), the
other cases are skipped: install it (zkfence fence install URL) and verify again. An older or
edited install fails installed_fence_is_current and the other cases run.

Exit status:
  0    every case passed
  1    a case failed or could not run (the fence is not safe there)
  64   a bad URL or option
  69   the store could not be reached
  70   another error (the scratch space could not be removed: the message names it)
  77   the store refused a privilege verify needs (CREATE for its scratch schema or database,
       an ACL), or authentication failed
  130  SIGINT, 143 SIGTERM: the cases stopped and the scratch space was removed

Output: a table on stdout (or --json: one object per case, then a summary object); logs of
the refusals the cases provoke are off unless RUST_LOG is set. A closed stdout (| head -1)
ends nothing: the rest of the output is dropped and the exit status is as above.

Examples:
  zkfence fence verify postgresql://app@db/orders
  zkfence fence verify s3://reports/zkfence-checks")]
    Verify {
        #[command(flatten)]
        at: At,
        /// One JSON object per case instead of a table, then a summary object (the schema:
        /// docs/fences.md, Verify); nothing else on stdout.
        #[arg(long, env = "ZKFENCE_JSON")]
        json: bool,
        /// Redis: pass a server that can lose acknowledged fences (no append-only file synced
        /// on every write, an allkeys-* eviction policy) with a warning instead of failing it.
        /// Only for a store whose data you may lose anyway.
        #[arg(long)]
        #[cfg_attr(not(feature = "redis"), allow(dead_code))]
        accept_volatile: bool,
    },
}

impl Args {
    /// Whether the command's expected warnings are better off the log: `verify`'s cases
    /// provoke refusals on purpose, each of which the library logs as a warning.
    pub(crate) fn provokes_refusals(&self) -> bool {
        matches!(self.action, Action::Verify { .. })
    }
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
    format!("this zkfence was built without the {feature} feature, which {store} needs: cargo install zkfence-cli --features {feature} (--features full: every store's)")
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
                // No bucket is fine for what reads the scheme alone (script, install --print);
                // a command that reaches the store asks for one (`s3`).
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
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

    /// The store failed `what`: 77 when it refused a privilege (or authentication), 64 when
    /// the URL names something that is no fence (a ZooKeeper node of other data), 70 otherwise;
    /// the message names each cause in turn (the server's own words, its SQLSTATE).
    fn store(what: &str, e: impl Into<BoxError>) -> Failed {
        let e = e.into();
        let e: &(dyn StdError + 'static) = &*e;
        if let Some(node) = not_a_fence(e) {
            return Failed::usage(format!(
                "{what}: the node {node} holds something else than a fence (a fence node holds \
                 `<token>\\n<scope>`, or nothing yet): give the URL of the fence node itself, \
                 zk://hosts/path/to/fence-node"
            ));
        }
        let why = explain(e);
        if refused_privilege(e) {
            return Failed(
                format!("{what}: the store refused a privilege: {why}; grant it, or use an account that has it"),
                EXIT_NO_PERMISSION,
            );
        }
        Failed(format!("{what}: {why}"), EXIT_FAILURE)
    }

    /// The store could not be reached (69), refused a privilege or authentication (77: `needs`
    /// says which privileges), or its URL cannot be used (64: a [`ConfigError`] anywhere in the
    /// chain); the message names each cause in turn.
    fn reaching(doing: &str, needs: &str, e: &(dyn StdError + 'static)) -> Failed {
        let why = explain(e);
        if causes(e).any(|c| c.is::<ConfigError>()) {
            Failed::usage(why)
        } else if refused_privilege(e) {
            Failed(
                format!("{doing}: the store refused a privilege: {why}; {needs}"),
                EXIT_NO_PERMISSION,
            )
        } else {
            Failed::unavailable(format!("{doing}: {why}"))
        }
    }
}

/// `e` and its causes.
fn causes<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(e), |e: &&'a (dyn StdError + 'static)| (*e).source())
}

/// `e`'s causes in plain words (the server's message rather than a driver's `db error`), with
/// PostgreSQL's SQLSTATE when there is one.
fn explain(e: &(dyn StdError + 'static)) -> String {
    let mut why = conformance::error_chain(e);
    if let Some(code) = sqlstate(e) {
        if !why.contains(&code) {
            why = format!("{why} (SQLSTATE {code})");
        }
    }
    why
}

/// PostgreSQL's SQLSTATE in `e`'s causes.
fn sqlstate(e: &(dyn StdError + 'static)) -> Option<String> {
    #[cfg(feature = "postgres")]
    return zkfence_postgres::sqlstate(e).map(str::to_owned);
    #[cfg(not(feature = "postgres"))]
    {
        let _ = e;
        None
    }
}

/// Whether the store refused a privilege or the credentials: PostgreSQL's SQLSTATE 42501
/// (insufficient_privilege) and 28P01 (a wrong password), MySQL's errors 1044, 1045, 1142,
/// 1227 and 1370, Redis's NOPERM, NOAUTH and WRONGPASS, ZooKeeper's NoAuth and AuthFailed,
/// an object store's 401 and 403.
fn refused_privilege(e: &(dyn StdError + 'static)) -> bool {
    if sqlstate(e).is_some_and(|code| code == "42501" || code == "28P01") {
        return true;
    }
    causes(e).any(|c| {
        if let Some(zkfence::Error::AccessDenied { .. }) = c.downcast_ref::<zkfence::Error>() {
            return true;
        }
        if let Some(zookeeper_client::Error::NoAuth | zookeeper_client::Error::AuthFailed) =
            c.downcast_ref::<zookeeper_client::Error>()
        {
            return true;
        }
        #[cfg(feature = "s3")]
        if let Some(
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. },
        ) = c.downcast_ref::<object_store::Error>()
        {
            return true;
        }
        let text = c.to_string();
        ["1044", "1045", "1142", "1227", "1370"]
            .iter()
            .any(|n| text.contains(&format!("ERROR {n} (")))
            || ["NOPERM", "NOAUTH", "WRONGPASS"]
                .iter()
                .any(|code| text.starts_with(code) || text.contains(&format!(": {code}")))
    })
}

/// The node, when `e` says a ZooKeeper node holds something else than a fence.
fn not_a_fence(e: &(dyn StdError + 'static)) -> Option<String> {
    causes(e).find_map(|c| match c.downcast_ref::<zkfence::Error>() {
        Some(zkfence::Error::NotAFence { node }) => Some(node.clone()),
        _ => None,
    })
}

pub(crate) async fn fence(args: Args) -> u8 {
    let outcome = match args.action {
        Action::Install {
            at,
            print: true,
            idle_timeout,
        } => script(&at, Some(idle_timeout)).map(|text| say!("{text}")),
        Action::Install {
            at,
            print: false,
            idle_timeout,
        } => install(&at, idle_timeout).await,
        Action::Script { at } => script(&at, None).map(|text| say!("{text}")),
        Action::Show { at, scope, json } => show(&at, scope.as_deref(), json).await,
        Action::Rebase {
            at,
            scope,
            to,
            raise,
            yes,
        } => rebase(&at, &scope, to, raise, yes).await,
        Action::Verify {
            at,
            json,
            accept_volatile,
        } => return verify(&at, json, accept_volatile).await,
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
/// The fenced objects under the prefix of `url` (`s3://bucket/prefix`), in S3 configured from
/// the AWS environment ([`zkfence_object_store::Connected::connect`]); what is wrong with the
/// URL or the environment as a usage error.
async fn s3(url: &str) -> Result<zkfence_object_store::Connected, Failed> {
    (zkfence_object_store::Connected::connect(url).await).map_err(Failed::usage)
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
    Failed::reaching(
        "cannot connect to the store",
        "use an account the store lets in",
        &*e,
    )
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
        Store::S3 { .. } => Box::new(s3(&at.url).await?),
        Store::ZooKeeper { hosts, node } => {
            let client = zk_client(&hosts).await?;
            Box::new(
                zkfence::fence::ZooKeeperFence::with_fence_node(client, node)
                    .map_err(Failed::usage)?,
            )
        }
    })
}

/// What the store installs (`install --print`: `idle` is install's idle bound), or what other
/// languages need (`script`: the script, the format).
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(unused_variables)
)]
fn script(at: &At, idle: Option<Duration>) -> Result<String, Failed> {
    Ok(match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(_) => (postgres_fence(at)?)
            .with_idle_timeout(idle.unwrap_or(DEFAULT_IDLE))
            .install_sql(),
        #[cfg(feature = "mysql")]
        Store::MySql(_) => zkfence_mysql::MySqlFence::new()
            .with_idle_timeout(idle.unwrap_or(DEFAULT_IDLE))
            .install_sql(),
        #[cfg(feature = "redis")]
        Store::Redis(_) if idle.is_some() => redis_fence(at).library(),
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

/// The idle bound a fence is installed with unless told otherwise (install's default).
#[cfg(any(feature = "postgres", feature = "mysql"))]
const DEFAULT_IDLE: Duration = Duration::from_secs(10);

#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql")),
    allow(unused_variables)
)]
async fn install(at: &At, idle: Duration) -> Result<(), Failed> {
    let done = match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => {
            let fence = postgres_fence(at)?.with_idle_timeout(idle);
            let fence = zkfence_postgres::Connected::connect(&url, fence)
                .await
                .map_err(cannot_connect)?;
            (fence.fence().install(fence.client()).await)
                .map_err(|e| Failed::store("cannot install the fence", e))?;
            "the table zkfence_fence and the function zkfence_claim(scope, token)".to_owned()
        }
        #[cfg(feature = "mysql")]
        Store::MySql(url) => {
            let fence = zkfence_mysql::MySqlFence::new().with_idle_timeout(idle);
            let fence = zkfence_mysql::Connected::connect(&url, fence)
                .await
                .map_err(cannot_connect)?;
            (fence.install().await).map_err(|e| Failed::store("cannot install the fence", e))?;
            "the table zkfence_fence and the procedures zkfence_claim(scope, token), zkfence_seal(scope), zkfence_begin(scope, token) and zkfence_commit(scope)".to_owned()
        }
        #[cfg(feature = "redis")]
        Store::Redis(url) => install_redis(at, &url).await?,
        #[cfg(feature = "s3")]
        Store::S3 { bucket, prefix } => {
            let fence = s3(&at.url).await?;
            (fence.fence().probe(fence.prefix()).await)
                .map_err(|e| Failed::store(&format!("s3://{bucket}/{prefix} cannot fence"), e))?;
            "nothing (an object carries its own fence); the store enforces conditional writes"
                .to_owned()
        }
        Store::ZooKeeper { .. } => {
            "nothing (the fence node is created by the first claim)".to_owned()
        }
    };
    sayln!("zkfence: installed {done}");
    Ok(())
}

/// Loads the Redis function library on the server, or on every primary of a cluster; what it
/// installed, and where.
#[cfg(feature = "redis")]
async fn install_redis(at: &At, url: &str) -> Result<String, Failed> {
    let fence = zkfence_redis::Connected::connect(url, redis_fence(at))
        .await
        .map_err(cannot_connect)?;
    let primaries = (fence.install().await)
        .map_err(|e| Failed::store("cannot load the function library", e))?;
    let library = "the function library zkfence: FCALL zkfence_claim, FCALL zkfence_write";
    Ok(match fence.is_cluster() {
        false => library.to_owned(),
        true => format!(
            "{library} (a Redis Cluster: loaded on {} primaries: {}; a replica gets it from its primary)",
            primaries.len(),
            primaries.join(", ")
        ),
    })
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
            sayln!(
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
        sayln!(
            "no fence yet{}",
            scope.map_or(String::new(), |s| format!(" for {s}"))
        );
        return Ok(());
    }
    sayln!(
        "{:<20} {:>6} {:>8}  {:<20} SCOPE",
        "TOKEN",
        "EPOCH",
        "CLAIMS",
        "UPDATED"
    );
    for s in states {
        let claims = s.claims.map_or("-".to_owned(), |c| c.to_string());
        let at =
            s.at.as_deref()
                .map_or(String::new(), |at| format!(" (at {at})"));
        sayln!(
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

async fn rebase(at: &At, scope: &str, to: i64, raise: bool, yes: bool) -> Result<(), Failed> {
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
    if to > current && !raise {
        return Err(Failed::usage(format!(
            "--to {to} is above {scope}'s fence, {current}: rebase lowers a fence (after the \
             ensemble was rebuilt from empty data) and a holder's claim raises it; nothing \
             changed. To set it higher anyway, refusing every holder below {to}, add --raise"
        )));
    }
    if !yes {
        confirm(scope, current, to)?;
    }
    match fence.rebase(scope, to).await {
        Ok(Some(old)) => {
            sayln!(
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

/// A case's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    Pass,
    /// The fence broke the case's rule: why.
    Fail(String),
    /// The case could not run: why.
    Broken(String),
    /// Not run: the fence is not installed.
    Skipped,
}

impl Verdict {
    /// The table's word for it, and `--json`'s.
    fn words(&self) -> (&'static str, &'static str) {
        match self {
            Verdict::Pass => ("pass", "pass"),
            Verdict::Fail(_) => ("FAIL", "fail"),
            Verdict::Broken(_) => ("BROKEN", "broken"),
            Verdict::Skipped => ("skipped", "skipped"),
        }
    }

    fn why(&self) -> Option<&str> {
        match self {
            Verdict::Fail(why) | Verdict::Broken(why) => Some(why),
            Verdict::Pass | Verdict::Skipped => None,
        }
    }
}

/// The case whose failure means the fence is not installed (or not as this version installs
/// it): every other case would fail after it for that one reason.
const INSTALLED: &str = "installed_fence_is_current";

/// `verify`'s report, printed case by case as they end: a table, or JSON lines.
#[derive(Debug)]
struct Report {
    json: bool,
    /// The command that installs the fence, with the URL's password left out.
    install: String,
    passed: usize,
    failed: usize,
    broken: usize,
    skipped: usize,
}

impl Report {
    fn new(json: bool, url: &str) -> Report {
        Report {
            json,
            install: format!("zkfence fence install {}", without_password(url)),
            passed: 0,
            failed: 0,
            broken: 0,
            skipped: 0,
        }
    }

    fn cases(&self) -> usize {
        self.passed + self.failed + self.broken + self.skipped
    }

    /// One case's line (the table's header before the first).
    fn case(&mut self, case: &str, verdict: &Verdict, took: Duration) {
        let (word, json_word) = verdict.words();
        if self.json {
            let why = verdict.why().map_or("null".to_owned(), json_string);
            sayln!(
                "{{\"kind\":\"case\",\"case\":{},\"verdict\":{},\"ms\":{},\"why\":{why}}}",
                json_string(case),
                json_string(json_word),
                took.as_millis(),
            );
        } else {
            if self.cases() == 0 {
                sayln!("{:<55} {:<7} {:>7}", "CASE", "VERDICT", "TIME");
            }
            let time = match verdict {
                Verdict::Skipped => "-".to_owned(),
                _ => format!("{} ms", took.as_millis()),
            };
            sayln!("{case:<55} {word:<7} {time:>7}");
            if let Some(why) = verdict.why() {
                sayln!("    {why}");
            }
            if case == INSTALLED && matches!(verdict, Verdict::Fail(_)) {
                sayln!("    install it, then verify again: {}", self.install);
            }
        }
        match verdict {
            Verdict::Pass => self.passed += 1,
            Verdict::Fail(_) => self.failed += 1,
            Verdict::Broken(_) => self.broken += 1,
            Verdict::Skipped => self.skipped += 1,
        }
    }

    /// `--json`'s last line: the counts, the exit status, and why it is not 0.
    fn summary(&self, exit: u8, why: Option<&str>) {
        if !self.json {
            return;
        }
        let verdict = match exit {
            0 => "pass",
            1 => "fail",
            130 | 143 => "interrupted",
            _ => "error",
        };
        sayln!(
            "{{\"kind\":\"summary\",\"verdict\":{},\"cases\":{},\"passed\":{},\"failed\":{},\"broken\":{},\"skipped\":{},\"exit\":{exit},\"why\":{}}}",
            json_string(verdict),
            self.cases(),
            self.passed,
            self.failed,
            self.broken,
            self.skipped,
            why.map_or("null".to_owned(), json_string),
        );
    }
}

/// `url` with its password (`user:password@`) left out, for a command to show.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let user = user.split_once(':').map_or(user, |(user, _)| user);
            format!("{scheme}://{user}:PASSWORD@{host}{path}")
        }
        _ => url.to_owned(),
    }
}

/// Runs `cases` on `store`, in order, reporting each as it ends. After a failed [`INSTALLED`],
/// a claim tells a missing fence (the claim cannot run: the rest are skipped, each would fail
/// for that one reason) from an older or edited one (the rest run: they say what it breaks).
async fn run_cases<S: FenceStore>(store: &S, cases: &[&'static str], report: &mut Report) {
    let mut missing = false;
    for &case in cases {
        if missing {
            report.case(case, &Verdict::Skipped, Duration::ZERO);
            continue;
        }
        let started = Instant::now();
        let verdict = match conformance::run(case, store).await {
            Some(Ok(())) => Verdict::Pass,
            Some(Err(conformance::Failure::Violation(why))) => Verdict::Fail(why),
            Some(Err(conformance::Failure::Broken(why))) => Verdict::Broken(why),
            None => Verdict::Broken(format!("this zkfence has no case {case}")),
        };
        report.case(case, &verdict, started.elapsed());
        if case == INSTALLED && matches!(verdict, Verdict::Fail(_)) {
            let probe = conformance::ticket("/kit/installed-probe", 1);
            missing = matches!(store.claim(&probe).await, Err(FenceError::Store(_)));
        }
    }
}

/// SIGINT and SIGTERM while `verify` runs: caught, so that it removes its scratch space before
/// it exits (130, 143).
struct Stop {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    /// The exit code of the signal caught, if one was.
    caught: Option<u8>,
}

impl Stop {
    fn new() -> Stop {
        use tokio::signal::unix::{signal, SignalKind};
        Stop {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
            caught: None,
        }
    }

    /// The next signal's exit code: 130 for SIGINT, 143 for SIGTERM.
    async fn signal(&mut self) -> u8 {
        async fn next(signal: &mut Option<tokio::signal::unix::Signal>) {
            match signal {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.int) => 130,
            () = next(&mut self.term) => 143,
        }
    }

    /// Runs `work` to its end, catching a signal meanwhile for later.
    async fn through<F: Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            let armed = self.caught.is_none();
            let code = tokio::select! {
                out = &mut work => return out,
                code = self.signal(), if armed => code,
            };
            self.caught = Some(code);
        }
    }
}

/// `work`, a panic in it caught (the panic hook has printed it): `Err` with its message, so
/// that what follows (the scratch space's removal) still runs.
async fn unpanicked<F: Future>(work: F) -> Result<F::Output, String> {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::task::Poll;
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(move |cx| {
        match catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => {
                let text = (panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Poll::Ready(Err(text))
            }
        }
    })
    .await
}

/// How long the removal of the scratch space may take.
const CLEANUP: Duration = Duration::from_secs(60);

/// Runs `cases` on `store` unless a signal was caught, until one is, then removes the store's
/// scratch space with `remove`, whatever happened.
async fn run_and_remove<S, F, R, E>(
    store: S,
    cases: &[&'static str],
    report: &mut Report,
    stop: &mut Stop,
    remove: F,
    scratch: &str,
) -> Result<(), Failed>
where
    S: FenceStore,
    F: FnOnce(S) -> R,
    R: Future<Output = Result<(), E>>,
    E: Into<BoxError>,
{
    let mut panicked = None;
    if stop.caught.is_none() {
        let caught = tokio::select! {
            ran = unpanicked(run_cases(&store, cases, report)) => {
                panicked = ran.err();
                None
            }
            code = stop.signal() => Some(code),
        };
        stop.caught = caught;
    }
    let cannot = format!("cannot remove {scratch}");
    match stop
        .through(tokio::time::timeout(CLEANUP, remove(store)))
        .await
    {
        Ok(Ok(())) if panicked.is_some() => Err(Failed(
            format!(
                "a case panicked ({}): a bug of zkfence's, please report it; {scratch} was removed",
                panicked.unwrap_or_default()
            ),
            EXIT_FAILURE,
        )),
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Failed::store(&cannot, e)),
        Err(_) => Err(Failed(
            format!(
                "{cannot}: not done within {} s; remove it by hand",
                CLEANUP.as_secs()
            ),
            EXIT_FAILURE,
        )),
    }
}

/// The name of this run's scratch space.
fn scratch() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{}_{nanos:x}", std::process::id())
}

/// What `verify` needs of a store, for a refused privilege's message.
#[cfg(feature = "postgres")]
const NEEDS_POSTGRES: &str = "verify needs the CREATE privilege on the database for its scratch \
    schema (GRANT CREATE ON DATABASE <db> TO <role>) and EXECUTE on zkfence_claim, or run it as \
    the role that installed the fence";
#[cfg(feature = "mysql")]
const NEEDS_MYSQL: &str = "verify needs CREATE and DROP for its scratch database (GRANT CREATE, \
    DROP ON `zkfence\\_verify\\_%`.* TO <user>) and EXECUTE on the fence's procedures";
#[cfg(feature = "redis")]
const NEEDS_REDIS: &str = "verify needs an ACL user that may write keys of its own (under the \
    fence's prefix) and call FCALL and FUNCTION";
const NEEDS_ZOOKEEPER: &str = "verify needs create, read, write and delete under the fence \
    node's path (authenticate as an identity the ACL grants them)";

/// Runs the deployment's cases on the store, reporting each as it ends; removes the scratch
/// space afterwards on every path: a case that fails or breaks, a store error, SIGINT or
/// SIGTERM (caught into `stop`). `accept_volatile`: Redis's `--accept-volatile`.
#[cfg_attr(not(feature = "redis"), allow(unused_variables))]
async fn check(
    at: &At,
    accept_volatile: bool,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let name = scratch();
    match Store::parse(&at.url).map_err(Failed::usage)? {
        #[cfg(feature = "postgres")]
        Store::Postgres(url) => check_postgres(at, &url, &name, report, stop).await,
        #[cfg(feature = "mysql")]
        Store::MySql(url) => check_mysql(&url, &name, report, stop).await,
        #[cfg(feature = "redis")]
        Store::Redis(url) => check_redis(at, &url, &name, accept_volatile, report, stop).await,
        #[cfg(feature = "s3")]
        Store::S3 { .. } => check_s3(&at.url, &name, report, stop).await,
        Store::ZooKeeper { hosts, node } => {
            check_zookeeper(&hosts, &node, &name, report, stop).await
        }
    }
}

/// A failed set-up of the scratch space, with what the store's user needs.
fn cannot(needs: &str, e: BoxError) -> Failed {
    Failed::reaching("cannot set up a scratch space in the store", needs, &*e)
}

#[cfg(feature = "postgres")]
async fn check_postgres(
    at: &At,
    url: &str,
    name: &str,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let cases = &conformance::DEPLOYMENT[..];
    let fence = postgres_fence(at)?;
    let setup = conformance::Setup::Deployed;
    // Its create drops the schema again when it fails part-way, and its remove skips the
    // scopes of a fence that is not installed.
    let store = stop
        .through(zkfence_postgres::ConformanceStore::create(
            url, fence, name, setup, None,
        ))
        .await
        .map_err(|e| cannot(NEEDS_POSTGRES, e))?;
    let remove = |store: zkfence_postgres::ConformanceStore| store.remove();
    run_and_remove(
        store,
        cases,
        report,
        stop,
        remove,
        &format!(
            "the scratch schema {} and its scopes",
            conformance::scratch_name(name, 63)
        ),
    )
    .await
}

#[cfg(feature = "mysql")]
async fn check_mysql(
    url: &str,
    name: &str,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let cases = &conformance::DEPLOYMENT[..];
    let fence = zkfence_mysql::MySqlFence::new();
    let setup = conformance::Setup::Deployed;
    let store = stop
        .through(zkfence_mysql::ConformanceStore::create(
            url, fence, name, setup, None,
        ))
        .await
        .map_err(|e| cannot(NEEDS_MYSQL, e))?;
    let remove = |store: zkfence_mysql::ConformanceStore| store.remove();
    run_and_remove(
        store,
        cases,
        report,
        stop,
        remove,
        &format!(
            "the scratch database {} and its scopes",
            conformance::scratch_name(name, 64)
        ),
    )
    .await
}

#[cfg(feature = "redis")]
async fn check_redis(
    at: &At,
    url: &str,
    name: &str,
    accept_volatile: bool,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let cases = &conformance::DEPLOYMENT[..];
    let store = stop
        .through(zkfence_redis::ConformanceStore::create(
            url,
            redis_fence(at),
            name,
            conformance::Setup::Deployed,
            None,
        ))
        .await
        .map_err(|e| cannot(NEEDS_REDIS, e))?
        .accept_volatile(accept_volatile);
    let json = report.json;
    // Where the cases' scopes fell, on a cluster: said before the keys go.
    let remove = move |store: zkfence_redis::ConformanceStore| async move {
        match store.placement().await {
            Ok(Some(placement)) if !json => {
                sayln!("zkfence: on a Redis Cluster, the cases' {placement}")
            }
            Err(e) => eprintln!("zkfence: cannot tell where the cases' scopes fell: {e}"),
            Ok(_) => {}
        }
        store.clear().await
    };
    let what = format!(
        "the scratch keys of {}",
        conformance::scratch_name(name, 200)
    );
    run_and_remove(store, cases, report, stop, remove, &what).await
}

#[cfg(feature = "s3")]
async fn check_s3(
    url: &str,
    name: &str,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let fence = s3(url).await?;
    let store =
        zkfence_object_store::ConformanceStore::new(fence.fence().clone(), fence.prefix(), name);
    let remove = |store: zkfence_object_store::ConformanceStore| store.clear();
    let cases = &conformance::CLAIMS_ONLY[..];
    let what = format!(
        "the scratch objects of {}",
        conformance::scratch_name(name, 200)
    );
    run_and_remove(store, cases, report, stop, remove, &what).await
}

async fn check_zookeeper(
    hosts: &str,
    node: &str,
    name: &str,
    report: &mut Report,
    stop: &mut Stop,
) -> Result<(), Failed> {
    let cases = &conformance::DEPLOYMENT[..];
    let client = zk_client(hosts).await?;
    let store = stop
        .through(zkfence::conformance::ZooKeeperStore::create(
            client.clone(),
            client,
            node,
            name,
            None,
        ))
        .await
        .map_err(|e| cannot(NEEDS_ZOOKEEPER, e.into()))?;
    let remove = |store: zkfence::conformance::ZooKeeperStore| store.clear();
    let what = format!(
        "the scratch nodes under {}/{}",
        node.trim_end_matches('/'),
        conformance::scratch_name(name, 200)
    );
    run_and_remove(store, cases, report, stop, remove, &what).await
}

async fn verify(at: &At, json: bool, accept_volatile: bool) -> u8 {
    let mut report = Report::new(json, &at.url);
    let mut stop = Stop::new();
    let checked = check(at, accept_volatile, &mut report, &mut stop).await;
    let (code, why) = match (checked, stop.caught) {
        (Err(Failed(why, code)), _) => (code, why),
        (Ok(()), Some(code)) => {
            let signal = if code == 130 { "SIGINT" } else { "SIGTERM" };
            let why = format!(
                "stopped by {signal} after {} cases; the scratch space was removed",
                report.cases()
            );
            (code, why)
        }
        (Ok(()), None) if report.skipped > 0 => {
            let why = format!(
                "the fence is missing here, or not as this version installs it ({} cases \
                 skipped): run {}, then verify again",
                report.skipped, report.install
            );
            (1, why)
        }
        (Ok(()), None) if report.failed + report.broken > 0 => {
            let why = format!(
                "{} of {} cases failed{}: do not rely on this store's fence until they pass",
                report.failed + report.broken,
                report.cases(),
                match report.broken {
                    0 => String::new(),
                    n => format!(" ({n} could not run)"),
                }
            );
            (1, why)
        }
        (Ok(()), None) => {
            if !json {
                sayln!(
                    "zkfence: {} cases passed: the fence holds on this store",
                    report.cases()
                );
            }
            report.summary(0, None);
            return 0;
        }
    };
    eprintln!("zkfence: {why}");
    report.summary(code, Some(&why));
    code
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
        // No bucket: enough for `script s3://`; a command that reaches the store asks for one.
        assert_eq!(
            Store::parse("s3://"),
            Ok(Store::S3 {
                bucket: String::new(),
                prefix: String::new()
            })
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert!(runtime
            .block_on(s3("s3://"))
            .err()
            .unwrap()
            .0
            .contains("bucket"));
        assert_eq!(
            without_password("mysql://app:secret@db:3306/orders"),
            "mysql://app:PASSWORD@db:3306/orders"
        );
        assert_eq!(
            without_password("postgresql://app@db/orders"),
            "postgresql://app@db/orders"
        );
    }
}
