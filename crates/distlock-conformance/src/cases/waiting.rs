//! Waiting: timeouts end on time, releases hand over promptly, cancelled waits leave nothing,
//! a wait of zero is one attempt; `with_lock` runs its work only under the lock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, LockClient, Wait};
use tokio::sync::oneshot;

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// Case 6: Acquire with a wait timeout returns `Timeout` close to the deadline while the lock is
/// held, and succeeds promptly once the holder releases (the handoff time is printed).
pub async fn c06_wait_timeout_and_handoff(ctx: Ctx) -> Outcome {
    let (a, b) = (ctx.client().await, ctx.client().await);
    let name = ctx.name("handoff");
    let holder = a
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");

    let wait = Duration::from_millis(600);
    let started = Instant::now();
    let outcome = b
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).wait_for(wait))
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Err(Error::Timeout { .. })),
        "expected a timeout, got {outcome:?}"
    );
    assert!(
        waited >= wait - Duration::from_millis(20),
        "gave up early, after {waited:?}"
    );
    assert!(
        waited < wait + Duration::from_secs(3),
        "gave up late, after {waited:?}"
    );

    let waiter = tokio::spawn({
        let b = b.clone();
        let name = name.clone();
        async move {
            let guard = b
                .acquire_with(
                    &name,
                    &AcquireOptions::new()
                        .ttl(LONG_TTL)
                        .wait_for(Duration::from_secs(30)),
                )
                .await;
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(holder.release().await.expect("works"));
    let (guard, acquired_at) = within(Duration::from_secs(10), "the waiter takes over", waiter)
        .await
        .expect("joined");
    let guard = guard.expect("the waiter acquires after the release");
    let handoff = acquired_at - released_at;
    ctx.note(format!(
        "handoff after release: {handoff:?} ({:?})",
        ctx.caps().wake_up
    ));
    assert!(handoff < Duration::from_secs(3), "handoff took {handoff:?}");
    assert!(guard.release().await.expect("works"));
    Outcome::Passed
}

/// Case 7: Cancel safety: an acquire future dropped at any point (while waiting, or mid-attempt on
/// a free lock) leaves nothing behind; another client then acquires at once, long before any
/// TTL could have freed it.
pub async fn c07_cancelled_acquire_leaves_nothing(ctx: Ctx) -> Outcome {
    let (a, b, c) = (ctx.client().await, ctx.client().await, ctx.client().await);
    let opts = AcquireOptions::new().ttl(LONG_TTL);

    // Dropped while waiting on a held lock.
    let name = ctx.name("waiting");
    let holder = a.acquire_with(&name, &opts).await.expect("acquired");
    let cancelled = tokio::time::timeout(Duration::from_millis(150), b.acquire_with(&name, &opts)).await;
    assert!(cancelled.is_err(), "the waiter should still be waiting");
    assert!(holder.release().await.expect("works"));
    let guard = within(
        Duration::from_secs(5),
        "c acquires",
        c.acquire_with(&name, &opts.clone().wait_for(Duration::from_secs(5))),
    )
    .await
    .expect("nothing of the cancelled waiter is left");
    assert!(guard.release().await.expect("works"));

    // Dropped mid-attempt on a free lock, at many points in the round trip.
    for step in 0..12u64 {
        let name = ctx.name(&format!("midflight-{step}"));
        let _ = tokio::time::timeout(Duration::from_micros(step * 150), b.acquire_with(&name, &opts)).await;
        let started = Instant::now();
        let guard = within(
            Duration::from_secs(10),
            "c acquires after a cancelled attempt",
            c.acquire_with(&name, &opts.clone().wait_for(Duration::from_secs(10))),
        )
        .await
        .unwrap_or_else(|e| panic!("step {step}: the cancelled attempt stranded the lock: {e}"));
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(guard.release().await.expect("works"));
    }
    within(Duration::from_secs(5), "nothing is left held", async {
        while ctx.fixture().held_count(ctx.prefix()).await.expect("counts") != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Outcome::Passed
}

/// Case 20: `with_lock` runs the work under the lock, releases after, and returns `LockLost`
/// (dropping the work) if the lock is lost meanwhile.
pub async fn c20_with_lock(ctx: Ctx) -> Outcome {
    let (a, b) = (ctx.client().await, ctx.client().await);
    let name = ctx.name("with");
    let opts = AcquireOptions::new()
        .ttl(ctx.short_ttl())
        .wait_for(Duration::from_secs(10));
    let probe = b.clone();
    let probe_name = name.clone();
    let value = a
        .with_lock(&name, &opts, |lock| async move {
            assert!(
                probe.try_acquire(&probe_name).await.expect("works").is_none(),
                "held during the work"
            );
            lock.fencing_token()
        })
        .await
        .expect("with_lock works");
    if ctx.caps().fencing != distlock_core::Fencing::None {
        assert!(value.is_some(), "the work sees the fencing token");
    }
    assert!(
        b.try_acquire(&name).await.expect("works").is_some(),
        "released after the work"
    );

    if !ctx.fixture().can_steal() {
        return ctx.partial(
            Reason::Steal,
            "the fixture cannot steal a lock (the normal path passed)",
        );
    }
    let fixture = ctx.fixture_arc();
    let lost_name = ctx.name("with-lost");
    let stolen_name = lost_name.clone();
    let outcome = within(
        ctx.short_ttl() * 6 + Duration::from_secs(30),
        "with_lock notices the loss",
        a.with_lock(&lost_name, &opts, |_lock| async move {
            fixture
                .steal(&stolen_name)
                .await
                .expect("the fixture steals the lock");
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "finished without the lock"
        }),
    )
    .await;
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "expected LockLost, got {outcome:?}"
    );
    Outcome::Passed
}

/// Case 45: `with_lock` never polls its work past the lease's local deadline. The work blocks
/// its runtime's only thread until past the deadline (so neither the watchdog, nor the lost
/// signal's timer, nor a session's keep-alive on that runtime can run), then awaits something
/// another task of the runtime completed meanwhile: the statements after that await must not
/// run, and `with_lock` returns `LockLost`.
pub async fn c45_with_lock_never_polls_work_past_the_deadline(ctx: Ctx) -> Outcome {
    let ran_late = Arc::new(AtomicBool::new(false));
    let (tx, rx) = oneshot::channel();
    let (case, flag) = (ctx.clone(), ran_late.clone());
    // A runtime of one thread, of this case alone: nothing outside it can rescue the work.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let _ = tx.send(runtime.block_on(blocked_work(case, flag)));
    });
    let (outcome, blocked) = within(
        ctx.short_ttl() * 4 + Duration::from_secs(60),
        "with_lock over work that blocked its runtime",
        rx,
    )
    .await
    .expect("the runtime's thread ends");
    ctx.note(format!("the work blocked its runtime for {blocked:?}"));
    assert!(
        !ran_late.load(Ordering::SeqCst),
        "the work ran on after the lock's local deadline (the store may have freed it and another client may hold it)"
    );
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "expected LockLost, got {outcome:?}"
    );
    Outcome::Passed
}

/// The body of c45 on its own runtime: `with_lock` with the short TTL over work that blocks the
/// thread past the hold's deadline (and the session's, on a session store), then awaits.
/// Returns `with_lock`'s outcome and how long the work blocked.
async fn blocked_work(ctx: Ctx, ran_late: Arc<AtomicBool>) -> (Result<&'static str, Error>, Duration) {
    let client = ctx.client().await;
    let ttl = ctx.short_ttl();
    let session = client.backend().session();
    let opts = AcquireOptions::new().ttl(ttl).wait_for(Duration::from_secs(10));
    let blocked = Arc::new(std::sync::Mutex::new(Duration::ZERO));
    let blocked_for = blocked.clone();
    // A task, not the runtime's own future: the scheduler runs queued tasks one after another
    // and turns the timer driver only when none is left, so the work is woken by the task it
    // spawned, not by a timer.
    let outcome = tokio::spawn(async move {
        client
            .with_lock(&ctx.name("blocked"), &opts, move |_lock| async move {
                // The watchdog task runs and goes to sleep on its timer.
                tokio::time::sleep(Duration::from_millis(10)).await;
                // Past the TTL, and past the session's local deadline (it is not kept alive
                // while the thread is blocked).
                let past_session = session
                    .and_then(|s| {
                        let until = s.borrow().valid_until;
                        until
                    })
                    .map(|at| at.saturating_duration_since(tokio::time::Instant::now()));
                let block = (ttl * 2).max(past_session.unwrap_or_default() + Duration::from_secs(1));
                *blocked_for.lock().expect("not poisoned") = block;
                let (tx, rx) = oneshot::channel();
                tokio::spawn(async move {
                    let _ = tx.send(());
                });
                std::thread::sleep(block);
                let _ = rx.await;
                ran_late.store(true, Ordering::SeqCst);
                "ran on past the deadline"
            })
            .await
    })
    .await
    .expect("the with_lock task");
    let blocked = *blocked.lock().expect("not poisoned");
    (outcome, blocked)
}

/// Case 46: A wait of zero (`Wait::For(Duration::ZERO)`) is one attempt, as `Wait::No`: it
/// takes a free lock with exactly one attempt, and on a held lock returns a timeout after
/// exactly one. A wait so short that its deadline has passed before the attempt starts still
/// makes that attempt.
pub async fn c46_zero_wait_is_one_attempt(ctx: Ctx) -> Outcome {
    let attempts = Arc::new(AtomicUsize::new(0));
    let client = LockClient::new(Observed::counting(ctx.backend().await, attempts.clone()));
    let zero = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait(Wait::For(Duration::ZERO));

    let free = ctx.name("zero-free");
    let guard = within(
        Duration::from_secs(30),
        "a zero wait on a free lock",
        client.acquire_with(&free, &zero),
    )
    .await
    .unwrap_or_else(|e| panic!("a zero wait on a free lock must take it, got {e:?}"));
    let made = attempts.swap(0, Ordering::SeqCst);
    assert_eq!(made, 1, "a zero wait on a free lock made {made} attempts");
    assert!(guard.release().await.expect("released"));

    let held = ctx.name("zero-held");
    let holder = ctx
        .client()
        .await
        .acquire_with(&held, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");
    let outcome = within(
        Duration::from_secs(30),
        "a zero wait on a held lock",
        client.acquire_with(&held, &zero),
    )
    .await;
    assert!(
        matches!(outcome, Err(Error::Timeout { .. })),
        "a zero wait on a held lock must time out, got {outcome:?}"
    );
    let made = attempts.swap(0, Ordering::SeqCst);
    assert_eq!(made, 1, "a zero wait on a held lock made {made} attempts");
    assert!(holder.release().await.expect("released"));

    let tiny = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait(Wait::For(Duration::from_nanos(1)));
    let name = ctx.name("tiny");
    let guard = within(
        Duration::from_secs(30),
        "a 1 ns wait on a free lock",
        client.acquire_with(&name, &tiny),
    )
    .await
    .unwrap_or_else(|e| {
        panic!("a wait whose deadline passed before its attempt must still make it, got {e:?}")
    });
    let made = attempts.swap(0, Ordering::SeqCst);
    assert_eq!(made, 1, "a 1 ns wait on a free lock made {made} attempts");
    assert!(guard.release().await.expect("released"));
    Outcome::Passed
}
