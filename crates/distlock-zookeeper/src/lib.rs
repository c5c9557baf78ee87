//! The ZooKeeper backend of distlock: the standard lock recipe (ephemeral-sequential children,
//! each waiter watching only its immediate predecessor), FIFO waiters, session-bound locks,
//! zxid fencing tokens, and node names that queue together with Apache Curator's
//! `InterProcessMutex` on the same path.
//!
//! [`ZooKeeperLock`] (from a [`ZooKeeperConfig`] or a
//! `zk://host1:2181,host2:2181,host3:2181/optional/chroot?session_timeout=10s` URL) implements
//! [`distlock_core::DistributedLock`]; business code uses it through
//! [`distlock_core::LockClient`].
//!
//! # Node layout
//!
//! ```text
//! <chroot><root>/<encoded name>/_c_<uuid>-lock-<10-digit sequence>
//! ```
//!
//! `<root>` defaults to `/distlock`; the name's parent is a container node the server deletes
//! once empty; each contender is an ephemeral-sequential child holding its owner token; the
//! lowest sequence holds the lock, and its creation zxid is the fencing token
//! ([`Fencing::Monotonic`](distlock_core::Fencing::Monotonic): zxids grow over the ensemble's
//! whole history, also when the parent is deleted and re-created).
//! [`ZooKeeperLock::lock_path`] gives the parent path for Curator (`InterProcessMutex`) or
//! kazoo (`Lock`) services that must exclude, and be excluded by, this crate.
//!
//! # Sessions: suspended and lost
//!
//! A lock lives as long as the ZooKeeper session that took it; there is no TTL to renew.
//! - **Suspended**: the connection dropped but the session may still live on the ensemble.
//!   [`LockGuard::is_suspended`](distlock_core::LockGuard::is_suspended) is true; the lock
//!   may or may not still be ours, so stop starting work that needs it. Reconnecting to the
//!   same session within the session timeout makes it false again, and the lock was kept.
//! - **Lost**: the ensemble expired the session, or the client stayed disconnected for the
//!   whole negotiated session timeout (Curator's rule: by then the ensemble may have expired
//!   it and granted the lock to someone else). Every guard of that session fires its
//!   lost-lock signal with [`LossReason::SessionExpired`](distlock_core::LossReason); the next
//!   operation opens a new session. A held node deleted behind our back fires only its own
//!   guard's signal, with `NotOwned`.
//!
//! # Round trips
//!
//! Uncontended acquire: 2 (`create2`, `getChildren`); release: 1 (`delete`); a queued waiter:
//! 3 to get in line, then 1 `getChildren` per wake-up, and each release wakes exactly one
//! waiter. Each won lock also gets one background `exists` watch (for deletion behind our
//! back), off the latency path.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockClient};
//! use distlock_zookeeper::ZooKeeperLock;
//! use std::time::Duration;
//!
//! # #[tokio::main] async fn main() -> distlock_core::Result<()> {
//! let backend = ZooKeeperLock::connect_url("zk://zk1:2181,zk2:2181,zk3:2181/apps?session_timeout=10s").await?;
//! let client = LockClient::new(backend);
//! let opts = AcquireOptions::new().wait_for(Duration::from_secs(30));
//! let guard = client.acquire_with("nightly-report", &opts).await?;
//! // ... the work, sending guard.fencing_token() with each write; check guard.is_suspended() ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod lock;

pub use config::{ZooKeeperConfig, DEFAULT_OPERATION_TIMEOUT, DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT};
pub use lock::{ZooKeeperLock, ZooKeeperStats};
