//! The race the partition tests judge: after a fault at `from`, when the holder's guard says
//! suspended and lost, against when another client gets the lock.

use std::time::Duration;

use distlock_core::{AcquireOptions, Error, LockClient, LockGuard, LossReason};
use tokio::time::Instant;

/// What happened after the fault, each instant measured from it.
pub struct Race {
    /// When the guard first said suspended or lost, and which (`None`: not within the limit).
    pub suspended: (Duration, Option<LossReason>),
    /// When the guard said lost, and why (`None`: not within the limit).
    pub lost: (Duration, Option<LossReason>),
    /// When the other client got the lock, and its guard.
    pub acquired: (Duration, LockGuard),
}

impl Race {
    /// Panics unless the holder was told lost before the other client got the lock.
    pub fn assert_lost_first(&self) {
        let ((lost_at, reason), (acquired_at, _)) = (&self.lost, &self.acquired);
        assert!(
            reason.is_some() && lost_at < acquired_at,
            "two holders: the other client acquired at +{acquired_at:?}, while the holder's guard \
             said held until +{lost_at:?} ({reason:?})"
        );
    }
}

impl std::fmt::Display for Race {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "holder suspended ({:?}) at +{:?}, lost ({:?}) at +{:?}, the other client acquired at +{:?}",
            self.suspended.1, self.suspended.0, self.lost.1, self.lost.0, self.acquired.0
        )
    }
}

/// Runs the race for `limit` after `from`: watches `guard` while `other` waits for `name`.
/// The other client's own session may end too on a loaded machine (the ensemble's JVMs
/// starved of the leader's confirmations for most of a session timeout): its wait then fails
/// with `Unavailable`, as it should, and it waits again on a new session within the same
/// budget. Panics if it gets no lock within `limit`.
pub async fn race(guard: &LockGuard, other: &LockClient, name: &str, from: Instant, limit: Duration) -> Race {
    let since = |at: Instant| at.duration_since(from);
    let suspended = async {
        let reason = tokio::time::timeout(limit, guard.lost_signal().lost_or_suspended()).await;
        (since(Instant::now()), reason.ok())
    };
    let lost = async {
        let reason = tokio::time::timeout(limit, guard.lost()).await.ok();
        (since(Instant::now()), reason)
    };
    let acquired = async {
        let give_up = from + limit;
        loop {
            let opts = AcquireOptions::new().wait_for(give_up.saturating_duration_since(Instant::now()));
            match other.acquire_with(name, &opts).await {
                Ok(guard) => break (since(Instant::now()), guard),
                Err(e @ Error::Unavailable { .. }) if Instant::now() < give_up => {
                    println!("the other client's wait ended ({e}); it waits again");
                }
                Err(e) => panic!("the other client acquires on the majority side: {e:?}"),
            }
        }
    };
    let (suspended, lost, acquired) = tokio::join!(suspended, lost, acquired);
    Race {
        suspended,
        lost,
        acquired,
    }
}
