//! The etcd backend of distlock: etcd's own lock recipe (the `concurrency.Mutex` of its Go
//! client, what `etcdctl lock` runs), semaphores and read-write locks, one lease per client
//! kept alive in the background, create-revision fencing tokens, FIFO waiters that each watch
//! only the key they must outlive.
//!
//! [`EtcdLock`] (from an [`EtcdConfig`] or an
//! `etcd://host1:2379,host2:2379,host3:2379/optional/root?lease_ttl=10s` URL) implements
//! [`distlock_core::DistributedLock`]; business code uses it through
//! [`distlock_core::LockClient`].
//!
//! # Key layout: shared with etcd's own lock
//!
//! ```text
//! <root>/<encoded name>/<lease id, hex>-<owner token>     value = the owner token
//! ```
//!
//! `<root>` defaults to `distlock`; the name is percent-encoded (`[A-Za-z0-9._~-]` kept), so
//! one name's prefix never holds another's keys. Each contender's key is attached to its
//! client's lease; the holder is the key with the lowest create revision under the prefix,
//! and that create revision is the fencing token
//! ([`Fencing::Monotonic`](distlock_core::Fencing::Monotonic): revisions grow over the
//! cluster's whole history). etcd's `concurrency.Mutex` orders every key under its prefix the
//! same way and never reads key names, so `etcdctl lock <prefix>` and a Go service's
//! `concurrency.NewMutex(session, "<prefix>/")` exclude this crate and queue with it in one
//! order, given exactly [`EtcdLock::lock_prefix`] (without its trailing `/` for `etcdctl`):
//!
//! ```no_run
//! # async fn f(lock: &distlock_etcd::EtcdLock) -> distlock_core::Result<()> {
//! use distlock_core::LockName;
//! assert_eq!(lock.lock_prefix(&LockName::new("orders/42")?), "distlock/orders%2F42/");
//! // etcdctl lock distlock/orders%2F42
//! // Go: concurrency.NewMutex(session, "distlock/orders%2F42/")
//! # Ok(()) }
//! ```
//!
//! # Semaphores and read-write locks
//!
//! ```text
//! <root>/semaphore:<encoded name>/locks/<lease id, hex>-<owner token>    who may add a lease next
//! <root>/semaphore:<encoded name>/leases/<lease id, hex>-<owner token>   value = permits=<count>[;weight=<n>]
//! <root>/rw-lock:<encoded name>/read/<lease id, hex>-<owner token>       value = the owner token
//! <root>/rw-lock:<encoded name>/write/<lease id, hex>-<owner token>      value = the owner token
//! <root>/rw-lock:<encoded name>/x-upgradeable/<lease id, hex>-<owner token>
//! ```
//!
//! A semaphore is Apache Curator's `InterProcessSemaphoreV2` structure: waiters line up for
//! the `locks` mutex; its head creates its lease and holds a permit if at most `permits`
//! leases were created up to its own, else waits (keeping `locks`) for a lease's deletion.
//! So a release wakes only the one waiter that can win, waiters are served in arrival order,
//! and the count is exact. A lease records its count: a live one with another count refuses
//! [`Error::PermitsMismatch`](distlock_core::Error::PermitsMismatch), leaving nothing behind.
//! A hold of several permits ([`Semaphore::acquire_many`](distlock_core::Semaphore::acquire_many))
//! is one lease that records its weight; the weights are counted, so the count stays exact and
//! the hold is given back whole.
//!
//! A read-write lock is etcd's `recipe.RWMutex` layout and order (its Go client's
//! `experimental/recipes`): one queue by create revision; a reader holds when no writer's key
//! is older than its own, a writer when its key is the oldest. A waiting writer keeps every
//! later reader out, so readers never starve it. A hold's fencing token is its key's create
//! revision (a hold that waited: the revision it found itself first at), and every key goes
//! with the client's lease.
//!
//! An upgradeable read ([`RwLock::upgradeable_read`](distlock_core::RwLock::upgradeable_read))
//! is one more key in that queue, under `x-upgradeable/`: it holds beside readers, keeps
//! writers and other upgradeable readers out, and stays out while a writer waits. Its upgrade
//! creates the owner's write key (the waiter record that keeps new readers out), then once no
//! reader holds writes the read key again in one transaction: from then on the write key and
//! the read key written again are one write hold, with the grant's revision as its token,
//! still ahead of any writer that waited meanwhile. etcd's own `RWMutex` has no upgrade.
//!
//! # Leader election: etcd's own
//!
//! ```text
//! <root>/<encoded name>/<lease id, hex>-<owner token>     value = the leader's value, once set
//! ```
//!
//! [`LockClient::election`](distlock_core::LockClient::election) is the mutex of its name; the
//! leader's value ([`DistributedLock::set_note`](distlock_core::DistributedLock::set_note)) is
//! put as its key's value (1 round trip, only while the key is still the hold's, keeping its
//! lease), where etcd's `concurrency.Election` keeps its leader's. So `etcdctl elect -l
//! <prefix>` and a Go service's `Election.Leader`/`Observe` on [`EtcdLock::lock_prefix`] read
//! our leader's value, and our `leader()`/`observe()` read theirs (`etcdctl elect <prefix>
//! <value>` campaigns in the same queue). The term is the key's create revision. Until our new
//! leader has put its value (right after it takes office), etcd's tools read its owner token;
//! ours report no leader yet.
//!
//! # The lease: connected, suspended, lost
//!
//! Every key of a client is attached to its one lease, so a lock lives as long as that lease;
//! the TTL of an acquisition is ignored. A keeper task sends a keep-alive every third of the
//! granted TTL; the leader renews the lease when it applies one, so each confirmed keep-alive
//! proves the lease lives until its send time plus the TTL. (etcd answers a keep-alive
//! stream's opening only with its first reply, so the first keep-alive is sent with it.)
//! - **Suspended**: a keep-alive went unconfirmed for a third of the TTL (the connection
//!   dropped, or the member lost its leader).
//!   [`LockGuard::is_suspended`](distlock_core::LockGuard::is_suspended) is true; the lock may
//!   or may not still be ours.
//! - **Lost**: the cluster says the lease is gone, or the last confirmed keep-alive was sent a
//!   TTL ago less the safety margin of every TTL store (a tenth, at most 2 s): the lost-lock
//!   signal fires with [`LossReason::SessionExpired`](distlock_core::LossReason) before the
//!   cluster can expire the lease and grant the lock to another client. The next operation is
//!   granted a new lease.
//! - **Deleted behind our back**: each held key is watched (one watch per hold, opened by the
//!   watchdog's task, not on the acquisition's path); its deletion by anyone else (`etcdctl
//!   del`, an operator) fires the lost-lock signal with
//!   [`LossReason::NotOwned`](distlock_core::LossReason) at once, while the lease and the
//!   client's other locks live on.
//!
//! A lease bounds how long a killed or cut-off holder keeps its locks; a stuck but live
//! holder keeps them until [`AcquireOptions::max_hold`](distlock_core::AcquireOptions::max_hold).
//! As Jepsen's analysis of etcd found, a lease is a timing argument: a process paused past
//! its lease, or a leader change, can let two clients *believe* they hold a lock; the
//! fencing token is what a protected resource must check.
//!
//! # Round trips
//!
//! `try_acquire`: 1 (a transaction that creates our key only if no one else's exists, else
//! reads the holder: nothing is created when the lock is held). A queued waiter: 1 when free;
//! else 2 to get in line plus a watch on the key just before it, then 1 per wake-up; each
//! release wakes exactly one waiter. Release: 1. Renewal of all held locks: 1 (a transaction
//! per 128 locks, etcd's default `--max-txn-ops`, sent at once).
//! A permit: 1 when the semaphore is full, 2 with room; waiting, 1 to line up for `locks`
//! (+1 look and a watch per contender ahead), 1 to create the lease and count, 1 to hand
//! `locks` on, and 1 per deletion of a lease while full. A read or the write lock: 1 (attempt
//! or wait when free), else 1 per look and a watch on the key to outlive. A leader's note:
//! 1; reading the leader (and its note): 1. An upgradeable read: as a read. `try_upgrade`: 3
//! when granted, 2 when a reader holds; a waiting upgrade: 1 to create its write key, 1 look,
//! 1 look and a watch per reader that leaves, 1 to grant.
//!
//! # Ambiguous errors
//!
//! [`Error::Unavailable`](distlock_core::Error::Unavailable) from an acquisition may come
//! after the cluster applied it. The key is determined by the lease and the owner token, so
//! the core's owner-checked cleanup finds and deletes it (for a permit or a side of a
//! read-write lock too: every key of the owner under that object's prefix). A wait's create
//! runs in a task of its own: a wait dropped while it was out deletes its key in the
//! background once its reply is in, so the delete never overtakes it; whatever is left goes
//! with the lease.
//!
//! ```no_run
//! use distlock_core::{AcquireOptions, LockClient};
//! use distlock_etcd::EtcdLock;
//! use std::time::Duration;
//!
//! # #[tokio::main] async fn main() -> distlock_core::Result<()> {
//! let backend = EtcdLock::connect_url("etcd://etcd1:2379,etcd2:2379,etcd3:2379?lease_ttl=10s").await?;
//! let client = LockClient::new(backend);
//! let opts = AcquireOptions::new().wait_for(Duration::from_secs(30));
//! let guard = client.acquire_with("nightly-report", &opts).await?;
//! // ... the work, sending guard.fencing_token() with each write ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # A cluster's members: down, paused, cut off
//!
//! Give the client every member. The lease lives on the cluster, not on a member: a new
//! leader extends every lease by its TTL and an election timeout, so a holder that reaches
//! any member of the majority within its lease keeps its locks across the leader's kill or
//! pause (the guard may say suspended meanwhile). A call that finds a member down (its
//! connection refused) was never sent and goes to another member at once. A call that may
//! be applied twice with the effect of once (a read, the delete of a hold's key, the mutex's
//! create, which finds its own key) is also sent again after any other transient failure,
//! each try bounded by a third of the operation timeout, so a member paused or cut off
//! (whose connection still looks open) costs one try, not the operation; a release sent
//! again that finds its key gone answers an ambiguous error, never "not ours". The lease
//! keeper opens its keep-alive stream on the next endpoint after an unconfirmed keep-alive.
//! A holder that
//! reaches only a member cut off from the others (or paused) gets no keep-alive confirmed:
//! suspended after a third of the TTL, lost a TTL less the safety margin after its last
//! confirmed keep-alive, which is before the majority's leader can expire the lease and grant
//! the lock to anyone else. Tested on a real 3-member cluster with its members partitioned
//! (`tests/etcd/partition.rs`, `tests/etcd/failover.rs`).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod config;
mod keys;
mod lock;
mod proto;
mod txn;
mod watch;

pub use config::{EtcdConfig, DEFAULT_LEASE_TTL, DEFAULT_OPERATION_TIMEOUT, DEFAULT_ROOT};
pub use lock::EtcdLock;
