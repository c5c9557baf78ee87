//! A lease: the record of one successful acquisition.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{FencingToken, LockKind, LockName, OwnerToken};

/// One successful acquisition of a lock: who holds it, since when, for how long.
///
/// Backends build leases in [`DistributedLock::attempt`](crate::DistributedLock::attempt)
/// and return an updated copy from `extend`. `valid_until` is measured on this machine's
/// monotonic clock from the moment the acquiring request was *sent*, so the local view always
/// ends before the store's.
///
/// ```
/// use distlock_core::{FencingToken, Lease, LockName, OwnerToken};
/// use std::time::Duration;
/// use tokio::time::Instant;
///
/// let lease = Lease::new(LockName::new("job")?, OwnerToken::new(), Duration::from_secs(30), Instant::now())
///     .with_fencing(FencingToken::new(7));
/// assert_eq!(lease.fencing_token(), Some(FencingToken::new(7)));
/// assert!(lease.valid_until().is_some());
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Lease {
    name: LockName,
    owner: OwnerToken,
    fencing: Option<FencingToken>,
    ttl: Duration,
    acquired_at: Instant,
    valid_until: Option<Instant>,
    handle: Option<Arc<str>>,
    session_epoch: Option<u64>,
    kind: LockKind,
}

impl Lease {
    /// A TTL-bound lease whose request was sent at `sent_at`.
    pub fn new(name: LockName, owner: OwnerToken, ttl: Duration, sent_at: Instant) -> Self {
        Self {
            name,
            owner,
            fencing: None,
            ttl,
            acquired_at: sent_at,
            valid_until: sent_at.checked_add(ttl),
            handle: None,
            session_epoch: None,
            kind: LockKind::Exclusive,
        }
    }

    /// A lease bound to the client's session `epoch` with the store (see
    /// [`Session`](crate::Session)): it has no local deadline and lives as long as the session.
    pub fn session_bound(name: LockName, owner: OwnerToken, epoch: u64, sent_at: Instant) -> Self {
        Self {
            valid_until: None,
            session_epoch: Some(epoch),
            ..Self::new(name, owner, Duration::ZERO, sent_at)
        }
    }

    /// Attaches the fencing token the store issued.
    pub fn with_fencing(mut self, token: FencingToken) -> Self {
        self.fencing = Some(token);
        self
    }

    /// Attaches an opaque backend handle (a ZooKeeper node path, a memcached CAS value, ...).
    pub fn with_handle(mut self, handle: impl Into<Arc<str>>) -> Self {
        self.handle = Some(handle.into());
        self
    }

    /// Marks what this lease holds (by default [`LockKind::Exclusive`], the lock of its name):
    /// a permit of a semaphore or a side of a read-write lock. Backends route `release` and
    /// `extend` by it.
    ///
    /// ```
    /// use distlock_core::{Lease, LockKind, LockName, OwnerToken};
    /// use std::time::Duration;
    /// use tokio::time::Instant;
    ///
    /// let lease = Lease::new(LockName::new("exports")?, OwnerToken::new(), Duration::from_secs(30), Instant::now())
    ///     .with_kind(LockKind::permit(4));
    /// assert_eq!(lease.kind(), LockKind::permit(4));
    /// # Ok::<(), distlock_core::Error>(())
    /// ```
    pub fn with_kind(mut self, kind: LockKind) -> Self {
        self.kind = kind;
        self
    }

    /// The same lease, to be renewed for `ttl`: what [`DistributedLock::renew`] asks the store
    /// for (the local deadline stays until the renewal answers).
    ///
    /// [`DistributedLock::renew`]: crate::DistributedLock::renew
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// A copy renewed by a request sent at `sent_at` for `ttl`.
    pub fn renewed(&self, ttl: Duration, sent_at: Instant) -> Self {
        let mut next = self.clone();
        next.ttl = ttl;
        if self.valid_until.is_some() {
            next.valid_until = sent_at.checked_add(ttl);
        }
        next
    }

    /// This lease with its local deadline moved no later than `until` (a renewal whose outcome
    /// is unknown may still shorten the store's expiry).
    pub(crate) fn capped_at(mut self, until: Instant) -> Self {
        self.valid_until = self.valid_until.map(|current| current.min(until));
        self
    }

    /// This lease as far as the client can vouch for it, whatever the backend dated it: taken
    /// no later than `sent_at` (when the request left, or at the latest when its answer came),
    /// and valid no longer than `ttl` (the TTL asked for) from then. The store's expiry cannot
    /// be later, so neither may the local deadline be.
    pub(crate) fn bounded_by(mut self, sent_at: Instant, ttl: Duration) -> Self {
        self.acquired_at = self.acquired_at.min(sent_at);
        if self.valid_until.is_some() {
            self.ttl = self.ttl.min(ttl);
            if let Some(until) = sent_at.checked_add(ttl) {
                self = self.capped_at(until);
            }
        }
        self
    }

    /// Shortens the local deadline by `margin` (Redlock's clock-drift allowance).
    pub fn with_validity_margin(mut self, margin: Duration) -> Self {
        self.valid_until = self
            .valid_until
            .map(|until| until.checked_sub(margin).unwrap_or(self.acquired_at));
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// What this lease holds: the lock of its name, a permit, a read or the write lock.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The owner token stored as the lock's value.
    pub fn owner(&self) -> OwnerToken {
        self.owner
    }

    /// The fencing token of this acquisition, if the backend issues them.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing
    }

    /// The TTL most recently set on the store.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// When the acquiring request was sent.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// The local deadline after which the lease must be treated as gone unless renewed, or
    /// `None` for session-bound leases.
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// How long the lease is still valid from now (`None` for session-bound leases).
    pub fn remaining(&self) -> Option<Duration> {
        self.valid_until
            .map(|until| until.saturating_duration_since(Instant::now()))
    }

    /// The session this lease is bound to, for session-bound backends.
    pub fn session_epoch(&self) -> Option<u64> {
        self.session_epoch
    }

    /// The backend's opaque handle, if it attached one.
    pub fn handle(&self) -> Option<&str> {
        self.handle.as_deref()
    }
}
