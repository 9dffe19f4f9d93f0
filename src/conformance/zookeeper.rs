//! [`ZooKeeperStore`]: the ZooKeeper fence under a scratch node of a real ensemble, as the
//! conformance kit drives it: zkfence's own tests, and `zkfence fence verify zk://…` against a
//! user's ensemble.

use std::sync::Arc;

use zookeeper_client as zk;

use super::store::{BoxFuture, FenceStore, Hooks, ReplySwitch};
use crate::error::Error;
use crate::fence::{FenceError, FenceTicket, ZooKeeperFence};

/// The kit's store on ZooKeeper, under `<root>/<scratch name>`: counters in `counters/<key>`,
/// the commit log as sequential nodes under `logs/<key>`, a fence node per scope under
/// `fences`. The fence's client may go through a proxy (to lose a commit's reply); reads go
/// through another. [`ZooKeeperStore::clear`] deletes it all, and the parents of that node
/// that [`create`](ZooKeeperStore::create) made and nothing else has used since.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zookeeper_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use zkfence::conformance::{self, ZooKeeperStore};
/// let store = ZooKeeperStore::create(client.clone(), client, "/", "check", None).await?;
/// conformance::order(&store).await?;
/// store.clear().await?;
/// # Ok(()) }
/// ```
pub struct ZooKeeperStore {
    fenced: zk::Client,
    reader: zk::Client,
    base: String,
    /// The ancestors of `base` that `create` made (they did not exist), shallowest first.
    made: Vec<String>,
    switch: Option<ReplySwitch>,
    /// The fence mutant of zkfence's own tests, if any.
    #[cfg(feature = "mutants")]
    mutant: Option<crate::FenceMutant>,
}

impl std::fmt::Debug for ZooKeeperStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperStore")
            .field("base", &self.base)
            .field("proxied", &self.switch.is_some())
            .finish_non_exhaustive()
    }
}

/// `path`'s error from ZooKeeper.
fn failed(op: &'static str, path: &str, source: zk::Error) -> Error {
    Error::ZooKeeper {
        op,
        path: path.to_owned(),
        source,
    }
}

impl ZooKeeperStore {
    /// Makes `<root>/<scratch name of name>` with its `counters`, `logs` and `fences` nodes
    /// (deleting what a run of that name left), reading with `reader` and writing through
    /// `fenced` (the same ensemble, behind a proxy whose switch is `switch`, in zkfence's own
    /// tests; else the same client).
    ///
    /// # Errors
    ///
    /// ZooKeeper's errors (no permission under `root`, say).
    ///
    /// # Cancel safety
    ///
    /// Dropped mid-way, it may leave nodes behind.
    ///
    /// # Examples
    ///
    /// See the [type's](ZooKeeperStore).
    pub async fn create(
        reader: zk::Client,
        fenced: zk::Client,
        root: &str,
        name: &str,
        switch: Option<ReplySwitch>,
    ) -> crate::Result<ZooKeeperStore> {
        let scratch = super::outcome::scratch_name(name, 200);
        let base = format!("{}/{scratch}", root.trim_end_matches('/'));
        let mut made = Vec::new();
        let mut at = 0;
        while let Some(slash) = base[at + 1..].find('/') {
            at += 1 + slash;
            let ancestor = &base[..at];
            match reader.check_stat(ancestor).await {
                Ok(Some(_)) => {}
                Ok(None) => made.push(ancestor.to_owned()),
                Err(err) => return Err(failed("exists", ancestor, err)),
            }
        }
        let store = ZooKeeperStore {
            fenced,
            reader,
            base,
            made,
            switch,
            #[cfg(feature = "mutants")]
            mutant: None,
        };
        store.delete(&store.base).await?;
        let acls = zk::Acls::anyone_all().to_vec();
        for rest in ["counters", "logs", "fences"] {
            let path = store.path(rest);
            crate::requests::nodes::create_parents(
                &store.reader,
                &path,
                zk::CreateMode::Persistent,
                &acls,
            )
            .await?;
        }
        Ok(store)
    }

    /// The same store with the fence `mutant`'s flaw (zkfence's own tests).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence::conformance::ZooKeeperStore) {
    /// let store = store.with_mutant(zkfence::FenceMutant::StringCompare);
    /// # let _ = store; }
    /// ```
    #[cfg(feature = "mutants")]
    pub fn with_mutant(mut self, mutant: crate::FenceMutant) -> ZooKeeperStore {
        self.mutant = Some(mutant);
        self
    }

    /// Deletes everything under the store's node, and the node; then the parents of the node
    /// that [`create`](Self::create) made, each if it is still empty (no data, no children):
    /// a run leaves the ensemble as it found it. A fence node given as the store's root is one
    /// of them when it did not exist: left empty, it would be a fence node with no fence.
    ///
    /// # Errors
    ///
    /// ZooKeeper's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what it deleted stays deleted.
    ///
    /// # Examples
    ///
    /// See the [type's](ZooKeeperStore).
    pub async fn clear(self) -> crate::Result<()> {
        self.delete(&self.base).await?;
        for node in self.made.iter().rev() {
            let stat = match self.reader.check_stat(node).await {
                Ok(Some(stat)) => stat,
                Ok(None) => continue,
                Err(err) => return Err(failed("exists", node, err)),
            };
            if stat.num_children != 0 || stat.data_length != 0 {
                // Used meanwhile (a claim, a node of someone else's): theirs now.
                break;
            }
            match self.reader.delete(node, Some(stat.version)).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(zk::Error::NotEmpty | zk::Error::BadVersion) => break,
                Err(err) => return Err(failed("delete", node, err)),
            }
        }
        Ok(())
    }

    /// Deletes `path` and everything under it, children first.
    async fn delete(&self, path: &str) -> crate::Result<()> {
        let mut nodes = vec![path.to_owned()];
        let mut i = 0;
        while i < nodes.len() {
            match self.reader.list_children(&nodes[i]).await {
                Ok(children) => {
                    let parent = nodes[i].clone();
                    nodes.extend(children.iter().map(|c| format!("{parent}/{c}")));
                }
                Err(zk::Error::NoNode) => {}
                Err(err) => return Err(failed("list", &nodes[i], err)),
            }
            i += 1;
        }
        for node in nodes.iter().rev() {
            match self.reader.delete(node, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(err) => return Err(failed("delete", node, err)),
            }
        }
        Ok(())
    }

    fn path(&self, rest: &str) -> String {
        format!("{}/{rest}", self.base)
    }

    /// The fence of `scope`: its fence node under `fences`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence::conformance::ZooKeeperStore) {
    /// println!("{:?}", store.fence("/locks/a").fence_node());
    /// # }
    /// ```
    pub fn fence(&self, scope: &str) -> ZooKeeperFence {
        let node = self.path(&format!("fences{scope}"));
        let fence = ZooKeeperFence::with_fence_node(self.fenced.clone(), node)
            .unwrap_or_else(|_| ZooKeeperFence::new(self.fenced.clone()));
        #[cfg(feature = "mutants")]
        if let Some(mutant) = self.mutant {
            return fence.with_mutant(mutant);
        }
        fence
    }

    /// Creates `path` if missing (set-up, outside any fence).
    async fn ensure(&self, path: &str, data: &[u8]) -> crate::Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.reader.create(path, data, &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(err) => Err(failed("create", path, err)),
        }
    }
}

fn parse(data: &[u8]) -> i64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

impl FenceStore for ZooKeeperStore {
    type Error = Error;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<Error>>> {
        Box::pin(async move { self.fence(ticket.scope()).claim(ticket).await.map(|_| ()) })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        mut hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<Error>>> {
        Box::pin(async move {
            let (counter, log) = (
                self.path(&format!("counters/{key}")),
                self.path(&format!("logs/{key}")),
            );
            self.ensure(&counter, b"0")
                .await
                .map_err(FenceError::Store)?;
            self.ensure(&log, b"").await.map_err(FenceError::Store)?;
            let fence = self.fence(ticket.scope());
            // Raise the fence before reading (as a holder should), then read, think, write.
            fence.claim(ticket).await?;
            let (data, _) = (self.fenced.get_data(&counter).await)
                .map_err(|e| FenceError::Store(failed("get", &counter, e)))?;
            let value = parse(&data) + 1;
            if let Some(between) = hooks.between.take() {
                between.await;
            }
            let token = ticket.token().as_i64().to_string();
            let options = zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all());
            let mut before_commit = hooks.before_commit.take();
            fence
                .write(ticket, |ops| {
                    ops.add_set_data(&counter, value.to_string().as_bytes(), None)?;
                    ops.add_create(&format!("{log}/e-"), token.as_bytes(), &options)?;
                    if let Some(hook) = before_commit.take() {
                        hook();
                    }
                    Ok(())
                })
                .await?;
            Ok(value)
        })
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            match self
                .reader
                .get_data(&self.path(&format!("counters/{key}")))
                .await
            {
                Ok((data, _)) => Ok(parse(&data)),
                Err(zk::Error::NoNode) => Ok(0),
                Err(err) => Err(err.to_string()),
            }
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let dir = self.path(&format!("logs/{key}"));
            let mut entries = match self.reader.list_children(&dir).await {
                Ok(entries) => entries,
                Err(zk::Error::NoNode) => return Ok(Vec::new()),
                Err(err) => return Err(err.to_string()),
            };
            entries.sort();
            let mut tokens = Vec::new();
            for entry in entries {
                let (data, _) = (self.reader.get_data(&format!("{dir}/{entry}")).await)
                    .map_err(|e| e.to_string())?;
                tokens.push(parse(&data));
            }
            Ok(tokens)
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let node = self.path(&format!("fences{scope}"));
            let fence = ZooKeeperFence::with_fence_node(self.reader.clone(), node)
                .map_err(|e| e.to_string())?;
            fence.seen(scope).await.map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        // ZooKeeper's fence takes no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        self.switch.clone().unwrap_or_else(|| Arc::new(|_| {}))
    }
}
