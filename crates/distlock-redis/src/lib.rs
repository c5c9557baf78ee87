//! Redis backend of distlock: `SET NX PX` with atomic Lua scripts, pub/sub wake-up of
//! waiters, fencing tokens from a per-lock counter, pipelined renewals, optional `WAIT` for
//! replicas, Redis Cluster, and [`Redlock`] over N independent masters.
//!
//! - [`RedisLock`] (built from a [`RedisConfig`]) is one server. Every operation is one round
//!   trip; the key layout is that of other `SET NX PX` locks (redis-py, redsync), so they
//!   exclude each other. Fencing tokens are [`Fencing::BestEffort`](distlock_core::Fencing):
//!   they go back if the server loses its last writes, which a crash does under Redis's
//!   default persistence too (RDB snapshots, AOF `everysec`); only AOF `appendfsync always`
//!   (and no eviction, no failover) makes them monotonic. `build` warns about (or, if
//!   configured, refuses) a `maxmemory-policy` that can evict lock keys. It also offers
//!   semaphores and read-write locks (`LockClient::semaphore`, `LockClient::rw_lock`), with
//!   holds of several permits (`Semaphore::acquire_many`) and upgradeable reads
//!   (`RwLock::upgradeable_read`), one script per operation as for the mutex. Its docs give the key layout, round trips,
//!   fencing and eviction details.
//! - The same [`RedisLock`] on a **Redis Cluster**, from `redis+cluster://h1:p1,h2:p2` (seed
//!   nodes; `rediss+cluster://` with TLS): the `redis` crate's cluster client routes each
//!   script by its slot and follows `MOVED`/`ASK`; every key of one lock, semaphore or
//!   read-write lock shares one slot, so the capabilities are those of one server. Releases
//!   wake waiters through sharded pub/sub (`SPUBLISH`/`SSUBSCRIBE`, Redis 7.0+), and
//!   `extend_many` sends one pipeline per master. **A failover can lose locks**: replication
//!   is asynchronous, so a lock acquired on a master that dies before replicating is gone
//!   once its replica is promoted (another client may acquire it; the holder's lost signal
//!   fires at its next renewal). Measuring how often is the torture harness's job.
//! - The same [`RedisLock`] on the primary of a **Redis Sentinel** set, from
//!   `redis+sentinel://s1:p1,s2:p2,s3:p3/<master-name>[?db=N&wait_for_replicas=N]`: the
//!   client asks the Sentinels for the primary (and checks its `ROLE`), and asks again when
//!   a connection to it breaks, times out or meets a replica (`READONLY`), or the Sentinels
//!   announce a switch (`+switch-master`), so after a failover it reaches the promoted
//!   replica. As for one server with replicas, **a failover
//!   loses locks the promoted replica had not received**; with `wait_for_replicas` every
//!   acquisition and renewal waits for the replicas ([`RedisConfig::with_wait_for_replicas`]),
//!   so a lock whose holder still says held was on the replica.
//! - [`Redlock`] (built from a [`RedlockConfig`]) is the majority algorithm over 3 or 5
//!   masters, without fencing tokens (its docs say why; its capabilities say
//!   `Fencing::None`). A single-instance client on one of its masters does **not** exclude a
//!   Redlock holder. Masters that restarted are kept out of majorities for a quarantine. It
//!   offers no semaphores (majorities do not bound a count) and no read-write locks.
//!
//! Every call is bounded by a timeout and maps connection failures and timeouts to
//! [`Error::Unavailable`](distlock_core::Error::Unavailable), everything else to
//! [`Error::Backend`](distlock_core::Error::Backend).
//!
//! # Ambiguous errors
//!
//! An operation that ends in one of these errors **may have been applied** by the server:
//!
//! - [`Error::Unavailable`](distlock_core::Error::Unavailable) "did not answer within" (the
//!   operation or node timeout passed): the script may still be queued on the socket or run
//!   later. An acquire may then set a lock nobody owns; `LockClient` releases it in the
//!   background by its owner token, which `release` needs alone (no fencing token, no handle).
//! - `Unavailable` for a connection that broke after the request was written (reset, closed,
//!   broken pipe, and a second such failure: the first is retried once on a fresh
//!   connection, see below), and for `LOADING`, `TRYAGAIN`, `MASTERDOWN`, `READONLY`,
//!   `CLUSTERDOWN` replies (not applied: the script did not run, but the caller cannot tell
//!   them apart from the others by variant).
//! - With [`RedisConfig::with_wait_for_replicas`]: "fewer than N replicas acknowledged the
//!   lock" (the lock was set on the master and released again; a failed release is left to
//!   the TTL), and "... acknowledged the renewal" (the master extended the TTL; a replica
//!   promoted now may hold the old one).
//! - For [`Redlock`]: "only k of N masters answered" (some masters may hold the key; the
//!   failed attempt already released what it could, the rest expires with the TTL).
//!
//! [`Error::Backend`](distlock_core::Error::Backend) errors are ambiguous too
//! ([`Error::is_ambiguous`](distlock_core::Error::is_ambiguous)): many mean the script did not
//! run (`NOAUTH`, `OOM` at `maxmemory`), but a reply not understood, a grant without a fencing
//! token (given back at once) or a script error after a first write may follow a write
//! (Redis does not roll a script back), so `LockClient` cleans up after them by owner token,
//! as after `Unavailable`.
//!
//! A request that fails because its connection was found broken is sent once more on a fresh
//! connection within the same timeout. Every request is safe to send twice: the acquire
//! script treats a key already holding the attempt's own (unique) owner token as acquired,
//! extending is idempotent, and a release sent twice frees the lock once. The second run finds
//! the hold gone (or taken by the waiter the first run woke), so a release sent again that
//! finds it no longer ours reports an ambiguous
//! [`Error::Unavailable`](distlock_core::Error::Unavailable) while the lease is still valid
//! by the local clock, not `false` (`with_lock` then returns the work's output; after the
//! local deadline it is `false`). On a cluster, the cluster client also sends a request again
//! after a dropped connection, unseen by this crate: there a release that deletes its hold
//! also writes a release marker of its request, for a few operation timeouts, and a second
//! run of that request that finds the hold gone reports `true` (see [`RedisLock`]'s cluster
//! notes). A connection whose
//! request timed out is replaced (behind a silent partition it may never answer again);
//! connections use `TCP_NODELAY` and TCP keepalive probes (30 s idle, then every 10 s).
//!
//! Requests share one multiplexed connection, whose replies are matched to requests in order.
//! A reply lost on the way (the request ran; its answer never came, as behind a proxy that
//! drops replies) would hand every later request the reply of the one after it, and a
//! renewal of a lock held by someone else could read another renewal's "renewed". So every
//! script returns a per-request nonce beside its reply: a reply that is not the request's own
//! is refused as an ambiguous [`Error::Unavailable`](distlock_core::Error::Unavailable) (the
//! usual owner-checked cleanup follows) and the connection is replaced.
//!
//! The pub/sub connection that wakes waiters is re-established by itself after it breaks
//! (a `CLIENT KILL TYPE pubsub`, an idle timeout in a load balancer): every watched channel
//! is subscribed again and its waiters are woken once, as a release may have been missed.
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

mod acquire;
mod config;
mod doctor;
mod holds;
mod keys;
mod lock;
mod lua;
mod member;
mod node;
mod redlock;
mod release;
mod released;
mod replica_ack;
mod sentinel;
mod server_run;
mod slots;
mod subscriber;
mod waiters;

pub use config::{
    RedisConfig, RedlockConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_NODE_TIMEOUT, DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_RESTART_QUARANTINE,
};
pub use doctor::{doctor, doctor_redlock};
pub use lock::RedisLock;
pub use redlock::Redlock;
pub use sentinel::DEFAULT_REPLICA_TIMEOUT;
