//! The watchdog: one task per client renews every held lease of that client, in batches, and
//! records losses.
//!
//! It owns the renewal schedule; it may not decide ownership, which only the store's answers
//! do. It records what it learns (renewal answers, session changes, lease watches) and applies
//! the one rule that decides every loss, [`Hold::check_lost`], which every reader of a guard
//! applies too: a loss by the clock (the local deadline, the session's, the maximum hold
//! time) is thus never late for a reader because the watchdog was. The watchdog's job is to
//! renew early enough that no deadline passes, and to fire signals for the guards nobody is
//! looking at.
//!
//! - Holds wait in timer buckets by their next event (renewal, deadline, maximum hold), one
//!   bucket per millisecond that has any (see `timers.rs`): the holds of one renewal batch
//!   share a bucket, so scheduling a hold costs the same however many are held, and wakes the
//!   task only when it is due before the task's current sleep.
//! - All holds due at one wake-up (and any due within a tenth of their TTL) go to the backend
//!   in one [`DistributedLock::renew`](crate::DistributedLock::renew) call, which a backend
//!   can pipeline. Each batch runs in a task of its own, so a store that hangs on one batch
//!   delays neither other renewals nor the detection of expiries; a panicking backend fails
//!   that batch's renewals only.
//! - The task starts with the first registration and ends when no hold is left. If it dies
//!   with its runtime, it starts again on the runtime of a hold still registered (or, if
//!   none is left, with the next registration), so no hold depends on the runtime that
//!   happened to register first.

mod timers;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::runtime::{Handle, Id as RuntimeId};
use tokio::sync::{watch, Notify, OwnedMutexGuard};
use tokio::time::Instant;

use crate::cleanup::release_in_background;
use crate::clock;
use crate::hold::{Hold, Renewal, Status};
use crate::store::Store;
use crate::{Lease, LossReason, Session, SessionState};
use timers::Timers;

/// Holds due within `ttl / PIGGYBACK_DIVISOR` ride along with a batch that is due now.
const PIGGYBACK_DIVISOR: u32 = 10;
/// How long the task sleeps when nothing is scheduled (it is woken by new work).
const IDLE: Duration = Duration::from_secs(3600);
/// The longest the task sleeps while it watches holds: timers stand still while the host is
/// suspended, so it wakes this often to notice a resume and look at every hold again.
const SUSPEND_CHECK: Duration = Duration::from_secs(1);
/// Holds rescheduled per taking of the state's lock after a batch (other registrations wait
/// for it no longer than this many take).
const RESCHEDULE_CHUNK: usize = 1024;
/// A suspend shorter than this does not send every hold to renewal at once: the suspended
/// time is read from two clocks one after the other, and can seem to grow by the time
/// between two reads; a real suspend lasts far longer (every reader of a hold still counts
/// even the shortest against its deadline).
const SUSPEND_NOTICE: Duration = Duration::from_millis(10);

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    /// The backend: renewals go to it, the releases past the maximum hold time through its
    /// waiting layer.
    store: Store,
    session: Option<watch::Receiver<Session>>,
    state: Mutex<State>,
    wake: Notify,
}

struct State {
    holds: HashMap<u64, Arc<Hold>>,
    /// When each hold is looked at next.
    timers: Timers,
    /// Lease-loss futures from
    /// [`DistributedLock::watch_lease`](crate::DistributedLock::watch_lease) not yet picked
    /// up by the task.
    new_lease_watches: Vec<(u64, BoxFuture<'static, LossReason>)>,
    task_running: bool,
    /// The runtime each hold was registered on (kept until it is unregistered): where the
    /// task moves when its own runtime stops while holds remain.
    runtimes: HashMap<u64, Handle>,
    /// Until when the task sleeps (`None` while it works).
    sleeping_until: Option<Instant>,
    /// Timer entries taken so far (tests measure the watchdog's work by it).
    #[cfg(test)]
    processed: u64,
}

impl Watchdog {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            shared: Arc::new(Shared {
                session: store.lock().session(),
                store,
                state: Mutex::new(State::new(Instant::now())),
                wake: Notify::new(),
            }),
        }
    }

    /// Starts watching a fresh hold. Must run inside a tokio runtime.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let lease = hold.lease();
        let event = hold.next_event();
        if event.is_none() && lease.session_epoch().is_none() {
            return; // nothing to renew, no deadline, no session to follow
        }
        if let (Some(epoch), Some(session)) = (lease.session_epoch(), &self.shared.session) {
            let session = *session.borrow();
            if apply_session(&hold, epoch, session) {
                return; // its session is already over
            }
        }
        let lease_watch = self.shared.store.lock().watch_lease(&lease);
        let has_watch = lease_watch.is_some();
        let mut state = self.shared.lock_state();
        // Read again under the lock that `follow_session` takes: a session that ended since
        // the read above is seen here, or its change is applied to this hold by the task.
        if let (Some(epoch), Some(session)) = (lease.session_epoch(), &self.shared.session) {
            let session = *session.borrow();
            if apply_session(&hold, epoch, session) {
                return;
            }
        }
        if let Some(lease_watch) = lease_watch {
            state.new_lease_watches.push((hold.id, lease_watch));
        }
        state.holds.insert(hold.id, hold.clone());
        state.runtimes.insert(hold.id, Handle::current());
        self.shared.schedule(state, hold.id, event, has_watch);
    }

    /// Looks at a hold again after a manual renewal changed its schedule.
    pub(crate) fn reschedule(&self, hold: &Hold) {
        let state = self.shared.lock_state();
        if state.holds.contains_key(&hold.id) {
            self.shared.schedule(state, hold.id, hold.next_event(), false);
        }
    }

    /// The backend's session, if it has one (holds read its local deadline).
    pub(crate) fn session(&self) -> Option<watch::Receiver<Session>> {
        self.shared.session.clone()
    }

    /// Stops watching a hold (released, leaked or dropped).
    pub(crate) fn unregister(&self, id: u64) {
        let mut state = self.shared.lock_state();
        state.forget(id);
        state.runtimes.remove(&id);
    }
}

impl State {
    fn new(origin: Instant) -> Self {
        Self {
            holds: HashMap::new(),
            timers: Timers::new(origin),
            new_lease_watches: Vec::new(),
            task_running: false,
            runtimes: HashMap::new(),
            sleeping_until: None,
            #[cfg(test)]
            processed: 0,
        }
    }

    /// Stops watching hold `id`: every removal of a hold goes through here, so that a hold
    /// with a live timer is always one still watched.
    fn forget(&mut self, id: u64) -> Option<Arc<Hold>> {
        let hold = self.holds.remove(&id)?;
        self.timers.forget(&hold);
        Some(hold)
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `id`'s next event among the timers and makes sure the task will see it: starts the
    /// task if none runs, wakes it if the event comes before its current sleep ends (or
    /// `wake` asks for it). Must run inside a tokio runtime.
    fn schedule(
        self: &Arc<Self>,
        mut state: MutexGuard<'_, State>,
        id: u64,
        event: Option<Instant>,
        wake: bool,
    ) {
        if let Some(at) = event {
            if let Some(hold) = state.holds.get(&id).cloned() {
                state.timers.push(at, &hold);
            }
        }
        self.watch_from(state, event, wake);
    }

    /// Schedules the holds a batch has just settled (and empties `settled`), all under one
    /// taking of the state's lock. Must run inside a tokio runtime.
    fn reschedule_settled(self: &Arc<Self>, settled: &mut Vec<Arc<Hold>>) {
        if settled.is_empty() {
            return;
        }
        let mut state = self.lock_state();
        let mut earliest: Option<Instant> = None;
        for hold in settled.drain(..) {
            if !hold.is_active() {
                state.forget(hold.id);
            } else if state.holds.contains_key(&hold.id) {
                if let Some(at) = hold.next_event() {
                    state.timers.push(at, &hold);
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
        }
        self.watch_from(state, earliest, false);
    }

    /// Makes sure the task will look at the timers by `event`: starts it if none runs, wakes
    /// it if `event` comes before its current sleep ends (or `wake` asks for it).
    fn watch_from(self: &Arc<Self>, mut state: MutexGuard<'_, State>, event: Option<Instant>, wake: bool) {
        if !std::mem::replace(&mut state.task_running, true) {
            drop(state);
            // The flag's guard is made here, not in the task: a runtime shutting down before
            // the task first ran drops the unpolled future, and with it the guard.
            let runtime = Handle::current();
            runtime.spawn(run(self.clone(), Running::on(self.clone(), &runtime)));
            return;
        }
        let earlier = event.is_some_and(|at| state.sleeping_until.is_some_and(|sleep| at < sleep));
        drop(state);
        if wake || earlier {
            self.wake.notify_one();
        }
    }
}

/// Clears `task_running` when the task ends, however it ends (its runtime shutting down
/// drops it mid-sleep, or before it ever ran), so that the next registration starts a new
/// task.
///
/// If it ends with its runtime while holds remain, the task moves to the runtime of another
/// hold at once: the holds of other runtimes must not wait for a new registration to be
/// renewed. A runtime that has stopped too drops the task it is given, which moves it on
/// again, past every stopped runtime in turn.
struct Running {
    shared: Option<Arc<Shared>>,
    runtime: RuntimeId,
}

impl Running {
    fn on(shared: Arc<Shared>, runtime: &Handle) -> Self {
        Self {
            shared: Some(shared),
            runtime: runtime.id(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let next = {
            let mut state = shared.lock_state();
            state.task_running = false;
            state.sleeping_until = None;
            let stopped = self.runtime;
            let State { holds, runtimes, .. } = &mut *state;
            runtimes.retain(|id, runtime| runtime.id() != stopped && holds.contains_key(id));
            let next = match holds.is_empty() {
                true => None,
                false => runtimes.values().next().cloned(),
            };
            if next.is_some() {
                // Renewals in flight on the stopped runtime were dropped with it: look at
                // every hold at once, so those due are sent again before their deadlines.
                let (now, holds) = (Instant::now(), holds.values().cloned().collect::<Vec<_>>());
                for hold in holds {
                    state.timers.push(now, &hold);
                }
            }
            state.task_running = next.is_some();
            next
        };
        if let Some(runtime) = next {
            runtime.spawn(run(shared.clone(), Running::on(shared, &runtime)));
        }
    }
}

async fn run(shared: Arc<Shared>, mut running: Running) {
    let mut session = shared.session.clone();
    let mut lease_watches = FuturesUnordered::new();
    let mut suspended = clock::suspended_total();
    loop {
        let now = Instant::now();
        let (batch, next) = {
            let mut state = shared.lock_state();
            let suspended_now = clock::suspended_total();
            if suspended_now > suspended + SUSPEND_NOTICE {
                // The host was suspended: every deadline moved closer; look at every hold.
                suspended = suspended_now;
                let holds: Vec<Arc<Hold>> = state.holds.values().cloned().collect();
                for hold in holds {
                    state.timers.push(now, &hold);
                }
            }
            if state.holds.is_empty() {
                // Cleared under the same lock that saw no hold, so a registration either came
                // before (and is seen) or starts a new task.
                state.new_lease_watches.clear();
                state.timers.clear();
                state.task_running = false;
                running.shared = None;
                return;
            }
            for (id, lost) in state.new_lease_watches.drain(..) {
                lease_watches.push(async move { (id, lost.await) });
            }
            let (batch, past_max_hold) = collect_due(&mut state, now);
            for lease in past_max_hold {
                // A lease without a TTL of its own (session-bound) would stay held for as long
                // as its session lives: it is released, owner-checked, like a dropped guard's.
                release_in_background(shared.store.clone(), lease, "the maximum hold time passed");
            }
            let next = state
                .timers
                .first()
                .map_or(now + IDLE, |tick| state.timers.at(tick))
                .min(now + SUSPEND_CHECK);
            state.sleeping_until = batch.due.is_empty().then_some(next);
            (batch, next)
        };
        if !batch.due.is_empty() {
            tokio::spawn(renew(shared.clone(), batch));
            continue;
        }
        let session_changed = async {
            match session.as_mut() {
                Some(rx) => rx.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = shared.wake.notified() => {}
            Some((id, reason)) = lease_watches.next(), if !lease_watches.is_empty() => {
                let hold = shared.lock_state().forget(id);
                if let Some(hold) = hold {
                    hold.lose(reason);
                }
            }
            alive = session_changed => {
                let current = session.as_ref().filter(|_| alive).map(|rx| *rx.borrow());
                if current.is_none() {
                    session = None; // the backend is gone: its sessions are over
                }
                follow_session(&shared, current);
            }
        }
    }
}

/// One hold to renew, with its renewal slot taken.
struct Due {
    hold: Arc<Hold>,
    ttl: Duration,
    _slot: OwnedMutexGuard<()>,
}

/// The holds to renew at one wake-up, and their leases (in the same order), as the backend
/// takes them.
#[derive(Default)]
struct Batch {
    due: Vec<Due>,
    leases: Vec<Lease>,
}

/// Takes every timer that has come (and, when something is due, those within their
/// piggyback window), records losses, and returns the holds to renew now, and the leases
/// without a TTL of their own whose maximum hold time passed (to release).
fn collect_due(state: &mut State, now: Instant) -> (Batch, Vec<Lease>) {
    let mut batch = Batch::default();
    let mut past_max_hold = Vec::new();
    let mut later = Vec::new();
    let mut kept = Vec::new();
    'buckets: while let Some(tick) = state.timers.first() {
        let at = state.timers.at(tick);
        if at > now && batch.due.is_empty() {
            break; // nothing due: no piggyback window is open
        }
        let Some((tick, mut bucket)) = state.timers.take_first() else {
            break;
        };
        // The holds of one batch share a bucket: room for all of them at once, not by doubling.
        batch.due.reserve(bucket.len());
        batch.leases.reserve(bucket.len());
        // Set when this bucket is the last to look at: the rest of it is still looked at.
        let mut last = false;
        // Drained: each hold is let go while its memory is still in the cache, not in a second
        // pass over the bucket.
        for hold in bucket.drain(..) {
            #[cfg(test)]
            {
                state.processed += 1;
            }
            // A live timer is a watched hold's (`State::forget`); a dead one was rescheduled
            // earlier, or its hold is gone.
            if !state.timers.take_if_live(tick, &hold) {
                continue;
            }
            let id = hold.id;
            let lease = hold.lease();
            let window = match batch.due.is_empty() {
                true => Duration::ZERO,
                false => lease.ttl() / PIGGYBACK_DIVISOR,
            };
            if at > now + window {
                kept.push(hold); // still due at this tick: put back below

                last = true;
                continue;
            }
            // Past its maximum hold time (whoever decided it first, here or a reader of the
            // guard: the same rule, `Hold::check_lost`), a lease without a TTL of its own is
            // released.
            if hold.max_hold_until.is_some_and(|t| t <= now)
                && hold
                    .check_lost()
                    .is_none_or(|reason| reason == LossReason::MaxHoldExceeded)
                && hold.status() != Status::Released
            {
                tracing::info!(lock = %lease.name(), "distlock: maximum hold time reached, renewal stops");
                state.forget(id);
                if lease.valid_until().is_none() {
                    past_max_hold.push(lease);
                }
                continue;
            }
            if !hold.is_active() {
                state.forget(id);
                continue;
            }
            let renew = hold.renew_at().is_some_and(|t| t <= now + window);
            // A renewal already in flight (a manual extend) reschedules the hold when it ends.
            let slot = renew
                .then(|| hold.renewing.clone().try_lock_owned().ok())
                .flatten();
            match slot {
                Some(slot) => {
                    if let Some(deadline) = hold.loss_at() {
                        // Watched while the batch is out (a later bucket: the loop takes it
                        // only if it comes within the window, and then leaves it for later).
                        state.timers.push(deadline, &hold);
                    }
                    batch.due.push(Due {
                        hold,
                        ttl: lease.ttl(),
                        _slot: slot,
                    });
                    batch.leases.push(lease);
                }
                None => {
                    let next = match renew {
                        true => hold.loss_at(), // in flight elsewhere: watch the deadline only
                        false => hold.next_event(),
                    };
                    // An event in the piggyback window that is not a renewal waits for its
                    // time.
                    if let Some(next) = next {
                        later.push((next.max(at), hold));
                    }
                    last |= at > now;
                }
            }
        }
        state.timers.done(tick, bucket, &mut kept);
        if last {
            break 'buckets;
        }
    }
    for (at, hold) in later {
        state.timers.push(at, &hold);
    }
    state.timers.shed_dead();
    (batch, past_max_hold)
}

/// Renews one batch and records each answer; runs in a task of its own.
async fn renew(shared: Arc<Shared>, batch: Batch) {
    let Batch { due, leases } = batch;
    // Past the latest deadline in the batch every hold in it is lost anyway.
    let bound = leases
        .iter()
        .filter_map(Lease::valid_until)
        .max()
        .unwrap_or_else(|| Instant::now() + IDLE);
    let sent_at = Instant::now();
    tracing::debug!(count = leases.len(), "distlock: renewing");
    let renewal = AssertUnwindSafe(shared.store.lock().renew(&leases)).catch_unwind();
    let results = match tokio::time::timeout_at(bound, renewal).await {
        Ok(Ok(results)) => Ok(results),
        Ok(Err(_panic)) => Err("the backend panicked while renewing"),
        Err(_elapsed) => Err("the store did not answer before the leases ran out"),
    };
    let mut results = match results {
        Ok(results) => results.into_iter().map(Some).collect::<Vec<_>>(),
        Err(why) => {
            tracing::warn!(count = due.len(), why, "distlock: renewal batch failed");
            Vec::new()
        }
    };
    results.resize_with(due.len(), || None);
    let mut settled = Vec::with_capacity(due.len().min(RESCHEDULE_CHUNK));
    // Each lease is dropped beside its hold's settling, while both are in the cache.
    for ((Due { hold, ttl, _slot }, result), lease) in due.into_iter().zip(results).zip(leases) {
        drop(lease);
        let renewal = match result {
            Some(Ok(Some(renewed))) => Renewal::Renewed(renewed),
            Some(Ok(None)) => Renewal::NotOwned,
            Some(Err(error)) => Renewal::Unknown(error.to_string()),
            None => Renewal::Unknown("the renewal got no answer".to_owned()),
        };
        hold.settle(sent_at, ttl, renewal);
        drop(_slot);
        settled.push(hold);
        if settled.len() == RESCHEDULE_CHUNK {
            shared.reschedule_settled(&mut settled);
        }
    }
    shared.reschedule_settled(&mut settled);
}

/// Applies a session change to every session-bound hold (`None`: the backend dropped its
/// session channel, so all its sessions are over).
fn follow_session(shared: &Shared, session: Option<Session>) {
    let mut state = shared.lock_state();
    let State { holds, timers, .. } = &mut *state;
    holds.retain(|_, hold| {
        let Some(epoch) = hold.lease().session_epoch() else {
            return true;
        };
        let over = match session {
            Some(session) => apply_session(hold, epoch, session),
            None => {
                hold.lose(LossReason::SessionExpired);
                true
            }
        };
        if over {
            timers.forget(hold); // as `State::forget` does
        }
        !over
    });
}

/// Brings a session-bound hold in line with its session; returns whether the hold is over.
fn apply_session(hold: &Hold, epoch: u64, session: Session) -> bool {
    if !session.keeps(epoch) {
        hold.lose(LossReason::SessionExpired);
        return true;
    }
    hold.set_suspended(session.state == SessionState::Suspended);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DistributedLockExt, LockName, MemoryLock, OwnerToken, TryAcquire};

    /// A hold kept for a long time costs the watchdog the same per renewal as a fresh one:
    /// its timers stay bounded, and twice as many renewals process about twice as many
    /// timer entries (the state mutex, which acquire and drop also take, is held while they
    /// are processed).
    #[tokio::test(start_paused = true)]
    async fn a_long_hold_keeps_a_bounded_timer_heap() {
        let store = Arc::new(MemoryLock::new());
        let watchdog = Watchdog::new(Store::new(store.clone()));
        let ttl = Duration::from_secs(3);
        let name = LockName::new("long").expect("valid");
        let TryAcquire::Acquired(lease) = store
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("memory store works")
        else {
            panic!("the lock is free");
        };
        let hold = Arc::new(Hold::for_test(1, lease, None));
        watchdog.register(hold.clone());
        // A renewal every third of the TTL: 600 renewals per period.
        let mut periods = Vec::new();
        for _ in 0..2 {
            let before = watchdog.shared.lock_state().processed;
            tokio::time::sleep(ttl * 200).await;
            let state = watchdog.shared.lock_state();
            periods.push((state.timers.len(), state.processed - before));
        }
        assert!(hold.is_active(), "renewed all along");
        for (heap, _) in &periods {
            assert!(*heap <= 8, "one hold left {heap} timer entries: {periods:?}");
        }
        let (first, second) = (periods[0].1, periods[1].1);
        assert!(
            second * 10 <= first * 12,
            "the second 600 renewals processed {second} entries, the first {first}"
        );
        drop(hold);
    }

    /// The watchdog's work per renewal period grows with the number of holds, not faster:
    /// four times as many holds, taken over the same time, take about four times as many
    /// steps of the timer per period (entries taken, and the comparisons that ordering them
    /// costs: no scan of every hold per batch, no logarithm of the holds per renewal), and
    /// none is lost.
    #[tokio::test(start_paused = true)]
    async fn four_times_the_holds_cost_four_times_the_work_per_period() {
        let ttl = Duration::from_secs(3);
        let mut work = Vec::new();
        for held in [1_000u64, 4_000] {
            let store = Arc::new(MemoryLock::new());
            let watchdog = Watchdog::new(Store::new(store.clone()));
            let mut holds = Vec::new();
            for id in 0..held {
                let name = LockName::new(format!("entity-{id}")).expect("valid");
                let TryAcquire::Acquired(lease) = store
                    .try_acquire(&name, OwnerToken::new(), ttl)
                    .await
                    .expect("memory store works")
                else {
                    panic!("the lock is free");
                };
                let hold = Arc::new(Hold::for_test(id, lease, None));
                watchdog.register(hold.clone());
                holds.push(hold);
                // Taken over one second, as a service takes them.
                tokio::time::sleep(Duration::from_secs(1) / u32::try_from(held).expect("small")).await;
            }
            tokio::time::sleep(ttl).await;
            let steps = || watchdog.shared.lock_state().processed + COMPARISONS.get();
            let before = steps();
            tokio::time::sleep(ttl).await; // three renewal periods
            let (taken, compared) = (watchdog.shared.lock_state().processed, COMPARISONS.get());
            let active = holds.iter().filter(|h| h.is_active()).count();
            assert_eq!(active as u64, held, "every hold renewed");
            work.push((steps() - before, taken, compared));
            // Its task ends, and takes no more steps while the next size is measured.
            for hold in &holds {
                watchdog.unregister(hold.id);
            }
        }
        let (small, large) = (work[0].0, work[1].0);
        assert!(
            large * 10 <= small * 4 * 11,
            "4,000 holds took {large} timer steps in three periods, 1,000 holds {small} \
             (totals of entries taken and comparisons: {work:?})"
        );
    }

    thread_local! {
        /// Comparisons of timer entries on this thread (each test's watchdog runs on the
        /// test's own current-thread runtime).
        pub(super) static COMPARISONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
}
