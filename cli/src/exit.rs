//! The exit codes: their values, the help's table of them (`zkfence --help`), and the code
//! for a library error, which every subcommand reports the same way.

/// Bad input: an invalid lock path, an unusable duration or session timeout, unreadable
/// credentials or certificates.
pub(crate) const EXIT_USAGE: u8 = 64;
/// ZooKeeper could not be reached, or the session ended before the lock was acquired.
pub(crate) const EXIT_UNAVAILABLE: u8 = 69;
/// Any other failure (an unexpected ZooKeeper error, a lock path missing under a chroot).
pub(crate) const EXIT_FAILURE: u8 = 70;
/// ZooKeeper refused us: authentication failed, or an ACL denies what the lock needs; a
/// store refused `zkfence fence` a privilege (SQLSTATE 42501, MySQL 1044/1142, Redis NOPERM).
pub(crate) const EXIT_NO_PERMISSION: u8 = 77;
/// `--timeout` passed before the lock was acquired; nothing was run and no node is left.
pub(crate) const EXIT_TIMEOUT: u8 = 75;
/// The lock was lost while the command ran (the command was stopped: SIGTERM, then SIGKILL),
/// or was found lost, or could not be confirmed held, by the release after the command exited.
pub(crate) const EXIT_LOCK_LOST: u8 = 76;
/// Someone asked the holder to let go (`zkfence revoke`, Curator's `Revoker`): the command was
/// stopped (SIGTERM, then SIGKILL) and the lock released (`run --on-revoke term`).
pub(crate) const EXIT_REVOKED: u8 = 79;
/// The command was found but could not be executed (permissions, not an executable).
pub(crate) const EXIT_NOT_EXECUTABLE: u8 = 126;
/// The command was not found.
pub(crate) const EXIT_CANNOT_RUN: u8 = 127;

/// The help's table of the exit codes above.
pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  N    run, elect: the command's own exit code (128+signal if a signal ended it)
  1    fence verify: a case failed (the fence is not safe on that store)
  2    command line syntax error (unknown flag, missing argument)
  64   bad input: invalid lock path, unusable duration or session timeout, unreadable
       credentials or certificates; fence: a URL it cannot use, rebase --to above the fence
  69   ZooKeeper unreachable within --connect-timeout, or the session ended before the
       lock was acquired; fence: the store could not be reached
  70   other failures (an unexpected ZooKeeper error, the lock path missing)
  75   run --timeout passed before the lock was acquired (nothing ran, no node left)
  76   the lock was lost while the command ran (the command was stopped), or the release
       after it found the lock lost, failed, or was not confirmed within --release-timeout;
       elect --once: the leadership was lost (without --once, elect campaigns again)
  77   permission denied: authentication failed, or an ACL refuses the lock's requests;
       fence: the store refused a privilege (SQLSTATE 42501, MySQL 1044/1142, NOPERM)
  79   run: the lock's holder was asked to let go (zkfence revoke, Curator's Revoker); the
       command was stopped (SIGTERM, then SIGKILL) and the lock released (--on-revoke term)
  126  the command is not executable
  127  the command was not found
  130  elect: SIGINT while campaigning (the candidate withdrawn); 143 for SIGTERM;
       fence verify: SIGINT (143: SIGTERM), the scratch space removed

Every flag can also be set by a ZKFENCE_* variable (see each flag's help).
Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=zkfence=debug) for more.";

/// The exit code for a library error, after printing it on one line.
pub(crate) fn fail(context: &str, err: &zkfence::Error) -> u8 {
    match err {
        // The library's advice names its API; a command line user needs the flag.
        zkfence::Error::NoParent { path } => {
            eprintln!("zkfence: {context}: {path} (or a parent, or the chroot in --connect) does not exist; create it first, e.g. with zkCli.sh create");
            return EXIT_FAILURE;
        }
        zkfence::Error::AccessDenied { op, path, .. } => {
            eprintln!("zkfence: {context}: ZooKeeper denied {op} on {path}; authenticate with --auth (or ZKFENCE_AUTH) as an identity the ACL grants read, create and delete");
            return EXIT_NO_PERMISSION;
        }
        _ => eprintln!("zkfence: {context}: {err}"),
    }
    match err {
        zkfence::Error::InvalidPath { .. } | zkfence::Error::InvalidOptions(_) => EXIT_USAGE,
        e if e.is_session_terminal() => EXIT_UNAVAILABLE,
        _ => EXIT_FAILURE,
    }
}
