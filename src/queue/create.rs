//! Creation and verification: our node created with the listing riding behind it, found
//! again after a lost reply, its sequence and token checked, and the kind's admission.

use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{Error, Result};
use crate::options::ParentMode;
use crate::requests::nodes::{child_path, create_parents, delete_node, find_own_node};
use crate::requests::retry::{answered_by_server, await_reconnect, is_connection_error};
use crate::token::FencingToken;
use crate::watchdog::clock;

use super::names;
use super::state::{Attempt, Created, Queued};

impl Attempt<'_> {
    /// Creates our node, with the listing (and the kind's own read) riding right behind it on
    /// the session: one round trip plus one commit. Creates missing parents; after a lost
    /// reply, finds our node by its UUID and our session. `Ok(None)`: the deadline passed.
    pub(super) async fn create(&mut self) -> Result<Option<Created>> {
        let (client, path, options) = (self.client, self.path, &self.queue.options);
        let create_path = child_path(path, self.pending.prefix());
        let mode = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::new(&options.acls));
        let (mut attempt, mut parent_attempts) = (0, 0);
        loop {
            if self.deadline().is_some_and(|d| Instant::now() >= d) {
                return Ok(None); // `pending` cleans up whatever may have been created
            }
            let err = match self.send_create(&create_path, &mode).await {
                Ok(created) => return Ok(Some(created)),
                Err(err) => err,
            };
            match err {
                zk::Error::NoNode if options.create_parents && parent_attempts < 8 => {
                    parent_attempts += 1;
                    self.pending.refused();
                    self.create_parents().await?;
                }
                zk::Error::NoNode => {
                    self.pending.refused();
                    return Err(Error::NoParent {
                        path: path.to_owned(),
                    });
                }
                err if is_connection_error(&err) => {
                    // Its own loop rather than `retrying`: after a lost reply our node may
                    // exist, and is found rather than created twice.
                    await_reconnect(client, &mut attempt).await?;
                    let prefix = self.pending.prefix();
                    if let Some((name, stat)) = find_own_node(client, path, prefix).await? {
                        return Ok(Some(Created {
                            name,
                            stat,
                            listing: None,
                            lock_data: None,
                        }));
                    }
                }
                err => {
                    self.pending.refused();
                    return Err(Error::from_request("create", path, self.session, err));
                }
            }
        }
    }

    /// Sends the create with the listing (and the kind's read) right behind it, on the session:
    /// one round trip. Records what its reply proves for the lease.
    async fn send_create(
        &mut self,
        create_path: &str,
        mode: &zk::CreateOptions<'_>,
    ) -> std::result::Result<Created, zk::Error> {
        let (client, path) = (self.client, self.path);
        self.pending.sending_create();
        let sent = clock::now();
        let create = client.create(create_path, self.data, mode);
        let list = client.list_children(path);
        let read = self
            .queue
            .admission
            .is_some()
            .then(|| client.get_data(path));
        let created = create.await;
        self.record(sent, &created);
        let listing = list.await.ok();
        let lock_data = match read {
            Some(read) => read.await.ok(),
            None => None,
        };
        let (stat, sequence) = created?;
        Ok(Created {
            name: format!("{}{sequence}", self.pending.prefix()),
            stat,
            listing,
            lock_data,
        })
    }

    /// What the create's reply proves for the lease: a commit, or a refusal (a reply).
    pub(super) fn record<T>(&self, sent: Instant, created: &std::result::Result<T, zk::Error>) {
        match created {
            // A committed write: a proof for the lease (see `crate::watchdog::lease`).
            Ok(_) => self.lease().committed(sent, clock::now()),
            // Refused by a server, which so saw the session: a reply for the lease.
            Err(err) if answered_by_server(err) => self.lease().replied(sent, clock::now()),
            Err(_) => {}
        }
    }

    /// Creates the lock path's missing parents (nothing of ours exists meanwhile).
    pub(super) async fn create_parents(&self) -> Result<()> {
        let options = &self.queue.options;
        let mode = match options.parent_mode {
            ParentMode::Container => zk::CreateMode::Container,
            ParentMode::Persistent => zk::CreateMode::Persistent,
        };
        create_parents(self.client, self.path, mode, &options.acls).await
    }

    /// Our node's sequence and token, checked; then the kind's admission (a semaphore's
    /// agreement on its count, from the data read in the create's round trip).
    pub(super) async fn verify(&mut self, created: Created) -> Result<Queued> {
        let Created {
            name,
            stat,
            listing,
            lock_data,
        } = created;
        let path = child_path(self.path, &name);
        self.pending.created(&name);
        let unexpected = |message: String| Error::ZooKeeper {
            op: "create",
            path: path.clone(),
            source: zk::Error::UnexpectedError(message),
        };
        let Some(sequence) = names::parse_sequence(&name) else {
            return Err(unexpected(format!(
                "the server named our node {name:?}, without a 32-bit sequence"
            )));
        };
        if stat.czxid <= 0 {
            self.pending.remove().await?;
            return Err(unexpected("the server returned no Stat for our node (ZooKeeper before 3.5?); zkfence needs it for the fencing token".into()));
        }
        tracing::Span::current().record("node", path.as_str());
        if let Some(admission) = &self.queue.admission {
            if let Err(err) = admission.admit(self.client, self.path, lock_data).await {
                self.pending.remove().await?;
                return Err(err);
            }
        }
        let token = FencingToken::of_node(sequence, stat.czxid);
        Ok(Queued {
            name,
            path,
            sequence,
            token,
            listing,
        })
    }

    /// A create retried after a lost reply may have landed twice: any other node with our
    /// UUID is ours, and must not sort before us as if it were someone else's. Deletes them;
    /// `true` if there were any.
    pub(super) async fn remove_duplicates(
        &self,
        children: &[String],
        node: &Queued,
    ) -> Result<bool> {
        let prefix = self.pending.prefix();
        let duplicates: Vec<&String> = children
            .iter()
            .filter(|c| c.starts_with(prefix) && **c != node.name)
            .collect();
        for duplicate in &duplicates {
            let path = child_path(self.path, duplicate);
            // A waiter's node: never marked as a release (see "The handoff").
            delete_node(self.client, &path, None).await?;
        }
        Ok(!duplicates.is_empty())
    }
}
