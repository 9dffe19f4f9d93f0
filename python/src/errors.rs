//! The library's errors as the package's exceptions (`zkfence/_errors.py`): `LockLost` with its
//! reason, `Timeout`, and `ZkfenceError` for the rest, each message saying what to do.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// An instance of the package's exception `name` (`zkfence._errors`) with `message` (and
/// `reason`, for `LockLost`).
fn raise(name: &str, message: String, reason: Option<&str>) -> PyErr {
    Python::attach(|py| {
        let class = py.import("zkfence._errors").and_then(|m| m.getattr(name));
        let made = class.and_then(|class| match reason {
            Some(reason) => class.call1((message, reason)),
            None => class.call1((message,)),
        });
        match made {
            Ok(err) => PyErr::from_value(err),
            Err(err) => err,
        }
    })
}

/// `zkfence.ZkfenceError(message)`.
pub(crate) fn error(message: impl Into<String>) -> PyErr {
    raise("ZkfenceError", message.into(), None)
}

/// A bad argument: Python's `ValueError`, as for any bad value.
pub(crate) fn usage(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// `zkfence.LockLost(message, reason)`: the hold is gone, `reason` the `LossReason` in
/// snake_case (`session_expired`, `lease_expired`, ...).
pub(crate) fn lost(reason: zkfence::LossReason, path: &str) -> PyErr {
    raise(
        "LockLost",
        format!("zkfence: the hold on {path} is lost: {reason}; stop writing under it"),
        Some(reason.as_str()),
    )
}

/// `zkfence.Timeout(message)`: no hold within the caller's timeout.
pub(crate) fn timeout(path: &str, seconds: f64) -> PyErr {
    raise(
        "Timeout",
        format!("zkfence: {path} was not acquired within {seconds} s (another holder has it; wait longer, or see `zkfence holders`)"),
        None,
    )
}

/// The library's error as an exception: a lost lock as `LockLost`, a bad path or option as
/// `ValueError`, the rest as `ZkfenceError` with the library's message (which says what to do).
pub(crate) fn from_lib(err: zkfence::Error) -> PyErr {
    match err {
        zkfence::Error::LockLost(reason) => raise(
            "LockLost",
            format!("zkfence: the lock was lost: {reason}; stop writing under it"),
            Some(reason.as_str()),
        ),
        zkfence::Error::InvalidPath { .. } | zkfence::Error::InvalidOptions(_) => {
            usage(err.to_string())
        }
        // The library's hint names its Rust call; a Python user passes `auth=`.
        zkfence::Error::AccessDenied { op, path } => error(format!(
            "zkfence: zookeeper denied {op} on {path} (acl): connect with credentials the ACL grants (zkfence.connect(..., auth=(scheme, credentials))), or grant this client read, create and delete there"
        )),
        other => error(format!("zkfence: {other}")),
    }
}

/// A session that could not be opened.
pub(crate) fn connect_failed(hosts: &str, err: zookeeper_client::Error) -> PyErr {
    error(format!(
        "zkfence: cannot open a ZooKeeper session to {hosts}: {err} (is the ensemble up and reachable? are the credentials right?)"
    ))
}

/// The TLS options from PEM texts: the CA that signed the servers' certificates, then the
/// client's certificate and key when the servers ask for one.
pub(crate) fn tls_options(
    (ca, cert, key): (String, Option<String>, Option<String>),
) -> PyResult<zookeeper_client::TlsOptions> {
    let bad = |what: &str, err: zookeeper_client::Error| {
        usage(format!("zkfence: tls {what} is not usable PEM: {err}"))
    };
    let mut options = zookeeper_client::TlsOptions::new()
        .with_pem_ca(&ca)
        .map_err(|e| bad("ca", e))?;
    match (cert, key) {
        (Some(cert), Some(key)) => {
            options = options
                .with_pem_identity(&cert, &key)
                .map_err(|e| bad("cert/key", e))?;
        }
        (None, None) => {}
        _ => return Err(usage("zkfence: tls needs both cert and key, or neither")),
    }
    Ok(options)
}
