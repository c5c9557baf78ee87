//! Redis backend of distlock: `SET NX PX` with atomic Lua scripts, pub/sub wake-up of
//! waiters, fencing tokens from a per-lock counter, pipelined renewals, optional `WAIT` for
//! replicas, and [`Redlock`] over N independent masters.
//!
//! - [`RedisLock`] (built from a [`RedisConfig`]) is one server. Every operation is one round
//!   trip; the key layout is that of other `SET NX PX` locks (redis-py, redsync), so they
//!   exclude each other. Fencing tokens are [`Fencing::BestEffort`](distlock_core::Fencing):
//!   they go back if the server loses its data. Its docs give the key layout and round trips.
//! - [`Redlock`] (built from a [`RedlockConfig`]) is the majority algorithm over 3 or 5
//!   masters, without fencing tokens (its docs say why).
//!
//! Every call is bounded by a timeout and maps connection failures and timeouts to
//! [`Error::Unavailable`](distlock_core::Error::Unavailable), everything else to
//! [`Error::Backend`](distlock_core::Error::Backend).
//!
//! Features: `tls-rustls` enables `rediss://` over rustls (ring provider, webpki roots).
//!
//! Both implement [`distlock_core::DistributedLock`]; business code uses them through
//! [`distlock_core::LockClient`].
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockClient};
//! use distlock_redis::RedisConfig;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
//! let lock = RedisConfig::from_url("redis://127.0.0.1:6379/0")?
//!     .with_prefix("locks:")
//!     .with_operation_timeout(Duration::from_millis(500))
//!     .build()
//!     .await?;
//! let client = LockClient::new(lock);
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(5));
//! let guard = client.acquire_with("ledger", &opts).await?;
//! println!("fencing token {:?}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod keys;
mod lock;
mod node;
mod redlock;
mod scripts;
mod subscriber;

pub use config::{
    RedisConfig, RedlockConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_NODE_TIMEOUT, DEFAULT_OPERATION_TIMEOUT,
};
pub use lock::RedisLock;
pub use redlock::Redlock;
