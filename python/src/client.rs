//! A ZooKeeper session from Python: `zkfence.connect` and the `Client` it returns.

use std::time::Duration;

use pyo3::prelude::*;

use crate::{bridge, errors};

/// A ZooKeeper session, as `zkfence.connect` opens it; every lock made with it shares it.
#[pyclass(frozen, module = "zkfence._zkfence")]
pub(crate) struct Client {
    pub(crate) client: zookeeper_client::Client,
    hosts: String,
}

#[pymethods]
impl Client {
    /// The session's id, as ZooKeeper's logs and `zkfence` commands show it (hex).
    #[getter]
    fn session_id(&self) -> String {
        format!("{:#x}", self.client.session_id().0)
    }

    /// The servers this session was opened with.
    #[getter]
    fn hosts(&self) -> &str {
        &self.hosts
    }

    fn __repr__(&self) -> String {
        format!(
            "<zkfence.Client hosts={:?} session={}>",
            self.hosts,
            self.session_id()
        )
    }
}

/// Opens a session (`zkfence.connect`, which documents the arguments): times in seconds;
/// `auth`, a `(scheme, credentials)` pair; `tls`, PEM texts `(ca, cert, key)`, the last two
/// optional.
#[pyfunction]
#[pyo3(signature = (hosts, session_timeout = 10.0, connect_timeout = 10.0, auth = None, tls = None))]
pub(crate) fn connect(
    py: Python<'_>,
    hosts: String,
    session_timeout: f64,
    connect_timeout: f64,
    auth: Option<(String, Vec<u8>)>,
    tls: Option<(String, Option<String>, Option<String>)>,
) -> PyResult<Client> {
    let seconds = |name: &str, value: f64| {
        if value > 0.0 && value < 1e9 {
            Ok(Duration::from_secs_f64(value))
        } else {
            Err(errors::usage(format!(
                "{name} must be a positive number of seconds, not {value}"
            )))
        }
    };
    let mut connect = zkfence::Connect::new(hosts.clone())
        .with_session_timeout(seconds("session_timeout", session_timeout)?)
        .with_connection_timeout(seconds("connect_timeout", connect_timeout)?)
        .with_fail_eagerly();
    if let Some((scheme, credentials)) = &auth {
        connect = connect.with_auth(scheme, credentials);
    }
    if let Some(tls) = tls {
        connect = connect.with_tls(errors::tls_options(tls)?);
    }
    let target = hosts.clone();
    let client = bridge::wait(py, async move {
        connect
            .connect()
            .await
            .map_err(|err| errors::connect_failed(&target, err))
    })?;
    Ok(Client { client, hosts })
}
