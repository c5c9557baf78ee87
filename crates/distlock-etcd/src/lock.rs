//! [`EtcdLock`]: etcd's lock recipe (the one of its `concurrency` package) as a
//! [`DistributedLock`], with the client's lease followed for the guards.
//!
//! This file holds the type, its constructor and the [`DistributedLock`] dispatch. The
//! submodules, one concern each: `session` (the client's lease: granting, keeping alive,
//! declaring it over), `mutex` (the mutex: one attempt, waiting in line, release, renewal,
//! reading the holder), `note` (the holder's note: its key's value, as etcd's election's),
//! `semaphore` (permits: Curator's `locks` and `leases`), `rw_lock` (readers and writers in
//! one queue, as etcd's `recipe.RWMutex`), `upgrade` (an upgradeable read turned into the
//! write lock in that queue), `held` (a watch on each held key for its deletion behind our
//! back).

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Error, Expiry, Fairness, Fencing, Lease, LockKind, LockName,
    LossReason, ObjectState, Primitive, Result, Session, SessionState, TryAcquire, WakeUp,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::client::{Rpc, BACKEND};
use crate::proto::StatusRequest;
use crate::txn;
use crate::EtcdConfig;

mod held;
mod mutex;
mod note;
mod rw_lock;
mod semaphore;
mod session;
mod upgrade;

/// The etcd backend: one client lease (granted again, with the next epoch, when it ends)
/// to which every key of this client is attached. Cheap to clone; clones share the lease.
/// See the crate docs for the key layout and what the guard's suspended and lost states mean.
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

struct Inner {
    config: EtcdConfig,
    rpc: Rpc,
    /// The current lease, if one is granted and alive.
    slot: Mutex<Option<ClientLease>>,
    /// Serialises granting new leases.
    granting: tokio::sync::Mutex<()>,
    session: watch::Sender<Session>,
}

/// One lease of this client: its id, the epoch published for it, the TTL the server granted.
#[derive(Debug, Clone, Copy)]
struct ClientLease {
    id: i64,
    epoch: u64,
    ttl: Duration,
}

impl EtcdLock {
    /// Connects to the cluster in `config` and is granted the client's lease.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad endpoint or TLS setting, [`Error::Unavailable`] if
    /// no lease was granted within the operation timeout.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let rpc = Rpc::connect(&config).await?;
        let inner = Arc::new(Inner {
            config,
            rpc,
            slot: Mutex::new(None),
            granting: tokio::sync::Mutex::new(()),
            session: watch::channel(Session::connected(0).with_state(SessionState::Expired)).0,
        });
        inner.lease().await?;
        inner.check_access().await?;
        Ok(Self { inner })
    }

    /// Connects for an `etcd://` URL (see [`EtcdConfig::from_url`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a bad URL, [`Error::Unavailable`] as [`connect`](Self::connect).
    pub async fn connect_url(url: &str) -> Result<Self> {
        Self::connect(EtcdConfig::from_url(url)?).await
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The key prefix of the lock `name`: give exactly this to etcd's own lock (`etcdctl lock
    /// <prefix without its trailing slash>`, or `concurrency.NewMutex(session, prefix)` in
    /// Go) to share the lock with it.
    ///
    /// ```no_run
    /// # async fn f(lock: &distlock_etcd::EtcdLock) -> distlock_core::Result<()> {
    /// use distlock_core::LockName;
    /// assert_eq!(lock.lock_prefix(&LockName::new("orders/42")?), "distlock/orders%2F42/");
    /// // etcdctl lock distlock/orders%2F42
    /// # Ok(()) }
    /// ```
    pub fn lock_prefix(&self, name: &LockName) -> String {
        crate::keys::object_prefix(self.inner.config.root(), Primitive::Mutex, name)
    }

    /// The id of the client's current lease, if it has one (for operators: `etcdctl lease
    /// timetolive <id in hex> --keys` lists this client's keys).
    pub fn lease_id(&self) -> Option<i64> {
        self.inner.current().map(|lease| lease.id)
    }

    /// The TTL the cluster granted the client's current lease.
    pub fn granted_lease_ttl(&self) -> Option<Duration> {
        self.inner.current().map(|lease| lease.ttl)
    }
}

impl Inner {
    /// Reads under the root once (1 round trip, nothing returned): a cluster with
    /// authentication on grants leases to anyone, so a client without the right to the
    /// locks' keys learns it here, at connection, rather than at its first lock.
    async fn check_access(&self) -> Result<()> {
        let mut request = txn::all_under(&format!("{}/", self.config.root()), 1);
        request.count_only = true;
        self.rpc
            .call_idempotent("read the root", move |rpc| {
                let request = request.clone();
                async move { rpc.kv().range(request).await }
            })
            .await
            .map(drop)
            .map_err(|error| match error {
                Error::Backend { .. } => Error::backend(
                    BACKEND,
                    format!(
                        "no access to the keys under {:?} ({error}): check the URL's user:password@ and its role's permissions",
                        self.config.root()
                    ),
                ),
                other => other,
            })
    }
}

impl fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLock")
            .field("config", &self.inner.config)
            .field("session", &*self.inner.session.borrow())
            .finish()
    }
}

#[async_trait]
impl DistributedLock for EtcdLock {
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

    /// The mutex: one transaction, 1 round trip whether the lock is free or held (see
    /// `mutex.rs`). A permit: 1 round trip when the semaphore is full, 2 with room (see
    /// `semaphore.rs`). A read or the write lock: 1 transaction (see `rw_lock.rs`). A failed
    /// attempt leaves nothing behind. The lease's `ttl` is ignored: a hold lives as long as
    /// the client's lease; `waiter` too: this backend is FIFO and waits in the store's queue
    /// ([`wait_queued`](Self::wait_queued)), where a waiting writer's key keeps later readers
    /// out.
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let (name, owner) = (&attempt.name, attempt.owner);
        match attempt.kind {
            LockKind::Exclusive => self.inner.try_take(name, owner).await,
            LockKind::Permit { permits, weight } => {
                validate_permits(permits, weight)?;
                self.inner.try_permit(name, (permits, weight), owner).await
            }
            LockKind::Read | LockKind::Write | LockKind::UpgradeableRead => {
                self.inner.try_rw(name, attempt.kind, owner).await
            }
            _ => Err(attempt.not_supported(BACKEND)),
        }
    }

    /// Deletes the hold's key (a mutex contender, a semaphore's lease, a reader or a writer):
    /// 1 round trip. A lease without a handle (the cleanup after an ambiguous attempt) is
    /// found by its owner token under the prefix of its kind's object: 2.
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    /// Puts `note` as the value of the mutex hold's key, if that key is still the hold's: 1
    /// round trip (see `note.rs`). etcd's own election reads it as the leader's value.
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.inner.set_note(lease, note).await
    }

    /// Lease-bound holds have nothing to renew (the keeper renews the client's lease): this
    /// checks, in one transaction per 128 of `leases` sent at once (1 round trip), that each
    /// hold's key still exists on the current lease. The same for every kind of hold; a lease
    /// without a key (a stale or forged one) is not renewed (`None`) and costs no read.
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }

    /// The mutex: create our key in line, then until it is first, watch only the key just
    /// before it. Round trips: 1 when free; when queued, 2 to get in line (the transaction,
    /// the look for the predecessor) plus the watch, and 1 per wake-up; each release wakes
    /// exactly one waiter.
    ///
    /// A permit: the semaphore's `locks` queue (as the mutex's), then our lease counted, again
    /// on each deletion under `leases` (only the head of `locks` watches them). A read or the
    /// write lock: one queue; a reader watches the last writer before it, a writer the key
    /// before it. Round trips: see `semaphore.rs` and `rw_lock.rs`.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped at any point, the wait's keys are deleted in the background.
    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let (name, owner) = (&attempt.name, attempt.owner);
        match attempt.kind {
            LockKind::Exclusive => self.inner.queue(name, owner, deadline).await,
            LockKind::Permit { permits, weight } => {
                validate_permits(permits, weight)?;
                self.inner
                    .queue_for_permit(name, (permits, weight), owner, deadline)
                    .await
            }
            LockKind::Read | LockKind::Write | LockKind::UpgradeableRead => {
                self.inner.queue_rw(name, attempt.kind, owner, deadline).await
            }
            _ => Err(attempt.not_supported(BACKEND)),
        }
    }

    /// The mutex's holder: its first contender, with its note; a semaphore's: its oldest leases, as many as
    /// its permits; a read-write lock's: its writer, or the readers before the first writer.
    /// 1 round trip each.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        match primitive {
            Primitive::Mutex => self.inner.holder(name).await.map(ObjectState::from),
            Primitive::Semaphore => self.inner.permit_holders(name).await.map(ObjectState::held_by),
            Primitive::RwLock => self.inner.rw_holders(name).await.map(ObjectState::held_by),
            _ => Err(Error::NotSupported {
                backend: BACKEND,
                what: "this primitive",
            }),
        }
    }

    fn session(&self) -> Option<watch::Receiver<Session>> {
        Some(self.inner.session.subscribe())
    }

    /// A watch on the hold's key, which resolves with [`LossReason::NotOwned`] when the key
    /// is deleted behind the holder's back (see `held.rs`). Opened by the watchdog's task,
    /// off the acquisition's path.
    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_held(lease)
    }

    /// The member's status (1 round trip).
    async fn ping(&self) -> Result<()> {
        self.inner
            .rpc
            .call_idempotent("status", |rpc| async move {
                rpc.maintenance().status(StatusRequest {}).await
            })
            .await
            .map(drop)
    }
}

/// A semaphore needs at least one permit; a hold takes at least one and at most all.
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
