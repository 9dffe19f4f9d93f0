//! The README's command lines (between its `<!-- cli -->` markers), run as written by `sh`,
//! with the `zkfence` this build made first on `PATH`: only the ZooKeeper address and the store
//! URL the README names are swapped for the shared ZooKeeper (under a chroot of the test's own)
//! and a PostgreSQL database of the test's own. Every line must exit 0 and do what the README
//! says it does.

mod common;

use std::path::Path;

use zkfence_harness::{chroot, shared};

use common::{postgres_database, run_with, BIN};

/// The ZooKeeper the README's lines connect to; the test puts the shared server's address here.
const README_HOSTS: &str = "127.0.0.1:2181";
/// The store the README's `fence install` names; the test puts its own database's URL here.
const README_STORE: &str = "postgresql://app@127.0.0.1:5432/orders";

/// The README's command lines, in order: the one `sh` block between the markers, comments and
/// blank lines left out.
fn lines() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let (_, rest) = readme.split_once("<!-- cli -->").expect("the marker");
    let (block, _) = rest.split_once("<!-- /cli -->").expect("its end marker");
    let script = (block.trim().strip_prefix("```sh\n"))
        .and_then(|b| b.strip_suffix("```"))
        .expect("one sh block between the markers");
    (script.lines())
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_command_lines_run_as_written() {
    let lines = lines();
    let commands: Vec<&str> = (lines.iter())
        .map(|line| line.split_whitespace().take(2).last().unwrap_or_default())
        .collect();
    assert_eq!(commands, ["run", "fence", "demo"], "{lines:#?}");
    assert!(
        lines.iter().all(|line| line.starts_with("zkfence ")),
        "{lines:#?}"
    );

    let hosts = chroot(shared(), "readme-cli").await;
    let database = postgres_database(&format!("readme_cli_{}", std::process::id())).await;
    let (url, db) = (database.url, database.client);
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    for line in &lines {
        assert!(
            line.contains(README_HOSTS) || line.contains(README_STORE),
            "{line}: names neither the README's ZooKeeper nor its store, so this test would run it against the reader's"
        );
        let script = line
            .replace(README_HOSTS, &hosts)
            .replace(README_STORE, &url);
        let mut command = std::process::Command::new("sh");
        command
            .args(["-c", &script])
            .env("PATH", &path)
            .env("RUST_LOG", "off")
            .env_remove("ZKFENCE_CONNECT");
        let (code, out, err) = run_with(command).await;
        assert_eq!(code, Some(0), "{line}\n{out}{err}");
        match line.split_whitespace().nth(1) {
            // The command ran under the lock, with its token.
            Some("run") => {
                let token = (out.trim().strip_prefix("holding with token "))
                    .unwrap_or_else(|| panic!("{line}: {out}{err}"));
                assert!(token.parse::<i64>().is_ok_and(|t| t > 0), "{line}: {out}");
            }
            // The fence is in the database.
            Some("fence") => {
                let row = db
                    .query_one(
                        "SELECT count(*) FROM pg_proc WHERE proname = 'zkfence_claim'",
                        &[],
                    )
                    .await
                    .unwrap();
                assert_eq!(row.get::<_, i64>(0), 1, "{line}: no zkfence_claim");
            }
            // Its exit code is its verdict: the late write refused, and lost without the fence.
            _ => {}
        }
    }
}
