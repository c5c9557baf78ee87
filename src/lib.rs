//! distlock: one distributed-lock API over many stores.
//!
//! Business code asks a [`LockClient`] for a lock by name; which store backs it is decided
//! where the client is built. This umbrella crate re-exports the contract from
//! [`distlock_core`] (also as [`core`]) and, per Cargo feature, the backends.
//!
//! | feature | store | type |
//! |---|---|---|
//! | (always) | in-process memory, single process only | [`MemoryLock`] |
//! | `sqlite` (default) | a SQLite file: the embedded default, locks between processes of one machine | [`sql::SqlLock`] |
//! | `redis` | Redis (one server), Redlock (several masters) | [`redis::RedisLock`], [`redis::Redlock`] |
//! | `mysql` | MySQL / MariaDB | [`sql::SqlLock`] |
//! | `postgres` | PostgreSQL: version rows, waiters woken by `LISTEN`/`NOTIFY` | [`sql::SqlLock`] |
//! | `memcached` | memcached: `add` with expiry, CAS-guarded; a restart or eviction frees locks | [`memcached::MemcachedLock`] |
//! | `zookeeper` | ZooKeeper 3.5+: FIFO waiters, session-bound locks | [`zookeeper::ZooKeeperLock`] |
//! | `etcd` (`etcd-tls` for `etcds://`) | etcd 3.4+: etcd's own lock recipe, FIFO waiters, lease-bound locks, create-revision fencing | [`etcd::EtcdLock`] |
//!
//! The `metrics` feature records lock metrics through the `metrics` facade (`metrics` module,
//! listed there and in the guide); the `blocking` feature adds a blocking client for
//! synchronous programs (`blocking` module).
//!
//! ```
//! use distlock::{AcquireOptions, LockClient, MemoryLock};
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock::Result<()> {
//! let client = LockClient::new(MemoryLock::new());
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(2));
//! let stock = client
//!     .with_lock("inventory:sku-42", &opts, |lock| async move {
//!         // Send lock.fencing_token() with every write this lock protects.
//!         assert!(lock.fencing_token().is_some());
//!         41
//!     })
//!     .await?;
//! assert_eq!(stock, 41);
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod doctor;

pub use connect::{connect, connect_from_env, default_url, open, url_from_env, ClientBuilder, URL_ENV};
#[doc(inline)]
pub use distlock_core::*;
pub use doctor::doctor;

/// The contract crate, for paths like `distlock::core::Lease`.
pub use distlock_core as core;

/// The SQL backend: MySQL/MariaDB, PostgreSQL and SQLite rows with an optimistic version column.
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite")))
)]
pub use distlock_sql as sql;

/// The memcached backend: `add` with expiry, CAS-guarded release and extend.
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub use distlock_memcached as memcached;

/// The Redis backend: `SET NX PX` with atomic scripts, release notifications, and Redlock.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use distlock_redis as redis;

/// The ZooKeeper backend: the standard lock recipe with FIFO waiters and session-bound locks.
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use distlock_zookeeper as zookeeper;

/// The etcd backend: etcd's own lock recipe (shared with `etcdctl lock`), FIFO waiters,
/// locks bound to one kept-alive lease per client, create-revision fencing.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use distlock_etcd as etcd;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guide's Rust examples (`docs/src`, an mdBook), compiled and run as doctests; each page
/// with a Rust block is listed here (`tests/guide.rs` checks that none is missing).
#[cfg(doctest)]
#[doc = include_str!("../docs/src/choosing.md")]
struct GuideChoosingDoctests;

#[cfg(doctest)]
#[doc = include_str!("../docs/src/coordination.md")]
struct GuideCoordinationDoctests;
