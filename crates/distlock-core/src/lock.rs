//! The [`DistributedLock`] trait: the primitives a backend implements, and their contract.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{
    Capabilities, Error, FencingToken, Lease, LockKind, LockName, LossReason, OwnerToken, Primitive,
    ReleaseWatch, Result, Session,
};

/// How many renewals the default [`DistributedLock::extend_many`] keeps in flight at once.
const EXTEND_MANY_CONCURRENCY: usize = 32;

/// The primitives one store implements. Object safe: use it as `Arc<dyn DistributedLock>`.
///
/// Business code does not call these directly; it uses [`LockClient`](crate::LockClient), which
/// adds waiting, the guard, watchdog renewal, the lost-lock signal and cancel safety once for
/// every backend.
///
/// # Contract
///
/// Every backend, checked by the `distlock-conformance` suite:
/// - **Exclusion.** At most one owner token holds a name at a time, as judged by the store.
/// - **Owner checks.** [`release`](Self::release) and [`extend`](Self::extend) act only if the
///   store still records the lease's owner token; otherwise they return `false` / `None` and
///   change nothing. A stale holder can never free or extend someone else's lock.
/// - **Expiry.** For [`Expiry::Ttl`](crate::Expiry::Ttl) backends a lock that is not extended is
///   free once its TTL has passed on the store; for session backends, once the session ends.
/// - **Fencing.** If [`Capabilities::fencing`] is
///   [`Fencing::Monotonic`](crate::Fencing::Monotonic), every lease of a name carries a
///   token greater than all earlier ones.
/// - **Names.** Any [`LockName`] is accepted and mapped onto the store without collisions, or
///   refused with [`Error::InvalidName`]; names are exact and case-sensitive.
/// - **No reentrancy.** A name held by some owner is held for everyone else, including other
///   acquisitions by the same client or task: a second acquire is just another contender.
/// - **Bounded time.** Every method returns within the backend's operation timeout when the
///   store does not answer, with [`Error::Unavailable`]; none hangs.
/// - **Ambiguous outcomes.** An error after the request may have left the socket (a timeout,
///   a cut connection) means the operation may or may not have been applied; such errors are
///   [`Error::Unavailable`] (or [`Error::Backend`]), never a definite "no" (see
///   [`Error::is_ambiguous`]). After an ambiguous `try_acquire` (or `acquire_queued`, or any
///   attempt during which the backend panicked), [`LockClient`](crate::LockClient) calls
///   [`release`](Self::release) in the background with `Lease::new(name, owner, ttl,
///   sent_at)`: the same owner token, but no handle and no fencing token. `release` must therefore find what it needs (a node path, a CAS value)
///   from the name and owner alone, and free the lock only if the store records that owner.
/// - **Cancel safety.** Each method is a bounded number of round trips. If its future is
///   dropped mid-flight, the operation may or may not have been applied on the store;
///   [`LockClient`](crate::LockClient) runs them to completion in a task and cleans up, so
///   backends need not.
///
/// # Example
///
/// ```
/// use distlock_core::{DistributedLock, LockName, MemoryLock, OwnerToken, TryAcquire};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let store = MemoryLock::new();
/// let name = LockName::new("invoice-7")?;
/// let TryAcquire::Acquired(lease) = store.try_acquire(&name, OwnerToken::new(), Duration::from_secs(5)).await? else {
///     unreachable!("the lock is free");
/// };
/// assert!(matches!(
///     store.try_acquire(&name, OwnerToken::new(), Duration::from_secs(5)).await?,
///     TryAcquire::Held(_)
/// ));
/// assert!(store.release(&lease).await?);
/// assert!(!store.release(&lease).await?, "a second release finds it not owned");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLock: Send + Sync + fmt::Debug + 'static {
    /// A short name of the backend for errors and traces, such as `"redis"`.
    fn backend(&self) -> &'static str;

    /// What this backend promises.
    fn capabilities(&self) -> Capabilities;

    /// One attempt to take `name` for `owner` with `ttl` (already validated by the caller
    /// against [`Capabilities::validate_ttl`]; session backends ignore it).
    ///
    /// Returns [`TryAcquire::Held`] when someone else holds it; that is not an error.
    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<TryAcquire>;

    /// One attempt by a waiter whose watch is [`ReleaseWatch::for_waiter`]`(.., waiter)`: as
    /// [`try_acquire`](Self::try_acquire), and if the lock is held, the store also puts
    /// `waiter` in the lock's queue of waiters, so that the next release wakes the first
    /// waiter in that queue instead of every waiter. If the attempt wins, `waiter` leaves the
    /// queue. The entry lives for `stay` unless the waiter comes back sooner (the waiter's next
    /// attempt, at the latest after `stay` minus a margin, renews it), so a waiter that died
    /// costs the others at most one wake.
    ///
    /// Backends that declare [`Capabilities::wakes_one`] implement it; the default ignores the
    /// waiter and calls `try_acquire`.
    async fn try_acquire_waiting(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiter: &str,
        stay: Duration,
    ) -> Result<TryAcquire> {
        let _ = (waiter, stay);
        self.try_acquire(name, owner, ttl).await
    }

    /// Releases the lock if the store still records `lease`'s owner. Returns whether it did.
    ///
    /// Works on a lease that carries only the name and owner (no handle, no fencing token),
    /// as the cleanup after an ambiguous acquisition sends.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// Releases `lease` and, in the same store operation, takes its lock for `next` with `ttl`
    /// (validated by the caller): the lock passes from one owner to the next without a moment
    /// free for a third. Returns `next`'s lease, with a fencing token above `lease`'s where the
    /// store fences, or `None` if the store no longer records `lease`'s owner (then nothing
    /// changed).
    ///
    /// [`LockClient`](crate::LockClient) uses it on a polling backend that declares
    /// [`Capabilities::hands_over`], to pass a lock released by a client of this process
    /// straight to the first waiter of this process (see [`LocalWaiters`](crate::LocalWaiters)):
    /// that waiter is alive and waiting, and it saves its own round trip and the failed attempts
    /// of clients that would race it. An error may be ambiguous as for `release`: the lock may
    /// now be `next`'s, so the caller releases by `next`'s owner token. The default returns
    /// [`Error::NotSupported`].
    ///
    /// ```
    /// use distlock_core::{DistributedLock, LockName, MemoryLock, OwnerToken, TryAcquire};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let (store, name, ttl) = (MemoryLock::new(), LockName::new("job")?, Duration::from_secs(5));
    /// let TryAcquire::Acquired(first) = store.try_acquire(&name, OwnerToken::new(), ttl).await? else {
    ///     unreachable!("the lock is free");
    /// };
    /// let next = store.hand_over(&first, OwnerToken::new(), ttl).await?.expect("ours to hand over");
    /// assert!(next.fencing_token() > first.fencing_token());
    /// assert!(!store.release(&first).await?, "the first owner holds it no more");
    /// assert!(store.release(&next).await?);
    /// # Ok(()) }
    /// ```
    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        let _ = (lease, next, ttl);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "handing a lock over to the next owner",
        })
    }

    /// Resets the lock's TTL to `ttl` if the store still records `lease`'s owner, returning the
    /// renewed lease, or `None` if the lock is no longer ours.
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>>;

    /// Renews many leases, each by its own [`Lease::ttl`], one result per lease in order.
    ///
    /// The watchdog calls this with every lease due for renewal. The default runs
    /// [`extend`](Self::extend) with bounded concurrency; backends that can pipeline or batch
    /// (Redis) override it to use fewer round trips.
    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        let renewals: Vec<_> = leases
            .iter()
            .map(|lease| self.extend(lease, lease.ttl()))
            .collect();
        stream::iter(renewals)
            .buffered(EXTEND_MANY_CONCURRENCY)
            .collect()
            .await
    }

    /// Starts listening for releases of `name`, so a waiter learns of one without polling.
    ///
    /// Waiters call it *before* the retry that follows a failed attempt: any release after
    /// this call returns wakes the watch, so a release between the failed attempt and the
    /// subscription is never lost. On a backend that wakes one waiter per release
    /// ([`Capabilities::wakes_one`]) the watch is [`ReleaseWatch::for_waiter`], and a release
    /// wakes it once its waiter is queued by [`try_acquire_waiting`](Self::try_acquire_waiting)
    /// and first in the queue (a release may also wake every watch, for example after a lost
    /// connection). The default returns [`ReleaseWatch::polling`] (no
    /// notifications; the waiter backs off with jitter instead).
    async fn watch(&self, name: &LockName) -> Result<ReleaseWatch> {
        let _ = name;
        Ok(ReleaseWatch::polling())
    }

    /// Waits in the store's own queue until `name` is acquired (`Ok(Some)`) or `deadline`
    /// passes (`Ok(None)`; `None` waits forever).
    ///
    /// Only backends that declare [`Fairness::Fifo`](crate::Fairness::Fifo) implement it
    /// (ZooKeeper's sequential nodes); [`LockClient`](crate::LockClient) calls it instead of
    /// its own try-and-wait loop for those. The default returns [`Error::NotSupported`].
    ///
    /// # Cancel safety
    /// Implementations must be cancel safe: when the future is dropped at any point, the
    /// queue entry is removed (in the background if it needs a round trip) and a lock won but
    /// not yet returned is released. `LockClient` drops it when its caller goes away.
    async fn acquire_queued(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let _ = (name, owner, ttl, deadline);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "waiting in a store-side queue",
        })
    }

    /// One attempt at a hold of `kind` other than [`LockKind::Exclusive`]: a permit of the
    /// semaphore `name`, or the read or write side of the read-write lock `name`. Backends that
    /// declare [`Capabilities::semaphores`] / [`Capabilities::rw_locks`] implement it; the
    /// default returns [`Error::NotSupported`].
    ///
    /// The lease returned carries `kind` ([`Lease::with_kind`]), and `release`, `extend` and
    /// `extend_many` must act on the hold of that kind, owner-checked as for the mutex.
    ///
    /// Contract, beyond the mutex's (owner checks, expiry, bounded time, ambiguous outcomes,
    /// all per hold):
    /// - **Namespaces.** The semaphore `name` and the read-write lock `name` are objects of
    ///   their own, apart from each other and from the mutex `name`.
    /// - **Permits.** At most `permits` live holders of a semaphore at once. If live holders
    ///   recorded another count, the attempt fails with [`Error::PermitsMismatch`] and changes
    ///   nothing; once no holder is live, a new count may be used.
    /// - **Readers and writers.** Any number of readers, or one writer, never both.
    /// - **Writers are not starved.** `waiter` is `Some((id, stay))` when the caller will wait
    ///   and try again: a [`LockKind::Write`] attempt that fails then records the waiting
    ///   writer `id` for `stay`, renewed by each attempt of the same wait, and while a waiting
    ///   writer is recorded no *new* reader gets in (readers already in keep their hold until
    ///   they release). A winning attempt removes its own record, and so does
    ///   [`withdraw`](Self::withdraw). Readers ignore `waiter`; a permit attempt may queue
    ///   it, on a store that wakes a semaphore's waiters one at a time (the watch of
    ///   [`watch_kind`](Self::watch_kind) then names the same waiter), and must take it out of
    ///   the queue when it wins.
    /// - **Fencing.** Where the store fences, each hold of the object gets a token greater
    ///   than every earlier hold of that object.
    async fn try_acquire_kind(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        let _ = (name, owner, ttl, waiter);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: match kind.primitive() {
                Primitive::Semaphore => "semaphores",
                Primitive::RwLock => "read-write locks",
                Primitive::Mutex => "this kind of hold",
            },
        })
    }

    /// Takes the waiter `id` out of whatever [`try_acquire_kind`](Self::try_acquire_kind)
    /// recorded for it on `name` when its wait ends without a hold: a waiting writer (readers
    /// it kept out may come in now instead of after its `stay`), or a permit's waiter in a store
    /// whose releases wake the first waiter of a semaphore's queue (if a permit is free, the
    /// next waiter must be woken in its place). `LockClient` calls it for write and permit
    /// waits. The default does nothing.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        let _ = (name, kind, waiter);
        Ok(())
    }

    /// As [`watch`](Self::watch), for releases of holds of the `primitive` object `name`
    /// (semaphores and read-write locks). The default returns [`ReleaseWatch::polling`].
    async fn watch_kind(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        let _ = (name, primitive);
        Ok(ReleaseWatch::polling())
    }

    /// As [`acquire_queued`](Self::acquire_queued), for a hold of `kind` (a permit, a read or
    /// the write lock), in the store's own queue. Backends with
    /// [`Fairness::Fifo`](crate::Fairness::Fifo) implement it for every primitive they offer;
    /// the default returns [`Error::NotSupported`]. Cancel safe as `acquire_queued`.
    async fn acquire_kind_queued(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>> {
        let _ = (name, kind, owner, ttl, deadline);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "waiting in a store-side queue for a semaphore or read-write lock",
        })
    }

    /// The live holders of the `primitive` object `name` (each a [`LockState`] whose
    /// [`kind`](LockState::kind) says what it holds), for status displays. The default returns
    /// [`Error::NotSupported`].
    async fn inspect_holders(&self, name: &LockName, primitive: Primitive) -> Result<Vec<LockState>> {
        let _ = (name, primitive);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "listing the holders of a semaphore or read-write lock",
        })
    }

    /// A name of the store this client talks to, the same for every client of that store in
    /// this process (for example `sqlite:<absolute path>#<table>`), or `None`. For a backend
    /// that polls ([`WakeUp::Polling`](crate::WakeUp::Polling)),
    /// [`LockClient`](crate::LockClient) uses it to wake this process's waiters of a lock, one
    /// per release, when a client of this process releases it (see
    /// [`LocalWaiters`](crate::LocalWaiters)); waiters still poll for releases by other
    /// processes. Two stores must never share a name; one store under two names only loses
    /// that wake-up.
    fn store_identity(&self) -> Option<String> {
        None
    }

    /// The state of this client's session, for session-bound backends
    /// ([`Expiry::Session`](crate::Expiry::Session)); `None` for TTL backends. The watchdog
    /// follows it to report suspended and lost locks (see [`Session`]).
    fn session(&self) -> Option<watch::Receiver<Session>> {
        None
    }

    /// A future that resolves if the store loses this particular lease behind the client's
    /// back (for example its ZooKeeper node was deleted), for leases nothing renews.
    ///
    /// The client's watchdog polls these futures in its one task, next to the session state,
    /// and fires the guard's lost-lock signal with the reason. The future must also resolve
    /// (with any reason) once the lease is released, so it does not linger. The default is
    /// `None`: TTL backends learn of losses from renewals.
    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        let _ = lease;
        None
    }

    /// Reads who holds `name` right now, for status displays. Not used for any decision.
    async fn inspect(&self, name: &LockName) -> Result<LockState> {
        let _ = name;
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "inspecting a lock",
        })
    }

    /// One no-op round trip to the store (Redis `PING`, SQL `SELECT 1`, ...): a health check,
    /// and the floor the benchmarks compare lock operations against.
    async fn ping(&self) -> Result<()>;
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone)]
#[must_use]
pub enum TryAcquire {
    /// The lock is ours.
    Acquired(Lease),
    /// Someone else holds it.
    Held(Holder),
}

/// What an attempt learned about the current holder of a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Time left until the current hold expires on the store, when the store said; waiters
    /// wake at that point because an expiry publishes nothing.
    pub remaining: Option<Duration>,
    /// The current holder's owner value, when the attempt read it: a waiter that sees it
    /// change knows the lock changed hands, and polls soon again (a new hold is often short).
    pub owner: Option<String>,
}

impl Holder {
    /// A holder whose remaining time is unknown.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// A holder whose hold expires in `remaining`.
    pub fn expiring_in(remaining: Duration) -> Self {
        Self {
            remaining: Some(remaining),
            owner: None,
        }
    }

    /// The same holder, known to be `owner` (the stored owner value).
    ///
    /// ```
    /// use distlock_core::Holder;
    /// use std::time::Duration;
    ///
    /// let holder = Holder::expiring_in(Duration::from_secs(3)).with_owner("7f3a");
    /// assert_eq!(holder.owner.as_deref(), Some("7f3a"));
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// A snapshot of a lock as the store sees it, from [`DistributedLock::inspect`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The stored owner value (an [`OwnerToken`] for distlock clients; other clients of the
    /// same layout may store anything), or `None` if the lock is free.
    pub owner: Option<String>,
    /// The fencing token of the current or last hold, if the store keeps one.
    pub fencing: Option<FencingToken>,
    /// Time left on the current hold, if known.
    pub remaining: Option<Duration>,
    /// What the hold is of ([`LockKind::Exclusive`] for the mutex).
    pub kind: LockKind,
}

impl LockState {
    /// A free lock, optionally with the last fencing token issued.
    pub fn free(fencing: Option<FencingToken>) -> Self {
        Self {
            owner: None,
            fencing,
            remaining: None,
            kind: LockKind::Exclusive,
        }
    }

    /// A held lock.
    pub fn held(owner: String, fencing: Option<FencingToken>, remaining: Option<Duration>) -> Self {
        Self {
            owner: Some(owner),
            fencing,
            remaining,
            kind: LockKind::Exclusive,
        }
    }

    /// The same state, of a hold of `kind`.
    pub fn with_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// Whether someone holds the lock.
    pub fn is_held(&self) -> bool {
        self.owner.is_some()
    }
}
