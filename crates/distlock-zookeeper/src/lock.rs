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
//!   `-999999999`): it is parsed signed and ordered with wrapping arithmetic. Other children
//!   are ignored.
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
//! - connected only to a read-only server: `Suspended` (it cannot keep the session alive);
//! - the server expired the session, or the last contact with the server is a session
//!   timeout ago, less a margin of a tenth of it (so this side says lost before the server
//!   can expire the session and hand the lock to someone else): `Expired`, every guard of
//!   that session is lost, and the next operation opens a new session with the next epoch.
//!   That instant is also published as the session's local deadline
//!   ([`Session::valid_until`]), moved forward by each heartbeat: a guard checks it against
//!   the clock, so a process that was paused (a long GC, SIGSTOP) past it says lost the moment
//!   it runs again, before any of its tasks has learnt anything.
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
/// The first pause between a background cleanup's attempts (doubled after each).
const CLEANUP_RETRY: Duration = Duration::from_millis(200);
/// The pause before a held node's watch is set again after a failed `exists`.
const WATCH_RETRY: Duration = Duration::from_millis(100);
/// The longest pause between a background cleanup's attempts.
const CLEANUP_MAX_PAUSE: Duration = Duration::from_secs(2);
/// How many times a background cleanup tries before it gives up (and logs it).
const CLEANUP_ATTEMPTS: u32 = 10;

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

    /// The acquisition counters of this client (all its clones).
    pub fn stats(&self) -> ZooKeeperStats {
        ZooKeeperStats {
            children_listings: self.inner.listings.load(Ordering::Relaxed),
            watch_events: self.inner.watch_events.load(Ordering::Relaxed),
        }
    }

    /// The owner-checked release of a lease without a handle (the core's cleanup after an
    /// ambiguous attempt): `sync`, `getChildren` of the lock's parent, and a `delete` of each
    /// node carrying the owner's protected prefix, bounded once by the operation timeout.
    /// `true` if a node was deleted.
    async fn release_by_owner(&self, lease: &Lease) -> Result<bool> {
        let inner = &self.inner;
        let parent = lock_path(inner.config.root(), lease.name());
        let prefix = protected_prefix(lease.owner());
        inner
            .bounded(async {
                let conn = inner.conn().await?;
                match conn.client.sync(&parent).await {
                    Ok(()) | Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(map_err(e)),
                }
                let Some(children) = inner.list_children(&conn, &parent).await? else {
                    return Ok(false);
                };
                let mut deleted = false;
                for child in children.iter().filter(|c| c.starts_with(&prefix)) {
                    let path = format!("{parent}/{child}");
                    inner.unhold(&path);
                    match conn.client.delete(&path, None).await {
                        Ok(()) => deleted = true,
                        Err(zk::Error::NoNode) => {}
                        Err(e) => return Err(map_err(e)),
                    }
                }
                Ok(deleted)
            })
            .await
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
///
/// The server appends a signed 32-bit counter formatted as `%010d`: ten digits while it is
/// non-negative, and after it wraps past 2147483647 a minus sign and nine or ten digits
/// (`-2147483648`, ..., `-000000001`). After our (and Curator's) `-lock-` marker the sequence
/// is everything that follows the marker's last occurrence (its own hyphen is no sign); on
/// other names a hyphen right before the digits is the sign.
fn sequence_of(child: &str) -> Option<i32> {
    let text = match child.rfind(LOCK_MARKER) {
        Some(i) => &child[i + LOCK_MARKER.len()..],
        None => {
            let digits = child.len() - child.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            let start = child.len() - digits;
            if child[..start].ends_with('-') {
                &child[start - 1..]
            } else {
                &child[start..]
            }
        }
    };
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    let well_formed = digits.bytes().all(|b| b.is_ascii_digit())
        && if negative {
            matches!(digits.len(), 9 | 10)
        } else {
            digits.len() == 10
        };
    if !well_formed {
        return None;
    }
    text.parse().ok()
}

/// Whether sequence `a` was drawn before `b`: the counter wraps, so the difference decides
/// (valid while live nodes span fewer than 2^31 numbers, which they always do).
#[cfg(test)]
fn drawn_before(a: i32, b: i32) -> bool {
    b.wrapping_sub(a) > 0
}

/// The contenders in queue order: by sequence, counted from the first child's sequence with
/// wrapping arithmetic, so that the order holds across the counter's wrap to -2147483648.
fn queue(children: Vec<String>) -> Vec<String> {
    let mut keyed: Vec<(i32, String)> = children
        .into_iter()
        .filter_map(|c| sequence_of(&c).map(|seq| (seq, c)))
        .collect();
    let Some(&(base, _)) = keyed.first() else {
        return Vec::new();
    };
    keyed.sort_by(|(a, x), (b, y)| (a.wrapping_sub(base), x).cmp(&(b.wrapping_sub(base), y)));
    keyed.into_iter().map(|(_, c)| c).collect()
}

/// The protected-mode prefix of `owner`'s nodes: `_c_<owner token>-lock-`. The owner token is a
/// UUID, so this is Curator's protected name, and anyone holding the owner token can find the
/// node (the core's cleanup after an ambiguous attempt carries no handle).
fn protected_prefix(owner: OwnerToken) -> String {
    format!("_c_{}{LOCK_MARKER}", owner.as_uuid().hyphenated())
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
            // Each waiter watches only its predecessor's node.
            .with_wakes_one(true)
            .with_expiry(Expiry::Session)
    }

    /// One attempt: list the queue first, and only if it is empty create our node, list again
    /// and keep the node if it is first (else delete it). A held lock thus costs 1 round trip
    /// (`getChildren`) and burns no sequence number; a free one 3 (`getChildren`, `create2`,
    /// `getChildren`), +1 the first time a name's parent is created (+1 more for the root,
    /// once). A node of ours already in the queue (left by an earlier attempt of the same owner
    /// whose reply was lost) is adopted, never duplicated.
    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, _ttl: Duration) -> Result<TryAcquire> {
        let inner = &self.inner;
        inner
            .bounded(async {
                let sent_at = Instant::now();
                let conn = inner.conn().await?;
                let mut entry = QueueEntry::new(inner, &conn, name, owner);
                if let Some(children) = inner.list_children(&conn, &entry.parent).await? {
                    let (ours, queue) = inner
                        .settle(&conn, &entry.parent, &entry.prefix, queue(children), None)
                        .await?;
                    if let Some(node) = ours {
                        // Our earlier node: first, we hold the lock; else leave the queue.
                        entry.created = Some(node.path.clone());
                        entry.sent = true;
                        if queue.first() == Some(&node.child) {
                            let lease = inner.hold(&conn, name, owner, node, sent_at)?;
                            entry.disarm();
                            return Ok(TryAcquire::Acquired(lease));
                        }
                        entry.leave().await?;
                        return Ok(TryAcquire::Held(Holder::unknown()));
                    }
                    if !queue.is_empty() {
                        entry.disarm();
                        return Ok(TryAcquire::Held(Holder::unknown()));
                    }
                }
                let created = entry.create(owner).await?;
                let children = inner
                    .list_children(&conn, &entry.parent)
                    .await?
                    .unwrap_or_default();
                let (ours, queue) = inner
                    .settle(
                        &conn,
                        &entry.parent,
                        &entry.prefix,
                        queue(children),
                        Some(&created),
                    )
                    .await?;
                let Some(node) = ours else {
                    return Err(Error::backend(
                        BACKEND,
                        "our queue node vanished (deleted behind our back, or the session ended)",
                    ));
                };
                entry.created = Some(node.path.clone());
                if queue.first() == Some(&node.child) {
                    let lease = inner.hold(&conn, name, owner, node, sent_at)?;
                    entry.disarm();
                    return Ok(TryAcquire::Acquired(lease));
                }
                entry.leave().await?;
                Ok(TryAcquire::Held(Holder::unknown()))
            })
            .await
    }

    // -----------------------------------------------------------------------------------------
    // Release
    // -----------------------------------------------------------------------------------------

    /// Deletes our node: 1 round trip (`delete`; +1 parent `delete` on servers without
    /// container nodes). Owner-checked by construction: the node's name carries the owner
    /// token and is unique to this acquisition, and it is ephemeral, so it exists only while
    /// this hold does. A lease without a handle (the core's cleanup after an ambiguous
    /// attempt) is found by the owner's protected prefix: `sync` and `getChildren`, then a
    /// `delete` per node of that owner. A lease of an ended session reports `false` even if
    /// the server still had its node. The whole call is bounded once by the operation timeout;
    /// a delete that timed out or failed transiently is retried in the background.
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
            spawn_cleanup(client, Cleanup::Path(path), inner.config.operation_timeout());
        }
        Err(error)
    }

    /// Session-bound locks have nothing to renew: this checks that our node still exists and
    /// belongs to the current session (1 round trip, `exists`), bounded once by the operation
    /// timeout.
    async fn extend(&self, lease: &Lease, _ttl: Duration) -> Result<Option<Lease>> {
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
        let mut entry = QueueEntry::new(inner, &conn, name, owner);
        let created = inner.bounded(entry.create(owner)).await?;
        let mut session = inner.session.subscribe();
        loop {
            let (ours, queue) = inner
                .bounded(async {
                    let children = inner
                        .list_children(&conn, &entry.parent)
                        .await?
                        .unwrap_or_default();
                    inner
                        .settle(
                            &conn,
                            &entry.parent,
                            &entry.prefix,
                            queue(children),
                            Some(&created),
                        )
                        .await
                })
                .await?;
            let Some(node) = ours else {
                return Err(Error::backend(
                    BACKEND,
                    "our queue node vanished (deleted behind our back, or the session ended)",
                ));
            };
            entry.created = Some(node.path.clone());
            let Some(position) = queue.iter().position(|c| *c == node.child) else {
                return Err(Error::backend(BACKEND, "our queue node is not in the queue"));
            };
            if position == 0 {
                let lease = inner.hold(&conn, name, owner, node, sent_at)?;
                entry.disarm();
                return Ok(Some(lease));
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
#[derive(Clone)]
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
    fn new(inner: &Arc<Inner>, conn: &Conn, name: &LockName, owner: OwnerToken) -> Self {
        Self {
            client: conn.client.clone(),
            parent: lock_path(inner.config.root(), name),
            prefix: protected_prefix(owner),
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

    /// After a lost `create` reply: our node, if the create was applied. The reconnection may
    /// have reached a follower that has not applied it yet, so `sync` first (the listing then
    /// sees every write the leader committed before); if several nodes carry our prefix, the
    /// lowest of our session is ours and the others are deleted.
    async fn find_own(&mut self) -> Result<Option<Node>> {
        let Some(inner) = self.inner.upgrade() else {
            return Err(Error::unavailable(BACKEND, "the ZooKeeper client was dropped"));
        };
        match self.client.sync(&self.parent).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(map_err(e)),
        }
        let conn = Conn {
            client: self.client.clone(),
            epoch: 0,
        };
        let Some(children) = inner.list_children(&conn, &self.parent).await? else {
            return Ok(None);
        };
        let (ours, _) = inner
            .settle(&conn, &self.parent, &self.prefix, queue(children), None)
            .await?;
        if let Some(node) = &ours {
            self.created = Some(node.path.clone());
        }
        Ok(ours)
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

/// Deletes a node we no longer want in the background, retrying transient failures with
/// backoff (200 ms doubling to 2 s) for at most [`CLEANUP_ATTEMPTS`] attempts, and stopping at
/// once when the session ends (the server then deletes the node anyway) or on a permanent
/// error such as `NoAuth`. Every failure is logged. Does nothing outside a tokio runtime.
fn spawn_cleanup(client: zk::Client, cleanup: Cleanup, op_timeout: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let what = match &cleanup {
            Cleanup::Path(path) => path.clone(),
            Cleanup::Prefix { parent, prefix } => format!("{parent}/{prefix}*"),
        };
        let mut pause = CLEANUP_RETRY;
        for attempt in 1..=CLEANUP_ATTEMPTS {
            let attempt_result = async {
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
            let error = match tokio::time::timeout(op_timeout, attempt_result).await {
                Ok(Ok(()) | Err(zk::Error::NoNode)) => return,
                Ok(Err(error)) => map_err(error),
                Err(_) => timed_out("ZooKeeper cleanup", op_timeout),
            };
            if client.state().is_terminated() {
                tracing::debug!(node = %what, "distlock: ZooKeeper session ended; the server deletes the node");
                return;
            }
            if !error.is_transient() {
                tracing::warn!(node = %what, %error, "distlock: cannot delete an unwanted ZooKeeper lock node; it stays until the session ends");
                return;
            }
            tracing::info!(node = %what, attempt, %error, "distlock: ZooKeeper cleanup failed; retrying");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(CLEANUP_MAX_PAUSE);
        }
        tracing::warn!(node = %what, attempts = CLEANUP_ATTEMPTS, "distlock: gave up deleting an unwanted ZooKeeper lock node; it stays until the session ends");
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
        tokio::spawn(follow_session(
            Arc::downgrade(self),
            epoch,
            (initial, states),
            conn.client.session_timeout(),
            self.config.connection_timeout(),
        ));
        tokio::spawn(heartbeat(
            Arc::downgrade(self),
            epoch,
            self.config.connection_timeout(),
        ));
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
            conn.client.delete(&path, None).await.or_else(ignore_no_node)?;
            tracing::info!(
                path,
                "distlock: deleted a duplicate ZooKeeper lock node carrying our owner token"
            );
            queue.retain(|c| *c != child);
        }
        Ok((adopted, queue))
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
            .with_fencing(fencing)
            .with_handle(node.path))
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

/// Keeps the last contact of session `epoch` known: every third of the connection timeout,
/// while connected to a quorum server, an `exists("/")` whose send time is recorded once
/// answered. (This replaces the driver's idle pings, which it sends only after three eighths
/// of the connection timeout without a request, so the traffic stays about the same.) Holds
/// the client only for the round trip, so it never keeps a session open; ends with the
/// session.
async fn heartbeat(inner: Weak<Inner>, epoch: u64, connection_timeout: Duration) {
    let period = connection_timeout / 3;
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(client) = inner.upgrade().and_then(|inner| {
            if inner.session.borrow().epoch != epoch {
                return None;
            }
            inner.current().filter(|c| c.epoch == epoch).map(|c| c.client)
        }) else {
            return;
        };
        if client.state() != zk::SessionState::SyncConnected {
            continue;
        }
        let sent = Instant::now();
        let answered = tokio::time::timeout(connection_timeout, client.check_stat("/")).await;
        let quorum = client.state() == zk::SessionState::SyncConnected;
        let timeout = client.session_timeout();
        drop(client);
        if let (Ok(Ok(_)), true) = (answered, quorum) {
            match inner.upgrade() {
                Some(inner) => inner.contacted(epoch, sent, timeout),
                None => return,
            }
        }
    }
}

/// Maps the client's session states onto [`Session`] for epoch `epoch`, and declares the
/// session expired on our side before the server can expire it.
///
/// The server expires a session `timeout` after it last heard from us, which is no earlier
/// than our last contact: the send time of the last request it answered while we were
/// connected to a quorum server (kept by [`heartbeat`] every third of the connection
/// timeout). Once the connection is lost (noticed by the driver after `connection_timeout`
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

    #[test]
    fn sequences_are_signed_and_compared_across_the_wrap() {
        let ours = |seq: &str| format!("_c_0f9b6b8e-4a4f-4c53-9a4a-7d0c1b1f7a11-lock-{seq}");
        assert_eq!(sequence_of(&ours("2147483647")), Some(i32::MAX));
        assert_eq!(sequence_of(&ours("-2147483648")), Some(i32::MIN));
        assert_eq!(sequence_of(&ours("-2147483000")), Some(-2_147_483_000));
        // Past -999999999, `%010d` leaves nine digits after the sign.
        assert_eq!(sequence_of(&ours("-000000005")), Some(-5));
        assert_eq!(
            sequence_of("8f14e45fceea167a5a36dedd4bea2543__lock__-2147483648"),
            Some(i32::MIN)
        );
        assert_eq!(
            sequence_of("8f14e45fceea167a5a36dedd4bea2543__lock__0000000003"),
            Some(3)
        );
        assert_eq!(sequence_of("_c_x-__READ__-000000001"), Some(-1));
        assert_eq!(sequence_of(&ours("-00000005")), None);
        assert_eq!(sequence_of(&ours("12345678901")), None);

        assert!(drawn_before(-2_147_483_000, -2_147_482_999));
        assert!(!drawn_before(-2_147_482_999, -2_147_483_000));
        assert!(drawn_before(i32::MAX, i32::MIN));
        assert!(drawn_before(2_147_483_000, -2_147_483_000));
        assert!(drawn_before(-1, 0));

        let ordered = queue(vec![
            ours("-2147482999"),
            ours("-2147483648"),
            ours("2147483647"),
            ours("-2147483000"),
            ours("2147483000"),
            "kazoo__lock__-2147483647".to_owned(),
        ]);
        let order: Vec<Option<i32>> = ordered.iter().map(|c| sequence_of(c)).collect();
        assert_eq!(
            order,
            [
                2_147_483_000,
                i32::MAX,
                i32::MIN,
                -2_147_483_647,
                -2_147_483_000,
                -2_147_482_999
            ]
            .map(Some)
        );
    }
}
