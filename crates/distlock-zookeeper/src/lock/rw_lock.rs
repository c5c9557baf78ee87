//! The read-write lock: Apache Curator's `InterProcessReadWriteLock` recipe and layout, so that
//! Curator clients and this crate share one lock on [`ZooKeeperLock::rw_lock_path`].
//!
//! ```text
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__READ__<seq>   a reader; data = the owner token
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__WRIT__<seq>   a writer; data = the owner token
//! ```
//!
//! One queue of ephemeral-sequential nodes ordered by sequence. A reader holds when no
//! writer's node sorts before it, a writer when its node is first; a waiter watches only the
//! node whose deletion can free it (a reader the last writer before it, a writer its
//! predecessor). The queue is FIFO: a waiting writer keeps every reader that comes after it
//! out until it has held and released, so a stream of readers never starves a writer.
//! (The core's waiting-writer records are not needed: a writer's node is its place in the
//! queue, and it goes away with the wait; `withdraw` has nothing to do.)
//!
//! Fencing: a hold's token is its node's creation zxid. A writer holds only once every node
//! before it is gone and every reader after it waits for it, so writers and the readers around
//! them hold in the order of their tokens; readers holding together are granted in the order
//! of their nodes' creation.
//!
//! [`ZooKeeperLock::rw_lock_path`]: crate::ZooKeeperLock::rw_lock_path

use std::sync::Arc;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use futures::future::join_all;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::layout::{object_path, protected_prefix, READ_NODE, WRITE_NODE};
use super::queue::{is_write, queue, Line, QueueEntry};
use super::{map_err, Inner};

impl Inner {
    /// Our place in the read-write lock `name`'s queue for `kind` (a read or the write).
    fn rw_entry(
        self: &Arc<Self>,
        conn: &super::Conn,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
    ) -> Result<(QueueEntry, Line)> {
        let line = Line::of_rw(kind)
            .ok_or_else(|| Error::invalid_options(format!("{kind} is no side of a read-write lock")))?;
        let node = if line == Line::Read { READ_NODE } else { WRITE_NODE };
        let parent = object_path(self.config.root(), Primitive::RwLock, name);
        Ok((
            QueueEntry::at(self, conn, parent, protected_prefix(owner, node)),
            line,
        ))
    }

    /// One attempt at a read or the write lock, without waiting ([`Inner::take_once`]):
    /// 1 round trip (`getChildren`) when a writer is there (for a read) or anyone is (for the
    /// write): no node is created; 3 otherwise (`getChildren`, `create2`, `getChildren`), +1
    /// `delete` if another contender got in first.
    pub(super) async fn try_rw(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
    ) -> Result<TryAcquire> {
        self.bounded(async {
            let sent_at = Instant::now();
            let conn = self.conn().await?;
            let (mut entry, line) = self.rw_entry(&conn, name, kind, owner)?;
            let owner_data = owner.to_string();
            match self
                .take_once(&conn, &mut entry, line, owner_data.as_bytes(), None)
                .await?
            {
                Some(node) => {
                    let lease = self.hold(&conn, name, owner, node, sent_at, kind)?;
                    entry.disarm();
                    Ok(TryAcquire::Acquired(lease))
                }
                None => Ok(TryAcquire::Held(Holder::unknown())),
            }
        })
        .await
    }

    /// Waits in the read-write lock's queue ([`Inner::wait_in_line`]): 2 round trips when it
    /// holds at once (`create2`, `getChildren`); when queued, 3 to get in line (`create2`,
    /// `getChildren`, `exists`) and 1 `getChildren` per wake-up.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, our node is deleted in the background (found by the
    /// owner's protected prefix if the drop came while `create` was in flight); a hold won but
    /// not yet returned cannot exist, since winning and returning happen without an await
    /// between.
    pub(super) async fn queue_for_rw(
        self: &Arc<Self>,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let sent_at = Instant::now();
        let conn = self.bounded(self.conn()).await?;
        let (mut entry, line) = self.rw_entry(&conn, name, kind, owner)?;
        let owner_data = owner.to_string();
        let created = self.bounded(entry.create(owner_data.as_bytes())).await?;
        let Some(node) = self
            .wait_in_line(&conn, &mut entry, &created, line, deadline)
            .await?
        else {
            return Ok(None);
        };
        let lease = self.hold(&conn, name, owner, node, sent_at, kind)?;
        entry.disarm();
        Ok(Some(lease))
    }

    /// The holders of the read-write lock `name`: the first node if it is a writer's, else
    /// every reader before the first writer, each with its node's data as owner (the owner
    /// token for ours) and its creation zxid. Round trips: 1 (`sync` and `getChildren`, sent
    /// together), +1 for the holders' data (sent together).
    pub(super) async fn rw_holders(self: &Arc<Self>, name: &LockName) -> Result<Vec<LockState>> {
        let parent = object_path(self.config.root(), Primitive::RwLock, name);
        self.bounded(async {
            let conn = self.conn().await?;
            let Some(children) = self.list_children_synced(&conn, &parent).await? else {
                return Ok(Vec::new());
            };
            let contenders = queue(children);
            let holding: Vec<String> = match contenders.first() {
                Some(first) if is_write(first) => vec![first.clone()],
                _ => contenders.into_iter().take_while(|c| !is_write(c)).collect(),
            };
            let reads: Vec<_> = holding
                .iter()
                .map(|c| conn.client.get_data(&format!("{parent}/{c}")))
                .collect();
            let mut holders = Vec::new();
            for (child, read) in holding.iter().zip(join_all(reads).await) {
                let (data, stat) = match read {
                    Ok(read) => read,
                    Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(map_err(e)),
                };
                let kind = if is_write(child) {
                    LockKind::Write
                } else {
                    LockKind::Read
                };
                holders.push(
                    LockState::held(
                        String::from_utf8_lossy(&data).into_owned(),
                        u64::try_from(stat.czxid).ok().map(FencingToken::new),
                        None,
                    )
                    .with_kind(kind),
                );
            }
            Ok(holders)
        })
        .await
    }
}
