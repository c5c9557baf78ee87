//! What one acquisition attempt asks of a store ([`Attempt`]) and what it learns
//! ([`TryAcquire`], [`Holder`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Lease, LockKind, LockName, OwnerToken};

/// One attempt at a hold, as [`DistributedLock::attempt`](crate::DistributedLock::attempt) and
/// [`DistributedLock::wait_queued`](crate::DistributedLock::wait_queued) receive it: the mutex,
/// a permit, a read or the write lock of `name`, for `owner`, with `ttl` (already validated
/// against [`Capabilities::validate_ttl`](crate::Capabilities::validate_ttl); session backends
/// ignore it), and the waiter it records or queues if the caller will wait and try again.
///
/// ```
/// use distlock_core::{Attempt, LockKind, LockName, OwnerToken};
/// use std::time::Duration;
///
/// let name = LockName::new("pool")?;
/// let attempt = Attempt::new(name, LockKind::permit(3), OwnerToken::new(), Duration::from_secs(5))
///     .waiting("w-1", Duration::from_secs(2));
/// assert_eq!(attempt.waiter_parts(), Some(("w-1", Duration::from_secs(2))));
/// # Ok::<(), distlock_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Attempt {
    /// The lock, semaphore or read-write lock to take.
    pub name: LockName,
    /// What to take of it.
    pub kind: LockKind,
    /// The owner token the hold is stored under (new for every attempt).
    pub owner: OwnerToken,
    /// The TTL of the hold.
    pub ttl: Duration,
    /// The waiter behind the attempt, when the caller will wait and try again.
    pub waiter: Option<WaiterRecord>,
}

/// A waiter that the store may record or queue on a failed attempt (see
/// [`DistributedLock::attempt`](crate::DistributedLock::attempt)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaiterRecord {
    /// The waiter's id: the one its [`ReleaseWatch::waiter`](crate::ReleaseWatch::waiter)
    /// carries, or one of its own.
    pub id: Arc<str>,
    /// How long the record lives unless the waiter's next attempt renews it.
    pub stay: Duration,
}

impl Attempt {
    /// An attempt at a hold of `kind` with no waiter behind it.
    pub fn new(name: LockName, kind: LockKind, owner: OwnerToken, ttl: Duration) -> Self {
        Self {
            name,
            kind,
            owner,
            ttl,
            waiter: None,
        }
    }

    /// An attempt at the mutex `name`.
    pub fn mutex(name: LockName, owner: OwnerToken, ttl: Duration) -> Self {
        Self::new(name, LockKind::Exclusive, owner, ttl)
    }

    /// The same attempt by the waiter `id`, whose record lives for `stay`.
    pub fn waiting(mut self, id: impl AsRef<str>, stay: Duration) -> Self {
        self.waiter = Some(WaiterRecord {
            id: Arc::from(id.as_ref()),
            stay,
        });
        self
    }

    /// The waiter's id and stay, if there is a waiter.
    pub fn waiter_parts(&self) -> Option<(&str, Duration)> {
        self.waiter.as_ref().map(|w| (&*w.id, w.stay))
    }

    /// The error of a backend that does not offer the attempt's primitive
    /// ([`Error::NotSupported`](crate::Error::NotSupported), naming the primitive).
    pub fn not_supported(&self, backend: &'static str) -> crate::Error {
        crate::Error::NotSupported {
            backend,
            what: match self.kind.primitive() {
                crate::Primitive::Semaphore => "semaphores",
                crate::Primitive::RwLock => "read-write locks",
                crate::Primitive::Mutex => "this kind of hold",
            },
        }
    }

    /// The lease an owner-checked cleanup releases when the attempt's outcome is unknown:
    /// the name, kind and owner, no handle and no fencing token.
    pub fn cleanup_lease(&self, sent_at: Instant) -> Lease {
        Lease::new(self.name.clone(), self.owner, self.ttl, sent_at).with_kind(self.kind)
    }
}

/// The outcome of one acquisition attempt.
#[derive(Debug, Clone)]
#[must_use]
pub enum TryAcquire {
    /// The lock is ours.
    Acquired(Lease),
    /// Someone else holds it.
    Held(Holder),
}

/// What an attempt learned about the current holder of a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Time left until the current hold expires on the store, when the store said; waiters
    /// wake at that point because an expiry publishes nothing.
    pub remaining: Option<Duration>,
    /// The current holder's owner value, when the attempt read it: a waiter that sees it
    /// change knows the lock changed hands, and polls soon again (a new hold is often short).
    pub owner: Option<String>,
}

impl Holder {
    /// A holder whose remaining time is unknown.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// A holder whose hold expires in `remaining`.
    pub fn expiring_in(remaining: Duration) -> Self {
        Self {
            remaining: Some(remaining),
            owner: None,
        }
    }

    /// The same holder, known to be `owner` (the stored owner value).
    ///
    /// ```
    /// use distlock_core::Holder;
    /// use std::time::Duration;
    ///
    /// let holder = Holder::expiring_in(Duration::from_secs(3)).with_owner("7f3a");
    /// assert_eq!(holder.owner.as_deref(), Some("7f3a"));
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}
