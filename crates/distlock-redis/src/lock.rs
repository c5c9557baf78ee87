//! [`RedisLock`]: the lock on one Redis server or one Redis Cluster: the type, its
//! constructor and its [`DistributedLock`] implementation. Its type docs give the key layout,
//! the round trips of each operation and what its fencing tokens promise.
//!
//! The operations the implementation calls live in modules of their own: [`operations`] (the
//! mutex's attempt), [`renew`] (renewals, alone and batched), [`replicas`] (`WAIT` for
//! replicas), [`admin`] (key counts, the eviction policy check); the scripts' calls in
//! [`crate::acquire`], [`crate::release`] and [`crate::holds`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Fencing, FencingToken, Lease, LockKind, LockName,
    LockState, ObjectState, OwnerToken, Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};
use tokio::time::Instant;

use crate::config::{RedisConfig, Target};
use crate::holds::{self, HoldReply};
use crate::keys::{KeySpace, LockKeys};
// The scripts, under the name the trait's implementation below reads them by.
use crate::lua as scripts;
use crate::node::{Node, BACKEND};
use crate::release::{release_granting_on, release_waking_on};
use crate::replica_ack::ReplicaAcks;
use crate::slots::SlotMap;
use crate::subscriber::Subscriber;
use crate::waiters::Waiters;

mod admin;
mod operations;
mod renew;
mod replicas;

pub(crate) use admin::{check_eviction_policy, scan_keys};
use operations::stay_millis;
pub(crate) use operations::ttl_millis;
use renew::extend_many_in_cluster;
pub(crate) use renew::{extend_many_on, Renewal};

/// The longest TTL accepted (30 days), as [`Capabilities::new`] declares.
const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The claim a release hands the mutex to its first waiter for (or the releaser's TTL, if
/// shorter; longer if the waiter's stay in the queue ends later): what a waiter that died
/// keeps the lock for. Long enough for the waiter's first renewal, which it sends at once.
const HANDOVER_CLAIM: Duration = Duration::from_secs(5);

/// A distributed lock on one Redis server. Cheap to clone; clones share the connections: one
/// multiplexed connection for commands (reconnecting by itself), one pub/sub connection opened
/// with the first wait, and, only with [`RedisConfig::with_wait_for_replicas`], one per
/// acquisition or renewal awaiting its replicas at the same time (`WAIT` blocks its
/// connection; up to 16 are kept idle for reuse).
///
/// # Key layout
///
/// One lock `name` uses:
///
/// - `<prefix><name>`: a string holding the owner token, with a `PX` TTL. The same layout as
///   redis-py's `Lock`, redsync and most "SET NX PX" locks, so they exclude each other.
/// - `{<slot tag>}\xFFfence:<prefix><name>`: the fencing counter, `INCR`ed by every
///   acquisition, never expiring (one small integer per name ever locked stays behind). The
///   `0xFF` byte never occurs in UTF-8, so no lock name can collide with a counter. The slot
///   tag is the lock key's own Redis Cluster hash input (its `{...}` tag, else the whole key;
///   for a whole key containing `}`, a synthetic tag of the same slot), so both keys share a
///   hash slot and every script touches one slot (see "Redis Cluster" below).
/// - `{<slot tag>}\xFFwaiters:<prefix><name>`: the queue of waiters, a sorted set of waiter
///   ids scored by the end of each one's stay; an attempt by a waiter that finds the lock held
///   queues it (at the back), an attempt that wins takes it out, and the key expires with the
///   longest stay in it.
/// - channel `distlock:released:<prefix><name>`: a release hands the lock to the first waiter
///   in the queue (and takes it out) and publishes `grant:<waiter id>:<fencing token>:<claim
///   in ms>`, or publishes nothing if no one waits (`wake:<waiter id>` for a waiter of a client
///   before the handover, and from Redlock's masters and clients with replica
///   acknowledgement, whose releases wake the waiter instead). A message naming a waiter of
///   this version goes to its client's channel beside the lock's instead,
///   `distlock:released:<prefix><name>\xFF<client tag>`: a waiter's id is a version-8 UUID
///   whose first 8 characters are its client's tag (random per client), so only that client
///   receives and parses it, not every client waiting for the lock. A waiting client listens
///   on both channels (the lock's carries the messages of clients of earlier versions).
///
/// The semaphore and the read-write lock of the same name are objects of their own, in keys
/// of the counter's layout (`{<slot tag>}\xFF<mark><prefix><name>`: each mark holds one `:`,
/// at its end, so no mark is a prefix of another, and the keys collide neither with a lock
/// name nor with each other):
///
/// - semaphore: `semaphore:`, a sorted set of the holds scored by their expiry in ms of the
///   server's clock, expiring with its last member (a hold of one permit is its owner token,
///   a hold of `n` > 1 permits `<n>*<owner token>`); `semaphore-state:`, a hash
///   with the live holders' `permits` and the `fence` counter, never expiring; channel
///   `distlock:semaphore-released:<prefix><name>`.
/// - read-write lock: `rw-readers:`, the readers as the semaphore's holders (a plain reader is
///   its owner token, the upgradeable reader `u*<owner token>`); `rw-writer:`, the
///   writer's owner token with a `PX` TTL, as a mutex; `rw-waiting:`, the waiting writers'
///   ids scored by the end of their stay; `rw-fence:`, the counter (readers and writers draw
///   from it); channel `distlock:rw-lock-released:<prefix><name>`.
///
/// # Semaphores and read-write locks
///
/// Each operation is one script, so one round trip, deciding on the server's clock (`TIME`):
///
/// - **permit** (`weight` of them as one hold): drop the expired holders
///   (`ZREMRANGEBYSCORE`); if holders are live and `permits` differs from theirs, refuse
///   ([`Error::PermitsMismatch`], nothing changed); if the weights of the live holds (read
///   from their members, only when they could fit) and `weight` add up to at most `permits`,
///   add the hold with its expiry, store `permits`, `HINCRBY` the counter (and take the
///   waiter, if any, out of the semaphore's queue); else queue the waiter, if any, as the
///   mutex's are queued, and report the earliest expiry.
/// - **read**: drop expired readers and waiting writers; refused while a writer holds (its
///   `PTTL`) or a waiting writer is recorded (the end of the last record); else join. The
///   **upgradeable read** is refused also while another upgradeable reader is live (its
///   expiry and owner).
/// - **write**: win if no live reader and no writer (taking the waiter's own record out), or,
///   for the owner of the upgradeable read, if that is the one live reader: the **upgrade**,
///   which takes it out of the readers, sets the writer and draws a new token in the same
///   script; else record the waiter, if any, until now + its stay (which keeps new readers
///   and upgradeable readers out, also while an upgrade waits), and report the writer's
///   `PTTL` or the last other reader's expiry.
/// - **release** (owner-checked, by kind, name and owner alone: a permit's and a reader's
///   member follows from the lease's kind, so a hold of several permits and a cleanup by owner
///   of an attempt at one go whole): remove a live member, or compare-and-delete the writer;
///   a release of `n` permits wakes the first `n` waiters of the semaphore's queue alone
///   (`wake:<waiter>`: `n` permits came free, up to `n` waiters can take them), a read-write
///   lock's publishes on the object's channel (for plain readers only when no reader or only
///   the upgradeable one is left: only that can let a writer or the upgrade in). **extend**: move a live member's expiry
///   (`ZADD XX`), or compare-and-`PEXPIRE` the writer. **withdraw**: a semaphore's waiter
///   leaves the queue, waking the next waiter if a permit is free (it may have been woken and
///   gone without trying); a waiting writer's record goes, publishing if no writer holds and
///   none waits any more.
///
/// A woken waiter for several permits may find fewer free than it asks for (a release of
/// one permit wakes one waiter): it then waits again at the back of the queue, and a waiter
/// for fewer permits behind it gets in at its next re-check, not at once; waiters re-check at
/// the holders' expiry and at the safety net, so none hangs. Clients of versions before
/// weighted permits count every hold as one permit: they must not share a semaphore that
/// has holds of several permits (they would admit past the count). The renewal of the old
/// upgradeable lease after its upgrade finds no member (`None`): the write lease stands for
/// the hold.
///
/// A read-write lock's release wakes every waiter of the object (they all try once; those
/// that cannot get in find it held again), not the first of a queue: a writer's release can
/// let every waiting reader in, or one writer, depending on what each asks for. Expiries
/// publish nothing: waiters wake at the expiry a refused attempt reported, and re-check at
/// the safety net as for the mutex. Clients of versions before the semaphore's queue share
/// its keys but not its wakes: their releases wake every waiter, and their waiters are not
/// woken by the releases of newer clients but at their safety-net re-check or the holders'
/// expiry.
///
/// # Handing the lock to one waiter
///
/// A waiter's id is an owner token. A release hands the mutex to the first live waiter of the
/// queue in the same script: the lock key then holds the waiter's id for a claim (5 s, or the
/// releaser's TTL if shorter; until the waiter's stay would have ended if that is later), a
/// fencing token is drawn for it, and the publish (on the waiter's client's channel, which no
/// other client listens on) tells the waiter, which holds the lock from
/// then on without a round trip of its own: its lease runs from its last attempt for the
/// claim, and its first renewal, sent at once, lengthens it to its TTL. So a handoff costs
/// the release and the publish, and no newcomer can take the lock in between.
///
/// - A waiter that missed the publish (a pub/sub connection that broke) finds the lock its
///   own at its next attempt, which sets the TTL and reports the token the release drew.
/// - A waiter whose wait ends (it gave up, or its outcome is unknown) leaves the queue in the
///   background; a lock handed to it meanwhile is given back by owner at once (`DEL` if the
///   key still holds its id), and if the lock is then free the next waiter is woken. A
///   release by the same client waits for its waiters' leavings of that lock under way (at
///   most the operation timeout), so it never hands the lock to a waiter of its own that has
///   gone (a `try_acquire` right after it would find the lock held until the leaving ran).
/// - A waiter that died holds a lock handed to it for the claim only; the others wake at their
///   next safety-net re-check. Its queue entry ends with its stay (its longest sleep plus a
///   second: about 3 s with the default poll bounds) and goes with the next release or the
///   next waiter's attempt after that, so dead waiters do not pile up while a lock stays held.
/// - A release whose reply is lost and which is sent again finds the lock the waiter's, and
///   never frees it (owner-checked, as every release).
///
/// Waiters are served in the order of their last attempts: a waiter that tried and lost goes
/// to the back. With replica acknowledgement a release wakes the first waiter instead of
/// handing it the lock (a handover is not followed by `WAIT`); the waiter then tries (one
/// round trip), and a newcomer may take the lock first.
///
/// # Round trips
///
/// | operation            | round trips                                                    |
/// |----------------------|----------------------------------------------------------------|
/// | `try_acquire`        | 1 (script; +1 the first time the server sees it: `EVAL`)     |
/// | `try_acquire_waiting`| 1 (the same, queueing the waiter if held); 0 after a handover  |
/// | `try_acquire_kind`   | 1 (script; a refused writer's record in the same script)       |
/// | ... with replicas    | 1 (script and `WAIT` pipelined) + the replicas' delay          |
/// | `release`, `extend`  | 1 (script), for every kind                                     |
/// | `extend_many(n)`     | 1 (one pipeline of `n` scripts, kinds mixed)                   |
/// | ... with replicas    | 1 (the scripts and `WAIT` pipelined) + the replicas' delay     |
/// | `withdraw`           | 1 (script) for a waiting writer, else 0                        |
/// | `watch`, `watch_kind`| 0 if subscribed already (2 s after the last watch too), else 1 (+1 to connect) |
/// | `inspect`, `inspect_holders`, `ping` | 1                                              |
///
/// # Redis Cluster
///
/// With a `redis+cluster://h1:p1,h2:p2` URL the same lock runs on a cluster through the
/// `redis` crate's cluster client (one multiplexed connection per master; `MOVED` and `ASK`
/// are followed by the client, a redirect that outlives its retries is an
/// [`Error::Unavailable`]). The keys are those above: all keys of one lock, semaphore or
/// read-write lock share one hash slot, so every script runs on one master and the mutex,
/// its fencing counter, the semaphore's count and the read-write lock's rules are exactly
/// those of one server. What differs:
///
/// - **notifications**: each channel carries its object's slot tag
///   (`{<slot tag>}\xFFdistlock:released:<prefix><name>`), the scripts announce with
///   `SPUBLISH`, and waiters listen with `SSUBSCRIBE` on the master serving that slot (sharded
///   pub/sub, Redis 7.0 or later), through one RESP3 cluster connection per client; a master
///   that goes away or a slot that moves (the server then unsubscribes its channels) leads to
///   a resubscription on the slot's current master and one wake-up of its waiters, and the
///   waiters' safety-net re-check stays;
/// - **`extend_many`**: the leases are grouped by the master serving their slot (a slot map
///   read by `CLUSTER SLOTS`, kept at most 30 s), one pipeline per master, sent at once; a
///   renewal redirected because the map was stale is sent again alone and the map read anew;
/// - **memory**: the scripts carry a `#!lua` line (so that a replica redirects them to the
///   slot's master), and Redis refuses such a script outright
///   on a master over `maxmemory` unless the script declares `flags=allow-oom`; releases,
///   renewals, a waiter leaving and inspection declare it (they cannot grow memory), so a full
///   master under `noeviction` still frees and renews locks, while acquisitions fail with an
///   `OOM` [`Error::Backend`] until memory is freed;
/// - **releases sent again**: the cluster client sends a request again after a dropped
///   connection, unseen by this crate, and a second run of a release finds the hold gone (or
///   taken by the waiter the first run woke). A release that deletes its hold therefore also
///   writes, in the same script and slot, a release marker holding its request's nonce under
///   a key of its owner token (`{<slot tag>}\xFFreleased:<owner>:<prefix><name>`, `PX` four
///   operation timeouts, at least 1 s); a run that finds the hold not ours but that marker
///   reports `true`. Only a release that found the hold ours writes one, and only the same
///   request reads it as its own: a stale holder whose lock was taken by another, and a
///   second release of a released lease, still get `false`. One server writes no marker
///   (its client sees its own resends);
/// - **`count_held`** scans every master; [`RedisConfig::with_wait_for_replicas`] is refused
///   (its `WAIT` would have to follow each lock's slot), and `maxmemory-policy` is checked on
///   one node the client picks (set it on every master).
///
/// **Failover loses locks.** Replication from a master to its replicas is asynchronous: a lock
/// acquired on a master that dies before the write reached a replica is gone once that replica
/// is promoted, and another client can acquire it while the first still holds it; the first
/// learns of it at its next renewal (the lost signal fires then), and a fencing counter may go
/// back with it. A killed master without a replica fails its slots' operations with
/// [`Error::Unavailable`] (bounded by the operation timeout) while the other masters go on.
/// After a request times out, a `PING` on a fresh connection to its master decides: if it
/// answers, the old connection was the broken one and the cluster connection is opened again
/// (once for all callers); if it times out too, the master is slow or cut off and the
/// connections to the healthy masters are left alone.
/// How often promotions lose a lock, and for how long two clients overlap, is for the torture
/// harness to measure; the tests of this crate check that a slot migration and a killed master
/// never grant a lock twice among the masters that stay.
///
/// # Fencing
///
/// Tokens come from `INCR` on a counter that never expires, so they strictly increase while
/// the server keeps its data: [`Fencing::BestEffort`]. They go back whenever the server
/// loses its last writes:
///
/// - a crash or restart without persistence, and also **with Redis's default persistence**:
///   RDB snapshots lose everything since the last snapshot, and AOF with `appendfsync
///   everysec` (the AOF default) loses up to about a second of writes. Only AOF with
///   `appendfsync always` keeps every `INCR` across a crash;
/// - a `FLUSHALL`/`FLUSHDB`, or an eviction of the counter under an `allkeys-*` `maxmemory`
///   policy (see [`RedisConfig::with_require_noeviction`]);
/// - a failover to a replica that missed the last `INCR` (replication is asynchronous;
///   [`RedisConfig::with_wait_for_replicas`] narrows this, it does not close it).
///
/// With AOF `appendfsync always`, no eviction and no failover, they are monotonic.
///
/// Semaphores and read-write locks draw their tokens from a counter of their own per object
/// (the `fence` field of the semaphore's state hash, the read-write lock's `rw-fence:` key),
/// which never expires either: same promise, per object. Every hold gets a new token, readers
/// and permits too, so concurrent holders have distinct tokens. An acquisition sent again
/// after a broken connection is granted again with a new token (the first reply never
/// arrived), still without taking a second permit.
///
/// The mutex's acquisition sent again finds the lock already its own and reports the
/// counter's value, which its first run drew. If the counter vanished in between (a `DEL`, a
/// flush, an eviction), no token can be reported that is above the earlier ones: the
/// attempt gives the lock back and fails with [`Error::Backend`] (ambiguous, as every
/// `Backend` error: `LockClient` releases by owner token too), never with token 0.
///
/// # Eviction
///
/// Lock keys have a TTL, so under any `volatile-*` `maxmemory` policy (the default on several
/// managed services) and any `allkeys-*` one, Redis evicts them when memory runs out: a held
/// lock is freed, another client can acquire it, and the holder learns of it only at its next
/// renewal. [`build`](Self::build) reads `maxmemory-policy` and logs a warning unless it is
/// `noeviction`; [`RedisConfig::with_require_noeviction`] refuses such a server instead.
///
/// # Other libraries' locks
///
/// A key under the lock name that holds another type (Redisson's `RLock` is a hash) counts
/// as held by a foreign owner (inspect reports it as `<hash>`): waiters wait for it to go,
/// nothing fails with `WRONGTYPE`. Redisson and distlock do not otherwise exclude each
/// other's waiting or renewal logic; only plain `SET NX PX` clients share our layout.
///
/// ```no_run
/// use distlock_core::LockClient;
/// use distlock_redis::RedisLock;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(RedisLock::connect("redis://127.0.0.1:6379").await?);
/// let guard = client.acquire("inventory:sku-42").await?;
/// // ... work, sending guard.fencing_token() with each write ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLock {
    inner: Arc<Inner>,
}

struct Inner {
    node: Node,
    /// Connections for acquisitions that `WAIT` for replicas, one per acquisition in flight:
    /// `WAIT` blocks its connection, so it must hold up neither releases and renewals on the
    /// shared one nor other acquisitions.
    acks: Option<ReplicaAcks>,
    keys: KeySpace,
    config: RedisConfig,
    subscriber: Subscriber,
    /// This client's waiters that may be in the server's queue.
    waiters: Waiters,
    /// On a cluster, which master serves which slot (for batched renewals).
    slots: SlotMap,
}

impl RedisLock {
    /// Connects to `url` with the default configuration.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a malformed URL, [`Error::Unavailable`] if the server
    /// does not answer within the connect timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        RedisConfig::from_url(url)?.build().await
    }

    /// Connects with `config`. The pub/sub connection opens later, with the first wait.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn build(config: RedisConfig) -> Result<Self> {
        config.validate()?;
        let node = Node::connect(
            config.target.clone(),
            config.url.clone(),
            config.operation_timeout,
            config.connect_timeout,
        )
        .await?;
        check_eviction_policy(&node, config.require_noeviction).await?;
        let acks = ReplicaAcks::new(&config);
        let subscriber = Subscriber::new(
            node.target().clone(),
            node.url().to_owned(),
            node.timeout(),
            node.connect_timeout(),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                keys: if node.is_cluster() {
                    KeySpace::sharded(config.prefix.clone())
                } else {
                    KeySpace::new(config.prefix.clone())
                },
                node,
                acks,
                config,
                subscriber,
                waiters: Waiters::default(),
                slots: SlotMap::default(),
            }),
        })
    }

    /// The configuration this lock was built with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.config
    }

    /// The key a lock name is stored under: `<prefix><name>`.
    pub fn lock_key(&self, name: &LockName) -> Vec<u8> {
        self.inner.keys.lock_key(name.as_str())
    }

    /// The key of a lock's fencing counter (see the key layout above).
    pub fn fencing_key(&self, name: &LockName) -> Vec<u8> {
        self.keys(name).fence
    }

    /// The pub/sub channel a lock's releases are announced on.
    pub fn release_channel(&self, name: &LockName) -> Vec<u8> {
        self.keys(name).channel
    }

    /// The pub/sub channel the releases of the mutex, semaphore or read-write lock `name`
    /// are announced on (on a cluster, a sharded channel in the object's slot).
    ///
    /// ```no_run
    /// use distlock_core::{LockName, Primitive};
    /// use distlock_redis::RedisLock;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let lock = RedisLock::connect("redis+cluster://127.0.0.1:7001").await?;
    /// let channel = lock.primitive_channel(&LockName::new("exports")?, Primitive::Semaphore);
    /// assert!(channel.is_some());
    /// # Ok(()) }
    /// ```
    pub fn primitive_channel(&self, name: &LockName, primitive: Primitive) -> Option<Vec<u8>> {
        match primitive {
            Primitive::Mutex => Some(self.release_channel(name)),
            other => holds::channel(&self.inner.keys, name, other),
        }
    }

    pub(crate) fn keys(&self, name: &LockName) -> LockKeys {
        self.inner.keys.keys(name)
    }

    /// Whether a mutex's release hands the lock to its first waiter: with notifications (the
    /// waiter hears of it), and without replica acknowledgement (a handover is not followed
    /// by `WAIT`).
    fn hands_over(&self) -> bool {
        self.inner.config.notifications && self.inner.acks.is_none()
    }

    /// The lease a release handed to `waiter` (see [`Subscriber::take_grant`]), if one came and
    /// enough of it is left: held under the waiter's id for the claim the release set, which
    /// began after the waiter's last attempt was sent, renewed to `ttl` by its first renewal.
    /// With less than half the claim left, `None`: the attempt then finds the lock the
    /// waiter's and sets its TTL (one round trip).
    fn handed_over(&self, name: &LockName, waiter: &str, ttl: Duration) -> Option<Lease> {
        let grant = self.inner.subscriber.take_grant(waiter)?;
        let owner: OwnerToken = waiter.parse().ok()?;
        let last = self.inner.waiters.last_attempt(waiter)?;
        if grant.token == 0 || last.at + grant.claim / 2 <= Instant::now() {
            return None;
        }
        self.inner.waiters.won(waiter);
        Some(
            Lease::new(name.clone(), owner, grant.claim, last.at)
                .with_ttl(ttl)
                .with_fencing(FencingToken::new(grant.token)),
        )
    }
    /// The [`Capabilities`] of a single Redis server.
    pub fn single_instance_capabilities() -> Capabilities {
        Capabilities::new(Fencing::BestEffort, WakeUp::Notification)
            .with_ttl_granularity(Duration::from_millis(1))
            .with_ttl_range(Duration::from_millis(1), MAX_TTL)
    }
}

#[async_trait]
impl DistributedLock for RedisLock {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    /// Best-effort fencing, notified waiters (one woken per release of a mutex or per permit
    /// released; every waiter of the object for read-write locks), semaphores (with holds of
    /// several permits) and read-write locks (with upgradeable reads), notes.
    fn capabilities(&self) -> Capabilities {
        let mut caps = Self::single_instance_capabilities()
            .with_primitives(true, true)
            .with_weights_and_upgrades(true, true)
            .with_notes(true);
        if !self.inner.config.notifications {
            caps.wake_up = WakeUp::Polling;
        }
        caps
    }

    /// The mutex: one round trip, the acquire script (`SET NX PX`, then `INCR` of the fencing
    /// counter, or the holder's `PTTL`); with a waiter, in the same round trip, the waiter is
    /// queued (at the back) in the lock's queue of waiters if the lock is held, of which a
    /// release hands the lock to the first, and leaves it if it wins. A waiter a release
    /// handed the lock to holds it without a round trip (or, if it missed the publish, finds
    /// it its own at its next attempt). With replica acknowledgement, the
    /// `WAIT` rides in the same pipeline; if too few replicas confirm, the lock is released
    /// (one more round trip) and the attempt fails with [`Error::Unavailable`].
    ///
    /// Permits (one or several as one hold), a read, the upgradeable read or the write lock
    /// (the upgrade too): one round trip (one script; with replica acknowledgement, the `WAIT`
    /// rides in the same pipeline). A failing write attempt with a
    /// waiter records the waiting writer in the same script; a failing permit attempt queues
    /// the waiter in the semaphore's queue.
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt {
            name,
            kind,
            owner,
            ttl,
            ..
        } = attempt;
        let (kind, owner, ttl) = (*kind, *owner, *ttl);
        let waiter = attempt.waiter_parts();
        if kind == LockKind::Exclusive {
            return match waiter {
                Some((waiter, stay)) => {
                    if let Some(lease) = self.handed_over(name, waiter, ttl) {
                        return Ok(TryAcquire::Acquired(lease));
                    }
                    self.inner
                        .waiters
                        .attempt(waiter, stay, |waiting| self.attempt(name, owner, ttl, waiting))
                        .await
                }
                None => self.attempt(name, owner, ttl, None).await,
            };
        }
        let ttl_ms = ttl_millis(ttl)?;
        let token = owner.to_string();
        let waiting = waiter.map(|(id, stay)| (id, stay_millis(stay)));
        let call = holds::acquire_call(&self.inner.keys, name, kind, &token, ttl_ms, waiting)?;
        let sent_at = Instant::now();
        let (reply, acknowledged) = self.run_acquire(&call).await?;
        let reply = match holds::parse_acquire(reply) {
            Ok(reply) => reply,
            Err(e) => {
                // As for the mutex: give the hold back, then report.
                let node = &self.inner.node;
                let _ = holds::release(node, node.timeout(), &self.inner.keys, name, kind, &token).await;
                return Err(e);
            }
        };
        match reply {
            HoldReply::Acquired(fencing) => {
                if !acknowledged {
                    let node = &self.inner.node;
                    let _ = holds::release(node, node.timeout(), &self.inner.keys, name, kind, &token).await;
                    return Err(self.too_few_replicas());
                }
                Ok(TryAcquire::Acquired(
                    Lease::new(name.clone(), owner, ttl, sent_at)
                        .with_kind(kind)
                        .with_fencing(FencingToken::new(fencing)),
                ))
            }
            HoldReply::Held(holder) => Ok(TryAcquire::Held(holder)),
            HoldReply::PermitsMismatch(stored) => Err(Error::PermitsMismatch {
                name: name.to_string(),
                stored,
                asked: match kind {
                    LockKind::Permit { permits, .. } => permits,
                    _ => 0,
                },
            }),
        }
    }

    /// One round trip: for the mutex, compare-and-delete, then hand the lock to the first
    /// queued waiter, if any (see "Handing the lock to one waiter" above); for permits, its
    /// release script, which wakes the first waiter of the semaphore's queue per permit
    /// released; for a read or the write lock, its release script, which announces
    /// the release to every waiter of the object. By the lease's kind, name and owner alone.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let owner = lease.owner().to_string();
        let node = &self.inner.node;
        match lease.kind() {
            LockKind::Exclusive if self.hands_over() => {
                let claim = HANDOVER_CLAIM.min(lease.ttl());
                let keys = self.keys(lease.name());
                // Not handed to a waiter of ours that has gone.
                self.inner
                    .waiters
                    .after_leavings(&keys.lock, node.timeout())
                    .await;
                release_granting_on(node, node.timeout(), &keys, &owner, claim).await
            }
            LockKind::Exclusive => {
                release_waking_on(node, node.timeout(), &self.keys(lease.name()), &owner).await
            }
            kind => holds::release(node, node.timeout(), &self.inner.keys, lease.name(), kind, &owner).await,
        }?
        .for_lease(lease)
    }

    /// One round trip for all leases, of any kinds: a pipeline of extend scripts
    /// (compare-and-`PEXPIRE` for the mutex and the write lock, a live member's expiry moved for
    /// a permit and a read lock). With replica acknowledgement,
    /// `WAIT` rides behind them in the same pipeline; a renewal too few replicas acknowledged
    /// is an ambiguous [`Error::Unavailable`].
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let mut batch = Vec::with_capacity(leases.len());
        let mut slots = Vec::with_capacity(leases.len());
        let mut results: Vec<Option<Result<Option<Lease>>>> = Vec::with_capacity(leases.len());
        for lease in leases {
            match self.renewal(lease, lease.ttl()) {
                Ok(renewal) => {
                    slots.push(results.len());
                    results.push(None);
                    batch.push(renewal);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let sent_at = Instant::now();
        let node = &self.inner.node;
        let replies = if batch.is_empty() {
            Vec::new()
        } else if let Target::Cluster(seeds) = node.target() {
            extend_many_in_cluster(node, &self.inner.slots, &seeds.first_host(), &batch).await
        } else {
            self.renew_on_server(&batch).await
        };
        for (slot, reply) in slots.into_iter().zip(replies) {
            let lease = &leases[slot];
            results[slot] = Some(reply.map(|ours| ours.then(|| lease.renewed(lease.ttl(), sent_at))));
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(BACKEND, "no reply for a renewal"))))
            .collect()
    }

    /// Subscribes to the object's release channel on this client's one pub/sub connection;
    /// the watch fires on every release published after this returns. The mutex's watch names
    /// its waiter, whom a release wakes once it is first in the lock's queue.
    ///
    /// Semaphores and read-write locks: the object's release channel (0 round trips if
    /// already subscribed, else 1). A semaphore's waiter is woken alone
    /// (`wake:<waiter>`) when a released permit is its to take: the release wakes the first
    /// waiter of the semaphore's queue. A release of the write lock, of the last reader and a
    /// withdrawal of the last waiting writer wake every watch of the read-write lock (which of
    /// them can get in depends on what each asks for). The waiters' safety-net re-check and
    /// their wake-up at the holders' expiry (which announces nothing) stay, as for the mutex.
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        if primitive == Primitive::Mutex {
            if !self.inner.config.notifications {
                return Ok(ReleaseWatch::polling());
            }
            let keys = self.keys(name);
            // An owner token: a release may hand the lock to the waiter under this id, and
            // tells it on this client's channel, which its first 8 characters name.
            let waiter = self.inner.subscriber.new_waiter_id();
            let (rx, keep) = self
                .inner
                .subscriber
                .watch_as_client_waiter(&keys.channel, waiter.clone())
                .await?;
            let leave = self
                .inner
                .waiters
                .leave_on_drop(vec![self.inner.node.clone()], keys, waiter.clone());
            return Ok(ReleaseWatch::for_waiter(rx, (keep, leave), waiter));
        }
        if !self.inner.config.notifications {
            return Ok(ReleaseWatch::polling());
        }
        let Some(channel) = holds::channel(&self.inner.keys, name, primitive) else {
            return Ok(ReleaseWatch::polling());
        };
        if primitive == Primitive::Semaphore {
            let waiter: Arc<str> = format!("{:016x}", rand::random::<u64>()).into();
            let (rx, keep) = self
                .inner
                .subscriber
                .watch_as_waiter(&channel, waiter.clone())
                .await?;
            return Ok(ReleaseWatch::for_waiter(rx, keep, waiter));
        }
        let (rx, keep) = self.inner.subscriber.watch(&channel).await?;
        Ok(ReleaseWatch::notified(rx, keep))
    }

    /// One round trip for a waiting writer (its record goes; if no writer holds and no other
    /// writer waits, readers are told) and for a semaphore's waiter (it leaves the queue; if a
    /// permit is free, the next waiter is woken in its place); nothing for readers.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        let (node, space) = (&self.inner.node, &self.inner.keys);
        match kind {
            LockKind::Write => holds::withdraw_writer(node, space, name, waiter).await,
            LockKind::Permit { .. } => holds::withdraw_permit_waiter(node, space, name, waiter).await,
            _ => Ok(()),
        }
    }

    /// One round trip: a script stores `<owner>\n<note>` in the lock's note key if `GET` of
    /// the lock key is the lease's owner. The note key has no TTL: [`inspect`](Self::inspect)
    /// reports it only while its owner holds the lock.
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        if lease.kind() != LockKind::Exclusive {
            return Ok(false);
        }
        let keys = self.keys(lease.name());
        let note_key = crate::keys::note_key(&keys.lock);
        let owner = lease.owner().to_string();
        let stored: i64 = self
            .inner
            .node
            .script(
                &scripts::NOTE,
                &[&keys.lock, &note_key],
                &[owner.as_bytes(), note.as_bytes()],
            )
            .await?;
        Ok(stored == 1)
    }

    /// One round trip: the live holders, read atomically by a script; for the mutex, `GET`,
    /// `PTTL`, the fencing counter (a free lock reports its last token) and the holder's note.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        let (node, space) = (&self.inner.node, &self.inner.keys);
        match primitive {
            Primitive::Semaphore => holds::semaphore_holders(node, space, name)
                .await
                .map(ObjectState::held_by),
            Primitive::RwLock => holds::rw_lock_holders(node, space, name)
                .await
                .map(ObjectState::held_by),
            _ => {
                let keys = self.keys(name);
                let note_key = crate::keys::note_key(&keys.lock);
                let (owner, pttl, fencing, note): (Option<Vec<u8>>, i64, Option<u64>, Option<Vec<u8>>) = self
                    .inner
                    .node
                    .script(&scripts::INSPECT, &[&keys.lock, &keys.fence, &note_key], &[])
                    .await?;
                let fencing = fencing.map(FencingToken::new);
                let remaining = u64::try_from(pttl).ok().map(Duration::from_millis);
                // Other clients of the layout may store any bytes as the owner.
                Ok(ObjectState::from(match owner {
                    Some(owner) => {
                        let note = note.and_then(|record| note_of(&record, &owner));
                        LockState::held(String::from_utf8_lossy(&owner).into_owned(), fencing, remaining)
                            .with_note(note)
                    }
                    None => LockState::free(fencing),
                }))
            }
        }
    }

    /// One round trip: `PING`.
    async fn ping(&self) -> Result<()> {
        let pong: String = self.inner.node.query(&redis::cmd("PING")).await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(Error::backend(BACKEND, format!("PING answered {pong:?}")))
        }
    }
}

/// The note in a note record (`<owner>\n<note>`) if `owner` left it.
fn note_of(record: &[u8], owner: &[u8]) -> Option<String> {
    let split = record.iter().position(|&b| b == b'\n')?;
    (record[..split] == *owner).then(|| String::from_utf8_lossy(&record[split + 1..]).into_owned())
}

impl std::fmt::Debug for RedisLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLock")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}
