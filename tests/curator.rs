//! Interoperability with Apache Curator: a Curator `InterProcessMutex` (Debian's
//! `libcurator-recipes-java`, compiled here with `javac`) and zkfence contend on one path and
//! never hold it at the same time.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{chroot, connect, shared};
use zkfence::{FencedLock, LockOptions};

const JARS: &[&str] = &[
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
    "netty-handler",
    "netty-transport",
    "netty-common",
    "netty-buffer",
    "netty-resolver",
    "netty-codec",
    "netty-transport-native-epoll",
    "netty-transport-native-unix-common",
];

fn classpath(extra: &Path) -> String {
    let mut parts: Vec<String> = JARS
        .iter()
        .map(|jar| {
            let path = format!("/usr/share/java/{jar}.jar");
            assert!(
                Path::new(&path).exists(),
                "{path} is missing: run `sudo apt-get install -y zookeeper libcurator-recipes-java` (or scripts/test)"
            );
            path
        })
        .collect();
    parts.push(extra.display().to_string());
    parts.join(":")
}

/// Compiles the Curator worker into target/curator-classes.
fn compile_worker() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("curator-classes");
    std::fs::create_dir_all(&out).unwrap();
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/curator/CuratorMutexWorker.java");
    let status = Command::new("javac")
        .args(["-nowarn", "-cp", &classpath(&out), "-d"])
        .arg(&out)
        .arg(&source)
        .status()
        .expect("javac runs (install a JDK: `sudo apt-get install -y default-jdk-headless`)");
    assert!(status.success(), "javac failed on {}", source.display());
    out
}

/// Holds the marker file exclusively; finding it already there means two holders overlapped.
fn enter(marker: &Path) -> bool {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(marker)
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_interprocess_mutex_and_zkfence_exclude_each_other() {
    let classes = compile_worker();
    let hosts = chroot(shared(), "curator").await;
    let lock_path = "/locks/shared";
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("curator-marker-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let seconds = 6;

    let java = tokio::process::Command::new("java")
        .args([
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            &classpath(&classes),
            "CuratorMutexWorker",
            &hosts,
            lock_path,
        ])
        .arg(&marker)
        .args([&seconds.to_string(), "2"])
        .output();
    let java = tokio::spawn(java);

    let violations = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let mixed_queue_seen = Arc::new(AtomicUsize::new(0));
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..3 {
        let lock = FencedLock::new(
            connect(&hosts, Duration::from_secs(10)).await,
            lock_path,
            LockOptions::default(),
        )
        .unwrap();
        ours.push(lock.client().session_id());
        let (marker, violations, acquisitions) =
            (marker.clone(), violations.clone(), acquisitions.clone());
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < until {
                let guard = lock.acquire().await.unwrap();
                if !enter(&marker) {
                    violations.fetch_add(1, Ordering::SeqCst);
                    eprintln!("VIOLATION: zkfence acquired while another holder held");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _ = std::fs::remove_file(&marker);
                guard.release().await.unwrap();
                acquisitions.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    // Watch the queue from outside: Curator's nodes and ours must be in one queue.
    let observer = FencedLock::new(
        connect(&hosts, Duration::from_secs(10)).await,
        lock_path,
        LockOptions::default(),
    )
    .unwrap();
    let seen = mixed_queue_seen.clone();
    let watcher = tokio::spawn(async move {
        while tokio::time::Instant::now() < until {
            if let Ok(queue) = observer.contenders().await {
                let mine = queue
                    .iter()
                    .filter(|c| ours.contains(&c.session_id))
                    .count();
                if mine > 0 && mine < queue.len() {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    for task in tasks {
        task.await.unwrap();
    }
    watcher.await.unwrap();
    let output = java.await.unwrap().expect("java runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curator worker failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let field = |name: &str| -> usize {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in curator output {stdout:?}"))
    };
    eprintln!(
        "curator acquisitions {} violations {}; zkfence acquisitions {} violations {}; mixed queues seen {}",
        field("acquisitions"),
        field("violations"),
        acquisitions.load(Ordering::SeqCst),
        violations.load(Ordering::SeqCst),
        mixed_queue_seen.load(Ordering::SeqCst)
    );
    assert_eq!(field("violations"), 0, "curator saw an overlapping holder");
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "zkfence saw an overlapping holder"
    );
    assert!(
        field("acquisitions") > 0 && acquisitions.load(Ordering::SeqCst) > 0,
        "one side never got the lock"
    );
    assert!(
        mixed_queue_seen.load(Ordering::SeqCst) > 0,
        "never saw curator and zkfence queued together"
    );
    let _ = std::fs::remove_file(&marker);
}
