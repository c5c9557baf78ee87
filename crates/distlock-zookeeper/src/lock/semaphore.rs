//! The semaphore: Apache Curator's `InterProcessSemaphoreV2` recipe and layout, so that Curator
//! clients and this crate share one semaphore on [`ZooKeeperLock::semaphore_path`].
//!
//! ```text
//! <root>/semaphore:<encoded name>/locks/_c_<uuid>-lock-<seq>     who may add a lease next (a mutex)
//! <root>/semaphore:<encoded name>/leases/_c_<uuid>-lease-<seq>   one per permit held or asked for;
//!                                                                data = "permits=<count>"
//! ```
//!
//! - **Acquire.** Take the `locks` mutex (FIFO, as the mutex), create our lease node, list the
//!   leases: if there are at most `permits`, we hold one and release the `locks` mutex; else
//!   wait on a children watch of `leases`, still holding the `locks` mutex (so later
//!   acquirers queue behind us in FIFO order), and count again on each change.
//! - **Exactness.** Every acquirer counts after its own node exists, and ZooKeeper applies
//!   creates in one order on every server: of any two live leases, the later one's listing
//!   shows the earlier one. So the admitted leases are never more than `permits`, even without
//!   the `locks` mutex (which is there for order and against two acquirers waiting on each
//!   other forever).
//! - **Permit count.** Each lease carries its count as data (Curator stores the client's
//!   address there, or what `setNodeData` gave it, and ignores it). After creating its lease,
//!   an acquirer reads every other lease's data: a count other than its own refuses with
//!   [`Error::PermitsMismatch`], its lease and `locks` node deleted first. Of two leases with
//!   different counts, the later one sees the earlier (as above), so they never both hold.
//!   Leases whose data is not a count (Curator's) are not checked.
//! - **Weighted holds.** A hold of `weight` permits is `weight` lease nodes of one owner,
//!   created together in one `multi` (all or none, one creation zxid), as Curator's
//!   `acquire(n)` takes `n` leases under the `locks` mutex. Every lease counts as one permit,
//!   so the count above is the sum of the weights; the hold is granted once all its leases
//!   fit. Release deletes them together (one `multi`), renewal checks them all (their
//!   `exists` sent together), the owner's cleanup deletes every lease of its protected prefix,
//!   and the deletion of any of them behind our back is the hold's loss. The lease's handle
//!   names every node (see `held.rs`). A heavy waiter keeps the `locks` mutex while it waits,
//!   so the line stays FIFO: lighter acquirers behind it wait too.
//! - **Fencing.** A permit's token is its (first) lease node's creation zxid. Leases are only created
//!   by the holder of the `locks` mutex, which releases it only once its lease holds (or is
//!   gone): leases are created in the order they are granted, so every new permit's token is
//!   above every earlier permit's (zxids grow over the ensemble's history).
//!
//! [`ZooKeeperLock::semaphore_path`]: crate::ZooKeeperLock::semaphore_path

use std::sync::atomic::Ordering;
use std::sync::Arc;

use distlock_core::{
    Error, FencingToken, Holder, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result,
    TryAcquire,
};
use futures::future::join_all;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::layout::{
    object_path, owner_in, protected_prefix, semaphore_leases, semaphore_locks, LEASE_NODE, LOCK_NODE,
};
use super::queue::{queue, sequence_of, sync_sent, vanished, Line, QueueEntry};
use super::{map_err, Conn, Inner};

/// What a lease node's data starts with; the permit count follows.
const PERMITS_DATA: &str = "permits=";

/// A lease node's data: `permits=<count>`.
fn lease_data(permits: u32) -> String {
    format!("{PERMITS_DATA}{permits}")
}

/// The permit count in a lease node's data, if it holds one (Curator's leases do not).
fn permits_in(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data)
        .ok()?
        .strip_prefix(PERMITS_DATA)?
        .parse()
        .ok()
}

/// The semaphore's two queues.
struct Paths {
    locks: String,
    leases: String,
}

impl Paths {
    fn of(inner: &Inner, name: &LockName) -> Self {
        let path = object_path(inner.config.root(), Primitive::Semaphore, name);
        Self {
            locks: semaphore_locks(&path),
            leases: semaphore_leases(&path),
        }
    }
}

/// How many leases a listing shows: every child, as Curator counts them, less the duplicates
/// of ours that `settle` deleted (`queue` is the listing's contenders after it).
fn lease_count(children: &[String], queue: &[String]) -> usize {
    children.iter().filter(|c| sequence_of(c).is_none()).count() + queue.len()
}

impl Inner {
    /// One attempt at `weight` permits, without waiting. Round trips: 1 (a `sync`, then
    /// `getChildren` of `locks` and of `leases`, sent together) when fewer than `weight` are
    /// free (+1 `getData` per lease, sent together, to check the count) or someone is at the
    /// head of its line; when there is room, +2 to take the `locks` mutex (`create2`,
    /// `getChildren`), +2 for our lease or leases (`create2`, or one `multi` of `weight`
    /// creates; `getChildren`), +1 to read the other leases' counts (none when we are alone),
    /// +1 `delete` of the `locks` node: 6 alone, 7 beside other holders, whatever the weight.
    pub(super) async fn try_permit(
        self: &Arc<Self>,
        name: &LockName,
        permits: u32,
        weight: u32,
        owner: OwnerToken,
    ) -> Result<TryAcquire> {
        let kind = LockKind::Permit { permits, weight };
        let count = usize::try_from(weight).unwrap_or(usize::MAX);
        let paths = Paths::of(self, name);
        let room = usize::try_from(permits).unwrap_or(usize::MAX);
        self.bounded(async {
            let sent_at = Instant::now();
            let conn = self.conn().await?;
            let (synced, locks_listed, leases_listed) = futures::join!(
                sync_sent(&conn, &paths.locks),
                self.list_children(&conn, &paths.locks),
                self.list_children(&conn, &paths.leases)
            );
            synced?;
            let (locks_listed, leases) = (locks_listed?, leases_listed?.unwrap_or_default());
            if leases.len().saturating_add(count) > room {
                // Full: nothing is created, but a count the holders disagree with is an error.
                self.check_permits(&conn, name, &paths.leases, &leases, None, permits)
                    .await?;
                return Ok(TryAcquire::Held(Holder::unknown()));
            }
            let mut locks = QueueEntry::at(
                self,
                &conn,
                paths.locks.clone(),
                protected_prefix(owner, LOCK_NODE),
            );
            let owner_data = owner.to_string();
            let taken = self
                .take_once(
                    &conn,
                    &mut locks,
                    Line::Mutex,
                    owner_data.as_bytes(),
                    Some(locks_listed),
                )
                .await?;
            if taken.is_none() {
                return Ok(TryAcquire::Held(Holder::unknown()));
            }
            // We hold the semaphore's mutex: nobody else adds a lease until we let go of it.
            let mut entry = QueueEntry::at(
                self,
                &conn,
                paths.leases.clone(),
                protected_prefix(owner, LEASE_NODE),
            )
            .chain(locks);
            let created = entry.create_group(lease_data(permits).as_bytes(), count).await?;
            let children = self
                .list_children(&conn, &paths.leases)
                .await?
                .unwrap_or_default();
            let (nodes, contenders) = self
                .settle_group(
                    &conn,
                    &paths.leases,
                    &entry.prefix,
                    queue(children.clone()),
                    &created,
                    count,
                )
                .await?;
            if nodes.len() < count {
                return Err(vanished());
            }
            entry.set_nodes(&nodes);
            let checked = self
                .check_permits(
                    &conn,
                    name,
                    &paths.leases,
                    &contenders,
                    Some(&entry.prefix),
                    permits,
                )
                .await;
            if let Err(error @ Error::PermitsMismatch { .. }) = checked {
                entry.leave_all().await?;
                return Err(error);
            }
            checked?;
            if lease_count(&children, &contenders) <= room {
                entry.leave_chained().await;
                let lease = self.hold_group(&conn, name, owner, nodes, sent_at, kind)?;
                entry.disarm();
                return Ok(TryAcquire::Acquired(lease));
            }
            entry.leave_all().await?;
            Ok(TryAcquire::Held(Holder::unknown()))
        })
        .await
    }

    /// Waits for `weight` permits in the semaphore's line: the `locks` mutex first (FIFO, as
    /// the mutex's queue), then our lease or leases, counted on each change of `leases` (a
    /// children watch) while we keep the `locks` mutex. Round trips when there is room: 2 for
    /// the `locks` mutex (`create2`, `getChildren`), 2 for the lease or leases (`create2` or
    /// one `multi`, `getChildren` with a watch), +1 to read the other leases' counts (none when
    /// alone), +1 `delete` of the `locks` node; a full semaphore adds 1 `getChildren` per
    /// change of `leases`, and a busy
    /// `locks` mutex what its queue costs (1 `exists`, then 1 `getChildren` per wake-up).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, our lease node is deleted in the background and
    /// then our `locks` node (found by the owner's protected prefix if the drop came while a
    /// `create` was in flight); a permit won but not yet returned cannot exist, since winning
    /// and returning happen without an await between.
    pub(super) async fn queue_for_permit(
        self: &Arc<Self>,
        name: &LockName,
        permits: u32,
        weight: u32,
        owner: OwnerToken,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let kind = LockKind::Permit { permits, weight };
        let count = usize::try_from(weight).unwrap_or(usize::MAX);
        let paths = Paths::of(self, name);
        let room = usize::try_from(permits).unwrap_or(usize::MAX);
        let sent_at = Instant::now();
        let conn = self.bounded(self.conn()).await?;
        let mut locks = QueueEntry::at(
            self,
            &conn,
            paths.locks.clone(),
            protected_prefix(owner, LOCK_NODE),
        );
        let owner_data = owner.to_string();
        let in_line = self.bounded(locks.create(owner_data.as_bytes())).await?;
        if self
            .wait_in_line(&conn, &mut locks, &in_line, Line::Mutex, deadline)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        let mut entry = QueueEntry::at(
            self,
            &conn,
            paths.leases.clone(),
            protected_prefix(owner, LEASE_NODE),
        )
        .chain(locks);
        let created = self
            .bounded(entry.create_group(lease_data(permits).as_bytes(), count))
            .await?;
        let mut session = self.session.subscribe();
        let mut checked = false;
        loop {
            let (children, contenders, nodes, watcher) = self
                .bounded(async {
                    self.listings.fetch_add(1, Ordering::Relaxed);
                    let (children, watcher) = conn
                        .client
                        .list_and_watch_children(&paths.leases)
                        .await
                        .map_err(|e| match e {
                            zk::Error::NoNode => vanished(),
                            other => map_err(other),
                        })?;
                    let (ours, contenders) = self
                        .settle_group(
                            &conn,
                            &paths.leases,
                            &entry.prefix,
                            queue(children.clone()),
                            &created,
                            count,
                        )
                        .await?;
                    if ours.len() < count {
                        return Err(vanished());
                    }
                    Ok((children, contenders, ours, watcher))
                })
                .await?;
            entry.set_nodes(&nodes);
            if !checked {
                let check = self.bounded(self.check_permits(
                    &conn,
                    name,
                    &paths.leases,
                    &contenders,
                    Some(&entry.prefix),
                    permits,
                ));
                if let Err(error @ Error::PermitsMismatch { .. }) = check.await {
                    self.bounded(entry.leave_all()).await?;
                    return Err(error);
                }
                checked = true;
            }
            if lease_count(&children, &contenders) <= room {
                // The `locks` mutex goes to the next in line; on a failure or a timeout, in the
                // background (the lease holds either way).
                let _ = self
                    .bounded(async {
                        entry.leave_chained().await;
                        Ok(())
                    })
                    .await;
                let lease = self.hold_group(&conn, name, owner, nodes, sent_at, kind)?;
                entry.disarm();
                return Ok(Some(lease));
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                self.bounded(entry.leave_all()).await?;
                return Ok(None);
            }
            if !self.await_change(watcher, &mut session, &conn, deadline).await? {
                self.bounded(entry.leave_all()).await?;
                return Ok(None);
            }
        }
    }

    /// Reads the data of every lease in `children` but ours (named with our protected prefix
    /// `ours`; all requests sent together: 1 round trip, none when there is no other lease)
    /// and refuses with [`Error::PermitsMismatch`] if one carries a count other than `asked`.
    async fn check_permits(
        &self,
        conn: &Conn,
        name: &LockName,
        leases: &str,
        children: &[String],
        ours: Option<&str>,
        asked: u32,
    ) -> Result<()> {
        let reads: Vec<_> = children
            .iter()
            .filter(|c| ours.is_none_or(|prefix| !c.starts_with(prefix)))
            .map(|c| conn.client.get_data(&format!("{leases}/{c}")))
            .collect();
        for read in join_all(reads).await {
            let data = match read {
                Ok((data, _)) => data,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(map_err(e)),
            };
            if let Some(stored) = permits_in(&data).filter(|stored| *stored != asked) {
                return Err(Error::PermitsMismatch {
                    name: name.to_string(),
                    stored,
                    asked,
                });
            }
        }
        Ok(())
    }

    /// The holders of the semaphore `name`: its oldest holds (the leases of one owner are one
    /// hold, its weight their number), as many as fit in the permit count the leases carry (a
    /// hold beyond it is an acquirer still waiting), each with its owner token (from the
    /// protected name; the node's data for a foreign lease) and its first lease's creation
    /// zxid.
    /// Round trips: 1 (`sync` and `getChildren`, sent together), +1 for the leases' data
    /// (sent together).
    pub(super) async fn permit_holders(self: &Arc<Self>, name: &LockName) -> Result<Vec<LockState>> {
        let paths = Paths::of(self, name);
        self.bounded(async {
            let conn = self.conn().await?;
            let Some(children) = self.list_children_synced(&conn, &paths.leases).await? else {
                return Ok(Vec::new());
            };
            let leases = queue(children);
            let reads: Vec<_> = leases
                .iter()
                .map(|c| conn.client.get_data(&format!("{}/{c}", paths.leases)))
                .collect();
            let mut read = Vec::new();
            for (child, data) in leases.into_iter().zip(join_all(reads).await) {
                match data {
                    Ok((data, stat)) => read.push((child, data, stat)),
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(map_err(e)),
                }
            }
            let agreed = read.iter().find_map(|(_, data, _)| permits_in(data));
            let room = agreed.unwrap_or(u32::try_from(read.len()).unwrap_or(u32::MAX));
            // One hold per owner (a weighted hold is several leases of one owner's protected name), in queue
            // order, as long as their weights fit: a hold beyond is an acquirer still waiting.
            let mut holds: Vec<(String, u32, u32, Option<FencingToken>)> = Vec::new();
            for (child, data, stat) in read {
                let protected = owner_in(&child);
                let permits = permits_in(&data).or(agreed).unwrap_or(0);
                match holds.iter_mut().find(|(o, ..)| protected.as_ref() == Some(o)) {
                    Some((_, _, weight, _)) => *weight += 1,
                    None => holds.push((
                        protected.unwrap_or_else(|| String::from_utf8_lossy(&data).into_owned()),
                        permits,
                        1,
                        u64::try_from(stat.czxid).ok().map(FencingToken::new),
                    )),
                }
            }
            let mut taken = 0u32;
            Ok(holds
                .into_iter()
                .take_while(|(_, _, weight, _)| {
                    taken = taken.saturating_add(*weight);
                    taken <= room
                })
                .map(|(owner, permits, weight, fencing)| {
                    LockState::held(owner, fencing, None).with_kind(LockKind::Permit { permits, weight })
                })
                .collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_data_carries_the_count_and_foreign_data_is_no_count() {
        assert_eq!(lease_data(3), "permits=3");
        assert_eq!(permits_in(b"permits=3"), Some(3));
        assert_eq!(permits_in(b"127.0.1.1"), None);
        assert_eq!(permits_in(b"permits=-1"), None);
        assert_eq!(permits_in(&[0xff, 0xfe]), None);
    }
}
