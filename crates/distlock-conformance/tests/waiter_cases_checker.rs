//! The case of a wait that ends at the release (c60) is only trusted because it catches a store
//! that strands the lock: here the memory store behind a wrapper that, at a mutex's release,
//! hands the lock to the first waiter that tried (under that attempt's owner token, for a
//! minute) and never takes it back when the wait ends. Without the fault, the same wrapper
//! passes the case.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{run_case, Fixture, Outcome};
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Lease, LockKind, LockName, MemoryLock, ObjectState, OwnerToken,
    Primitive, Result, TryAcquire,
};

#[derive(Debug, Clone)]
struct Stranding {
    store: MemoryLock,
    /// Whether a release hands the lock to the first waiter, never to be given back.
    broken: bool,
    /// The first waiter of each lock: the owner token of its first attempt that found it held.
    first: Arc<Mutex<HashMap<LockName, OwnerToken>>>,
}

impl Stranding {
    fn first(&self) -> std::sync::MutexGuard<'_, HashMap<LockName, OwnerToken>> {
        self.first.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl DistributedLock for Stranding {
    fn backend(&self) -> &'static str {
        "stranding memory"
    }
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let outcome = self.store.attempt(attempt).await?;
        if self.broken && attempt.kind == LockKind::Exclusive && matches!(outcome, TryAcquire::Held(_)) {
            self.first().entry(attempt.name.clone()).or_insert(attempt.owner);
        }
        Ok(outcome)
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let released = self.store.release(lease).await?;
        let waiter = self.first().remove(lease.name());
        if let (true, Some(waiter)) = (released && lease.kind() == LockKind::Exclusive, waiter) {
            let grant = Attempt::mutex(lease.name().clone(), waiter, Duration::from_secs(60));
            // Taken unless another attempt came first (then nothing is stranded).
            let _ = self.store.attempt(&grant).await?;
        }
        Ok(released)
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.store.renew(leases).await
    }
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.store.inspect(name, primitive).await
    }
    async fn ping(&self) -> Result<()> {
        self.store.ping().await
    }
}

#[async_trait]
impl Fixture for Stranding {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.clone()))
    }
    async fn steal(&self, name: &LockName) -> Result<()> {
        self.store.steal(name);
        Ok(())
    }
    async fn held_count(&self, prefix: &str) -> Result<usize> {
        Ok(self.store.held_count(prefix))
    }
}

/// Runs `case` on the memory store, broken or not: whether it passed (a failure is a panic).
async fn passes(case: &'static str, broken: bool) -> bool {
    let fixture = Arc::new(Stranding {
        store: MemoryLock::new(),
        broken,
        first: Arc::default(),
    });
    match tokio::spawn(run_case(case, fixture, None)).await {
        Ok(outcome) => {
            assert_eq!(outcome, Outcome::Passed, "{case} did not run in full");
            true
        }
        Err(error) => {
            assert!(error.is_panic(), "{case}: {error}");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c60_fails_a_store_that_strands_a_lock_handed_to_an_ended_wait() {
    let case = "c60_wait_ended_at_the_release_strands_nothing";
    assert!(passes(case, false).await);
    assert!(
        !passes(case, true).await,
        "{case} passed a store that strands the lock with a waiter whose wait ended"
    );
}
