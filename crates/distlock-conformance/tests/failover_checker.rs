//! The failover case (c53) is only trusted because it catches a store that loses acknowledged
//! locks: here an in-process store "fails over" either to a perfect replica (it passes) or to
//! an empty one, as an asynchronous replica that received nothing would be (it must fail with
//! two holders).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{run_case, Case, Failover, Fixture, Outcome};
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Lease, LockName, MemoryLock, Result, TryAcquire,
};

/// The store every client of one [`Replicated`] reaches: the primary, then what replaced it.
type Current = Arc<Mutex<MemoryLock>>;

fn current(store: &Current) -> MemoryLock {
    store.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// A client that follows the store to its new primary.
#[derive(Debug)]
struct Follower(Current);

#[async_trait]
impl DistributedLock for Follower {
    fn backend(&self) -> &'static str {
        "replicated memory"
    }
    fn capabilities(&self) -> Capabilities {
        current(&self.0).capabilities()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        current(&self.0).attempt(attempt).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        current(&self.0).release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        current(&self.0).renew(leases).await
    }
    async fn ping(&self) -> Result<()> {
        current(&self.0).ping().await
    }
}

/// A store whose failover promotes a replica with every write (`lossy` false) or none.
struct Replicated {
    current: Current,
    lossy: bool,
}

#[async_trait]
impl Failover for Replicated {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(Follower(self.current.clone())))
    }
    fn ttl(&self) -> Duration {
        Duration::from_secs(3)
    }
    async fn fail_over(&self) -> Result<()> {
        if self.lossy {
            *self.current.lock().unwrap_or_else(PoisonError::into_inner) = MemoryLock::new();
        }
        Ok(())
    }
}

struct ReplicatedFixture {
    lossy: bool,
}

#[async_trait]
impl Fixture for ReplicatedFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(MemoryLock::new()))
    }
    async fn steal(&self, _name: &LockName) -> Result<()> {
        Ok(())
    }
    fn can_steal(&self) -> bool {
        false
    }
    async fn held_count(&self, _prefix: &str) -> Result<usize> {
        Ok(0)
    }
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        Some(Ok(Box::new(Replicated {
            current: Arc::default(),
            lossy: self.lossy,
        })))
    }
}

async fn c53(lossy: bool) -> std::result::Result<Outcome, String> {
    let case = Case::named("c53").expect("the failover case");
    let run = tokio::spawn(run_case(case.name, Arc::new(ReplicatedFixture { lossy }), None));
    run.await.map_err(|e| {
        let panic = e.into_panic();
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c53_passes_a_failover_to_a_replica_with_every_write() {
    assert_eq!(c53(false).await, Ok(Outcome::Passed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c53_fails_a_failover_to_a_replica_that_lost_the_lock() {
    let failure = c53(true).await.expect_err("a lost lock must fail the case");
    assert!(failure.contains("two holders"), "{failure}");
}
