//! Expiry: a lock whose holder stops renewing frees itself, and the stale holder can then
//! touch nothing (the classic bug of deleting someone else's lock).

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, DistributedLockExt, Expiry};

use super::{is_held, take, within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 3: A stale owner never frees or extends someone else's lock: A takes it with a short TTL
/// and stops renewing, it expires, B takes it; A's release and extend report "not owned" and
/// B still holds it.
pub async fn c03_stale_owner_cannot_release_or_extend(ctx: Ctx) -> Outcome {
    if ctx.caps().expiry != Expiry::Ttl {
        return ctx.skip(Reason::Ttl, "locks are session-bound, they do not expire by TTL");
    }
    let ttl = ctx.short_ttl();
    let (a, b) = (ctx.backend().await, ctx.client().await);
    let name = ctx.name("stale");
    let stale = take(&*a, &name, ttl).await;
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(ttl * 4 + Duration::from_secs(10));
    let guard = within(
        ttl * 4 + Duration::from_secs(15),
        "B waits out A's TTL",
        b.acquire_with(&name, &opts),
    )
    .await
    .expect("B acquires once A's lease expired");
    assert!(
        !a.release(&stale).await.expect("no error"),
        "A's stale release must report not owned"
    );
    assert!(
        a.extend(&stale, LONG_TTL).await.expect("no error").is_none(),
        "A's stale extend must fail"
    );
    let probe = ctx.backend().await;
    assert!(
        is_held(&*probe, &name, LONG_TTL).await,
        "B must still hold the lock after A's stale release"
    );
    assert!(!guard.is_lost(), "B's guard is unaffected");
    assert!(guard.release().await.expect("works"), "B still owned it");
    Outcome::Passed
}

/// Case 4: TTL expiry frees a lock whose holder stopped renewing (session end for session-bound
/// backends), and not before.
pub async fn c04_ttl_expiry_frees_lock(ctx: Ctx) -> Outcome {
    let ttl = ctx.short_ttl();
    let name = ctx.name("expiry");
    let b = ctx.backend().await;
    let started = Instant::now();
    match ctx.caps().expiry {
        Expiry::Session => {
            let a = ctx.backend().await;
            let _lease = take(&*a, &name, ttl).await;
            assert!(
                is_held(&*b, &name, LONG_TTL).await,
                "held while the session lives"
            );
            drop(a); // ends the holder's session
        }
        _ => {
            let a = ctx.backend().await;
            let _lease = take(&*a, &name, ttl).await;
            assert!(
                is_held(&*b, &name, LONG_TTL).await,
                "held right after acquisition"
            );
        }
    }
    let limit = ttl * 4 + Duration::from_secs(20);
    let freed = within(limit, "the lock frees itself", async {
        loop {
            if !is_held(&*b, &name, LONG_TTL).await {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    if ctx.caps().expiry == Expiry::Ttl {
        // The store judges expiry with its own clock; allow its granularity as slack.
        let earliest = ttl.saturating_sub(ctx.caps().ttl_granularity + Duration::from_millis(50));
        assert!(
            freed - started >= earliest,
            "freed after {:?}, before the TTL of {ttl:?}",
            freed - started
        );
    }
    ctx.note(format!("freed after {:?} (TTL {ttl:?})", freed - started));
    Outcome::Passed
}

/// Case 13: Dropping a guard without release frees the lock promptly (a background release), far
/// sooner than its TTL.
pub async fn c13_dropped_guard_frees_lock(ctx: Ctx) -> Outcome {
    let (a, b) = (ctx.client().await, ctx.client().await);
    let name = ctx.name("dropped");
    let guard = a
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");
    let dropped_at = Instant::now();
    drop(guard);
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(10));
    let guard = b
        .acquire_with(&name, &opts)
        .await
        .expect("the dropped guard's lock is free well before its TTL");
    ctx.note(format!("free {:?} after drop", dropped_at.elapsed()));
    assert!(dropped_at.elapsed() < Duration::from_secs(10));
    assert!(guard.release().await.expect("works"));
    Outcome::Passed
}
