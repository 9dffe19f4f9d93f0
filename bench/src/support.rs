//! What the bench's commands share: exit codes, durations on the command line, sessions, a
//! throwaway local ZooKeeper, and child processes that die with the bench.

use std::time::Duration;

use zookeeper_client as zk;

/// Bad arguments.
pub(crate) const EXIT_USAGE: u8 = 64;
/// ZooKeeper (or a store) could not be reached or started.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// A measurement failed.
pub(crate) const EXIT_FAILURE: u8 = 70;

/// The exit code for a library error, after printing it on one line.
pub(crate) fn fail(context: &str, err: &zkfence::Error) -> u8 {
    eprintln!("zkfence-bench: {context}: {err}");
    if err.is_session_terminal() {
        EXIT_UNAVAILABLE
    } else {
        EXIT_FAILURE
    }
}

/// A duration as the bench's options take it: a number and a unit, `ms`, `s` or `min`
/// (`250ms`, `1.5s`, `2min`).
///
/// # Errors
///
/// What to write instead.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ms" => 0.001,
        "s" => 1.0,
        "min" | "m" => 60.0,
        _ => {
            return Err(format!(
                "{text:?}: write a number and ms, s or min (250ms, 1.5s, 2min)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: write a number and ms, s or min (250ms, 1.5s, 2min)"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|e| format!("{text:?}: {e}"))
}

/// A session timeout: a duration from 1 s to 10 min (ZooKeeper clamps what it grants anyway).
///
/// # Errors
///
/// As [`parse_duration`], and a value out of those bounds.
pub(crate) fn parse_session_timeout(text: &str) -> Result<Duration, String> {
    let timeout = parse_duration(text)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&timeout) {
        return Err(format!("{text:?}: a session timeout from 1s to 10min"));
    }
    Ok(timeout)
}

/// A session to `hosts` with `session_timeout`, failing eagerly, through `zkfence::Connect`
/// (its creation anchors its first lease, so the first acquire is not held back).
pub(crate) async fn session(hosts: &str, session_timeout: Duration) -> Result<zk::Client, String> {
    (zkfence::Connect::new(hosts).with_session_timeout(session_timeout))
        .with_fail_eagerly()
        .connect()
        .await
        .map_err(|e| format!("cannot reach ZooKeeper at {hosts}: {e}"))
}

/// [`session`], its failure printed and turned into an exit code.
pub(crate) async fn open(hosts: &str, session_timeout: Duration) -> Result<zk::Client, u8> {
    session(hosts, session_timeout).await.map_err(|why| {
        eprintln!("zkfence-bench: {why}");
        EXIT_UNAVAILABLE
    })
}

/// Makes `command`'s child get SIGKILL when the bench dies (a stopped child too, which a
/// closed stdin would not end). Only from the main thread, which lives as long as the bench:
/// the parent-death signal follows the thread that forked.
pub(crate) fn die_with_bench(command: &mut tokio::process::Command) {
    // SAFETY: getpid and gettid only read the process's identity.
    if unsafe { libc::getpid() == libc::gettid() } {
        zkfence_testkit::die_with_spawner(command.as_std_mut(), libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_session_timeout("500ms").is_err());
    }
}
