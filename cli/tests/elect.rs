//! `zkfence elect`, black-box against real ZooKeeper: the command runs while leading, with the
//! epoch; a lost term stops it and campaigns again (or exits 76 with `--once`); the command's
//! exit code passes through; an interrupt while campaigning withdraws the candidate at once;
//! `kill -9` of `zkfence elect` leaves no process of its command's group; `--observe` prints
//! the leader and each change.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{alive_in_group, exited, temp, text, zkfence};
use tokio::io::AsyncBufReadExt as _;
use zkfence::{FencedElection, LockOptions};
use zkfence_harness::{children, chroot, connect, shared, wait_until};

const ELECTION: &str = "/elections/cli";

/// `zkfence elect --connect hosts --election ELECTION <extra> -- sh -c script`, `$DIR` set.
fn elect_sh(hosts: &str, extra: &[&str], script: &str, dir: &Path) -> Child {
    let mut args = vec!["elect", "--connect", hosts, "--election", ELECTION];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    zkfence(&args)
        .env("DIR", dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A command that records `<name> <epoch> <pid>` in `$DIR/terms`, then runs until stopped.
fn term_script(name: &str) -> String {
    format!(
        r#"test "$ZKFENCE_TOKEN" = "$ZKFENCE_EPOCH" && test "$ZKFENCE_ELECTION" = {ELECTION} || exit 8
        echo "{name} $ZKFENCE_EPOCH $$" >> "$DIR/terms"
        exec sleep 300"#
    )
}

/// The terms recorded so far: (name, epoch, pid).
fn terms(dir: &Path) -> Vec<(String, u64, i32)> {
    let text = std::fs::read_to_string(dir.join("terms")).unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next().unwrap().to_owned();
            let epoch = fields.next().unwrap().parse().unwrap();
            (name, epoch, fields.next().unwrap().parse().unwrap())
        })
        .collect()
}

async fn wait_terms(dir: &Path, count: usize) -> Vec<(String, u64, i32)> {
    wait_until(Duration::from_secs(20), "the next term", || async {
        terms(dir).len() >= count
    })
    .await;
    terms(dir)
}

fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: a signal to a zkfence process this test started.
    unsafe { libc::kill(child.id() as i32, signal) };
}

async fn exit_of(child: Child) -> (Option<i32>, String) {
    let output = exited(child).await;
    (output.status.code(), text(&output).1)
}

/// The leader's node, as a library observer sees it.
async fn leader_node(hosts: &str) -> String {
    let election = FencedElection::new(
        connect(hosts, Duration::from_secs(10)).await,
        ELECTION,
        LockOptions::default(),
    )
    .unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    format!("{ELECTION}/{}", leader.node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_term_stops_the_command_and_the_candidate_campaigns_again() {
    let hosts = chroot(shared(), "elect-again").await;
    let dir = temp("elect-again");
    let a = elect_sh(&hosts, &["--kill-after", "1s"], &term_script("a"), &dir);
    let first = wait_terms(&dir, 1).await;
    let b = elect_sh(&hosts, &[], &term_script("b"), &dir);
    wait_until(Duration::from_secs(10), "b to queue", || async {
        children(&hosts, ELECTION).await.len() == 2
    })
    .await;
    // An operator deletes a's node: a's term is lost, its command stopped, b leads.
    let admin = connect(&hosts, Duration::from_secs(10)).await;
    admin
        .delete(&leader_node(&hosts).await, None)
        .await
        .unwrap();
    let second = wait_terms(&dir, 2).await;
    assert_eq!(second[1].0, "b");
    wait_until(Duration::from_secs(10), "a's command to stop", || async {
        !alive(first[0].2)
    })
    .await;
    // a campaigns again behind b; b's end (SIGTERM, passed to its command) hands over to a.
    wait_until(Duration::from_secs(10), "a to queue again", || async {
        children(&hosts, ELECTION).await.len() == 2
    })
    .await;
    signal(&b, libc::SIGTERM);
    let (code, stderr) = exit_of(b).await;
    assert_eq!(code, Some(128 + libc::SIGTERM), "{stderr}");
    let third = wait_terms(&dir, 3).await;
    assert_eq!(third[2].0, "a");
    let epochs: Vec<u64> = third.iter().map(|t| t.1).collect();
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
    signal(&a, libc::SIGTERM);
    assert_eq!(exit_of(a).await.0, Some(128 + libc::SIGTERM));
    assert!(children(&hosts, ELECTION).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_exits_76_after_a_loss_and_the_commands_code_passes_through() {
    let hosts = chroot(shared(), "elect-once").await;
    let dir = temp("elect-once");
    let once = elect_sh(
        &hosts,
        &["--once", "--kill-after", "1s"],
        &term_script("once"),
        &dir,
    );
    wait_terms(&dir, 1).await;
    let admin = connect(&hosts, Duration::from_secs(10)).await;
    admin
        .delete(&leader_node(&hosts).await, None)
        .await
        .unwrap();
    let (code, stderr) = exit_of(once).await;
    assert_eq!(code, Some(76), "{stderr}");
    assert!(stderr.contains("--once"), "{stderr}");
    // A command that exits ends zkfence elect with its code, resigned.
    let seven = elect_sh(&hosts, &[], "exit 7", &dir);
    assert_eq!(exit_of(seven).await.0, Some(7));
    assert!(children(&hosts, ELECTION).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_while_campaigning_withdraws_the_candidate_at_once() {
    let hosts = chroot(shared(), "elect-withdraw").await;
    let dir = temp("elect-withdraw");
    let leader = elect_sh(&hosts, &[], &term_script("leader"), &dir);
    wait_terms(&dir, 1).await;
    // A session timeout far above the wait below: only a withdrawal removes the node in time.
    let waiting = elect_sh(
        &hosts,
        &["--session-timeout", "60s"],
        &term_script("w"),
        &dir,
    );
    wait_until(
        Duration::from_secs(10),
        "the candidate to queue",
        || async { children(&hosts, ELECTION).await.len() == 2 },
    )
    .await;
    signal(&waiting, libc::SIGINT);
    let (code, stderr) = exit_of(waiting).await;
    assert_eq!(code, Some(128 + libc::SIGINT), "{stderr}");
    wait_until(
        Duration::from_secs(5),
        "the withdrawn candidate's node to go",
        || async { children(&hosts, ELECTION).await.len() == 1 },
    )
    .await;
    assert_eq!(
        terms(&dir).len(),
        1,
        "the withdrawn candidate ran its command"
    );
    signal(&leader, libc::SIGTERM);
    exit_of(leader).await;
}

/// The observer's next line, as JSON.
async fn next(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> serde_json::Value {
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .unwrap()
        .expect("the observer runs on");
    serde_json::from_str(&line).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_elect_leaves_no_process_of_its_commands_group() {
    let hosts = chroot(shared(), "elect-kill9").await;
    let dir = temp("elect-kill9");
    let script = r#"sleep 300 & echo "$!" > "$DIR/grandchild"
        echo "a $ZKFENCE_EPOCH $$" >> "$DIR/terms"; wait"#;
    let a = elect_sh(&hosts, &["--session-timeout", "4s"], script, &dir);
    let first = wait_terms(&dir, 1).await;
    let pgid = first[0].2;
    wait_until(Duration::from_secs(5), "the grandchild", || async {
        dir.join("grandchild").exists()
    })
    .await;
    let b = elect_sh(&hosts, &[], &term_script("b"), &dir);
    wait_until(Duration::from_secs(10), "b to queue", || async {
        children(&hosts, ELECTION).await.len() == 2
    })
    .await;
    signal(&a, libc::SIGKILL);
    let mut gone = false;
    wait_until(Duration::from_secs(20), "b to lead", || {
        let alive = alive_in_group(pgid);
        gone |= alive.is_empty();
        let leading = terms(&dir).len() == 2;
        assert!(
            !leading || alive.is_empty(),
            "b leads while {alive:?} of a's group run"
        );
        async move { leading }
    })
    .await;
    assert!(gone);
    let grandchild: i32 = std::fs::read_to_string(dir.join("grandchild"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(grandchild), "a's grandchild outlived zkfence elect");
    assert!(terms(&dir)[1].1 > first[0].1);
    exit_of(a).await;
    signal(&b, libc::SIGTERM);
    exit_of(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_prints_the_leader_and_each_change_as_json() {
    let hosts = chroot(shared(), "elect-observe").await;
    let observer = tokio::process::Command::new(common::BIN)
        .args([
            "elect",
            "--connect",
            &hosts,
            "--observe",
            ELECTION,
            "--json",
        ])
        .env("RUST_LOG", "off")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(observer.stdout.unwrap()).lines();
    assert_eq!(next(&mut lines).await["leader"], serde_json::Value::Null);
    let candidate = |name: &'static str| {
        let hosts = hosts.clone();
        async move {
            let client = connect(&hosts, Duration::from_secs(10)).await;
            let election = FencedElection::new(client, ELECTION, LockOptions::default()).unwrap();
            election.campaign(name).await.unwrap()
        }
    };
    let a = candidate("a").await;
    let a_epoch = a.epoch().as_u64();
    let seen = next(&mut lines).await;
    assert_eq!(seen["leader"]["epoch"], a_epoch);
    assert_eq!(seen["leader"]["data"], "a");
    a.proclaim("a, serving").await.unwrap();
    assert_eq!(next(&mut lines).await["leader"]["data"], "a, serving");
    a.resign().await.unwrap();
    // A resign deletes the proclaimed value before the latch node (a leader without a value
    // reports its campaign's data): the observer may print that state first, then no leader.
    let mut seen = next(&mut lines).await;
    if seen["leader"] != serde_json::Value::Null {
        assert_eq!(seen["leader"]["epoch"], a_epoch, "{seen}");
        assert_eq!(seen["leader"]["data"], "a", "{seen}");
        seen = next(&mut lines).await;
    }
    assert_eq!(seen["leader"], serde_json::Value::Null);
    let b = candidate("b").await;
    let seen = next(&mut lines).await;
    assert_eq!(seen["leader"]["data"], "b");
    assert!(seen["leader"]["epoch"].as_u64().unwrap() > a_epoch);
    b.resign().await.unwrap();
}
