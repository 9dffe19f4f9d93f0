//! `zkfence` as an operator meets it: bad input and its exit codes, credentials and ACLs, TLS,
//! an ensemble that is not up yet, a command that reads the terminal, several permits. Every
//! test talks to real servers the test starts.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use zkfence_testkit::harness::{chroot, connect, free_port, shared};
use zkfence_testkit::LocalZooKeeper;
use zookeeper_client as zk;

const BIN: &str = env!("CARGO_BIN_EXE_zkfence");

fn zkfence(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("ZKFENCE_CONNECT");
    command
}

/// Runs `zkfence args` off the async runtime and returns (exit code, stdout, stderr).
async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    run_with(zkfence(args)).await
}

/// Runs `zkfence` with `line` split at whitespace.
async fn run_line(line: &str) -> (Option<i32>, String, String) {
    run(&line.split_whitespace().collect::<Vec<_>>()).await
}

/// `zkfence <line> -- sh -c 'echo token=$ZKFENCE_TOKEN'` exits 0 having printed its token.
async fn holds_and_sees_its_token(line: &str) {
    let mut args: Vec<&str> = line.split_whitespace().collect();
    args.extend(["--", "sh", "-c", "echo token=$ZKFENCE_TOKEN"]);
    let (status, stdout, stderr) = run(&args).await;
    assert_eq!(status, Some(0), "{line}: {stderr}");
    assert!(stdout.contains("token="), "{line}: {stdout}");
}

async fn run_with(mut command: Command) -> (Option<i32>, String, String) {
    let output: Output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("secured-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `run` on `lock` with the wrong credentials, then with none: 77 each time, quickly, with
/// advice naming `--auth`.
async fn refused_without_the_right_credentials(connect: &str, lock: &str, wrong: &str) {
    for auth in [Some(wrong), None] {
        let mut args = vec!["run", "--connect", connect, "--connect-timeout", "5s"];
        if let Some(auth) = auth {
            args.extend(["--auth", auth]);
        }
        args.extend(["--lock", lock, "--", "true"]);
        let started = Instant::now();
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(77), "{args:?}: {stderr}");
        assert!(stderr.contains("--auth"), "{stderr}");
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
    }
}

/// Each bad input exits with the code the README's table gives, one clear line, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_exits_with_the_documented_code() {
    let hosts = chroot(shared(), "cli-input").await;
    let down = format!("127.0.0.1:{}", free_port());
    let dir = temp("input");
    let not_executable = dir.join("script.txt");
    std::fs::write(&not_executable, "echo hi\n").unwrap();
    let not_executable = not_executable.to_string_lossy().into_owned();
    let missing_chroot = format!("{}/no/such/chroot", shared());
    // (command line, with {down}, {up}, {chroot} and {script} filled in; exit code; message)
    let cases = [
        // Checked before connecting: the answer does not depend on ZooKeeper being up.
        (
            "run --connect {down} --lock locks/x -- true",
            64,
            "must start with '/'",
        ),
        (
            "run --connect {down} --lock /x --session-timeout 1ms -- true",
            64,
            "out of bounds",
        ),
        (
            "run --connect {down} --lock /x --session-timeout 0s -- true",
            64,
            "out of bounds",
        ),
        (
            "run --connect {down} --lock /x --session-timeout 10h -- true",
            64,
            "out of bounds",
        ),
        (
            "run --connect {down} --lock /x --timeout 5 -- true",
            64,
            "without a unit",
        ),
        (
            "run --connect {down} --lock /x --timeout 2fortnights -- true",
            64,
            "unknown unit",
        ),
        (
            "run --connect {down} --lock /x --auth nocolon -- true",
            64,
            "SCHEME:CREDENTIALS",
        ),
        (
            "run --connect {down} --lock /x --acl creator -- true",
            64,
            "needs credentials",
        ),
        (
            "run --connect {down} --lock /x --tls-ca /no/such/ca.pem -- true",
            64,
            "cannot read --tls-ca",
        ),
        ("run --connect {down} --lock /x", 2, "required"),
        // ZooKeeper down: retried until --connect-timeout.
        (
            "run --connect {down} --connect-timeout 1s --lock /x -- true",
            69,
            "cannot reach ZooKeeper",
        ),
        // Up, but the command cannot run.
        (
            "run --connect {up} --lock /locks/x -- /no/such/cmd",
            127,
            "cannot run",
        ),
        (
            "run --connect {up} --lock /locks/x -- {script}",
            126,
            "cannot run",
        ),
        // A chroot that does not exist: advice for the command line, not the library API.
        (
            "run --connect {chroot} --lock /locks/x -- true",
            70,
            "does not exist",
        ),
    ];
    for (line, code, message) in cases {
        let line = line
            .replace("{down}", &down)
            .replace("{up}", &hosts)
            .replace("{chroot}", &missing_chroot)
            .replace("{script}", &not_executable);
        let args: Vec<&str> = line.split_whitespace().collect();
        let started = Instant::now();
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("LockOptions::"),
            "{args:?}: library advice on the command line: {stderr}"
        );
        assert!(
            !stderr.contains('\u{1b}'),
            "{args:?}: colour codes without a terminal: {stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

/// Durations as people write them are accepted, and --timeout bounds the connecting too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durations_as_people_write_them_and_timeout_bounds_connecting() {
    let hosts = chroot(shared(), "cli-durations").await;
    for duration in ["1m30s", "2min", "1.5s"] {
        let (status, _, stderr) = run_line(&format!(
            "run --connect {} --lock /locks/d --timeout {} -- true",
            hosts, duration
        ))
        .await;
        assert_eq!(status, Some(0), "--timeout {duration}: {stderr}");
    }
    // A server that accepts connections and never answers: --timeout 1s ends it, as 75.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let started = Instant::now();
    let (status, _, stderr) = run_line(&format!(
        "run --connect {} --lock /x --timeout 1s -- true",
        addr
    ))
    .await;
    let took = started.elapsed();
    held.abort();
    assert_eq!(status, Some(75), "{stderr}");
    assert!(
        took < Duration::from_secs(3),
        "--timeout 1s took {took:?}: {stderr}"
    );
}

/// Started while the ensemble is down, `run` keeps trying and runs once a server comes up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_waits_for_an_ensemble_that_is_starting() {
    let server = tokio::task::spawn_blocking(LocalZooKeeper::start)
        .await
        .unwrap()
        .unwrap();
    let addr = server.addr();
    server.kill();
    let mut command = zkfence(&[
        "run",
        "--connect",
        &addr,
        "--connect-timeout",
        "60s",
        "--lock",
        "/locks/late",
        "--",
        "true",
    ]);
    command.stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let restarted = tokio::task::spawn_blocking(move || server.restart().map(|()| server))
        .await
        .unwrap()
        .unwrap();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    drop(restarted);
}

/// Digest credentials and creator-all ACLs: the right identity runs; a wrong or missing one
/// fails fast with 77 and leaves no node; the credentials can come from a variable or a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_and_acls() {
    let hosts = chroot(shared(), "cli-auth").await;
    // The lock path belongs to `alice`: only she may create, delete and list under it.
    let alice = zk::Client::connector()
        .with_auth("digest", b"alice:right")
        .connect(&hosts)
        .await
        .unwrap();
    alice
        .create(
            "/secured",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::creator_all()),
        )
        .await
        .unwrap();

    holds_and_sees_its_token(&format!(
        "run --connect {} --auth digest:alice:right --acl creator --lock /secured",
        hosts
    ))
    .await;

    let mut from_env = zkfence(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/secured",
        "--",
        "true",
    ]);
    from_env.env("ZKFENCE_AUTH", "digest:alice:right");
    let env = run_with(from_env).await;
    assert_eq!(env.0, Some(0), "{}", env.2);

    let file = temp("auth").join("credentials");
    std::fs::File::create(&file)
        .unwrap()
        .write_all(b"digest:alice:right\n")
        .unwrap();
    let from_file = run_line(&format!(
        "run --connect {} --auth-file {} --lock /secured -- true",
        hosts,
        file.to_string_lossy()
    ))
    .await;
    assert_eq!(from_file.0, Some(0), "{}", from_file.2);

    refused_without_the_right_credentials(&hosts, "/secured", "digest:alice:wrong").await;
    let left = alice.list_children("/secured").await.unwrap();
    assert!(left.is_empty(), "nodes left behind: {left:?}");
}

/// TLS on a `secureClientPort` with a key store `keytool` made at test time: the right CA
/// connects; no TLS, or a CA that did not sign the server, fails within --connect-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_right_ca_and_failures_without() {
    let server = tokio::task::spawn_blocking(LocalZooKeeper::start_tls)
        .await
        .unwrap()
        .unwrap();
    let tls = server.tls_addr().unwrap();
    let ca = server.tls_ca().unwrap().to_string_lossy().into_owned();
    holds_and_sees_its_token(&format!(
        "run --connect {} --tls-ca {} --lock /locks/tls",
        tls, ca
    ))
    .await;

    // Another CA: a key pair signed by nobody the client trusts.
    let other = tokio::task::spawn_blocking(LocalZooKeeper::start_tls)
        .await
        .unwrap()
        .unwrap();
    let wrong_ca = other.tls_ca().unwrap().to_string_lossy().into_owned();
    for extra in [vec![], vec!["--tls-ca", wrong_ca.as_str()]] {
        let mut args = vec!["run", "--connect", &tls, "--connect-timeout", "2s"];
        args.extend(extra.iter().copied());
        args.extend(["--lock", "/locks/tls", "--", "true"]);
        let (status, _, stderr) = run(&args).await;
        assert_eq!(status, Some(69), "{args:?}: {stderr}");
        assert!(stderr.contains("cannot reach ZooKeeper"), "{stderr}");
    }
    let client = connect(&server.addr(), Duration::from_secs(10)).await;
    assert!(client.list_children("/locks/tls").await.unwrap().is_empty());
}

/// Under a real pseudo-terminal (`script`), a command that reads the terminal gets it: it is
/// not stopped by SIGTTIN, and zkfence takes the terminal back after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reading_the_terminal_gets_it() {
    let hosts = chroot(shared(), "cli-tty").await;
    let inner = format!(
        "{BIN} run --connect {hosts} --lock /locks/tty -- sh -c 'read line; echo got:$line'"
    );
    let mut script = Command::new("script");
    script
        .args(["-q", "-e", "-c", &inner, "/dev/null"])
        .env("RUST_LOG", "off")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = script.spawn().expect("script(1) from bsdutils");
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let output = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if child.try_wait().unwrap().is_some() {
                return Some(child.wait_with_output().unwrap());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap()
    .expect("the command reading the terminal hung (stopped by SIGTTIN?)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("got:hello"), "{stdout}");
}

/// `--permits 2`: two commands hold at once, each with its own token; a third waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_n_commands_hold_at_once() {
    let hosts = chroot(shared(), "cli-permits").await;
    let dir = temp("permits");
    let script = "touch \"$DIR/$ZKFENCE_TOKEN\"; while [ $(ls \"$DIR\" | wc -l) -lt 2 ]; do sleep 0.05; done";
    let spawn = || {
        let mut command = zkfence(&[
            "run",
            "--connect",
            &hosts,
            "--permits",
            "2",
            "--timeout",
            "20s",
            "--lock",
            "/locks/pool",
            "--",
            "sh",
            "-c",
            script,
        ]);
        command.env("DIR", &dir).stderr(Stdio::piped());
        command.spawn().unwrap()
    };
    // Each waits until two tokens are present: they finish only if both hold at once.
    let (a, b) = (spawn(), spawn());
    let outputs = tokio::task::spawn_blocking(move || {
        (a.wait_with_output().unwrap(), b.wait_with_output().unwrap())
    })
    .await
    .unwrap();
    for output in [outputs.0, outputs.1] {
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let tokens = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(tokens, 2, "two distinct tokens");
}

/// Shell completions print a script for each shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_print_a_script() {
    let (status, stdout, stderr) = run(&["completions", "bash"]).await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stdout.contains("zkfence") && stdout.contains("--connect"),
        "{stdout}"
    );
}

/// SASL DIGEST-MD5 against a server that requires authentication: the right password runs;
/// a wrong one, or none, fails with 77 and leaves no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_digest_md5_on_a_server_that_requires_it() {
    let server = tokio::task::spawn_blocking(|| LocalZooKeeper::start_sasl(&[("alice", "right")]))
        .await
        .unwrap()
        .unwrap();
    let addr = server.addr();
    let ok = run_line(&format!(
        "run --connect {} --auth sasl:alice:right --lock /locks/sasl -- true",
        addr
    ))
    .await;
    assert_eq!(ok.0, Some(0), "{}", ok.2);
    refused_without_the_right_credentials(&addr, "/locks/sasl", "sasl:alice:wrong").await;
    let alice = zk::Client::connector()
        .with_sasl(zk::SaslOptions::digest_md5("alice", "right"))
        .connect(&addr)
        .await
        .unwrap();
    let left = alice.list_children("/locks/sasl").await.unwrap();
    assert!(left.is_empty(), "nodes left behind: {left:?}");
}

/// `--metrics-addr` exports histograms with buckets (aggregatable across instances), not
/// summaries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_histograms_with_buckets() {
    let hosts = chroot(shared(), "cli-metrics").await;
    let addr = format!("127.0.0.1:{}", free_port());
    let dir = temp("metrics");
    let mut command = zkfence(&[
        "run",
        "--connect",
        &hosts,
        "--metrics-addr",
        &addr,
        "--lock",
        "/locks/m",
        "--",
        "sh",
        "-c",
        "touch \"$DIR/ready\"; sleep 30",
    ]);
    command.env("DIR", &dir).stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    zkfence_testkit::harness::wait_until(
        Duration::from_secs(20),
        "the command to start",
        || async { dir.join("ready").exists() },
    )
    .await;
    let page = tokio::task::spawn_blocking(move || {
        use std::io::Read as _;
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut page = String::new();
        stream.read_to_string(&mut page).unwrap();
        page
    })
    .await
    .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        page.contains("zkfence_acquire_duration_seconds_bucket{"),
        "{page}"
    );
    assert!(page.contains("le=\"0.0025\""), "{page}");
    assert!(!page.contains("quantile="), "summaries exported: {page}");
}
