//! [`LockClient`]: the API business code uses (acquire, `with_lock`, the primitives' entry
//! points), written once for every backend on top of the [`DistributedLock`] primitives. How a
//! wait runs is in `wait`, how one attempt runs in `attempts`; this module only states the
//! public API and the work under a held lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use crate::contention::RecentWaits;
use crate::guard::LockGuard;
use crate::hold::Status;
use crate::meter::Meter;
use crate::store::Store;
use crate::watchdog::Watchdog;
use crate::{
    AcquireOptions, Capabilities, DistributedLock, Error, FencingToken, Lease, LockKind, LockName,
    LossReason, LostSignal, OwnerToken, Result,
};

/// Anything that names a lock: `&str`, `String`, [`LockName`].
pub trait IntoLockName {
    /// Validates and converts.
    ///
    /// # Errors
    /// [`Error::InvalidName`] if the name breaks the contract.
    fn into_lock_name(self) -> Result<LockName>;
}

impl IntoLockName for LockName {
    fn into_lock_name(self) -> Result<LockName> {
        Ok(self)
    }
}

impl IntoLockName for &LockName {
    fn into_lock_name(self) -> Result<LockName> {
        Ok(self.clone())
    }
}

impl IntoLockName for &str {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self)
    }
}

impl IntoLockName for String {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self)
    }
}

impl IntoLockName for &String {
    fn into_lock_name(self) -> Result<LockName> {
        LockName::new(self)
    }
}

pub(crate) struct ClientInner {
    /// The backend, with this process's waiting layer where it polls (see `local_wake`).
    pub(crate) store: Store,
    pub(crate) capabilities: Capabilities,
    pub(crate) watchdog: Watchdog,
    pub(crate) meter: Meter,
    /// The locks this client had to wait for lately (see `wait`).
    pub(crate) recent_waits: RecentWaits,
    defaults: AcquireOptions,
}

/// The API business code uses: acquire with waiting, guards with watchdog renewal and a
/// lost-lock signal, `with_lock`. Cheap to clone; clones share one watchdog task.
///
/// Which store backs it is decided where it is built, so swapping stores does not touch the
/// code that locks.
///
/// ```
/// use distlock_core::{AcquireOptions, LockClient, MemoryLock};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
///
/// // Wait up to 2 s for the lock, hold it with a 10 s TTL renewed by the watchdog.
/// let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(2));
/// let guard = client.acquire_with("nightly-report", &opts).await?;
/// assert!(client.try_acquire("nightly-report").await?.is_none(), "held, so no second guard");
/// guard.release().await?;
///
/// // Or run a closure under the lock.
/// let total = client.with_lock("ledger", &opts, |ctx| async move {
///     assert!(!ctx.lost_signal().is_lost());
///     40 + 2
/// }).await?;
/// assert_eq!(total, 42);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

impl LockClient {
    /// A client over `lock` with [`AcquireOptions::new`] as defaults.
    pub fn new(lock: impl DistributedLock) -> Self {
        Self::from_arc(Arc::new(lock))
    }

    /// A client over a shared backend.
    pub fn from_arc(lock: Arc<dyn DistributedLock>) -> Self {
        Self::with_defaults_inner(Store::new(lock), AcquireOptions::new())
    }

    /// A client with other defaults for [`acquire`](Self::acquire) and
    /// [`try_acquire`](Self::try_acquire). Clones made before this keep the old defaults.
    pub fn with_defaults(self, defaults: AcquireOptions) -> Self {
        let meter = self.inner.meter.clone();
        Self::with_inner(self.inner.store.clone(), defaults, meter)
    }

    /// Adds (or with `false` removes) a `name` label with the lock's name to the per-lock
    /// [`metrics`](crate::metrics). Its cardinality is unbounded: one series per name in every
    /// metric, so turn it on only for a small, fixed set of names. Clones made before this
    /// keep the old setting.
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryLock};
    ///
    /// let client = LockClient::new(MemoryLock::new()).metrics_by_name(true);
    /// # drop(client);
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_by_name(self, on: bool) -> Self {
        let meter = self.inner.meter.clone().by_name(on);
        Self::with_inner(self.inner.store.clone(), self.inner.defaults.clone(), meter)
    }

    fn with_defaults_inner(store: Store, defaults: AcquireOptions) -> Self {
        let meter = Meter::new(store.lock().backend());
        Self::with_inner(store, defaults, meter)
    }

    fn with_inner(store: Store, defaults: AcquireOptions, meter: Meter) -> Self {
        Self {
            inner: Arc::new(ClientInner {
                capabilities: store.lock().capabilities(),
                watchdog: Watchdog::new(store.clone()),
                store,
                meter,
                recent_waits: RecentWaits::default(),
                defaults,
            }),
        }
    }

    /// The backend this client was built over, itself. Its methods reach the store only:
    /// a lease released through it is released as by another process (this process's waiters
    /// of a polling store see it at their next poll). To release a lease kept with
    /// [`LockGuard::leak`] so that they hear of it at once, use
    /// [`release_lease`](Self::release_lease).
    pub fn backend(&self) -> &Arc<dyn DistributedLock> {
        self.inner.store.lock()
    }

    /// Releases `lease` (one kept with [`LockGuard::leak`]) as a guard's release does:
    /// owner-checked, returning whether it still held; and on a polling store, a release of a
    /// mutex hands it to this process's first waiter or wakes that waiter, and one of a permit
    /// or of a read-write lock wakes this process's waiters of it.
    ///
    /// # Errors
    /// Store errors: the release may or may not have been applied; sending it again is
    /// harmless.
    ///
    /// # Cancel safety
    /// As [`DistributedLock::release`]: if the future is dropped, the hold may or may not be
    /// gone.
    ///
    /// ```
    /// use distlock_core::{LockClient, MemoryLock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new());
    /// let lease = client.acquire("batch").await?.leak();
    /// assert!(client.release_lease(&lease).await?);
    /// assert!(!client.release_lease(&lease).await?, "released already");
    /// # Ok(()) }
    /// ```
    pub async fn release_lease(&self, lease: &Lease) -> Result<bool> {
        self.inner.store.release(lease).await
    }

    /// The backend's capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.inner.capabilities
    }

    /// The default options.
    pub fn defaults(&self) -> &AcquireOptions {
        &self.inner.defaults
    }

    /// One attempt with the default options: `Ok(None)` if someone else holds the lock.
    ///
    /// # Errors
    /// Invalid names or options, store errors.
    ///
    /// # Cancel safety
    /// Cancel safe: if the future is dropped, a lock it may have taken is released.
    pub async fn try_acquire(&self, name: impl IntoLockName) -> Result<Option<LockGuard>> {
        let opts = self.inner.defaults.clone().no_wait();
        self.try_acquire_with(name, &opts).await
    }

    /// One attempt with `opts` (their wait is ignored): `Ok(None)` if someone else holds it.
    ///
    /// # Errors
    /// Invalid names or options, store errors.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(
        &self,
        name: impl IntoLockName,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>> {
        match self.acquire_with(name, &opts.clone().no_wait()).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Acquires with the default options (by default waiting until the lock is free).
    ///
    /// # Errors
    /// [`Error::Timeout`] if the defaults limit the wait; invalid names or options; store errors.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`acquire_with`](Self::acquire_with).
    pub async fn acquire(&self, name: impl IntoLockName) -> Result<LockGuard> {
        let opts = self.inner.defaults.clone();
        self.acquire_with(name, &opts).await
    }

    /// Acquires `name` with `opts`, waiting as they say.
    ///
    /// A waiter first tries; if the lock is held, it subscribes to release notifications (on
    /// backends that have them) and only then tries again, so a release in between is never
    /// missed; it then sleeps until a notification, the holder's expiry, or the next backoff
    /// step, whichever comes first. On backends with a store-side FIFO queue
    /// ([`Fairness::Fifo`](crate::Fairness::Fifo)), a wait instead takes a place in that queue
    /// ([`DistributedLock::wait_queued`]).
    ///
    /// # Errors
    /// [`Error::Timeout`] if the lock was still held when the wait ran out (at once with
    /// [`Wait::No`](crate::Wait::No)); [`Error::InvalidName`] / [`Error::InvalidOptions`];
    /// store errors, which end the wait.
    ///
    /// # Cancel safety
    /// Cancel safe. Each attempt runs to completion: inline, without a task of its own, unless
    /// this future is dropped while the attempt is in flight; then the attempt finishes in a
    /// background task and, if it won the lock, releases it at once. A dropped waiter leaves
    /// nothing behind in the store.
    pub async fn acquire_with(&self, name: impl IntoLockName, opts: &AcquireOptions) -> Result<LockGuard> {
        self.acquire_kind(name.into_lock_name()?, LockKind::Exclusive, opts)
            .await
    }

    /// Runs `work` while holding `name`, then releases.
    ///
    /// `work` gets a [`LockContext`] with the fencing token and the lost-lock signal. If the
    /// lock is lost while `work` runs, `work`'s future is dropped at its next await point and
    /// the call returns [`Error::LockLost`]: code past that point never runs without the lock.
    /// The lease's local deadline and the maximum hold time are checked against the clock
    /// before every poll of `work`, so
    /// this holds also for work that blocked its thread past the deadline (no timer or
    /// watchdog needs to have run). Code between two await points runs unchecked: keep
    /// blocking calls out of it, or check [`LockContext::lost_signal`] after them.
    /// If the final release finds the lock no longer ours, the result is also
    /// [`Error::LockLost`], since exclusion may have been broken. If the release fails because
    /// the store is unreachable, the result of `work` is returned and the lock frees at the
    /// end of its TTL.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), plus [`Error::LockLost`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops `work` and releases the lock in the background.
    pub async fn with_lock<F, Fut, T>(
        &self,
        name: impl IntoLockName,
        opts: &AcquireOptions,
        work: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire_with(name, opts).await?;
        run_under(guard, work).await
    }
}

/// Runs `work` under `guard` and releases it: the body of every `with_*` closure method.
pub(crate) async fn run_under<F, Fut, T>(guard: LockGuard, work: F) -> Result<T>
where
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let context = LockContext {
        name: guard.name(),
        fencing: guard.fencing_token(),
        owner: guard.owner(),
        lost: guard.lost_signal(),
    };
    let lost = guard.lost_signal();
    let name = guard.name().to_string();
    // The lost signal wakes this task when the lock is lost, but only once its timer or the
    // watchdog has run: work that blocked its runtime past the deadline can be woken by
    // something else first. So the hold is checked against the clock before every poll of
    // the work, and a lost (or suspended) hold is never polled again.
    let hold = guard.hold();
    let mut work = std::pin::pin!(work(context));
    let work = std::future::poll_fn(|cx| {
        if let Some(reason) = hold.check_lost() {
            return Poll::Ready(Err(reason));
        }
        if hold.status() == Status::Suspended {
            return Poll::Ready(Err(LossReason::SessionSuspended));
        }
        work.as_mut().poll(cx).map(Ok)
    });
    tokio::select! {
        biased;
        reason = lost.lost_or_suspended() => {
            // The work is dropped by now. Dropping the guard sends the owner-checked
            // release in the background: the store may be unreachable, and the caller
            // must hear of the loss at once.
            drop(guard);
            Err(Error::LockLost { name, reason })
        }
        output = work => {
            let output = match output {
                Ok(output) => output,
                Err(reason) => {
                    drop(guard);
                    return Err(Error::LockLost { name, reason });
                }
            };
            // The work may have run past the deadline without yielding (a blocked runtime):
            // then it did not run under the lock for sure.
            if let Some(reason) = guard.lost_signal_reason() {
                drop(guard);
                return Err(Error::LockLost { name, reason });
            }
            match guard.release().await {
                Ok(true) => Ok(output),
                Ok(false) => Err(Error::LockLost { name, reason: LossReason::NotOwned }),
                Err(error) => {
                    tracing::warn!(lock = %name, %error, "distlock: release after with_lock failed; retrying in the background");
                    Ok(output)
                }
            }
        }
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", self.inner.store.lock())
            .field("defaults", &self.inner.defaults)
            .finish()
    }
}

/// What [`LockClient::with_lock`] hands to the protected work.
#[derive(Debug, Clone)]
pub struct LockContext {
    name: LockName,
    fencing: Option<FencingToken>,
    owner: OwnerToken,
    lost: LostSignal,
}

impl LockContext {
    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token to send with every write the lock protects.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing
    }

    /// The owner token of this hold.
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }

    /// The lost-lock signal.
    pub fn lost_signal(&self) -> &LostSignal {
        &self.lost
    }
}
