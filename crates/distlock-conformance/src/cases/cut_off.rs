//! Waits cut off while an attempt is under way: the attempt still finishes (in the background,
//! so that it can never strand a lock), and it may put the waiter in the store's queue or
//! record it as a waiting writer after the wait ended. What the wait leaves on the store must
//! be taken away after that attempt, not before it.

use std::time::Duration;

use distlock_core::{AcquireOptions, Fairness, LockClient, LockGuard, Primitive, Result, WakeUp};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// How long the cut-off attempt waits before it reaches the store.
const DELAY: Duration = Duration::from_secs(1);

/// Case 43: A wait dropped while its attempt is under way leaves nothing behind once that
/// attempt has ended: a writer's wait no longer keeps readers out, and (where a release wakes
/// waiters by notification) a queued mutex or permit waiter takes no wake with it, so the next
/// waiter gets in long before its safety-net re-check (80 s away).
pub async fn c43_wait_cut_off_mid_attempt_leaves_nothing(ctx: Ctx) -> Outcome {
    let caps = ctx.caps().clone();
    if caps.fairness == Fairness::Fifo {
        return ctx.skip(
            Reason::StoreQueue,
            "waits go through the store's own queue, whose entry goes with the waiting future",
        );
    }
    let notified = caps.wake_up == WakeUp::Notification;
    // Long pauses: a record left behind outlives every bound below; only its removal ends it
    // sooner.
    let wait = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(20));
    let holder = ctx.client().await;
    let mut checked = 0;

    if caps.offers(Primitive::RwLock) {
        checked += 1;
        let name = ctx.name("cut-off-writer");
        let reader = holder
            .rw_lock(&name)
            .expect("rw locks")
            .read()
            .await
            .expect("a reader");
        let cut = name.clone();
        cut_off(&ctx, &wait, |client, wait| async move {
            client.rw_lock(&cut).expect("rw locks").write_with(&wait).await
        })
        .await;
        let second = within(
            Duration::from_secs(3),
            "a reader gets in after a writer's wait cut off mid-attempt",
            async {
                loop {
                    let rw = holder.rw_lock(&name).expect("rw locks");
                    if let Some(guard) = rw.try_read().await.expect("works") {
                        return guard;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        )
        .await;
        assert!(second.release().await.expect("works"));
        assert!(reader.release().await.expect("works"));
    }

    if notified {
        checked += 1;
        let name = ctx.name("cut-off-mutex");
        let held = holder
            .acquire_with(&name, &wait.clone().no_wait())
            .await
            .expect("the lock");
        let cut = name.clone();
        cut_off(&ctx, &wait, |client, wait| async move {
            client.acquire_with(&cut, &wait).await
        })
        .await;
        next_waiter_gets_in(&ctx, &wait, held, "mutex", move |client, wait| async move {
            client.acquire_with(&name, &wait).await
        })
        .await;
    }

    if notified && caps.offers(Primitive::Semaphore) {
        checked += 1;
        let name = ctx.name("cut-off-permit");
        let held = holder
            .semaphore(&name, 1)
            .expect("semaphores")
            .acquire()
            .await
            .expect("the permit");
        let cut = name.clone();
        cut_off(&ctx, &wait, |client, wait| async move {
            client
                .semaphore(&cut, 1)
                .expect("semaphores")
                .acquire_with(&wait)
                .await
        })
        .await;
        next_waiter_gets_in(&ctx, &wait, held, "permit", move |client, wait| async move {
            client
                .semaphore(&name, 1)
                .expect("semaphores")
                .acquire_with(&wait)
                .await
        })
        .await;
    }

    if checked == 0 {
        return ctx.skip(
            Reason::NoRecord,
            "the backend polls and has no read-write locks: no record to leave",
        );
    }
    Outcome::Passed
}

/// Starts `start`'s wait on a client whose attempts that carry a waiter reach the store
/// [`DELAY`] late, drops the wait as soon as one such attempt is under way, and returns once
/// that attempt has ended (and a moment more, for what runs after it).
async fn cut_off<F, Fut>(ctx: &Ctx, wait: &AcquireOptions, start: F)
where
    F: FnOnce(LockClient, AcquireOptions) -> Fut,
    Fut: std::future::Future<Output = Result<LockGuard>> + Send + 'static,
{
    let delaying = Observed::delaying(ctx.backend().await, DELAY);
    let (mut started, mut ended) = (delaying.started(), delaying.ended());
    let client = LockClient::new(delaying);
    let waiting: JoinHandle<Result<LockGuard>> = tokio::spawn(start(client, wait.clone()));
    reach(&mut started, "an attempt of the waiter starts").await;
    waiting.abort();
    assert!(
        waiting.await.is_err_and(|e| e.is_cancelled()),
        "the wait was cut off mid-attempt"
    );
    reach(&mut ended, "the cut-off attempt ends").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Waits until `count` is at least 1.
async fn reach(count: &mut watch::Receiver<usize>, what: &str) {
    within(Duration::from_secs(10), what, count.wait_for(|n| *n >= 1))
        .await
        .expect("the counter lives");
}

/// A new waiter queues behind what the cut-off wait may have left, `held` is released, and
/// the new waiter must get in within 5 s (its safety net is 80 s away).
async fn next_waiter_gets_in<F, Fut>(ctx: &Ctx, wait: &AcquireOptions, held: LockGuard, what: &str, start: F)
where
    F: FnOnce(LockClient, AcquireOptions) -> Fut,
    Fut: std::future::Future<Output = Result<LockGuard>> + Send + 'static,
{
    let next = tokio::spawn(start(ctx.client().await, wait.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await; // it tried and waits
    assert!(held.release().await.expect("works"));
    let guard = within(
        Duration::from_secs(5),
        &format!("the next {what} waiter gets in after a release (no wake went to the cut-off wait)"),
        next,
    )
    .await
    .expect("joined")
    .expect("the next waiter acquires");
    assert!(guard.release().await.expect("works"));
}
