//! What zkfence's requests to ZooKeeper share, whatever the recipe: the retry across broken
//! connections ([`retry`]), the node operations the recipes are built from ([`nodes`]), and
//! node watches ([`watch`]).

pub(crate) mod nodes;
pub(crate) mod retry;
pub(crate) mod watch;
