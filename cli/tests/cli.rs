//! The `zkfence` binary, black-box, against real ZooKeeper.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use zkfence::{FencedLock, LockOptions};
use zkfence_testkit::harness::{chroot, connect, shared, wait_until, ZooKeeper};
use zkfence_testkit::CountingProxy;

const BIN: &str = env!("CARGO_BIN_EXE_zkfence");

fn zkfence(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).env("RUST_LOG", "off");
    command
}

/// `zkfence run --connect hosts --lock /locks/cli <rest>`.
fn run_on(hosts: &str, rest: &[&str]) -> Command {
    let mut args = vec!["run", "--connect", hosts, "--lock", "/locks/cli"];
    args.extend_from_slice(rest);
    zkfence(&args)
}

/// `zkfence run --connect hosts --lock /locks/cli <extra> -- sh -c script`, with `$DIR` set.
fn run_sh(hosts: &str, extra: &[&str], script: &str, dir: &std::path::Path) -> std::process::Child {
    let mut rest = extra.to_vec();
    rest.extend_from_slice(&["--", "sh", "-c", script]);
    run_on(hosts, &rest)
        .env("DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A command that says it is ready, then exits 0 once `$DIR/go` exists.
const EXIT_0_ON_GO: &str = r#"echo ready > "$DIR/ready"
    while [ ! -e "$DIR/go" ]; do sleep 0.02; done
    exit 0"#;

/// Tells an [`EXIT_0_ON_GO`] command to exit, and waits for zkfence's exit.
async fn go(dir: &std::path::Path, child: std::process::Child) -> Output {
    std::fs::write(dir.join("go"), "").unwrap();
    tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap()
}

/// Waits until the command has written `$DIR/ready`.
async fn started(dir: &std::path::Path) {
    wait_until(Duration::from_secs(20), "the command to start", || async {
        dir.join("ready").exists()
    })
    .await;
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn temp(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
        zkfence_testkit::harness::children(&hosts, "/locks/cli")
            .await
            .is_empty(),
        "the lock node outlived the command"
    );
}

/// On loss, the command's process group gets SIGTERM, then SIGKILL after --grace when it
/// ignores SIGTERM; zkfence exits 76. The loss here is our lock node deleted from outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ignoring_sigterm_is_killed_after_the_grace_period_on_loss() {
    let hosts = chroot(shared(), "cli-loss").await;
    let dir = temp("loss");
    let script = r#"trap 'date +%s%N >> "$DIR/terms"' TERM
        echo ready > "$DIR/ready"
        while :; do sleep 1 & wait $!; done"#;
    let child = run_sh(&hosts, &["--grace", "700ms"], script, &dir);
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
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
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

    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
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
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
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
        zkfence_testkit::harness::children(&hosts, "/locks/cli")
            .await
            .len(),
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
        zkfence_testkit::harness::children(&hosts, "/locks/cli")
            .await
            .len()
            == 2
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
    let output = zkfence(&["demo"]).output().unwrap();
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    let verdict = stdout.lines().last().unwrap_or("");
    assert!(verdict.starts_with("VERDICT: with fencing"), "{stdout}");
    assert!(
        stdout.contains("REFUSED") && stdout.contains("LOST"),
        "{stdout}"
    );
}

/// The bench tool's output is functional, not timed: one JSON line with every field, no
/// violations, for each impl and mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_prints_one_json_line_per_run_for_every_impl() {
    let hosts = chroot(shared(), "cli-bench").await;
    for (implementation, mode, contenders) in [
        ("zkfence", "contended", "3"),
        ("zkclient", "contended", "3"),
        ("curator", "contended", "3"),
        ("raw", "contended", "2"),
        ("zkfence", "uncontended", "1"),
        ("raw", "uncontended", "1"),
    ] {
        let args = [
            "bench",
            "--connect",
            &hosts,
            "--lock",
            "/bench",
            "--impl",
            implementation,
            "--mode",
            mode,
            "--contenders",
            contenders,
            "--seconds",
            "0.5",
            "--warmup",
            "0.1",
        ];
        let output = zkfence(&args).output().unwrap();
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        for field in [
            "impl",
            "mode",
            "contenders",
            "seconds",
            "acquisitions",
            "acq_per_s",
            "cycle_p50_us",
            "cycle_p99_us",
            "handoff_p50_us",
            "handoff_p99_us",
            "writes_per_acq",
            "violations",
            "errors",
        ] {
            assert!(report.get(field).is_some(), "{field} missing in {stdout}");
        }
        assert_eq!(report["impl"], implementation);
        assert_eq!(report["violations"], 0, "{stdout}");
        assert!(report["acquisitions"].as_u64().unwrap() > 0, "{stdout}");
        // Every acquisition commits at least its create (and its delete).
        assert!(
            report["writes_per_acq"].as_f64().unwrap() >= 1.0,
            "{stdout}"
        );
        assert_eq!(
            report["handoff_p50_us"].is_null(),
            mode == "uncontended",
            "{stdout}"
        );
    }
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
