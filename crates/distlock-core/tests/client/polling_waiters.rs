//! Waiters on a polling store, as `LockClient` runs them:
//! - a release by a client of this process hands the lock straight to this process's first
//!   waiter, where the store can pass a lock from one owner to the next in one operation
//!   (`DistributedLock::hand_over`): the waiter makes no attempt of its own, a stale release
//!   hands nothing over, and a handed-over lock whose waiter went, or whose hand-over's outcome
//!   is unknown, does not stay held;
//! - while another process holds the lock, a waiter polls with reads, not attempts, and after
//!   the lock changes hands it polls soon again.
//!
//! The store is the memory store behind a wrapper that says it polls and names its store, as
//! the SQL backends do, so that `LockClient` puts its in-process wake-ups and hand-overs around it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Attempt, Capabilities, DistributedLock, DistributedLockExt, Error, Fencing, Lease,
    LockClient, LockKind, LockName, MemoryLock, ObjectState, OwnerToken, Primitive, Result, TryAcquire,
    WakeUp,
};
use futures::FutureExt;

/// The memory store as a polling store with a name, counting attempts.
#[derive(Debug)]
struct PollingStore {
    inner: MemoryLock,
    identity: String,
    hands_over: bool,
    attempts: AtomicUsize,
    inspects: AtomicUsize,
    /// The next hand-over is applied on the store, then reports an error (a lost reply).
    lose_next_hand_over_reply: AtomicBool,
    /// Declares hand-overs but answers them with `NotSupported` (a wrapper that forwards the
    /// capabilities and forgot the method).
    hand_over_unsupported: AtomicBool,
}

impl PollingStore {
    fn new(hands_over: bool) -> Arc<Self> {
        Arc::new(Self {
            inner: MemoryLock::new(),
            identity: format!("polling-memory:{}", uuid::Uuid::new_v4()),
            hands_over,
            attempts: AtomicUsize::new(0),
            inspects: AtomicUsize::new(0),
            lose_next_hand_over_reply: AtomicBool::new(false),
            hand_over_unsupported: AtomicBool::new(false),
        })
    }

    fn client(self: &Arc<Self>) -> LockClient {
        LockClient::from_arc(self.clone())
    }

    fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl DistributedLock for PollingStore {
    fn backend(&self) -> &'static str {
        "polling-memory"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(Fencing::Monotonic, WakeUp::Polling)
            .with_cross_process(false)
            .with_primitives(true, true)
    }
    fn mechanics(&self) -> distlock_core::Mechanics {
        distlock_core::Mechanics::default().with_hands_over(self.hands_over)
    }
    /// The memory store's attempt without its waiter queue for the mutex (it polls).
    async fn attempt(&self, attempt: &Attempt) -> Result<TryAcquire> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if attempt.kind == LockKind::Exclusive {
            return self
                .inner
                .try_acquire(&attempt.name, attempt.owner, attempt.ttl)
                .await;
        }
        self.inner.attempt(attempt).await
    }
    async fn withdraw(&self, name: &LockName, kind: LockKind, waiter: &str) -> Result<()> {
        self.inner.withdraw(name, kind, waiter).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn hand_over(&self, lease: &Lease, next: OwnerToken, ttl: Duration) -> Result<Option<Lease>> {
        if self.hand_over_unsupported.load(Ordering::SeqCst) {
            return Err(Error::NotSupported {
                backend: "polling-memory",
                what: "handing a lock over to the next owner",
            });
        }
        let handed = self.inner.hand_over(lease, next, ttl).await?;
        if self.lose_next_hand_over_reply.swap(false, Ordering::SeqCst) {
            return Err(Error::unavailable("polling-memory", "the reply was lost"));
        }
        Ok(handed)
    }
    async fn renew(&self, leases: &[Lease]) -> Vec<Result<Option<Lease>>> {
        self.inner.renew(leases).await
    }
    fn store_identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }
    async fn inspect(&self, name: &LockName, primitive: Primitive) -> Result<ObjectState> {
        self.inspects.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect(name, primitive).await
    }
    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}

fn name() -> LockName {
    LockName::new("handed").expect("valid")
}

/// Waits for ever, polling only every 20 s: anything sooner is a wake-up or a hand-over.
static SLOW_POLLING: AcquireOptions = AcquireOptions::new()
    .ttl(Duration::from_secs(30))
    .poll_interval(Duration::from_secs(20), Duration::from_secs(20));

fn slow_polling() -> AcquireOptions {
    SLOW_POLLING.clone()
}

/// Polls a new acquisition by `waiter` once: it makes its attempts, finds the lock held, is
/// queued, and sleeps. The future is returned unfinished, so the test decides when it runs on.
async fn queued_waiter(
    waiter: &LockClient,
) -> impl std::future::Future<Output = Result<distlock_core::LockGuard>> + '_ {
    let mut acquiring = Box::pin(waiter.acquire_with(name(), &SLOW_POLLING));
    assert!((&mut acquiring).now_or_never().is_none(), "the lock is held");
    acquiring
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_waiter_without_an_attempt_of_its_own() {
    let store = PollingStore::new(true);
    let (holder, waiter) = (store.client(), store.client());
    let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
    let acquiring = queued_waiter(&waiter).await;
    let attempts_before = store.attempts();

    let first = held.fencing_token();
    assert!(held.release().await.expect("released"));
    let guard = tokio::time::timeout(Duration::from_secs(1), acquiring)
        .await
        .expect("handed over within 1s, not at the next poll in 20s")
        .expect("acquired");

    assert_eq!(
        store.attempts(),
        attempts_before,
        "the waiter held the lock without an attempt of its own"
    );
    assert!(
        guard.fencing_token() > first,
        "{:?} after {first:?}",
        guard.fencing_token()
    );
    let state = store.inner.inspect_lock(&name()).await.expect("inspect");
    assert_eq!(state.owner, Some(guard.owner().to_string()));
    assert!(guard.release().await.expect("released"));
}

#[tokio::test]
async fn without_hand_over_the_waiter_is_woken_and_tries() {
    let store = PollingStore::new(false);
    let (holder, waiter) = (store.client(), store.client());
    let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
    let acquiring = queued_waiter(&waiter).await;
    let attempts_before = store.attempts();
    assert!(held.release().await.expect("released"));
    let guard = tokio::time::timeout(Duration::from_secs(1), acquiring)
        .await
        .expect("woken within 1s")
        .expect("acquired");
    assert_eq!(
        store.attempts(),
        attempts_before + 1,
        "the woken waiter tried once"
    );
    assert!(guard.release().await.expect("released"));
}

#[tokio::test]
async fn a_release_that_is_not_ours_hands_nothing_over() {
    let store = PollingStore::new(true);
    let (holder, waiter) = (store.client(), store.client());
    let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
    let acquiring = queued_waiter(&waiter).await;
    assert!(store.inner.steal(&name()), "held");
    let thief = store.inner.inspect_lock(&name()).await.expect("inspect").owner;

    assert!(
        !held.release().await.expect("answered"),
        "the lock was not ours to release"
    );
    let outcome = tokio::time::timeout(Duration::from_millis(300), acquiring).await;
    assert!(
        outcome.is_err(),
        "the waiter got a lock that was not the releaser's to give"
    );
    assert_eq!(
        store.inner.inspect_lock(&name()).await.expect("inspect").owner,
        thief
    );
}

#[tokio::test]
async fn a_lock_handed_to_a_waiter_that_went_is_released() {
    let store = PollingStore::new(true);
    let (holder, waiter, third) = (store.client(), store.client(), store.client());
    let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
    let acquiring = queued_waiter(&waiter).await;
    assert!(held.release().await.expect("released"));
    let handed_to = store.inner.inspect_lock(&name()).await.expect("inspect").owner;
    assert!(handed_to.is_some(), "handed over, not freed");
    // The waiter goes before it ever runs again: the lease left for it is never taken.
    drop(acquiring);

    let guard = tokio::time::timeout(
        Duration::from_secs(2),
        third.acquire_with(name(), &AcquireOptions::new().ttl(Duration::from_secs(30))),
    )
    .await
    .expect("the lock left for a waiter that went was released, long before its 30s TTL")
    .expect("acquired");
    assert_ne!(Some(guard.owner().to_string()), handed_to);
}

#[tokio::test]
async fn a_hand_over_whose_outcome_is_unknown_is_cleaned_up_and_the_waiter_still_gets_the_lock() {
    for lost_reply in [false, true] {
        let store = PollingStore::new(true);
        let (holder, waiter) = (store.client(), store.client());
        let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
        let acquiring = queued_waiter(&waiter).await;
        if lost_reply {
            // Applied on the store: the lock is now held under the waiter's ticket, and nobody
            // told the waiter.
            store.lose_next_hand_over_reply.store(true, Ordering::SeqCst);
        } else {
            store.inner.set_available(false);
        }
        assert!(held.release().await.is_err(), "no answer");
        store.inner.set_available(true);

        let guard = tokio::time::timeout(Duration::from_secs(3), acquiring)
            .await
            .unwrap_or_else(|_| panic!("lost reply {lost_reply}: the waiter did not get the lock within 3s"))
            .expect("acquired");
        assert!(guard.release().await.expect("released"));
        let state = store.inner.inspect_lock(&name()).await.expect("inspect");
        assert_eq!(
            state.owner, None,
            "lost reply {lost_reply}: nothing left held behind"
        );
    }
}

/// Takes `name` in the store directly, as a client of another process would (no wake-up or
/// hand-over reaches this process's waiters).
async fn held_elsewhere(store: &PollingStore, ttl: Duration) -> Lease {
    match store.inner.try_acquire(&name(), OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!("the lock should be free: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_polls_with_reads_and_soon_again_after_the_lock_changes_hands() {
    let store = PollingStore::new(true);
    let waiter = store.client();
    let first = held_elsewhere(&store, Duration::from_secs(600)).await;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(2));
    let waiting = {
        let (waiter, opts) = (waiter.clone(), opts.clone());
        tokio::spawn(async move {
            let guard = waiter.acquire_with(name(), &opts).await.expect("acquired");
            (guard, tokio::time::Instant::now())
        })
    };

    // A minute of polls, the backoff grown to 2 s: after the first attempts, reads only.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let (attempts, reads) = (store.attempts(), store.inspects.load(Ordering::SeqCst));
    assert!(
        attempts <= 2,
        "{attempts} attempts (writes on a SQL store) while the lock was held elsewhere"
    );
    assert!(
        reads >= 25,
        "{reads} reads in a minute of polling up to every 2 s"
    );

    // The lock changes hands elsewhere; once a read saw the new holder, the waiter polls soon.
    let second = store
        .inner
        .hand_over(&first, OwnerToken::new(), Duration::from_secs(600))
        .await
        .expect("answered")
        .expect("handed over");
    let seen = store.inspects.load(Ordering::SeqCst);
    while store.inspects.load(Ordering::SeqCst) == seen {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(store.inner.release(&second).await.expect("released"));
    let released = tokio::time::Instant::now();
    let (guard, at) = waiting.await.expect("the waiter task");
    assert!(
        at - released < Duration::from_millis(500),
        "acquired {:?} after the release; a waiter whose backoff did not start again polls every 2 s",
        at - released
    );
    assert!(guard.release().await.expect("released"));
}

#[tokio::test]
async fn a_hand_over_declared_but_not_supported_is_an_ordinary_release() {
    let store = PollingStore::new(true);
    store.hand_over_unsupported.store(true, Ordering::SeqCst);
    let (holder, waiter) = (store.client(), store.client());
    let held = holder.acquire_with(name(), &slow_polling()).await.expect("free");
    let acquiring = queued_waiter(&waiter).await;
    assert!(held.release().await.expect("released"));
    let guard = tokio::time::timeout(Duration::from_secs(1), acquiring)
        .await
        .expect("the waiter got the lock at once, not after the holder's 30 s TTL")
        .expect("acquired");
    assert!(guard.release().await.expect("released"));
}

/// A release of a semaphore permit or of a read-write lock by a client of this process wakes
/// this process's waiters of that object at once, though the store publishes nothing (they
/// poll only every 20 s); the write lock's release lets both waiting readers in.
#[tokio::test]
async fn a_release_of_a_permit_or_write_lock_here_wakes_the_waiters_here() {
    let store = PollingStore::new(false);
    let (holder, waiter) = (store.client(), store.client());
    let permit = holder
        .semaphore("sem", 1)
        .expect("semaphores")
        .acquire()
        .await
        .expect("free");
    let semaphore = waiter.semaphore("sem", 1).expect("semaphores");
    let waiting = tokio::spawn(async move { semaphore.acquire_with(&slow_polling()).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(permit.release().await.expect("released"));
    let next = tokio::time::timeout(Duration::from_secs(2), waiting)
        .await
        .expect("woken by the release, not by its 20 s poll")
        .expect("the task")
        .expect("the permit");
    assert!(next.release().await.expect("released"));

    let writer = holder
        .rw_lock("rw")
        .expect("rw locks")
        .write()
        .await
        .expect("free");
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let rw = waiter.rw_lock("rw").expect("rw locks");
            tokio::spawn(async move { rw.read_with(&slow_polling()).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(writer.release().await.expect("released"));
    for reader in readers {
        let guard = tokio::time::timeout(Duration::from_secs(2), reader)
            .await
            .expect("woken by the writer's release")
            .expect("the task")
            .expect("a read lock");
        assert!(guard.release().await.expect("released"));
    }
}

/// `LockClient::backend` is the backend the client was built over, itself: the client's
/// waiting layer is a part of the client, not a backend around the store.
#[tokio::test]
async fn the_backend_of_a_client_is_the_store_it_was_built_over() {
    let store = PollingStore::new(true);
    let client = store.client();
    assert_eq!(
        Arc::as_ptr(client.backend()).cast::<()>(),
        Arc::as_ptr(&store).cast::<()>(),
        "the client's backend is not the store it was built over: {:?}",
        client.backend()
    );
}

/// A lease kept with `LockGuard::leak` and released through `LockClient::release_lease` goes
/// to this process's waiter as a guard's release does: handed over at once, without an attempt
/// of the waiter's own.
#[tokio::test]
async fn a_leaked_lease_released_through_the_client_is_handed_to_the_waiter_here() {
    let store = PollingStore::new(true);
    let (holder, waiter) = (store.client(), store.client());
    let lease = holder
        .acquire_with(name(), &slow_polling())
        .await
        .expect("free")
        .leak();
    let acquiring = queued_waiter(&waiter).await;
    let attempts_before = store.attempts();

    assert!(holder.release_lease(&lease).await.expect("released"));
    let guard = tokio::time::timeout(Duration::from_secs(1), acquiring)
        .await
        .expect("handed over within 1s, not at the next poll in 20s")
        .expect("acquired");
    assert_eq!(
        store.attempts(),
        attempts_before,
        "the waiter made an attempt of its own"
    );
    assert!(
        !holder.release_lease(&lease).await.expect("answered"),
        "not ours any more"
    );
    assert!(guard.release().await.expect("released"));
}
