//! The registry of held nodes: the lease built for a won node, the node's entry while it is
//! held, and the `exists` watch that reports it deleted behind our back (an operator, a buggy
//! client) to that lease's guard alone. Owns the `held` map of `Inner`; the session's end
//! clears the entries of its epoch (`session.rs`), a release removes one.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use distlock_core::{
    Error, FencingToken, Lease, LockKind, LockName, LossReason, OwnerToken, Result, SessionState,
};
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use super::queue::Node;
use super::{Conn, Inner, BACKEND};

/// The pause before a held node's watch is set again after a failed `exists`.
const WATCH_RETRY: Duration = Duration::from_millis(100);

/// A held node's entry: its session, and the signal its guard hears a loss on.
pub(super) struct Held {
    pub(super) epoch: u64,
    pub(super) lost: watch::Sender<Option<LossReason>>,
    /// Writes of the node's data we sent ourselves (a note) whose change event the watch has
    /// not seen yet: not worth a log line.
    own_writes: u32,
}

impl Inner {
    pub(super) fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Builds the lease of a won node (of `kind`: the mutex, a permit, a read or the write
    /// lock) and starts watching the node for deletion behind our back (in the background: no
    /// added latency).
    pub(super) fn hold(
        self: &Arc<Self>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
        node: Node,
        sent_at: Instant,
        kind: LockKind,
    ) -> Result<Lease> {
        self.hold_group(conn, name, owner, vec![node], sent_at, kind)
    }

    /// [`hold`](Self::hold) for a hold of several nodes won together (a weighted permit's
    /// leases, in queue order): the lease's handle names them all ([`handle_of`]), its fencing
    /// token is the first one's creation zxid, and the deletion of any of them is reported to
    /// its guard.
    pub(super) fn hold_group(
        self: &Arc<Self>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
        nodes: Vec<Node>,
        sent_at: Instant,
        kind: LockKind,
    ) -> Result<Lease> {
        let Some(node) = nodes.first().cloned() else {
            return Err(super::queue::vanished());
        };
        if !self.session.borrow().keeps(conn.epoch) {
            // Won on the server, but the session is already declared over here: its node is
            // left to the session's end (the drop of the entry deletes it if it still can).
            return Err(Error::unavailable(
                BACKEND,
                "the session ended (locally) while acquiring",
            ));
        }
        if conn.client.state() == zk::SessionState::SyncConnected {
            // The acquisition's requests, all sent after `sent_at`, were answered in this
            // session by a quorum member: a contact, like a heartbeat's. Without it a lock
            // taken right after a reconnection counted its session from the last heartbeat
            // before the outage, and was declared lost up to an outage early.
            self.contacted(conn.epoch, sent_at, conn.client.session_timeout());
        }
        let (lost, _) = watch::channel(None);
        self.held().insert(
            node.path.clone(),
            Held {
                epoch: conn.epoch,
                lost,
                own_writes: 0,
            },
        );
        for watched in &nodes {
            tokio::spawn(watch_held(
                Arc::downgrade(self),
                conn.client.clone(),
                Watched {
                    key: node.path.clone(),
                    path: watched.path.clone(),
                },
                conn.epoch,
                self.config.operation_timeout(),
            ));
        }
        let fencing = FencingToken::new(u64::try_from(node.czxid).unwrap_or_default());
        let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
        Ok(Lease::session_bound(name.clone(), owner, conn.epoch, sent_at)
            .with_kind(kind)
            .with_fencing(fencing)
            .with_handle(handle_of(&paths)))
    }

    /// Notes that we are about to write the data of the hold keyed `key` ourselves.
    pub(super) fn expect_own_write(&self, key: &str) {
        if let Some(held) = self.held().get_mut(key) {
            held.own_writes = held.own_writes.saturating_add(1);
        }
    }

    pub(super) fn unhold(&self, path: &str) {
        self.held().remove(path);
    }

    /// Our held node was deleted by someone else. The entry stays (marked) until the release,
    /// so a guard that subscribes late still hears of it.
    fn stolen(&self, path: &str, epoch: u64) {
        let held = self.held();
        let Some(entry) = held.get(path).filter(|h| h.epoch == epoch) else {
            return; // released by us, or of an ended session
        };
        entry
            .lost
            .send_if_modified(|lost| lost.replace(LossReason::NotOwned).is_none());
        drop(held);
        tracing::warn!(
            path,
            "distlock: a held ZooKeeper lock node was deleted behind our back"
        );
    }
}

/// The handle of a hold of `paths`: the one path, or for a hold of several nodes their paths
/// joined by newlines (a character no ZooKeeper path may contain). The first path is the
/// hold's key in the registry.
pub(super) fn handle_of(paths: &[&str]) -> String {
    paths.join("\n")
}

/// The node paths of a hold, from its lease's handle (see [`handle_of`]); the first is its key.
pub(super) fn handle_paths(handle: &str) -> Vec<&str> {
    handle.split('\n').collect()
}

/// A node watched for a hold: the hold's registry key (its first node) and the node.
struct Watched {
    key: String,
    path: String,
}

/// Watches one held node; reports it stolen if it is deleted while still registered. A data
/// change (Curator's revoker writes `__REVOKE__` into the holder's node) fires the one-shot
/// watch too: it is set again, so a later deletion is still seen. Holds the client only for
/// the `exists` round trips, so it never keeps a session open.
async fn watch_held(
    inner: Weak<Inner>,
    client: zk::Client,
    watched: Watched,
    epoch: u64,
    op_timeout: Duration,
) {
    let Watched { key, path } = watched;
    let mut client = Some(client);
    loop {
        let Some(watching) = client.take().or_else(|| {
            inner
                .upgrade()?
                .current()
                .filter(|conn| conn.epoch == epoch)
                .map(|conn| conn.client)
        }) else {
            return; // the session ended: the session follower reports it
        };
        let checked = tokio::time::timeout(op_timeout, watching.check_and_watch_stat(&path)).await;
        drop(watching);
        let watcher = match checked {
            Ok(Ok((Some(_), watcher))) => watcher,
            Ok(Ok((None, _))) => {
                if let Some(inner) = inner.upgrade() {
                    inner.stolen(&key, epoch);
                }
                return;
            }
            // A disconnection: set the watch again once the same session is connected again;
            // if the session ends instead, the session follower reports it.
            _ => {
                let Some(strong) = inner.upgrade() else {
                    return;
                };
                if strong.held().get(&key).is_none_or(|h| h.epoch != epoch) {
                    return; // released meanwhile
                }
                let mut session = strong.session.subscribe();
                drop(strong);
                let connected = session
                    .wait_for(|s| s.epoch != epoch || s.state != SessionState::Suspended)
                    .await
                    .map(|s| s.epoch == epoch && s.state == SessionState::Connected);
                if !matches!(connected, Ok(true)) {
                    return;
                }
                tokio::time::sleep(WATCH_RETRY).await;
                continue;
            }
        };
        let event = watcher.changed().await;
        match event.event_type {
            zk::EventType::NodeDeleted => {
                if let Some(inner) = inner.upgrade() {
                    inner.stolen(&key, epoch);
                }
                return;
            }
            zk::EventType::NodeDataChanged | zk::EventType::NodeCreated => {
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let own = match inner.held().get_mut(&key) {
                    Some(held) if held.epoch == epoch => {
                        let own = held.own_writes > 0;
                        held.own_writes = held.own_writes.saturating_sub(1);
                        own
                    }
                    _ => return, // released meanwhile
                };
                if own {
                    continue;
                }
                tracing::info!(
                    path,
                    "distlock: a held ZooKeeper lock node's data changed; still watching it"
                );
            }
            _ => return,
        }
    }
}
