//! [`DistributedLockExt`]: conveniences over the [`DistributedLock`] primitives, written once
//! for every backend (tests, tools and status displays use them; backends do not implement
//! them).

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    Attempt, DistributedLock, Lease, LockKind, LockName, LockState, OwnerToken, Primitive, Result, TryAcquire,
};

/// Conveniences over [`DistributedLock`], for every backend (a blanket implementation).
///
/// ```
/// use distlock_core::{DistributedLock, DistributedLockExt, LockName, MemoryLock, OwnerToken, TryAcquire};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> distlock_core::Result<()> {
/// let store = MemoryLock::new();
/// let name = LockName::new("a")?;
/// let TryAcquire::Acquired(lease) = store.try_acquire(&name, OwnerToken::new(), Duration::from_secs(5)).await? else {
///     unreachable!("the lock is free");
/// };
/// assert!(store.extend(&lease, Duration::from_secs(9)).await?.is_some());
/// assert!(store.inspect_lock(&name).await?.is_held());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLockExt: DistributedLock {
    /// One attempt at the mutex `name` ([`DistributedLock::attempt`] without a waiter).
    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<TryAcquire> {
        self.attempt(&Attempt::mutex(name.clone(), owner, ttl)).await
    }

    /// One attempt at a hold of `kind`, with the waiter `(id, stay)` if any
    /// ([`DistributedLock::attempt`]).
    async fn try_acquire_kind(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        let mut attempt = Attempt::new(name.clone(), kind, owner, ttl);
        if let Some((id, stay)) = waiter {
            attempt = attempt.waiting(id, stay);
        }
        self.attempt(&attempt).await
    }

    /// Renews one lease for `ttl` ([`DistributedLock::renew`] of a one-lease batch).
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        let lease = lease.clone().with_ttl(ttl);
        self.renew(std::slice::from_ref(&lease))
            .await
            .pop()
            .unwrap_or_else(|| Err(crate::Error::backend(self.backend(), "no reply for a renewal")))
    }

    /// The mutex `name` as one [`LockState`] ([`DistributedLock::inspect`] of
    /// [`Primitive::Mutex`]): its holder, or free with the last fencing token.
    async fn inspect_lock(&self, name: &LockName) -> Result<LockState> {
        Ok(self.inspect(name, Primitive::Mutex).await?.into_lock())
    }

    /// The live holders of the `primitive` object `name` ([`DistributedLock::inspect`]).
    async fn inspect_holders(&self, name: &LockName, primitive: Primitive) -> Result<Vec<LockState>> {
        Ok(self.inspect(name, primitive).await?.holders)
    }
}

impl<T: DistributedLock + ?Sized> DistributedLockExt for T {}
