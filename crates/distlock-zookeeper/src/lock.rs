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
//!                                                  a read-write lock (see `rw_lock.rs`; an
//!                                                  upgradeable reader's node ends in
//!                                                  `upgradeable-__READ__<seq>`)
//! ```
//!
//! This file holds the type, its constructor and the [`DistributedLock`] dispatch. The
//! submodules, one concern each: `session` (opening and following the session, and its
//! heartbeat), `held` (the registry of held nodes and their deletion watch), `queue` (a queue
//! of sequential nodes: its order, our node in it, waiting on the predecessor, and deleting
//! nodes we no longer want), `layout` (paths and node names), `semaphore` and `rw_lock` (their
//! recipes), `note` (the note beside a mutex hold), `admin` (paths, counters and session facts
//! for operators).
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
//! - The data of our node is the owner token, until its holder leaves a note there
//!   ([`DistributedLock::set_note`], see `note.rs`: Curator's `LeaderSelector` keeps its
//!   participant id there too). `inspect` reports the first contender's data as its owner
//!   (Curator stores the client's IP address, kazoo its identifier) and note, or, once a note
//!   replaced our owner token, the owner from the node's protected name and the note from its
//!   data.
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
//! lease's `ttl` is ignored. How the session is published to the guards (connected,
//! suspended, expired, and its local deadline) is in `session.rs`.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, Attempt, Capabilities, DistributedLock, Error, Expiry, Fairness, Fencing, FencingToken,
    Holder, Lease, LockKind, LockName, LockState, LossReason, ObjectState, Primitive, Result, Session,
    SessionState, TryAcquire, WakeUp,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ZooKeeperConfig;

mod admin;
mod held;
mod layout;
mod note;
mod queue;
mod rw_lock;
mod semaphore;
mod session;

pub use admin::ZooKeeperStats;
use held::{handle_paths, Held};
use layout::lock_path;
use queue::{queue, spawn_cleanup, sync_sent, Cleanup, Line, QueueEntry};

const BACKEND: &str = "zookeeper";

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
            .with_weights_and_upgrades(true, true)
            .with_notes(true)
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
            LockKind::Permit { permits, weight } => {
                validate_permits(permits, weight)?;
                self.inner.try_permit(name, permits, weight, owner).await
            }
            LockKind::Read | LockKind::Write | LockKind::UpgradeableRead => {
                self.inner.try_rw(name, attempt.kind, owner).await
            }
            other => Err(not_a_kind(other)),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Release
    // -----------------------------------------------------------------------------------------

    /// Deletes our node: 1 round trip (`delete`, or one `multi` of deletes for the nodes of a
    /// weighted permit, all or none; +1 parent `delete` on servers without container nodes). Owner-checked by construction: the node's name carries the owner
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
        let Some(handle) = lease.handle() else {
            return self.release_by_owner(lease).await;
        };
        let paths: Vec<String> = handle_paths(handle).into_iter().map(str::to_owned).collect();
        inner.unhold(&paths[0]);
        let mut client: Option<zk::Client> = None;
        let outcome = inner
            .bounded(async {
                let conn = inner.conn().await?;
                client = Some(conn.client.clone());
                // An upgradeable read that became the write hold goes only with it (its data,
                // version 0 until then, marks the upgrade).
                let version = (lease.kind() == LockKind::UpgradeableRead).then_some(0);
                let existed = match delete_hold(&conn.client, &paths, version).await {
                    Ok(existed) => existed,
                    Err(error) => return Ok(Err(error)),
                };
                if !inner.containers.load(Ordering::Relaxed) {
                    if let Some((parent, _)) = paths[0].rsplit_once('/') {
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
                paths.into_iter().map(Cleanup::Path).collect(),
                inner.config.operation_timeout(),
            );
        }
        Err(error)
    }

    /// Session-bound locks have nothing to renew: this checks that our node (every node of a
    /// weighted permit) still exists and belongs to the current session (1 round trip, the
    /// `exists` sent together), bounded once by the operation timeout. The same for every kind of hold (the handle is its node's path); a lease
    /// without a handle is not renewed (`None`).
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            let lease = &lease;
            let Some(handle) = lease.handle() else {
                return Ok(None);
            };
            let inner = &self.inner;
            inner
                .bounded(async {
                    let conn = inner.conn().await?;
                    if lease.session_epoch() != Some(conn.epoch) {
                        return Ok(None);
                    }
                    let session = conn.client.session_id().0;
                    let checks = handle_paths(handle)
                        .into_iter()
                        .map(|path| conn.client.check_stat(path));
                    let mut ours = inner.session.borrow().keeps(conn.epoch);
                    // An upgradeable read whose node was written became the write hold.
                    let unwritten = lease.kind() != LockKind::UpgradeableRead;
                    for stat in futures::future::join_all(checks).await {
                        ours &= stat
                            .map_err(map_err)?
                            .is_some_and(|s| s.ephemeral_owner == session && (unwritten || s.version == 0));
                    }
                    Ok(ours.then(|| lease.clone()))
                })
                .await
        })
        .await
    }

    /// Writes `note` as the data of the lease's own lock node, as Curator's `LeaderSelector`
    /// keeps its participant id (see `note.rs`): 2 round trips (`exists`, `setData` at that
    /// version); `false` with none sent for a lease that is not a mutex hold of its owner.
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.inner.set_note(lease, note).await
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
            LockKind::Permit { permits, weight } => {
                validate_permits(permits, weight)?;
                self.inner
                    .queue_for_permit(name, permits, weight, owner, deadline)
                    .await
            }
            LockKind::Read | LockKind::Write | LockKind::UpgradeableRead => {
                self.inner.queue_for_rw(name, attempt.kind, owner, deadline).await
            }
            other => Err(not_a_kind(other)),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Semaphores and read-write locks
    // -----------------------------------------------------------------------------------------

    /// The holders of a mutex (its first contender, with its note: the queue listed and the
    /// first node read, 2 round trips, 1 when free), a
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
                            // Synced: a follower behind its leader would show a released holder.
                            let (synced, listed) =
                                futures::join!(sync_sent(&conn, &parent), conn.client.list_children(&parent));
                            synced?;
                            let children = match listed {
                                Ok(children) => children,
                                Err(zk::Error::NoNode) => return Ok(LockState::free(None)),
                                Err(e) => return Err(map_err(e)),
                            };
                            let Some(first) = queue(children).into_iter().next() else {
                                return Ok(LockState::free(None));
                            };
                            match conn.client.get_data(&format!("{parent}/{first}")).await {
                                Ok((data, stat)) => {
                                    let (owner, note) = note::owner_and_note(&first, &data, stat.version);
                                    Ok(LockState::held(
                                        owner,
                                        u64::try_from(stat.czxid).ok().map(FencingToken::new),
                                        None,
                                    )
                                    .with_note(note))
                                }
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
        let key = handle_paths(lease.handle()?)[0];
        let mut rx = self.inner.held().get(key)?.lost.subscribe();
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

/// Deletes the nodes of one hold: 1 round trip (a `delete`, at `version` if given, or for
/// several nodes one `multi` of deletes, all or none). `true` if they all existed; when some were already gone, the
/// others are deleted one by one and the answer is `false` (the hold was no longer whole).
async fn delete_hold(
    client: &zk::Client,
    paths: &[String],
    version: Option<i32>,
) -> std::result::Result<bool, zk::Error> {
    if let [path] = paths {
        return match client.delete(path, version).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
            Err(error) => Err(error),
        };
    }
    let mut multi = client.new_multi_writer();
    for path in paths {
        multi.add_delete(path, None)?;
    }
    match multi.commit().await.map_err(zk::Error::from) {
        Ok(_) => Ok(true),
        Err(zk::Error::NoNode) => {
            let deletes: Vec<_> = paths.iter().map(|path| client.delete(path, None)).collect();
            for deleted in futures::future::join_all(deletes).await {
                match deleted {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(error) => return Err(error),
                }
            }
            Ok(false)
        }
        Err(error) => Err(error),
    }
}

/// A semaphore needs at least one permit, and a hold takes 1 to `permits` of them
/// ([`LockClient`](distlock_core::LockClient) checks too; this keeps a direct caller from a
/// semaphore nobody can hold, or a hold that can never be granted).
fn validate_permits(permits: u32, weight: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid_options("a semaphore needs at least one permit"));
    }
    if weight == 0 || weight > permits {
        return Err(Error::invalid_options(format!(
            "a hold of {weight} permits of a semaphore of {permits}"
        )));
    }
    Ok(())
}

/// The error for a kind `try_acquire_kind` and `acquire_kind_queued` do not take (the mutex
/// has `try_acquire` and `acquire_queued`).
fn not_a_kind(kind: LockKind) -> Error {
    Error::invalid_options(format!(
        "{kind} is not a permit, a read, an upgradeable read or the write lock"
    ))
}

impl Inner {
    /// Runs one operation within the operation timeout.
    async fn bounded<T>(&self, operation: impl Future<Output = Result<T>>) -> Result<T> {
        let limit = self.config.operation_timeout();
        tokio::time::timeout(limit, operation)
            .await
            .map_err(|_| timed_out("ZooKeeper operation", limit))?
    }
}
