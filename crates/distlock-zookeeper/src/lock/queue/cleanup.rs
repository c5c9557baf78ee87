//! Deleting nodes we no longer want: an owner's nodes now (the owner-checked release of a
//! lease without a handle), or given nodes in the background with bounded retries (a dropped
//! wait, a release whose `delete` timed out). Never deletes a node without our owner token in
//! its name.

use std::time::Duration;

use distlock_core::{Lease, LockKind, Result};
use zookeeper_client as zk;

use crate::lock::layout::{
    self, object_path, protected_prefix, LEASE_NODE, LOCK_NODE, READ_NODE, UPGRADEABLE_NODE, WRITE_NODE,
};
use crate::lock::{map_err, timed_out, Conn, Inner, ZooKeeperLock};

/// The first pause between a background cleanup's attempts (doubled after each).
const CLEANUP_RETRY: Duration = Duration::from_millis(200);
/// The longest pause between a background cleanup's attempts.
const CLEANUP_MAX_PAUSE: Duration = Duration::from_secs(2);
/// How many times a background cleanup tries before it gives up (and logs it).
const CLEANUP_ATTEMPTS: u32 = 10;

impl ZooKeeperLock {
    /// The owner-checked release of a lease without a handle (the core's cleanup after an
    /// ambiguous attempt): per queue the hold may have a node in, `sync`, `getChildren`, and a
    /// `delete` of each node carrying the owner's protected prefix, bounded once by the
    /// operation timeout. The queues by the lease's kind: the mutex's; the read-write lock's
    /// (reader, upgradeable reader or writer prefix; for a write also the owner's upgradeable
    /// node if an upgrade marked it, for an upgradeable read that node only if not); a
    /// semaphore's `leases` (every lease of a weighted hold), then its `locks` (an acquisition
    /// cut short may have left a node in either). `true` if a node of the hold itself (not a
    /// `locks` node) was deleted. Round trips per queue: 2 (`sync`, `getChildren`), +1
    /// `delete` per node of the owner (+1 `exists` before it for a marked node).
    pub(in crate::lock) async fn release_by_owner(&self, lease: &Lease) -> Result<bool> {
        let inner = &self.inner;
        let root = inner.config.root();
        let owner = lease.owner();
        let kind = lease.kind();
        let object = object_path(root, kind.primitive(), lease.name());
        // (parent, prefix, whether a node there is the hold, which of its nodes)
        let queues: Vec<(String, String, bool, Owned)> = match kind {
            LockKind::Permit { .. } => vec![
                (
                    layout::semaphore_leases(&object),
                    protected_prefix(owner, LEASE_NODE),
                    true,
                    Owned::Any,
                ),
                (
                    layout::semaphore_locks(&object),
                    protected_prefix(owner, LOCK_NODE),
                    false,
                    Owned::Any,
                ),
            ],
            LockKind::Read => vec![(object, protected_prefix(owner, READ_NODE), true, Owned::Any)],
            // A write may be an upgrade: its hold is also the owner's upgradeable read, once
            // written (an upgrade not granted leaves that read hold alone).
            LockKind::Write => vec![
                (
                    object.clone(),
                    protected_prefix(owner, WRITE_NODE),
                    true,
                    Owned::Any,
                ),
                (
                    object,
                    protected_prefix(owner, UPGRADEABLE_NODE),
                    true,
                    Owned::Written,
                ),
            ],
            LockKind::UpgradeableRead => vec![(
                object,
                protected_prefix(owner, UPGRADEABLE_NODE),
                true,
                Owned::Unwritten,
            )],
            _ => vec![(object, protected_prefix(owner, LOCK_NODE), true, Owned::Any)],
        };
        inner
            .bounded(async {
                let conn = inner.conn().await?;
                let mut released = false;
                for (parent, prefix, hold, which) in &queues {
                    let deleted = inner.delete_owned(&conn, parent, prefix, *which).await?;
                    released |= deleted && *hold;
                }
                Ok(released)
            })
            .await
    }
}

impl Inner {
    /// Deletes every child of `parent` carrying the protected `prefix` (an owner's nodes):
    /// `sync` first (the reconnection may have reached a follower behind the leader), then
    /// `getChildren` and a `delete` per such node (of those `which` names: +1 `exists` per node
    /// for [`Owned::Written`]). `true` if one was deleted.
    async fn delete_owned(&self, conn: &Conn, parent: &str, prefix: &str, which: Owned) -> Result<bool> {
        match conn.client.sync(parent).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_err(e)),
        }
        let Some(children) = self.list_children(conn, parent).await? else {
            return Ok(false);
        };
        let mut deleted = false;
        for child in children.iter().filter(|c| c.starts_with(prefix)) {
            let path = format!("{parent}/{child}");
            let version = match which {
                Owned::Any => None,
                Owned::Unwritten => Some(0),
                Owned::Written => match conn.client.check_stat(&path).await.map_err(map_err)? {
                    Some(stat) if stat.version > 0 => Some(stat.version),
                    _ => continue,
                },
            };
            match conn.client.delete(&path, version).await {
                Ok(()) => {
                    self.unhold(&path);
                    deleted = true;
                }
                Err(zk::Error::NoNode) => self.unhold(&path),
                Err(zk::Error::BadVersion) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(deleted)
    }
}

/// Which of an owner's nodes a cleanup deletes, by whether their data was written since their
/// creation (an upgradeable read's is, once it became the write hold).
#[derive(Debug, Clone, Copy)]
enum Owned {
    Any,
    Unwritten,
    Written,
}

pub(in crate::lock) fn ignore_no_node(error: zk::Error) -> Result<()> {
    match error {
        zk::Error::NoNode => Ok(()),
        other => Err(map_err(other)),
    }
}

/// A node (or the nodes of a protected prefix) to delete in the background.
pub(in crate::lock) enum Cleanup {
    Path(String),
    Prefix { parent: String, prefix: String },
}

/// Deletes nodes we no longer want in the background, one after the other in the given order
/// (a node known only by its owner's prefix: `sync`, `getChildren`, a `delete` per node),
/// retrying transient failures with backoff (200 ms doubling to 2 s) for at most
/// [`CLEANUP_ATTEMPTS`] attempts each, and giving up on a node at once on a permanent error
/// such as `NoAuth`. A node given up on does not stop the ones after it (a semaphore's
/// `locks` node left behind would keep every later acquirer waiting); only the session's end
/// does (the server then deletes the nodes anyway). Every failure is logged. Does nothing
/// outside a tokio runtime.
pub(in crate::lock) fn spawn_cleanup(client: zk::Client, cleanups: Vec<Cleanup>, op_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        for cleanup in cleanups {
            if !clean_up(&client, cleanup, op_timeout).await {
                return;
            }
        }
    });
}

/// One cleanup, retried; `false` if the ones after it need not be tried (the session ended).
async fn clean_up(client: &zk::Client, cleanup: Cleanup, op_timeout: Duration) -> bool {
    let what = match &cleanup {
        Cleanup::Path(path) => path.clone(),
        Cleanup::Prefix { parent, prefix } => format!("{parent}/{prefix}*"),
    };
    let mut pause = CLEANUP_RETRY;
    for attempt in 1..=CLEANUP_ATTEMPTS {
        let attempt_result = async {
            match &cleanup {
                Cleanup::Path(path) => client.delete(path, None).await,
                Cleanup::Prefix { parent, prefix } => {
                    // The `create` may have been applied without our learning it, and the
                    // session may since have moved to a member that has not applied it yet:
                    // `sync` first, so the listing sees every write the leader committed.
                    match client.sync(parent).await {
                        Err(zk::Error::NoNode) => return Ok(()),
                        other => other?,
                    }
                    let children = match client.list_children(parent).await {
                        Err(zk::Error::NoNode) => return Ok(()),
                        other => other?,
                    };
                    for child in children.iter().filter(|c| c.starts_with(prefix.as_str())) {
                        match client.delete(&format!("{parent}/{child}"), None).await {
                            Ok(()) | Err(zk::Error::NoNode) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(())
                }
            }
        };
        let error = match tokio::time::timeout(op_timeout, attempt_result).await {
            Ok(Ok(()) | Err(zk::Error::NoNode)) => return true,
            Ok(Err(error)) => map_err(error),
            Err(_) => timed_out("ZooKeeper cleanup", op_timeout),
        };
        if client.state().is_terminated() {
            tracing::debug!(node = %what, "distlock: ZooKeeper session ended; the server deletes the node");
            return false;
        }
        if !error.is_transient() {
            tracing::warn!(node = %what, %error, "distlock: cannot delete an unwanted ZooKeeper lock node; it stays until the session ends");
            return true;
        }
        tracing::info!(node = %what, attempt, %error, "distlock: ZooKeeper cleanup failed; retrying");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(CLEANUP_MAX_PAUSE);
    }
    tracing::warn!(node = %what, attempts = CLEANUP_ATTEMPTS, "distlock: gave up deleting an unwanted ZooKeeper lock node; it stays until the session ends");
    !client.state().is_terminated()
}
