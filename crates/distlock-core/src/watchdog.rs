//! The watchdog: one task per client renews every held lease of that client, in batches.
//!
//! It owns the renewal schedule and the local deadlines; it may not decide ownership, which
//! only the store's answers do. Guards register when acquired and unregister when released,
//! leaked or dropped. The task starts with the first registration and ends when none is left.
//! All leases due at one wake-up (and any due within a tenth of their TTL) go to the backend
//! in one [`DistributedLock::extend_many`] call, which a backend can pipeline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::guard::Hold;
use crate::{DistributedLock, Lease, LossReason, Session, SessionState};

/// Renewals happen when this fraction of the TTL has passed (Redisson renews at a third).
const RENEW_DIVISOR: u32 = 3;
/// Leases due within `ttl / PIGGYBACK_DIVISOR` ride along with a batch that is due now.
const PIGGYBACK_DIVISOR: u32 = 10;
/// Bounds on the pause before retrying a failed renewal.
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    lock: Arc<dyn DistributedLock>,
    session: Option<watch::Receiver<Session>>,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    entries: HashMap<u64, Entry>,
    /// Lease-loss futures from [`DistributedLock::watch_lease`] not yet picked up by the task.
    new_lease_watches: Vec<(u64, BoxFuture<'static, LossReason>)>,
    task_running: bool,
}

struct Entry {
    hold: Arc<Hold>,
    /// When to renew next (`None`: this hold is not renewed).
    renew_at: Option<Instant>,
    /// The last renewal error, reported if the lease runs out.
    last_error: Option<String>,
}

impl Entry {
    /// The instant this entry must be looked at, at the latest.
    fn next_event(&self, lease: &Lease) -> Option<Instant> {
        [self.renew_at, lease.valid_until(), self.hold.max_hold_until]
            .into_iter()
            .flatten()
            .min()
    }
}

impl Watchdog {
    pub(crate) fn new(lock: Arc<dyn DistributedLock>) -> Self {
        Self {
            shared: Arc::new(Shared {
                session: lock.session(),
                lock,
                state: Mutex::new(State::default()),
                wake: Notify::new(),
            }),
        }
    }

    /// Starts watching a fresh hold. Must run inside a tokio runtime.
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let lease = hold.lease();
        let renew_at = match (hold.auto_renew, lease.valid_until()) {
            (true, Some(_)) => lease.acquired_at().checked_add(lease.ttl() / RENEW_DIVISOR),
            _ => None,
        };
        let entry = Entry {
            hold,
            renew_at,
            last_error: None,
        };
        if entry.next_event(&lease).is_none() && lease.session_epoch().is_none() {
            return; // nothing to renew, no deadline, no session to follow
        }
        let lease_watch = self.shared.lock.watch_lease(&lease);
        let start_task = {
            let mut state = self.shared.lock_state();
            if let Some(lease_watch) = lease_watch {
                state.new_lease_watches.push((entry.hold.id, lease_watch));
            }
            state.entries.insert(entry.hold.id, entry);
            !std::mem::replace(&mut state.task_running, true)
        };
        if start_task {
            tokio::spawn(run(self.shared.clone()));
        } else {
            self.shared.wake.notify_one();
        }
    }

    /// Stops watching a hold (released, leaked or dropped).
    pub(crate) fn unregister(&self, id: u64) {
        self.shared.lock_state().entries.remove(&id);
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn run(shared: Arc<Shared>) {
    let mut session = shared.session.clone();
    let mut lease_watches = FuturesUnordered::new();
    loop {
        let current = session.as_ref().map(|rx| *rx.borrow());
        let plan = {
            let mut state = shared.lock_state();
            if state.entries.is_empty() {
                state.task_running = false;
                state.new_lease_watches.clear();
                return;
            }
            for (id, lost) in state.new_lease_watches.drain(..) {
                lease_watches.push(async move { (id, lost.await) });
            }
            plan(&state, Instant::now(), current)
        };
        match plan {
            Plan::Sleep(until) => {
                let session_changed = async {
                    match session.as_mut() {
                        Some(rx) => rx.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = shared.wake.notified() => {}
                    Some((id, reason)) = lease_watches.next(), if !lease_watches.is_empty() => {
                        if let Some(entry) = shared.lock_state().entries.remove(&id) {
                            entry.hold.lose(reason);
                        }
                    }
                    alive = session_changed => {
                        if !alive {
                            // The backend is gone: its sessions are over.
                            session = None;
                            expire_all_sessions(&shared);
                        }
                    }
                }
            }
            Plan::Work { expire, renew } => {
                expire_holds(&shared, &expire);
                if !renew.is_empty() {
                    renew_holds(&shared, renew).await;
                }
            }
        }
    }
}

enum Plan {
    Sleep(Instant),
    Work {
        /// Holds whose deadline (lease or maximum hold) has come or whose session ended.
        expire: Vec<u64>,
        /// Holds to renew now.
        renew: Vec<(u64, Lease)>,
    },
}

fn plan(state: &State, now: Instant, session: Option<Session>) -> Plan {
    let mut expire = Vec::new();
    let mut due = Vec::new();
    let mut soon = Vec::new();
    let mut next = None::<Instant>;
    for (&id, entry) in &state.entries {
        let lease = entry.hold.lease();
        let session_ended = match (lease.session_epoch(), session) {
            (Some(epoch), Some(session)) => {
                entry.hold.set_suspended(session.state == SessionState::Suspended);
                !session.keeps(epoch)
            }
            _ => false,
        };
        let deadline_passed = session_ended
            || lease.valid_until().is_some_and(|t| t <= now)
            || entry.hold.max_hold_until.is_some_and(|t| t <= now)
            || !entry.hold.is_held();
        if deadline_passed {
            expire.push(id);
            continue;
        }
        if let Some(renew_at) = entry.renew_at {
            if renew_at <= now {
                due.push((id, lease.clone()));
            } else if renew_at <= now + lease.ttl() / PIGGYBACK_DIVISOR {
                soon.push((id, lease.clone()));
            }
        }
        next = next.into_iter().chain(entry.next_event(&lease)).min();
    }
    if expire.is_empty() && due.is_empty() {
        return Plan::Sleep(next.unwrap_or(now + Duration::from_secs(3600)));
    }
    if !due.is_empty() {
        due.extend(soon);
    }
    Plan::Work { expire, renew: due }
}

/// Every session-bound hold is lost (the backend dropped its session channel).
fn expire_all_sessions(shared: &Shared) {
    let mut state = shared.lock_state();
    state.entries.retain(|_, entry| {
        if entry.hold.lease().session_epoch().is_some() {
            entry.hold.lose(LossReason::SessionExpired);
            false
        } else {
            true
        }
    });
}

fn expire_holds(shared: &Shared, ids: &[u64]) {
    let now = Instant::now();
    let session = shared.session.as_ref().map(|rx| *rx.borrow());
    let mut state = shared.lock_state();
    for id in ids {
        let Some(entry) = state.entries.remove(id) else {
            continue;
        };
        let hold = entry.hold;
        if !hold.is_held() {
            continue;
        }
        if let (Some(epoch), Some(session)) = (hold.lease().session_epoch(), session) {
            if !session.keeps(epoch) {
                hold.lose(LossReason::SessionExpired);
                continue;
            }
        }
        if hold.max_hold_until.is_some_and(|t| t <= now) {
            tracing::info!(lock = %hold.lease().name(), "distlock: maximum hold time reached, renewal stops");
            hold.lose(LossReason::MaxHoldExceeded);
            continue;
        }
        let reason = match entry.last_error {
            Some(error) => LossReason::RenewalFailed(error),
            None => LossReason::Expired,
        };
        hold.lose(reason);
    }
}

async fn renew_holds(shared: &Shared, batch: Vec<(u64, Lease)>) {
    let (ids, leases): (Vec<u64>, Vec<Lease>) = batch.into_iter().unzip();
    // Never wait on the store past the earliest local deadline in the batch: the lost-lock
    // signal must fire on time even if the store hangs.
    let deadline = leases
        .iter()
        .filter_map(Lease::valid_until)
        .min()
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
    let sent_at = Instant::now();
    tracing::debug!(count = leases.len(), "distlock: renewing");
    let results = tokio::time::timeout_at(deadline, shared.lock.extend_many(&leases)).await;
    let now = Instant::now();
    let mut state = shared.lock_state();
    for (i, (id, lease)) in ids.into_iter().zip(&leases).enumerate() {
        let Some(entry) = state.entries.get_mut(&id) else {
            continue;
        }; // released meanwhile
        let result = match &results {
            Ok(results) => results.get(i).map(|r| r.as_ref().map_err(ToString::to_string)),
            Err(_) => Some(Err("the store did not answer before the lease ran out".to_owned())),
        };
        match result {
            Some(Ok(Some(renewed))) => {
                let ttl = renewed.ttl();
                // Measured from when the batch was sent, but never later than the backend's
                // own deadline, which may carry a validity margin (Redlock's clock drift).
                let local = renewed.renewed(ttl, sent_at);
                entry
                    .hold
                    .set_lease(if renewed.valid_until() < local.valid_until() {
                        renewed.clone()
                    } else {
                        local
                    });
                entry.renew_at = sent_at.checked_add(ttl / RENEW_DIVISOR);
                entry.last_error = None;
            }
            Some(Ok(None)) => {
                tracing::debug!(lock = %lease.name(), "distlock: renewal found the lock not ours");
                let entry = state.entries.remove(&id);
                if let Some(entry) = entry {
                    entry.hold.lose(LossReason::NotOwned);
                }
            }
            Some(Err(error)) => {
                tracing::debug!(lock = %lease.name(), %error, "distlock: renewal failed, retrying");
                let retry = (lease.ttl() / PIGGYBACK_DIVISOR).clamp(RETRY_MIN, RETRY_MAX);
                entry.renew_at = now.checked_add(retry);
                entry.last_error = Some(error);
            }
            None => {
                entry.renew_at = now.checked_add(RETRY_MIN);
                entry.last_error = Some("the backend returned too few renewal results".to_owned());
            }
        }
    }
}
