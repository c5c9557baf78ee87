//! The read-write lock: Apache Curator's `InterProcessReadWriteLock` recipe and layout, so that
//! Curator clients and this crate share one lock on [`ZooKeeperLock::rw_lock_path`], and the
//! upgradeable read on the same queue (Curator has no such recipe).
//!
//! ```text
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__READ__<seq>   a reader; data = the owner token
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__WRIT__<seq>   a writer; data = the owner token
//! <root>/rw-lock:<encoded name>/_c_<uuid>-upgradeable-__READ__<seq>
//!                                                          an upgradeable reader; data = the
//!                                                          owner token, `upgraded:<writer>`
//!                                                          once upgraded
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
//! # Upgradeable reads
//!
//! - **The upgradeable reader** holds when no writer and no other upgradeable reader sorts
//!   before it, and watches the last of them. Plain readers do not look at it, so they share
//!   with it; a writer behind it waits for it (it is first only once the node is gone); a
//!   waiting writer before it keeps it out, as it keeps plain readers out. Its name ends in
//!   `__READ__` and the sequence, so Curator's readers and writers see a reader, sorted in
//!   its place.
//! - **The upgrade** (a write asked by the owner of the upgradeable read this client holds)
//!   creates a writer node `W` of that owner at the end of the queue. `W` waits only for the
//!   plain readers that hold (those before the first writer node): not for writers or
//!   upgradeable readers queued after the upgradeable node `U`, which all wait for `U`, nor
//!   for readers behind such a writer, which wait for it. Readers that come after `W` wait for
//!   it (it is a writer node), so no stream of readers starves the upgrade.
//! - **Granted** once no plain reader holds, in one `multi` (1 round trip): `U`'s data
//!   becomes `upgraded:<W>` at version 0 (so it was still the untouched read hold) and the
//!   lock's parent is written (see fencing). `U` stays: every writer and upgradeable reader
//!   queued after it keeps waiting for it, Curator's too, so no writer gets in between; `W`
//!   keeps readers out. The write lease stands for both nodes (its handle names `W` and `U`):
//!   renewal checks both, release deletes both in one `multi`, and the deletion of either
//!   behind our back is its loss. The old read lease renews no more (`U`'s data version is
//!   no longer 0) and its release deletes nothing (a delete at version 0). `inspect` shows an
//!   upgraded `U` as the owner's write hold.
//! - **Cleanup by owner** of a write deletes the owner's writer nodes and its upgradeable
//!   node only if upgraded; of an upgradeable read, only if not.
//!
//! # Fencing
//!
//! A hold's token is its node's creation zxid. A writer holds only once every node before it
//! is gone and every reader after it waits for it, so writers and the readers around them hold
//! in the order of their tokens; readers holding together are granted in the order of their
//! nodes' creation. An upgrade breaks that order on purpose: its write hold comes before the
//! writers (and the readers behind them) queued after `U`, whose nodes are older. So the
//! upgraded hold's token is the zxid of its granting `multi` (above every token so far), and
//! that `multi` writes the lock's parent: every listing that decides a hold reads the parent's
//! `mzxid` with the children (`getChildren2`, no added round trip), and a node created before
//! it takes a fresh token when it is granted (the zxid of another write of the parent, +1
//! round trip for that node only). Tokens thus grow in the order holds are granted. `inspect`
//! reports creation zxids (an upgraded hold: its upgrade's zxid).
//!
//! # Round trips
//!
//! The upgradeable read as a read (a single attempt: 1 when blocked, 3 when free; waiting: 2
//! when free, 3 to get in line and 1 per wake-up). An upgrade: a single attempt 1 when a plain
//! reader holds (nothing created), 4 when none does (`getChildren`, `create2`, `getChildren`,
//! the granting `multi`); waiting, 3 when granted at once (`create2`, `getChildren`, `multi`),
//! else 3 to get in line and 1 per wake-up, +1 for the `multi`. Release of the upgraded hold:
//! 1 (`multi`); renewal: 1 (both `exists` sent together). A hold overtaken by an upgrade: +1.
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

use super::layout::{object_path, owner_in, protected_prefix, READ_NODE, UPGRADEABLE_NODE, WRITE_NODE};
use super::queue::{is_upgradeable, is_write, queue, Line, Node, QueueEntry};
use super::{map_err, Conn, Inner, BACKEND};

/// What an upgradeable reader's node holds as data once its upgrade is granted; the write
/// node's name follows.
const UPGRADED_DATA: &str = "upgraded:";

fn token(zxid: i64) -> Option<FencingToken> {
    u64::try_from(zxid).ok().map(FencingToken::new)
}

impl Inner {
    /// Our place in the read-write lock `name`'s queue for `kind` (a read, the upgradeable read
    /// or the write), its line, and, for a write asked by the owner of the upgradeable read
    /// this client holds, that hold's node: the attempt is its upgrade.
    fn rw_entry(
        self: &Arc<Self>,
        conn: &super::Conn,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
    ) -> Result<(QueueEntry, Line, Option<Node>)> {
        let line = Line::of_rw(kind)
            .ok_or_else(|| Error::invalid_options(format!("{kind} is no side of a read-write lock")))?;
        let parent = object_path(self.config.root(), Primitive::RwLock, name);
        let upgrading = match line {
            Line::Write => self.held_upgradeable(&parent, owner, conn.epoch),
            _ => None,
        };
        let (line, node) = match (line, &upgrading) {
            (Line::Write, Some(_)) => (Line::Upgrade, WRITE_NODE),
            (Line::Read, _) => (Line::Read, READ_NODE),
            (Line::Upgradeable, _) => (Line::Upgradeable, UPGRADEABLE_NODE),
            (other, _) => (other, WRITE_NODE),
        };
        Ok((
            QueueEntry::at(self, conn, parent, protected_prefix(owner, node)),
            line,
            upgrading,
        ))
    }

    /// The node of `owner`'s upgradeable read of the read-write lock at `parent`, if this
    /// client holds one in the session `epoch` (no request: the registry of held nodes).
    fn held_upgradeable(&self, parent: &str, owner: OwnerToken, epoch: u64) -> Option<Node> {
        let prefix = format!("{parent}/{}", protected_prefix(owner, UPGRADEABLE_NODE));
        let held = self.held();
        let (path, _) = held
            .iter()
            .find(|(path, h)| h.epoch == epoch && path.starts_with(&prefix))?;
        Some(Node {
            path: path.clone(),
            child: path.rsplit('/').next().unwrap_or_default().to_owned(),
            czxid: 0,
        })
    }

    /// The lease of a won node. For an upgrade, the upgradeable read's node is turned into
    /// the write hold (`turn_into_write`) and the lease stands for both nodes. Otherwise a
    /// node created before an upgrade was granted on this lock may hold after the upgraded
    /// writer though its creation zxid is lower: it takes a fresh token (`fresh_token`), so
    /// tokens keep growing in the order holds are granted. No round trip in the usual case;
    /// 1 for an upgrade or an overtaken node.
    #[allow(clippy::too_many_arguments)]
    async fn grant_rw(
        self: &Arc<Self>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
        kind: LockKind,
        entry: &QueueEntry,
        mut node: Node,
        upgrading: Option<Node>,
        sent_at: Instant,
    ) -> Result<Lease> {
        match upgrading {
            Some(read) => {
                node.czxid = self
                    .turn_into_write(conn, name, &entry.parent, &read, &node)
                    .await?;
                let lease = self.hold_group(
                    conn,
                    name,
                    owner,
                    vec![node, read.clone()],
                    sent_at,
                    LockKind::Write,
                )?;
                // The read hold lives on inside the write hold: its own entry goes.
                self.unhold(&read.path);
                Ok(lease)
            }
            None => {
                if entry.parent_mzxid.is_none_or(|mzxid| mzxid > node.czxid) {
                    node.czxid = self.fresh_token(conn, &entry.parent).await?;
                }
                self.hold(conn, name, owner, node, sent_at, kind)
            }
        }
    }

    /// The upgrade's one store operation, a `multi` (1 round trip): the upgradeable read's
    /// node gets `upgraded:<write node>` as data, at version 0 (still the untouched read
    /// hold), and the lock's parent is written, so nodes created before it learn they were
    /// overtaken. Returns the transaction's zxid: the write hold's fencing token.
    async fn turn_into_write(
        &self,
        conn: &Conn,
        name: &LockName,
        parent: &str,
        read: &Node,
        write: &Node,
    ) -> Result<i64> {
        let marker = format!("{UPGRADED_DATA}{}", write.child);
        let mut multi = conn.client.new_multi_writer();
        multi
            .add_set_data(&read.path, marker.as_bytes(), Some(0))
            .map_err(map_err)?;
        multi.add_set_data(parent, &[], None).map_err(map_err)?;
        match multi.commit().await.map_err(zk::Error::from) {
            Ok(results) => match results.last() {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(stat.mzxid),
                _ => Err(Error::backend(BACKEND, "a multi of writes answered otherwise")),
            },
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Err(Error::LockLost {
                name: name.to_string(),
                reason: distlock_core::LossReason::NotOwned,
            }),
            Err(e) => Err(map_err(e)),
        }
    }

    /// A token above every one issued so far: the zxid of a write of the lock's parent (empty
    /// data, as Curator creates it), 1 round trip.
    async fn fresh_token(&self, conn: &Conn, parent: &str) -> Result<i64> {
        let stat = conn.client.set_data(parent, &[], None).await.map_err(map_err)?;
        Ok(stat.mzxid)
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
            let (mut entry, line, upgrading) = self.rw_entry(&conn, name, kind, owner)?;
            let owner_data = owner.to_string();
            match self
                .take_once(&conn, &mut entry, line, owner_data.as_bytes(), None)
                .await?
            {
                Some(node) => {
                    let lease = self
                        .grant_rw(&conn, name, owner, kind, &entry, node, upgrading, sent_at)
                        .await?;
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
        let (mut entry, line, upgrading) = self.rw_entry(&conn, name, kind, owner)?;
        let owner_data = owner.to_string();
        let created = self.bounded(entry.create(owner_data.as_bytes())).await?;
        let Some(node) = self
            .wait_in_line(&conn, &mut entry, &created, line, deadline)
            .await?
        else {
            return Ok(None);
        };
        let lease = self
            .bounded(self.grant_rw(&conn, name, owner, kind, &entry, node, upgrading, sent_at))
            .await?;
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
                let data = String::from_utf8_lossy(&data).into_owned();
                let holder = if is_write(child) {
                    LockState::held(data, token(stat.czxid), None).with_kind(LockKind::Write)
                } else if is_upgradeable(child) && stat.version > 0 {
                    // Upgraded: the write hold, its token the upgrade's zxid.
                    let owner = owner_in(child).unwrap_or(data);
                    LockState::held(owner, token(stat.mzxid), None).with_kind(LockKind::Write)
                } else if is_upgradeable(child) {
                    LockState::held(data, token(stat.czxid), None).with_kind(LockKind::UpgradeableRead)
                } else {
                    LockState::held(data, token(stat.czxid), None).with_kind(LockKind::Read)
                };
                holders.push(holder);
            }
            Ok(holders)
        })
        .await
    }
}
