//! [`Observer`]: leader changes as a watch sees them, with a watch on the leader's node and
//! one on the proclaimed value, never one per candidate.

use std::sync::Arc;

use zookeeper_client as zk;

use super::leader::{head, leader, Leader};
use crate::error::{Error, Result};
use crate::requests::nodes::child_path;
use crate::requests::retry::retrying;
use crate::requests::watch::{watch_changed, NodeWatch};

/// Leader changes as a watch sees them (see
/// [`FencedElection::observe`](crate::FencedElection::observe)).
///
/// # Examples
///
/// ```no_run
/// # async fn demo(election: zkfence::FencedElection) -> zkfence::Result<()> {
/// let mut observer = election.observe();
/// let current = observer.next().await?;
/// let next_change = observer.next().await?;
/// # let _ = (current, next_change); Ok(()) }
/// ```
pub struct Observer {
    client: zk::Client,
    path: Arc<str>,
    value: Arc<str>,
    last: Option<Leader>,
    started: bool,
    /// The watches set by the last look: on the leader's node and the value (or, with no
    /// leader, on the election path's children).
    armed: Vec<NodeWatch>,
    /// The leader's node as the last look read it (name, sequence, data, stat), while it
    /// leads: a new proclamation is read against it, without listing the candidates again.
    head: Option<(String, i32, Vec<u8>, zk::Stat)>,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("path", &self.path)
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Observer {
    /// An observer of the election on `path` whose proclaimed value is at `value`; nothing
    /// read yet.
    pub(super) fn new(client: zk::Client, path: Arc<str>, value: Arc<str>) -> Observer {
        Observer {
            client,
            path,
            value,
            last: None,
            started: false,
            armed: Vec::new(),
            head: None,
        }
    }

    /// The current leader on the first call; after that, waits for the next change and
    /// returns the leader then (`None` while nobody leads).
    ///
    /// # Errors
    ///
    /// The session's end; ZooKeeper errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the watches stay with the observer, and the next call goes on from them.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut observer: zkfence::Observer) -> zkfence::Result<()> {
    /// loop {
    ///     match observer.next().await? {
    ///         Some(leader) => println!("epoch {}", leader.epoch),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            if self.started && !self.armed.is_empty() {
                let armed = std::mem::take(&mut self.armed);
                let (event, _, rest) = futures_util::future::select_all(armed).await;
                if let Some(err) =
                    Error::from_session_state(event.session_state, self.client.session_id())
                {
                    self.armed = rest;
                    return Err(err);
                }
                // A new proclamation of the same leader: its value is read again, and nothing
                // else (the leader's node keeps its watch; no listing of the candidates).
                // (Its value deleted, by hand or after an old term's resignation: look again.)
                let proclamation = event.path == *self.value
                    && matches!(
                        event.event_type,
                        zk::EventType::NodeDataChanged | zk::EventType::NodeCreated
                    );
                let current = match (&self.head, proclamation) {
                    (Some(head), true) => {
                        let head = head.clone();
                        self.armed = rest;
                        let proclaimed = self.watch_value().await?;
                        Some(leader(head.0, head.1, head.2, head.3, proclaimed))
                    }
                    _ => {
                        // Watches set again on the same paths first, so dropping the old ones
                        // costs no removal request.
                        let current = self.look().await?;
                        drop(rest);
                        current
                    }
                };
                if current != self.last {
                    self.last = current.clone();
                    return Ok(current);
                }
                continue;
            }
            let current = self.look().await?;
            if !self.started || current != self.last {
                self.started = true;
                self.last = current.clone();
                return Ok(current);
            }
        }
    }

    /// Reads the leader and sets the watches for the next change: on the leader's node (its
    /// deletion ends its term; later candidates queue behind it and change nothing), on the
    /// proclaimed value, and, while nobody leads, on the election path's children.
    async fn look(&mut self) -> Result<Option<Leader>> {
        let (client, path) = (self.client.clone(), self.path.clone());
        let (client, path) = (&client, &*path);
        let session = client.session_id();
        self.head = None;
        loop {
            let children = match retrying(client, || client.list_children(path)).await? {
                Ok(children) => children,
                Err(zk::Error::NoNode) => return self.await_creation().await,
                Err(err) => return Err(Error::from_request("list", path, session, err)),
            };
            let Some((name, sequence)) = head(children) else {
                match self.await_candidate().await? {
                    true => continue,
                    false => return Ok(None),
                }
            };
            let node = child_path(path, &name);
            let (data, stat) = match retrying(client, || client.get_and_watch_data(&node)).await? {
                Ok((data, stat, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    (data, stat)
                }
                // Gone between the listing and the read: look again.
                Err(zk::Error::NoNode) => continue,
                Err(err) => return Err(Error::from_request("get", &node, session, err)),
            };
            let proclaimed = self.watch_value().await?;
            self.head = Some((name.clone(), sequence, data.clone(), stat));
            return Ok(Some(leader(name, sequence, data, stat, proclaimed)));
        }
    }

    /// With no election path: a watch for its creation. `None`: nobody leads.
    async fn await_creation(&mut self) -> Result<Option<Leader>> {
        let (client, path) = (&self.client, &*self.path);
        match retrying(client, || client.check_and_watch_stat(path)).await? {
            Ok((_, watcher)) => self.armed.push(Box::pin(watch_changed(watcher))),
            Err(err) => {
                return Err(Error::from_request(
                    "exists",
                    path,
                    client.session_id(),
                    err,
                ))
            }
        }
        Ok(None)
    }

    /// With no candidate: a watch on the path's children; `true` when one arrived meanwhile.
    async fn await_candidate(&mut self) -> Result<bool> {
        let (client, path) = (&self.client, &*self.path);
        let session = client.session_id();
        match retrying(client, || client.list_and_watch_children(path)).await? {
            Ok((children, watcher)) => {
                self.armed.push(Box::pin(watch_changed(watcher)));
                Ok(head(children).is_some())
            }
            Err(zk::Error::NoNode) => self.await_creation().await.map(|_| false),
            Err(err) => Err(Error::from_request("list", path, session, err)),
        }
    }

    /// The proclaimed value, watched (its creation too).
    async fn watch_value(&mut self) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let (client, value) = (&self.client, &*self.value);
        let session = client.session_id();
        loop {
            match retrying(client, || client.get_and_watch_data(value)).await? {
                Ok((data, stat, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    return Ok(Some((data, stat)));
                }
                Err(zk::Error::NoNode) => {}
                Err(err) => return Err(Error::from_request("get", value, session, err)),
            }
            match retrying(client, || client.check_and_watch_stat(value)).await? {
                Ok((None, watcher)) => {
                    self.armed.push(Box::pin(watch_changed(watcher)));
                    return Ok(None);
                }
                // Created between the two reads: read it.
                Ok((Some(_), _)) => continue,
                Err(err) => return Err(Error::from_request("exists", value, session, err)),
            }
        }
    }
}
