//! Waking: a release (of a lock or of a permit) wakes the one waiter that can win, not every
//! waiter, and reaches waiters of the same process at once even on stores that publish
//! nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use distlock_core::{
    AcquireOptions, Capabilities, DistributedLock, Fairness, FencingToken, Lease, LockClient, LockGuard,
    LockKind, LockName, LockState, OwnerToken, Primitive, ReleaseWatch, Result, TryAcquire, WakeUp,
};
use tokio::task::JoinHandle;

use super::{within, Outcome, LONG_TTL};
use crate::Ctx;

/// How many clients wait in [`c27_release_wakes_one_waiter`].
const WAITERS: usize = 6;

/// Case 27: With [`Capabilities::wakes_one`], a release wakes one waiter: while six clients
/// wait, a release is followed by at most one attempt besides the winner's (not six), and
/// every later release hands the lock on promptly although the waiters' safety-net re-check
/// is 20 s away (no wake is lost: not to a waiter that won without being woken, nor to
/// waiters that gave up).
pub async fn c27_release_wakes_one_waiter(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if caps.wake_up != WakeUp::Notification || !caps.wakes_one {
        return ctx.skip("the backend wakes every waiter on a release (or polls)");
    }
    let name = ctx.name("wake-one");
    let holder = ctx.client().await;
    let guard = holder
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");

    // The safety net (4 x the longest poll) is far beyond every bound below.
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(5));
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        gave_up.push(spawn_waiter(&ctx, &attempts, &name, &opts).await);
    }
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(spawn_waiter(&ctx, &attempts, &name, &opts).await);
    }
    settle(&attempts).await;
    // Waiters that give up (the first ones queued) must not take a wake with them.
    for waiter in &gave_up {
        waiter.abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = attempts.load(Ordering::SeqCst);
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let mut rest = waiters;
    let (winner, at) = within(
        Duration::from_secs(3),
        "a waiter acquires after the release (a lost wake would wait for the 20 s safety net)",
        next_winner(&mut rest),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let woken = attempts.load(Ordering::SeqCst) - before;
    ctx.note(format!(
        "{woken} attempt(s) after a release with {WAITERS} waiters; handoff {:?}",
        at - released
    ));
    assert!(
        woken <= 2,
        "a release with {WAITERS} waiters was followed by {woken} attempts: it woke more than the waiter that can win"
    );

    // Every later release wakes the next waiter promptly.
    let mut current = winner;
    while !rest.is_empty() {
        let released = Instant::now();
        assert!(current.release().await.expect("released"));
        let (next, at) = within(
            Duration::from_secs(3),
            "the next waiter acquires after a release",
            next_winner(&mut rest),
        )
        .await;
        assert!(at - released < Duration::from_secs(3));
        current = next;
    }
    assert!(current.release().await.expect("released"));
    Outcome::Passed
}

/// Case 44: With [`Capabilities::permits_wake_one`], a permit's release wakes one waiter of
/// the semaphore: c27 for a semaphore of one permit. While six clients wait for it, a release
/// is followed by at most one attempt besides the winner's, and every later release hands the
/// permit on promptly although the waiters' safety-net re-check is 20 s away (no wake is lost
/// to waiters that gave up).
pub async fn c44_permit_release_wakes_one_waiter(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if caps.wake_up != WakeUp::Notification || !caps.offers(Primitive::Semaphore) || !caps.permits_wake_one {
        return ctx.skip("a permit's release wakes every waiter of the semaphore (or waiters poll)");
    }
    if caps.fairness == Fairness::Fifo {
        return ctx.skip("waits go through the store's own queue");
    }
    let name = ctx.name("permit-wake-one");
    let holder = ctx.client().await;
    let guard = holder
        .semaphore(&name, 1)
        .expect("semaphores")
        .acquire_with(&AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("the permit");
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(5));
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        gave_up.push(spawn_permit_waiter(&ctx, &attempts, &name, &opts).await);
    }
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(spawn_permit_waiter(&ctx, &attempts, &name, &opts).await);
    }
    settle(&attempts).await;
    for waiter in &gave_up {
        waiter.abort();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = attempts.load(Ordering::SeqCst);
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let mut rest = waiters;
    let (winner, at) = within(
        Duration::from_secs(3),
        "a waiter gets the permit after its release (a lost wake would wait for the 20 s safety net)",
        next_winner(&mut rest),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let woken = attempts.load(Ordering::SeqCst) - before;
    ctx.note(format!(
        "{woken} attempt(s) after a permit's release with {WAITERS} waiters; handoff {:?}",
        at - released
    ));
    assert!(
        woken <= 2,
        "a permit's release with {WAITERS} waiters was followed by {woken} attempts: it woke more than the waiter that can win"
    );
    let mut current = winner;
    while !rest.is_empty() {
        assert!(current.release().await.expect("released"));
        let (next, _) = within(
            Duration::from_secs(3),
            "the next waiter gets the permit after a release",
            next_winner(&mut rest),
        )
        .await;
        current = next;
    }
    assert!(current.release().await.expect("released"));
    Outcome::Passed
}

/// Starts a client that waits for the one permit of the semaphore `name`; its attempts are
/// counted in `attempts`.
async fn spawn_permit_waiter(
    ctx: &Ctx,
    attempts: &Arc<AtomicUsize>,
    name: &LockName,
    opts: &AcquireOptions,
) -> JoinHandle<(LockGuard, Instant)> {
    let backend = Counting {
        inner: ctx.backend().await,
        attempts: attempts.clone(),
    };
    let semaphore = LockClient::new(backend).semaphore(name, 1).expect("semaphores");
    let opts = opts.clone();
    tokio::spawn(async move {
        let guard = semaphore
            .acquire_with(&opts)
            .await
            .expect("the waiter gets the permit");
        (guard, Instant::now())
    })
}

/// Case 28: A release by a client of this process hands the lock to a waiter of this process
/// at once, also on stores that publish nothing (their waiters are woken in the process, see
/// `LocalWaiters`, or on the host, as SQLite's): with the waiter's next poll 5 s away, it
/// holds the lock within 1 s.
pub async fn c28_release_in_process_wakes_a_polling_waiter(ctx: Ctx) -> Outcome {
    let probe = ctx.backend().await;
    let name = ctx.name("local-wake");
    let wakes_itself = probe.watch(&name).await.is_ok_and(|w| w.waiter().is_some());
    if ctx.caps().wake_up == WakeUp::Polling && probe.store_identity().is_none() && !wakes_itself {
        return ctx.skip("the backend polls and does not name its store, so waiters only poll");
    }
    let (holder, waiter) = (ctx.client().await, ctx.client().await);
    let long_poll = Duration::from_secs(5);
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(60))
        .poll_interval(long_poll, long_poll);
    for round in 0..3 {
        let (guard, _, took) = handoff_in_process(&holder, &waiter, &name, &opts, || ()).await;
        ctx.note(format!("round {round}: handoff {took:?}"));
        assert!(guard.release().await.expect("released"));
    }
    Outcome::Passed
}

/// One handoff between two clients of this process: `holder` takes `name`, `waiter` starts
/// waiting with `opts` (whose next poll must be far away), and once the waiter has made its
/// attempts and sleeps, `asleep` runs and `holder` releases. Fails unless the waiter holds the
/// lock within 1 s. Returns the waiter's guard, the holder's fencing token and the time from
/// the release to the waiter holding.
pub(crate) async fn handoff_in_process(
    holder: &LockClient,
    waiter: &LockClient,
    name: &LockName,
    opts: &AcquireOptions,
    asleep: impl FnOnce(),
) -> (LockGuard, Option<FencingToken>, Duration) {
    let guard = holder.acquire_with(name, opts).await.expect("acquired");
    let waiting = {
        let (waiter, name, opts) = (waiter.clone(), name.clone(), opts.clone());
        tokio::spawn(async move {
            let guard = waiter
                .acquire_with(&name, &opts)
                .await
                .expect("the waiter acquires");
            (guard, Instant::now())
        })
    };
    // Let the waiter fail its attempts and go to sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    asleep();
    let first = guard.fencing_token();
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let (handed, at) = within(
        Duration::from_secs(1),
        "the waiter holds the lock after a release in its process (its next poll is far away)",
        waiting,
    )
    .await
    .expect("the waiter task");
    (handed, first, at - released)
}

/// Starts a client that waits for `name`; its attempts are counted in `attempts`.
async fn spawn_waiter(
    ctx: &Ctx,
    attempts: &Arc<AtomicUsize>,
    name: &LockName,
    opts: &AcquireOptions,
) -> JoinHandle<(LockGuard, Instant)> {
    let backend = Counting {
        inner: ctx.backend().await,
        attempts: attempts.clone(),
    };
    let client = LockClient::new(backend);
    let (name, opts) = (name.clone(), opts.clone());
    tokio::spawn(async move {
        let guard = client
            .acquire_with(&name, &opts)
            .await
            .expect("the waiter acquires");
        (guard, Instant::now())
    })
}

/// Waits until the waiters stop making attempts (all are asleep).
async fn settle(attempts: &AtomicUsize) {
    within(Duration::from_secs(30), "the waiters settle", async {
        let mut last = usize::MAX;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = attempts.load(Ordering::SeqCst);
            if now == last {
                return;
            }
            last = now;
        }
    })
    .await;
}

/// The next waiter to finish, taken out of `waiters`.
async fn next_winner(waiters: &mut Vec<JoinHandle<(LockGuard, Instant)>>) -> (LockGuard, Instant) {
    loop {
        if let Some(i) = waiters.iter().position(JoinHandle::is_finished) {
            return waiters.swap_remove(i).await.expect("the waiter task");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A backend that counts acquisition attempts and otherwise passes everything through.
#[derive(Debug)]
pub(crate) struct Counting {
    pub(crate) inner: Arc<dyn DistributedLock>,
    pub(crate) attempts: Arc<AtomicUsize>,
}

#[async_trait]
impl DistributedLock for Counting {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    async fn try_acquire(&self, name: &LockName, owner: OwnerToken, ttl: Duration) -> Result<TryAcquire> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
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
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner
            .try_acquire_waiting(name, owner, ttl, waiter, stay)
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
        self.attempts.fetch_add(1, Ordering::SeqCst);
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
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire_kind(name, kind, owner, ttl, waiter).await
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
        self.attempts.fetch_add(1, Ordering::SeqCst);
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

    fn session(&self) -> Option<tokio::sync::watch::Receiver<distlock_core::Session>> {
        self.inner.session()
    }

    fn watch_lease(
        &self,
        lease: &Lease,
    ) -> Option<futures::future::BoxFuture<'static, distlock_core::LossReason>> {
        self.inner.watch_lease(lease)
    }

    async fn inspect(&self, name: &LockName) -> Result<LockState> {
        self.inner.inspect(name).await
    }

    async fn ping(&self) -> Result<()> {
        self.inner.ping().await
    }
}
