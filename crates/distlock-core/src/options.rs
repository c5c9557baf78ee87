//! [`AcquireOptions`]: TTL, how long to wait, renewal and the maximum hold time.

use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, Result};

/// How long an acquisition may wait for a held lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// One attempt; a held lock is a [`Error::Timeout`] with zero wait (or `Ok(None)` from
    /// `try_acquire`).
    No,
    /// Wait at most this long. `For(Duration::ZERO)` is [`Wait::No`]: one attempt.
    For(Duration),
    /// Wait until the lock is acquired or an error occurs.
    Forever,
}

impl Wait {
    /// The instant the wait ends, or `None` for [`Wait::Forever`].
    pub(crate) fn deadline(self, start: Instant) -> Result<Option<Instant>> {
        match self {
            Self::No => Ok(Some(start)),
            Self::For(d) => start.checked_add(d).map(Some).ok_or_else(|| {
                Error::invalid_options(format!("a wait of {d:?} is too long; use Wait::Forever"))
            }),
            Self::Forever => Ok(None),
        }
    }
}

/// Options for one acquisition. Start from [`AcquireOptions::new`] (the defaults) and change
/// what you need.
///
/// Defaults: TTL 30 s, wait forever, watchdog renewal on, no maximum hold time, polling
/// between 10 ms and 500 ms.
///
/// ```
/// use distlock_core::{AcquireOptions, Wait};
/// use std::time::Duration;
///
/// let opts = AcquireOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Wait::For(Duration::from_secs(3)))
///     .max_hold(Duration::from_secs(600));
/// assert_eq!(opts.ttl_value(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireOptions {
    ttl: Duration,
    wait: Wait,
    auto_renew: bool,
    max_hold: Option<Duration>,
    safety_margin: Option<Duration>,
    poll_min: Duration,
    poll_max: Duration,
    /// The owner token every attempt is made under; `None` for a new one per attempt. Set only
    /// by an upgrade, whose write attempts are its upgradeable read's owner's.
    pub(crate) owner: Option<crate::OwnerToken>,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl AcquireOptions {
    /// The defaults.
    pub const fn new() -> Self {
        Self {
            ttl: Duration::from_secs(30),
            wait: Wait::Forever,
            auto_renew: true,
            max_hold: None,
            safety_margin: None,
            poll_min: Duration::from_millis(10),
            poll_max: Duration::from_millis(500),
            owner: None,
        }
    }

    /// How long the store keeps the lock without a renewal. With renewal on, this bounds how
    /// long a crashed holder blocks others; the watchdog renews at a third of it.
    pub const fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long to wait for a held lock. A wait of zero is one attempt, as [`Wait::No`] (and
    /// is stored as such), never none.
    pub const fn wait(mut self, wait: Wait) -> Self {
        self.wait = match wait {
            Wait::For(d) if d.is_zero() => Wait::No,
            wait => wait,
        };
        self
    }

    /// Shorthand for `wait(Wait::For(d))`.
    pub const fn wait_for(self, d: Duration) -> Self {
        self.wait(Wait::For(d))
    }

    /// Shorthand for `wait(Wait::No)`.
    pub const fn no_wait(self) -> Self {
        self.wait(Wait::No)
    }

    /// Whether the watchdog renews the lock while the guard lives (default on). When off, the
    /// lock frees itself after the TTL and the guard reports it lost at that point.
    pub const fn auto_renew(mut self, on: bool) -> Self {
        self.auto_renew = on;
        self
    }

    /// How long before the lease's local deadline the lost-lock signal fires, so that it leads
    /// the store's expiry even when timers fire late, the scheduler is slow or the clocks run
    /// at slightly different rates. The default is a tenth of the TTL, at most 2 s
    /// ([`default_safety_margin`](Self::default_safety_margin)). It must be shorter than the
    /// TTL, and with renewal on shorter than two thirds of it: the watchdog renews at a third
    /// of the TTL, and the renewal's round trip must end before the local deadline (the TTL
    /// less the margin), so the margin also bounds how long a renewal may take. A longer margin
    /// is refused with [`Error::InvalidOptions`] (it would lose every hold before its first
    /// renewal). Session-bound backends (ZooKeeper) keep their own margin against the session
    /// timeout.
    ///
    /// ```
    /// use distlock_core::AcquireOptions;
    /// use std::time::Duration;
    ///
    /// let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).safety_margin(Duration::from_millis(500));
    /// assert_eq!(opts.safety_margin_value(), Duration::from_millis(500));
    /// assert_eq!(AcquireOptions::new().ttl(Duration::from_secs(10)).safety_margin_value(), Duration::from_secs(1));
    /// ```
    pub const fn safety_margin(mut self, margin: Duration) -> Self {
        self.safety_margin = Some(margin);
        self
    }

    /// The default safety margin for `ttl`: a tenth of it, at most 2 s.
    pub fn default_safety_margin(ttl: Duration) -> Duration {
        (ttl / 10).min(Duration::from_secs(2))
    }

    /// The safety margin in effect for this TTL.
    pub fn safety_margin_value(&self) -> Duration {
        self.margin_for(self.ttl)
    }

    /// The safety margin in effect for a lease of `ttl` (an explicit margin, or the default).
    fn margin_for(&self, ttl: Duration) -> Duration {
        self.safety_margin
            .unwrap_or_else(|| Self::default_safety_margin(ttl))
    }

    /// The margin set with [`safety_margin`](Self::safety_margin), if any.
    pub(crate) const fn explicit_safety_margin(&self) -> Option<Duration> {
        self.safety_margin
    }

    /// The longest the watchdog keeps the lock: after this, it stops renewing and the guard's
    /// lost-lock signal fires ([`LossReason::MaxHoldExceeded`](crate::LossReason)), read from
    /// the clock by every reader as the lease's deadline is (even while the watchdog cannot
    /// run, for example on a blocked runtime); the store
    /// frees the lock at the end of its TTL, and a session-bound lock (ZooKeeper), which has
    /// no TTL, is released by the watchdog. A stuck holder cannot keep a lock forever.
    pub const fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Bounds of the polling backoff used while waiting on backends without notifications
    /// (and, four times `max`, as the safety net of backends with them). The backoff doubles
    /// from `min` to `max` while the same client holds the lock, and starts again from `min`
    /// when a poll finds that the lock changed hands (a new hold is often short). On the
    /// polling stores that can read a lock (MySQL, memcached), a waiter's polls are reads
    /// while the lock stays held; it writes only when a read found the lock free.
    pub const fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.poll_min = min;
        self.poll_max = max;
        self
    }

    /// The TTL.
    pub const fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The wait.
    pub const fn wait_value(&self) -> Wait {
        self.wait
    }

    /// Whether renewal is on.
    pub const fn auto_renew_value(&self) -> bool {
        self.auto_renew
    }

    /// The maximum hold time.
    pub const fn max_hold_value(&self) -> Option<Duration> {
        self.max_hold
    }

    pub(crate) const fn poll_bounds(&self) -> (Duration, Duration) {
        (self.poll_min, self.poll_max)
    }

    /// Checks the options that do not depend on the backend.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_hold.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid_options("max_hold must be greater than zero"));
        }
        if let Some(margin) = self.safety_margin {
            check_safety_margin(margin, self.ttl, self.auto_renew)?;
        }
        if self.poll_min.is_zero() || self.poll_min > self.poll_max {
            return Err(Error::invalid_options(format!(
                "poll_interval needs 0 < min <= max, got {:?}..{:?}",
                self.poll_min, self.poll_max
            )));
        }
        Ok(())
    }
}

/// Checks an explicit safety margin against a lease of `ttl`: shorter than the TTL, and with
/// renewal on, shorter than the time until the first renewal leaves (two thirds of the TTL),
/// since the local deadline (`ttl - margin` after the send) must come after the renewal at
/// `ttl / 3`.
pub(crate) fn check_safety_margin(margin: Duration, ttl: Duration, auto_renew: bool) -> Result<()> {
    if margin >= ttl {
        return Err(Error::invalid_options(format!(
            "the safety margin ({margin:?}) must be shorter than the TTL ({ttl:?})"
        )));
    }
    if auto_renew && ttl - margin <= ttl / crate::hold::RENEW_DIVISOR {
        return Err(Error::invalid_options(format!(
            "the safety margin ({margin:?}) must be shorter than two thirds of the TTL ({ttl:?}): \
             the watchdog renews at a third of the TTL, and the hold would be lost before that"
        )));
    }
    Ok(())
}
