//! What zkfence's requests to ZooKeeper share, whatever the recipe: the retry across broken
//! connections ([`retry`]), the node operations the recipes are built from ([`nodes`]), and
//! node watches ([`watch`]).

pub(crate) mod nodes;
pub(crate) mod retry;
pub(crate) mod watch;

use zookeeper_client as zk;

/// The prefix that a client whose chroot is `chroot` (as [`zk::Client::path`] gives it) puts
/// before every path it sends: empty at the server's root.
pub(crate) fn chroot_prefix(chroot: &str) -> &str {
    chroot.trim_end_matches('/')
}

/// `path`, under `client`'s chroot, as the server knows it.
pub(crate) fn server_path(client: &zk::Client, path: &str) -> String {
    let chroot = chroot_prefix(client.path());
    let mut full = String::with_capacity(chroot.len() + path.len());
    full.push_str(chroot);
    full.push_str(path);
    full
}
