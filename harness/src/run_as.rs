//! Running a database server as its own system user when we are root (PostgreSQL refuses to
//! run as root; MariaDB asks for `--user`): whose identity, and handing it the files it needs.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Command;

/// A uid and gid.
pub(crate) type Who = Option<(u32, u32)>;

/// The uid/gid to run as: ourselves (`None`), or `user` when we are root. `package` names the
/// Debian package that creates `user`, for the error.
pub(crate) fn identity(user: &str, package: &str) -> Result<Who, String> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new(user).map_err(|_| format!("bad user name {user:?}"))?;
    // SAFETY: getpwnam returns a pointer into static storage or null; we copy out at once.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(format!(
            "running as root and there is no `{user}` user: install Debian's {package} package"
        ));
    }
    // SAFETY: pw is non-null and points to a valid passwd record.
    Ok(Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) }))
}

/// Hands `path` to `who` (when we run as root for them).
pub(crate) fn give(path: &Path, who: Who) {
    if let Some((uid, gid)) = who {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default();
        // SAFETY: chown on a path we just created.
        unsafe { libc::chown(c.as_ptr(), uid, gid) };
    }
}

/// Makes `cmd` run as `who`.
pub(crate) fn as_user(cmd: &mut Command, who: Who) {
    if let Some((uid, gid)) = who {
        cmd.uid(uid).gid(gid);
    }
}
