//! A lock on a secured ensemble: digest authentication, TLS, and ACLs that keep other
//! identities out of the lock's nodes.
//!
//! ```sh
//! ZKFENCE_CONNECT=tcp+tls://zk1:2281 ZKFENCE_AUTH=digest:orders:s3cret \
//!     ZKFENCE_TLS_CA=ca.pem ZKFENCE_TLS_CERT=client.pem ZKFENCE_TLS_KEY=client.key \
//!     cargo run --example secured
//! ```
//!
//! Every variable but `ZKFENCE_CONNECT` is optional. TLS needs `zookeeper-client`'s `tls`
//! feature (`zookeeper-client = { version = "0.11", features = ["tls"] }`); a server address
//! takes TLS when written `tcp+tls://host:port`. With authentication, the lock's nodes are
//! created `creator_all`: only this identity can touch them.

use zkfence::Acquire;
use zkfence::{FencedLock, LockOptions};
use zookeeper_client::{Acls, Client, TlsOptions};

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = var("ZKFENCE_CONNECT").unwrap_or_else(|| "127.0.0.1:2181".into());
    let lock_path = var("ZKFENCE_LOCK").unwrap_or_else(|| "/zkfence-examples/secured".into());
    let mut connector = Client::connector();
    let mut options = LockOptions::default().with_create_parents(true);
    if let Some(auth) = var("ZKFENCE_AUTH") {
        let (scheme, credentials) = auth
            .split_once(':')
            .ok_or("ZKFENCE_AUTH must read SCHEME:CREDENTIALS, e.g. digest:user:password")?;
        connector = connector.with_auth(scheme, credentials.as_bytes());
        options = options.with_acls(&Acls::creator_all());
    }
    if let Some(ca) = var("ZKFENCE_TLS_CA") {
        let mut tls = TlsOptions::new().with_pem_ca(&std::fs::read_to_string(ca)?)?;
        if let (Some(cert), Some(key)) = (var("ZKFENCE_TLS_CERT"), var("ZKFENCE_TLS_KEY")) {
            tls = tls.with_pem_identity(
                &std::fs::read_to_string(cert)?,
                &std::fs::read_to_string(key)?,
            )?;
        }
        connector = connector.with_tls(tls);
    }
    let client = connector.connect(&connect).await?;
    let lock = FencedLock::new(client, lock_path, options)?;
    let guard = lock.acquire().await?;
    println!("holding {} with token {}", guard.node_path(), guard.token());
    guard.release().await?;
    println!("secured: ok");
    Ok(())
}
