//! [`Store`]: the backend as [`LockClient`](crate::LockClient) calls it, with this process's
//! waiting layer ([`LocalWake`]) composed around the calls that concern waiters.
//!
//! Every attempt, release (a guard's, a dropped guard's, an owner-checked cleanup's),
//! watch and withdrawal of the client goes through here, so that the layer sees them all; the
//! other primitives are called on [`Store::lock`] directly. This module owns the routing only:
//! what the layer does is in `local_wake`.

use std::fmt;
use std::sync::Arc;

use crate::local::Inbox;
use crate::local_wake::LocalWake;
use crate::{
    Attempt, DistributedLock, Lease, LockKind, LockName, Primitive, ReleaseWatch, Result, TryAcquire,
};

/// The backend and, for one that polls and names its store, this process's waiting layer.
/// Cheap to clone; clones share the layer.
#[derive(Clone)]
pub(crate) struct Store {
    lock: Arc<dyn DistributedLock>,
    local: Option<Arc<LocalWake>>,
}

impl Store {
    /// `lock`, with the waiting layer if it polls and names its store.
    pub(crate) fn new(lock: Arc<dyn DistributedLock>) -> Self {
        let local = LocalWake::for_store(&lock);
        Self { lock, local }
    }

    /// `lock` with the waiting layer `local` (one built for it).
    pub(crate) fn with_local(lock: Arc<dyn DistributedLock>, local: Option<Arc<LocalWake>>) -> Self {
        Self { lock, local }
    }

    /// The backend itself.
    pub(crate) fn lock(&self) -> &Arc<dyn DistributedLock> {
        &self.lock
    }

    /// One attempt (see [`LocalWake::attempt`]).
    pub(crate) async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        match &self.local {
            Some(local) => local.attempt(attempt).await,
            None => self.lock.attempt(attempt).await,
        }
    }

    /// An owner-checked release (see [`LocalWake::release`]).
    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        match &self.local {
            Some(local) => local.release(lease).await,
            None => self.lock.release(lease).await,
        }
    }

    /// A waiter's watch, and where a lock handed over to that waiter arrives (see
    /// [`LocalWake::watch`]).
    pub(crate) async fn watch(
        &self,
        name: &LockName,
        primitive: Primitive,
    ) -> Result<(ReleaseWatch, Option<Inbox>)> {
        match &self.local {
            Some(local) => local.watch(name, primitive).await,
            None => Ok((self.lock.watch(name, primitive).await?, None)),
        }
    }

    /// Withdraws a waiter (see [`LocalWake::withdraw`]).
    pub(crate) async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        match &self.local {
            Some(local) => local.withdraw(name, kind, waiter).await,
            None => self.lock.withdraw(name, kind, waiter).await,
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("lock", &self.lock)
            .field("local_wake", &self.local.is_some())
            .finish()
    }
}
