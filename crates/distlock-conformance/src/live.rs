//! [`LiveFixture`]: the suite against a store the user points at (`distlock check`), with no
//! fault hooks: cases that need to steal a lock or stop the store skip those parts.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, Lease, LockKind, LockName, LossReason,
    ObjectState, OwnerToken, Primitive, ReleaseWatch, Result, Session, TryAcquire,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Fixture;

type Opener = Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn DistributedLock>>> + Send + Sync>;

/// A fixture over a live store opened by a function (for example `distlock::open(url)`).
///
/// Every client it opens records the names it acquires, so [`Fixture::held_count`] can ask the
/// store about each of them through [`DistributedLock::inspect`].
#[derive(Clone)]
pub struct LiveFixture {
    open: Opener,
    names: Arc<Mutex<BTreeSet<LockName>>>,
}

impl LiveFixture {
    /// A fixture whose clients come from `open`.
    pub fn new<F, Fut>(open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn DistributedLock>>> + Send + 'static,
    {
        Self {
            open: Arc::new(move || Box::pin(open())),
            names: Arc::default(),
        }
    }
}

#[async_trait]
impl Fixture for LiveFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(Recording {
            inner: (self.open)().await?,
            names: self.names.clone(),
        }))
    }

    async fn steal(&self, _name: &LockName) -> Result<()> {
        Err(Error::NotSupported {
            backend: "live",
            what: "stealing a lock from a live store",
        })
    }

    fn can_steal(&self) -> bool {
        false
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let backend = (self.open)().await?;
        let names: Vec<LockName> = self
            .names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|n| n.as_str().starts_with(prefix))
            .cloned()
            .collect();
        let mut held = 0;
        for name in names {
            if backend.inspect_lock(&name).await?.is_held() {
                held += 1;
            }
        }
        Ok(held)
    }
}

/// A backend that records the names acquired through it.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn DistributedLock>,
    names: Arc<Mutex<BTreeSet<LockName>>>,
}

impl Recording {
    fn record(&self, name: &LockName) {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.clone());
    }
}

#[async_trait]
impl DistributedLock for Recording {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.record(&attempt.name);
        self.inner.attempt(attempt).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }
    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        self.record(lease.name());
        self.inner.hand_over(lease, next, ttl).await
    }
    async fn watch(&self, name: &LockName, primitive: Primitive) -> Result<ReleaseWatch> {
        self.inner.watch(name, primitive).await
    }
    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        self.record(&attempt.name);
        self.inner.wait_queued(attempt, deadline).await
    }
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await
    }
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.inner.inspect(name, primitive).await
    }
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.record(lease.name());
        self.inner.set_note(lease, note).await
    }
    fn session(&self) -> Option<watch::Receiver<Session>> {
        self.inner.session()
    }
    fn watch_lease(&self, lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        self.inner.watch_lease(lease)
    }
    fn store_identity(&self) -> Option<String> {
        self.inner.store_identity()
    }
    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
