//! How long a waiter sleeps between attempts: exponential backoff with jitter for polling
//! backends, a long safety net for notifying ones, and never past the holder's expiry.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rand::Rng;

use crate::{AcquireOptions, Holder};

/// The safety-net factor: notified waiters still re-check every `4 * poll_max`, in case a
/// notification was lost (pub/sub delivers at most once).
const SAFETY_NET_FACTOR: u32 = 4;

pub(crate) struct WaitSchedule {
    backoff: ExponentialBackoff,
    notified: bool,
    min: Duration,
    max: Duration,
    /// The holder last seen (its owner value), when the store said.
    last_owner: Option<String>,
}

impl WaitSchedule {
    pub(crate) fn new(opts: &AcquireOptions, notified: bool) -> Self {
        let (min, max) = opts.poll_bounds();
        Self {
            backoff: backoff(min, max),
            notified,
            min,
            max,
            last_owner: None,
        }
    }

    /// The waiter's notifications stopped: from now on it polls, backing off from the
    /// shortest interval as on a store that never notified.
    pub(crate) fn poll_instead(&mut self) {
        if std::mem::replace(&mut self.notified, false) {
            self.backoff = backoff(self.min, self.max);
        }
    }

    /// The longest sleep [`next`](Self::next) ever returns.
    pub(crate) fn longest(&self) -> Duration {
        if self.notified {
            self.max.saturating_mul(SAFETY_NET_FACTOR)
        } else {
            self.max
        }
    }

    /// The next sleep after an attempt that found `holder`. The backoff starts again from the
    /// shortest sleep when the holder changed since the last attempt that said who held it.
    pub(crate) fn next(&mut self, holder: &Holder) -> Duration {
        if holder.owner.is_some() && holder.owner != self.last_owner {
            if self.last_owner.is_some() {
                self.backoff = backoff(self.min, self.max);
            }
            self.last_owner.clone_from(&holder.owner);
        }
        let base = if self.notified {
            self.longest()
        } else {
            self.backoff.next().unwrap_or(self.max).min(self.max)
        };
        match holder.remaining {
            // Expiry publishes nothing: wake just after it, spread a little so that many
            // waiters do not all retry in the same millisecond.
            Some(remaining) => base.min(remaining + expiry_jitter(remaining)),
            None => base,
        }
    }
}

/// Exponential backoff from `min` to `max`, doubling, with jitter.
fn backoff(min: Duration, max: Duration) -> ExponentialBackoff {
    ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .build()
}

fn expiry_jitter(remaining: Duration) -> Duration {
    let spread_ms = u64::try_from(remaining.as_millis() / 20)
        .unwrap_or(u64::MAX)
        .clamp(1, 50);
    Duration::from_millis(rand::rng().random_range(1..=spread_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_grows_and_stays_within_bounds() {
        let opts = AcquireOptions::new().poll_interval(Duration::from_millis(10), Duration::from_millis(200));
        let mut s = WaitSchedule::new(&opts, false);
        let delays: Vec<_> = (0..20).map(|_| s.next(&Holder::unknown())).collect();
        assert!(
            delays.iter().all(|d| *d <= Duration::from_millis(200)),
            "{delays:?}"
        );
        assert!(delays[19] >= Duration::from_millis(100), "{delays:?}");
    }

    #[test]
    fn a_new_holder_starts_the_backoff_again() {
        let opts = AcquireOptions::new().poll_interval(Duration::from_millis(10), Duration::from_secs(2));
        let mut s = WaitSchedule::new(&opts, false);
        let first = Holder::unknown().with_owner("a");
        let grown: Vec<_> = (0..12).map(|_| s.next(&first)).collect();
        assert!(grown[11] >= Duration::from_secs(1), "{grown:?}");
        let again = s.next(&Holder::unknown().with_owner("b"));
        assert!(again <= Duration::from_millis(20), "{again:?} after {grown:?}");
        let unknown = s.next(&Holder::unknown());
        assert!(
            unknown <= Duration::from_millis(40),
            "an unknown holder is no change: {unknown:?}"
        );
    }

    #[test]
    fn wakes_near_the_holders_expiry() {
        let mut s = WaitSchedule::new(&AcquireOptions::new(), true);
        let d = s.next(&Holder::expiring_in(Duration::from_millis(40)));
        assert!(
            d > Duration::from_millis(40) && d <= Duration::from_millis(45),
            "{d:?}"
        );
        let far = s.next(&Holder::expiring_in(Duration::from_secs(60)));
        assert_eq!(far, Duration::from_secs(2));
    }
}
