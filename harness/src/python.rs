//! Python virtual environments the kit builds from PyPI (`python3 -m venv`, then pip): moto
//! for [`LocalS3`](crate::LocalS3), and the clients of other languages' tests
//! ([`python_clients`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The packages of [`python_clients`], pinned: the drivers a Python service uses for each store
/// zkfence fences.
pub const CLIENTS: [&str; 4] = [
    "psycopg[binary]==3.3.9",
    "PyMySQL==1.2.4",
    "redis==8.1.0",
    "boto3==1.44.8",
];

/// The Python of the kit's environment with [`CLIENTS`] (psycopg, PyMySQL, redis-py, boto3),
/// built on first use and kept in the kit's cache (`$XDG_CACHE_HOME/zkfence`, or
/// `~/.cache/zkfence`).
///
/// # Errors
///
/// What failed (no `python3` with `venv` and `pip`, no PyPI), and what to do.
///
/// # Examples
///
/// ```no_run
/// let python = zkfence_harness::python_clients()?;
/// std::process::Command::new(python).args(["-c", "import psycopg, pymysql, redis, boto3"]);
/// # Ok::<(), String>(())
/// ```
pub fn python_clients() -> Result<PathBuf, String> {
    let hint = "the tests of other languages' clients run Python with psycopg, PyMySQL, redis-py and boto3 from PyPI: they need `python3` with `venv` and `pip` (Debian: `apt-get install -y python3-venv`) and PyPI";
    let works = |python: &Path| imports(python, "import psycopg, pymysql, redis, boto3");
    environment("clients-1", &CLIENTS, &works, hint)
}

/// Whether `python` runs `code` without an error.
fn imports(python: &Path, code: &str) -> bool {
    Command::new(python)
        .args(["-c", code])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python of the kit's environment `name` with `requirements`, where `works` says a Python
/// has them: built on first use in a folder of its own, then renamed into place, so that test
/// processes that build it at once each end up with a complete one. `hint` goes with any error.
pub(crate) fn environment(
    name: &str,
    requirements: &[&str],
    works: &dyn Fn(&Path) -> bool,
    hint: &str,
) -> Result<PathBuf, String> {
    let cache = cache_dir().join(name);
    let python = cache.join("bin").join("python");
    if works(&python) {
        return Ok(python);
    }
    let parent = cache_dir();
    std::fs::create_dir_all(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let building = parent.join(format!("{name}.building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    if let Err(err) = build(&building, requirements, hint) {
        let _ = std::fs::remove_dir_all(&building);
        return Err(err);
    }
    // A broken one (its python gone) makes way; one another process just built stays.
    if !works(&python) {
        let _ = std::fs::remove_dir_all(&cache);
    }
    if std::fs::rename(&building, &cache).is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    match works(&python) {
        true => Ok(python),
        false => Err(format!(
            "the Python environment at {} does not work: remove it and try again",
            cache.display()
        )),
    }
}

/// `python3 -m venv DIR`, then pip installs `requirements` into it.
fn build(dir: &Path, requirements: &[&str], hint: &str) -> Result<(), String> {
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{what}: {e}; {hint}"))?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        let tail = tail.into_iter().rev().collect::<Vec<_>>().join("\n");
        Err(format!("{what} failed ({}):\n{tail}\n{hint}", out.status))
    };
    run(
        Command::new("python3").args(["-m", "venv"]).arg(dir),
        &format!("python3 -m venv {}", dir.display()),
    )?;
    run(
        Command::new(dir.join("bin").join("python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(requirements),
        &format!("pip install {}", requirements.join(" ")),
    )
}

/// Where the kit keeps what it builds: `$XDG_CACHE_HOME/zkfence`, `~/.cache/zkfence`, or the
/// temp dir's `zkfence-cache`.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")));
    match base {
        Some(base) => base.join("zkfence"),
        None => std::env::temp_dir().join("zkfence-cache"),
    }
}
