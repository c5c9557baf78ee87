//! The [`DistributedLock`] trait: the primitives a backend implements, and their contract.
//!
//! Every method states its promise beside it: what it does, what an error after the request
//! may have left behind (an *ambiguous* outcome, [`Error::is_ambiguous`]), and what dropping
//! its future mid-flight may leave. Conveniences over these methods live in
//! [`DistributedLockExt`](crate::DistributedLockExt), written once for every backend.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{
    Attempt, Capabilities, Error, Lease, LockKind, LockName, LossReason, Mechanics, ObjectState, OwnerToken,
    Primitive, ReleaseWatch, Result, Session, TryAcquire,
};

/// How many renewals [`renew_each`] keeps in flight at once.
const RENEW_CONCURRENCY: usize = 32;

/// The primitives one store implements. Object safe: use it as `Arc<dyn DistributedLock>`.
///
/// Business code does not call these directly; it uses [`LockClient`](crate::LockClient), which
/// adds waiting, the guard, watchdog renewal, the lost-lock signal, this process's waiter
/// queues and cancel safety once for every backend.
///
/// # Contract
///
/// Every backend, checked by the `distlock-conformance` suite:
/// - **Exclusion.** At most one owner token holds a mutex at a time, as judged by the store;
///   at most `permits` hold a semaphore; many readers or one writer hold a read-write lock.
/// - **Owner checks.** [`release`](Self::release) and [`renew`](Self::renew) act only if the
///   store still records the lease's owner token for a hold of the lease's kind; otherwise they
///   return `false` / `None` and change nothing. A stale holder can never free or extend
///   someone else's hold.
/// - **Expiry.** For [`Expiry::Ttl`](crate::Expiry::Ttl) backends a hold that is not renewed is
///   free once its TTL has passed on the store; for session backends, once the session ends.
/// - **Fencing.** If [`Capabilities::fencing`] is
///   [`Fencing::Monotonic`](crate::Fencing::Monotonic), every hold of an object carries a token
///   greater than all earlier ones.
/// - **Names.** Any [`LockName`] is accepted and mapped onto the store without collisions, or
///   refused with [`Error::InvalidName`]; names are exact and case-sensitive. The mutex, the
///   semaphore and the read-write lock of one name are three objects.
/// - **No reentrancy.** A name held by some owner is held for everyone else, including other
///   acquisitions by the same client or task: a second attempt is just another contender.
/// - **Bounded time.** Every method returns within the backend's operation timeout when the
///   store does not answer, with [`Error::Unavailable`]; none hangs
///   ([`wait_queued`](Self::wait_queued) waits until its deadline, no longer).
/// - **Ambiguous outcomes.** An error after the request may have left the socket (a timeout,
///   a cut connection) means the operation may or may not have been applied; such errors are
///   [`Error::Unavailable`] (or [`Error::Backend`]), never a definite "no". After an ambiguous
///   [`attempt`](Self::attempt) or [`wait_queued`](Self::wait_queued) (or one during which the
///   backend panicked), [`LockClient`](crate::LockClient) calls [`release`](Self::release) in
///   the background with [`Attempt::cleanup_lease`]: the same owner token and kind, but no
///   handle and no fencing token. `release` must therefore find what it needs (a node path, a
///   CAS value) from the name, kind and owner alone.
/// - **Cancel safety.** Each method is a bounded number of round trips. If its future is
///   dropped mid-flight, the operation may or may not have been applied on the store, as after
///   an ambiguous error; [`LockClient`](crate::LockClient) runs them to completion in a task
///   and cleans up, so backends need not (except [`wait_queued`](Self::wait_queued)).
///
/// # Example
///
/// ```
/// use distlock_core::{Attempt, DistributedLock, LockName, MemoryLock, OwnerToken, TryAcquire};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let store = MemoryLock::new();
/// let name = LockName::new("invoice-7")?;
/// let ttl = Duration::from_secs(5);
/// let TryAcquire::Acquired(lease) = store.attempt(&Attempt::mutex(name.clone(), OwnerToken::new(), ttl)).await? else {
///     unreachable!("the lock is free");
/// };
/// assert!(matches!(
///     store.attempt(&Attempt::mutex(name, OwnerToken::new(), ttl)).await?,
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

    /// What this backend promises its users.
    fn capabilities(&self) -> Capabilities;

    /// The switches [`LockClient`](crate::LockClient) dispatches on for this backend (see
    /// [`Mechanics`]). The default turns them all off.
    fn mechanics(&self) -> Mechanics {
        Mechanics::default()
    }

    /// One attempt at a hold of `attempt.kind` on `attempt.name` for `attempt.owner`.
    ///
    /// Returns [`TryAcquire::Held`] when others hold it (not an error); the lease of
    /// [`TryAcquire::Acquired`] carries the attempt's kind ([`Lease::with_kind`]).
    ///
    /// - **Permits.** A [`LockKind::Permit`] attempt succeeds while fewer than `permits` live
    ///   holders exist. If live holders recorded another count, it fails with
    ///   [`Error::PermitsMismatch`] and changes nothing; once no holder is live, a new count
    ///   may be used.
    /// - **The waiter.** `attempt.waiter` is `Some` when the caller will wait and try again.
    ///   A failing mutex attempt queues it in the lock's queue of waiters where the store wakes
    ///   one waiter per release (its [`watch`](Self::watch) names the same waiter), and a
    ///   failing permit attempt in the semaphore's; a failing [`LockKind::Write`] attempt
    ///   records the waiting writer, and while one is recorded no *new* reader gets in (readers
    ///   already in keep their hold). The record lives for `stay` unless the waiter's next
    ///   attempt renews it, so a waiter that died costs the others at most one wake. A winning
    ///   attempt takes its own record out. Readers ignore it, and so may stores that wake
    ///   every waiter.
    /// - **Unsupported kinds.** A kind whose primitive [`Capabilities::offers`] says no is
    ///   [`Error::NotSupported`].
    /// - **Ambiguous outcome / cancellation.** The hold may have been taken (and the waiter
    ///   recorded): the caller releases by owner ([`Attempt::cleanup_lease`]).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire>;

    /// Releases `lease`'s hold (of its [`kind`](Lease::kind)) if the store still records its
    /// owner. Returns whether it did; a release wakes the store's waiters as its
    /// [`watch`](Self::watch) promises.
    ///
    /// Works on a lease that carries only the name, kind and owner (no handle, no fencing
    /// token), as the cleanup after an ambiguous acquisition sends.
    ///
    /// **Ambiguous outcome / cancellation:** the hold may or may not be gone; sending the
    /// release again is harmless (owner-checked), and the caller does so in the background.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// Renews each lease for its own [`Lease::ttl`], one result per lease, in order: the
    /// renewed lease ([`Lease::renewed`]), `None` if the store no longer records its owner
    /// (then nothing changed), or an error.
    ///
    /// The watchdog calls it with every lease due for renewal at once; a store that can
    /// pipeline or batch renewals uses fewer round trips, one that renews one lease at a time
    /// runs them through [`renew_each`]. Session-bound leases return themselves while their
    /// session keeps them.
    ///
    /// **Ambiguous outcome / cancellation:** each renewal may or may not have been applied
    /// (and may still be applied after a later one): the caller never lets its local deadline
    /// outrun the TTL of any renewal whose outcome it does not know.
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>>;

    /// Releases the mutex `lease` and, in the same store operation, takes it for `next` with
    /// `ttl` (validated by the caller): the lock passes from one owner to the next without a
    /// moment free for a third. Returns `next`'s lease, with a fencing token above `lease`'s
    /// where the store fences, or `None` if the store no longer records `lease`'s owner (then
    /// nothing changed).
    ///
    /// [`LockClient`](crate::LockClient) uses it where [`Mechanics::hands_over`] says so, to
    /// pass a lock released by a client of this process straight to the first waiter of this
    /// process (see [`LocalWaiters`](crate::LocalWaiters)). The default returns
    /// [`Error::NotSupported`].
    ///
    /// **Ambiguous outcome / cancellation:** the lock may now be `next`'s: the caller releases
    /// by `next`'s owner token.
    ///
    /// ```
    /// use distlock_core::{DistributedLock, DistributedLockExt, LockName, MemoryLock, OwnerToken, TryAcquire};
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

    /// Leaves `note` beside the mutex hold of `lease` (owner-checked: only while the store
    /// still records `lease`'s owner), replacing any note of an earlier holder; returns
    /// whether it did. [`inspect`](Self::inspect) reports it as [`LockState::note`](crate::LockState::note)
    /// for as long as that owner holds the lock, and never for a later holder. Leader election
    /// publishes the leader's value this way. A backend that offers it declares
    /// [`Capabilities::notes`]; the default returns [`Error::NotSupported`].
    ///
    /// **Ambiguous outcome / cancellation:** the note may or may not be stored; sending it
    /// again is harmless.
    ///
    /// ```
    /// use distlock_core::{DistributedLock, DistributedLockExt, LockName, MemoryLock, OwnerToken, Primitive, TryAcquire};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let (store, name) = (MemoryLock::new(), LockName::new("leader")?);
    /// let TryAcquire::Acquired(lease) = store.try_acquire(&name, OwnerToken::new(), Duration::from_secs(5)).await? else {
    ///     unreachable!("the lock is free");
    /// };
    /// assert!(store.set_note(&lease, "10.0.0.7:8080").await?);
    /// let state = store.inspect(&name, Primitive::Mutex).await?.into_lock();
    /// assert_eq!(state.note.as_deref(), Some("10.0.0.7:8080"));
    /// # Ok(()) }
    /// ```
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        let _ = (lease, note);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "notes beside a hold",
        })
    }

    /// Starts listening for releases of the `primitive` object `name`, so a waiter learns of
    /// one without polling.
    ///
    /// Waiters call it *before* the retry that follows a failed attempt: any release after
    /// this call returns wakes the watch, so a release between the failed attempt and the
    /// subscription is never lost. A watch [`for_waiter`](ReleaseWatch::for_waiter) names
    /// the waiter that the next [`attempt`](Self::attempt)s queue; if it is also notified
    /// ([`ReleaseWatch::is_notified`]), this is the backend's promise that a release wakes one
    /// waiter, the first in the queue, not every waiter (a release may still wake every watch,
    /// for example after a lost connection). The default returns [`ReleaseWatch::polling`] (no notifications; the
    /// waiter backs off with jitter instead).
    ///
    /// **Ambiguous outcome / cancellation:** nothing is held; a subscription half made is
    /// dropped with the future.
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        let _ = (name, primitive);
        Ok(ReleaseWatch::polling())
    }

    /// Waits in the store's own queue until a hold of `attempt.kind` is taken (`Ok(Some)`) or
    /// `deadline` passes (`Ok(None)`; `None` waits forever).
    ///
    /// Backends that declare [`Fairness::Fifo`](crate::Fairness::Fifo) implement it for every
    /// primitive they offer (ZooKeeper's sequential nodes); [`LockClient`](crate::LockClient)
    /// calls it instead of its own try-and-wait loop for those. The default returns
    /// [`Error::NotSupported`].
    ///
    /// **Ambiguous outcome:** the hold may have been taken: the caller releases by owner.
    /// **Cancellation:** implementations must be cancel safe: when the future is dropped at
    /// any point, the queue entry is removed (in the background if it needs a round trip) and
    /// a hold won but not yet returned is released. `LockClient` drops it when its caller goes
    /// away.
    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let _ = (attempt, deadline);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "waiting in a store-side queue",
        })
    }

    /// Takes the waiter `waiter` out of whatever [`attempt`](Self::attempt) recorded for it on
    /// `name` when its wait for a hold of `kind` ends without one: a waiting writer (readers
    /// it kept out may come in now instead of after its `stay`), or a permit's waiter in a
    /// store whose releases wake the first waiter of a semaphore's queue (if a permit is free,
    /// the next waiter must be woken in its place). `LockClient` calls it for write and permit
    /// waits. The default does nothing.
    ///
    /// **Ambiguous outcome / cancellation:** the record may stay until its `stay` runs out,
    /// which only delays others.
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        let _ = (name, kind, waiter);
        Ok(())
    }

    /// Reads the holders of the `primitive` object `name` right now, for status displays; not
    /// used for any decision except a polling waiter's choice to read before it writes. For the
    /// mutex, a free lock may report its last fencing token ([`ObjectState::last_fencing`]).
    /// The default returns [`Error::NotSupported`].
    ///
    /// **Ambiguous outcome / cancellation:** a read; nothing to clean up.
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        let _ = (name, primitive);
        Err(Error::NotSupported {
            backend: self.backend(),
            what: "inspecting a lock",
        })
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

    /// One no-op round trip to the store (Redis `PING`, SQL `SELECT 1`, ...): a health check,
    /// and the floor the benchmarks compare lock operations against.
    async fn ping(&self) -> Result<()>;
}

/// Renews `leases` one at a time with `renew_one` (each for its own [`Lease::ttl`]; it gets a
/// copy of the lease), at most
/// 32 in flight at once, one result per lease in order: the body of
/// [`DistributedLock::renew`] for a store that cannot batch renewals.
///
/// ```
/// use distlock_core::{renew_each, Lease, LockName, OwnerToken};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let lease = Lease::new(LockName::new("a")?, OwnerToken::new(), Duration::from_secs(5), tokio::time::Instant::now());
/// let renewed = renew_each(&[lease], |lease| async move { Ok(Some(lease)) }).await;
/// assert!(matches!(renewed.as_slice(), [Ok(Some(_))]));
/// # Ok(()) }
/// ```
pub async fn renew_each<F, Fut>(leases: &[Lease], renew_one: F) -> Vec<Result<Option<Lease>>>
where
    F: FnMut(Lease) -> Fut,
    Fut: Future<Output = Result<Option<Lease>>>,
{
    stream::iter(leases.iter().cloned().map(renew_one))
        .buffered(RENEW_CONCURRENCY)
        .collect()
        .await
}
