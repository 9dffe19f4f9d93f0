//! Interoperability with Apache Curator (Debian's `libcurator-recipes-java`, workers compiled
//! here with `javac`): a Curator `InterProcessMutex` and a zkfence `FencedLock` contend on one
//! path and never hold it at the same time; a Curator `InterProcessReadWriteLock` and a
//! zkfence `FencedRwLock` share one queue with reader/writer exclusion across both.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zkfence::Acquire;

use zkfence::{FencedLock, FencedRwLock, LockOptions};
use zkfence_harness::{chroot, connect, shared};

/// Compiles a Curator worker (`tests/curator/<name>.java`) once per process; the class path
/// that runs it.
fn compile_worker(name: &str) -> String {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/curator/{name}.java"));
    let text =
        std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    zkfence_harness::curator::worker(name, &text).unwrap_or_else(|err| panic!("{err}"))
}

/// Runs a compiled Curator worker; its output once it exits.
fn spawn_worker(
    classpath: &str,
    name: &str,
    args: &[&str],
) -> tokio::task::JoinHandle<std::io::Result<std::process::Output>> {
    let java = tokio::process::Command::new("java")
        .args([
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            classpath,
            name,
        ])
        .args(args)
        .output();
    tokio::spawn(java)
}

/// `name=<n>` from a worker's one-line report.
fn field(stdout: &str, name: &str) -> usize {
    stdout
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in curator output {stdout:?}"))
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
    let classes = compile_worker("CuratorMutexWorker");
    let hosts = chroot(shared(), "curator").await;
    let lock_path = "/locks/shared";
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("curator-marker-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let seconds = 6;

    let java = spawn_worker(
        &classes,
        "CuratorMutexWorker",
        &[
            &hosts,
            lock_path,
            &marker.to_string_lossy(),
            &seconds.to_string(),
            "2",
        ],
    );

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
    let field = |name: &str| field(&stdout, name);
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

/// Whether any reader marker (`r-*`) is in `dir`.
fn readers_present(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .unwrap()
        .any(|e| e.unwrap().file_name().to_string_lossy().starts_with("r-"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_read_write_lock_and_zkfence_share_one_queue() {
    let classes = compile_worker("CuratorRwWorker");
    let hosts = chroot(shared(), "curator-rw").await;
    let lock_path = "/locks/catalog";
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("curator-rw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let seconds = 6;
    let java = spawn_worker(
        &classes,
        "CuratorRwWorker",
        &[
            &hosts,
            lock_path,
            &dir.to_string_lossy(),
            &seconds.to_string(),
            "2",
        ],
    );
    let violations = Arc::new(AtomicUsize::new(0));
    let (reads, writes) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let kinds_seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let until = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for id in 0..3u64 {
        let rw = FencedRwLock::new(
            connect(&hosts, Duration::from_secs(10)).await,
            lock_path,
            LockOptions::default(),
        )
        .unwrap();
        let (dir, violations, reads, writes, kinds_seen) = (
            dir.clone(),
            violations.clone(),
            reads.clone(),
            writes.clone(),
            kinds_seen.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while tokio::time::Instant::now() < until {
                n += 1;
                // Readers mostly, a writer every third turn, as on the Curator side.
                if !(n + id).is_multiple_of(3) {
                    let guard = rw.read().await.unwrap();
                    let mine = dir.join(format!("r-zkfence-{id}-{n}"));
                    std::fs::File::create(&mine).unwrap();
                    if dir.join("w").exists() {
                        violations.fetch_add(1, Ordering::SeqCst);
                        eprintln!("VIOLATION: zkfence reader overlapped a writer");
                    }
                    // Who else is queued: Curator's nodes carry the same markers.
                    if let Ok(queue) = rw.reader().contenders().await {
                        let mut seen = kinds_seen.lock().unwrap();
                        for c in queue {
                            seen.insert(if c.node.contains("__READ__") {
                                "read"
                            } else {
                                "write"
                            });
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    std::fs::remove_file(&mine).unwrap();
                    guard.release().await.unwrap();
                    reads.fetch_add(1, Ordering::SeqCst);
                } else {
                    let guard = rw.write().await.unwrap();
                    if std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(dir.join("w"))
                        .is_err()
                    {
                        violations.fetch_add(1, Ordering::SeqCst);
                        eprintln!("VIOLATION: zkfence writer overlapped a writer");
                    }
                    if readers_present(&dir) {
                        violations.fetch_add(1, Ordering::SeqCst);
                        eprintln!("VIOLATION: zkfence writer overlapped a reader");
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _ = std::fs::remove_file(dir.join("w"));
                    guard.release().await.unwrap();
                    writes.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let output = java.await.unwrap().expect("java runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curator worker failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!(
        "curator reads {} writes {} violations {}; zkfence reads {} writes {} violations {}",
        field(&stdout, "reads"),
        field(&stdout, "writes"),
        field(&stdout, "violations"),
        reads.load(Ordering::SeqCst),
        writes.load(Ordering::SeqCst),
        violations.load(Ordering::SeqCst)
    );
    assert_eq!(field(&stdout, "violations"), 0, "curator saw an overlap");
    assert_eq!(
        violations.load(Ordering::SeqCst),
        0,
        "zkfence saw an overlap"
    );
    assert!(
        field(&stdout, "reads") > 0 && field(&stdout, "writes") > 0,
        "curator starved"
    );
    assert!(
        reads.load(Ordering::SeqCst) > 0 && writes.load(Ordering::SeqCst) > 0,
        "zkfence starved"
    );
    assert_eq!(
        kinds_seen.lock().unwrap().len(),
        2,
        "never saw readers and writers queued together"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
