//! How `zkfence run` supervises its command, black-box against real ZooKeeper: a command never
//! outlives zkfence (kill -9 included, grandchildren included), what a command leaves behind is
//! stopped before the lock passes on, and `--on-jeopardy stop` stops the command while the lock
//! is in jeopardy and lets it go on when it holds again.

mod common;

use std::os::unix::process::ExitStatusExt as _;
use std::time::Duration;

use common::{alive_in_group, exited, go, group, run_sh, started, temp, EXIT_0_ON_GO};
use zkfence_harness::{chroot, shared, wait_until};
use zkfence_testkit::CountingProxy;

/// The state letter of process `pid` (`T` when stopped), if it exists.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Whether no process of group `pgid` can run: each is stopped (`T`), or is a parent in `D`
/// waiting on a stopped child of the group. Debian's `sh` (dash) starts `sleep` with vfork, and
/// a vfork parent waits in `D` (killable, deaf to SIGSTOP) until its child execs: a SIGSTOP
/// that lands between the vfork and the exec stops the child and leaves the parent in `D`,
/// as unable to run as if it were stopped, until SIGCONT lets the child exec.
fn group_stopped(pgid: i32) -> bool {
    let members = group(pgid);
    let stopped = |pid: i32| members.iter().any(|m| m.pid == pid && m.state == 'T');
    !members.is_empty()
        && members.iter().all(|m| {
            m.state == 'T'
                || m.state == 'D' && members.iter().any(|c| c.parent == m.pid && stopped(c.pid))
        })
}

/// Whether some process of group `pgid` is stopped (`T`).
fn any_stopped(pgid: i32) -> bool {
    group(pgid).iter().any(|m| m.state == 'T')
}

fn read_pid(path: &std::path::Path) -> i32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_run_leaves_no_process_of_the_group_before_the_next_command_starts() {
    let hosts = chroot(shared(), "cli-kill9").await;
    let (first_dir, second_dir) = (temp("kill9-first"), temp("kill9-second"));
    // The command forks a grandchild and waits for it: both are in its process group, and
    // only the first is zkfence's child.
    let first = run_sh(
        &hosts,
        &["--session-timeout", "4s"],
        r#"sleep 300 & echo $! > "$DIR/grandchild"; echo $$ > "$DIR/ready"; wait"#,
        &first_dir,
    );
    started(&first_dir).await;
    let pgid = read_pid(&first_dir.join("ready"));
    let grandchild = read_pid(&first_dir.join("grandchild"));
    assert!(alive_in_group(pgid).contains(&grandchild));
    // A second run queues for the lock; its command starts once the first session expires.
    let second = run_sh(
        &hosts,
        &[],
        r#"echo started > "$DIR/ready"; exit 0"#,
        &second_dir,
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // SAFETY: SIGKILL to the first zkfence, which this test started.
    unsafe { libc::kill(first.id() as i32, libc::SIGKILL) };
    let killed = tokio::task::spawn_blocking(move || first.wait_with_output());
    let mut gone = false;
    wait_until(
        Duration::from_secs(20),
        "the second command to start",
        || {
            let alive = alive_in_group(pgid);
            gone |= alive.is_empty();
            let started = second_dir.join("ready").exists();
            assert!(
                !started || alive.is_empty(),
                "the second command started while {alive:?} of the first one's group ran"
            );
            async move { started }
        },
    )
    .await;
    assert!(gone);
    let status = killed.await.unwrap().unwrap().status;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let output = exited(second).await;
    assert_eq!(output.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_leaves_running_is_stopped_before_the_release() {
    let hosts = chroot(shared(), "cli-leftovers").await;
    let dir = temp("leftovers");
    let child = run_sh(
        &hosts,
        &["--kill-after", "1s"],
        r#"sleep 300 & echo $! > "$DIR/background"; exit 0"#,
        &dir,
    );
    let output = exited(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("processes of its group remain"), "{stderr}");
    let background = read_pid(&dir.join("background"));
    assert!(
        !matches!(state(background), Some(s) if s != 'Z'),
        "the background process outlived zkfence"
    );
}

/// `zkfence run` through a proxy that can take the server away, with a grace.
fn run_through(
    proxy: &CountingProxy,
    chroot: &str,
    extra: &[&str],
    dir: &std::path::Path,
) -> std::process::Child {
    let hosts = format!("{}{chroot}", proxy.addr);
    let mut args = vec!["--grace", "30s", "--session-timeout", "10s"];
    args.extend_from_slice(extra);
    let script = format!(r#"echo $$ > "$DIR/pid"; {EXIT_0_ON_GO}"#);
    let mut rest = args;
    rest.extend_from_slice(&["--", "sh", "-c", &script]);
    // zkfence's log goes to a file, so that a wait that times out can show it.
    let log = std::fs::File::create(dir.join("stderr")).unwrap();
    common::run_on(&hosts, &rest)
        .env("DIR", dir)
        .env("RUST_LOG", "zkfence=debug")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Waits up to `timeout` for process group `pgid` to be stopped as a whole (`stopped`) or to
/// have no stopped process, and fails with zkfence's log and the proxy's open connections if it
/// does not come to that.
async fn await_state(
    pgid: i32,
    stopped: bool,
    timeout: Duration,
    proxy: &CountingProxy,
    dir: &std::path::Path,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let reached = || {
        if stopped {
            group_stopped(pgid)
        } else {
            !any_stopped(pgid)
        }
    };
    while !reached() {
        if tokio::time::Instant::now() >= deadline {
            let log = std::fs::read_to_string(dir.join("stderr")).unwrap_or_default();
            panic!(
                "after {timeout:?} the command's group is {:?} (stopped wanted: {stopped}); {} \
                 connections open through the proxy; zkfence's log:\n{log}",
                group(pgid),
                proxy.connections(),
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What zkfence wrote to its stderr file, once it exited.
fn stderr_of(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_jeopardy_stop_stops_the_command_and_lets_it_go_on_when_the_lock_holds_again() {
    let hosts = chroot(shared(), "cli-jeopardy-stop").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let dir = temp("jeopardy-stop");
    let child = run_through(&proxy, &hosts[hosts.find('/').unwrap()..], &[], &dir);
    started(&dir).await;
    // The command's shell leads its process group (zkfence starts it in a group of its own).
    let pgid = read_pid(&dir.join("pid"));
    // The server goes away at once: jeopardy, and the command is stopped, not killed.
    proxy.refuse(true);
    proxy.reset();
    // The disconnect is jeopardy at once (no ride-out), within the 10 s session.
    await_state(pgid, true, Duration::from_secs(10), &proxy, &dir).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        group_stopped(pgid),
        "the command went on in jeopardy: {:?}",
        group(pgid)
    );
    proxy.refuse(false);
    await_state(pgid, false, Duration::from_secs(20), &proxy, &dir).await;
    let output = go(&dir, child).await;
    let stderr = stderr_of(&dir);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("in jeopardy"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_jeopardy_keep_lets_the_command_run_through_jeopardy() {
    let hosts = chroot(shared(), "cli-jeopardy-keep").await;
    let proxy = CountingProxy::start(hosts.split('/').next().unwrap()).await;
    let dir = temp("jeopardy-keep");
    let child = run_through(
        &proxy,
        &hosts[hosts.find('/').unwrap()..],
        &["--on-jeopardy", "keep"],
        &dir,
    );
    started(&dir).await;
    // The command's shell leads its process group (zkfence starts it in a group of its own).
    let pgid = read_pid(&dir.join("pid"));
    proxy.refuse(true);
    proxy.reset();
    // The disconnect is seen within milliseconds; for a second the command is never stopped.
    for _ in 0..50 {
        assert!(!any_stopped(pgid), "stopped although --on-jeopardy keep");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.refuse(false);
    let output = go(&dir, child).await;
    let stderr = stderr_of(&dir);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_stops_the_command_releases_and_exits_79() {
    let hosts = chroot(shared(), "cli-revoke").await;
    let dir = temp("revoke-term");
    let script = r#"trap 'echo terminated > "$DIR/term"; exit 3' TERM; echo $$ > "$DIR/ready"; while :; do sleep 0.02; done"#;
    let child = run_sh(&hosts, &[], script, &dir);
    started(&dir).await;
    let (code, stdout, stderr) =
        common::run(&["revoke", "--connect", &hosts, "--lock", "/locks/cli"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("asked"), "{stdout}");
    let output = exited(child).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(79), "{stderr}");
    assert!(dir.join("term").exists(), "the command got no SIGTERM");
    // Released: nobody holds any more.
    let (_, stdout, _) = common::run(&["holders", "--connect", &hosts, "/locks/cli"]).await;
    assert!(stdout.contains("nobody"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_revoke_ignore_lets_the_command_finish_and_force_takes_the_lock() {
    let hosts = chroot(shared(), "cli-revoke-ignore").await;
    let dir = temp("revoke-ignore");
    let log = dir.join("stderr");
    let child = common::run_on(
        &hosts,
        &["--on-revoke", "ignore", "--", "sh", "-c", EXIT_0_ON_GO],
    )
    .env("DIR", &dir)
    .stderr(std::fs::File::create(&log).unwrap())
    .spawn()
    .unwrap();
    started(&dir).await;
    let (code, _, _) = common::run(&["revoke", "--connect", &hosts, "--lock", "/locks/cli"]).await;
    assert_eq!(code, Some(0));
    wait_until(
        Duration::from_secs(10),
        "zkfence to hear the request",
        || async {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("--on-revoke ignore")
        },
    )
    .await;
    let output = go(&dir, child).await;
    assert_eq!(output.status.code(), Some(0));
    // --force deletes the holder's node: its run ends with the loss code.
    let dir = temp("revoke-force");
    let child = run_sh(
        &hosts,
        &[],
        r#"echo x > "$DIR/ready"; while :; do sleep 0.02; done"#,
        &dir,
    );
    started(&dir).await;
    let (code, stdout, _) = common::run(&[
        "revoke",
        "--connect",
        &hosts,
        "--lock",
        "/locks/cli",
        "--force",
    ])
    .await;
    assert_eq!(code, Some(0));
    assert!(stdout.contains("deleted"), "{stdout}");
    let output = exited(child).await;
    assert_eq!(output.status.code(), Some(76));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_locks_are_held_together_with_a_token_each() {
    let hosts = chroot(shared(), "cli-multi").await;
    let dir = temp("multi");
    let mut args = vec![
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/locks/b",
        "--lock",
        "/locks/a",
    ];
    args.extend_from_slice(&[
        "--",
        "sh",
        "-c",
        r#"env | grep ^ZKFENCE_ | sort > "$DIR/env""#,
    ]);
    let output = common::zkfence(&args).env("DIR", &dir).output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {env}"))
            .to_owned()
    };
    assert_eq!(var("ZKFENCE_LOCK_PATH_1"), "/locks/b");
    assert_eq!(var("ZKFENCE_LOCK_PATH_2"), "/locks/a");
    assert_eq!(var("ZKFENCE_TOKEN"), var("ZKFENCE_TOKEN_1"));
    // /locks/a was taken first (sorted order): its token is the smaller.
    let token = |n: &str| var(&format!("ZKFENCE_TOKEN_{n}")).parse::<u64>().unwrap();
    assert!(token("2") < token("1"));
    let (code, _, stderr) = common::run(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/locks/a",
        "--lock",
        "/locks/a",
        "--",
        "true",
    ])
    .await;
    assert_ne!(code, Some(0));
    assert!(stderr.contains("cannot hold"), "{stderr}");
    let (code, _, _) = common::run(&[
        "run",
        "--connect",
        &hosts,
        "--lock",
        "/locks/a",
        "--lock",
        "/locks/b",
        "--permits",
        "2",
        "--",
        "true",
    ])
    .await;
    assert_eq!(code, Some(64));
}
