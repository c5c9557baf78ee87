//! The cases of weighted permits (c54), upgradeable reads (c55) and leader election (c56) are
//! only trusted because they catch a store that breaks what they check: here the memory store
//! behind a wrapper that, one fault at a time, counts every weighted hold as one permit,
//! grants an upgradeable read as a plain read, or gives every candidate a mutex of its own
//! (two leaders at once). Without a fault, the same wrapper passes every case.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_conformance::{run_case, Fixture, Outcome};
use distlock_core::{
    Attempt, Capabilities, DistributedLock, Lease, LockKind, LockName, MemoryLock, ObjectState, Primitive,
    Result, TryAcquire,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Every hold of several permits takes one.
    OnePermitEach,
    /// An upgradeable read is granted as a plain read (two at once, a writer beside it).
    PlainUpgradeable,
    /// Each owner takes a mutex of its own name: every candidate leads at once.
    EveryoneLeads,
}

#[derive(Debug, Clone)]
struct Broken {
    store: MemoryLock,
    fault: Fault,
}

#[async_trait]
impl DistributedLock for Broken {
    fn backend(&self) -> &'static str {
        "broken memory"
    }
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        let mut attempt = attempt.clone();
        match (self.fault, attempt.kind) {
            (Fault::OnePermitEach, LockKind::Permit { permits, .. }) => {
                attempt.kind = LockKind::permit(permits);
            }
            (Fault::PlainUpgradeable, LockKind::UpgradeableRead) => {
                // Held as a plain read, but the lease says what was asked for.
                attempt.kind = LockKind::Read;
                return Ok(match self.store.attempt(&attempt).await? {
                    TryAcquire::Acquired(lease) => {
                        TryAcquire::Acquired(lease.with_kind(LockKind::UpgradeableRead))
                    }
                    held => held,
                });
            }
            (Fault::EveryoneLeads, LockKind::Exclusive) => {
                attempt.name = LockName::new(format!("{}-{}", attempt.name.as_str(), attempt.owner))?;
            }
            _ => {}
        }
        self.store.attempt(&attempt).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.store.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.store.renew(leases).await
    }
    async fn set_note(&self, lease: &Lease, note: &str) -> Result<bool> {
        self.store.set_note(lease, note).await
    }
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.store.inspect(name, primitive).await
    }
    async fn ping(&self) -> Result<()> {
        self.store.ping().await
    }
}

#[async_trait]
impl Fixture for Broken {
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

/// Runs `case` on the memory store with `fault`: whether it passed (a failure is a panic).
async fn passes(case: &'static str, fault: Fault) -> bool {
    let fixture = Arc::new(Broken {
        store: MemoryLock::new(),
        fault,
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
async fn c54_fails_a_store_that_counts_holds_instead_of_weights() {
    let case = "c54_weighted_permits_never_over_admit";
    assert!(passes(case, Fault::None).await);
    assert!(
        !passes(case, Fault::OnePermitEach).await,
        "{case} passed an over-admitting store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c55_fails_a_store_whose_upgradeable_read_is_a_plain_read() {
    let case = "c55_upgradeable_read_excludes_writers_until_released";
    assert!(passes(case, Fault::None).await);
    assert!(
        !passes(case, Fault::PlainUpgradeable).await,
        "{case} passed a plain read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c56_fails_a_store_with_two_leaders_at_once() {
    let case = "c56_one_leader_at_a_time";
    assert!(passes(case, Fault::None).await);
    assert!(
        !passes(case, Fault::EveryoneLeads).await,
        "{case} passed two leaders at once"
    );
}
