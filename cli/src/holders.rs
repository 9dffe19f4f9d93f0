//! `zkfence holders`: a lock's queue, holder first.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zkfence::{Contender, Error, FencedLock, LockOptions};

use crate::connect::Connection;
use crate::exit::fail;
use crate::json::json_string;

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  zkfence holders --connect 127.0.0.1:2181 /locks/nightly
  zkfence holders --connect 127.0.0.1:2181 /locks/nightly --json | jq '.[0].identity'")]
pub(crate) struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The lock path.
    #[arg(env = "ZKFENCE_LOCK")]
    path: String,
    /// Print a JSON array instead of a table.
    #[arg(long, env = "ZKFENCE_JSON")]
    json: bool,
}

pub(crate) async fn holders(args: Args) -> u8 {
    if let Err(err) = FencedLock::check_path(&args.path) {
        return fail("bad lock path", &err);
    }
    let client = match args.connection.open(Duration::from_secs(10), None).await {
        Ok(client) => client,
        Err(code) => return code,
    };
    let lock = match FencedLock::new(client, args.path.clone(), LockOptions::default()) {
        Ok(lock) => lock,
        Err(err) => return fail("cannot use the lock", &err),
    };
    let queue = match lock.contenders().await {
        Ok(queue) => queue,
        // A lock path that does not exist (never used, or reaped when empty) has no holders.
        Err(Error::NoParent { .. }) => Vec::new(),
        Err(err) => return fail(&format!("cannot list {}", args.path), &err),
    };
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    if args.json {
        println!("{}", to_json(&queue, now_ms));
    } else if queue.is_empty() {
        println!("{}: nobody holds or waits for this lock", args.path);
    } else {
        println!(
            "{:<4} {:<8} {:<22} {:<20} {:>8}  {:<50} IDENTITY",
            "POS", "ROLE", "TOKEN", "SESSION", "AGE", "NODE"
        );
        for (i, c) in queue.iter().enumerate() {
            let role = if i == 0 { "holder" } else { "waiting" };
            let age = format!("{:.1}s", (now_ms - c.created_ms).max(0) as f64 / 1000.0);
            println!(
                "{i:<4} {role:<8} {:<22} {:<20} {age:>8}  {:<50} {}",
                c.token.as_u64().to_string(),
                c.session_id.to_string(),
                c.node,
                c.identity()
            );
        }
    }
    0
}

fn to_json(queue: &[Contender], now_ms: i64) -> String {
    let mut out = String::from("[");
    for (i, c) in queue.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "{{\"position\":{i},\"holder\":{},\"node\":{},\"sequence\":{},\"token\":{},\"session_id\":{},\"created_ms\":{},\"age_ms\":{},\"identity\":{}}}",
            i == 0,
            json_string(&c.node),
            c.token.sequence(),
            c.token.as_u64(),
            json_string(&c.session_id.to_string()),
            c.created_ms,
            (now_ms - c.created_ms).max(0),
            json_string(&c.identity()),
        );
    }
    out.push(']');
    out
}
