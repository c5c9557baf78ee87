//! A queue of sequential nodes under one parent: the mutex's, the read-write lock's, a
//! semaphore's `locks` and `leases`. The submodules: `order` (the arrival order and who holds,
//! pure), `entry` (our node while an acquisition runs: creating it and leaving), `waiting`
//! (one attempt, or waiting in line on the predecessor's watch) and `cleanup` (deleting nodes
//! we no longer want: now by owner, or in the background). This file reads a queue: its
//! listing, and our node in it. Builds no lease (`held.rs` does) and knows no recipe's rules
//! beyond the order (`semaphore.rs`, `rw_lock.rs`).

use std::sync::atomic::Ordering;

use distlock_core::Result;
use zookeeper_client as zk;

use super::{map_err, Conn, Inner};

mod cleanup;
mod entry;
mod order;
mod waiting;

pub(super) use cleanup::{spawn_cleanup, Cleanup};
pub(super) use entry::{Node, QueueEntry};
pub(super) use order::{is_upgradeable, is_write, queue, sequence_of, Line};
pub(super) use waiting::vanished;

/// A `sync` of `path`, sent now (before any request made after this call): the server this
/// session is connected to answers the session's later reads only once it has applied what
/// the leader had committed when the `sync` reached it. A follower otherwise answers reads
/// from what it has applied so far, which may lag its leader: a lock released through another
/// member would still show here as held. A missing `path` is no error.
pub(super) fn sync_sent<'a>(
    conn: &'a Conn,
    path: &str,
) -> impl std::future::Future<Output = Result<()>> + 'a {
    let synced = conn.client.sync(path);
    async move {
        match synced.await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(map_err(e)),
        }
    }
}

impl Inner {
    /// `getChildren` of `parent` as the leader had it when the call was made (`None` if it
    /// does not exist): a [`sync_sent`] and the listing, sent at once, 1 round trip. Every
    /// first look at a queue, whose answer decides "held" or "free", goes through here.
    pub(super) async fn list_children_synced(
        &self,
        conn: &Conn,
        parent: &str,
    ) -> Result<Option<Vec<String>>> {
        let (synced, listed) = futures::join!(sync_sent(conn, parent), self.list_children(conn, parent));
        synced?;
        listed
    }

    /// `getChildren` of a lock's parent (`None` if it does not exist): 1 round trip. Fresh
    /// enough only after a write of this session to the same queue (a `create`, whose reply
    /// comes once this server has applied everything committed before it); else use
    /// [`list_children_synced`](Self::list_children_synced).
    pub(super) async fn list_children(&self, conn: &Conn, parent: &str) -> Result<Option<Vec<String>>> {
        self.listings.fetch_add(1, Ordering::Relaxed);
        match conn.client.list_children(parent).await {
            Ok(children) => Ok(Some(children)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_err(e)),
        }
    }

    /// [`list_children`](Self::list_children) with the parent's `mzxid` (the zxid of the last
    /// write of its data): 1 round trip. A read-write lock's parent data is written when an
    /// upgrade is granted, so a node created before it learns that it may have been overtaken
    /// (see `rw_lock.rs`).
    pub(super) async fn list_children_stat(
        &self,
        conn: &Conn,
        parent: &str,
    ) -> Result<Option<(Vec<String>, i64)>> {
        self.listings.fetch_add(1, Ordering::Relaxed);
        match conn.client.get_children(parent).await {
            Ok((children, stat)) => Ok(Some((children, stat.mzxid))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_err(e)),
        }
    }

    /// Finds our node among the contenders `queue` (queue order): the nodes carrying our
    /// protected `prefix`. The lowest of them that belongs to our session is ours; every other
    /// one (a duplicate left by a `create` retried after a lost reply, or a node of an earlier
    /// session of ours) is deleted. `known` is the node we just created (no `exists` needed
    /// for it). Returns our node and the queue without the deleted nodes. No round trip in the
    /// usual case (one node of ours, `known`); else 1 `exists` or `delete` per node of ours.
    pub(super) async fn settle(
        &self,
        conn: &Conn,
        parent: &str,
        prefix: &str,
        queue: Vec<String>,
        known: Option<&Node>,
    ) -> Result<(Option<Node>, Vec<String>)> {
        let known: Vec<Node> = known.into_iter().cloned().collect();
        let (ours, queue) = self.settle_group(conn, parent, prefix, queue, &known, 1).await?;
        Ok((ours.into_iter().next(), queue))
    }

    /// [`settle`](Self::settle) for a hold of `keep` nodes created together (a weighted
    /// permit's leases): the lowest `keep` nodes of ours in our session are ours, the others
    /// are deleted. `known` are the nodes we just created. No round trip when the nodes of ours
    /// are exactly `known`.
    pub(super) async fn settle_group(
        &self,
        conn: &Conn,
        parent: &str,
        prefix: &str,
        mut queue: Vec<String>,
        known: &[Node],
        keep: usize,
    ) -> Result<(Vec<Node>, Vec<String>)> {
        let mine: Vec<String> = queue.iter().filter(|c| c.starts_with(prefix)).cloned().collect();
        if known.len() == keep
            && mine.len() == keep
            && mine.iter().all(|c| known.iter().any(|n| n.child == *c))
        {
            let mut ours = known.to_vec();
            ours.sort_by_key(|n| mine.iter().position(|c| *c == n.child));
            return Ok((ours, queue));
        }
        let session = conn.client.session_id().0;
        let mut adopted: Vec<Node> = Vec::new();
        for child in mine {
            let path = format!("{parent}/{child}");
            if adopted.len() < keep {
                if let Some(node) = known.iter().find(|n| n.child == child) {
                    adopted.push(node.clone());
                    continue;
                }
                match conn.client.check_stat(&path).await.map_err(map_err)? {
                    Some(stat) if stat.ephemeral_owner == session => {
                        adopted.push(Node {
                            path,
                            child,
                            czxid: stat.czxid,
                        });
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        queue.retain(|c| *c != child);
                        continue;
                    }
                }
            }
            conn.client
                .delete(&path, None)
                .await
                .or_else(cleanup::ignore_no_node)?;
            tracing::info!(
                path,
                "distlock: deleted a duplicate ZooKeeper lock node carrying our owner token"
            );
            queue.retain(|c| *c != child);
        }
        Ok((adopted, queue))
    }
}
