//! A blocking API for synchronous programs (feature `blocking`): [`LockClient`] and
//! [`LockGuard`] wrap the async ones and run them on a runtime of their own, so a program
//! without async code takes distributed locks with plain calls.
//!
//! Nothing about locking is implemented here: every call is the async
//! [`LockClient`](crate::LockClient)'s, run to completion on the calling thread
//! ([`Runtime::block_on`]) while the watchdog that renews held leases runs on the client's own
//! runtime thread (`distlock-blocking`), so a guard stays renewed while the program does
//! blocking work.
//!
//! # Inside an async runtime
//!
//! Blocking a thread that drives an async runtime would stall it, or deadlock it when the
//! lock's release depends on that thread. Every blocking call made on such a thread (an async
//! task, or a `spawn_blocking` closure) returns [`Error::InsideAsyncRuntime`] at once instead;
//! use the async client there ([`LockClient::async_client`] hands out the one this client
//! wraps). A guard dropped on such a thread does not block either: its release runs on a
//! thread of its own.
//!
//! ```
//! use distlock_core::blocking::LockClient;
//! use distlock_core::{AcquireOptions, MemoryLock};
//! use std::time::Duration;
//!
//! # fn main() -> distlock_core::Result<()> {
//! let client = LockClient::new(MemoryLock::new())?;
//! let guard = client.lock("nightly-report")?;
//! assert!(client.try_lock("nightly-report")?.is_none(), "held, so no second guard");
//! drop(guard); // released before drop returns
//!
//! let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(Duration::from_secs(2));
//! let total = client.with_lock("ledger", &opts, |guard| {
//!     assert!(guard.fencing_token().is_some());
//!     40 + 2
//! })?;
//! assert_eq!(total, 42);
//! # Ok(()) }
//! ```
//!
//! Semaphores and read-write locks come the same way ([`LockClient::semaphore`],
//! [`LockClient::rw_lock`]), handing out the same guard.
//!
//! A backend that opens connections (Redis, SQL, ZooKeeper, memcached) must be opened on the
//! client's runtime, where its connections will live: [`LockClient::open`] runs the async
//! opening there, for example `LockClient::open(|| distlock::connect(url))`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

mod primitives;

pub use primitives::{RwLock, Semaphore};

use crate::{
    AcquireOptions, DistributedLock, Error, FencingToken, IntoLockName, Lease, LockKind, LockName,
    LossReason, OwnerToken, Result,
};

/// How long dropping a [`LockGuard`] waits for its release; a release still out then goes on
/// in the background (owner-checked, retried as the async guard's is), and the drop returns.
pub const DROP_RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How long the client's runtime waits for its last background work when the last client or
/// guard of it goes away.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// The runtime a blocking client and its guards share; shut down when the last of them goes.
struct Engine {
    runtime: Option<Runtime>,
}

impl Engine {
    fn new() -> Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("distlock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::backend("blocking", e))?;
        Ok(Arc::new(Self {
            runtime: Some(runtime),
        }))
    }

    fn runtime(&self) -> &Runtime {
        // Taken only in `drop`.
        self.runtime
            .as_ref()
            .unwrap_or_else(|| unreachable!("the runtime lives until drop"))
    }

    /// Runs `work` to completion on the calling thread, unless that thread drives an async
    /// runtime.
    fn block_on<F: Future>(&self, work: F) -> Result<F::Output> {
        outside_async()?;
        Ok(self.runtime().block_on(work))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // A runtime cannot wait for its tasks from inside another one.
            match outside_async() {
                Ok(()) => runtime.shutdown_timeout(SHUTDOWN_WAIT),
                Err(_) => runtime.shutdown_background(),
            }
        }
    }
}

/// [`Error::InsideAsyncRuntime`] on a thread that drives an async runtime.
fn outside_async() -> Result<()> {
    match Handle::try_current() {
        Ok(_) => Err(Error::InsideAsyncRuntime),
        Err(_) => Ok(()),
    }
}

/// The blocking counterpart of [`crate::LockClient`]: the same locks, waits and renewals, with
/// plain calls. Cheap to clone; clones share one runtime thread.
#[derive(Clone)]
pub struct LockClient {
    client: crate::LockClient,
    engine: Arc<Engine>,
}

impl LockClient {
    /// A client over `lock` (a backend that needs no runtime to be built, such as
    /// [`MemoryLock`](crate::MemoryLock); otherwise see [`open`](Self::open)).
    ///
    /// # Errors
    /// [`Error::Backend`] if the runtime cannot be started (no threads left).
    pub fn new(lock: impl DistributedLock) -> Result<Self> {
        let engine = Engine::new()?;
        let client = {
            let _inside = engine.runtime().enter();
            crate::LockClient::new(lock)
        };
        Ok(Self { client, engine })
    }

    /// A client over the async client that `open` makes, run on this client's runtime so the
    /// backend's connections live there.
    ///
    /// ```
    /// use distlock_core::blocking::LockClient;
    /// use distlock_core::MemoryLock;
    ///
    /// # fn main() -> distlock_core::Result<()> {
    /// // With the umbrella crate: LockClient::open(|| distlock::connect("redis://127.0.0.1:6379"))
    /// let client = LockClient::open(|| async { Ok(distlock_core::LockClient::new(MemoryLock::new())) })?;
    /// client.lock("job")?.release()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// What `open` returns; [`Error::InsideAsyncRuntime`] on a thread that drives an async
    /// runtime.
    pub fn open<F, Fut>(open: F) -> Result<Self>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<crate::LockClient>>,
    {
        outside_async()?;
        let engine = Engine::new()?;
        let client = engine.block_on(open())??;
        Ok(Self { client, engine })
    }

    /// The async client this one wraps (its futures must run on this client's runtime: see
    /// [`handle`](Self::handle)).
    pub fn async_client(&self) -> &crate::LockClient {
        &self.client
    }

    /// A handle on this client's runtime, to run the async client's futures on it.
    pub fn handle(&self) -> &Handle {
        self.engine.runtime().handle()
    }

    /// Takes `name` with the client's default options (by default waiting until it is free).
    ///
    /// # Errors
    /// As [`crate::LockClient::acquire`]; [`Error::InsideAsyncRuntime`].
    pub fn lock(&self, name: impl IntoLockName) -> Result<LockGuard> {
        self.held(self.client.acquire(name))
    }

    /// Takes `name`, waiting as `opts` say.
    ///
    /// # Errors
    /// As [`crate::LockClient::acquire_with`]: [`Error::Timeout`] when the wait runs out;
    /// [`Error::InsideAsyncRuntime`].
    pub fn lock_with(&self, name: impl IntoLockName, opts: &AcquireOptions) -> Result<LockGuard> {
        self.held(self.client.acquire_with(name, opts))
    }

    /// One attempt with the default options: `Ok(None)` if someone else holds `name`.
    ///
    /// # Errors
    /// As [`crate::LockClient::try_acquire`]; [`Error::InsideAsyncRuntime`].
    pub fn try_lock(&self, name: impl IntoLockName) -> Result<Option<LockGuard>> {
        self.maybe_held(self.client.try_acquire(name))
    }

    /// One attempt with `opts` (their wait is ignored): `Ok(None)` if someone else holds it.
    ///
    /// # Errors
    /// As [`crate::LockClient::try_acquire_with`]; [`Error::InsideAsyncRuntime`].
    pub fn try_lock_with(&self, name: impl IntoLockName, opts: &AcquireOptions) -> Result<Option<LockGuard>> {
        self.maybe_held(self.client.try_acquire_with(name, opts))
    }

    /// Runs `work` while holding `name`, then releases it.
    ///
    /// `work` gets the guard, to send its fencing token with every write and to check
    /// [`is_lost`](LockGuard::is_lost) between steps: blocking code cannot be stopped from
    /// outside, so a loss while it runs is reported when it returns, as
    /// [`Error::LockLost`]. So is a release that finds the lock no longer ours. If the release
    /// fails because the store is unreachable, the result of `work` is returned and the lock
    /// frees at the end of its TTL.
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with), plus [`Error::LockLost`].
    pub fn with_lock<T>(
        &self,
        name: impl IntoLockName,
        opts: &AcquireOptions,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<T> {
        let guard = self.lock_with(name, opts)?;
        let output = work(&guard);
        finish(guard, output)
    }

    /// Runs an acquisition to completion and wraps its guard.
    fn held(&self, acquire: impl Future<Output = Result<crate::LockGuard>>) -> Result<LockGuard> {
        let guard = self.engine.block_on(acquire)??;
        Ok(self.guard(guard))
    }

    /// Runs one attempt to completion and wraps its guard, if it won.
    fn maybe_held(
        &self,
        attempt: impl Future<Output = Result<Option<crate::LockGuard>>>,
    ) -> Result<Option<LockGuard>> {
        let guard = self.engine.block_on(attempt)??;
        Ok(guard.map(|guard| self.guard(guard)))
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard {
            guard: Some(guard),
            engine: self.engine.clone(),
        }
    }
}

/// Ends a `with_*` call: `output` if the lock was held throughout and is released now;
/// [`Error::LockLost`] if it was lost or found no longer ours. If the release fails because the
/// store is unreachable, `output` is returned and the lock frees at the end of its TTL.
fn finish<T>(guard: LockGuard, output: T) -> Result<T> {
    let name = guard.name().to_string();
    if let Some(reason) = guard.lost_reason() {
        return Err(Error::LockLost { name, reason });
    }
    match guard.release() {
        Ok(true) => Ok(output),
        Ok(false) => Err(Error::LockLost {
            name,
            reason: LossReason::NotOwned,
        }),
        Err(error) => {
            tracing::warn!(lock = %name, %error, "distlock: release after a with_* call failed; retrying in the background");
            Ok(output)
        }
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::LockClient")
            .field("client", &self.client)
            .finish()
    }
}

/// A held lock, from a blocking [`LockClient`]. Renewed by the client's watchdog while it
/// lives, as the async [`LockGuard`](crate::LockGuard) is.
///
/// # Dropping
///
/// Dropping the guard releases the lock before `drop` returns (one owner-checked round trip,
/// waited for at most [`DROP_RELEASE_WAIT`], then left to the background). On a thread that
/// drives an async runtime it does not block: the release runs on a thread of its own, which
/// keeps the client's runtime alive until it is done. Drop never panics. [`release`](Self::release) tells whether the lock was still ours;
/// [`leak`](Self::leak) keeps it held until its TTL runs out.
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard {
    /// `None` once released or leaked.
    guard: Option<crate::LockGuard>,
    engine: Arc<Engine>,
}

impl LockGuard {
    fn inner(&self) -> &crate::LockGuard {
        // Taken only by the methods that consume the guard, and by drop.
        self.guard
            .as_ref()
            .unwrap_or_else(|| unreachable!("the guard lives until consumed"))
    }

    /// The lock's name.
    pub fn name(&self) -> LockName {
        self.inner().name()
    }

    /// What this guard holds.
    pub fn kind(&self) -> LockKind {
        self.inner().kind()
    }

    /// This acquisition's fencing token, if the backend issues them.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.inner().fencing_token()
    }

    /// The owner token stored as the lock's value.
    pub fn owner(&self) -> OwnerToken {
        self.inner().owner()
    }

    /// A copy of the current lease.
    pub fn lease(&self) -> Lease {
        self.inner().lease()
    }

    /// How long the lock is still ours for sure, unless renewed before (`None` for
    /// session-bound leases).
    pub fn remaining(&self) -> Option<Duration> {
        self.inner().remaining()
    }

    /// Whether the lock was lost (checked against the clock, as
    /// [`crate::LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Why the lock was lost, if it was.
    pub fn lost_reason(&self) -> Option<LossReason> {
        self.inner().lost_signal_reason()
    }

    /// Resets the TTL now, as [`crate::LockGuard::extend`]: whether we still own it.
    ///
    /// # Errors
    /// As [`crate::LockGuard::extend`]; [`Error::InsideAsyncRuntime`].
    pub fn extend(&self, ttl: Duration) -> Result<bool> {
        self.engine.block_on(self.inner().extend(ttl))?
    }

    /// Releases the lock: `true` if it was still ours.
    ///
    /// # Errors
    /// As [`crate::LockGuard::release`]; [`Error::InsideAsyncRuntime`] (then the guard is
    /// dropped, which releases on a thread of its own).
    pub fn release(mut self) -> Result<bool> {
        // Refused inside an async runtime, where the guard's drop releases in the background.
        outside_async()?;
        let guard = self
            .guard
            .take()
            .unwrap_or_else(|| unreachable!("the guard lives until consumed"));
        self.engine.block_on(guard.release())?
    }

    /// Stops renewing and gives up the guard without releasing, as
    /// [`crate::LockGuard::leak`].
    pub fn leak(mut self) -> Lease {
        let guard = self
            .guard
            .take()
            .unwrap_or_else(|| unreachable!("the guard lives until consumed"));
        guard.leak()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        if outside_async().is_ok() {
            release_dropped(&self.engine, guard);
            return;
        }
        // Not on this thread: on one of its own, which keeps the runtime alive until the
        // release is done. If no thread can be started, the closure is dropped with the async
        // guard in it, whose drop releases in the background on the runtime.
        let engine = self.engine.clone();
        let released = std::thread::Builder::new()
            .name("distlock-release".to_owned())
            .spawn(move || release_dropped(&engine, guard));
        if let Err(error) = released {
            tracing::debug!(%error, "distlock: no thread for the release of a dropped guard; released in the background");
        }
    }
}

/// Releases a dropped guard's lock on the calling thread, waiting at most
/// [`DROP_RELEASE_WAIT`] (a release still out then goes on in the background).
fn release_dropped(engine: &Engine, guard: crate::LockGuard) {
    let released = engine
        .runtime()
        .block_on(async { tokio::time::timeout(DROP_RELEASE_WAIT, guard.release()).await });
    match released {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::debug!(%error, "distlock: release of a dropped guard failed; retrying in the background");
        }
        Err(_) => tracing::debug!("distlock: release of a dropped guard is slow; left to the background"),
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.guard {
            Some(guard) => guard.fmt(f),
            None => f.write_str("LockGuard(ended)"),
        }
    }
}
