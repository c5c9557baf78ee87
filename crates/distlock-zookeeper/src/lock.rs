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
//! ```
//!
//! - `<encoded name>` is [`LockName::encode`] with `[A-Za-z0-9._~-]` kept and everything else
//!   percent-encoded (names longer than 240 bytes keep a prefix plus a SHA-256); `.` and `..`
//!   become `%2E` and `%2E%2E`. Different names never share a parent.
//! - Children are Apache Curator's protected-mode `InterProcessMutex` names, exactly: `_c_` +
//!   a fresh hyphenated UUID per attempt + `-lock-` + the server's 10-digit sequence, as
//!   `create().creatingParentContainersIfNeeded().withProtection()` makes them. Curator sorts
//!   every child on what follows the last `lock-` and watches its predecessor with
//!   `getData`, so a Curator `InterProcessMutex` on [`ZooKeeperLock::lock_path`] and this
//!   crate exclude each other and share one FIFO queue.
//! - kazoo's `Lock` names its nodes `<uuid hex>__lock__<seq>` and, since kazoo 2.8, counts
//!   other nodes as contenders only if they match one of its `extra_lock_patterns`: a kazoo
//!   `Lock(path, identifier, extra_lock_patterns=["-lock-"])` on the same path and this crate
//!   exclude each other; a kazoo `Lock` without that argument ignores our nodes (we still
//!   wait for its nodes).
//! - Here, every child whose name ends in a sequence number of at least 10 digits is a
//!   contender, whatever its prefix (ours, Curator's, kazoo's, Curator's read-write locks'),
//!   ordered by that sequence: the server draws all of a parent's sequence numbers from one
//!   counter, so that is the arrival order across recipes. Other children are ignored.
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
//! - connection lost: `Suspended` (the guard's `is_suspended()`); the lock may still be held;
//! - reconnected within the session timeout: `Connected` again with the same epoch;
//! - the server expired the session, or the client stayed disconnected for the whole
//!   negotiated session timeout (Curator's rule: from then on the server may have expired it
//!   and handed the lock to someone else): `Expired`, every guard of that session is lost,
//!   and the next operation opens a new session with the next epoch.
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
    Capabilities, DistributedLock, Error, Expiry, Fairness, Fencing, FencingToken, Holder, Lease, LockName,
    LockState, LossReason, OwnerToken, Result, Session, SessionState, TryAcquire, WakeUp,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::ZooKeeperConfig;

const BACKEND: &str = "zookeeper";
/// Curator's lock-node marker: the sequence follows it.
const LOCK_MARKER: &str = "-lock-";
/// The longest encoded name segment.
const MAX_SEGMENT: usize = 240;
/// How often a background cleanup retries while the session lives.
const CLEANUP_RETRY: Duration = Duration::from_millis(200);

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
            session: watch::channel(Session {
                epoch: 0,
                state: SessionState::Expired,
            })
            .0,
            held: Mutex::new(HashMap::new()),
            listings: AtomicU64::new(0),
            watch_events: AtomicU64::new(0),
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

    /// The acquisition counters of this client (all its clones).
    pub fn stats(&self) -> ZooKeeperStats {
        ZooKeeperStats {
            children_listings: self.inner.listings.load(Ordering::Relaxed),
            watch_events: self.inner.watch_events.load(Ordering::Relaxed),
        }
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

/// `<root>/<encoded name>`.
fn lock_path(root: &str, name: &LockName) -> String {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~');
    let encoded = name.encode(MAX_SEGMENT, allowed);
    let segment = match &*encoded {
        "." => "%2E",
        ".." => "%2E%2E",
        other => other,
    };
    format!("{root}/{segment}")
}

/// The sequence number that ends a sequential node's name (ours, Curator's or kazoo's).
fn sequence_of(child: &str) -> Option<i64> {
    let digits = child.len() - child.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits < 10 {
        return None;
    }
    child[child.len() - digits..].parse().ok()
}

/// The contenders in queue order.
fn queue(mut children: Vec<String>) -> Vec<String> {
    children.retain(|c| sequence_of(c).is_some());
    children.sort_by_key(|c| (sequence_of(c), c.clone()));
    children
}

fn map_err(error: zk::Error) -> Error {
    use zk::Error as E;
    match error {
        E::ConnectionLoss
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
    }

    /// One attempt: create our node, list the queue, keep the node if it is first, else
    /// delete it. Round trips: 2 when free (`create2`, `getChildren`), 3 when held (+`delete`);
    /// +1 the first time a name's parent is created (+1 more for the root, once).
    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, _ttl: Duration) -> Result<TryAcquire> {
        let inner = &self.inner;
        inner
            .bounded(async {
                let sent_at = Instant::now();
                let conn = inner.conn().await?;
                let mut entry = QueueEntry::new(inner, &conn, name);
                let node = entry.create(owner).await?;
                let queue = inner.list(&conn, &entry.parent).await?;
                match queue.first() {
                    Some(first) if *first == node.child => {
                        entry.disarm();
                        Ok(TryAcquire::Acquired(
                            inner.hold(&conn, name, owner, node, sent_at),
                        ))
                    }
                    _ => {
                        conn.client
                            .delete(&node.path, None)
                            .await
                            .or_else(ignore_no_node)?;
                        entry.disarm();
                        Ok(TryAcquire::Held(Holder::unknown()))
                    }
                }
            })
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Release
    // -----------------------------------------------------------------------------------------

    /// Deletes our node: 1 round trip (`delete`; +1 parent `delete` on servers without
    /// container nodes). Owner-checked by construction: the node's name is unique to this
    /// acquisition and it is ephemeral, so it exists only while this hold does. A lease of an
    /// ended session reports `false` even if the server still had its node.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let Some(path) = lease.handle().map(str::to_owned) else {
            return Ok(false);
        };
        let inner = &self.inner;
        inner.unhold(&path);
        let conn = inner.bounded(inner.conn()).await?;
        let deleted = inner
            .bounded(async { Ok(conn.client.delete(&path, None).await) })
            .await;
        let existed = match deleted {
            Ok(Ok(())) => true,
            Ok(Err(zk::Error::NoNode)) => false,
            Ok(Err(error)) => {
                let error = map_err(error);
                if error.is_transient() {
                    spawn_cleanup(
                        conn.client.clone(),
                        Cleanup::Path(path),
                        inner.config.operation_timeout(),
                    );
                }
                return Err(error);
            }
            Err(timeout) => {
                // Keep trying in the background while the session lives.
                spawn_cleanup(
                    conn.client.clone(),
                    Cleanup::Path(path),
                    inner.config.operation_timeout(),
                );
                return Err(timeout);
            }
        };
        if !inner.containers.load(Ordering::Relaxed) {
            if let Some((parent, _)) = path.rsplit_once('/') {
                let _ = inner
                    .bounded(async { conn.client.delete(parent, None).await.map_err(map_err) })
                    .await;
            }
        }
        Ok(existed && lease.session_epoch() == Some(conn.epoch) && inner.session.borrow().keeps(conn.epoch))
    }

    /// Session-bound locks have nothing to renew: this checks that our node still exists and
    /// belongs to the current session (1 round trip, `exists`).
    async fn extend(&self, lease: &Lease, _ttl: Duration) -> Result<Option<Lease>> {
        let Some(path) = lease.handle() else {
            return Ok(None);
        };
        let inner = &self.inner;
        let conn = inner.bounded(inner.conn()).await?;
        if lease.session_epoch() != Some(conn.epoch) {
            return Ok(None);
        }
        let stat = inner
            .bounded(async { conn.client.check_stat(path).await.map_err(map_err) })
            .await?;
        let ours = stat.is_some_and(|s| s.ephemeral_owner == conn.client.session_id().0);
        Ok(ours.then(|| lease.clone()))
    }

    // -----------------------------------------------------------------------------------------
    // Wait
    // -----------------------------------------------------------------------------------------

    /// Waits in the queue: create our node, then until it is first, watch only its immediate
    /// predecessor (`exists` with a watch) and list again when that watch fires. Round trips:
    /// 2 when free; when queued, 3 to get in line (`create2`, `getChildren`, `exists`) and 1
    /// (`getChildren`) per wake-up, and each release wakes exactly one waiter.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, our node is deleted in the background (found by its
    /// GUID prefix if the drop came while `create` was in flight); a lock won but not yet
    /// returned cannot exist, since winning and returning happen without an await between.
    async fn acquire_queued(
        &self,
        name: &LockName,
        owner: OwnerToken,
        _ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let inner = &self.inner;
        let sent_at = Instant::now();
        let conn = inner.bounded(inner.conn()).await?;
        let mut entry = QueueEntry::new(inner, &conn, name);
        let node = inner.bounded(entry.create(owner)).await?;
        let mut session = inner.session.subscribe();
        loop {
            let queue = inner.bounded(inner.list(&conn, &entry.parent)).await?;
            let Some(position) = queue.iter().position(|c| *c == node.child) else {
                return Err(Error::backend(
                    BACKEND,
                    "our queue node vanished (deleted behind our back, or the session ended)",
                ));
            };
            if position == 0 {
                entry.disarm();
                return Ok(Some(inner.hold(&conn, name, owner, node, sent_at)));
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                inner.bounded(entry.leave()).await?;
                return Ok(None);
            }
            let predecessor = format!("{}/{}", entry.parent, queue[position - 1]);
            let (stat, watcher) = inner
                .bounded(async {
                    conn.client
                        .check_and_watch_stat(&predecessor)
                        .await
                        .map_err(map_err)
                })
                .await?;
            if stat.is_none() {
                continue; // gone between the listing and the watch: look again
            }
            let expired = async {
                // Ends when the session no longer keeps our epoch (or the backend is gone).
                let _ = session.wait_for(|s| !s.keeps(conn.epoch)).await;
            };
            let sleep = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                event = watcher.changed() => {
                    inner.watch_events.fetch_add(1, Ordering::Relaxed);
                    if event.event_type == zk::EventType::Session {
                        return Err(Error::unavailable(BACKEND, format!("the session ended while waiting ({})", event.session_state)));
                    }
                }
                () = sleep => {
                    inner.bounded(entry.leave()).await?;
                    return Ok(None);
                }
                () = expired => {
                    return Err(Error::unavailable(BACKEND, "the session ended while waiting"));
                }
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

    /// Lists the queue and reads the first node: 2 round trips (1 when free).
    async fn inspect(&self, name: &LockName) -> Result<LockState> {
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

fn ignore_no_node(error: zk::Error) -> Result<()> {
    match error {
        zk::Error::NoNode => Ok(()),
        other => Err(map_err(other)),
    }
}

/// A created contender node.
struct Node {
    path: String,
    child: String,
    czxid: i64,
}

/// Our place in a lock's queue while an acquisition runs. Dropped while armed (an error, a
/// timeout, a cancelled future), it deletes our node in the background, or, if `create` may
/// have been applied without our learning the name, every child carrying our GUID prefix.
struct QueueEntry {
    client: zk::Client,
    parent: String,
    prefix: String,
    root: String,
    op_timeout: Duration,
    containers: bool,
    created: Option<String>,
    sent: bool,
    armed: bool,
    inner: Weak<Inner>,
}

impl QueueEntry {
    fn new(inner: &Arc<Inner>, conn: &Conn, name: &LockName) -> Self {
        Self {
            client: conn.client.clone(),
            parent: lock_path(inner.config.root(), name),
            prefix: format!("_c_{}{LOCK_MARKER}", uuid::Uuid::new_v4().hyphenated()),
            root: inner.config.root().to_owned(),
            op_timeout: inner.config.operation_timeout(),
            containers: inner.containers.load(Ordering::Relaxed),
            created: None,
            sent: false,
            armed: true,
            inner: Arc::downgrade(inner),
        }
    }

    /// `create2` of our EPHEMERAL_SEQUENTIAL node (1 round trip), creating the parent (and once
    /// the root) when missing; after a connection loss, finds our node by its GUID prefix
    /// instead of creating a second one (Curator's protection mode).
    async fn create(&mut self, owner: OwnerToken) -> Result<Node> {
        let data = owner.to_string();
        let prefix_path = format!("{}/{}", self.parent, self.prefix);
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut attempts = 0;
        loop {
            attempts += 1;
            let create = self.client.create(&prefix_path, data.as_bytes(), &options);
            self.sent = true;
            match create.await {
                Ok((stat, sequence)) => {
                    let child = format!("{}{sequence}", self.prefix);
                    let path = format!("{}/{child}", self.parent);
                    self.created = Some(path.clone());
                    return Ok(Node {
                        path,
                        child,
                        czxid: stat.czxid,
                    });
                }
                Err(zk::Error::NoNode) if attempts < 4 => self.create_parent().await?,
                Err(zk::Error::ConnectionLoss) if attempts < 4 => {
                    if let Some(node) = self.find_own().await? {
                        return Ok(node);
                    }
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }

    async fn find_own(&mut self) -> Result<Option<Node>> {
        let children = self.client.list_children(&self.parent).await.map_err(map_err)?;
        let Some(child) = children.into_iter().find(|c| c.starts_with(&self.prefix)) else {
            return Ok(None);
        };
        let path = format!("{}/{child}", self.parent);
        let Some(stat) = self.client.check_stat(&path).await.map_err(map_err)? else {
            return Ok(None);
        };
        self.created = Some(path.clone());
        Ok(Some(Node {
            path,
            child,
            czxid: stat.czxid,
        }))
    }

    /// Creates the lock's parent as a container node (persistent if the server has none).
    async fn create_parent(&mut self) -> Result<()> {
        for _ in 0..2 {
            let mode = if self.containers {
                zk::CreateMode::Container
            } else {
                zk::CreateMode::Persistent
            };
            let options = mode.with_acls(zk::Acls::anyone_all());
            match self.client.create(&self.parent, &[], &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => return Ok(()),
                Err(zk::Error::Unimplemented) if self.containers => {
                    self.containers = false;
                    if let Some(inner) = self.inner.upgrade() {
                        inner.containers.store(false, Ordering::Relaxed);
                    }
                }
                Err(zk::Error::NoNode) => {
                    let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    self.client.mkdir(&self.root, &options).await.map_err(map_err)?;
                }
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(())
    }

    /// Deletes our node now (1 round trip) and disarms.
    async fn leave(&mut self) -> Result<()> {
        if let Some(path) = &self.created {
            self.client.delete(path, None).await.or_else(ignore_no_node)?;
        }
        self.disarm();
        Ok(())
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if !self.armed || !self.sent {
            return;
        }
        let cleanup = match self.created.take() {
            Some(path) => Cleanup::Path(path),
            None => Cleanup::Prefix {
                parent: std::mem::take(&mut self.parent),
                prefix: std::mem::take(&mut self.prefix),
            },
        };
        spawn_cleanup(self.client.clone(), cleanup, self.op_timeout);
    }
}

enum Cleanup {
    Path(String),
    Prefix { parent: String, prefix: String },
}

/// Deletes a node we no longer want, retrying while the session lives (once it ends, the
/// server deletes the node anyway). Does nothing outside a tokio runtime.
fn spawn_cleanup(client: zk::Client, cleanup: Cleanup, op_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        loop {
            let attempt = async {
                match &cleanup {
                    Cleanup::Path(path) => client.delete(path, None).await,
                    Cleanup::Prefix { parent, prefix } => {
                        // Sent after our `create` on the same session, so it sees its node.
                        let children = match client.list_children(parent).await {
                            Err(zk::Error::NoNode) => return Ok(()),
                            other => other?,
                        };
                        for child in children.iter().filter(|c| c.starts_with(prefix.as_str())) {
                            match client.delete(&format!("{parent}/{child}"), None).await {
                                Ok(()) | Err(zk::Error::NoNode) => {}
                                Err(e) => return Err(e),
                            }
                        }
                        Ok(())
                    }
                }
            };
            match tokio::time::timeout(op_timeout, attempt).await {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => return,
                _ if client.state().is_terminated() => return,
                _ => tokio::time::sleep(CLEANUP_RETRY).await,
            }
        }
    });
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
        let client = zk::Client::connector()
            .session_timeout(self.config.session_timeout())
            .connection_timeout(self.config.connection_timeout())
            .connect(self.config.connect_string())
            .await
            .map_err(map_err)?;
        let epoch = self.session.borrow().epoch + 1;
        let conn = Conn { client, epoch };
        tracing::debug!(epoch, session = %conn.client.session_id(), "distlock: ZooKeeper session opened");
        tokio::spawn(follow_session(
            Arc::downgrade(self),
            epoch,
            conn.client.state_watcher(),
            conn.client.session_timeout(),
            self.config.connection_timeout(),
        ));
        *self.slot() = Some(conn.clone());
        self.session.send_replace(Session::connected(epoch));
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

    /// `getChildren` of a lock's parent, in queue order: 1 round trip.
    async fn list(&self, conn: &Conn, parent: &str) -> Result<Vec<String>> {
        self.listings.fetch_add(1, Ordering::Relaxed);
        let children = conn.client.list_children(parent).await.map_err(map_err)?;
        Ok(queue(children))
    }

    /// Builds the lease of a won node and starts watching the node for deletion behind our
    /// back (in the background: no added latency).
    fn hold(
        self: &Arc<Self>,
        conn: &Conn,
        name: &LockName,
        owner: OwnerToken,
        node: Node,
        sent_at: Instant,
    ) -> Lease {
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
        Lease::session_bound(name.clone(), owner, conn.epoch, sent_at)
            .with_fencing(fencing)
            .with_handle(node.path)
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

/// Watches one held node; reports it stolen if it is deleted while still registered. Holds
/// the client only for the `exists` round trip, so it never keeps a session open.
async fn watch_held(inner: Weak<Inner>, client: zk::Client, path: String, epoch: u64, op_timeout: Duration) {
    let checked = tokio::time::timeout(op_timeout, client.check_and_watch_stat(&path)).await;
    drop(client);
    let watcher = match checked {
        Ok(Ok((Some(_), watcher))) => watcher,
        Ok(Ok((None, _))) => {
            if let Some(inner) = inner.upgrade() {
                inner.stolen(&path, epoch);
            }
            return;
        }
        // A session problem: the session follower reports it.
        _ => return,
    };
    let event = watcher.changed().await;
    if event.event_type == zk::EventType::NodeDeleted {
        if let Some(inner) = inner.upgrade() {
            inner.stolen(&path, epoch);
        }
    }
}

/// Maps the client's session states onto [`Session`] for epoch `epoch`, and declares the
/// session expired on our side before the server can expire it.
///
/// The server expires a session `timeout` after it last heard from us, which is no earlier
/// than our last contact (the last reply we received) minus a round trip. The driver notices a
/// silent connection only `connection_timeout` (plus one tick) after that last contact, so a
/// disconnection seen at `d` is counted back to `d - connection_timeout - tick`, and the
/// session ends here at that instant plus `timeout` minus a safety margin of a tenth of the
/// session timeout: the guards' lost signals fire while the server still holds our nodes.
/// Suspended, published at `d`, already stops `with_lock` (Curator's rule).
async fn follow_session(
    inner: Weak<Inner>,
    epoch: u64,
    mut states: zk::StateWatcher,
    timeout: Duration,
    connection_timeout: Duration,
) {
    let noticed_after = connection_timeout + connection_timeout / 8;
    let margin = timeout / 10;
    let mut gave_up_at: Option<Instant> = None;
    loop {
        let state = match gave_up_at {
            Some(at) => tokio::select! {
                state = states.changed() => state,
                () = tokio::time::sleep_until(at) => {
                    if let Some(inner) = inner.upgrade() {
                        inner.end_session(epoch, "no contact with the server for the session timeout, less a safety margin");
                    }
                    return;
                }
            },
            None => states.changed().await,
        };
        let Some(inner) = inner.upgrade() else {
            return;
        };
        match state {
            zk::SessionState::Disconnected => {
                tracing::info!(epoch, "distlock: ZooKeeper connection lost; locks suspended");
                inner.set_state(epoch, SessionState::Suspended);
                gave_up_at.get_or_insert_with(|| {
                    let now = Instant::now();
                    let last_contact = now.checked_sub(noticed_after).unwrap_or(now);
                    (last_contact + timeout)
                        .checked_sub(margin)
                        .unwrap_or(now)
                        .max(now)
                });
            }
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                tracing::info!(epoch, "distlock: ZooKeeper connection back in the same session");
                inner.set_state(epoch, SessionState::Connected);
                gave_up_at = None;
            }
            other => {
                inner.end_session(epoch, &format!("session state {other}"));
                return;
            }
        }
        if inner.session.borrow().epoch != epoch {
            return; // a newer session took over
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_distinct_legal_segments() {
        let path = |s: &str| lock_path("/distlock", &LockName::new(s).expect("valid"));
        assert_eq!(path("orders-42"), "/distlock/orders-42");
        assert_eq!(path("a/b"), "/distlock/a%2Fb");
        assert_eq!(path("."), "/distlock/%2E");
        assert_eq!(path(".."), "/distlock/%2E%2E");
        assert_ne!(path("."), path("%2E"));
        assert_eq!(path("with\0nul"), "/distlock/with%00nul");
        let long = path(&"x".repeat(1024));
        assert!(long.len() <= "/distlock/".len() + MAX_SEGMENT);
    }

    #[test]
    fn queue_orders_all_recipes_by_sequence() {
        let children = vec![
            "_c_0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-0000000007".to_owned(),
            "8f14e45fceea167a5a36dedd4bea2543__lock__0000000003".to_owned(),
            "lease_holder".to_owned(),
            "_c_aaaaaaaa-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-0000000005".to_owned(),
        ];
        let ordered = queue(children);
        assert_eq!(ordered.len(), 3);
        assert!(ordered[0].ends_with("__lock__0000000003"));
        assert!(ordered[1].ends_with("-lock-0000000005"));
        assert!(ordered[2].ends_with("-lock-0000000007"));
        assert_eq!(sequence_of("x-lock-0000000042"), Some(42));
        assert_eq!(sequence_of("x-lock-42"), None);
    }
}
