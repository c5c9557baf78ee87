//! [`LockClient`]: acquiring with waiting, `with_lock`, and cancel safety, written once for
//! every backend on top of the [`DistributedLock`] primitives.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;

use futures::FutureExt;
use tokio::sync::{oneshot, OwnedMutexGuard};
use tokio::time::Instant;
use tracing::Instrument;

use crate::cleanup::release_in_background;
use crate::detach::Detaching;
use crate::guard::LockGuard;
use crate::hold::{HoldOptions, Status};
use crate::local::LocallyWoken;
use crate::meter::{AcquireMeter, Meter};
use crate::schedule::WaitSchedule;
use crate::watchdog::Watchdog;
use crate::{
    AcquireOptions, Attempt, Capabilities, DistributedLock, Error, Fairness, FencingToken, Holder, LockKind,
    LockName, LossReason, LostSignal, OwnerToken, ReleaseWatch, Result, TryAcquire, Wait,
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

/// How much longer than a waiter's longest sleep its entry in a store's queue of waiters
/// lives: the time to make its next attempt, which renews the entry.
const QUEUE_STAY_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) struct ClientInner {
    pub(crate) lock: Arc<dyn DistributedLock>,
    pub(crate) capabilities: Capabilities,
    pub(crate) watchdog: Watchdog,
    pub(crate) meter: Meter,
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
    inner: Arc<ClientInner>,
}

impl LockClient {
    /// A client over `lock` with [`AcquireOptions::new`] as defaults.
    pub fn new(lock: impl DistributedLock) -> Self {
        Self::from_arc(Arc::new(lock))
    }

    /// A client over a shared backend.
    pub fn from_arc(lock: Arc<dyn DistributedLock>) -> Self {
        Self::with_defaults_inner(LocallyWoken::wrap(lock), AcquireOptions::new())
    }

    /// A client with other defaults for [`acquire`](Self::acquire) and
    /// [`try_acquire`](Self::try_acquire). Clones made before this keep the old defaults.
    pub fn with_defaults(self, defaults: AcquireOptions) -> Self {
        let meter = self.inner.meter.clone();
        Self::with_inner(self.inner.lock.clone(), defaults, meter)
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
        Self::with_inner(self.inner.lock.clone(), self.inner.defaults.clone(), meter)
    }

    fn with_defaults_inner(lock: Arc<dyn DistributedLock>, defaults: AcquireOptions) -> Self {
        let meter = Meter::new(lock.backend());
        Self::with_inner(lock, defaults, meter)
    }

    fn with_inner(lock: Arc<dyn DistributedLock>, defaults: AcquireOptions, meter: Meter) -> Self {
        Self {
            inner: Arc::new(ClientInner {
                capabilities: lock.capabilities(),
                watchdog: Watchdog::new(lock.clone()),
                lock,
                meter,
                defaults,
            }),
        }
    }

    /// The backend (for one that polls and names its store, wrapped so that releases by this
    /// process wake this process's waiters: see [`DistributedLock::store_identity`]).
    pub fn backend(&self) -> &Arc<dyn DistributedLock> {
        &self.inner.lock
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
    /// ([`Fairness::Fifo`]), a wait instead takes a place in that queue
    /// ([`DistributedLock::wait_queued`]).
    ///
    /// # Errors
    /// [`Error::Timeout`] if the lock was still held when the wait ran out (at once with
    /// [`Wait::No`]); [`Error::InvalidName`] / [`Error::InvalidOptions`]; store errors, which
    /// end the wait.
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

    /// Acquires a hold of `kind` on `name` with `opts`: the mutex's loop, written once for
    /// every primitive. Waits for semaphores and read-write locks register as waiters with
    /// [`DistributedLock::attempt`] (a waiting writer keeps new readers out) and
    /// withdraw when they end without a hold, also when dropped. Its outcome and times go to
    /// the [`metrics`](crate::metrics).
    pub(crate) async fn acquire_kind(
        &self,
        name: LockName,
        kind: LockKind,
        opts: &AcquireOptions,
    ) -> Result<LockGuard> {
        let mut meter = self
            .inner
            .meter
            .acquire(&name, kind, opts.wait_value() == Wait::No);
        let outcome = self.wait_for(name, kind, opts, &mut meter).await;
        meter.finish(&outcome);
        outcome
    }

    /// The body of [`acquire_kind`](Self::acquire_kind), telling `meter` when it starts
    /// waiting.
    async fn wait_for(
        &self,
        name: LockName,
        kind: LockKind,
        opts: &AcquireOptions,
        meter: &mut AcquireMeter,
    ) -> Result<LockGuard> {
        opts.validate()?;
        let ttl = self.inner.capabilities.validate_ttl(opts.ttl_value())?;
        let started = Instant::now();
        let deadline = opts.wait_value().deadline(started)?;
        let span = tracing::debug_span!("distlock.acquire", backend = self.inner.lock.backend(), lock = %name, %kind);
        // Every step of a bounded wait is cut at its deadline (an attempt cut there still
        // runs to completion in its task, and cleans up after itself).
        let step_deadline = match opts.wait_value() {
            Wait::For(_) => deadline,
            Wait::No | Wait::Forever => None,
        };
        async move {
            let queued = self.inner.capabilities.fairness == Fairness::Fifo;
            if queued && opts.wait_value() != Wait::No {
                meter.waiting();
                return match self.queued(&name, kind, ttl, opts, deadline).await? {
                    Some(guard) => Ok(guard),
                    None => Err(timeout(&name, started)),
                };
            }
            // Every acquisition makes one attempt: a wait whose deadline has passed already (a
            // tiny one) makes it uncut, as `Wait::No` does.
            let first_deadline = step_deadline.filter(|at| *at > Instant::now());
            if let Outcome::Acquired(guard) = within_deadline(
                first_deadline,
                &name,
                started,
                self.attempt(&name, kind, ttl, opts, None, None),
            )
            .await??
            {
                return Ok(guard);
            }
            if opts.wait_value() == Wait::No {
                return Err(timeout(&name, started));
            }
            meter.waiting();
            let watching = self.inner.lock.watch(&name, kind.primitive());
            let watch = match within_deadline(step_deadline, &name, started, watching).await? {
                Ok(watch) => watch,
                Err(error) => {
                    tracing::debug!(%error, "distlock: no release notifications, polling instead");
                    ReleaseWatch::polling()
                }
            };
            // A wait for a semaphore or read-write lock is one waiter on the store, under the
            // id its watch is woken by (or one of its own), withdrawn if the wait ends without
            // a hold.
            let withdraw = (kind != LockKind::Exclusive).then(|| Withdraw {
                lock: self.inner.lock.clone(),
                name: name.clone(),
                kind,
                id: watch
                    .waiter()
                    .cloned()
                    .unwrap_or_else(|| Arc::from(OwnerToken::new().to_string())),
                armed: true,
            });
            let mut schedule = WaitSchedule::new(opts, watch.is_notified());
            let mut records = WaitRecords::new(self.inner.lock.clone(), watch, withdraw);
            loop {
                // Subscribed first, then retried: a release in between is not lost. A waiter
                // with an id stays queued for longer than it can sleep before its next attempt.
                let waiting = records
                    .waiter_id()
                    .map(|id| (id, schedule.longest().saturating_add(QUEUE_STAY_MARGIN)));
                let in_flight = records.attempt_started();
                let holder = match within_deadline(
                    step_deadline,
                    &name,
                    started,
                    self.attempt(&name, kind, ttl, opts, waiting, in_flight),
                )
                .await??
                {
                    Outcome::Acquired(guard) => {
                        records.disarm();
                        return Ok(guard);
                    }
                    Outcome::Held(holder) => holder,
                };
                let now = Instant::now();
                let mut delay = schedule.next(&holder);
                if let Some(deadline) = deadline {
                    if deadline <= now {
                        return Err(timeout(&name, started));
                    }
                    delay = delay.min(deadline - now);
                }
                tracing::trace!(?delay, "distlock: waiting");
                records.watch().wait(delay).await;
                if !records.watch().is_notified() {
                    schedule.poll_instead(); // the notifications stopped
                }
                // A release by a client of this process may have handed the lock over to us.
                if let Some(lease) = records.watch().take_handed() {
                    // Handed over by a request sent before now, for our last attempt's TTL.
                    let lease = lease.bounded_by(Instant::now(), ttl);
                    tracing::debug!(lock = %name, fencing = ?lease.fencing_token(), "distlock: acquired by hand-over");
                    return Ok(LockGuard::start(self.inner.clone(), lease, HoldOptions::from(opts)));
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Runs `work` while holding `name`, then releases.
    ///
    /// `work` gets a [`LockContext`] with the fencing token and the lost-lock signal. If the
    /// lock is lost while `work` runs, `work`'s future is dropped at its next await point and
    /// the call returns [`Error::LockLost`]: code past that point never runs without the lock.
    /// The lease's local deadline is checked against the clock before every poll of `work`, so
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

    /// One attempt, run to completion even if the caller goes away ([`Detaching`]), so that
    /// dropping the caller can never strand a lock: a guard that cannot be delivered is
    /// dropped, which releases it, and an attempt whose outcome is unknown (a timeout, a cut
    /// connection, a backend that panicked) is followed by an owner-checked release under the
    /// same owner token, in the background. `in_flight` is held until the attempt has ended, wherever it runs.
    async fn attempt(
        &self,
        name: &LockName,
        kind: LockKind,
        ttl: std::time::Duration,
        opts: &AcquireOptions,
        waiting: Option<(Arc<str>, std::time::Duration)>,
        in_flight: Option<OwnedMutexGuard<()>>,
    ) -> Result<Outcome> {
        let inner = self.inner.clone();
        let name = name.clone();
        let options = HoldOptions::from(opts);
        let attempt = Detaching::new(async move {
            let _in_flight = in_flight;
            let mut request = Attempt::new(name.clone(), kind, OwnerToken::new(), ttl);
            if let Some((waiter, stay)) = waiting {
                request = request.waiting(waiter, stay);
            }
            let sent_at = Instant::now();
            let attempt = inner.lock.attempt(&request);
            // A backend that panicked may have had the store apply the attempt first: its
            // outcome is unknown, and it is cleaned up by owner below like any such attempt.
            let outcome = AssertUnwindSafe(attempt)
                .catch_unwind()
                .await
                .unwrap_or_else(|_panic| {
                    Err(Error::backend(
                        inner.lock.backend(),
                        "the backend panicked during the attempt",
                    ))
                });
            inner.meter.attempt(&name, kind, sent_at, &outcome);
            match outcome {
                Ok(TryAcquire::Acquired(lease)) => {
                    let lease = lease.bounded_by(sent_at, ttl);
                    tracing::debug!(lock = %name, fencing = ?lease.fencing_token(), "distlock: acquired");
                    Ok(Outcome::Acquired(LockGuard::start(inner.clone(), lease, options)))
                }
                Ok(TryAcquire::Held(holder)) => Ok(Outcome::Held(holder)),
                Err(error) => {
                    if error.is_ambiguous() {
                        tracing::debug!(lock = %name, %error, "distlock: acquisition outcome unknown; cleaning up by owner");
                        release_in_background(
                            inner.lock.clone(),
                            request.cleanup_lease(sent_at),
                            "an acquisition whose outcome is unknown",
                        );
                    }
                    Err(error)
                }
            }
        });
        attempt.await.map_err(|_panic| self.task_failed())?
    }

    /// Waits in the store's own FIFO queue ([`DistributedLock::wait_queued`]) in a task.
    /// If the caller goes away, the task drops the queued future, which removes the queue
    /// entry; a guard won meanwhile but not delivered is dropped, which releases it.
    async fn queued(
        &self,
        name: &LockName,
        kind: LockKind,
        ttl: std::time::Duration,
        opts: &AcquireOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let inner = self.inner.clone();
        let name = name.clone();
        let options = HoldOptions::from(opts);
        let (mut tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let request = Attempt::new(name.clone(), kind, OwnerToken::new(), ttl);
            let sent_at = Instant::now();
            // The store may have applied a wait that ended in an ambiguous error, or in a
            // panic: either way it is cleaned up by owner, as an attempt is.
            let cleanup = request.cleanup_lease(sent_at);
            let waiting = AssertUnwindSafe(inner.lock.wait_queued(&request, deadline)).catch_unwind();
            let outcome = tokio::select! {
                outcome = waiting => outcome,
                _ = tx.closed() => return,
            };
            let outcome = match outcome {
                Ok(Err(error)) if error.is_ambiguous() => {
                    tracing::debug!(lock = %name, %error, "distlock: queued acquisition outcome unknown; cleaning up by owner");
                    release_in_background(
                        inner.lock.clone(),
                        cleanup,
                        "a queued acquisition whose outcome is unknown",
                    );
                    Err(error)
                }
                Ok(outcome) => outcome,
                Err(_panic) => {
                    release_in_background(
                        inner.lock.clone(),
                        cleanup,
                        "a queued acquisition whose backend panicked",
                    );
                    Err(Error::backend(
                        inner.lock.backend(),
                        "the backend panicked while waiting in the queue",
                    ))
                }
            };
            // The store took it at the latest when the answer came.
            let answered_at = Instant::now();
            let outcome = outcome.map(|lease| {
                lease.map(|lease| {
                    let lease = lease.bounded_by(answered_at, ttl);
                    tracing::debug!(lock = %name, fencing = ?lease.fencing_token(), "distlock: acquired in queue");
                    LockGuard::start(inner.clone(), lease, options)
                })
            });
            let _ = tx.send(outcome);
        });
        rx.await.map_err(|_| self.task_failed())?
    }
}

impl LockClient {
    /// The error for an acquisition that ended without an answer (it panicked).
    fn task_failed(&self) -> Error {
        Error::backend(
            self.inner.lock.backend(),
            "the acquisition task ended unexpectedly",
        )
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

/// What one attempt of a wait came to.
enum Outcome {
    Acquired(LockGuard),
    Held(Holder),
}

/// What a wait keeps on the store, ended when the wait ends: its watch (whose drop takes a
/// queued waiter out of the store's queue) and a permit's or writer's [`Withdraw`]. But never
/// before an attempt that the end of the wait cut off has finished: that attempt runs on in
/// the background and may queue or record the waiter once more, and ending the records
/// before it would leave that entry behind (a writer's record would keep readers out, a queue
/// entry would take a wake that no one acts on).
struct WaitRecords {
    watch: Option<ReleaseWatch>,
    withdraw: Option<Withdraw>,
    /// Locked by each attempt of the wait until it has ended.
    attempts: Arc<tokio::sync::Mutex<()>>,
    /// The backend, kept until the records have ended (the watch may hold it weakly only,
    /// and the wait's client may be gone by then). Declared last: dropped last.
    lock: Arc<dyn DistributedLock>,
}

impl WaitRecords {
    fn new(lock: Arc<dyn DistributedLock>, watch: ReleaseWatch, withdraw: Option<Withdraw>) -> Self {
        Self {
            watch: Some(watch),
            withdraw,
            attempts: Arc::default(),
            lock,
        }
    }

    /// The watch (there until the records end).
    fn watch(&mut self) -> &mut ReleaseWatch {
        self.watch.get_or_insert_with(ReleaseWatch::polling)
    }

    /// The id the store knows the waiter by, if it records or queues it.
    fn waiter_id(&self) -> Option<Arc<str>> {
        match &self.withdraw {
            Some(withdraw) => Some(withdraw.id.clone()),
            None => self.watch.as_ref().and_then(ReleaseWatch::waiter).cloned(),
        }
    }

    /// The mark of an attempt under way, for the attempt to hold until it ends. Attempts of one
    /// wait run one after another, so it is free whenever a new one starts.
    fn attempt_started(&self) -> Option<OwnedMutexGuard<()>> {
        self.attempts.clone().try_lock_owned().ok()
    }

    /// The wait won: nothing to withdraw.
    fn disarm(&mut self) {
        if let Some(withdraw) = self.withdraw.as_mut() {
            withdraw.armed = false;
        }
    }
}

impl Drop for WaitRecords {
    fn drop(&mut self) {
        if self.attempts.try_lock().is_ok() {
            return; // no attempt under way: the records end now
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (watch, withdraw) = (self.watch.take(), self.withdraw.take());
        let (attempts, lock) = (self.attempts.clone(), self.lock.clone());
        runtime.spawn(async move {
            let _ended = attempts.lock().await;
            drop(watch);
            drop(withdraw);
            drop(lock);
        });
    }
}

/// A semaphore or read-write lock waiter's record on the store, withdrawn in the background
/// when the wait ends without a hold (a timeout, an error, the caller dropping the future).
struct Withdraw {
    lock: Arc<dyn DistributedLock>,
    name: LockName,
    kind: LockKind,
    id: Arc<str>,
    armed: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        // Only a waiting writer and a permit's waiter leave records (readers wait unrecorded).
        if !self.armed || !matches!(self.kind, LockKind::Write | LockKind::Permit { .. }) {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (lock, name, kind, id) = (self.lock.clone(), self.name.clone(), self.kind, self.id.clone());
        tokio::spawn(async move {
            if let Err(error) = lock.withdraw(&name, kind, &id).await {
                tracing::debug!(lock = %name, %error, "distlock: withdrawing a waiter failed; its record expires by itself");
            }
        });
    }
}

/// Runs one step of a wait, cut with [`Error::Timeout`] at `deadline` if there is one. A step
/// is not started once the deadline has passed: an attempt started then could still win the
/// lock after the caller was told it timed out.
async fn within_deadline<T>(
    deadline: Option<Instant>,
    name: &LockName,
    started: Instant,
    step: impl Future<Output = T>,
) -> Result<T> {
    match deadline {
        Some(deadline) if deadline <= Instant::now() => Err(timeout(name, started)),
        Some(deadline) => tokio::time::timeout_at(deadline, step)
            .await
            .map_err(|_| timeout(name, started)),
        None => Ok(step.await),
    }
}

fn timeout(name: &LockName, started: Instant) -> Error {
    Error::Timeout {
        name: name.to_string(),
        waited: started.elapsed(),
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.inner.lock)
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
