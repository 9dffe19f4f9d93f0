//! The shell recipes of `docs/fences.md` (between its `<!-- recipes -->` markers), run exactly
//! as written: each under `zkfence run` for two holders in turn, then as a stale holder with
//! the first holder's token (plain, then zero-padded, as another client might send it): the
//! stale run exits non-zero and changes nothing.

mod common;

use zkfence_harness::LocalRedis;
use zkfence_harness::{chroot, shared, shared_mariadb};

use common::{postgres_database, run_with, zkfence, Database};

/// The lock path, with a quote in it: a recipe that pasted it into SQL text would break (or be
/// injected into); each recipe must pass it as data.
const LOCK: &str = "/locks/it's-orders";

/// The recipes of `docs/fences.md`, in order: (the store its first comment names, the script).
fn recipes() -> Vec<(String, String)> {
    let page = include_str!("../../docs/fences.md");
    let (_, rest) = page
        .split_once("<!-- recipes -->")
        .expect("the recipes' marker");
    let (recipes, _) = rest
        .split_once("<!-- /recipes -->")
        .expect("their end marker");
    recipes
        .split("```sh\n")
        .skip(1)
        .map(|block| {
            let script = block.split("```").next().unwrap_or_default().to_owned();
            let store = (script.trim_start_matches("# ").split(':').next())
                .unwrap_or_default()
                .to_owned();
            (store, script)
        })
        .collect()
}

/// What a recipe's run leaves: its exit code and the order's state, as the store holds it.
type Read<'a> = Box<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>
        + Send
        + Sync
        + 'a,
>;

/// Runs `script` under `zkfence run`, as a holder; its exit code and stderr.
async fn as_holder(hosts: &str, script: &str, env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut command = zkfence(&[
        "run",
        "--connect",
        hosts,
        "--lock",
        LOCK,
        "--",
        "sh",
        "-c",
        script,
    ]);
    command.envs(env.iter().map(|(k, v)| (*k, v.clone())));
    let (code, out, err) = run_with(command).await;
    (code, format!("{out}{err}"))
}

/// Runs `script` alone, as a stale holder that still has `token`.
async fn as_stale(script: &str, token: &str, env: &[(&str, String)]) -> (Option<i32>, String) {
    let mut command = std::process::Command::new("sh");
    command
        .args(["-c", script])
        .env("ZKFENCE_TOKEN", token)
        .env("ZKFENCE_LOCK_PATH", LOCK)
        .envs(env.iter().map(|(k, v)| (*k, v.clone())));
    let (code, out, err) = run_with(command).await;
    (code, format!("{out}{err}"))
}

/// Two holders run `script` in turn; then the first one's token, plain and padded, is refused
/// and leaves the state as the second holder wrote it.
async fn holders_then_stale(store: &str, script: &str, env: &[(&str, String)], read: Read<'_>) {
    let hosts = chroot(
        shared(),
        &format!("recipes-{}", store.to_lowercase().replace('/', "-")),
    )
    .await;
    let (code, out) = as_holder(&hosts, script, env).await;
    assert_eq!(code, Some(0), "{store}, the first holder: {out}");
    let first = read().await;
    let (code, out) = as_holder(&hosts, script, env).await;
    assert_eq!(code, Some(0), "{store}, the second holder: {out}");
    let second = read().await;
    assert_ne!(
        first, second,
        "{store}: the second holder wrote its own token"
    );
    let stale: String = first.rsplit(' ').next().unwrap().to_owned();
    for token in [
        stale.clone(),
        format!("{:019}", stale.parse::<i64>().unwrap()),
    ] {
        let (code, out) = as_stale(script, &token, env).await;
        assert!(
            matches!(code, Some(c) if c != 0),
            "{store}: the stale token {token} passed: {out}"
        );
        // The refusal as each store's client prints it: zkfence's message, the same everywhere.
        assert!(
            out.contains("zkfence: refused"),
            "{store}: the refusal: {out}"
        );
        assert_eq!(
            read().await,
            second,
            "{store}: the stale write changed the order"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_recipes_refuse_a_stale_holder_in_every_store() {
    let recipes = recipes();
    let names: Vec<&str> = recipes.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["PostgreSQL", "MySQL/MariaDB", "Redis"]);
    let name = format!("recipes_{}", std::process::id());

    // PostgreSQL: a database of the test's own, the fence installed, the order.
    let Database {
        conninfo: pg,
        client,
        ..
    } = postgres_database(&name).await;
    zkfence_postgres::PostgresFence::new()
        .install(&client)
        .await
        .unwrap();
    client
        .batch_execute("CREATE TABLE orders (id int PRIMARY KEY, state text, token bigint); INSERT INTO orders VALUES (7, 'new', 0)")
        .await
        .unwrap();
    let get = |key: &str| {
        (pg.split_whitespace())
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    let env = [
        ("PGHOST", get("host")),
        ("PGPORT", get("port")),
        ("PGUSER", get("user")),
        ("PGDATABASE", get("dbname")),
    ];
    let client = std::sync::Arc::new(client);
    let read: Read = Box::new(move || {
        let client = client.clone();
        Box::pin(async move {
            let row = client
                .query_one("SELECT state, token FROM orders WHERE id = 7", &[])
                .await
                .unwrap();
            format!("{} {}", row.get::<_, String>(0), row.get::<_, i64>(1))
        })
    });
    holders_then_stale("PostgreSQL", &recipes[0].1, &env, read).await;

    // MariaDB: a database of the test's own.
    let root = tokio::task::spawn_blocking(shared_mariadb).await.unwrap();
    let opts = mysql_async::Opts::from_url(root).unwrap();
    let port = opts.tcp_port();
    let pool_opts = mysql_async::OptsBuilder::from_opts(opts).prefer_socket(false);
    {
        use mysql_async::prelude::Queryable;
        let mut conn = mysql_async::Conn::new(pool_opts.clone()).await.unwrap();
        conn.query_drop(format!("CREATE DATABASE {name}; USE {name}"))
            .await
            .unwrap();
        zkfence_mysql::MySqlFence::new()
            .install(&mut conn)
            .await
            .unwrap();
        conn.query_drop("CREATE TABLE orders (id INT PRIMARY KEY, state VARCHAR(20), token BIGINT); INSERT INTO orders VALUES (7, 'new', 0)")
            .await
            .unwrap();
    }
    let env = [
        ("MYSQL_DATABASE", name.clone()),
        ("MYSQL_HOST", "127.0.0.1".to_owned()),
        ("MYSQL_TCP_PORT", port.to_string()),
    ];
    let (db, opts) = (name.clone(), pool_opts.clone());
    let read: Read = Box::new(move || {
        let (db, opts) = (db.clone(), opts.clone());
        Box::pin(async move {
            use mysql_async::prelude::Queryable;
            let mut conn = mysql_async::Conn::new(opts).await.unwrap();
            let row: Option<(String, i64)> = conn
                .query_first(format!("SELECT state, token FROM {db}.orders WHERE id = 7"))
                .await
                .unwrap();
            let (state, token) = row.unwrap();
            format!("{state} {token}")
        })
    });
    holders_then_stale("MySQL/MariaDB", &recipes[1].1, &env, read).await;

    // Redis: a server of the test's own, the function library loaded.
    let redis = tokio::task::spawn_blocking(LocalRedis::start)
        .await
        .unwrap()
        .unwrap();
    let url = format!("redis://{}/", redis.addr());
    let (code, out, err) = common::run(&["fence", "install", &url]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let env = [("REDIS_URL", url.clone())];
    let redis_client = redis::Client::open(url.clone()).unwrap();
    let read: Read = Box::new(move || {
        let client = redis_client.clone();
        Box::pin(async move {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let value: Option<String> = redis::cmd("GET")
                .arg(format!("{{{LOCK}}}:order:7"))
                .query_async(&mut conn)
                .await
                .unwrap();
            value.unwrap_or_else(|| "new 0".to_owned())
        })
    });
    holders_then_stale("Redis", &recipes[2].1, &env, read).await;
}
