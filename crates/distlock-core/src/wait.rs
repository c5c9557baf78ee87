//! The wait loop of [`LockClient`]: attempt, subscribe, attempt again, sleep until a release,
//! the holder's expiry or the next backoff step, within the wait's deadline (for a lock the
//! client had to wait for lately, [`RecentWaits`](crate::contention::RecentWaits): subscribe,
//! then a queued first attempt); the records a
//! wait leaves on the store (its watch, a waiting writer's or a permit waiter's record) and
//! their removal when the wait ends. One attempt's machinery is in `attempts`.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempts::Outcome;
use crate::client::LockClient;
use crate::guard::LockGuard;
use crate::hold::HoldOptions;
use crate::local::Inbox;
use crate::meter::AcquireMeter;
use crate::schedule::WaitSchedule;
use crate::store::Store;
use crate::{AcquireOptions, Error, Fairness, LockKind, LockName, OwnerToken, ReleaseWatch, Result, Wait};

/// How much longer than a waiter's longest sleep its entry in a store's queue of waiters
/// lives: the time to make its next attempt, which renews the entry.
const QUEUE_STAY_MARGIN: std::time::Duration = std::time::Duration::from_secs(1);

impl LockClient {
    /// Acquires a hold of `kind` on `name` with `opts`: the mutex's loop, written once for
    /// every primitive. Waits for semaphores and read-write locks register as waiters with
    /// [`DistributedLock::attempt`] (a waiting writer keeps new readers out) and
    /// withdraw when they end without a hold, also when dropped. Its outcome and times go to
    /// the [`metrics`](crate::metrics).
    ///
    /// [`DistributedLock::attempt`]: crate::DistributedLock::attempt
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
        let span = tracing::debug_span!("distlock.acquire", backend = self.inner.store.lock().backend(), lock = %name, %kind);
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
            // A lock this client had to wait for lately is likely held again: such a wait
            // takes its watch first and makes its first attempt a queued one (the loop's),
            // instead of a plain attempt that finds the lock held and a queued one after it.
            let primitive = kind.primitive();
            let queued_first = opts.wait_value() != Wait::No
                && first_deadline.is_some() == step_deadline.is_some()
                && self.inner.recent_waits.recently(&name, primitive);
            if !queued_first {
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
                self.inner.recent_waits.waited(&name, primitive);
            }
            // The inbox is where a release by a client of this process may hand the lock to
            // this waiter (see `local_wake`).
            let watching = self.inner.store.watch(&name, kind.primitive());
            let (watch, inbox) = match within_deadline(step_deadline, &name, started, watching).await {
                Ok(Ok(watching)) => watching,
                // A queued first attempt still runs (uncut, its deadline having passed).
                Err(Error::Timeout { .. }) if queued_first => (ReleaseWatch::polling(), None),
                Err(error) => return Err(error),
                Ok(Err(error)) => {
                    tracing::debug!(%error, "distlock: no release notifications, polling instead");
                    (ReleaseWatch::polling(), None)
                }
            };
            // A wait for a semaphore or read-write lock is one waiter on the store, under the
            // id its watch is woken by (or one of its own), withdrawn if the wait ends without
            // a hold.
            let withdraw = (kind != LockKind::Exclusive).then(|| Withdraw {
                store: self.inner.store.clone(),
                name: name.clone(),
                kind,
                id: watch
                    .waiter()
                    .cloned()
                    .unwrap_or_else(|| Arc::from(OwnerToken::new().to_string())),
                armed: true,
            });
            let mut schedule = WaitSchedule::new(opts, watch.is_notified());
            let mut records = WaitRecords::new(self.inner.store.clone(), watch, withdraw);
            let mut first = queued_first;
            loop {
                // Subscribed first, then retried: a release in between is not lost. A waiter
                // with an id stays queued for longer than it can sleep before its next attempt.
                let waiting = records
                    .waiter_id()
                    .map(|id| (id, schedule.longest().saturating_add(QUEUE_STAY_MARGIN)));
                let in_flight = records.attempt_started();
                // A queued first attempt is every acquisition's one attempt: uncut once the
                // deadline has passed, as a plain one.
                let cut = match std::mem::take(&mut first) {
                    true => step_deadline.filter(|at| *at > Instant::now()),
                    false => step_deadline,
                };
                let holder = match within_deadline(
                    cut,
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
                meter.waiting();
                self.inner.recent_waits.waited(&name, primitive);
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
                if let Some(lease) = inbox.as_ref().and_then(Inbox::take) {
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
    store: Store,
}

impl WaitRecords {
    fn new(store: Store, watch: ReleaseWatch, withdraw: Option<Withdraw>) -> Self {
        Self {
            watch: Some(watch),
            withdraw,
            attempts: Arc::default(),
            store,
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
        let (attempts, store) = (self.attempts.clone(), self.store.clone());
        runtime.spawn(async move {
            let _ended = attempts.lock().await;
            drop(watch);
            drop(withdraw);
            drop(store);
        });
    }
}

/// A semaphore or read-write lock waiter's record on the store, withdrawn in the background
/// when the wait ends without a hold (a timeout, an error, the caller dropping the future).
struct Withdraw {
    store: Store,
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
        let (store, name, kind, id) = (self.store.clone(), self.name.clone(), self.kind, self.id.clone());
        tokio::spawn(async move {
            if let Err(error) = store.withdraw(&name, kind, &id).await {
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
