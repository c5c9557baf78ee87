//! [`Delaying`]: a backend whose attempts that carry a waiter (those that may queue the waiter
//! or record it on the store) start late, so that a case can cut a wait off while such an
//! attempt is under way, and know when the attempt has ended.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Capabilities, DistributedLock, Lease, LockKind, LockName, LockState, LossReason, OwnerToken, Primitive,
    ReleaseWatch, Result, Session, TryAcquire,
};
use futures::future::BoxFuture;
use tokio::sync::watch;

/// Passes everything to `inner`, but each attempt that carries a waiter waits `delay` first.
/// `started` and `ended` count those attempts.
#[derive(Debug)]
pub(crate) struct Delaying {
    inner: Arc<dyn DistributedLock>,
    delay: Duration,
    started: watch::Sender<usize>,
    ended: watch::Sender<usize>,
}

impl Delaying {
    pub(crate) fn new(inner: Arc<dyn DistributedLock>, delay: Duration) -> Self {
        Self {
            inner,
            delay,
            started: watch::channel(0).0,
            ended: watch::channel(0).0,
        }
    }

    /// How many attempts with a waiter have started.
    pub(crate) fn started(&self) -> watch::Receiver<usize> {
        self.started.subscribe()
    }

    /// How many attempts with a waiter have ended.
    pub(crate) fn ended(&self) -> watch::Receiver<usize> {
        self.ended.subscribe()
    }

    /// Runs `attempt` after the delay, counting it.
    async fn late<T>(&self, attempt: impl std::future::Future<Output = T>) -> T {
        self.started.send_modify(|n| *n += 1);
        tokio::time::sleep(self.delay).await;
        let outcome = attempt.await;
        self.ended.send_modify(|n| *n += 1);
        outcome
    }
}

#[async_trait]
impl DistributedLock for Delaying {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<TryAcquire> {
        self.inner.try_acquire(name, owner, ttl).await
    }

    async fn try_acquire_waiting(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        waiter: &str,
        stay: Duration,
    ) -> Result<TryAcquire> {
        self.late(self.inner.try_acquire_waiting(name, owner, ttl, waiter, stay))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.hand_over(lease, next, ttl).await
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.extend(lease, ttl).await
    }

    async fn extend_many(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.extend_many(leases).await
    }

    async fn watch(&self, name: &LockName) -> Result<ReleaseWatch> {
        self.inner.watch(name).await
    }

    async fn acquire_queued(
        &self,
        name: &LockName,
        owner: OwnerToken,
        ttl: Duration,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Lease>> {
        self.inner.acquire_queued(name, owner, ttl, deadline).await
    }

    async fn try_acquire_kind(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        waiter: Option<(&str, Duration)>,
    ) -> Result<TryAcquire> {
        let attempt = self.inner.try_acquire_kind(name, kind, owner, ttl, waiter);
        match waiter {
            Some(_) => self.late(attempt).await,
            None => attempt.await,
        }
    }

    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await
    }

    async fn watch_kind(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        self.inner.watch_kind(name, primitive).await
    }

    async fn acquire_kind_queued(
        &self,
        name: &LockName,
        kind: LockKind,
        owner: OwnerToken,
        ttl: Duration,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Lease>> {
        self.inner
            .acquire_kind_queued(name, kind, owner, ttl, deadline)
            .await
    }

    async fn inspect_holders(&self, name: &LockName, primitive: Primitive) -> Result<Vec<LockState>> {
        self.inner.inspect_holders(name, primitive).await
    }

    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
    }

    fn session(&self) -> Option<watch::Receiver<Session>> {
        self.inner.session()
    }

    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_lease(lease)
    }

    async fn inspect(&self, name: &LockName) -> Result<LockState> {
        self.inner.inspect(name).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
