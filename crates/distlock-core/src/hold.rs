//! [`Hold`]: the state of one held lock, shared by its guard, its lost-lock signals and the
//! watchdog, and the rules that turn renewal answers into a local deadline.
//!
//! The local deadline is what every "is it still held?" answer rests on. It is derived from
//! the lease (sent time + TTL, minus the backend's validity margin) minus the hold's safety
//! margin, and it is checked against the clock by every reader, so a guard past its deadline
//! is lost whatever the watchdog has managed to record. This module may not talk to the
//! store; it only records what the store answered.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::meter::{HoldMeter, RenewalOutcome};
use crate::{clock, AcquireOptions, Lease, LossReason, Session};

/// Renewals happen when this fraction of the TTL has passed (Redisson renews at a third).
pub(crate) const RENEW_DIVISOR: u32 = 3;
/// [`Hold::timer`] when the watchdog has no live timer entry for the hold.
pub(crate) const NO_TIMER: u64 = u64::MAX;
/// Bounds on the pause before retrying a failed renewal (a tenth of the TTL in between).
const RETRY_MIN: Duration = Duration::from_millis(20);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Where a hold stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Held,
    /// The session that holds the lock is disconnected; the lock may or may not be held.
    Suspended,
    Lost(LossReason),
    /// The guard was released, dropped or leaked: the hold ended on its owner's terms.
    Released,
}

/// What a guard asks of its hold, from [`AcquireOptions`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldOptions {
    pub(crate) auto_renew: bool,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) safety_margin: Option<Duration>,
}

impl From<&AcquireOptions> for HoldOptions {
    fn from(opts: &AcquireOptions) -> Self {
        Self {
            auto_renew: opts.auto_renew_value(),
            max_hold: opts.max_hold_value(),
            safety_margin: opts.explicit_safety_margin(),
        }
    }
}

/// What one renewal round trip came back with.
#[derive(Debug)]
pub(crate) enum Renewal {
    /// The store renewed it; the backend's lease (it may carry a validity margin).
    Renewed(Lease),
    /// The store no longer records us as the owner.
    NotOwned,
    /// No answer, or an error: the renewal may or may not have been applied.
    Unknown(String),
}

/// The state of one hold.
pub(crate) struct Hold {
    pub(crate) id: u64,
    state: Mutex<State>,
    status: watch::Sender<Status>,
    pub(crate) auto_renew: bool,
    pub(crate) max_hold_until: Option<Instant>,
    safety_margin: Option<Duration>,
    /// [`clock::suspended_total`] when the hold began: what it grew since then is time the
    /// store's TTL ran while our clock stood still.
    suspended_at_start: Duration,
    /// One renewal of this hold in flight at a time (watchdog or manual), so that each answer
    /// is the store's latest word on every request sent before it.
    pub(crate) renewing: Arc<tokio::sync::Mutex<()>>,
    /// The watchdog's: the tick of this hold's one live timer entry ([`NO_TIMER`]: none).
    /// Kept here, beside the state the watchdog reads anyway, rather than in a map of every
    /// hold that each renewal would look up again.
    pub(crate) timer: AtomicU64,
    /// The backend's session, for a session-bound lease: its local deadline bounds the hold.
    session: Option<watch::Receiver<Session>>,
    /// Where its renewals and its end are recorded.
    meter: HoldMeter,
}

struct State {
    lease: Lease,
    /// When the watchdog renews next (`None`: it does not).
    renew_at: Option<Instant>,
    /// The shortest TTL among renewals whose outcome is unknown: one of them may still be
    /// applied after any later renewal, so no later deadline may outrun it.
    unsettled_ttl: Option<Duration>,
    /// The last renewal error, reported if the lease runs out.
    last_error: Option<String>,
}

impl Hold {
    pub(crate) fn new(
        id: u64,
        lease: Lease,
        options: HoldOptions,
        session: Option<watch::Receiver<Session>>,
        meter: HoldMeter,
    ) -> Self {
        let session = session.filter(|_| lease.session_epoch().is_some());
        let max_hold_until = options.max_hold.and_then(|d| lease.acquired_at().checked_add(d));
        let renew_at = match (options.auto_renew, lease.valid_until()) {
            (true, Some(until)) => {
                let margin = options
                    .safety_margin
                    .unwrap_or_else(|| AcquireOptions::default_safety_margin(lease.ttl()));
                first_renewal(&lease, until.checked_sub(margin).unwrap_or(lease.acquired_at()))
            }
            _ => None,
        };
        Self {
            id,
            state: Mutex::new(State {
                lease,
                renew_at,
                unsettled_ttl: None,
                last_error: None,
            }),
            status: watch::channel(Status::Held).0,
            auto_renew: options.auto_renew,
            max_hold_until,
            safety_margin: options.safety_margin,
            suspended_at_start: clock::suspended_total(),
            renewing: Arc::default(),
            timer: AtomicU64::new(NO_TIMER),
            session,
            meter,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lease(&self) -> Lease {
        self.state().lease.clone()
    }

    /// The safety margin for a lease of `ttl`.
    pub(crate) fn margin_for(&self, ttl: Duration) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| AcquireOptions::default_safety_margin(ttl))
    }

    /// The instant from which the hold counts as lost unless renewed: the lease's local
    /// deadline minus the safety margin, or for a session-bound lease its session's local
    /// deadline (see [`Session`]); `None` if there is neither.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        deadline_of(&self.state().lease, self)
    }

    /// The first instant at which [`check_lost`](Self::check_lost) can decide the hold is
    /// lost by the clock: its deadline or its maximum hold time, whichever comes first.
    pub(crate) fn loss_at(&self) -> Option<Instant> {
        self.deadline().into_iter().chain(self.max_hold_until).min()
    }

    /// The lease's own local deadline minus the safety margin (`None` for session-bound
    /// leases, whose deadline belongs to the session and moves with each contact).
    pub(crate) fn lease_deadline(&self) -> Option<Instant> {
        lease_deadline_of(&self.state().lease, self)
    }

    /// When the watchdog should renew next.
    pub(crate) fn renew_at(&self) -> Option<Instant> {
        self.state().renew_at
    }

    /// The instant the watchdog must look at this hold, at the latest.
    pub(crate) fn next_event(&self) -> Option<Instant> {
        let state = self.state();
        [
            state.renew_at,
            deadline_of(&state.lease, self),
            self.max_hold_until,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(crate) fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.subscribe()
    }

    /// Why the hold is lost, if it is: the one rule every reader and the watchdog apply. Its
    /// status says so (a renewal found it not ours, its lease watch fired, its session ended:
    /// recorded by the watchdog), or the clock does: its local deadline (the lease's, or its
    /// session's, read from the session itself) or its maximum hold time has passed, whichever
    /// came first decides the reason. A loss by the clock is marked here, whatever the watchdog
    /// has managed to record.
    pub(crate) fn check_lost(&self) -> Option<LossReason> {
        match self.status() {
            Status::Lost(reason) => return Some(reason),
            Status::Released => return None,
            Status::Held | Status::Suspended => {}
        }
        let now = Instant::now();
        let reason = {
            let state = self.state();
            let deadline = deadline_of(&state.lease, self).filter(|t| *t <= now);
            let max_hold = self.max_hold_until.filter(|t| *t <= now);
            match (deadline, max_hold) {
                (None, None) => return None,
                // The maximum hold time came first (or alone): the guard's own limit ended it.
                (_, Some(max_hold)) if deadline.is_none_or(|deadline| max_hold <= deadline) => {
                    LossReason::MaxHoldExceeded
                }
                _ => Self::deadline_reason(&state, self.renewing.try_lock().is_err()),
            }
        };
        self.lose(reason);
        match self.status() {
            Status::Lost(reason) => Some(reason),
            _ => None,
        }
    }

    /// Why a hold whose local deadline passed is lost, by what its renewals met.
    fn deadline_reason(state: &State, renewal_in_flight: bool) -> LossReason {
        match &state.last_error {
            _ if state.lease.session_epoch().is_some() => LossReason::SessionExpired,
            Some(error) => LossReason::RenewalFailed(error.clone()),
            // A renewal still out when the deadline came got no answer in time.
            None if renewal_in_flight => LossReason::RenewalFailed(
                "the store did not answer the renewal before the deadline".to_owned(),
            ),
            None => LossReason::Expired,
        }
    }

    /// Whether the hold is still held (or suspended) and inside its deadline.
    pub(crate) fn is_active(&self) -> bool {
        matches!(self.status(), Status::Held | Status::Suspended) && self.check_lost().is_none()
    }

    /// Records what a renewal sent at `sent_at` for `ttl` came back with.
    pub(crate) fn settle(&self, sent_at: Instant, ttl: Duration, renewal: Renewal) {
        self.meter.renewal(match renewal {
            Renewal::Renewed(_) => RenewalOutcome::Ok,
            Renewal::NotOwned => RenewalOutcome::Lost,
            Renewal::Unknown(_) => RenewalOutcome::Failed,
        });
        let mut state = self.state();
        match renewal {
            Renewal::Renewed(renewed) => {
                // The store's expiry is at least `sent_at + ttl`, unless a renewal with an
                // unknown outcome and a shorter TTL is applied after this one.
                let floor = state.unsettled_ttl.map_or(ttl, |unsettled| unsettled.min(ttl));
                let mut lease = renewed.renewed(ttl, sent_at);
                if let Some(until) = sent_at.checked_add(floor) {
                    lease = lease.capped_at(until);
                }
                // Never later than the backend's own deadline, which may carry a validity
                // margin (Redlock's clock drift).
                if let Some(until) = renewed.valid_until() {
                    lease = lease.capped_at(until);
                }
                state.renew_at = match (self.auto_renew, lease.valid_until()) {
                    (true, Some(_)) => sent_at.checked_add(ttl / RENEW_DIVISOR),
                    _ => None,
                };
                state.lease = lease;
                state.last_error = None;
            }
            Renewal::NotOwned => {
                drop(state);
                tracing::debug!(lock = %self.lease().name(), "distlock: renewal found the lock not ours");
                self.lose(LossReason::NotOwned);
            }
            Renewal::Unknown(error) => {
                state.unsettled_ttl = Some(state.unsettled_ttl.map_or(ttl, |u| u.min(ttl)));
                if let Some(until) = sent_at.checked_add(ttl) {
                    state.lease = state.lease.clone().capped_at(until);
                }
                if self.auto_renew && state.lease.valid_until().is_some() {
                    let retry = (state.lease.ttl() / 10).clamp(RETRY_MIN, RETRY_MAX);
                    state.renew_at = Instant::now().checked_add(retry);
                }
                tracing::debug!(lock = %state.lease.name(), %error, "distlock: renewal failed, retrying");
                state.last_error = Some(error);
            }
        }
    }

    /// Marks the hold suspended (its session is disconnected) or held again.
    pub(crate) fn set_suspended(&self, suspended: bool) {
        let (from, to) = match suspended {
            true => (Status::Held, Status::Suspended),
            false => (Status::Suspended, Status::Held),
        };
        let changed = self.status.send_if_modified(|status| {
            if *status == from {
                *status = to.clone();
                true
            } else {
                false
            }
        });
        if changed {
            tracing::info!(lock = %self.lease().name(), suspended, "distlock: session connection changed");
        }
    }

    /// Marks the hold lost (once; later calls and calls after the end change nothing).
    pub(crate) fn lose(&self, reason: LossReason) {
        let changed = self.status.send_if_modified(|status| {
            if matches!(status, Status::Held | Status::Suspended) {
                *status = Status::Lost(reason.clone());
                true
            } else {
                false
            }
        });
        if changed {
            tracing::warn!(lock = %self.lease().name(), %reason, "distlock: lock lost");
            self.meter.ended(Some(&reason));
        }
    }

    /// Marks the hold ended by its owner (released, dropped or leaked), unless it was lost.
    pub(crate) fn end(&self) {
        let changed = self.status.send_if_modified(|status| {
            if matches!(status, Status::Held | Status::Suspended) {
                *status = Status::Released;
                true
            } else {
                false
            }
        });
        if changed {
            self.meter.ended(None);
        }
    }
}

/// The lease's local deadline less the safety margin, and less any time the host spent
/// suspended since the hold began (the store's TTL ran on meanwhile).
fn deadline_of(lease: &Lease, hold: &Hold) -> Option<Instant> {
    lease_deadline_of(lease, hold).or_else(|| session_deadline_of(lease, hold))
}

fn lease_deadline_of(lease: &Lease, hold: &Hold) -> Option<Instant> {
    let until = lease.valid_until()?;
    let suspended = clock::suspended_total().saturating_sub(hold.suspended_at_start);
    Some(
        until
            .checked_sub(hold.margin_for(lease.ttl()) + suspended)
            .unwrap_or(lease.acquired_at()),
    )
}

/// A session-bound lease's deadline: its session's local deadline (the backend's margin is
/// in it already), less the time the host spent suspended since the hold began (counted in
/// full, though some of it may precede the last contact: the deadline errs early). A session
/// that no longer [keeps](Session::keeps) the lease (it expired, or a newer one replaced it)
/// ended it: the deadline is already past, whether or not the watchdog has seen the change.
fn session_deadline_of(lease: &Lease, hold: &Hold) -> Option<Instant> {
    let epoch = lease.session_epoch()?;
    let session = *hold.session.as_ref()?.borrow();
    if !session.keeps(epoch) {
        return Some(lease.acquired_at());
    }
    let until = session.valid_until?;
    let suspended = clock::suspended_total().saturating_sub(hold.suspended_at_start);
    Some(until.checked_sub(suspended).unwrap_or(lease.acquired_at()))
}

/// When a lease whose hold counts as lost from `deadline` is first renewed: a third of its
/// TTL after it was taken, or at once if that comes no earlier than the deadline (a short
/// claim a store granted ahead of the TTL asked for, as a Redis release that hands a mutex to
/// its waiter: the first renewal lengthens it to the TTL).
fn first_renewal(lease: &Lease, deadline: Instant) -> Option<Instant> {
    let acquired = lease.acquired_at();
    let regular = acquired.checked_add(lease.ttl() / RENEW_DIVISOR)?;
    Some(if regular < deadline { regular } else { acquired })
}

/// A hold as a guard makes it, for unit tests: renewed automatically, no maximum hold time,
/// the default safety margin, metered as a memory backend's mutex.
#[cfg(test)]
impl Hold {
    pub(crate) fn for_test(id: u64, lease: Lease, session: Option<watch::Receiver<Session>>) -> Self {
        let options = HoldOptions {
            auto_renew: true,
            max_hold: None,
            safety_margin: None,
        };
        let meter = crate::meter::Meter::new("memory").hold(lease.name(), crate::LockKind::Exclusive);
        Self::new(id, lease, options, session, meter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockName, OwnerToken};

    #[tokio::test(start_paused = true)]
    async fn time_spent_suspended_counts_against_the_deadline() {
        let name = LockName::new("suspend").expect("valid");
        let lease = Lease::new(name, OwnerToken::new(), Duration::from_secs(30), Instant::now());
        let hold = Hold::for_test(1, lease, None);
        assert!(hold.check_lost().is_none());
        // The host sleeps 40 s: tokio's clock did not move, the store's TTL ran out.
        clock::pretend_suspended(Duration::from_secs(40));
        assert_eq!(hold.check_lost(), Some(LossReason::Expired));
    }

    /// A session-bound lease has no TTL: its deadline is the session's (`valid_until`, 30 s
    /// away here). The host sleeps 40 s: tokio's clock stands still, so the session still
    /// looks valid on it, but the server's session timeout ran on: the hold is lost.
    #[tokio::test(start_paused = true)]
    async fn time_spent_suspended_counts_against_the_session_deadline() {
        let epoch = 1;
        let now = Instant::now();
        let session = crate::Session::connected(epoch).with_valid_until(now + Duration::from_secs(30));
        let (_session_tx, session_rx) = watch::channel(session);
        let name = LockName::new("suspend-session").expect("valid");
        let lease = Lease::session_bound(name, OwnerToken::new(), epoch, now);
        let hold = Hold::for_test(1, lease, Some(session_rx));
        assert!(hold.check_lost().is_none());
        clock::pretend_suspended(Duration::from_secs(40));
        assert_eq!(hold.check_lost(), Some(LossReason::SessionExpired));
    }
}
