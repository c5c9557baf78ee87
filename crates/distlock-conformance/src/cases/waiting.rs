//! Waiting: timeouts end on time, releases hand over promptly, cancelled waits leave nothing.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
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
