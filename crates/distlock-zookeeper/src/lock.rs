//! [`ZooKeeperLock`]: the standard ZooKeeper lock recipe (ephemeral-sequential children,
//! predecessor watches) as a [`DistributedLock`], with the session followed for the guards.
//!
//! # Node layout
//!
//! ```text
//! <chroot>/<root>                                  persistent, default /distlock
//! <chroot>/<root>/<encoded name>                   CONTAINER node, one per lock name
//! <chroot>/<root>/<encoded name>/_c_<uuid>-lock-0000000042
//!                                                  EPHEMERAL_SEQUENTIAL, one per contender;
//!                                                  data = the owner token (UTF-8)
//! <chroot>/<root>/semaphore:<encoded name>/{locks,leases}/...
//!                                                  a semaphore (see `semaphore.rs`)
//! <chroot>/<root>/rw-lock:<encoded name>/_c_<uuid>-__READ__/__WRIT__<seq>
//!                                                  a read-write lock (see `rw_lock.rs`)
//! ```
//!
//! The submodules: `layout` (paths and node names), `queue` (queue order and who holds),
//! `entry` (our node while an acquisition runs, and background cleanup), `waiting` (one
//! attempt, or waiting in line, in any queue), `semaphore` and `rw_lock` (their recipes).
//!
//! - `<encoded name>` is [`LockName::encode`] with `[A-Za-z0-9._~-]` kept and everything else
//!   percent-encoded (names longer than 240 bytes keep a prefix plus a SHA-256); `.` and `..`
//!   become `%2E` and `%2E%2E`. Different names never share a parent.
//! - Children are Apache Curator's protected-mode `InterProcessMutex` names, exactly: `_c_` +
//!   a hyphenated UUID + `-lock-` + the server's 10-digit sequence, as
//!   `create().creatingParentContainersIfNeeded().withProtection()` makes them. The UUID is
//!   the acquisition's owner token, so the owner token alone finds the node (the core's
//!   cleanup after an ambiguous attempt carries no handle). Curator sorts
//!   every child on what follows the last `lock-` and watches its predecessor with
//!   `getData`, so a Curator `InterProcessMutex` on [`ZooKeeperLock::lock_path`] and this
//!   crate exclude each other and share one FIFO queue.
//! - kazoo's `Lock` names its nodes `<uuid hex>__lock__<seq>` and, since kazoo 2.7.1, counts
//!   other nodes as contenders only if they match one of its `extra_lock_patterns`: a kazoo
//!   `Lock(path, identifier, extra_lock_patterns=["-lock-"])` on the same path and this crate
//!   exclude each other; a kazoo `Lock` without that argument ignores our nodes (we still
//!   wait for its nodes).
//! - Here, every child whose name ends in a sequence number of at least 10 digits is a
//!   contender, whatever its prefix (ours, Curator's, kazoo's, Curator's read-write locks'),
//!   ordered by that sequence: the server draws all of a parent's sequence numbers from one
//!   counter, so that is the arrival order across recipes. The counter is a signed 32-bit
//!   integer that wraps to `-2147483648` (formatted `%010d`, so `-000000005` past
//!   `-999999999`): it is parsed signed and ordered with wrapping arithmetic. A hyphen before
//!   a foreign name's digits is a sign only where `%010d` could have written it (`x-0000000005`
//!   is sequence 5). Other children are ignored.
//! - The data of our node is the owner token; `inspect` reports whatever the first
//!   contender's data is (Curator stores the client's IP address, kazoo its identifier).
//! - The holder is the contender with the lowest sequence. Its creation zxid (`czxid`, from
//!   the `create2` reply, so free) is the fencing token: zxids grow over the whole ensemble's
//!   history, so tokens keep growing when the parent is deleted and re-created, where the
//!   per-parent sequence would restart.
//! - Parents are container nodes: the server deletes them once their last child is gone (its
//!   container check runs every `znode.container.checkIntervalMs`, a minute by default), so
//!   one-off names do not pile up. On servers without containers (3.5.0 to 3.5.2; 3.4 lacks
//!   `create2` and is not supported) they are persistent, and each release also deletes the
//!   parent, which fails harmlessly with `NotEmpty` while others queue.
//!
//! # Sessions
//!
//! Locks live as long as the ZooKeeper session that created them: there is no TTL, and the
//! lease's `ttl` is ignored. The session is published to the guards ([`Session`]):
//! - connection lost, or the leader has not confirmed the session (`heartbeat.rs`: a `sync`
//!   and a read) for a quarter of the negotiated session timeout: `Suspended` (the guard's
//!   `is_suspended()`); the lock may still be held;
//! - reconnected within the session timeout: `Connected` again with the same epoch;
//! - connected only to a read-only server: `Suspended` (it cannot keep the session alive);
//! - the server expired the session, or the last contact the leader confirmed is a
//!   (negotiated) session timeout ago, less a margin of a tenth of it (so this side says lost before the server
//!   can expire the session and hand the lock to someone else): `Expired`, every guard of
//!   that session is lost, and the next operation opens a new session with the next epoch.
//!   That instant is also published as the session's local deadline
//!   ([`Session::valid_until`]), moved forward by each heartbeat: a guard checks it against
//!   the clock, so a process that was paused (a long GC, SIGSTOP) past it says lost the moment
//!   it runs again, before any of its tasks has learnt anything.
//!
//! A session outlives a stuck holder: past the guard's maximum hold time the core's watchdog
//! releases the lease (deletes the node), since no TTL would end it.
//!
//! A held node deleted behind our back (by an operator or a buggy client) is noticed through an
//! `exists` watch set on it right after it is won (in the background, no added latency), and
//! only that lease's guard is told, through [`DistributedLock::watch_lease`], with
//! [`LossReason::NotOwned`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, Attempt, Capabilities, DistributedLock, Error, Expiry, Fairness, Fencing, FencingToken,
    Holder, Lease, LockKind, LockName, LockState, LossReason, ObjectState, OwnerToken, Primitive, Result,
    Session, SessionState, TryAcquire, WakeUp,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ZooKeeperConfig;

mod entry;
mod heartbeat;
mod layout;
mod queue;
mod rw_lock;
mod semaphore;
mod waiting;

use entry::{spawn_cleanup, Cleanup, Node, QueueEntry};
use layout::{lock_path, object_path, protected_prefix, LEASE_NODE, LOCK_NODE, READ_NODE, WRITE_NODE};
use queue::{queue, Line};

const BACKEND: &str = "zookeeper";
/// The pause before a held node's watch is set again after a failed `exists`.
const WATCH_RETRY: Duration = Duration::from_millis(100);

/// The ZooKeeper backend: one ZooKeeper session (re-opened with the next epoch when it ends).
/// Cheap to clone; clones share the session. See the crate docs for the node layout and what
/// the guard's suspended and lost states mean.
#[derive(Clone)]
pub struct ZooKeeperLock {
    inner: Arc<Inner>,
}

struct Inner {
    config: ZooKeeperConfig,
    /// The current session, if one is open.
    slot: Mutex<Option<Conn>>,
    /// Serialises opening new sessions.
    connecting: tokio::sync::Mutex<()>,
    session: watch::Sender<Session>,
    /// Held lock nodes (path → state), for the stolen-node watch and `watch_lease`.
    held: Mutex<HashMap<String, Held>>,
    /// Whether the server accepted a container node (cleared on `Unimplemented`).
    containers: AtomicBool,
    listings: AtomicU64,
    watch_events: AtomicU64,
    /// The last contact with the server: (epoch, when the last request the server answered
    /// while the session was connected to a quorum server was sent). The server heard from us
    /// no earlier than that, so it cannot expire the session before it plus the timeout.
    contact: Mutex<(u64, Instant)>,
}

#[derive(Clone)]
struct Conn {
    client: zk::Client,
    epoch: u64,
}

struct Held {
    epoch: u64,
    lost: watch::Sender<Option<LossReason>>,
}

/// Counters of the round trips that matter for the herd effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZooKeeperStats {
    /// `getChildren` calls made by acquisitions.
    pub children_listings: u64,
    /// Predecessor watches that fired (each wakes exactly one waiter).
    pub watch_events: u64,
}

impl ZooKeeperLock {
    /// Opens a session with the ensemble in `config`.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if no session could be opened within the operation timeout.
    pub async fn connect(config: ZooKeeperConfig) -> Result<Self> {
        let inner = Arc::new(Inner {
            containers: AtomicBool::new(true),
            slot: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            session: watch::channel(Session::connected(0).with_state(SessionState::Expired)).0,
            held: Mutex::new(HashMap::new()),
            listings: AtomicU64::new(0),
            watch_events: AtomicU64::new(0),
            contact: Mutex::new((0, Instant::now())),
            config,
        });
        inner.bounded(inner.conn()).await?;
        Ok(Self { inner })
    }

    /// Opens a session for a `zk://` URL (see [`ZooKeeperConfig::from_url`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL, [`Error::Unavailable`] as [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(ZooKeeperConfig::from_url(url)?).await
    }

    /// The configuration.
    pub fn config(&self) -> &ZooKeeperConfig {
        &self.inner.config
    }

    /// The znode under which `name`'s contenders queue (inside the chroot). A Curator
    /// `InterProcessMutex` or kazoo `Lock` on this path excludes us and is excluded by us.
    pub fn lock_path(&self, name: &LockName) -> String {
        lock_path(self.inner.config.root(), name)
    }

    /// The znode of the semaphore `name` (inside the chroot): a Curator
    /// `InterProcessSemaphoreV2` on this path, with the same number of leases, shares the
    /// semaphore with us (its `locks` and `leases` children). Apart from the mutex and the
    /// read-write lock of the same name.
    pub fn semaphore_path(&self, name: &LockName) -> String {
        object_path(self.inner.config.root(), Primitive::Semaphore, name)
    }

    /// The znode of the read-write lock `name` (inside the chroot): a Curator
    /// `InterProcessReadWriteLock` on this path shares the lock with us. Apart from the mutex
    /// and the semaphore of the same name.
    pub fn rw_lock_path(&self, name: &LockName) -> String {
        object_path(self.inner.config.root(), Primitive::RwLock, name)
    }

    /// The acquisition counters of this client (all its clones).
    pub fn stats(&self) -> ZooKeeperStats {
        ZooKeeperStats {
            children_listings: self.inner.listings.load(Ordering::Relaxed),
            watch_events: self.inner.watch_events.load(Ordering::Relaxed),
        }
    }

    /// The owner-checked release of a lease without a handle (the core's cleanup after an
    /// ambiguous attempt): per queue the hold may have a node in, `sync`, `getChildren`, and a
    /// `delete` of each node carrying the owner's protected prefix, bounded once by the
    /// operation timeout. The queues by the lease's kind: the mutex's; the read-write lock's
    /// (reader or writer prefix); a semaphore's `leases`, then its `locks` (an acquisition cut
    /// short may have left a node in either). `true` if a node of the hold itself (not a
    /// `locks` node) was deleted. Round trips per queue: 2 (`sync`, `getChildren`), +1
    /// `delete` per node of the owner.
    async fn release_by_owner(&self, lease: &Lease) -> Result<bool> {
        let inner = &self.inner;
        let root = inner.config.root();
        let owner = lease.owner();
        let kind = lease.kind();
        let object = object_path(root, kind.primitive(), lease.name());
        // (parent, prefix, whether a node there is the hold)
        let queues: Vec<(String, String, bool)> = match kind {
            LockKind::Permit { .. } => vec![
                (
                    layout::semaphore_leases(&object),
                    protected_prefix(owner, LEASE_NODE),
                    true,
                ),
                (
                    layout::semaphore_locks(&object),
                    protected_prefix(owner, LOCK_NODE),
                    false,
                ),
            ],
            LockKind::Read => vec![(object, protected_prefix(owner, READ_NODE), true)],
            LockKind::Write => vec![(object, protected_prefix(owner, WRITE_NODE), true)],
            _ => vec![(object, protected_prefix(owner, LOCK_NODE), true)],
        };
        inner
            .bounded(async {
                let conn = inner.conn().await?;
                let mut released = false;
                for (parent, prefix, hold) in &queues {
                    let deleted = inner.delete_owned(&conn, parent, prefix).await?;
                    released |= deleted && *hold;
                }
                Ok(released)
            })
            .await
    }

    /// The session timeout the server negotiated for the current session, if one is open: the
    /// one asked for ([`ZooKeeperConfig::session_timeout`]) brought into the server's
    /// `minSessionTimeout..=maxSessionTimeout`. The heartbeat, the suspension and the local
    /// deadline of the session all follow this one.
    pub fn negotiated_session_timeout(&self) -> Option<Duration> {
        self.inner.current().map(|conn| conn.client.session_timeout())
    }

    /// The ZooKeeper session id of the current session, if one is open (for logs).
    pub fn session_id(&self) -> Option<i64> {
        self.inner.current().map(|conn| conn.client.session_id().0)
    }
}

impl fmt::Debug for ZooKeeperLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZooKeeperLock")
            .field("config", &self.inner.config)
            .field("session", &*self.inner.session.borrow())
            .finish()
    }
}

/// The driver's errors by meaning. `Custom` is what a request gets when its connection fails
/// under it (an I/O error such as a reset): its outcome is unknown and a retry may succeed,
/// as after `ConnectionLoss`.
fn map_err(error: zk::Error) -> Error {
    use zk::Error as E;
    match error {
        E::Custom(_)
        | E::ConnectionLoss
        | E::Timeout
        | E::NoHosts
        | E::SessionExpired
        | E::SessionMoved
        | E::ClientClosed
        | E::Throttled => Error::unavailable(BACKEND, error),
        other => Error::backend(BACKEND, other),
    }
}

fn timed_out(what: &str, after: Duration) -> Error {
    Error::unavailable(BACKEND, format!("{what}: no answer within {after:?}"))
}

// ---------------------------------------------------------------------------------------------
// Acquire
// ---------------------------------------------------------------------------------------------

#[async_trait]
impl DistributedLock for ZooKeeperLock {
    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, WakeUp::Notification)
            .with_fairness(Fairness::Fifo)
            .with_expiry(Expiry::Session)
            .with_primitives(true, true)
    }

    /// The mutex: list the queue first, and only if it is empty create our node, list again
    /// and keep the node if it is first (else delete it). A held lock thus costs 1 round trip
    /// (`getChildren`) and burns no sequence number; a free one 3 (`getChildren`, `create2`,
    /// `getChildren`), +1 the first time a name's parent is created (+1 more for the root,
    /// once). A node of ours already in the queue (left by an earlier attempt of the same owner
    /// whose reply was lost) is adopted, never duplicated.
    ///
    /// A permit (see `semaphore.rs`: 2 round trips when full, 6 or 7 when there
    /// is room) or at a read or the write lock (see `rw_lock.rs`: 1 when blocked, 3 when free).
    /// The session is the lease's lifetime: `ttl` is ignored. `waiter` is ignored too: this
    /// backend is [`Fairness::Fifo`], and [`LockClient`](distlock_core::LockClient) waits in
    /// the store's queue ([`wait_queued`](Self::wait_queued)), where a waiting
    /// writer's node keeps later readers out; a single attempt that fails leaves nothing
    /// behind, so it records no waiting writer.
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let (name, owner) = (&attempt.name, attempt.owner);
        match attempt.kind {
            LockKind::Exclusive => {
                let inner = &self.inner;
                inner
                    .bounded(async {
                        let sent_at = Instant::now();
                        let conn = inner.conn().await?;
                        let mut entry = QueueEntry::mutex(inner, &conn, name, owner);
                        let owner_data = owner.to_string();
                        match inner
                            .take_once(&conn, &mut entry, Line::Mutex, owner_data.as_bytes(), None)
                            .await?
                        {
                            Some(node) => {
                                let lease =
                                    inner.hold(&conn, name, owner, node, sent_at, LockKind::Exclusive)?;
                                entry.disarm();
                                Ok(TryAcquire::Acquired(lease))
                            }
                            None => Ok(TryAcquire::Held(Holder::unknown())),
                        }
                    })
                    .await
            }
            LockKind::Permit { permits } => {
                validate_permits(permits)?;
                self.inner.try_permit(name, permits, owner).await
            }
            LockKind::Read | LockKind::Write => self.inner.try_rw(name, attempt.kind, owner).await,
            other => Err(not_a_kind(other)),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Release
    // -----------------------------------------------------------------------------------------

    /// Deletes our node: 1 round trip (`delete`; +1 parent `delete` on servers without
    /// container nodes). Owner-checked by construction: the node's name carries the owner
    /// token and is unique to this acquisition, and it is ephemeral, so it exists only while
    /// this hold does. Every kind of hold is one such node (a mutex contender, a semaphore's
    /// lease, a reader or a writer), and the lease's handle is its path, so this is the same
    /// for all of them. A lease without a handle (the core's cleanup after an ambiguous
    /// attempt) is found by the owner's protected prefix in the queues of its kind
    /// (`release_by_owner`): `sync` and `getChildren`, then a `delete` per node of that owner.
    /// A lease of an ended session reports `false` even if the server still had its node. The
    /// whole call is bounded once by the operation timeout; a delete that timed out or failed
    /// transiently is retried in the background.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let inner = &self.inner;
        let Some(path) = lease.handle().map(str::to_owned) else {
            return self.release_by_owner(lease).await;
        };
        inner.unhold(&path);
        let mut client: Option<zk::Client> = None;
        let outcome = inner
            .bounded(async {
                let conn = inner.conn().await?;
                client = Some(conn.client.clone());
                let existed = match conn.client.delete(&path, None).await {
                    Ok(()) => true,
                    Err(zk::Error::NoNode) => false,
                    Err(error) => return Ok(Err(error)),
                };
                if !inner.containers.load(Ordering::Relaxed) {
                    if let Some((parent, _)) = path.rsplit_once('/') {
                        let _ = conn.client.delete(parent, None).await;
                    }
                }
                Ok(Ok(existed
                    && lease.session_epoch() == Some(conn.epoch)
                    && inner.session.borrow().keeps(conn.epoch)))
            })
            .await;
        let error = match outcome {
            Ok(Ok(existed)) => return Ok(existed),
            Ok(Err(error)) => {
                let error = map_err(error);
                if !error.is_transient() {
                    return Err(error);
                }
                error
            }
            Err(error) => error,
        };
        if let Some(client) = client {
            // Keep trying in the background while the session lives.
            spawn_cleanup(
                client,
                vec![Cleanup::Path(path)],
                inner.config.operation_timeout(),
            );
        }
        Err(error)
    }

    /// Session-bound locks have nothing to renew: this checks that our node still exists and
    /// belongs to the current session (1 round trip, `exists`), bounded once by the operation
    /// timeout. The same for every kind of hold (the handle is its node's path); a lease
    /// without a handle is not renewed (`None`).
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            let lease = &lease;
            let Some(path) = lease.handle() else {
                return Ok(None);
            };
            let inner = &self.inner;
            inner
                .bounded(async {
                    let conn = inner.conn().await?;
                    if lease.session_epoch() != Some(conn.epoch) {
                        return Ok(None);
                    }
                    let stat = conn.client.check_stat(path).await.map_err(map_err)?;
                    let ours = stat.is_some_and(|s| s.ephemeral_owner == conn.client.session_id().0)
                        && inner.session.borrow().keeps(conn.epoch);
                    Ok(ours.then(|| lease.clone()))
                })
                .await
        })
        .await
    }

    // -----------------------------------------------------------------------------------------
    // Wait
    // -----------------------------------------------------------------------------------------

    /// The mutex: create our node, then until it is first, watch only its immediate
    /// predecessor (`exists` with a watch) and list again when that watch fires. Round trips:
    /// 2 when free; when queued, 3 to get in line (`create2`, `getChildren`, `exists`) and 1
    /// (`getChildren`) per wake-up, and each release wakes exactly one waiter.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, our node is deleted in the background (found by its
    /// GUID prefix if the drop came while `create` was in flight); a lock won but not yet
    /// returned cannot exist, since winning and returning happen without an await between.
    ///
    /// A permit: (the semaphore's `locks` mutex, then a count of
    /// its leases) or for a read or the write lock (one FIFO queue). A dropped
    /// wait deletes its nodes in the
    /// background.
    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let (name, owner) = (&attempt.name, attempt.owner);
        match attempt.kind {
            LockKind::Exclusive => {
                let inner = &self.inner;
                let sent_at = Instant::now();
                let conn = inner.bounded(inner.conn()).await?;
                let mut entry = QueueEntry::mutex(inner, &conn, name, owner);
                let owner_data = owner.to_string();
                let created = inner.bounded(entry.create(owner_data.as_bytes())).await?;
                let Some(node) = inner
                    .wait_in_line(&conn, &mut entry, &created, Line::Mutex, deadline)
                    .await?
                else {
                    return Ok(None);
                };
                let lease = inner.hold(&conn, name, owner, node, sent_at, LockKind::Exclusive)?;
                entry.disarm();
                Ok(Some(lease))
            }
            LockKind::Permit { permits } => {
                validate_permits(permits)?;
                self.inner.queue_for_permit(name, permits, owner, deadline).await
            }
            LockKind::Read | LockKind::Write => {
                self.inner.queue_for_rw(name, attempt.kind, owner, deadline).await
            }
            other => Err(not_a_kind(other)),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Semaphores and read-write locks
    // -----------------------------------------------------------------------------------------

    /// The holders of a mutex (its first contender: the queue listed and the first node read, 2 round trips, 1 when
    /// free), a
    /// semaphore (its oldest leases, as many as its permits) or a read-write lock (its writer,
    /// or the readers before the first writer).
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        match primitive {
            Primitive::Semaphore => self.inner.permit_holders(name).await.map(ObjectState::held_by),
            Primitive::RwLock => self.inner.rw_holders(name).await.map(ObjectState::held_by),
            _ => {
                let state = async {
                    let inner = &self.inner;
                    inner
                        .bounded(async {
                            let conn = inner.conn().await?;
                            let parent = lock_path(inner.config.root(), name);
                            let children = match conn.client.list_children(&parent).await {
                                Ok(children) => children,
                                Err(zk::Error::NoNode) => return Ok(LockState::free(None)),
                                Err(e) => return Err(map_err(e)),
                            };
                            let Some(first) = queue(children).into_iter().next() else {
                                return Ok(LockState::free(None));
                            };
                            match conn.client.get_data(&format!("{parent}/{first}")).await {
                                Ok((data, stat)) => Ok(LockState::held(
                                    String::from_utf8_lossy(&data).into_owned(),
                                    u64::try_from(stat.czxid).ok().map(FencingToken::new),
                                    None,
                                )),
                                Err(zk::Error::NoNode) => Ok(LockState::free(None)),
                                Err(e) => Err(map_err(e)),
                            }
                        })
                        .await
                };
                state.await.map(ObjectState::from)
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Session, loss, status
    // -----------------------------------------------------------------------------------------

    fn session(&self) -> Option<watch::Receiver<Session>> {
        Some(self.inner.session.subscribe())
    }

    /// Resolves with [`LossReason::NotOwned`] when the lease's node is deleted behind our back
    /// (the `exists` watch set when it was won fires), with [`LossReason::SessionExpired`] when
    /// its session ends, and with `NotOwned` (ignored by the watchdog) once it is released.
    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        let path = lease.handle()?;
        let mut rx = self.inner.held().get(path)?.lost.subscribe();
        Some(Box::pin(async move {
            let reason = rx.wait_for(Option::is_some).await.map(|r| r.clone());
            match reason {
                Ok(reason) => reason.unwrap_or(LossReason::NotOwned),
                // Released: the entry (and its sender) is gone.
                Err(_) => LossReason::NotOwned,
            }
        }))
    }

    /// `exists("/")`: 1 round trip.
    async fn ping(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .bounded(async {
                let conn = inner.conn().await?;
                conn.client.check_stat("/").await.map_err(map_err)?;
                Ok(())
            })
            .await
    }
}

/// A semaphore needs at least one permit ([`LockClient`](distlock_core::LockClient) checks
/// too; this keeps a direct caller from a semaphore nobody can hold).
fn validate_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid_options("a semaphore needs at least one permit"));
    }
    Ok(())
}

/// The error for a kind `try_acquire_kind` and `acquire_kind_queued` do not take (the mutex
/// has `try_acquire` and `acquire_queued`).
fn not_a_kind(kind: LockKind) -> Error {
    Error::invalid_options(format!("{kind} is not a permit, a read or the write lock"))
}

impl QueueEntry {
    /// Our place in the mutex `name`'s queue.
    fn mutex(inner: &Arc<Inner>, conn: &Conn, name: &LockName, owner: OwnerToken) -> Self {
        Self::at(
            inner,
            conn,
            lock_path(inner.config.root(), name),
            protected_prefix(owner, LOCK_NODE),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Holding, and the session
// ---------------------------------------------------------------------------------------------

impl Inner {
    /// Runs one operation within the operation timeout.
    async fn bounded<T>(&self, operation: impl Future<Output = Result<T>>) -> Result<T> {
        let limit = self.config.operation_timeout();
        tokio::time::timeout(limit, operation)
            .await
            .map_err(|_| timed_out("ZooKeeper operation", limit))?
    }

    fn slot(&self) -> MutexGuard<'_, Option<Conn>> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn held(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open session, unless it has ended.
    fn current(&self) -> Option<Conn> {
        let conn = self.slot().clone()?;
        if conn.client.state().is_terminated() {
            self.end_session(conn.epoch, "the server ended it");
            return None;
        }
        Some(conn)
    }

    /// The open session, or a new one (with the next epoch) if it has ended.
    async fn conn(self: &Arc<Self>) -> Result<Conn> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let connecting_at = Instant::now();
        let client = zk::Client::connector()
            .session_timeout(self.config.session_timeout())
            .connection_timeout(self.config.connection_timeout())
            .connect(self.config.connect_string())
            .await
            .map_err(map_err)?;
        #[cfg(test)]
        tests::after_handshake(&client).await;
        let epoch = self.session.borrow().epoch + 1;
        let conn = Conn { client, epoch };
        tracing::debug!(epoch, session = %conn.client.session_id(), "distlock: ZooKeeper session opened");
        // The watcher sees every state change from here on, and Connected is published before
        // the follower runs, so a disconnection right after the connect is never overwritten.
        let states = conn.client.state_watcher();
        let initial = conn.client.state();
        *self.contact.lock().unwrap_or_else(PoisonError::into_inner) = (epoch, connecting_at);
        *self.slot() = Some(conn.clone());
        let session = Session::connected(epoch);
        self.session.send_replace(
            match session_deadline(connecting_at, conn.client.session_timeout()) {
                Some(until) => session.with_valid_until(until),
                None => session,
            },
        );
        // Everything below follows the timeout the server negotiated, not the one asked for.
        let timeout = conn.client.session_timeout();
        tokio::spawn(follow_session(
            Arc::downgrade(self),
            epoch,
            (initial, states),
            timeout,
            driver_connection_timeout(self.config.connection_timeout(), timeout),
        ));
        tokio::spawn(heartbeat::heartbeat(Arc::downgrade(self), epoch, timeout));
        Ok(conn)
    }

    /// Declares session `epoch` over: guards are told, and the client is dropped so that the
    /// session closes (or expires) on the server and the next operation opens a new one.
    fn end_session(&self, epoch: u64, why: &str) {
        let conn = {
            let mut slot = self.slot();
            match slot.as_ref() {
                Some(conn) if conn.epoch == epoch => slot.take(),
                _ => None,
            }
        };
        let ended = self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state != SessionState::Expired {
                s.state = SessionState::Expired;
                true
            } else {
                false
            }
        });
        if ended {
            tracing::warn!(
                epoch,
                why,
                "distlock: ZooKeeper session ended; its locks are lost"
            );
        }
        let mut held = self.held();
        held.retain(|_, h| {
            if h.epoch == epoch {
                h.lost.send_replace(Some(LossReason::SessionExpired));
                false
            } else {
                true
            }
        });
        drop(held);
        drop(conn);
    }

    /// Records that the server answered a request of session `epoch` sent at `sent`.
    /// Moves the session's local deadline with it, without waking anyone (guards read it
    /// when they check).
    fn contacted(&self, epoch: u64, sent: Instant, timeout: Duration) {
        let mut contact = self.contact.lock().unwrap_or_else(PoisonError::into_inner);
        if contact.0 == epoch && contact.1 < sent {
            contact.1 = sent;
            if let Some(until) = session_deadline(sent, timeout) {
                self.session.send_if_modified(|s| {
                    if s.epoch == epoch && s.valid_until.is_none_or(|t| t < until) {
                        s.valid_until = Some(until);
                    }
                    false
                });
            }
        }
    }

    /// The last contact with the server in session `epoch`, if recorded.
    fn last_contact(&self, epoch: u64) -> Option<Instant> {
        let contact = self.contact.lock().unwrap_or_else(PoisonError::into_inner);
        (contact.0 == epoch).then_some(contact.1)
    }

    fn set_state(&self, epoch: u64, state: SessionState) {
        self.session.send_if_modified(|s| {
            if s.epoch == epoch && s.state != SessionState::Expired && s.state != state {
                s.state = state;
                true
            } else {
                false
            }
        });
    }

    /// `getChildren` of a lock's parent (`None` if it does not exist): 1 round trip.
    async fn list_children(&self, conn: &Conn, parent: &str) -> Result<Option<Vec<String>>> {
        self.listings.fetch_add(1, Ordering::Relaxed);
        match conn.client.list_children(parent).await {
            Ok(children) => Ok(Some(children)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(map_err(e)),
        }
    }

    /// Finds our node among the contenders `queue` (queue order): the nodes carrying our
    /// protected `prefix`. The lowest of them that belongs to our session is ours; every other
    /// one (a duplicate left by a `create` retried after a lost reply, or a node of an earlier
    /// session of ours) is deleted. `known` is the node we just created (no `exists` needed
    /// for it). Returns our node and the queue without the deleted nodes. No round trip in the
    /// usual case (one node of ours, `known`); else 1 `exists` or `delete` per node of ours.
    async fn settle(
        &self,
        conn: &Conn,
        parent: &str,
        prefix: &str,
        mut queue: Vec<String>,
        known: Option<&Node>,
    ) -> Result<(Option<Node>, Vec<String>)> {
        let mine: Vec<String> = queue.iter().filter(|c| c.starts_with(prefix)).cloned().collect();
        if let ([only], Some(node)) = (mine.as_slice(), known) {
            if *only == node.child {
                return Ok((Some(node.clone()), queue));
            }
        }
        let session = conn.client.session_id().0;
        let mut adopted: Option<Node> = None;
        for child in mine {
            let path = format!("{parent}/{child}");
            if adopted.is_none() {
                if let Some(node) = known.filter(|n| n.child == child) {
                    adopted = Some(node.clone());
                    continue;
                }
                match conn.client.check_stat(&path).await.map_err(map_err)? {
                    Some(stat) if stat.ephemeral_owner == session => {
                        adopted = Some(Node {
                            path,
                            child,
                            czxid: stat.czxid,
                        });
                        continue;
                    }
                    Some(_) => {}
                    None => {
                        queue.retain(|c| *c != child);
                        continue;
                    }
                }
            }
            conn.client
                .delete(&path, None)
                .await
                .or_else(entry::ignore_no_node)?;
            tracing::info!(
                path,
                "distlock: deleted a duplicate ZooKeeper lock node carrying our owner token"
            );
            queue.retain(|c| *c != child);
        }
        Ok((adopted, queue))
    }

    /// Builds the lease of a won node (of `kind`: the mutex, a permit, a read or the write
    /// lock) and starts watching the node for deletion behind our back (in the background: no
    /// added latency).
    fn hold(
        self: &Arc<Self>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
        node: Node,
        sent_at: Instant,
        kind: LockKind,
    ) -> Result<Lease> {
        if !self.session.borrow().keeps(conn.epoch) {
            // Won on the server, but the session is already declared over here: its node is
            // left to the session's end (the drop of the entry deletes it if it still can).
            return Err(Error::unavailable(
                BACKEND,
                "the session ended (locally) while acquiring",
            ));
        }
        if conn.client.state() == zk::SessionState::SyncConnected {
            // The acquisition's requests, all sent after `sent_at`, were answered in this
            // session by a quorum member: a contact, like a heartbeat's. Without it a lock
            // taken right after a reconnection counted its session from the last heartbeat
            // before the outage, and was declared lost up to an outage early.
            self.contacted(conn.epoch, sent_at, conn.client.session_timeout());
        }
        let (lost, _) = watch::channel(None);
        self.held().insert(
            node.path.clone(),
            Held {
                epoch: conn.epoch,
                lost,
            },
        );
        tokio::spawn(watch_held(
            Arc::downgrade(self),
            conn.client.clone(),
            node.path.clone(),
            conn.epoch,
            self.config.operation_timeout(),
        ));
        let fencing = FencingToken::new(u64::try_from(node.czxid).unwrap_or_default());
        Ok(Lease::session_bound(name.clone(), owner, conn.epoch, sent_at)
            .with_kind(kind)
            .with_fencing(fencing)
            .with_handle(node.path))
    }

    /// Deletes every child of `parent` carrying the protected `prefix` (an owner's nodes):
    /// `sync` first (the reconnection may have reached a follower behind the leader), then
    /// `getChildren` and a `delete` per such node. `true` if one was deleted.
    async fn delete_owned(&self, conn: &Conn, parent: &str, prefix: &str) -> Result<bool> {
        match conn.client.sync(parent).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_err(e)),
        }
        let Some(children) = self.list_children(conn, parent).await? else {
            return Ok(false);
        };
        let mut deleted = false;
        for child in children.iter().filter(|c| c.starts_with(prefix)) {
            let path = format!("{parent}/{child}");
            self.unhold(&path);
            match conn.client.delete(&path, None).await {
                Ok(()) => deleted = true,
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(deleted)
    }

    fn unhold(&self, path: &str) {
        self.held().remove(path);
    }

    /// Our held node was deleted by someone else. The entry stays (marked) until the release,
    /// so a guard that subscribes late still hears of it.
    fn stolen(&self, path: &str, epoch: u64) {
        let held = self.held();
        let Some(entry) = held.get(path).filter(|h| h.epoch == epoch) else {
            return; // released by us, or of an ended session
        };
        entry
            .lost
            .send_if_modified(|lost| lost.replace(LossReason::NotOwned).is_none());
        drop(held);
        tracing::warn!(
            path,
            "distlock: a held ZooKeeper lock node was deleted behind our back"
        );
    }
}

/// Watches one held node; reports it stolen if it is deleted while still registered. A data
/// change (Curator's revoker writes `__REVOKE__` into the holder's node) fires the one-shot
/// watch too: it is set again, so a later deletion is still seen. Holds the client only for
/// the `exists` round trips, so it never keeps a session open.
async fn watch_held(inner: Weak<Inner>, client: zk::Client, path: String, epoch: u64, op_timeout: Duration) {
    let mut client = Some(client);
    loop {
        let Some(watching) = client.take().or_else(|| {
            inner
                .upgrade()?
                .current()
                .filter(|conn| conn.epoch == epoch)
                .map(|conn| conn.client)
        }) else {
            return; // the session ended: the session follower reports it
        };
        let checked = tokio::time::timeout(op_timeout, watching.check_and_watch_stat(&path)).await;
        drop(watching);
        let watcher = match checked {
            Ok(Ok((Some(_), watcher))) => watcher,
            Ok(Ok((None, _))) => {
                if let Some(inner) = inner.upgrade() {
                    inner.stolen(&path, epoch);
                }
                return;
            }
            // A disconnection: set the watch again once the same session is connected again;
            // if the session ends instead, the session follower reports it.
            _ => {
                let Some(strong) = inner.upgrade() else {
                    return;
                };
                if strong.held().get(&path).is_none_or(|h| h.epoch != epoch) {
                    return; // released meanwhile
                }
                let mut session = strong.session.subscribe();
                drop(strong);
                let connected = session
                    .wait_for(|s| s.epoch != epoch || s.state != SessionState::Suspended)
                    .await
                    .map(|s| s.epoch == epoch && s.state == SessionState::Connected);
                if !matches!(connected, Ok(true)) {
                    return;
                }
                tokio::time::sleep(WATCH_RETRY).await;
                continue;
            }
        };
        let event = watcher.changed().await;
        match event.event_type {
            zk::EventType::NodeDeleted => {
                if let Some(inner) = inner.upgrade() {
                    inner.stolen(&path, epoch);
                }
                return;
            }
            zk::EventType::NodeDataChanged | zk::EventType::NodeCreated => {
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                if inner.held().get(&path).is_none_or(|h| h.epoch != epoch) {
                    return; // released meanwhile
                }
                tracing::info!(
                    path,
                    "distlock: a held ZooKeeper lock node's data changed; still watching it"
                );
            }
            _ => return,
        }
    }
}

/// Maps the client's session states onto [`Session`] for epoch `epoch`, and declares the
/// session expired on our side before the server can expire it.
///
/// The server expires a session `timeout` (the negotiated one) after it last heard from us,
/// which is no earlier than our last contact: the send time of the last request the leader
/// confirmed (kept by `heartbeat.rs`, which also ends the session while the driver stays
/// connected to a member that lost its leader). Once the connection is lost (noticed by the driver after `connection_timeout`
/// of silence, plus one tick) or reaches only a read-only server, the guards are Suspended at
/// once, and the session ends here at the last contact plus `timeout` minus a safety margin
/// of a tenth of the session timeout: the guards' lost signals fire while the server still
/// holds our nodes. Without a recorded contact, the disconnection is counted back by the
/// driver's detection time, `connection_timeout` plus a tick (a bound the driver keeps).
async fn follow_session(
    inner: Weak<Inner>,
    epoch: u64,
    (initial, mut states): (zk::SessionState, zk::StateWatcher),
    timeout: Duration,
    connection_timeout: Duration,
) {
    let mut first = Some(initial).filter(|s| *s != zk::SessionState::SyncConnected);
    let noticed_after = connection_timeout + connection_timeout / 8;
    let gives_up_at = |inner: &Inner| {
        let now = Instant::now();
        let contact = inner
            .last_contact(epoch)
            .unwrap_or_else(|| now.checked_sub(noticed_after).unwrap_or(now));
        session_deadline(contact, timeout).unwrap_or(now).max(now)
    };
    let mut gave_up_at: Option<Instant> = None;
    loop {
        let state = match (first.take(), gave_up_at) {
            (Some(state), _) => state,
            (None, Some(at)) => tokio::select! {
                state = states.changed() => state,
                () = tokio::time::sleep_until(at) => {
                    if let Some(inner) = inner.upgrade() {
                        inner.end_session(epoch, "no contact with the server for the session timeout, less a safety margin");
                    }
                    return;
                }
            },
            (None, None) => states.changed().await,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match session_state_for(state) {
            Some(SessionState::Suspended) => {
                tracing::info!(epoch, %state, "distlock: ZooKeeper connection lost or read-only; locks suspended");
                inner.set_state(epoch, SessionState::Suspended);
                gave_up_at.get_or_insert_with(|| gives_up_at(&inner));
            }
            Some(SessionState::Connected) => {
                tracing::info!(epoch, "distlock: ZooKeeper connection back in the same session");
                inner.set_state(epoch, SessionState::Connected);
                gave_up_at = None;
            }
            _ => {
                inner.end_session(epoch, &format!("session state {state}"));
                return;
            }
        }
        if inner.session.borrow().epoch != epoch {
            return; // a newer session took over
        }
    }
}

/// How long the driver lets a connection stay silent before it gives up on it: the
/// `configured` connection timeout, which the driver lowers to two fifths of the negotiated
/// session `timeout` when it exceeds three fifths of it (when the server negotiated the session
/// timeout down). Erring low only makes the session end earlier here.
fn driver_connection_timeout(configured: Duration, timeout: Duration) -> Duration {
    if configured > timeout * 3 / 5 {
        timeout * 2 / 5
    } else {
        configured
    }
}

/// When a session last heard from at `contact` must be presumed expired here: `timeout`
/// later, less a safety margin of a tenth of it (the server cannot expire it before
/// `contact + timeout`).
fn session_deadline(contact: Instant, timeout: Duration) -> Option<Instant> {
    (contact + timeout).checked_sub(timeout / 10)
}

/// What a state of the ZooKeeper connection means for the locks of its session: `None` when
/// the session is over (expired, closed, auth failed). A read-only server (cut off from the
/// quorum) cannot keep the session alive on the ensemble, so the locks stay suspended and the
/// clock towards the session's end keeps running.
fn session_state_for(state: zk::SessionState) -> Option<SessionState> {
    match state {
        zk::SessionState::SyncConnected => Some(SessionState::Connected),
        zk::SessionState::Disconnected | zk::SessionState::ConnectedReadOnly => Some(SessionState::Suspended),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Hook = Arc<dyn Fn(zk::Client) -> BoxFuture<'static, ()> + Send + Sync>;

    /// Test-only: what [`Inner::conn`] awaits right after a session's handshake, before it
    /// looks at the new session. The driver's own task may report a disconnection in that gap
    /// (when the runtime happens to run it first); no real fault can pin it there, this can.
    static AFTER_HANDSHAKE: Mutex<Option<Hook>> = Mutex::new(None);

    pub(super) async fn after_handshake(client: &zk::Client) {
        let hook = AFTER_HANDSHAKE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(hook) = hook {
            hook(client.clone()).await;
        }
    }

    /// A disconnection the driver reports right after the handshake, before this side has
    /// looked at the new session, is never lost. Timeline: the handshake completes; the link
    /// is reset and new connections are refused; the driver reports Disconnected; only then
    /// does `conn` go on. The session must be published Suspended at once, not left Connected
    /// while the driver is disconnected (its locks would not be suspended).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_disconnection_right_after_the_handshake_suspends_the_session() {
        let url = distlock_testkit::shared::zookeeper_url().expect("the shared ZooKeeper starts");
        let (proxied_url, faults) =
            distlock_testkit::proxy::through_proxies(&url).expect("the fault proxy starts");
        let faults = Arc::new(faults);
        let cut = faults.clone();
        let hook: Hook = Arc::new(move |client: zk::Client| {
            let cut = cut.clone();
            Box::pin(async move {
                cut.refuse(true);
                cut.reset();
                tokio::time::timeout(Duration::from_secs(5), async {
                    while client.state() == zk::SessionState::SyncConnected {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await
                .expect("the driver reports the cut");
            })
        });
        *AFTER_HANDSHAKE.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
        let config = ZooKeeperConfig::from_url(&proxied_url)
            .and_then(|c| c.with_session_timeout(Duration::from_secs(3)))
            .expect("valid");
        let connected = ZooKeeperLock::connect(config).await;
        *AFTER_HANDSHAKE.lock().unwrap_or_else(PoisonError::into_inner) = None;
        let lock = connected.expect("connects");

        let mut session = lock.session().expect("session-bound");
        let left_connected = tokio::time::timeout(
            Duration::from_secs(1),
            session.wait_for(|s| s.state != SessionState::Connected),
        )
        .await
        .is_ok();
        let state = session.borrow().state;
        assert!(
            left_connected && state == SessionState::Suspended,
            "the driver is disconnected, yet the session still says {state:?} a second later"
        );
        faults.heal();
    }

    #[test]
    fn only_a_quorum_connection_keeps_the_session_connected() {
        assert_eq!(
            session_state_for(zk::SessionState::SyncConnected),
            Some(SessionState::Connected)
        );
        assert_eq!(
            session_state_for(zk::SessionState::Disconnected),
            Some(SessionState::Suspended)
        );
        assert_eq!(
            session_state_for(zk::SessionState::ConnectedReadOnly),
            Some(SessionState::Suspended),
            "a read-only server cannot keep the session alive"
        );
        for ended in [
            zk::SessionState::Expired,
            zk::SessionState::Closed,
            zk::SessionState::AuthFailed,
        ] {
            assert_eq!(session_state_for(ended), None, "{ended}");
        }
    }
}
