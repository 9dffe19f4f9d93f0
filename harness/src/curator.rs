//! Apache Curator from Debian's packages (`libcurator-recipes-java` and what it depends on):
//! the class path of its jars, and `javac` for a worker compiled against them at run time, as
//! the interop tests and `zkfence-bench --impl curator` use it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// The jars a Curator lock client needs, under `/usr/share/java`.
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

/// What to install when Curator or a JDK is missing.
pub const CURATOR_HINT: &str =
    "run `sudo apt-get install -y zookeeper libcurator-recipes-java default-jdk-headless` (or scripts/test)";

/// The class path of Curator's jars, then `extra` (a directory of compiled classes).
///
/// # Errors
///
/// Names the first missing jar and what to install.
///
/// # Examples
///
/// ```no_run
/// let cp = zkfence_harness::curator::classpath(std::path::Path::new("/tmp/classes"))?;
/// # Ok::<(), String>(())
/// ```
pub fn classpath(extra: &Path) -> Result<String, String> {
    let mut parts = Vec::with_capacity(JARS.len() + 1);
    for jar in JARS {
        let path = format!("/usr/share/java/{jar}.jar");
        if !Path::new(&path).exists() {
            return Err(format!("{path} is missing: {CURATOR_HINT}"));
        }
        parts.push(path);
    }
    parts.push(extra.display().to_string());
    Ok(parts.join(":"))
}

/// Compiles the Java `source` against Curator's jars into a directory of this process under
/// `out` (created if missing); returns the class path that runs it. Once per process for each
/// `source` and `out`: later calls, from any thread, wait for the first and get its answer, so
/// no test runs a class file that another test's `javac` is rewriting (a JVM that loads it
/// half written fails with "Truncated class file").
///
/// # Errors
///
/// A missing jar or `javac`, or the compiler's complaint.
///
/// # Examples
///
/// ```no_run
/// use std::path::Path;
/// let cp = zkfence_harness::curator::compile(Path::new("Worker.java"), Path::new("/tmp/classes"))?;
/// let status = std::process::Command::new("java").args(["-cp", &cp, "Worker"]).status();
/// # Ok::<(), String>(())
/// ```
pub fn compile(source: &Path, out: &Path) -> Result<String, String> {
    type Compiled = BTreeMap<(PathBuf, PathBuf), Result<String, String>>;
    static COMPILED: Mutex<Compiled> = Mutex::new(BTreeMap::new());
    let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
    let key = (source.to_owned(), out.to_owned());
    if let Some(answer) = compiled.get(&key) {
        return answer.clone();
    }
    let answer = javac(source, &out.join(std::process::id().to_string()));
    compiled.insert(key, answer.clone());
    answer
}

/// Runs `javac` on `source` into `out`; the class path that runs it.
fn javac(source: &Path, out: &Path) -> Result<String, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let classpath = classpath(out)?;
    let output = Command::new("javac")
        .args(["-nowarn", "-cp", &classpath, "-d"])
        .arg(out)
        .arg(source)
        .output()
        .map_err(|e| format!("cannot run javac ({e}): {CURATOR_HINT}"))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed on {}: {}",
            source.display(),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(classpath)
}

/// The Java class `class`, whose source is `source` (the text, built into the binary that
/// runs it), compiled against Curator's jars once per process ([`compile`]) in a directory of
/// its own under the system's temp dir; the class path that runs it.
///
/// # Errors
///
/// As [`compile`], or the source not written.
///
/// # Examples
///
/// ```no_run
/// let source = "public class Hello { public static void main(String[] a) {} }";
/// let cp = zkfence_harness::curator::worker("Hello", source)?;
/// let status = std::process::Command::new("java").args(["-cp", &cp, "Hello"]).status();
/// # Ok::<(), String>(())
/// ```
pub fn worker(class: &str, source: &str) -> Result<String, String> {
    let dir = classes_dir(class);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{class}.java"));
    // Written once: a second call finds the compiled answer and must not rewrite the file
    // another thread's javac may be reading.
    static WRITTEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    {
        let mut written = WRITTEN.lock().unwrap_or_else(PoisonError::into_inner);
        if !written.iter().any(|c| c == class) {
            std::fs::write(&path, source)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            written.push(class.to_owned());
        }
    }
    compile(&path, &dir.join("classes"))
}

/// A fresh directory under the system's temp dir for compiled classes: `<name>-<pid>`.
///
/// # Examples
///
/// ```
/// let dir = zkfence_harness::curator::classes_dir("bench");
/// assert!(dir.ends_with(format!("zkfence-curator-bench-{}", std::process::id())));
/// ```
pub fn classes_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("zkfence-curator-{name}-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two threads compiling the same worker share one `javac` run: the class file is written
    /// once, so a JVM started on it after the first call never reads it half rewritten.
    #[test]
    fn a_worker_is_compiled_once_per_process() {
        let dir = std::env::temp_dir().join(format!("zkfence-compile-once-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("Once.java");
        std::fs::write(
            &source,
            "public class Once { public static void main(String[] a) {} }\n",
        )
        .unwrap();
        let out = dir.join("classes");
        let first = compile(&source, &out).unwrap();
        let class = out.join(std::process::id().to_string()).join("Once.class");
        let written = std::fs::metadata(&class).unwrap().modified().unwrap();
        let again: Vec<String> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..2).map(|_| s.spawn(|| compile(&source, &out))).collect();
            calls
                .into_iter()
                .map(|c| c.join().unwrap().unwrap())
                .collect()
        });
        assert_eq!(again, [first.clone(), first]);
        let rewritten = std::fs::metadata(&class).unwrap().modified().unwrap();
        assert_eq!(written, rewritten, "the class file was written again");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
