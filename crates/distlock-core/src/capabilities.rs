//! What a backend promises its users ([`Capabilities`]), so callers and the conformance suite
//! know what to expect of it. How the client composes its waiting around a backend is not
//! here: see [`Mechanics`](crate::Mechanics).

use std::time::Duration;

/// The promises one backend makes to its users: each field is something a caller may rely on
/// (and the conformance suite checks). Read it with
/// [`DistributedLock::capabilities`](crate::DistributedLock::capabilities).
///
/// Whether a release wakes one waiter or all is not declared here: it is what the backend's
/// [`watch`](crate::DistributedLock::watch) hands out (a notified watch
/// [`for_waiter`](crate::ReleaseWatch::for_waiter) is woken one per release), so the two can
/// never disagree.
///
/// ```
/// use distlock_core::{Capabilities, Expiry, Fencing, WakeUp};
/// use std::time::Duration;
///
/// let caps = Capabilities::new(Fencing::Monotonic, WakeUp::Notification)
///     .with_ttl_granularity(Duration::from_millis(1));
/// assert_eq!(caps.expiry, Expiry::Ttl);
/// assert!(caps.validate_ttl(Duration::ZERO).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Whether fencing tokens strictly increase per name.
    pub fencing: Fencing,
    /// How waiters learn that a lock was released.
    pub wake_up: WakeUp,
    /// Whether waiters are served in arrival order.
    pub fairness: Fairness,
    /// What keeps a lock alive: a TTL that must be renewed, or the client's session.
    pub expiry: Expiry,
    /// The smallest TTL step the store keeps; TTLs are rounded up to a multiple of it.
    pub ttl_granularity: Duration,
    /// The shortest TTL the backend accepts.
    pub min_ttl: Duration,
    /// The longest TTL the backend accepts.
    pub max_ttl: Duration,
    /// Whether locks exclude clients in other processes (false only for the memory backend).
    pub cross_process: bool,
    /// Whether [`DistributedLock::inspect`](crate::DistributedLock::inspect) works.
    pub inspect: bool,
    /// Whether the backend offers counting semaphores
    /// ([`LockClient::semaphore`](crate::LockClient::semaphore)).
    pub semaphores: bool,
    /// Whether the backend offers read-write locks
    /// ([`LockClient::rw_lock`](crate::LockClient::rw_lock)).
    pub rw_locks: bool,
    /// Whether a semaphore hold may take several permits at once
    /// ([`Semaphore::acquire_many`](crate::Semaphore::acquire_many)).
    pub weighted_permits: bool,
    /// Whether read-write locks offer the upgradeable read
    /// ([`RwLock::upgradeable_read`](crate::RwLock::upgradeable_read)).
    pub upgradeable_reads: bool,
    /// Whether a mutex holder can leave a note beside its hold that others read
    /// ([`DistributedLock::set_note`](crate::DistributedLock::set_note)): what leader election
    /// ([`LockClient::election`](crate::LockClient::election)) needs.
    pub notes: bool,
}

impl Capabilities {
    /// TTL-based locks with millisecond granularity, TTLs from 1 ms to 30 days, no FIFO.
    pub const fn new(fencing: Fencing, wake_up: WakeUp) -> Self {
        Self {
            fencing,
            wake_up,
            fairness: Fairness::None,
            expiry: Expiry::Ttl,
            ttl_granularity: Duration::from_millis(1),
            min_ttl: Duration::from_millis(1),
            max_ttl: Duration::from_secs(30 * 24 * 3600),
            cross_process: true,
            inspect: true,
            semaphores: false,
            rw_locks: false,
            weighted_permits: false,
            upgradeable_reads: false,
            notes: false,
        }
    }

    /// Sets [`Capabilities::fairness`].
    pub const fn with_fairness(mut self, fairness: Fairness) -> Self {
        self.fairness = fairness;
        self
    }

    /// Sets [`Capabilities::expiry`].
    pub const fn with_expiry(mut self, expiry: Expiry) -> Self {
        self.expiry = expiry;
        self
    }

    /// Sets [`Capabilities::ttl_granularity`] (and raises `min_ttl` to at least it).
    pub const fn with_ttl_granularity(mut self, granularity: Duration) -> Self {
        self.ttl_granularity = granularity;
        if self.min_ttl.as_nanos() < granularity.as_nanos() {
            self.min_ttl = granularity;
        }
        self
    }

    /// Sets the accepted TTL range.
    pub const fn with_ttl_range(mut self, min: Duration, max: Duration) -> Self {
        self.min_ttl = min;
        self.max_ttl = max;
        self
    }

    /// Sets [`Capabilities::cross_process`].
    pub const fn with_cross_process(mut self, cross_process: bool) -> Self {
        self.cross_process = cross_process;
        self
    }

    /// Sets [`Capabilities::inspect`].
    pub const fn with_inspect(mut self, inspect: bool) -> Self {
        self.inspect = inspect;
        self
    }

    /// Sets [`Capabilities::semaphores`] and [`Capabilities::rw_locks`].
    pub const fn with_primitives(mut self, semaphores: bool, rw_locks: bool) -> Self {
        self.semaphores = semaphores;
        self.rw_locks = rw_locks;
        self
    }

    /// Sets [`Capabilities::weighted_permits`] and [`Capabilities::upgradeable_reads`].
    pub const fn with_weights_and_upgrades(
        mut self,
        weighted_permits: bool,
        upgradeable_reads: bool,
    ) -> Self {
        self.weighted_permits = weighted_permits;
        self.upgradeable_reads = upgradeable_reads;
        self
    }

    /// Sets [`Capabilities::notes`].
    pub const fn with_notes(mut self, notes: bool) -> Self {
        self.notes = notes;
        self
    }

    /// Whether the backend offers `primitive` (the mutex always).
    pub const fn offers(&self, primitive: crate::Primitive) -> bool {
        match primitive {
            crate::Primitive::Mutex => true,
            crate::Primitive::Semaphore => self.semaphores,
            crate::Primitive::RwLock => self.rw_locks,
        }
    }

    /// Checks a TTL against this backend's range and rounds it up to the granularity.
    ///
    /// # Errors
    /// [`Error::InvalidOptions`](crate::Error::InvalidOptions) for a zero TTL or one outside
    /// `min_ttl..=max_ttl`.
    pub fn validate_ttl(&self, ttl: Duration) -> crate::Result<Duration> {
        if ttl.is_zero() {
            return Err(crate::Error::invalid_options("the TTL must be greater than zero"));
        }
        let rounded = round_up(ttl, self.ttl_granularity);
        if rounded < self.min_ttl || rounded > self.max_ttl {
            return Err(crate::Error::invalid_options(format!(
                "a TTL of {ttl:?} is outside what this backend accepts ({:?} to {:?})",
                self.min_ttl, self.max_ttl
            )));
        }
        Ok(rounded)
    }
}

fn round_up(value: Duration, step: Duration) -> Duration {
    let step_ns = step.as_nanos();
    if step_ns <= 1 {
        return value;
    }
    let steps = value.as_nanos().div_ceil(step_ns);
    let total = steps.saturating_mul(step_ns);
    let secs = u64::try_from(total / 1_000_000_000).unwrap_or(u64::MAX);
    // `total % 1e9` is below 1e9, so it fits in u32.
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Duration::new(secs, nanos)
}

/// Whether a backend's fencing tokens can be relied on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fencing {
    /// Every acquisition of a name gets a token greater than every earlier one, always.
    Monotonic,
    /// Tokens increase while the store keeps its state, but a restart, failover or eviction
    /// can make them go back (memcached, Redis without persistence, Redlock).
    BestEffort,
    /// No tokens are issued.
    None,
}

/// How a waiter learns that the lock it wants was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WakeUp {
    /// The store notifies waiters on release; polling is only a safety net.
    Notification,
    /// Waiters poll with backoff and jitter, waking early at the holder's expiry when known.
    Polling,
}

/// Whether waiters are served in the order they arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fairness {
    /// First come, first served.
    Fifo,
    /// Any waiter may win.
    None,
}

/// What keeps a held lock alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expiry {
    /// A TTL on the store; the guard's watchdog renews it.
    Ttl,
    /// The client's session with the store (ZooKeeper): no renewal, lost when the session ends.
    Session,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_granularity() {
        let caps =
            Capabilities::new(Fencing::None, WakeUp::Polling).with_ttl_granularity(Duration::from_secs(1));
        assert_eq!(
            caps.validate_ttl(Duration::from_millis(1500)).ok(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            caps.validate_ttl(Duration::from_millis(1)).ok(),
            Some(Duration::from_secs(1))
        );
        assert!(caps.validate_ttl(Duration::MAX).is_err());
        assert!(caps.validate_ttl(Duration::ZERO).is_err());
    }
}
