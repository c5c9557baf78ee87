//! [`MemcachedLock`]: the lock primitives on memcached's meta protocol.
//!
//! Key layout (details in `keys.rs`): for namespace `ns` and lock name `n`,
//! - `ns:l:<enc(n)>` = `<owner token> <fencing token>` (the owner token is a UUID; the
//!   fencing token is added by the winning acquisition's second round trip), expiry = the
//!   TTL rounded up to whole seconds **plus two seconds** (see "TTLs" on [`MemcachedLock`]);
//! - `ns:f:<enc(n)>` = the fencing counter, an `incr` counter seeded with the unix time in
//!   microseconds when it is (re)created, expiry 30 days, refreshed on each use;
//! - `ns:n:<enc(n)>` = the note beside the mutex `n`'s hold
//!   ([`DistributedLock::set_note`]): `n1 <owner> <fencing token>`, a newline, the note; no
//!   expiry; shown only while the lock item holds that same `<owner> <fencing token>`
//!   (`note.rs`);
//! - `ns:s:<enc(n)>` (the semaphore `n`) and `ns:w:<enc(n)>` (the read-write lock `n`) =
//!   one item per object holding all its holders, waiting writers and its fencing counter,
//!   with an absolute expiry 30 days after its last write (`holders_item.rs`, `holders.rs`);
//! - `distlock:server-identity` (one per server, shared by every namespace) = a random
//!   128-bit nonce in hex, no expiry, added by the first client to connect to a fresh
//!   server process.
//!
//! Every mutex lease remembers the lock item's CAS value and the identity of the server process
//! (its nonce) that issued it, in [`Lease::handle`]. CAS-guarded commands only go out on a
//! connection that reaches that same process (see `wire.rs` for why).
//!
//! This file holds the type, its constructor, where each name lives, and the
//! [`DistributedLock`] dispatch. The operations are in their own modules: `mutex.rs` (the
//! mutex: acquire, release, inspect), `renewal.rs` (the mutex's renewals, one and in batches),
//! `holders.rs` (semaphores and read-write locks), over `exchange.rs` (one request batch on
//! one pooled connection, `pool.rs`) and `expiry.rs` (TTLs as the server counts them).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Fencing, Lease, LockKind, LockName, ObjectState,
    Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};

use crate::config::MemcachedConfig;
use crate::expiry::{MAX_TTL, MIN_TTL};
use crate::keys::{self, Keys};
use crate::pool::Server;

pub(crate) const BACKEND: &str = "memcached";

/// A lock client of one or more memcached servers. Cheap to clone; clones share connections.
///
/// Built from a [`MemcachedConfig`]; used through [`distlock_core::LockClient`].
///
/// # How it works
///
/// | operation | commands | round trips |
/// |---|---|---|
/// | acquire, held | `add <lock> 0 <ttl+2>` + `mg <lock> c t v` + `ma <fence> N J T v`, pipelined | 1 |
/// | acquire, won | the same, then `cas <lock>` (writes `<owner> <token>`) + `mg <lock> c v` | 2 |
/// | release | `md <lock> C<cas>` | 1 |
/// | release of a lease without a handle (owner-checked cleanup) | `mg <lock> v c`, then `md <lock> C<cas>` if the item holds the owner | 2 |
/// | extend | `cas <lock> 0 <ttl+2> <len> <cas>` + `mg <lock> c v`, pipelined | 1 |
/// | extend_many (watchdog) | the same pairs, one pipeline per pooled connection (at least 64 leases each), all servers at once; after a slow reply, the renewed leases once more in one pipeline | 1 (2 after a slow reply) |
/// | wait | polling with jittered backoff, waking at the holder's expiry (`mg t`) | per attempt: 1 |
/// | inspect (owner, fencing token, seconds left, note) | `mg <lock> v t` + `mg <note> v`, pipelined | 1 |
/// | set_note (leader election's value) | `mg <note> c v` + `mg <lock> v`, then `cas <note>` (or `add`) | 2 (1 if not the holder's, or the same note is there; 2 more per lost race) |
/// | ping | `mn` on every server | 1 |
/// | semaphore / read-write lock: acquire, release, extend | `mg <object> c t v`, then `cas <object>` (the whole item rewritten) + `mg <object> c t v` | 2 (1 more to create the item; more per lost CAS race, see below) |
/// | the same, refused (or nothing to release or renew) | `mg <object> c t v` | 1 |
/// | the same, extend_many (watchdog) | one rewrite per object for all its leases, 64 objects per pipeline, all servers at once | 2 per 64 objects per server |
/// | the same, withdraw a waiting writer | as release | 1 or 2 |
/// | the same, inspect_holders | `mg <object> c t v` | 1 |
///
/// A new connection costs one more round trip (`version`, then `add` + `mg` of the identity
/// item, pipelined: to check the release, learn the server process and check that it hands
/// out CAS values). Release (two more) and extend (one more) need extra round trips only in
/// rare cases: the CAS changed and the item still holds our owner token, which happens when
/// an earlier renewal was applied but its reply was lost (a timeout); extend then takes the
/// new CAS and retries once, still CAS-guarded, and release falls back to the owner-checked
/// one, as it does when the connection reaches the server under another identity. A renewal
/// (mutex) or a read (semaphore, read-write lock) whose reply took longer than 100 ms costs
/// one more round trip, after a 50 ms pause (a winning acquisition whose `add` was slow waits
/// 50 ms before its second round trip): see "A stopped server" below.
///
/// The item-creating writes are the classic `add` and `cas` commands, not meta `ms`: when
/// memcached 1.6 cannot allocate the new item (a full server started with `-M`), `ms`
/// unlinks the existing item in every mode, so a contender's failed `ms ... ME` would delete
/// the holder's lock (tested in `tests/memcached/eviction.rs`). Classic `add` and `cas` leave it alone.
///
/// # Guarantees, and what memcached cannot promise
///
/// - **Exclusion** comes from `add`: the store keeps at most one item per key.
/// - **Release and extend are single atomic compare-and-act commands** (`md` with `C<cas>`,
///   classic `cas`), never a read followed by a write, so a holder whose lock expired and was
///   taken by someone else cannot delete or extend the new holder's lock.
/// - **Restarts.** memcached keeps nothing across a restart, and it restarts its CAS
///   counter, so an old lease's CAS could match a new holder's item. Each lease is bound to
///   the server process that issued it, identified by a random nonce the first client
///   stores in the server (not by pid and start time, which repeat for pid 1 in a container
///   restarted within a second; tested in `tests/memcached/identity.rs`); against any other process
///   extend returns `None` without sending anything, and release falls back to the
///   owner-checked one (after a restart it finds nothing and returns `false`; under a
///   replaced identity item it deletes our item). A held guard therefore reports the loss
///   at its next renewal, and no holder is ever told it still holds a lock a new client
///   has taken. Until that renewal, though, the old holder and a new one **can both believe
///   they hold the lock**: a restart silently frees every lock. (A warm restart with `-e`
///   restores the items, the identity item among them.) If the identity item itself is
///   evicted or deleted, the next connection stores a new nonce, and leases bound to the
///   old one are treated as lost on connections that know the new one: a spurious lost
///   signal (or, for an attempt caught between its two round trips, a spurious "held",
///   its item given back), never a double grant.
/// - **Eviction.** Under memory pressure memcached evicts items, locks included, even
///   before their TTL. The next renewal finds the item gone (or, if someone took the lock
///   since, another CAS) and the guard's lost-lock signal fires; until then, exclusion is
///   broken as after a restart.
/// - **Fencing tokens are best effort** ([`Fencing::BestEffort`]). They come from a per-name
///   counter incremented in the same pipeline as the `add`, so they strictly increase while
///   the server keeps the counter. A restart or an eviction loses it; the next attempt then
///   re-creates it at the attempting client's unix time in microseconds. That stays above
///   every earlier token as long as (a) fewer attempts were made on the lost counter than
///   microseconds passed between its creation and its re-creation, and (b) the re-creating
///   client's clock is not behind the clock of the client that created the lost counter by
///   more than that same interval (clocks kept in sync by NTP, never stepped back). Neither
///   is checked, hence "best effort". Attempts that find the lock held also draw a number,
///   so tokens have gaps. The lock item records its holder's token, which
///   [`DistributedLock::inspect`] reports.
/// - **TTLs** are whole seconds on the server: a TTL is rounded up to whole seconds (the
///   lease's TTL) and two more seconds are added to the expiry sent. memcached's clock is
///   `floor(monotonic seconds)`, refreshed by a once-a-second timer whose phase drifts, so
///   it can lag real time by up to two seconds and expire an item up to two seconds before
///   `received + expiry`. The lease's local deadline is `sent + TTL`, which the server
///   undercuts by at most the lateness of one of its timer firings (a few microseconds on
///   a healthy server; an overloaded one can be later, which the core's safety margin
///   before the lost signal absorbs); modelled in the unit test
///   `items_never_expire_before_the_local_deadline_on_a_lagging_server_clock`. The server
///   frees an abandoned lock between TTL and TTL + 2 s after it was set. TTLs run from 1 s
///   to 30 days minus 2 s (longer ones would be read as absolute times).
/// - **A stopped server** (SIGSTOP, a frozen VM or container). memcached's clock timer runs
///   in its main thread and does not run while the process is stopped; once it runs again,
///   its workers answer the requests that queued up during the stop before that timer has
///   refreshed the clock, so those requests see the clock of before the stop and an expiry
///   they set ends early, by up to the stop's length. A request that waited out a stop is
///   answered late (the time spent waiting for a free pooled connection does not count), so a
///   mutex renewal whose reply took longer than 100 ms is repeated after 50 ms, when the
///   clock has caught up (the lease keeps the first renewal's deadline; a repeat that finds
///   the item gone, because the refreshed clock ended it, reports the lock lost), and a
///   semaphore's or read-write lock's read of its item is made again in the same case. A
///   winning acquisition's second round trip rewrites its item after the `add` was answered
///   (50 ms after, if that answer was slow), which covers the acquisition. **Not covered:**
///   a request sent less than 100 ms before the server resumes is answered promptly and can
///   still meet the old clock, and so can a repeat if the server's main thread is starved of
///   CPU for longer than the pause; then, rarely, that lock can end early, by up to the
///   stop's length, while its holder believes it holds it. Tested in
///   `tests/memcached/paused_server.rs`.
/// - **Several servers**: each name lives on exactly one server (rendezvous hashing); there
///   is no replication, so losing a server loses (frees) the locks on it. There is no
///   failover either: while a server is down, its names fail with [`Error::Unavailable`],
///   because rerouting them would let clients with different views of the servers both
///   hold the same name. Every client must list the same servers (in any order).
/// - **Connect to memcached directly**, not through a proxy (mcrouter, twemproxy) or a TCP
///   load balancer: the restart protection learns the server process from its identity item
///   on each new connection, and a proxy may route that item and the lock items to different
///   servers, or to a replacement after a failover; behind a balancer, each process holds
///   its own locks. When a client's live connections to one address reach two processes (a
///   connection whose server still reads the identity it was opened with, while a newer
///   connection saw another), the address is refused from then on with
///   [`Error::InvalidConfig`]. A client that never has two connections open at once, or
///   clients that each reach one process only, cannot see it: this check is a safety net,
///   not a licence.
/// - **memcached 1.6.13 or later.** Before 1.6.13, `md <key> C<cas>` (the CAS-guarded delete
///   of every release) does not honour the CAS; a server that answers `version` with an
///   older release, or with something other than memcached's `<major>.<minor>.<patch>`
///   (another implementation of the protocol, whose meta commands may differ), is refused
///   when the connection opens with [`Error::InvalidConfig`].
/// - **CAS must be enabled.** A server started with `-C` answers CAS 0 to everything, so no
///   lock could be released or renewed; every connection to it fails with
///   [`Error::InvalidConfig`] (checked when the connection opens, so
///   [`DistributedLock::ping`] and [`MemcachedLock::connect`] report it).
///
/// # Semaphores and read-write locks
///
/// [`LockClient::semaphore`](distlock_core::LockClient::semaphore) and
/// [`LockClient::rw_lock`](distlock_core::LockClient::rw_lock) work on one item per object
/// (`ns:s:<name>`, `ns:w:<name>`: apart from each other and from the mutex of the same name)
/// whose value lists every hold (side: a permit, a read, the upgradeable read or the write
/// lock; owner token, end, fencing token, and a semaphore
/// hold's weight when it takes more than one permit), the waiting writers,
/// the semaphore's count and the object's fencing counter. Each change reads the item and
/// rewrites it with a classic `cas`, so:
///
/// - **Exact.** The weights of the live holds never add up to more than `permits`, under any
///   race between clients: two clients that read the same item cannot both write it. A hold
///   of several permits ([`Semaphore::acquire_many`](distlock_core::Semaphore::acquire_many))
///   is one record, taken only when that many are free at once, and released, renewed and
///   cleaned up by owner whole. A client that names another count
///   than the live holders gets [`Error::PermitsMismatch`], and once no holder is live a new
///   count is taken. A writer waits for every reader and writer; while a waiting writer is
///   recorded (its record renewed by each attempt of its wait, dropped when it wins or
///   withdraws, lapsing after its stay plus two seconds), no new reader gets in, plain or
///   upgradeable.
/// - **Upgradeable reads** ([`RwLock::upgradeable_read`](distlock_core::RwLock::upgradeable_read))
///   are a record of their own side in the same item: one at a time, beside plain readers,
///   never beside a writer. The upgrade is a write attempt by the same owner: it waits (as a
///   recorded waiting writer, keeping new readers out) until no other hold remains, then
///   replaces the upgradeable record with the write record, with a new fencing token, in one
///   CAS rewrite, so no writer comes between; renewing the old read lease then finds nothing.
///   The same round trips as any hold (2 per attempt).
/// - **Older clients** (before weighted permits and upgradeable reads) read items without
///   such records as before, and refuse an item holding one ([`Error::Backend`]) rather than
///   misread it: upgrade every client of a store before using either.
/// - **Holds end by the server's clock**, in whole seconds, like the mutex's items, with the
///   same two seconds of slack: the item is written with an absolute expiry that its value
///   repeats, so every read learns the server's clock from the `t` flag. No client's clock
///   decides whether a hold is live. Absolute expiries limit these primitives to
///   mid-December 2037: memcached 1.6 parses expiry times as 32-bit numbers (a write that
///   would not fit fails with [`Error::Backend`] instead of storing an item that vanishes).
/// - **Bounded.** One item keeps at most 512 holds (permits or readers), so no semaphore
///   can exceed 512 permits: a semaphore of
///   more permits, or a 513th reader, gets [`Error::NotSupported`]; at most 64 waiting
///   writers are recorded (the rest wait unrecorded, while the recorded ones keep readers
///   out). The item stays below 48 KiB.
/// - **Contention.** Every change of an object rewrites its one item, so clients changing
///   it at once race: the loser retries at once on the item its failed write brought back
///   (1 more round trip), then after random pauses (up to 0.5 ms, doubling to 32 ms) and a
///   new read (2 more each), so that colliding clients spread out. Each race lost means
///   another client's change went through. If the races go on until the operation timeout,
///   an attempt reports the object held ([`TryAcquire::Held`], no expiry hint: a waiter
///   polls again) and a release, renewal or withdrawal fails with [`Error::Unavailable`]
///   (the watchdog retries it).
/// - **Restarts and evictions lose every hold of the object at once**: the item is gone. A
///   renewal then finds no item (or a new one without its owner token) and returns `None`,
///   so every holder's lost-lock signal fires at its next renewal; until then, as for the
///   mutex, old and new holders can overlap. The read and the rewrite of one change go to the
///   same server process (a restarted one could hand out the same CAS for another item).
///   Fencing tokens come from the item's counter, which lives 30 days after the last write,
///   so it survives the object having no holders; when the item is lost, it is re-created at
///   the unix time in microseconds, best effort as for the mutex.
/// - Waiters poll, as for the mutex (a release wakes nobody in another process).
///
/// # Notes and leader election
///
/// [`DistributedLock::set_note`] (and so [`LockClient::election`](distlock_core::LockClient::election))
/// keeps the note in an item of its own beside the lock item, tagged with the hold's owner
/// token and fencing token: a renewal rewrites the lock item's whole value, which could not
/// keep a note. The note is stored only while the lock item holds the lease's owner token,
/// [`DistributedLock::inspect`] reports it only while the lock item still holds that same hold
/// (never for a later holder, nor after release or expiry), and renewals keep it. A stale
/// holder's write can never replace a later holder's note: it reads the note item before the
/// lock item and writes CAS-guarded. Notes are at most [`MAX_NOTE_BYTES`](crate::MAX_NOTE_BYTES)
/// (any UTF-8). The note item has no expiry (a hold can be renewed for longer than any expiry
/// it could be given): one per name that ever had a note, replaced by its next note. A
/// restart or an eviction loses it with the lock; an election's term is the hold's best-effort
/// fencing token.
///
/// # Ambiguous errors
///
/// An operation that fails with one of these may have been applied by the server:
///
/// - [`Error::Unavailable`] "did not answer within ..." (the operation timeout) or an i/o
///   error after the request was written (the connection was cut): the `add`, `cas` or
///   `md` may have run with its reply lost.
/// - [`Error::Backend`] from a reply we could not parse, or from a command refused after an
///   earlier one of the same attempt was applied: a winning `add` whose fencing counter or
///   token record a full `-M` server refused. The attempt gives the lock back before
///   returning, but that cleanup can fail too.
///
/// Not ambiguous: [`Error::InvalidConfig`] and [`Error::InvalidOptions`] (nothing was sent),
/// and [`Error::Unavailable`] while connecting (nothing was sent on that connection).
///
/// After an ambiguous `try_acquire`, `LockClient` releases with a lease of the same owner
/// token and no handle ([`Lease::new`]): [`DistributedLock::release`] then reads the item,
/// and deletes it with the CAS just read only if it holds that owner token (2 round
/// trips), so an applied `add` whose reply was lost is given back at once rather than at
/// its TTL, and another client's lock is never touched (tested in `tests/memcached/ambiguous.rs`). A
/// winning attempt whose second round trip fails gives the lock back the same way before
/// it returns the error.
///
/// # Mitigations
///
/// - Use a **dedicated** memcached instance (or pool) for locks, so cache traffic cannot
///   evict them, with memory to spare.
/// - Start it with **`-M`**, so that a full server returns errors instead of evicting held
///   locks: acquisitions fail with [`Error::Backend`], and so do renewals (a renewal writes
///   a new item); the watchdog keeps retrying and, if memory does not free up, the guard
///   reports `RenewalFailed` at its local deadline, before the server can free the item. The
///   loss is loud and never early. (Tested in `tests/memcached/eviction.rs`.)
/// - With `-M`, also start it with **`-o no_slab_reassign`**: the slab rebalancer (on by
///   default in 1.6) moves memory between slab classes, and an item it cannot move to a
///   new page is evicted, locks included, even under `-M`.
/// - Run it where its process is **never stopped** for long (no SIGSTOP from job control or a
///   debugger, no VM or container paused for seconds): see "A stopped server" above.
/// - After a crash, **delay the restart by the longest TTL in use**: every old holder's
///   renewals fail meanwhile, so each has seen its loss before the locks can be taken again.
/// - Treat fencing tokens as a second line of defence only. For locks that must survive a
///   restart, use a backend with [`Fencing::Monotonic`].
///
/// ```no_run
/// use distlock_core::{AcquireOptions, LockClient};
/// use distlock_memcached::MemcachedConfig;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let lock = MemcachedConfig::from_url("memcache://127.0.0.1:11211")?.build()?;
/// let client = LockClient::new(lock);
/// let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(5));
/// let guard = client.acquire_with("nightly-report", &opts).await?;
/// tokio::select! {
///     reason = guard.lost() => eprintln!("lost the lock: {reason}"),
///     _ = async { /* the protected work */ } => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MemcachedLock {
    inner: Arc<Inner>,
}

struct Inner {
    config: MemcachedConfig,
    servers: Vec<Server>,
    keys: Keys,
}

impl MemcachedLock {
    pub(crate) fn from_config(config: MemcachedConfig) -> Self {
        let servers = config
            .servers()
            .iter()
            .map(|addr| Server::new(addr.clone(), config.max_connections(), config.connect_timeout()))
            .collect();
        Self {
            inner: Arc::new(Inner {
                keys: Keys::new(config.namespace()),
                servers,
                config,
            }),
        }
    }

    /// A client of the servers in `url` (`memcache://host:port[,host:port...]`) with the
    /// default settings, after checking that every server answers a no-op.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL; [`Error::Unavailable`] if a server does not
    /// answer within the operation timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        let lock = MemcachedConfig::from_url(url)?.build()?;
        lock.ping().await?;
        Ok(lock)
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &MemcachedConfig {
        &self.inner.config
    }

    /// The key of `name`'s lock item (for operators and tests; see the key layout).
    pub fn lock_key(&self, name: &LockName) -> String {
        self.inner.keys.lock_key(&self.inner.keys.encoded(name))
    }

    /// The key of `name`'s fencing counter.
    pub fn fence_key(&self, name: &LockName) -> String {
        self.inner.keys.fence_key(&self.inner.keys.encoded(name))
    }

    /// The server (`host:port`) that holds `name`'s items.
    pub fn server_of(&self, name: &LockName) -> &str {
        self.locate(name).server.addr()
    }

    /// The key of the semaphore `name`'s item, or of the read-write lock `name`'s (for
    /// operators and tests; see the key layout). [`Primitive::Mutex`] gives
    /// [`lock_key`](Self::lock_key).
    pub fn object_key(&self, name: &LockName, primitive: Primitive) -> String {
        self.object_index(name, primitive).1
    }

    /// The servers, in the configuration's order.
    pub(crate) fn servers(&self) -> &[Server] {
        &self.inner.servers
    }

    /// The key builder of this client's namespace.
    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The server (by index) and the key of the `primitive` object `name`.
    pub(crate) fn object_index(&self, name: &LockName, primitive: Primitive) -> (usize, String) {
        let encoded = self.inner.keys.encoded(name);
        let index = keys::route(&encoded, self.inner.servers.iter().map(Server::addr));
        (index, self.inner.keys.object_key(&encoded, primitive))
    }

    /// The server and the key of the `primitive` object `name`.
    pub(crate) fn object_at(&self, name: &LockName, primitive: Primitive) -> (&Server, String) {
        let (index, key) = self.object_index(name, primitive);
        (&self.inner.servers[index], key)
    }
}

#[async_trait]
impl DistributedLock for MemcachedLock {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::BestEffort, WakeUp::Polling)
            .with_ttl_granularity(Duration::from_secs(1))
            .with_ttl_range(MIN_TTL, MAX_TTL)
            .with_primitives(true, true)
            .with_weights_and_upgrades(true, true)
            .with_notes(true)
    }

    /// The mutex goes to the mutex's item (its waiter is not recorded: memcached wakes no
    /// one); a permit, read or write to its object's item (`holders.rs`).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let Attempt {
            name,
            kind,
            owner,
            ttl,
            ..
        } = attempt;
        match kind {
            LockKind::Exclusive => self.acquire_once(name, *owner, *ttl).await,
            kind => {
                self.acquire_hold(name, *kind, *owner, *ttl, attempt.waiter_parts())
                    .await
            }
        }
    }

    /// The mutex's lease goes to the mutex's item; a permit, read or write lease to its
    /// object's item (`holders.rs`).
    async fn release(&self, lease: &Lease) -> Result<bool> {
        match lease.kind() {
            LockKind::Exclusive => self.release_once(lease).await,
            _ => self.release_hold(lease).await,
        }
    }

    /// The mutex's leases as before (64 per pipeline), the others one rewrite per object (64
    /// objects per pipeline); both at once.
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let (mutex, holds): (Vec<usize>, Vec<usize>) =
            (0..leases.len()).partition(|&i| leases[i].kind() == LockKind::Exclusive);
        if holds.is_empty() {
            return self.extend_all(leases).await;
        }
        let mutex_leases: Vec<Lease> = mutex.iter().map(|&i| leases[i].clone()).collect();
        let (renewed_mutex, renewed_holds) =
            futures::join!(self.extend_all(&mutex_leases), self.extend_holds(leases, &holds));
        let mut results: Vec<Option<Result<Option<Lease>>>> = leases.iter().map(|_| None).collect();
        for (i, outcome) in mutex.into_iter().zip(renewed_mutex) {
            results[i] = Some(outcome);
        }
        for (i, outcome) in renewed_holds {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(BACKEND, "a renewal got no result"))))
            .collect()
    }

    /// The note goes to an item of its own beside the lock item, tagged with the hold
    /// (`note.rs`).
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.set_note_once(lease, note).await
    }

    /// Polling, for every primitive: memcached publishes nothing. **0 round trips.**
    async fn watch(&self, _name: &LockName, _primitive: Primitive) -> Result<ReleaseWatch> {
        Ok(self.release_watch())
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.withdraw_waiter(name, kind, waiter).await
    }

    /// The mutex's item, or the object's item's live holders.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        match primitive {
            Primitive::Mutex => self.inspect_once(name).await.map(ObjectState::from),
            primitive => self.holders_of(name, primitive).await.map(ObjectState::held_by),
        }
    }

    /// `memcache://<servers>#<namespace>`: a release by a client of this process wakes one of
    /// this process's waiters at once.
    fn store_identity(&self) -> Option<String> {
        let config = &self.inner.config;
        Some(format!(
            "memcache://{}#{}",
            config.servers().join(","),
            config.namespace()
        ))
    }

    async fn ping(&self) -> Result<()> {
        self.ping_all().await
    }
}

impl fmt::Debug for MemcachedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedLock")
            .field("servers", &self.inner.config.servers())
            .field("namespace", &self.inner.config.namespace())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_match_the_server() {
        let lock = MemcachedConfig::from_url("memcache://127.0.0.1:1")
            .and_then(MemcachedConfig::build)
            .expect("valid");
        let caps = lock.capabilities();
        assert_eq!(caps.fencing, Fencing::BestEffort);
        assert_eq!(caps.wake_up, WakeUp::Polling);
        assert_eq!(caps.ttl_granularity, Duration::from_secs(1));
        assert_eq!((caps.min_ttl, caps.max_ttl), (MIN_TTL, MAX_TTL));
        assert!(caps.validate_ttl(Duration::from_secs(31 * 24 * 3600)).is_err());
        assert!(caps.semaphores && caps.rw_locks);
        assert!(caps.notes && caps.weighted_permits && caps.upgradeable_reads);
    }
}
