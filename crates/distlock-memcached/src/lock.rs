//! [`MemcachedLock`]: the lock primitives on memcached's meta protocol.
//!
//! Key layout (details in `keys.rs`): for namespace `ns` and lock name `n`,
//! - `ns:l:<enc(n)>` = `<owner token> <fencing token>` (the owner token is a UUID; the
//!   fencing token is added by the winning acquisition's second round trip), expiry = the
//!   TTL rounded up to whole seconds **plus two seconds** (see "TTLs" on [`MemcachedLock`]);
//! - `ns:f:<enc(n)>` = the fencing counter, an `incr` counter seeded with the unix time in
//!   microseconds when it is (re)created, expiry 30 days, refreshed on each use;
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
//! Operations, top to bottom: acquire, release, extend, wait.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Fencing, FencingToken, Holder, Lease, LockKind, LockName,
    LockState, ObjectState, OwnerToken, Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};
use futures::future::join_all;
use tokio::time::Instant;

use crate::config::MemcachedConfig;
use crate::keys::{self, Keys};
use crate::pool::Server;
use crate::wire::{Batch, Code, Epoch, Reply, WireError};

pub(crate) const BACKEND: &str = "memcached";

/// memcached reads an expiry above 30 days as an absolute unix time.
pub(crate) const SERVER_MAX_RELATIVE_SECS: u64 = 30 * 24 * 3600;
/// Added to every expiry we send. memcached's clock is `floor(monotonic seconds)` sampled by
/// a once-a-second timer whose phase drifts (each firing re-arms it), so it can lag real
/// time by up to two seconds, and an item can expire up to two seconds before
/// `received + expiry` (one second with a perfectly periodic timer, two when the drift
/// carries the monotonic clock's fraction across a whole second). With two extra seconds the
/// server keeps the item at least until the lease's local deadline (`sent + TTL`), less the
/// lateness of one timer firing (modelled in the unit tests).
pub(crate) const EXPIRY_SLACK_SECS: u64 = 2;
/// Leases per pipelined renewal batch.
pub(crate) const EXTEND_BATCH: usize = 64;
/// The fencing counter's expiry (refreshed on every acquisition attempt).
const COUNTER_TTL_SECS: u32 = 30 * 24 * 3600;

/// The shortest TTL: one second, memcached's granularity.
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// The longest TTL: 30 days minus the two seconds of expiry slack (a longer relative expiry
/// would be read as an absolute unix time).
pub const MAX_TTL: Duration = Duration::from_secs(SERVER_MAX_RELATIVE_SECS - EXPIRY_SLACK_SECS);

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
/// | extend_many (watchdog) | the same pairs for up to 64 leases per pipeline, all servers at once | 1 per 64 leases per server |
/// | wait | polling with jittered backoff, waking at the holder's expiry (`mg t`) | per attempt: 1 |
/// | inspect (owner, fencing token, seconds left) | `mg <lock> v t` | 1 |
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
/// one, as it does when the connection reaches the server under another identity.
///
/// The item-creating writes are the classic `add` and `cas` commands, not meta `ms`: when
/// memcached 1.6 cannot allocate the new item (a full server started with `-M`), `ms`
/// unlinks the existing item in every mode, so a contender's failed `ms ... ME` would delete
/// the holder's lock (tested in `tests/eviction.rs`). Classic `add` and `cas` leave it alone.
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
///   restarted within a second; tested in `tests/identity.rs`); against any other process
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
/// whose value lists every hold (side, owner token, end, fencing token), the waiting writers,
/// the semaphore's count and the object's fencing counter. Each change reads the item and
/// rewrites it with a classic `cas`, so:
///
/// - **Exact.** At most `permits` live holders, under any race between clients: two
///   clients that read the same item cannot both write it. A client that names another count
///   than the live holders gets [`Error::PermitsMismatch`], and once no holder is live a new
///   count is taken. A writer waits for every reader and writer; while a waiting writer is
///   recorded (its record renewed by each attempt of its wait, dropped when it wins or
///   withdraws, lapsing after its stay plus two seconds), no new reader gets in.
/// - **Holds end by the server's clock**, in whole seconds, like the mutex's items, with the
///   same two seconds of slack: the item is written with an absolute expiry that its value
///   repeats, so every read learns the server's clock from the `t` flag. No client's clock
///   decides whether a hold is live. Absolute expiries limit these primitives to
///   mid-December 2037: memcached 1.6 parses expiry times as 32-bit numbers (a write that
///   would not fit fails with [`Error::Backend`] instead of storing an item that vanishes).
/// - **Bounded.** One item keeps at most 512 holds (permits or readers): a semaphore of
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
/// its TTL, and another client's lock is never touched (tested in `tests/ambiguous.rs`). A
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
///   loss is loud and never early. (Tested in `tests/eviction.rs`.)
/// - With `-M`, also start it with **`-o no_slab_reassign`**: the slab rebalancer (on by
///   default in 1.6) moves memory between slab classes, and an item it cannot move to a
///   new page is evicted, locks included, even under `-M`.
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

/// Where one lock name lives.
struct Located<'a> {
    server: &'a Server,
    lock_key: String,
    fence_key: String,
}

/// What a lease carries in its handle: the item's CAS and the issuing server process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Handle {
    cas: u64,
    epoch: Epoch,
}

impl Handle {
    fn encode(self) -> String {
        format!("cas={};server={:032x}", self.cas, self.epoch.nonce)
    }

    fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split(';');
        let cas = parts.next()?.strip_prefix("cas=")?.parse().ok()?;
        let nonce = parts.next()?.strip_prefix("server=")?;
        let nonce = u128::from_str_radix(nonce, 16).ok()?;
        Some(Self {
            cas,
            epoch: Epoch { nonce },
        })
    }

    fn of(lease: &Lease) -> Result<Self> {
        lease.handle().and_then(Self::decode).ok_or_else(|| {
            Error::backend(
                BACKEND,
                "the lease was not issued by the memcached backend (no CAS handle)",
            )
        })
    }
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

    fn locate(&self, name: &LockName) -> Located<'_> {
        let encoded = self.inner.keys.encoded(name);
        let index = keys::route(&encoded, self.inner.servers.iter().map(Server::addr));
        Located {
            server: &self.inner.servers[index],
            lock_key: self.inner.keys.lock_key(&encoded),
            fence_key: self.inner.keys.fence_key(&encoded),
        }
    }

    /// Sends `batch` on one connection to `server` and reads every reply, all within the
    /// operation timeout. With `bound_to`, sends nothing and returns `None` if the
    /// connection reaches another server process than the lease's.
    pub(crate) async fn exchange(
        &self,
        server: &Server,
        batch: &Batch,
        bound_to: Option<Epoch>,
    ) -> Result<Option<(Epoch, Vec<Reply>)>> {
        let (epoch, replies) = self
            .exchange_with(server, |epoch| {
                bound_to.is_none_or(|bound| bound == epoch).then_some(batch)
            })
            .await?;
        Ok(replies.map(|replies| (epoch, replies)))
    }

    /// The general form of [`exchange`](Self::exchange): `build` sees which server process
    /// the connection reaches before anything is sent, and returns the batch to send, or
    /// `None` to send nothing.
    async fn exchange_with<'b>(
        &self,
        server: &Server,
        build: impl FnOnce(Epoch) -> Option<&'b Batch>,
    ) -> Result<(Epoch, Option<Vec<Reply>>)> {
        let limit = self.inner.config.operation_timeout();
        let work = async {
            let mut checkout = server.checkout().await?;
            let epoch = checkout.conn().epoch();
            let Some(batch) = build(epoch) else {
                checkout.put_back();
                return Ok((epoch, None));
            };
            let replies = checkout.conn().exchange(batch).await?;
            // A refused command may leave its data block unread: do not reuse that stream.
            if !replies.iter().any(|r| matches!(r.code, Code::Refused(_))) {
                checkout.put_back();
            }
            Ok::<_, WireError>((epoch, Some(replies)))
        };
        match tokio::time::timeout(limit, work).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(WireError::Io(e))) => Err(Error::unavailable(BACKEND, format!("{}: {e}", server.addr()))),
            Ok(Err(WireError::Protocol(e))) => {
                Err(Error::backend(BACKEND, format!("{}: {e}", server.addr())))
            }
            Ok(Err(WireError::Unusable(e))) => Err(Error::invalid_config(format!("{}: {e}", server.addr()))),
            Err(_) => Err(Error::unavailable(
                BACKEND,
                format!("{} did not answer within {limit:?}", server.addr()),
            )),
        }
    }

    /// [`exchange`](Self::exchange) on whatever process the server runs now.
    pub(crate) async fn exchange_any(&self, server: &Server, batch: &Batch) -> Result<(Epoch, Vec<Reply>)> {
        match self.exchange(server, batch, None).await? {
            Some(outcome) => Ok(outcome),
            None => Err(Error::backend(BACKEND, "an unbound exchange was refused")),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Acquire

    /// One `add` of the owner token, pipelined with a read of the item (its CAS if the add
    /// won, the holder's remaining TTL if it lost) and the fencing counter's increment.
    /// **1 round trip when the lock is held, 2 when the attempt wins** (the second records
    /// the token in the item, see [`record_token`](Self::record_token)); one more on a new
    /// connection.
    pub(crate) async fn acquire_once(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
    ) -> Result<TryAcquire> {
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        let at = self.locate(name);
        let owner_text = owner.to_string();
        let mut batch = Batch::new();
        batch.add(&at.lock_key, owner_text.as_bytes(), expiry);
        batch.get(&at.lock_key, "c t v");
        batch.incr_or_seed(&at.fence_key, fence_seed(), COUNTER_TTL_SECS);
        let sent_at = Instant::now();
        let (epoch, replies) = self.exchange_any(at.server, &batch).await?;
        let [added, item, fenced] = replies.as_slice() else {
            return Err(unexpected(at.server, "three replies", &replies));
        };
        match &added.code {
            Code::Hd => {}
            Code::Ns => return Ok(TryAcquire::Held(holder_from(item))),
            Code::Refused(message) => return Err(refused(at.server, message)),
            _ => return Err(unexpected(at.server, "STORED or NOT_STORED", added)),
        }
        // Stored. The read right behind it on the same connection sees our item, unless it
        // vanished in between (deleted, or evicted at once): then we never held it usefully.
        let cas = match (&item.code, item.text()) {
            (Code::Va, Some(value)) if value == owner_text => item
                .flag_num::<u64>('c')
                .ok_or_else(|| unexpected(at.server, "a CAS", item))?,
            _ => return Ok(TryAcquire::Held(holder_from(item))),
        };
        let handle = Handle { cas, epoch };
        let token = match fenced.code {
            Code::Va => fenced.text().and_then(|t| t.trim().parse::<u64>().ok()),
            _ => None,
        };
        let Some(token) = token else {
            // Ours, but without a token: give it back rather than hand out an unfenced lease
            // (a full `-M` server refuses to create the counter, for example).
            let _ = self.delete_if_cas(&at, handle).await;
            return Err(Error::backend(
                BACKEND,
                format!(
                    "{}: the fencing counter failed: {:?}",
                    at.server.addr(),
                    fenced.code
                ),
            ));
        };
        let lease = Lease::new(name.clone(), owner, lease_ttl, sent_at)
            .with_fencing(FencingToken::new(token))
            .with_handle(handle.encode());
        self.record_token(&at, lease, handle, expiry).await
    }

    /// The winner's second round trip: `cas <lock>` rewrites the item as `<owner> <token>`
    /// (so that [`DistributedLock::inspect`] shows the holder's token), pipelined with
    /// `mg <lock> c v` for the new CAS. The token cannot be in the `add` itself: it must be
    /// drawn after the `add` won, or an earlier attempt's token could reach a later holder.
    /// **1 round trip**; 3 when the item is no longer as we wrote it (then the attempt
    /// reports the lock held, after giving back our item if it still holds our token).
    async fn record_token(
        &self,
        at: &Located<'_>,
        lease: Lease,
        handle: Handle,
        expiry: u32,
    ) -> Result<TryAcquire> {
        let mut batch = Batch::new();
        batch.replace_if_cas(&at.lock_key, item_value(&lease).as_bytes(), expiry, handle.cas);
        batch.get(&at.lock_key, "c v");
        let outcome = match self.exchange(at.server, &batch, Some(handle.epoch)).await {
            Ok(Some((_, replies))) => match replies.as_slice() {
                [stored, item] => renewal_outcome(
                    at.server,
                    &lease,
                    handle,
                    lease.ttl(),
                    lease.acquired_at(),
                    stored,
                    item,
                ),
                _ => Err(unexpected(at.server, "two replies", &replies)),
            },
            Ok(None) => Ok(Renewal::Done(None)), // the server restarted in between
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Renewal::Done(Some(recorded))) => Ok(TryAcquire::Acquired(recorded)),
            // Deleted, replaced or restarted away within the round trip, or rewritten by
            // another write: not ours to report held. An item that still holds our owner
            // token (a changed CAS, or the same process under a new identity) goes back now,
            // or it would keep every client out until its TTL ran out.
            Ok(Renewal::Done(None) | Renewal::RetryWith(_)) => {
                self.release_by_owner(at, lease.owner()).await?;
                Ok(TryAcquire::Held(Holder::unknown()))
            }
            Err(e) => {
                // Refused (a full `-M` server) or no answer: give the lock back if we can.
                // The `cas` may have been applied with its reply lost, which changed the
                // item's CAS: find the item by our owner token, not by the CAS we sent.
                let _ = self.release_by_owner(at, lease.owner()).await;
                Err(e)
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Release

    /// `md <lock> C<cas>` on the lease's server process: deletes only the item this lease
    /// created (or renewed). **1 round trip**; 3 when the CAS no longer matches (the
    /// lost-renewal-reply case described on [`MemcachedLock`]) or the connection reaches the
    /// server under another identity. A lease without a handle (built with [`Lease::new`]
    /// after an acquisition attempt whose outcome is unknown) is released by its owner token.
    ///
    /// Both fallbacks are the owner-checked release
    /// ([`release_by_owner`](Self::release_by_owner)): another identity is a restart (the
    /// item died with the old process, and the read finds nothing) or the same process whose
    /// identity item was evicted or deleted (our item is still there and must go).
    async fn release_once(&self, lease: &Lease) -> Result<bool> {
        let at = self.locate(lease.name());
        if lease.handle().is_none() {
            return self.release_by_owner(&at, lease.owner()).await;
        }
        let handle = Handle::of(lease)?;
        match self.delete_if_cas(&at, handle).await? {
            Some(Code::Hd) => Ok(true),
            Some(Code::Nf) => Ok(false),
            None | Some(Code::Ex) => self.release_by_owner(&at, lease.owner()).await,
            Some(Code::Refused(message)) => Err(refused(at.server, &message)),
            Some(other) => Err(Error::backend(
                BACKEND,
                format!("{}: unexpected reply {other:?} to md", at.server.addr()),
            )),
        }
    }

    /// Owner-checked release without a CAS: `mg <lock> v c` on whatever server process runs
    /// now, then, only if the item holds `owner`'s token, `md <lock> C<cas>` with the CAS
    /// just read, bound to that same process. Owner tokens are random and never reused, so
    /// an item holding ours was written by us; the delete stays CAS-guarded, so an item that
    /// expired and was taken by another client in between is left alone. **2 round trips**
    /// (more if our own in-flight write changes the CAS in between: up to 3 reads).
    async fn release_by_owner(&self, at: &Located<'_>, owner: OwnerToken) -> Result<bool> {
        let owner = owner.to_string();
        for _ in 0..3 {
            let mut batch = Batch::new();
            batch.get(&at.lock_key, "v c");
            let (epoch, replies) = self.exchange_any(at.server, &batch).await?;
            let Some(item) = replies.first() else {
                return Err(unexpected(at.server, "one reply", &replies));
            };
            let cas = match &item.code {
                Code::Va if item.text().map(owner_of) == Some(owner.as_str()) => item
                    .flag_num::<u64>('c')
                    .ok_or_else(|| unexpected(at.server, "a CAS", item))?,
                Code::Va | Code::En => return Ok(false), // another holder's, or free
                Code::Refused(message) => return Err(refused(at.server, message)),
                _ => return Err(unexpected(at.server, "VA or EN", item)),
            };
            match self.delete_if_cas(at, Handle { cas, epoch }).await? {
                // Another process (or identity) on this connection: read again there; after
                // a restart the read finds nothing.
                None => continue,
                Some(Code::Hd) => return Ok(true),
                Some(Code::Nf) => return Ok(false),
                Some(Code::Ex) => continue, // rewritten in between: read it again
                Some(Code::Refused(message)) => return Err(refused(at.server, &message)),
                Some(other) => {
                    return Err(Error::backend(
                        BACKEND,
                        format!("{}: unexpected reply {other:?} to md", at.server.addr()),
                    ))
                }
            }
        }
        Err(Error::backend(
            BACKEND,
            format!(
                "{}: the lock item holding our owner token, or the server's identity, kept \
                 changing during its release",
                at.server.addr()
            ),
        ))
    }

    async fn delete_if_cas(&self, at: &Located<'_>, handle: Handle) -> Result<Option<Code>> {
        let mut batch = Batch::new();
        batch.delete_if_cas(&at.lock_key, handle.cas);
        Ok(self
            .exchange(at.server, &batch, Some(handle.epoch))
            .await?
            .and_then(|(_, replies)| replies.into_iter().next())
            .map(|reply| reply.code))
    }

    // ---------------------------------------------------------------------------------------
    // Extend

    /// `cas <lock> 0 <ttl+1> <len> <cas>` with our owner token on the lease's server
    /// process: rewrites the item with the new expiry only if it is still the one we wrote,
    /// pipelined with `mg <lock> c v` to learn the new CAS. **1 round trip**; 2 in the
    /// lost-renewal-reply case (the pipelined read already shows whether the item is ours).
    async fn extend_once(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        let mut handle = Handle::of(lease)?;
        let (lease_ttl, expiry) = ttl_on_server(ttl)?;
        let at = self.locate(lease.name());
        let value = item_value(lease);
        for attempt in 0..2 {
            let mut batch = Batch::new();
            batch.replace_if_cas(&at.lock_key, value.as_bytes(), expiry, handle.cas);
            batch.get(&at.lock_key, "c v");
            let sent_at = Instant::now();
            let Some((_, replies)) = self.exchange(at.server, &batch, Some(handle.epoch)).await? else {
                return Ok(None);
            };
            let [stored, item] = replies.as_slice() else {
                return Err(unexpected(at.server, "two replies", &replies));
            };
            match renewal_outcome(at.server, lease, handle, lease_ttl, sent_at, stored, item)? {
                Renewal::Done(outcome) => return Ok(outcome),
                Renewal::RetryWith(cas) if attempt == 0 => handle.cas = cas,
                Renewal::RetryWith(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The watchdog's batch renewal: per server, up to 64 leases' `cas` + `mg` pairs in one
    /// pipeline, the pipelines of all servers and chunks in flight at once. **1 round trip
    /// per server and 64 leases**; a lease in the lost-renewal-reply case is retried alone.
    async fn extend_all(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); self.inner.servers.len()];
        for (i, lease) in leases.iter().enumerate() {
            let encoded = self.inner.keys.encoded(lease.name());
            groups[keys::route(&encoded, self.inner.servers.iter().map(Server::addr))].push(i);
        }
        let chunks = groups
            .iter()
            .enumerate()
            .flat_map(|(server, indices)| indices.chunks(EXTEND_BATCH).map(move |chunk| (server, chunk)));
        let outcomes = join_all(chunks.map(|(server, chunk)| async move {
            let outcomes = self
                .extend_chunk(&self.inner.servers[server], leases, chunk)
                .await;
            chunk.iter().copied().zip(outcomes).collect::<Vec<_>>()
        }))
        .await;
        let mut results: Vec<Option<Result<Option<Lease>>>> = leases.iter().map(|_| None).collect();
        let mut retry = Vec::new();
        for (i, outcome) in outcomes.into_iter().flatten() {
            match outcome {
                Ok(Renewal::Done(done)) => results[i] = Some(Ok(done)),
                Ok(Renewal::RetryWith(_)) => retry.push(i),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let retried = join_all(
            retry
                .iter()
                .map(|&i| self.extend_once(&leases[i], leases[i].ttl())),
        )
        .await;
        for (i, outcome) in retry.into_iter().zip(retried) {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend(BACKEND, "a renewal got no result"))))
            .collect()
    }

    async fn extend_chunk(&self, server: &Server, leases: &[Lease], chunk: &[usize]) -> Vec<Result<Renewal>> {
        // What each lease needs, or why it cannot be renewed at all.
        let prepared: Vec<Result<(Handle, Duration, u32, String)>> = chunk
            .iter()
            .map(|&i| {
                let lease = &leases[i];
                let handle = Handle::of(lease)?;
                let (lease_ttl, expiry) = ttl_on_server(lease.ttl())?;
                let key = self.inner.keys.lock_key(&self.inner.keys.encoded(lease.name()));
                Ok((handle, lease_ttl, expiry, key))
            })
            .collect();
        let mut sent = Vec::new(); // positions in `chunk` that went out, in pipeline order
        let mut batch = Batch::new();
        let sent_at = Instant::now();
        let exchanged = self
            .exchange_with(server, |epoch| {
                for (pos, prep) in prepared.iter().enumerate() {
                    if let Ok((handle, _, expiry, key)) = prep {
                        if handle.epoch == epoch {
                            let value = item_value(&leases[chunk[pos]]);
                            batch.replace_if_cas(key, value.as_bytes(), *expiry, handle.cas);
                            batch.get(key, "c v");
                            sent.push(pos);
                        }
                    }
                }
                (!sent.is_empty()).then_some(&batch)
            })
            .await;
        let mut replies = match exchanged {
            Ok((_, replies)) => replies.unwrap_or_default().into_iter(),
            Err(e) => {
                return prepared
                    .into_iter()
                    .map(|p| p.and_then(|_| Err(e.duplicate())))
                    .collect()
            }
        };
        let mut outcomes: Vec<Result<Renewal>> = prepared
            .iter()
            .map(|p| match p {
                // Not sent: the lease's server process is gone, and its lock with it.
                Ok(_) => Ok(Renewal::Done(None)),
                Err(e) => Err(e.duplicate()),
            })
            .collect();
        for pos in sent {
            let (Some(stored), Some(item)) = (replies.next(), replies.next()) else {
                outcomes[pos] = Err(Error::backend(BACKEND, "a pipelined renewal got no reply"));
                continue;
            };
            if let Ok((handle, lease_ttl, _, _)) = &prepared[pos] {
                let lease = &leases[chunk[pos]];
                outcomes[pos] = renewal_outcome(server, lease, *handle, *lease_ttl, sent_at, &stored, &item);
            }
        }
        outcomes
    }

    // ---------------------------------------------------------------------------------------
    // Wait

    /// memcached publishes nothing on release or expiry, so waiters poll: `LockClient` backs
    /// off with jitter between attempts (`AcquireOptions::poll_interval`, 10 ms to 500 ms by
    /// default) and wakes at the holder's expiry, which every failed attempt learns from the
    /// `mg <lock> c t v` in its pipeline. **0 round trips** to subscribe; each retry is one
    /// acquisition attempt (1 round trip).
    fn release_watch(&self) -> ReleaseWatch {
        ReleaseWatch::polling()
    }

    /// `mg <lock> v t`: the owner token, the holder's fencing token and the whole seconds
    /// left. **1 round trip.**
    pub(crate) async fn inspect_once(&self, name: &LockName) -> Result<LockState> {
        let at = self.locate(name);
        let mut batch = Batch::new();
        batch.get(&at.lock_key, "v t");
        let (_, replies) = self.exchange_any(at.server, &batch).await?;
        let Some(reply) = replies.first() else {
            return Err(unexpected(at.server, "one reply", &replies));
        };
        match &reply.code {
            Code::Va => {
                let value = String::from_utf8_lossy(reply.value.as_deref().unwrap_or_default()).into_owned();
                let token = value
                    .split_once(' ')
                    .and_then(|(_, token)| token.parse::<u64>().ok())
                    .map(FencingToken::new);
                Ok(LockState::held(
                    owner_of(&value).to_owned(),
                    token,
                    remaining(reply),
                ))
            }
            Code::En => Ok(LockState::free(None)),
            Code::Refused(message) => Err(refused(at.server, message)),
            _ => Err(unexpected(at.server, "VA or EN", reply)),
        }
    }

    /// `mn` on every server, concurrently. **1 round trip.**
    async fn ping_all(&self) -> Result<()> {
        let pings = self.inner.servers.iter().map(|server| async move {
            let mut batch = Batch::new();
            batch.noop();
            let (_, replies) = self.exchange_any(server, &batch).await?;
            match replies.first().map(|r| &r.code) {
                Some(Code::Mn) => Ok(()),
                _ => Err(unexpected(server, "MN", &replies)),
            }
        });
        join_all(pings).await.into_iter().collect()
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

/// What one renewal's replies (`cas`, then `mg c v`) mean.
enum Renewal {
    /// Renewed (the new lease) or not ours (`None`).
    Done(Option<Lease>),
    /// The CAS changed but the item still holds our token: an earlier renewal was applied
    /// and its reply lost. Retry with this CAS.
    RetryWith(u64),
}

fn renewal_outcome(
    server: &Server,
    lease: &Lease,
    handle: Handle,
    lease_ttl: Duration,
    sent_at: Instant,
    stored: &Reply,
    item: &Reply,
) -> Result<Renewal> {
    // Within one server process only we ever write our owner token.
    let owner = lease.owner().to_string();
    let ours = match (&item.code, item.text()) {
        (Code::Va, Some(value)) if owner_of(value) == owner => item.flag_num::<u64>('c'),
        _ => None,
    };
    match (&stored.code, ours) {
        (Code::Hd, Some(cas)) => {
            let renewed = Handle { cas, ..handle };
            Ok(Renewal::Done(Some(
                lease.renewed(lease_ttl, sent_at).with_handle(renewed.encode()),
            )))
        }
        (Code::Ex, Some(cas)) => Ok(Renewal::RetryWith(cas)),
        (Code::Hd | Code::Ex | Code::Nf, _) => Ok(Renewal::Done(None)),
        (Code::Refused(message), _) => Err(refused(server, message)),
        _ => Err(unexpected(server, "STORED, EXISTS or NOT_FOUND", stored)),
    }
}

/// The lock item's value: `<owner> <fencing token>` (just `<owner>` between the `add` and
/// the acquisition's second round trip).
fn item_value(lease: &Lease) -> String {
    match lease.fencing_token() {
        Some(token) => format!("{} {token}", lease.owner()),
        None => lease.owner().to_string(),
    }
}

/// The owner part of a lock item's value.
fn owner_of(value: &str) -> &str {
    value.split(' ').next().unwrap_or(value)
}

/// The lease's TTL (rounded up to whole seconds) and the expiry to send (two seconds more).
pub(crate) fn ttl_on_server(ttl: Duration) -> Result<(Duration, u32)> {
    if ttl.is_zero() {
        return Err(Error::invalid_options("the TTL must be greater than zero"));
    }
    let secs = ttl.as_secs().saturating_add(u64::from(ttl.subsec_nanos() > 0));
    let expiry = secs.saturating_add(EXPIRY_SLACK_SECS);
    if expiry > SERVER_MAX_RELATIVE_SECS {
        return Err(Error::invalid_options(format!(
            "a TTL of {ttl:?} is longer than memcached can hold ({MAX_TTL:?})"
        )));
    }
    let expiry = u32::try_from(expiry).map_err(|_| Error::invalid_options("TTL out of range"))?;
    Ok((Duration::from_secs(secs), expiry))
}

/// The seed of a (re)created fencing counter: the unix time in microseconds.
pub(crate) fn fence_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
        .unwrap_or(1)
}

/// What a failed add learned about the holder from `mg <lock> c t v`.
fn holder_from(probe: &Reply) -> Holder {
    match probe.code {
        Code::Hd | Code::Va => remaining(probe).map_or_else(Holder::unknown, Holder::expiring_in),
        // Gone between the add and the read: worth retrying at once.
        Code::En => Holder::expiring_in(Duration::ZERO),
        _ => Holder::unknown(),
    }
}

/// The `t` flag: whole seconds left (the item expires within the last of them), `-1` for an
/// item without expiry (not one of ours).
fn remaining(reply: &Reply) -> Option<Duration> {
    reply
        .flag_num::<i64>('t')
        .and_then(|t| u64::try_from(t).ok())
        .map(Duration::from_secs)
}

pub(crate) fn refused(server: &Server, message: &str) -> Error {
    Error::backend(
        BACKEND,
        format!("{} refused the command: {message}", server.addr()),
    )
}

pub(crate) fn unexpected(server: &Server, wanted: &str, got: &impl fmt::Debug) -> Error {
    Error::backend(
        BACKEND,
        format!("{}: expected {wanted}, got {got:?}", server.addr()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_round_up_and_get_two_seconds_of_slack() {
        let ok = |ms| ttl_on_server(Duration::from_millis(ms)).expect("valid");
        assert_eq!(ok(1), (Duration::from_secs(1), 3));
        assert_eq!(ok(1000), (Duration::from_secs(1), 3));
        assert_eq!(ok(1500), (Duration::from_secs(2), 4));
        assert_eq!(MAX_TTL, Duration::from_secs(30 * 24 * 3600 - 2));
        assert!(ttl_on_server(MAX_TTL).is_ok());
        assert!(ttl_on_server(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(ttl_on_server(Duration::ZERO).is_err());
        assert!(ttl_on_server(Duration::MAX).is_err());
    }

    /// memcached 1.6's clock, in microseconds of real time. `current_time` is
    /// `floor(monotonic seconds) - start`, refreshed only when a timer fires: every
    /// `period_us` (one second plus the timer's lateness; each firing re-arms it, so its
    /// phase drifts), first at `first_tick_us`. An item stored with a relative expiry `e` gets
    /// `exptime = current_time + e` and is expired from the first refresh at which
    /// `current_time >= exptime` (`do_item_get`). Between the floor and the stale refresh,
    /// `current_time` lags real time by up to two seconds.
    struct ServerClock {
        /// The monotonic clock's reading (microseconds) at real time 0.
        monotonic_at_0_us: u64,
        first_tick_us: u64,
        period_us: u64,
    }

    impl ServerClock {
        fn current_time(&self, t_us: u64) -> u64 {
            let ticks = (t_us - self.first_tick_us) / self.period_us;
            let last_tick = self.first_tick_us + ticks * self.period_us;
            (self.monotonic_at_0_us + last_tick) / 1_000_000
        }

        /// When an item stored at real time `t_us` with relative expiry `expiry` expires.
        fn expires_at(&self, t_us: u64, expiry: u64) -> u64 {
            let exptime = self.current_time(t_us) + expiry;
            // The first refresh whose monotonic reading has reached `exptime` seconds.
            let due = (exptime * 1_000_000).saturating_sub(self.monotonic_at_0_us);
            let ticks = due.saturating_sub(self.first_tick_us).div_ceil(self.period_us);
            (self.first_tick_us + ticks * self.period_us).max(t_us)
        }
    }

    /// Over many phases of memcached's clock (the monotonic clock's fraction, the timer's
    /// phase, where in a tick the command lands), an item stored with the expiry we send
    /// never expires before the lease's local deadline, `sent + TTL`, where `sent` is no later
    /// than the server's receipt. A late timer eats into the margin by its lateness only;
    /// the core's safety margin before the lost signal covers that.
    #[test]
    fn items_never_expire_before_the_local_deadline_on_a_lagging_server_clock() {
        let mut worst_us = i64::MAX;
        for lateness_us in [0, 500, 20_000] {
            let period_us = 1_000_000 + lateness_us;
            for fraction in (0..1_000_000).step_by(37_813).chain([999_999]) {
                for phase in (0..period_us).step_by(41_077).chain([period_us - 1]) {
                    let clock = ServerClock {
                        monotonic_at_0_us: 5_000_000 + fraction,
                        first_tick_us: phase,
                        period_us,
                    };
                    for ttl_ms in [1, 1_000, 2_500, 30_000] {
                        let (lease_ttl, expiry) =
                            ttl_on_server(Duration::from_millis(ttl_ms)).expect("valid");
                        let lease_ttl_us = u64::try_from(lease_ttl.as_micros()).expect("small");
                        let tick = phase + 3 * period_us;
                        for into in (0..period_us).step_by(29_311).chain([0, period_us - 1]) {
                            let received = tick + into;
                            let expires = clock.expires_at(received, u64::from(expiry));
                            let lifetime = i64::try_from(expires - received).expect("small");
                            let lease = i64::try_from(lease_ttl_us).expect("small");
                            let late = i64::try_from(lateness_us).expect("small");
                            worst_us = worst_us.min(lifetime - lease + late);
                            assert!(
                                lifetime + late >= lease,
                                "stored at {received} us with expiry {expiry} s (lease TTL \
                                 {lease_ttl:?}), the item expires after {lifetime} us, before \
                                 the local deadline (timer late by {lateness_us} us)"
                            );
                        }
                    }
                }
            }
        }
        assert!(worst_us >= 0, "worst margin {worst_us} us");
    }

    #[test]
    fn handles_round_trip() {
        let h = Handle {
            cas: 42,
            epoch: Epoch {
                nonce: 0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            },
        };
        assert_eq!(Handle::decode(&h.encode()), Some(h));
        assert_eq!(Handle::decode("cas=1"), None);
    }

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
    }
}
