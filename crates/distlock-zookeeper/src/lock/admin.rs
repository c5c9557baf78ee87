//! What operators and tests read about a [`ZooKeeperLock`]: the paths its objects live at (to
//! share them with Curator or kazoo clients), its round-trip counters, and the facts of its
//! current session. Reads local state only; sends nothing to the server.

use std::sync::atomic::Ordering;
use std::time::Duration;

use distlock_core::{LockName, Primitive};

use super::layout::{lock_path, object_path};
use super::ZooKeeperLock;

/// Counters of the round trips that matter for the herd effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZooKeeperStats {
    /// `getChildren` calls made by acquisitions.
    pub children_listings: u64,
    /// Predecessor watches that fired (each wakes exactly one waiter).
    pub watch_events: u64,
}

impl ZooKeeperLock {
    /// The znode under which `name`'s contenders queue (inside the chroot). A Curator
    /// `InterProcessMutex` or kazoo `Lock` on this path excludes us and is excluded by us.
    pub fn lock_path(&self, name: &LockName) -> String {
        lock_path(self.inner.config.root(), name)
    }

    /// The znode of the semaphore `name` (inside the chroot): a Curator
    /// `InterProcessSemaphoreV2` on this path, with the same number of leases, shares the
    /// semaphore with us (its `locks` and `leases` children). Apart from the mutex and the
    /// read-write lock of the same name.
    pub fn semaphore_path(&self, name: &LockName) -> String {
        object_path(self.inner.config.root(), Primitive::Semaphore, name)
    }

    /// The znode of the read-write lock `name` (inside the chroot): a Curator
    /// `InterProcessReadWriteLock` on this path shares the lock with us. Apart from the mutex
    /// and the semaphore of the same name.
    pub fn rw_lock_path(&self, name: &LockName) -> String {
        object_path(self.inner.config.root(), Primitive::RwLock, name)
    }

    /// The acquisition counters of this client (all its clones).
    pub fn stats(&self) -> ZooKeeperStats {
        ZooKeeperStats {
            children_listings: self.inner.listings.load(Ordering::Relaxed),
            watch_events: self.inner.watch_events.load(Ordering::Relaxed),
        }
    }

    /// The session timeout the server negotiated for the current session, if one is open: the
    /// one asked for ([`ZooKeeperConfig::session_timeout`](crate::ZooKeeperConfig::session_timeout)) brought into the server's
    /// `minSessionTimeout..=maxSessionTimeout`. The heartbeat, the suspension and the local
    /// deadline of the session all follow this one.
    pub fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.inner.current().map(|conn| conn.client.session_timeout())
    }

    /// The ZooKeeper session id of the current session, if one is open (for logs).
    pub fn session_id(&self) -> Option<i64> {
        self.inner.current().map(|conn| conn.client.session_id().0)
    }
}
