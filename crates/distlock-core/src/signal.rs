//! [`LostSignal`]: a hold's lost-lock signal and its end, for work running in other tasks; one
//! signal also watches the holds of a multi-lock's set together.
//!
//! Every answer here checks the hold's local deadline against the clock as well as what the
//! watchdog recorded, so a starved watchdog can delay a renewal but never a "lost".

use std::fmt;
use std::sync::Arc;

use tokio::sync::watch;

use crate::hold::{Hold, Status};
use crate::LossReason;

/// How a hold ended, from [`LostSignal::ended`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldEnd {
    /// Its guard was released, dropped or leaked: the owner is done with it.
    Released,
    /// The lock was lost.
    Lost(LossReason),
}

/// A cloneable handle on a guard's lost-lock signal, for `select!` in another task.
///
/// A [`MultiGuard`](crate::MultiGuard)'s signal watches every lock of its set: the set is lost
/// as soon as one of its locks is.
///
/// It also tells a worker that holds only the signal when the hold ended for any reason
/// ([`ended`](Self::ended)), so a worker stops when its owner returned early.
///
/// ```
/// use distlock_core::{HoldEnd, LockClient, MemoryLock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let client = LockClient::new(MemoryLock::new());
/// let guard = client.acquire("job").await?;
/// let signal = guard.lost_signal();
/// let worker = tokio::spawn(async move {
///     tokio::select! {
///         end = signal.ended() => Some(end),
///         _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => None,
///     }
/// });
/// guard.release().await?;
/// assert_eq!(worker.await.expect("joined"), Some(HoldEnd::Released));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LostSignal {
    /// The holds watched (one, or a multi-lock's set), each with a receiver of its status.
    holds: Vec<(Arc<Hold>, watch::Receiver<Status>)>,
}

impl LostSignal {
    pub(crate) fn new(hold: Arc<Hold>) -> Self {
        Self::of([hold])
    }

    /// The signal of a set of holds: lost when one of them is.
    pub(crate) fn of(holds: impl IntoIterator<Item = Arc<Hold>>) -> Self {
        let holds = holds
            .into_iter()
            .map(|hold| {
                let rx = hold.subscribe();
                (hold, rx)
            })
            .collect();
        Self { holds }
    }

    /// Whether the lock (or one lock of the set) was lost (also true once the lease's local
    /// deadline has passed, even if the watchdog could not run to record it).
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why a hold watched is lost, if one is.
    fn lost_reason(&self) -> Option<LossReason> {
        self.holds.iter().find_map(|(hold, _)| hold.check_lost())
    }

    /// Whether the hold has ended: lost, or its guard released, dropped or leaked.
    pub fn is_ended(&self) -> bool {
        self.is_lost()
            || self
                .holds
                .iter()
                .any(|(hold, _)| hold.status() == Status::Released)
    }

    /// Resolves when the lock is lost (at once if it already was), at the latest at the
    /// lease's local deadline; never after a normal release.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) -> LossReason {
        match self.until(|_| false).await {
            HoldEnd::Lost(reason) => reason,
            HoldEnd::Released => std::future::pending().await,
        }
    }

    /// Resolves when the hold ends, however it ends.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn ended(&self) -> HoldEnd {
        self.until(|status| *status == Status::Released).await
    }

    /// Resolves when the lock is lost or its session is suspended (session-bound backends:
    /// disconnected, so the lock may be gone), with [`LossReason::SessionSuspended`] for a
    /// suspension: the point where work that must never run without the lock stops. It sees
    /// a suspension however briefly it lasts (a reconnection can follow within milliseconds),
    /// which polling [`LockGuard::is_suspended`](crate::LockGuard::is_suspended) may miss.
    ///
    /// ```
    /// use distlock_core::{LockClient, LossReason, MemoryLock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
    /// let client = LockClient::new(MemoryLock::new());
    /// let guard = client.acquire("job").await?;
    /// let signal = guard.lost_signal();
    /// tokio::select! {
    ///     reason = signal.lost_or_suspended() => {
    ///         // Stop writing; with SessionSuspended the lock may come back.
    ///         let _paused = reason == LossReason::SessionSuspended;
    ///     }
    ///     () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {} // the work
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost_or_suspended(&self) -> LossReason {
        match self.until(|status| *status == Status::Suspended).await {
            HoldEnd::Lost(reason) => reason,
            HoldEnd::Released => std::future::pending().await,
        }
    }

    /// Waits until the hold is lost (by status or by the clock) or `stop` holds for its
    /// status; a stop on `Suspended` reports [`LossReason::SessionSuspended`].
    /// A set ends as a whole: lost when one hold is, released when one is (its guard releases
    /// them together).
    async fn until(&self, stop: impl Fn(&Status) -> bool) -> HoldEnd {
        let mut rxs: Vec<_> = self.holds.iter().map(|(_, rx)| rx.clone()).collect();
        loop {
            // Each status is marked seen before the loss check reads it: a loss marked after
            // the mark wakes `changed` below, one marked before is seen by the check.
            let statuses: Vec<Status> = rxs.iter_mut().map(|rx| rx.borrow_and_update().clone()).collect();
            #[cfg(test)]
            tests::between_looks();
            if let Some(reason) = self.lost_reason() {
                return HoldEnd::Lost(reason);
            }
            #[cfg(test)]
            tests::between_looks();
            let mut released = false;
            for status in statuses {
                if stop(&status) {
                    return match status {
                        Status::Suspended => HoldEnd::Lost(LossReason::SessionSuspended),
                        _ => HoldEnd::Released,
                    };
                }
                released |= status == Status::Released;
            }
            if released {
                // Only `ended` stops here; `lost` and `lost_or_suspended` never resolve.
                return HoldEnd::Released;
            }
            // The earliest instant a hold can be lost by the clock (its deadline or maximum hold
            // time; session-bound holds may have neither).
            let deadline = self.holds.iter().filter_map(|(hold, _)| hold.loss_at()).min();
            tokio::select! {
                // The senders live in the holds, which this signal keeps alive.
                () = changed(&mut rxs) => {}
                () = sleep_until(deadline) => {}
            }
        }
    }
}

/// Resolves when one of `rxs` sees a change.
async fn changed(rxs: &mut [watch::Receiver<Status>]) {
    match rxs {
        [] => std::future::pending().await,
        [rx] => {
            let _ = rx.changed().await;
        }
        _ => {
            let changes = rxs.iter_mut().map(|rx| Box::pin(rx.changed()));
            let _ = futures::future::select_all(changes).await;
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl fmt::Debug for LostSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LostSignal")
            .field("lost", &self.is_lost())
            .field("ended", &self.is_ended())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::{Lease, LockName, OwnerToken};

    /// What to run, and how many of the looking points to pass first.
    type Hook = (usize, Box<dyn FnOnce()>);

    thread_local! {
        /// Run once, at the given one of the points where [`LostSignal::until`] has begun to
        /// look at its holds and not yet waited (the first is 0).
        static BETWEEN_LOOKS: RefCell<Option<Hook>> = RefCell::new(None);
    }

    pub(super) fn between_looks() {
        let due = BETWEEN_LOOKS.with(|hook| {
            let mut hook = hook.borrow_mut();
            match hook.as_mut() {
                Some((0, _)) => hook.take().map(|(_, run)| run),
                Some((points, _)) => {
                    *points -= 1;
                    None
                }
                None => None,
            }
        });
        if let Some(run) = due {
            run();
        }
    }

    fn hold(id: u64) -> Arc<Hold> {
        let name = LockName::new("signal").expect("valid");
        let lease = Lease::new(name, OwnerToken::new(), Duration::from_secs(30), Instant::now());
        Arc::new(Hold::for_test(id, lease, None))
    }

    /// The watchdog marks a hold lost from another task at any moment, also while a waiter of
    /// the signal is between its looks at the hold: the waiter must still wake at once, not at
    /// the lease's deadline (30 s away here).
    #[tokio::test(flavor = "current_thread")]
    async fn a_loss_while_the_signal_looks_is_seen() {
        for (point, (stop, wait)) in (0..2)
            .flat_map(|point| [("lost", 0), ("ended", 1), ("lost_or_suspended", 2)].map(|wait| (point, wait)))
        {
            let held = hold(1);
            let signal = LostSignal::new(held.clone());
            BETWEEN_LOOKS.with(|hook| {
                *hook.borrow_mut() = Some((point, Box::new(move || held.lose(LossReason::NotOwned))));
            });
            let end = async {
                match wait {
                    0 => HoldEnd::Lost(signal.lost().await),
                    1 => signal.ended().await,
                    _ => HoldEnd::Lost(signal.lost_or_suspended().await),
                }
            };
            let end = tokio::time::timeout(Duration::from_secs(5), end).await;
            assert_eq!(
                end.ok(),
                Some(HoldEnd::Lost(LossReason::NotOwned)),
                "{stop} at {point}"
            );
            BETWEEN_LOOKS.with(|hook| assert!(hook.borrow().is_none(), "the loss was marked"));
        }
    }
}
