//! [`QueueEntry`]: our node in one queue (a mutex's, a read-write lock's, a semaphore's
//! `locks` or `leases`) while an acquisition runs. Owns creating the node (and its missing
//! parents) and deleting it, now or, when dropped armed, through the background cleanup
//! (`cleanup.rs`); knows nothing about who holds.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use distlock_core::{Error, LockName, OwnerToken, Result};
use zookeeper_client as zk;

use super::cleanup::{ignore_no_node, spawn_cleanup, Cleanup};
use super::order::queue;
use crate::lock::layout::{lock_path, protected_prefix, LOCK_NODE};
use crate::lock::{map_err, Conn, Inner, BACKEND};

/// A created contender node.
#[derive(Clone)]
pub(in crate::lock) struct Node {
    pub(in crate::lock) path: String,
    pub(in crate::lock) child: String,
    pub(in crate::lock) czxid: i64,
}

/// Our place in a queue while an acquisition runs. Dropped while armed (an error, a timeout,
/// a cancelled future), it deletes our node in the background, or, if `create` may have been
/// applied without our learning the name, every child carrying our protected prefix; then the
/// same for the entry it was [`chain`](Self::chain)ed to, in that order.
pub(in crate::lock) struct QueueEntry {
    client: zk::Client,
    pub(in crate::lock) parent: String,
    pub(in crate::lock) prefix: String,
    root: String,
    op_timeout: Duration,
    containers: bool,
    pub(in crate::lock) created: Option<String>,
    /// The other nodes created together with `created` (a weighted permit's leases).
    group: Vec<String>,
    /// The parent's `mzxid` in the listing that last placed our node (`None` when no such
    /// listing was made).
    pub(in crate::lock) parent_mzxid: Option<i64>,
    pub(in crate::lock) sent: bool,
    armed: bool,
    /// An entry cleaned up after this one (a semaphore's `locks` node after its lease, so the
    /// next acquirer never counts our lease once it may add its own).
    then: Option<Box<QueueEntry>>,
    inner: Weak<Inner>,
}

impl QueueEntry {
    /// An entry for our node named `prefix` + sequence under `parent`.
    pub(in crate::lock) fn at(inner: &Arc<Inner>, conn: &Conn, parent: String, prefix: String) -> Self {
        Self {
            client: conn.client.clone(),
            parent,
            prefix,
            root: inner.config.root().to_owned(),
            op_timeout: inner.config.operation_timeout(),
            containers: inner.containers.load(Ordering::Relaxed),
            created: None,
            group: Vec::new(),
            parent_mzxid: None,
            sent: false,
            armed: true,
            then: None,
            inner: Arc::downgrade(inner),
        }
    }

    /// Our place in the mutex `name`'s queue.
    pub(in crate::lock) fn mutex(
        inner: &Arc<Inner>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
    ) -> Self {
        Self::at(
            inner,
            conn,
            lock_path(inner.config.root(), name),
            protected_prefix(owner, LOCK_NODE),
        )
    }

    /// This entry, with `next` cleaned up after it if it is dropped armed.
    pub(in crate::lock) fn chain(mut self, next: QueueEntry) -> Self {
        self.then = Some(Box::new(next));
        self
    }

    /// `create2` of our EPHEMERAL_SEQUENTIAL node holding `data` (1 round trip), creating the
    /// parent (and any missing level up to the root) when missing; after a connection loss,
    /// finds our node by its protected prefix instead of creating a second one (Curator's
    /// protection mode).
    pub(in crate::lock) async fn create(&mut self, data: &[u8]) -> Result<Node> {
        let prefix_path = format!("{}/{}", self.parent, self.prefix);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let create = self.client.create(&prefix_path, data, &options);
            self.sent = true;
            match create.await {
                Ok((stat, sequence)) => {
                    let child = format!("{}{sequence}", self.prefix);
                    let path = format!("{}/{child}", self.parent);
                    self.created = Some(path.clone());
                    return Ok(Node {
                        path,
                        child,
                        czxid: stat.czxid,
                    });
                }
                Err(zk::Error::NoNode) if attempts < 4 => self.create_parent().await?,
                Err(zk::Error::ConnectionLoss) if attempts < 4 => {
                    if let Some(node) = self.find_own().await? {
                        return Ok(node);
                    }
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    /// `count` EPHEMERAL_SEQUENTIAL nodes holding `data`, created together in one `multi` (1
    /// round trip, +1 `exists` on servers whose multi replies carry no stat; one node is a
    /// plain [`create`](Self::create)): all of them or none, with one creation zxid. Missing parents and a lost reply are
    /// handled as `create` does (the nodes found by our protected prefix).
    pub(in crate::lock) async fn create_group(&mut self, data: &[u8], count: usize) -> Result<Vec<Node>> {
        if count <= 1 {
            return Ok(vec![self.create(data).await?]);
        }
        let prefix_path = format!("{}/{}", self.parent, self.prefix);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut multi = self.client.new_multi_writer();
            for _ in 0..count {
                multi.add_create(&prefix_path, data, &options).map_err(map_err)?;
            }
            let committed = multi.commit();
            self.sent = true;
            let error = match committed.await {
                Ok(results) => {
                    let mut nodes = Vec::with_capacity(count);
                    for result in results {
                        let zk::MultiWriteResult::Create { path, stat } = result else {
                            return Err(Error::backend(BACKEND, "a multi of creates answered otherwise"));
                        };
                        let child = path.rsplit('/').next().unwrap_or_default().to_owned();
                        nodes.push(Node {
                            path: format!("{}/{child}", self.parent),
                            child,
                            czxid: stat.czxid,
                        });
                    }
                    if nodes.iter().any(|n| n.czxid < 0) {
                        // The server's reply to a multi may carry no stat (ZOOKEEPER-4026): the
                        // nodes share the transaction's zxid, read once from the first.
                        let czxid = match self.client.check_stat(&nodes[0].path).await {
                            Ok(Some(stat)) => stat.czxid,
                            Ok(None) => return Err(super::waiting::vanished()),
                            Err(e) => return Err(map_err(e)),
                        };
                        nodes.iter_mut().for_each(|n| n.czxid = czxid);
                    }
                    self.set_nodes(&nodes);
                    return Ok(nodes);
                }
                Err(error) => zk::Error::from(error),
            };
            match error {
                zk::Error::NoNode if attempts < 4 => self.create_parent().await?,
                zk::Error::ConnectionLoss if attempts < 4 => {
                    let found = self.find_own_group(count).await?;
                    if found.len() == count {
                        return Ok(found);
                    }
                }
                e => return Err(map_err(e)),
            }
        }
    }

    /// Records `nodes` (in queue order) as this entry's nodes.
    pub(in crate::lock) fn set_nodes(&mut self, nodes: &[Node]) {
        self.created = nodes.first().map(|n| n.path.clone());
        self.group = nodes.iter().skip(1).map(|n| n.path.clone()).collect();
    }

    /// After a lost `multi` reply: our `count` nodes, if the multi was applied (none if not).
    async fn find_own_group(&mut self, count: usize) -> Result<Vec<Node>> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(Error::unavailable(BACKEND, "the ZooKeeper client was dropped"));
        };
        match self.client.sync(&self.parent).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_err(e)),
        }
        let conn = Conn {
            client: self.client.clone(),
            epoch: 0,
        };
        let Some(children) = inner.list_children(&conn, &self.parent).await? else {
            return Ok(Vec::new());
        };
        let (ours, _) = inner
            .settle_group(&conn, &self.parent, &self.prefix, queue(children), &[], count)
            .await?;
        self.set_nodes(&ours);
        Ok(ours)
    }

    /// After a lost `create` reply: our node, if the create was applied. The reconnection may
    /// have reached a follower that has not applied it yet, so `sync` first (the listing then
    /// sees every write the leader committed before); if several nodes carry our prefix, the
    /// lowest of our session is ours and the others are deleted.
    async fn find_own(&mut self) -> Result<Option<Node>> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(Error::unavailable(BACKEND, "the ZooKeeper client was dropped"));
        };
        match self.client.sync(&self.parent).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_err(e)),
        }
        let conn = Conn {
            client: self.client.clone(),
            epoch: 0,
        };
        let Some(children) = inner.list_children(&conn, &self.parent).await? else {
            return Ok(None);
        };
        let (ours, _) = inner
            .settle(&conn, &self.parent, &self.prefix, queue(children), None)
            .await?;
        if let Some(node) = &ours {
            self.created = Some(node.path.clone());
        }
        Ok(ours)
    }

    /// Creates the queue's parent as a container node (persistent if the server has none),
    /// and every missing level between it and the root the same way; the root itself is
    /// persistent. A level the server removes meanwhile (an emptied container) is created
    /// again, a bounded number of times.
    async fn create_parent(&mut self) -> Result<()> {
        // The parent and the levels above it, deepest first, up to (not including) the root.
        let mut levels = vec![self.parent.clone()];
        while let Some((above, _)) = levels[levels.len() - 1].rsplit_once('/') {
            if above.len() <= self.root.len() || !above.starts_with(&self.root) {
                break;
            }
            levels.push(above.to_owned());
        }
        let mut level = 0;
        for _ in 0..4 * (levels.len() + 1) {
            let mode = if self.containers {
                zk::CreateMode::Container
            } else {
                zk::CreateMode::Persistent
            };
            let options = mode.with_acls(zk::Acls::anyone_all());
            match self.client.create(&levels[level], &[], &options).await {
                Ok(_) | Err(zk::Error::NodeExists) if level == 0 => return Ok(()),
                Ok(_) | Err(zk::Error::NodeExists) => level -= 1,
                Err(zk::Error::Unimplemented) if self.containers => {
                    self.containers = false;
                    if let Some(inner) = self.inner.upgrade() {
                        inner.containers.store(false, Ordering::Relaxed);
                    }
                }
                Err(zk::Error::NoNode) if level + 1 < levels.len() => level += 1,
                Err(zk::Error::NoNode) => {
                    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    match self.client.mkdir(&self.root, &options).await {
                        Ok(()) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(map_err(e)),
                    }
                }
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(())
    }

    /// The paths of our nodes: `created` and its group.
    fn nodes(&self) -> impl Iterator<Item = &str> {
        self.created
            .as_deref()
            .into_iter()
            .chain(self.group.iter().map(String::as_str))
    }

    /// Deletes our node (or our group's nodes, sent together) now (1 round trip) and disarms.
    pub(in crate::lock) async fn leave(&mut self) -> Result<()> {
        let deletes: Vec<_> = self.nodes().map(|path| self.client.delete(path, None)).collect();
        for deleted in deletes {
            deleted.await.or_else(ignore_no_node)?;
        }
        self.disarm();
        Ok(())
    }

    /// Deletes our node, then the chained entry's, in one round trip (both requests sent at
    /// once, applied in order), and disarms both.
    pub(in crate::lock) async fn leave_all(&mut self) -> Result<()> {
        let ours: Vec<_> = self.nodes().map(|path| self.client.delete(path, None)).collect();
        let next = self
            .then
            .as_deref()
            .and_then(|next| next.created.as_deref())
            .map(|path| self.client.delete(path, None));
        for deleted in ours {
            deleted.await.or_else(ignore_no_node)?;
        }
        self.disarm();
        if let Some(deleted) = next {
            deleted.await.or_else(ignore_no_node)?;
        }
        if let Some(next) = self.then.as_deref_mut() {
            next.disarm();
        }
        Ok(())
    }

    /// Leaves the chained entry (its node deleted now, 1 round trip; if that fails or is cut
    /// short, in the background); this entry stays as it is.
    pub(in crate::lock) async fn leave_chained(&mut self) {
        if let Some(mut next) = self.then.take() {
            if let Err(error) = next.leave().await {
                tracing::debug!(%error, "distlock: deleting a ZooKeeper queue node failed; retrying in the background");
            }
        }
    }

    pub(in crate::lock) fn disarm(&mut self) {
        self.armed = false;
    }

    /// What must be deleted for this entry if it is dropped now, disarming it.
    fn cleanup(&mut self) -> Vec<Cleanup> {
        if !self.armed || !self.sent {
            return Vec::new();
        }
        self.armed = false;
        match self.created.take() {
            Some(path) => std::iter::once(path)
                .chain(std::mem::take(&mut self.group))
                .map(Cleanup::Path)
                .collect(),
            None => vec![Cleanup::Prefix {
                parent: std::mem::take(&mut self.parent),
                prefix: std::mem::take(&mut self.prefix),
            }],
        }
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        let mut cleanups: Vec<Cleanup> = self.cleanup();
        if let Some(next) = self.then.as_deref_mut() {
            cleanups.extend(next.cleanup());
        }
        if !cleanups.is_empty() {
            spawn_cleanup(self.client.clone(), cleanups, self.op_timeout);
        }
    }
}
