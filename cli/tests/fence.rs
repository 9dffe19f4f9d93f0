//! The PostgreSQL fence from outside, as users meet it: `zkfence fence install|show|rebase`;
//! `psql` calling the SQL function from a `zkfence run` command, refused once a newer holder
//! claimed; and a service in another process that only received the holder's ticket refusing
//! the late write of a holder frozen past its session timeout.

mod common;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_postgres::NoTls;
use zkfence::fence::{FenceError, FenceTicket};
use zkfence_harness::{chroot, shared, wait_until};
use zkfence_postgres::PostgresFence;

use common::{exited, postgres_database, run, temp, zkfence};

/// A database of its own for one test, with the fence installed and `table` created.
async fn fenced_database(name: &str, table: &str) -> (String, tokio_postgres::Client) {
    let (conninfo, client) = database(name).await;
    PostgresFence::new().install(&client).await.unwrap();
    client.batch_execute(table).await.unwrap();
    (conninfo, client)
}

/// A database of its own for one test, named after `name`.
async fn database(name: &str) -> (String, tokio_postgres::Client) {
    let db = postgres_database(&format!("cli_{name}_{}", std::process::id())).await;
    (db.conninfo, db.client)
}

/// `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE` for `psql`, from a key=value connection string.
fn pg_env(conninfo: &str) -> Vec<(String, String)> {
    (conninfo.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| {
            let name = match k {
                "host" => "PGHOST",
                "port" => "PGPORT",
                "user" => "PGUSER",
                "dbname" => "PGDATABASE",
                _ => return None,
            };
            Some((name.to_owned(), v.to_owned()))
        })
        .collect()
}

/// `conninfo` (key=value pairs) as a `postgresql://` URL, as users give it.
fn url_of(conninfo: &str) -> String {
    let get = |key: &str| {
        (conninfo.split_whitespace())
            .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .to_owned()
    };
    format!(
        "postgresql://{}@{}:{}/{}",
        get("user"),
        get("host"),
        get("port"),
        get("dbname")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn install_show_and_rebase_from_the_command_line() {
    let (conninfo, client) = database("ops").await;
    let url = url_of(&conninfo);
    let url = [url.as_str()];
    let (code, out, err) = run(&[&["fence", "install"][..], &url].concat()).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, _) = run(&[&["fence", "show"][..], &url].concat()).await;
    assert_eq!((code, out.trim()), (Some(0), "no fence yet"));
    let ticket: FenceTicket = "5@17179869189::/locks/ops".parse().unwrap();
    PostgresFence::new().claim(&client, &ticket).await.unwrap();
    let (code, out, _) = run(&[&["fence", "show", "--json"][..], &url].concat()).await;
    assert_eq!(code, Some(0));
    assert_eq!(
        out.trim(),
        format!(
            "{{\"scope\":\"/locks/ops\",\"token\":17179869189,\"epoch\":4,\"at\":null,\"claims\":1,\"updated\":{}",
            out.trim().rsplit_once("\"updated\":").unwrap().1
        )
    );
    // No terminal to confirm on: refused, nothing changed.
    let rebase = ["fence", "rebase", "--scope", "/locks/ops", "--to", "3"];
    let (code, _, err) = run(&[&rebase[..], &url].concat()).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("--yes"), "{err}");
    assert!(err.contains("epoch 4"), "{err}");
    let fence = PostgresFence::new();
    assert_eq!(
        fence.seen(&client, "/locks/ops").await.unwrap(),
        Some(17179869189)
    );
    let (code, out, err) = run(&[&rebase[..], &url, &["--yes"]].concat()).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("moved from 17179869189"), "{out}");
    assert_eq!(fence.seen(&client, "/locks/ops").await.unwrap(), Some(3));
    // The script, for migration tools, without a database.
    let (code, out, _) = run(&[
        "fence",
        "install",
        "--print",
        "--schema",
        "ops",
        "postgresql://",
    ])
    .await;
    assert_eq!(code, Some(0));
    assert!(
        out.contains("CREATE OR REPLACE FUNCTION \"ops\".zkfence_claim"),
        "{out}"
    );
    let (code, _, err) = run(&["fence", "show", "postgresql://app@127.0.0.1:1/db"]).await;
    assert_eq!(code, Some(69), "{err}");
    let (code, _, err) = run(&["fence", "show", "db.internal"]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("postgresql://"), "{err}");
}

/// A holder's command leaves behind a writer the supervisor cannot stop (it left the command's
/// process group), which writes late with `psql`: the SQL function refuses it once the next
/// holder's `psql` has claimed, and its transaction writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_in_a_run_command_is_refused_once_a_newer_holder_claimed() {
    let hosts = chroot(shared(), "cli-fence-psql").await;
    let table = "CREATE TABLE writes (token bigint NOT NULL)";
    let (conninfo, client) = fenced_database("psql", table).await;
    let dir = temp("fence-psql");
    std::fs::write(
        dir.join("write.sql"),
        "BEGIN;\nSELECT zkfence_claim(:'scope', :token);\nINSERT INTO writes VALUES (:token);\nCOMMIT;\n",
    )
    .unwrap();
    let psql = r#"psql -X -q -v ON_ERROR_STOP=1 -v scope="$ZKFENCE_LOCK_PATH" -v token="$ZKFENCE_TOKEN" -f "$DIR/write.sql""#;
    // The runaway says when it has left the group (setsid ran), and the command waits for
    // that: zkfence stops what is still in the command's group when the command exits.
    let runaway = format!(
        r#"setsid sh -c 'echo > "$DIR/detached"; while [ ! -e "$DIR/go" ]; do sleep 0.02; done; {psql} > "$DIR/late.out" 2>&1; echo $? > "$DIR/late.code"' < /dev/null > /dev/null 2>&1 &
        while [ ! -e "$DIR/detached" ]; do sleep 0.01; done
        echo "$ZKFENCE_TOKEN" > "$DIR/first""#
    );
    let mut first = zkfence(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/locks/psql",
        "--",
        "sh",
        "-c",
        &runaway,
    ]);
    first.env("DIR", &dir).envs(pg_env(&conninfo));
    let (code, _, err) = common::run_with(first).await;
    assert_eq!(code, Some(0), "{err}");
    let mut second = zkfence(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/locks/psql",
        "--",
        "sh",
        "-c",
        psql,
    ]);
    second.env("DIR", &dir).envs(pg_env(&conninfo));
    let (code, _, err) = common::run_with(second).await;
    assert_eq!(code, Some(0), "the current holder's psql: {err}");
    std::fs::write(dir.join("go"), "").unwrap();
    wait_until(Duration::from_secs(20), "the runaway writer", || async {
        dir.join("late.code").exists()
    })
    .await;
    let late = std::fs::read_to_string(dir.join("late.out")).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("late.code"))
            .unwrap()
            .trim(),
        "3",
        "{late}"
    );
    let first_token: i64 = std::fs::read_to_string(dir.join("first"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        late.contains(&format!("our token {first_token};")),
        "{late}"
    );
    let rows = client.query("SELECT token FROM writes", &[]).await.unwrap();
    assert_eq!(rows.len(), 1, "only the current holder wrote");
    assert!(rows[0].get::<_, i64>(0) > first_token);
}

/// A service that writes on its holders' behalf, knowing each only by the ticket it sent
/// (Chubby's sequencer model): one line `<ticket> <payload>` per write, one reply.
async fn service(listener: tokio::net::TcpListener, conninfo: String) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let conninfo = conninfo.clone();
        tokio::spawn(async move {
            let (mut db, connection) = tokio_postgres::connect(&conninfo, NoTls).await.unwrap();
            tokio::spawn(connection);
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let (ticket, payload) = line.rsplit_once(' ').unwrap_or((&line, ""));
                let reply = match ticket.parse::<FenceTicket>() {
                    Err(err) => format!("bad ticket: {err}"),
                    Ok(ticket) => {
                        let payload = payload.to_owned();
                        let outcome = PostgresFence::new()
                            .transaction(&mut db, &ticket, |tx| {
                                let payload = payload.clone();
                                Box::pin(async move {
                                    tx.execute("INSERT INTO notes VALUES ($1)", &[&payload])
                                        .await
                                })
                            })
                            .await;
                        match outcome {
                            Ok(_) => "ok".to_owned(),
                            Err(FenceError::Refused { seen, .. }) => format!("refused {seen}"),
                            Err(err) => format!("error {err}"),
                        }
                    }
                };
                let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_only_received_the_ticket_refuses_a_frozen_holders_late_write() {
    let hosts = chroot(shared(), "cli-fence-service").await;
    let table = "CREATE TABLE notes (payload text NOT NULL)";
    let (conninfo, client) = fenced_database("service", table).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    tokio::spawn(service(listener, conninfo));
    let dir = temp("fence-service");
    // Its first write goes through; then it waits, and its late write goes out on `go`.
    let holder = r#"exec 3<>"/dev/tcp/127.0.0.1/$PORT"
        printf '%s first\n' "$ZKFENCE_TICKET" >&3; read -r reply <&3; echo "$reply" > "$DIR/r1"
        while [ ! -e "$DIR/go" ]; do sleep 0.02; done
        printf '%s late\n' "$ZKFENCE_TICKET" >&3; read -r reply <&3; echo "$reply" > "$DIR/r2"
        sleep 600"#;
    let run = |script: &str| {
        let mut cmd = zkfence(&[
            "run",
            "--connect",
            &hosts,
            "--lock",
            "/locks/service",
            "--session-timeout",
            "2s",
            "--",
            "bash",
            "-c",
            script,
        ]);
        cmd.env("DIR", &dir)
            .env("PORT", &port)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    let first = run(holder);
    wait_until(
        Duration::from_secs(20),
        "the first write's reply",
        || async { std::fs::read_to_string(dir.join("r1")).is_ok_and(|r| r.trim() == "ok") },
    )
    .await;
    // Freeze the holder's zkfence (a GC pause, a SIGSTOP): its session expires; its command
    // goes on, with the ticket it was given.
    let pid = first.id() as i32;
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let second = run(r#"exec 3<>"/dev/tcp/127.0.0.1/$PORT"
        printf '%s second\n' "$ZKFENCE_TICKET" >&3; read -r reply <&3; echo "$reply" > "$DIR/r3""#);
    let second = exited(second).await;
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("r3")).unwrap().trim(),
        "ok"
    );
    std::fs::write(dir.join("go"), "").unwrap();
    wait_until(
        Duration::from_secs(20),
        "the late write's reply",
        || async {
            dir.join("r2").exists() && !std::fs::read_to_string(dir.join("r2")).unwrap().is_empty()
        },
    )
    .await;
    let late = std::fs::read_to_string(dir.join("r2")).unwrap();
    assert!(late.starts_with("refused "), "the late write: {late}");
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let first = exited(first).await;
    assert_eq!(
        first.status.code(),
        Some(76),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let rows = client
        .query("SELECT payload FROM notes", &[])
        .await
        .unwrap();
    let notes: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(notes, ["first", "second"]);
}

/// `rebase` lowers a fence: a `--to` above it is refused (exit 64, nothing changed) unless
/// `--raise`; on a real ZooKeeper fence node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebase_refuses_to_raise_a_fence_without_raise() {
    let hosts = chroot(shared(), "cli-fence-rebase-up").await;
    let (servers, root) = hosts.split_at(hosts.find('/').unwrap());
    let url = format!("zk://{servers}{root}/fence");
    let client = zkfence_harness::connect(&hosts, Duration::from_secs(10)).await;
    let fence = zkfence::fence::ZooKeeperFence::with_fence_node(client, "/fence").unwrap();
    let scope = "/locks/up";
    let held = 0x2_0000_0005;
    let ticket = zkfence::conformance::ticket(scope, held);
    fence.claim(&ticket).await.unwrap();
    let higher = (held + 1).to_string();
    let rebase = ["fence", "rebase", &url, "--scope", scope, "--yes", "--to"];
    let (code, out, err) = run(&[&rebase[..], &[&higher]].concat()).await;
    assert_eq!(code, Some(64), "{out}{err}");
    assert!(err.contains("--raise"), "{err}");
    assert!(err.contains("above"), "{err}");
    assert_eq!(fence.seen(scope).await.unwrap(), Some(held));
    let (code, out, err) = run(&[&rebase[..], &[&higher, "--raise"]].concat()).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(fence.seen(scope).await.unwrap(), Some(held + 1));
    let (code, out, err) = run(&[&rebase[..], &["7"]].concat()).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains(&format!("moved from {}", held + 1)), "{out}");
    assert_eq!(fence.seen(scope).await.unwrap(), Some(7));
}

/// `zkfence fence script s3://`, as docs/fences.md has it: the protocol, no bucket needed;
/// a command that reaches the store asks for one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_s3_prints_the_protocol_without_a_bucket() {
    let (code, out, err) = run(&["fence", "script", "s3://"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("zkfence-fence 1"), "{out}");
    assert!(out.contains("If-Match"), "{out}");
    let (code, _, err) = run(&["fence", "show", "s3://"]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("bucket"), "{err}");
}
