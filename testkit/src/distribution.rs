//! Where the servers come from: a Java runtime and ZooKeeper's jars, found where a
//! `ZOOKEEPER_HOME`, Debian's `zookeeper` package or Homebrew put them.

use std::path::{Path, PathBuf};

/// What [`crate::LocalZooKeeper`] and [`crate::LocalEnsemble`] need, and where to get it.
pub const INSTALL_HINT: &str = "ZooKeeper was not found: set ZOOKEEPER_HOME to an unpacked \
Apache ZooKeeper release (its lib/ holds the jars), or install it: `sudo apt-get install -y \
zookeeper` (Debian, Ubuntu), `brew install zookeeper` (macOS)";

/// What a missing Java runtime needs.
pub const JAVA_HINT: &str = "no Java runtime was found: set JAVA_HOME, or put `java` on the \
PATH (`sudo apt-get install -y default-jre-headless` on Debian, `brew install openjdk` on macOS)";

/// A Java runtime and the class path of a ZooKeeper server.
///
/// # Examples
///
/// ```no_run
/// let zk = zkfence_testkit::Distribution::find()?;
/// println!("{} from {}", zk.java().display(), zk.source());
/// # Ok::<(), zkfence_testkit::StartError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Distribution {
    java: PathBuf,
    classpath: String,
    source: String,
}

impl Distribution {
    /// Finds ZooKeeper, in this order: `$ZOOKEEPER_HOME/lib/*.jar` (a release unpacked by
    /// hand, or Debian 13's 3.9 as `scripts/zookeeper-3.9` unpacks it; its `zookeeper-jute`
    /// jars first), Debian's `/usr/share/java/zookeeper.jar` (with the logging and Netty jars
    /// its manifest leaves out), Homebrew's `libexec/lib` (Apple silicon and Intel prefixes); and
    /// Java: `$JAVA_HOME/bin/java`, else `java` on the `PATH`.
    ///
    /// # Errors
    ///
    /// [`StartError::NotInstalled`](crate::error::StartError::NotInstalled) with what to install.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// match zkfence_testkit::Distribution::find() {
    ///     Ok(zk) => println!("ZooKeeper from {}", zk.source()),
    ///     Err(err) => eprintln!("{err}"),
    /// }
    /// ```
    pub fn find() -> Result<Distribution, crate::error::StartError> {
        let (classpath, source) =
            find_jars().ok_or(crate::error::StartError::NotInstalled(INSTALL_HINT))?;
        let java = find_java().ok_or(crate::error::StartError::NotInstalled(JAVA_HINT))?;
        Ok(Distribution {
            java,
            classpath,
            source,
        })
    }

    /// The `java` binary.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::Distribution::find()?;
    /// assert!(zk.java().ends_with("java"));
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn java(&self) -> &Path {
        &self.java
    }

    /// The server's class path (`:`-separated jars).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::Distribution::find()?;
    /// assert!(zk.classpath().contains("zookeeper"));
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn classpath(&self) -> &str {
        &self.classpath
    }

    /// Where the jars were found (`ZOOKEEPER_HOME`, `debian`, `homebrew`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let zk = zkfence_testkit::Distribution::find()?;
    /// println!("{}", zk.source());
    /// # Ok::<(), zkfence_testkit::StartError>(())
    /// ```
    pub fn source(&self) -> &str {
        &self.source
    }
}

/// The class path and its source's name.
fn find_jars() -> Option<(String, String)> {
    if let Some(home) = std::env::var_os("ZOOKEEPER_HOME") {
        let jars = jute_first(jars_in(&Path::new(&home).join("lib")));
        if jars.iter().any(|j| is_server_jar(j)) {
            return Some((join(&jars), "ZOOKEEPER_HOME".into()));
        }
    }
    let debian = Path::new("/usr/share/java");
    if debian.join("zookeeper.jar").exists() {
        // Debian's zookeeper.jar names its dependencies in its manifest, but not a logging
        // backend (slf4j-nop: quiet) nor the Netty parts its TLS server needs.
        let jars: Vec<PathBuf> = ["zookeeper", "slf4j-nop", "netty-codec", "netty-resolver"]
            .iter()
            .map(|name| debian.join(format!("{name}.jar")))
            .filter(|jar| jar.exists())
            .collect();
        return Some((join(&jars), "debian".into()));
    }
    for prefix in ["/opt/homebrew", "/usr/local"] {
        let jars = jars_in(&Path::new(prefix).join("opt/zookeeper/libexec/lib"));
        if jars.iter().any(|j| is_server_jar(j)) {
            return Some((join(&jars), "homebrew".into()));
        }
    }
    None
}

/// `jars` with the `zookeeper-jute` jars first. A server jar's manifest may name another
/// release's jute jar (Debian 13's 3.9 server names `/usr/share/java/zookeeper-jute.jar`, which
/// Debian 12 serves as 3.8's), and the JVM searches a jar's manifest class path right after
/// that jar, ahead of the next entries of `-cp`: only a jute jar ahead of the server jar wins.
fn jute_first(mut jars: Vec<PathBuf>) -> Vec<PathBuf> {
    jars.sort_by_key(|jar| {
        !jar.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("zookeeper-jute"))
    });
    jars
}

fn is_server_jar(jar: &Path) -> bool {
    jar.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("zookeeper-3") || n == "zookeeper.jar")
}

fn jars_in(dir: &Path) -> Vec<PathBuf> {
    let mut jars: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "jar"))
                .collect()
        })
        .unwrap_or_default();
    jars.sort();
    jars
}

fn join(jars: &[PathBuf]) -> String {
    let parts: Vec<String> = jars.iter().map(|j| j.display().to_string()).collect();
    parts.join(":")
}

fn find_java() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let java = Path::new(&home).join("bin/java");
        if java.exists() {
            return Some(java);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("java"))
        .find(|java| java.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_s_lib_folder_is_its_class_path() {
        let dir = std::env::temp_dir().join(format!("zkfence-dist-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        for jar in [
            "zookeeper-3.9.3.jar",
            "zookeeper-jute-3.9.3.jar",
            "README.txt",
        ] {
            std::fs::write(dir.join("lib").join(jar), b"").unwrap();
        }
        let jars = jute_first(jars_in(&dir.join("lib")));
        assert_eq!(jars.len(), 2);
        assert!(jars.iter().any(|j| is_server_jar(j)));
        // Jute first: the server jar's manifest may name an older release's jute jar.
        let classpath = join(&jars);
        assert!(
            classpath.contains("zookeeper-jute-3.9.3.jar:")
                && classpath.ends_with("zookeeper-3.9.3.jar")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
