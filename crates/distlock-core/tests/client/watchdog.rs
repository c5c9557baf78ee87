//! The watchdog's promises that the conformance suite cannot see from outside: renewals of
//! many guards share few calls, and a guard outliving its runtime drops quietly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, AcquireOptions, Attempt, Capabilities, DistributedLock, DistributedLockExt, Lease,
    LockClient, MemoryLock, Result, TryAcquire,
};

/// A memory store that counts renewal calls.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryLock,
    batches: AtomicUsize,
    renewed: AtomicUsize,
}

#[async_trait]
impl DistributedLock for Counting {
    fn backend(&self) -> &'static str {
        "counting"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.inner.attempt(attempt).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.renewed.fetch_add(leases.len(), Ordering::SeqCst);
        self.inner.renew(leases).await
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_of_many_guards_are_batched() {
    let store = Arc::new(Counting::default());
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_secs(3);
    let mut guards = Vec::new();
    for i in 0..200 {
        guards.push(
            client
                .acquire_with(format!("lock-{i}"), &AcquireOptions::new().ttl(ttl))
                .await
                .expect("acquired"),
        );
    }
    // Ten TTLs: each guard needs about 30 renewals.
    tokio::time::sleep(ttl * 10).await;
    let batches = store.batches.load(Ordering::SeqCst);
    let renewed = store.renewed.load(Ordering::SeqCst);
    assert!(guards.iter().all(|g| !g.is_lost()));
    assert!(
        renewed >= 200 * 29,
        "each guard renewed about every TTL/3: {renewed}"
    );
    assert!(
        batches <= 35,
        "200 guards must share renewal calls, got {batches} calls"
    );
    for guard in guards {
        assert!(guard.release().await.expect("released"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_released_guard_is_no_longer_renewed() {
    let store = Arc::new(Counting::default());
    let client = LockClient::from_arc(store.clone());
    let guard = client
        .acquire_with("once", &AcquireOptions::new().ttl(Duration::from_secs(3)))
        .await
        .expect("acquired");
    assert!(guard.release().await.expect("released"));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(store.renewed.load(Ordering::SeqCst), 0);
}

#[test]
fn dropping_a_guard_after_its_runtime_stopped_does_not_panic() {
    let store = MemoryLock::new();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let guard = runtime.block_on(async {
        LockClient::new(store.clone())
            .acquire("orphan")
            .await
            .expect("acquired")
    });
    drop(runtime);
    drop(guard); // nothing to spawn on: the TTL frees the lock
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let held = LockClient::new(store.clone())
            .try_acquire("orphan")
            .await
            .expect("works");
        assert!(held.is_none(), "no release was sent, the lock waits for its TTL");
    });
}

/// A store whose leases carry a validity margin, as Redlock's clock-drift allowance does.
#[derive(Debug, Default)]
struct Margined {
    inner: MemoryLock,
    last_extend: std::sync::Mutex<Option<tokio::time::Instant>>,
}

const MARGIN: Duration = Duration::from_millis(300);

#[async_trait]
impl DistributedLock for Margined {
    fn backend(&self) -> &'static str {
        "margined"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn mechanics(&self) -> distlock_core::Mechanics {
        self.inner.mechanics()
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        Ok(match self.inner.attempt(attempt).await? {
            TryAcquire::Acquired(lease) => TryAcquire::Acquired(lease.with_validity_margin(MARGIN)),
            held => held,
        })
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            *self.last_extend.lock().expect("not poisoned") = Some(tokio::time::Instant::now());
            Ok(self
                .inner
                .extend(&lease, lease.ttl())
                .await?
                .map(|l| l.with_validity_margin(MARGIN)))
        })
        .await
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn renewals_keep_the_backends_validity_margin() {
    let store = Arc::new(Margined::default());
    let client = LockClient::from_arc(store.clone());
    let ttl = Duration::from_secs(3);
    let guard = client
        .acquire_with("margin", &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    for _ in 0..5 {
        tokio::time::sleep(ttl / 2).await;
        let renewed_at = store
            .last_extend
            .lock()
            .expect("not poisoned")
            .expect("renewed by now");
        let until = guard.lease().valid_until().expect("TTL lease");
        assert!(
            until <= renewed_at + ttl - MARGIN,
            "the local deadline lost the margin: {:?} past the renewal",
            until - renewed_at
        );
    }
    assert!(!guard.is_lost());
    assert!(guard.release().await.expect("released"));
}
