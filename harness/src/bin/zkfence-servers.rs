//! `zkfence-servers [zookeeper|postgres|mysql|redis|curator]...`: the servers the harness
//! starts, for tests and benches written in other languages (the Python package's pytest suite
//! and bench): a ZooKeeper, a PostgreSQL, a MariaDB and a Redis (those named, or all four) on
//! loopback ports with temp dirs; `curator` adds the class path of Curator's jars and a
//! directory for classes compiled against them (`curator_classpath`, `curator_classes`).
//! Prints one JSON line of their addresses once all are up, then waits for its standard input
//! to close (its parent ending, or closing the pipe) and stops them all.
//!
//! ```text
//! $ zkfence-servers < some-pipe
//! {"zookeeper":"127.0.0.1:11234","postgres":"host=127.0.0.1 port=... user=postgres dbname=postgres","mysql":"mysql://root@127.0.0.1:.../mysql","redis":"redis://127.0.0.1:.../"}
//! ```

use std::io::Read as _;

use zkfence_harness::{LocalMariaDb, LocalPostgres, LocalRedis};
use zkfence_testkit::LocalZooKeeper;

fn main() {
    if let Err(err) = serve() {
        eprintln!("zkfence-servers: {err}");
        std::process::exit(1);
    }
}

/// The servers this run starts, each stopped when dropped.
#[derive(Default)]
struct Servers {
    zookeeper: Option<LocalZooKeeper>,
    postgres: Option<LocalPostgres>,
    mariadb: Option<LocalMariaDb>,
    redis: Option<LocalRedis>,
}

/// Starts the servers, prints their addresses, and stops them when standard input closes.
fn serve() -> Result<(), String> {
    const ALL: [&str; 4] = ["zookeeper", "postgres", "mysql", "redis"];
    let mut names: Vec<String> = std::env::args().skip(1).collect();
    if let Some(bad) = (names.iter()).find(|n| !ALL.contains(&n.as_str()) && *n != "curator") {
        return Err(format!(
            "no server {bad:?}: name zookeeper, postgres, mysql, redis or curator (none: the four servers)"
        ));
    }
    if names.is_empty() {
        names = ALL.iter().map(|n| n.to_string()).collect();
    }
    let dir = std::env::temp_dir().join(format!("zkfence-servers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let wants = |name: &str| names.iter().any(|n| n == name);
    let mut servers = Servers::default();
    let mut fields = Vec::new();
    let json = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    if wants("zookeeper") {
        let zookeeper = LocalZooKeeper::start().map_err(|e| e.to_string())?;
        fields.push(format!("\"zookeeper\":\"{}\"", json(&zookeeper.addr())));
        servers.zookeeper = Some(zookeeper);
    }
    if wants("postgres") {
        let postgres = LocalPostgres::start(&dir)?;
        fields.push(format!(
            "\"postgres\":\"{}\"",
            json(&postgres.conninfo("postgres"))
        ));
        servers.postgres = Some(postgres);
    }
    if wants("mysql") {
        let mariadb = LocalMariaDb::start(&dir)?;
        fields.push(format!("\"mysql\":\"{}\"", json(&mariadb.url("mysql"))));
        servers.mariadb = Some(mariadb);
    }
    if wants("redis") {
        let redis = LocalRedis::start()?;
        fields.push(format!("\"redis\":\"redis://{}/\"", json(&redis.addr())));
        servers.redis = Some(redis);
    }
    if wants("curator") {
        let classes = dir.join("classes");
        let classpath = zkfence_harness::curator::classpath(&classes)?;
        fields.push(format!("\"curator_classpath\":\"{}\"", json(&classpath)));
        let classes = classes.display().to_string();
        fields.push(format!("\"curator_classes\":\"{}\"", json(&classes)));
    }
    println!("{{{}}}", fields.join(","));
    // Until the parent is done with them: end of input, or an error reading it.
    let mut sink = [0u8; 256];
    while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
