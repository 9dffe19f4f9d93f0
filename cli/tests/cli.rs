//! The `zkfence` binary, black-box, against real ZooKeeper, as an operator meets it: runs that
//! hold the lock, losses and their exit codes, bad input, an ensemble that is not up yet, a
//! command that reads the terminal, several permits, the holders listing, completions, metrics,
//! the demo and the bench. Secured servers (credentials, ACLs, TLS, SASL) are `secured.rs`'s.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use zkfence::Acquire;

use common::{
    exited, go, run, run_line, run_on, run_sh, started, temp, text, zkfence, BIN, EXIT_0_ON_GO,
};
use zkfence::{FencedLock, LockOptions};
use zkfence_harness::{chroot, connect, free_port, shared, wait_until, ZooKeeper};
use zkfence_testkit::{CountingProxy, LocalZooKeeper};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_concurrent_runs_never_overlap_and_see_increasing_tokens() {
    let hosts = chroot(shared(), "cli-six").await;
    let dir = temp("six");
    let script = r#"set -C
        : > "$DIR/marker" 2>/dev/null || { echo overlap >> "$DIR/overlaps"; exit 9; }
        test -n "$ZKFENCE_SEQUENCE" && test "$ZKFENCE_LOCK_PATH" = /locks/cli && test -n "$ZKFENCE_NODE" || exit 8
        echo "$ZKFENCE_TOKEN" >> "$DIR/tokens"
        sleep 0.1
        rm -f "$DIR/marker""#;
    let children: Vec<_> = (0..6).map(|_| run_sh(&hosts, &[], script, &dir)).collect();
    for child in children {
        let output = child.wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    }
    assert!(!dir.join("overlaps").exists(), "two commands ran at once");
    let tokens: Vec<u64> = std::fs::read_to_string(dir.join("tokens"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len(), 6);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not increasing: {tokens:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_passes_through_and_the_lock_is_released() {
    let hosts = chroot(shared(), "cli-exit").await;
    let output = run_on(&hosts, &["--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7));
    assert!(
        zkfence_harness::children(&hosts, "/locks/cli")
            .await
            .is_empty(),
        "the lock node outlived the command"
    );
}

/// On loss, the command's process group gets SIGTERM, then SIGKILL after --kill-after when it
/// ignores SIGTERM; zkfence exits 76. The loss here is our lock node deleted from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace_period_on_loss() {
    let hosts = chroot(shared(), "cli-loss").await;
    let dir = temp("loss");
    let script = r#"trap 'date +%s%N >> "$DIR/terms"' TERM
        echo ready > "$DIR/ready"
        while :; do sleep 1 & wait $!; done"#;
    let child = run_sh(&hosts, &["--kill-after", "700ms"], script, &dir);
    started(&dir).await;
    let admin = connect(&hosts, Duration::from_secs(10)).await;
    let nodes = admin.list_children("/locks/cli").await.unwrap();
    assert_eq!(nodes.len(), 1);
    let deleted_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let started = Instant::now();
    admin
        .delete(&format!("/locks/cli/{}", nodes[0]), None)
        .await
        .unwrap();
    let output = exited(child).await;
    let elapsed = started.elapsed();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains("lost") && stderr.contains("SIGKILL"),
        "{stderr}"
    );
    assert!(
        elapsed >= Duration::from_millis(700),
        "killed before the grace period: {elapsed:?}"
    );
    let term: u128 = std::fs::read_to_string(dir.join("terms"))
        .expect("the command got SIGTERM")
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    eprintln!(
        "loss (node deleted) -> SIGTERM to the command: {:.1} ms",
        (term.saturating_sub(deleted_at)) as f64 / 1e6
    );
}

/// A loss that lands with the command's exit gives 76, whatever the command returned.
///
/// zkfence talks to ZooKeeper through a proxy. While the command runs, the proxy starts to
/// hold every frame for `HELD` and the test deletes our lock node from another client, then
/// lets the command exit 0 at once (it blocks reading a FIFO). So the command exits after the
/// loss but before zkfence can hear of it: the `NodeDeleted` notification is still held in
/// the proxy, and zkfence learns of the loss only around its release (the notification
/// arriving, or the release's delete finding no node). The test checks that the command had
/// exited before the notification went through. Before the fix, the command's 0 won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_landing_with_the_commands_exit_still_exits_76() {
    use std::os::unix::fs::OpenOptionsExt as _;
    const HELD: Duration = Duration::from_secs(1);
    let hosts = chroot(shared(), "cli-race").await;
    let server = hosts.split('/').next().unwrap();
    let proxy = CountingProxy::start(server.split(',').next().unwrap()).await;
    let through_proxy = format!("{}{}", proxy.addr, &hosts[server.len()..]);
    let dir = temp("race");
    let fifo = dir.join("go");
    let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let script = r#"echo $$ > "$DIR/pid" && mv "$DIR/pid" "$DIR/ready"
        read -r _ < "$DIR/go"
        exit 0"#;
    // A long session keeps the lease comfortable while the proxy holds frames, and the release
    // (its delete and reply each held for HELD) gets ample time to hear its answer on a loaded
    // machine: with the default 3 s bound it once gave up first, and the command's 0 stood.
    let child = run_sh(
        &through_proxy,
        &["--session-timeout", "20s", "--release-timeout", "15s"],
        script,
        &dir,
    );
    started(&dir).await;
    let pid = std::fs::read_to_string(dir.join("ready")).unwrap();
    let stat = format!("/proc/{}/stat", pid.trim());

    let admin = connect(&hosts, Duration::from_secs(10)).await;
    let nodes = admin.list_children("/locks/cli").await.unwrap();
    assert_eq!(nodes.len(), 1);
    let notified = proxy.notifications();
    proxy.delay(HELD);
    admin
        .delete(&format!("/locks/cli/{}", nodes[0]), None)
        .await
        .unwrap();
    // The command exits as soon as it reads a line (the open fails until it is reading).
    let mut opened = None;
    wait_until(
        Duration::from_secs(10),
        "the command to read the FIFO",
        || {
            opened = opened.take().or_else(|| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo)
                    .ok()
            });
            std::future::ready(opened.is_some())
        },
    )
    .await;
    std::io::Write::write_all(&mut opened.take().unwrap(), b"go\n").unwrap();
    wait_until(Duration::from_secs(10), "the command to exit", || {
        // A zombie (exited, not yet reaped) or gone (reaped).
        let state = std::fs::read_to_string(&stat).unwrap_or_default();
        let exited = state
            .rsplit_once(") ")
            .is_none_or(|(_, s)| s.starts_with('Z'));
        std::future::ready(exited)
    })
    .await;
    assert_eq!(
        proxy.notifications(),
        notified,
        "the NodeDeleted notification reached zkfence before the command exited: no race"
    );

    let output = exited(child).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains("exited with 0") && stderr.contains("deleted"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_not_confirmed_in_time_exits_with_the_loss_code() {
    // The command exits while the lease is good (a 20 s session) but the server is frozen: the
    // check after the exit passes, and only the release's reply could prove that nobody deleted
    // the node meanwhile. It never comes within --release-timeout.
    let server = ZooKeeper::start();
    let dir = temp("unconfirmed");
    let child = run_sh(
        &server.addr(),
        &["--session-timeout", "20s", "--release-timeout", "1s"],
        EXIT_0_ON_GO,
        &dir,
    );
    started(&dir).await;
    server.pause();
    let output = go(&dir, child).await;
    server.resume();
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains("exited with 0")
            && stderr.contains("not confirmed (it took longer than 1s)")
            && !stderr.contains("was lost before"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_by_an_acl_exits_with_the_loss_code() {
    // An operator takes DELETE off the lock path while the command runs: the release is refused,
    // and nothing confirms that the node was still there when the command exited.
    use zookeeper_client::{Acl, AuthId, Permission};
    let hosts = chroot(shared(), "cli-acl-release").await;
    let dir = temp("acl-release");
    let child = run_sh(&hosts, &[], EXIT_0_ON_GO, &dir);
    started(&dir).await;
    let admin = connect(&hosts, Duration::from_secs(10)).await;
    let all_but_delete =
        Permission::READ | Permission::WRITE | Permission::CREATE | Permission::ADMIN;
    admin
        .set_acl(
            "/locks/cli",
            &[Acl::new(all_but_delete, AuthId::anyone())],
            None,
        )
        .await
        .unwrap();
    let output = go(&dir, child).await;
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(76), "{stderr}");
    assert!(
        stderr.contains("exited with 0") && stderr.contains("not confirmed (it failed"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_stops_the_command_with_the_loss_code() {
    let server = ZooKeeper::start();
    let dir = temp("pause");
    let child = run_on(
        &server.addr(),
        &[
            "--session-timeout",
            "2s",
            "--",
            "sh",
            "-c",
            r#"echo ready > "$DIR/ready"; exec sleep 60"#,
        ],
    )
    .env("DIR", &dir)
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    started(&dir).await;
    server.pause();
    let paused = Instant::now();
    let output = exited(child).await;
    let took = paused.elapsed();
    server.resume();
    assert_eq!(output.status.code(), Some(76), "{}", text(&output).1);
    // The loss within the session timeout (2 s), the command gone at SIGTERM, and the final
    // release bounded by --release-timeout (3 s by default): not the ~12 s an unbounded
    // release against a silent server took.
    assert!(
        took < Duration::from_secs(8),
        "exited {took:?} after the pause: {}",
        text(&output).1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_exits_75_and_leaves_no_node() {
    let hosts = chroot(shared(), "cli-timeout").await;
    let holder = FencedLock::new(
        connect(&hosts, Duration::from_secs(10)).await,
        "/locks/cli",
        LockOptions::default(),
    )
    .unwrap();
    let guard = holder.acquire().await.unwrap();
    let started = Instant::now();
    let output = run_on(&hosts, &["--timeout", "500ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(75), "{}", text(&output).1);
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(text(&output).1.contains("timed out"));
    assert_eq!(
        zkfence_harness::children(&hosts, "/locks/cli").await.len(),
        1,
        "the timed-out run left its node"
    );
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_json_lists_the_queue_holder_first() {
    let hosts = chroot(shared(), "cli-holders").await;
    let lock = FencedLock::new(
        connect(&hosts, Duration::from_secs(10)).await,
        "/locks/cli",
        LockOptions::default().with_data("first \"holder\""),
    )
    .unwrap();
    let guard = lock.acquire().await.unwrap();
    let waiter = FencedLock::new(
        connect(&hosts, Duration::from_secs(10)).await,
        "/locks/cli",
        LockOptions::default(),
    )
    .unwrap();
    let queued = tokio::spawn(async move { waiter.acquire().await.map(|g| g.token()) });
    wait_until(Duration::from_secs(10), "the waiter to queue", || async {
        zkfence_harness::children(&hosts, "/locks/cli").await.len() == 2
    })
    .await;
    let output = zkfence(&["holders", "--connect", &hosts, "/locks/cli", "--json"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let queue: serde_json::Value = serde_json::from_slice(&output.stdout).expect("valid JSON");
    let queue = queue.as_array().unwrap();
    assert_eq!(queue.len(), 2);
    assert_eq!(queue[0]["holder"], true);
    assert_eq!(queue[1]["holder"], false);
    assert_eq!(queue[0]["token"], guard.token().as_u64());
    assert_eq!(queue[0]["identity"], "first \"holder\"");
    assert_eq!(
        queue[0]["session_id"],
        lock.client().session_id().to_string()
    );
    let table = zkfence(&["holders", "--connect", &hosts, "/locks/cli"])
        .output()
        .unwrap();
    assert!(text(&table).0.contains("holder"), "{}", text(&table).0);
    // The table shows the number ZKFENCE_TOKEN carries, not the sequence@zxid display form.
    let token = guard.token().as_u64().to_string();
    assert!(
        text(&table).0.contains(&format!(" {token} ")),
        "{}",
        text(&table).0
    );
    assert!(!text(&table).0.contains('@'), "{}", text(&table).0);
    guard.release().await.unwrap();
    queued.await.unwrap().unwrap();
}

#[test]
fn demo_runs_to_its_verdict() {
    // With its third run: the same under a Redis lock (on a throwaway redis-server).
    let redis = zkfence_harness::LocalRedis::start().unwrap();
    let output = zkfence(&["demo", "--redis", &redis.addr()])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let verdict = stdout.lines().last().unwrap_or("");
    assert!(verdict.starts_with("VERDICT: with fencing"), "{stdout}");
    assert!(verdict.contains("Under the Redis lock"), "{stdout}");
    assert!(stdout.contains("REFUSED"), "{stdout}");
    assert_eq!(stdout.matches("LOST").count(), 2, "{stdout}");
    assert!(stdout.contains("Redis expired frozen worker"), "{stdout}");
}

/// `demo --connect` on a server with the stock tickTime (2 s) grants 4 s sessions for the
/// requested 2 s: the demo freezes its holder for twice what was granted and ends with the
/// readable verdict (it used the requested timeout, and failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_on_a_stock_server_freezes_for_the_granted_timeout() {
    let server = tokio::task::spawn_blocking(|| {
        zkfence_testkit::LocalZooKeeper::start_with_tick(Duration::from_secs(2))
    })
    .await
    .unwrap()
    .unwrap();
    let addr = server.addr();
    let output =
        tokio::task::spawn_blocking(move || zkfence(&["demo", "--connect", &addr]).output())
            .await
            .unwrap()
            .unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("frozen for 8s"), "{stdout}");
    assert!(stdout.contains("VERDICT: with fencing"), "{stdout}");
}

/// Each bad input exits with the code the exit-code table gives (`zkfence --help`,
/// cli/README.md), one clear line, no panic.
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
    let output = exited(child).await;
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    drop(restarted);
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
    started(&dir).await;
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
