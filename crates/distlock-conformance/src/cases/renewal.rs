//! Extending: by hand, and by the watchdog for as long as the guard lives.

use std::time::Instant;

use distlock_core::{AcquireOptions, DistributedLockExt, Expiry};

use super::{is_held, take, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 5: Extend by the owner keeps the lock past its original TTL; the watchdog keeps a guard
/// exclusive for at least 3x its TTL.
pub async fn c05_extend_and_watchdog_keep_lock(ctx: Ctx) -> Outcome {
    if ctx.caps().expiry != Expiry::Ttl {
        return ctx.skip(Reason::Ttl, "locks are session-bound, there is no TTL to extend");
    }
    let ttl = ctx.short_ttl();
    let probe = ctx.backend().await;

    // By hand: extend twice at half the TTL; still held at 1.5x the original TTL.
    let a = ctx.backend().await;
    let name = ctx.name("extend");
    let mut lease = take(&*a, &name, ttl).await;
    let started = Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(ttl / 2).await;
        lease = a
            .extend(&lease, ttl)
            .await
            .expect("extend works")
            .expect("the owner can extend");
    }
    assert!(started.elapsed() > ttl, "the check runs past the original TTL");
    assert!(
        is_held(&*probe, &name, LONG_TTL).await,
        "extended past its original TTL"
    );
    assert!(a.release(&lease).await.expect("works"));

    // The watchdog: 3.5x the TTL, probing all along.
    let client = ctx.client().await;
    let name = ctx.name("watchdog");
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    let until = Instant::now() + ttl * 7 / 2;
    while Instant::now() < until {
        assert!(
            is_held(&*probe, &name, LONG_TTL).await,
            "the watchdog let the lock lapse"
        );
        assert!(!guard.is_lost(), "the guard reports a loss while renewals work");
        tokio::time::sleep(ttl / 5).await;
    }
    assert!(
        guard.release().await.expect("works"),
        "still ours after 3.5x the TTL"
    );
    Outcome::Passed
}
