//! A waiter whose release notifications stop (the backend closed its subscription, for
//! example when its connection broke) polls from the shortest interval, as on a polling
//! store, not on the notified schedule's long safety net, and keeps its wake-one id.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, Fencing, Lease,
    LockClient, LockName, MemoryLock, Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};
use tokio::sync::watch;

/// The memory store behind a wake-one notifier whose subscriptions are closed at once.
#[derive(Debug, Default)]
struct Closing {
    inner: MemoryLock,
    attempts: AtomicUsize,
    /// The waiter id each attempt carried.
    waiter_ids: Mutex<Vec<Option<String>>>,
}

impl Closing {
    fn attempted(&self, waiter: Option<&str>) {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.waiter_ids
            .lock()
            .expect("not poisoned")
            .push(waiter.map(str::to_owned));
    }
}

#[async_trait]
impl DistributedLock for Closing {
    fn backend(&self) -> &'static str {
        "closing"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, WakeUp::Notification)
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.attempted(attempt.waiter_parts().map(|(id, _)| id));
        self.inner
            .try_acquire(&attempt.name, attempt.owner, attempt.ttl)
            .await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }
    async fn watch(&self, _name: &LockName, _primitive: Primitive) -> Result<ReleaseWatch> {
        let (tx, rx) = watch::channel(0);
        drop(tx); // the subscription is gone before the waiter first waits on it
        Ok(ReleaseWatch::for_waiter(rx, (), "waiter-1"))
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_watch_falls_back_to_polling_with_its_waiter_id() {
    let store = std::sync::Arc::new(Closing::default());
    let client = LockClient::from_arc(store.clone());
    let held = AcquireOptions::new().ttl(Duration::from_secs(60));
    let _holder = client.acquire_with("busy", &held).await.expect("acquired");
    store.attempts.store(0, Ordering::SeqCst);
    store.waiter_ids.lock().expect("not poisoned").clear();
    let waiting = AcquireOptions::new()
        .wait_for(Duration::from_secs(5))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(500));
    match client.acquire_with("busy", &waiting).await {
        Err(Error::Timeout { .. }) => {}
        other => panic!("the lock stays held: {other:?}"),
    }
    // Backing off from 10 ms to 500 ms makes about 15 attempts in 5 s; the notified
    // schedule's safety net (2 s) about 4.
    let attempts = store.attempts.load(Ordering::SeqCst);
    assert!(
        attempts >= 10,
        "{attempts} attempts in 5 s: not polling from poll_min"
    );
    let ids = store.waiter_ids.lock().expect("not poisoned").clone();
    assert!(
        ids.iter().skip(1).all(|id| id.as_deref() == Some("waiter-1")),
        "attempts after the first must carry the waiter id: {ids:?}"
    );
}
