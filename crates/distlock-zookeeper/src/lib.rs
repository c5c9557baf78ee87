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
//! <chroot><root>/<encoded name>/_c_<owner token>-lock-<10-digit sequence>
//! ```
//!
//! `<root>` defaults to `/distlock`; the name's parent is a container node the server deletes
//! once empty; each contender is an ephemeral-sequential child named after its owner token
//! (a UUID, so this is Curator's protected-mode name) and holding it as data; the lowest
//! sequence holds the lock, and its creation zxid is the fencing token
//! ([`Fencing::Monotonic`](distlock_core::Fencing::Monotonic): zxids grow over the ensemble's
//! whole history, also when the parent is deleted and re-created). Sequences are the server's
//! signed 32-bit counter and are ordered with wrapping arithmetic, so the queue stays in
//! arrival order when the counter wraps to -2147483648.
//!
//! # Sharing locks with Curator and kazoo: use `lock_path`, in the same chroot
//!
//! Curator's `InterProcessMutex` and kazoo's `Lock` have **no default root**: they exclude
//! this crate only when given exactly [`ZooKeeperLock::lock_path`] for the name, on a client
//! with the same chroot. The root (`/distlock` unless [`ZooKeeperConfig::with_root`] says
//! otherwise) is part of that path, and the name is percent-encoded in it: the lock named
//! `orders/42` lives at `/distlock/orders%2F42`, not at `/orders/42` nor `/distlock/orders/42`.
//!
//! ```no_run
//! # async fn f(lock: &distlock_zookeeper::ZooKeeperLock) -> distlock_core::Result<()> {
//! use distlock_core::LockName;
//! let path = lock.lock_path(&LockName::new("orders/42")?);
//! assert_eq!(path, "/distlock/orders%2F42");
//! // Java:   new InterProcessMutex(curator, "/distlock/orders%2F42")
//! // Python: client.Lock("/distlock/orders%2F42", "me", extra_lock_patterns=["-lock-"])
//! # Ok(()) }
//! ```
//!
//! kazoo counts our nodes as contenders only with `extra_lock_patterns=["-lock-"]` (kazoo
//! 2.7.1 and later); without it a kazoo `Lock` ignores our nodes (we still wait for its).
//! Curator needs nothing more: our names are its protected-mode names.
//!
//! One limit: once a name's parent has seen 2^31 children created and deleted without going
//! away (about 10^9 acquisitions of a lock never left free for the container check), the
//! server's sequence counter wraps to negative numbers. This crate keeps arrival order
//! across the wrap; Curator and kazoo compare sequences as text, which puts each newcomer with
//! a negative sequence ahead of earlier nodes, so they can grant a lock that is held. No
//! order shared with them is safe there: keep such a lock to one library, or let its parent
//! go (all contenders gone) before the counter wraps.
//!
//! # Leader election: the note is the holder's node data
//!
//! [`Capabilities::notes`](distlock_core::Capabilities::notes) is declared, so
//! [`LockClient::election`](distlock_core::LockClient::election) works: the election is the
//! mutex of its name and the leader's value is the data of the leader's own lock node, written
//! with a version-checked `setData` once it holds (2 round trips: `exists`, `setData`). This is
//! Apache Curator's `LeaderSelector` layout (an `InterProcessMutex` whose node data is the
//! participant id): Curator's `getLeader()` on [`ZooKeeperLock::lock_path`] reads our leader's
//! value, and our `leader()` reads a Curator leader's participant id. The note goes with the
//! node, so a later leader never shows an earlier one's value; the term is the node's creation
//! zxid; a leader whose session ends is replaced once the ensemble expires it.
//!
//! # Semaphores and read-write locks: Curator's recipes
//!
//! Both are offered ([`Capabilities::semaphores`](distlock_core::Capabilities::semaphores),
//! [`Capabilities::rw_locks`](distlock_core::Capabilities::rw_locks)), session-bound and FIFO
//! like the mutex, with Curator's layouts, so a Curator client on the same path shares them:
//!
//! ```text
//! <root>/semaphore:<encoded name>/locks/_c_<uuid>-lock-<seq>     InterProcessSemaphoreV2 on
//! <root>/semaphore:<encoded name>/leases/_c_<uuid>-lease-<seq>   ZooKeeperLock::semaphore_path
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__READ__<seq>          InterProcessReadWriteLock on
//! <root>/rw-lock:<encoded name>/_c_<uuid>-__WRIT__<seq>          ZooKeeperLock::rw_lock_path
//! ```
//!
//! The encoded name never contains `:`, so the mutex, the semaphore and the read-write lock
//! of one name never share a path.
//! - **Semaphore.** The acquirer takes the `locks` mutex, creates its lease and counts the
//!   leases; with at most `permits` it holds a permit and lets go of `locks`, else it waits
//!   for `leases` to change, keeping `locks` so that later acquirers queue behind it. Exact:
//!   every acquirer counts after its own lease exists. Each lease carries `permits=<count>`
//!   as data (Curator ignores it): an acquirer that finds a live lease with another count
//!   fails with [`Error::PermitsMismatch`](distlock_core::Error::PermitsMismatch) and leaves
//!   nothing behind. A permit's fencing token is its lease's creation zxid: leases are only
//!   created by the holder of `locks`, in the order they are granted. A hold of several
//!   permits ([`Semaphore::acquire_many`](distlock_core::Semaphore::acquire_many),
//!   [`Capabilities::weighted_permits`](distlock_core::Capabilities::weighted_permits)) is
//!   that many leases of one owner created in one `multi`, as Curator's `acquire(n)` takes
//!   `n` leases, and given back in one `multi`: the same round trips as one permit.
//! - **Read-write lock.** One FIFO queue: a reader holds with no writer before it, a writer
//!   when it is first. A waiting writer keeps every later reader out, so writers are never
//!   starved by a stream of readers. Tokens are creation zxids.
//! - **Upgradeable read** ([`RwLock::upgradeable_read`](distlock_core::RwLock::upgradeable_read),
//!   [`Capabilities::upgradeable_reads`](distlock_core::Capabilities::upgradeable_reads); no
//!   Curator recipe, on the same queue): its node `_c_<uuid>-upgradeable-__READ__<seq>` is a
//!   reader to Curator; it holds with no writer and no other upgradeable reader before it.
//!   The upgrade adds a writer node of the same owner that waits only for the plain readers
//!   holding, and is granted in one `multi` that marks the read node upgraded: the write hold
//!   is both nodes, so writers queued meanwhile (Curator's too) wait until it is released.
//!   Its token is that `multi`'s zxid, and a node it overtook takes a fresh token when
//!   granted, so tokens still grow in the order holds are granted.
//!
//! Round trips: a permit when there is room, 5 alone and 6 beside other holders (`locks`:
//! `create2`, `getChildren`; our lease: `create2`, `getChildren`; the other leases' data, all
//! read at once; `delete` of our `locks` node), +1 for a single attempt's first look (both
//! listings at once), which is all (+1 to read the counts) when it finds the semaphore full;
//! each change of `leases` while full costs a waiter 1 `getChildren`. A read or the write
//! lock, as the mutex (a single attempt: 1 when taken, 3 when free; waiting: 2 when free, 3 to
//! get in//! line and 1 per wake-up). Release: 1 `delete`; renewal: 1 `exists`, for every kind.
//!
//! # Sessions: suspended and lost
//!
//! A lock lives as long as the ZooKeeper session that took it; there is no TTL to renew.
//! - **Suspended**: the connection dropped, or reached only a read-only server, or the
//!   ensemble's leader has not confirmed the session for a quarter of the session timeout
//!   (the member we are connected to may have lost its leader), but the session may still
//!   live on the ensemble.
//!   [`LockGuard::is_suspended`](distlock_core::LockGuard::is_suspended) is true; the lock
//!   may or may not still be ours, so stop starting work that needs it (`with_lock` stops).
//!   The client gives up on a silent connection after an explicit connection timeout of a
//!   quarter of the session timeout
//!   ([`ZooKeeperConfig::connection_timeout`]). Reconnecting to the same session in time
//!   makes it false again, and the lock was kept.
//! - **Lost**: the ensemble expired the session, or the session is declared over here before
//!   the ensemble can expire it: at the last contact with the leader plus the session timeout,
//!   less a safety margin of a tenth of it. The last contact is the send time of the last
//!   heartbeat the leader confirmed: a `sync` and an `exists("/")` sent together every twelfth
//!   of the session timeout (one round trip, in place of the driver's idle pings); a member
//!   answers the `sync` only once the leader has. A read alone proves nothing: a follower cut
//!   off from its leader keeps answering reads and pings for `syncLimit × tickTime` (10 s with
//!   the sample configuration) while the leader expires the session. So the lost signal fires
//!   while the ensemble still holds our nodes, before any other client can be granted the
//!   lock (measured through a black-holing proxy: with a 3 s session, lost at +2.6 s after the
//!   cut, the other client in at +3.4 to +3.5 s; on a follower cut off from the other
//!   members, with a 4 s session and `syncLimit × tickTime` of 10 s: suspended at +1.0 s, lost
//!   at +3.5 s, the other client in at +4.0 to +4.3 s). The leader hears of a session's
//!   activity on a follower through the follower's replies to its pings, every half tick, so
//!   the margin covers the leader's view lagging for session timeouts of at least 5 ticks
//!   (10 s with the default `tickTime` of 2 s) while beats are answered within a tenth of the
//!   session timeout (a slower beat leaves a longer gap between the requests the member
//!   reports).
//! - **Which session timeout.** Every timing above follows the session timeout the server
//!   negotiated ([`ZooKeeperLock::negotiated_session_timeout`]: the one asked for, brought
//!   into `minSessionTimeout..=maxSessionTimeout`, 2 to 20 ticks by default). Safety does not
//!   depend on `syncLimit × tickTime`; a holder keeps its locks through its member being cut
//!   off only if 90% of the session timeout exceeds `syncLimit × tickTime` plus a
//!   reconnection (the member stops serving its clients only then, and the client moves to
//!   another member of its connect string); otherwise its locks are lost (safely).
//! - **Maximum hold time.** A session outlives a stuck holder, so past
//!   [`AcquireOptions::max_hold`](distlock_core::AcquireOptions::max_hold) the guard's
//!   watchdog deletes the lock's node (the guard reports
//!   [`LossReason::MaxHoldExceeded`](distlock_core::LossReason)) and the next contender gets
//!   the lock while the holder's process lives on.
//!
//! When the session ends, every guard of that session fires its lost-lock signal with
//! [`LossReason::SessionExpired`](distlock_core::LossReason); the next operation opens a new
//! session. A held node deleted behind our back fires only its own guard's signal, with
//! `NotOwned` (also after its data was changed, for example by Curator's revoker).
//!
//! # Round trips
//!
//! `try_acquire`: 1 when held (`getChildren`: no node is created, no sequence number burned),
//! 3 when free (`getChildren`, `create2`, `getChildren`); a queued waiter: 3 to get in line
//! (`create2`, `getChildren`, `exists`), then 1 `getChildren` per wake-up, and each release
//! wakes exactly one waiter; release: 1 (`delete`). Each won lock also gets one background
//! `exists` watch (for deletion behind our back), off the latency path.
//!
//! # Ambiguous errors and orphan nodes
//!
//! These errors may come after the server applied the operation: [`Error::Unavailable`]
//! (`ConnectionLoss`, a connection failing under a request, a timeout of the operation bound,
//! `SessionExpired`, `SessionMoved`) from
//! `try_acquire`, `acquire`, `release` and `extend`. A `create` whose reply was lost leaves a
//! node the client does not know; it is found again by its owner token:
//! - within the attempt, after `sync` (the reconnection may have reached a follower that has
//!   not applied the `create` yet), the lowest node with the owner's prefix is adopted and
//!   the others deleted, also whenever the queue is listed;
//! - after a failed attempt, the core's owner-checked cleanup (`release` of a lease with no
//!   handle) deletes every node carrying that owner token;
//! - a wait dropped while its `create` was out deletes, in the background, every node with
//!   its owner's prefix, also after `sync`;
//! - a release whose `delete` timed out is retried in the background with backoff, a bounded
//!   number of times, and never on a permanent error such as `NoAuth`; a node given up on
//!   does not stop the cleanup of the nodes after it (a semaphore's `locks` node after its
//!   lease); whatever is left goes with the session.
//!
//! [`Error::Unavailable`]: distlock_core::Error::Unavailable
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
mod doctor;
mod lock;

pub use config::{ZooKeeperConfig, DEFAULT_OPERATION_TIMEOUT, DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT};
pub use doctor::doctor;
pub use lock::{ZooKeeperLock, ZooKeeperStats};
