//! Waking: a release (of a lock or of a permit) wakes the one waiter that can win, not every
//! waiter, and reaches waiters of the same process at once even on stores that publish
//! nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Fairness, FencingToken, LockClient, LockGuard, LockName, Primitive, WakeUp,
};
use tokio::task::JoinHandle;

use super::semaphore::without_semaphores;
use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// How many clients wait in [`c27_release_wakes_one_waiter`].
const WAITERS: usize = 6;

/// Case 27: Where a release wakes one waiter of a mutex (a store-side FIFO queue, or a notified
/// watch [`for_waiter`](distlock_core::ReleaseWatch::for_waiter)), it does: while six clients
/// wait, a release is followed by at most one attempt besides the winner's (not six), and
/// every later release hands the lock on promptly although the waiters' safety-net re-check
/// is 20 s away (no wake is lost: not to a waiter that won without being woken, nor to
/// waiters that gave up).
pub async fn c27_release_wakes_one_waiter(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    let wakes_one = caps.fairness == Fairness::Fifo || wakes_one(&ctx, Primitive::Mutex).await;
    if caps.wake_up != WakeUp::Notification || !wakes_one {
        return ctx.skip(
            Reason::WakeOne,
            "the backend wakes every waiter on a release (or polls)",
        );
    }
    one_wake_per_release(ctx, Waited::Lock).await
}

/// Case 44: Where a permit's release wakes one waiter of the semaphore (a notified watch
/// [`for_waiter`](distlock_core::ReleaseWatch::for_waiter)), it does: c27 for a semaphore of
/// one permit.
pub async fn c44_permit_release_wakes_one_waiter(ctx: Ctx) -> Outcome {
    if let Some(skipped) = without_semaphores(&ctx) {
        return skipped;
    }
    let caps = ctx.caps().clone();
    if caps.wake_up != WakeUp::Notification || !wakes_one(&ctx, Primitive::Semaphore).await {
        return ctx.skip(
            Reason::PermitWakeOne,
            "a permit's release wakes every waiter of the semaphore (or waiters poll)",
        );
    }
    if caps.fairness == Fairness::Fifo {
        return ctx.skip(Reason::StoreQueue, "waits go through the store's own queue");
    }
    one_wake_per_release(ctx, Waited::Permit).await
}

/// Whether the backend wakes one waiter of a `primitive` object per release: its watch is
/// notified and names its waiter (the store queues that waiter and wakes the first).
async fn wakes_one(ctx: &Ctx, primitive: Primitive) -> bool {
    let backend = ctx.backend().await;
    backend
        .watch(&ctx.name("wakes-one"), primitive)
        .await
        .is_ok_and(|watch| watch.is_notified() && watch.waiter().is_some())
}

/// What the waiters of [`one_wake_per_release`] wait for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Waited {
    /// The lock of a name.
    Lock,
    /// The one permit of a semaphore.
    Permit,
}

impl Waited {
    pub(super) async fn take(self, client: &LockClient, name: &LockName, opts: &AcquireOptions) -> LockGuard {
        match self {
            Waited::Lock => client.acquire_with(name, opts).await,
            Waited::Permit => {
                let semaphore = client.semaphore(name, 1).expect("semaphores");
                semaphore.acquire_with(opts).await
            }
        }
        .expect("acquired")
    }
}

/// The body of c27 and c44: six clients wait for `waited` (and three more that give up), a
/// release is followed by at most one attempt besides the winner's, and every later release
/// hands over within 3 s although the waiters' safety-net re-check is 20 s away.
async fn one_wake_per_release(ctx: Ctx, waited: Waited) -> Outcome {
    let name = ctx.name(&format!("wake-one-{waited:?}"));
    let holder = ctx.client().await;
    let guard = waited
        .take(&holder, &name, &AcquireOptions::new().ttl(LONG_TTL))
        .await;

    // The safety net (4 x the longest poll) is far beyond every bound below.
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(5));
    let attempts = Arc::new(AtomicUsize::new(0));
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        gave_up.push(spawn_waiter(&ctx, &attempts, waited, &name, &opts).await);
    }
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(spawn_waiter(&ctx, &attempts, waited, &name, &opts).await);
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

/// Case 28: A release by a client of this process hands the lock to a waiter of this process
/// at once, also on stores that publish nothing (their waiters are woken in the process, see
/// `LocalWaiters`, or on the host, as SQLite's): with the waiter's next poll 5 s away, it
/// holds the lock within 1 s.
pub async fn c28_release_in_process_wakes_a_polling_waiter(ctx: Ctx) -> Outcome {
    let probe = ctx.backend().await;
    let name = ctx.name("local-wake");
    let wakes_itself = probe
        .watch(&name, Primitive::Mutex)
        .await
        .is_ok_and(|w| w.waiter().is_some());
    if ctx.caps().wake_up == WakeUp::Polling && probe.store_identity().is_none() && !wakes_itself {
        return ctx.skip(
            Reason::LocalWake,
            "the backend polls and does not name its store, so waiters only poll",
        );
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

/// Starts a client that waits for `waited` of `name`; its attempts are counted in `attempts`.
async fn spawn_waiter(
    ctx: &Ctx,
    attempts: &Arc<AtomicUsize>,
    waited: Waited,
    name: &LockName,
    opts: &AcquireOptions,
) -> JoinHandle<(LockGuard, Instant)> {
    let client = LockClient::new(Observed::counting(ctx.backend().await, attempts.clone()));
    let (name, opts) = (name.clone(), opts.clone());
    tokio::spawn(async move {
        let guard = waited.take(&client, &name, &opts).await;
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
