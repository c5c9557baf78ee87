//! The client's paths for queue-based, session-bound backends (ZooKeeper's shape), on a fake
//! backend over the memory store: the queued wait is used and is cancel safe, and session
//! changes drive the guard's suspended and lost states.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    renew_each, AcquireOptions, Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, Expiry,
    Fairness, Fencing, Lease, LockClient, LockName, LossReason, MemoryLock, OwnerToken, Result, Session,
    SessionState, TryAcquire, WakeUp,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug)]
struct Queued {
    store: MemoryLock,
    session: watch::Sender<Session>,
    in_queue: Arc<AtomicUsize>,
    queued_calls: AtomicUsize,
    stolen: watch::Sender<bool>,
    /// The next queued wait is applied on the store, then reports an ambiguous error.
    lose_next_queued_reply: AtomicBool,
    /// The next queued wait is applied on the store, then panics.
    panic_next_queued: AtomicBool,
}

impl Queued {
    fn new() -> Self {
        Self {
            store: MemoryLock::new(),
            session: watch::channel(Session::connected(1)).0,
            in_queue: Arc::new(AtomicUsize::new(0)),
            queued_calls: AtomicUsize::new(0),
            stolen: watch::channel(false).0,
            lose_next_queued_reply: AtomicBool::new(false),
            panic_next_queued: AtomicBool::new(false),
        }
    }

    fn set(&self, epoch: u64, state: SessionState) {
        self.session
            .send_replace(Session::connected(epoch).with_state(state));
    }
}

/// Counts a queue entry while it lives.
struct QueueEntry(Arc<AtomicUsize>);

impl Drop for QueueEntry {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl DistributedLock for Queued {
    fn backend(&self) -> &'static str {
        "queued"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, WakeUp::Notification)
            .with_fairness(Fairness::Fifo)
            .with_expiry(Expiry::Session)
    }
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.try_mutex(&attempt.name, attempt.owner).await
    }
    async fn wait_queued(&self, attempt: &Attempt, deadline: Option<Instant>) -> Result<Option<Lease>> {
        self.queued_calls.fetch_add(1, Ordering::SeqCst);
        self.in_queue.fetch_add(1, Ordering::SeqCst);
        let _entry = QueueEntry(self.in_queue.clone());
        loop {
            if let TryAcquire::Acquired(lease) = self.try_mutex(&attempt.name, attempt.owner).await? {
                if self.lose_next_queued_reply.swap(false, Ordering::SeqCst) {
                    return Err(Error::unavailable("queued", "the reply was lost"));
                }
                if self.panic_next_queued.swap(false, Ordering::SeqCst) {
                    panic!("a backend bug in acquire_queued");
                }
                return Ok(Some(lease));
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.store.release(lease).await
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        renew_each(leases, |lease| async move {
            Ok(self
                .store
                .extend(&lease, Duration::from_secs(3600))
                .await?
                .map(|_| lease.clone()))
        })
        .await
    }
    fn watch_lease(&self, _lease: &Lease) -> Option<BoxFuture<'static, LossReason>> {
        let mut stolen = self.stolen.subscribe();
        Some(Box::pin(async move {
            let _ = stolen.wait_for(|s| *s).await;
            LossReason::NotOwned
        }))
    }
    fn session(&self) -> Option<watch::Receiver<Session>> {
        Some(self.session.subscribe())
    }
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

impl Queued {
    /// One attempt at the mutex, as a session-bound lease of the current session.
    async fn try_mutex(&self, name: &LockName, owner: OwnerToken) -> Result<TryAcquire> {
        let now = Instant::now();
        Ok(
            match self
                .store
                .try_acquire(name, owner, Duration::from_secs(3600))
                .await?
            {
                TryAcquire::Acquired(lease) => {
                    let epoch = self.session.borrow().epoch;
                    let fencing = lease.fencing_token().expect("memory issues tokens");
                    TryAcquire::Acquired(
                        Lease::session_bound(name.clone(), owner, epoch, now).with_fencing(fencing),
                    )
                }
                held => held,
            },
        )
    }
}

#[tokio::test]
async fn waits_use_the_store_queue_and_time_out() {
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("job").await.expect("acquired");
    let waited = client
        .acquire_with("job", &AcquireOptions::new().wait_for(Duration::from_millis(100)))
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    assert_eq!(
        backend.queued_calls.load(Ordering::SeqCst),
        2,
        "both waits went through the queue"
    );
    assert!(client.try_acquire("job").await.expect("works").is_none());
    assert_eq!(
        backend.queued_calls.load(Ordering::SeqCst),
        2,
        "a single attempt does not queue"
    );
    assert!(guard.release().await.expect("released"));
}

#[tokio::test]
async fn a_dropped_queued_wait_leaves_the_queue() {
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("job").await.expect("acquired");
    let cancelled = tokio::time::timeout(Duration::from_millis(50), client.acquire("job")).await;
    assert!(cancelled.is_err());
    tokio::time::timeout(Duration::from_secs(5), async {
        while backend.in_queue.load(Ordering::SeqCst) != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the queue entry is removed once the caller went away");
    assert!(guard.release().await.expect("released"));
    assert!(
        client.try_acquire("job").await.expect("works").is_some(),
        "nothing stranded the lock"
    );
}

#[tokio::test]
async fn session_changes_suspend_and_then_lose_the_guard() {
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("a").await.expect("acquired");
    let other = client.acquire("b").await.expect("acquired");

    backend.set(1, SessionState::Suspended);
    tokio::time::timeout(Duration::from_secs(5), async {
        while !guard.is_suspended() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the guard reports the suspension");
    assert!(!guard.is_lost(), "a suspension is not yet a loss");

    backend.set(1, SessionState::Connected);
    tokio::time::timeout(Duration::from_secs(5), async {
        while guard.is_suspended() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("reconnecting to the same session keeps the lock");
    assert!(!guard.is_lost());

    // A new session: the old session's locks are gone.
    backend.set(2, SessionState::Connected);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LossReason::SessionExpired);
    let reason = tokio::time::timeout(Duration::from_secs(5), other.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LossReason::SessionExpired);

    // A lock taken in the new session survives until that session expires.
    let fresh = client.acquire("c").await.expect("acquired");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!fresh.is_lost());
    backend.set(2, SessionState::Expired);
    let reason = tokio::time::timeout(Duration::from_secs(5), fresh.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LossReason::SessionExpired);
}

#[tokio::test]
async fn a_lease_lost_behind_the_clients_back_fires_the_signal() {
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("watched").await.expect("acquired");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!guard.is_lost());
    backend.stolen.send_replace(true);
    let reason = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LossReason::NotOwned);
}

#[tokio::test]
async fn with_lock_stops_when_the_session_is_suspended() {
    // Curator's rule: a suspended session may have lost the lock already (the server can
    // expire it while we cannot hear), so work that must never run without it stops.
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let suspend = {
        let backend = backend.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            backend.set(1, SessionState::Suspended);
            std::future::pending::<()>().await;
        }
    };
    let opts = AcquireOptions::new();
    let outcome = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::select! {
            outcome = client.with_lock("suspended", &opts, |_| async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }) => outcome,
            _ = suspend => unreachable!(),
        }
    })
    .await
    .expect("with_lock stops on suspension");
    match outcome {
        Err(Error::LockLost { reason, .. }) => assert_eq!(reason, LossReason::SessionSuspended),
        other => panic!("expected LockLost on suspension, got {other:?}"),
    }
}

/// A session's local deadline ([`Session::valid_until`]) bounds its guards by the clock: past
/// it the guard is lost even though no session change was published (the backend, like the
/// rest of the process, may not have run), and moving it forward silently keeps the guard.
#[tokio::test(start_paused = true)]
async fn a_guard_is_lost_at_its_sessions_local_deadline() {
    let backend = Arc::new(Queued::new());
    let publish = |until: Instant| {
        backend.session.send_if_modified(|s| {
            s.valid_until = Some(until);
            false // silently, as a heartbeat does
        });
    };
    publish(Instant::now() + Duration::from_secs(2));
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("deadline").await.expect("acquired");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost());
    // A contact moves the deadline: still held past the first one.
    publish(Instant::now() + Duration::from_secs(2));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!guard.is_lost(), "the deadline moved");
    // No contact any more: lost at the deadline, and the signal fires then.
    let lost = tokio::time::timeout(Duration::from_millis(1100), guard.lost())
        .await
        .expect("the lost signal fires at the session's deadline");
    assert_eq!(lost, LossReason::SessionExpired);
    assert!(guard.is_lost());
}

/// A session that ends under the same epoch while the watchdog cannot run (or between the
/// watchdog reading the session and recording the hold) ends its guards all the same: every
/// reader applies [`Session::keeps`], as the watchdog does, even without a local deadline.
#[tokio::test(start_paused = true)]
async fn a_guard_of_an_expired_session_is_lost_without_the_watchdog() {
    let backend = Arc::new(Queued::new());
    let client = LockClient::from_arc(backend.clone());
    let guard = client.acquire("expired").await.expect("acquired");
    // Published without waking receivers: the watchdog does not run before the checks below.
    backend.session.send_if_modified(|s| {
        s.state = SessionState::Expired;
        false
    });
    assert!(guard.is_lost(), "a guard of an expired session says held");
    let lost = tokio::time::timeout(Duration::from_millis(10), guard.lost())
        .await
        .expect("the lost signal fires at once");
    assert_eq!(lost, LossReason::SessionExpired);
}

/// A queued wait whose outcome is unknown (an ambiguous error, or a backend that panicked
/// after the store applied it) is cleaned up by its owner token: the store does not keep a
/// lock nobody holds until the session ends.
#[tokio::test]
async fn a_queued_wait_whose_outcome_is_unknown_is_cleaned_up_by_owner() {
    for (fault, how) in [(0, "an ambiguous error"), (1, "a panic")] {
        let backend = Arc::new(Queued::new());
        let client = LockClient::from_arc(backend.clone());
        match fault {
            0 => backend.lose_next_queued_reply.store(true, Ordering::SeqCst),
            _ => backend.panic_next_queued.store(true, Ordering::SeqCst),
        }
        let outcome = client
            .acquire_with("unknown", &AcquireOptions::new().wait_for(Duration::from_secs(1)))
            .await;
        assert!(outcome.is_err(), "{how}: the client saw an error: {outcome:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        let name = LockName::new("unknown").expect("valid");
        let free = backend
            .store
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(5))
            .await
            .expect("memory store works");
        assert!(
            matches!(free, TryAcquire::Acquired(_)),
            "after {how}, the queued wait left a lock nobody owns"
        );
    }
}
