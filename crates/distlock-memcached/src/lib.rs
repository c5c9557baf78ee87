//! memcached backend of distlock: a lock is one item created with `add` and an expiry,
//! released and renewed by single CAS-guarded meta commands, with best-effort fencing tokens.
//!
//! - [`MemcachedLock`] (built from a [`MemcachedConfig`], URL `memcache://host:port`, several
//!   hosts separated by commas) implements [`distlock_core::DistributedLock`]; business code
//!   uses it through [`distlock_core::LockClient`].
//! - Release, extend and a failed attempt are one round trip each; a winning acquisition is
//!   two (the second records the fencing token in the lock item). The watchdog's renewals
//!   are pipelined, spread over the pool's connections: one round trip however many locks
//!   are held. Waiters poll (memcached has no
//!   notifications), waking at the holder's expiry; a release by a client of the same
//!   process wakes one of its waiters at once (`LockClient` does it, by the store's name:
//!   [`distlock_core::LocalWaiters`]).
//! - Semaphores and read-write locks ([`distlock_core::LockClient::semaphore`],
//!   [`distlock_core::LockClient::rw_lock`]) keep each object in one item, changed by a
//!   read and a CAS-guarded rewrite (2 round trips): exact permit counts (a hold may take
//!   several), writer preference, upgradeable reads that become the write lock in one
//!   rewrite, holds ended by the server's clock; see "Semaphores and read-write locks" on
//!   [`MemcachedLock`].
//! - A mutex holder can leave a note beside its hold ([`distlock_core::DistributedLock::set_note`],
//!   at most [`MAX_NOTE_BYTES`]), which is what leader election
//!   ([`distlock_core::LockClient::election`]) publishes: an item of its own tagged with the
//!   hold, shown only while that hold lives (2 round trips to set, inspect still 1); see
//!   "Notes and leader election" on [`MemcachedLock`].
//! - **Read the guarantees on [`MemcachedLock`] before using it**: a memcached restart, or an
//!   eviction under memory pressure, silently frees locks. A held guard notices at its next
//!   renewal and fires its lost-lock signal, and no stale holder can ever release or extend
//!   a newer holder's lock, but between the loss and that renewal two holders can overlap.
//!   A server process stopped for seconds (SIGSTOP, a paused VM) can, rarely, end a lock
//!   early: see "A stopped server" on [`MemcachedLock`]. Fencing tokens are [`Fencing::BestEffort`](distlock_core::Fencing::BestEffort). Use a
//!   dedicated instance started with `-M -o no_slab_reassign`, and delay restarts by the
//!   longest TTL. A server started with `-C` (CAS disabled), memcached before 1.6.13 (its
//!   `md ... C<cas>` does not honour the CAS), a server that is not memcached, and an address
//!   whose connections reach several processes (a load balancer) are refused with
//!   [`distlock_core::Error::InvalidConfig`].
//!
//! The client speaks the protocol itself (a few hundred lines over tokio TCP) rather than
//! through the `memcache` crate, to bind every CAS-guarded command to the server process
//! that issued the CAS (memcached restarts its CAS counter at 1; each process is identified
//! by a random nonce item), and to use the classic
//! `add`/`cas` commands where memcached 1.6's meta `ms` would delete a holder's item on a
//! full server; see [`MemcachedLock`].
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockClient};
//! use distlock_memcached::MemcachedConfig;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
//! let lock = MemcachedConfig::from_url("memcache://127.0.0.1:11211")?
//!     .with_namespace("billing")?
//!     .with_operation_timeout(Duration::from_millis(500))
//!     .build()?;
//! let client = LockClient::new(lock);
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(5));
//! let guard = client.acquire_with("ledger", &opts).await?;
//! println!("fencing token {:?} (best effort)", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod doctor;
mod exchange;
mod expiry;
mod holders;
mod holders_item;
mod item_rewrite;
mod keys;
mod lock;
mod mutex;
mod note;
mod pool;
mod renewal;
mod server_version;
mod stopped_server;
mod wire;

pub use config::{
    MemcachedConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_NAMESPACE,
    DEFAULT_OPERATION_TIMEOUT, DEFAULT_PORT, URL_ENV,
};
pub use doctor::doctor;
pub use expiry::{MAX_TTL, MIN_TTL};
pub use lock::MemcachedLock;
pub use note::MAX_NOTE_BYTES;
