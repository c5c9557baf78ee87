//! The lost-lock signal: silent on a normal release, prompt when the hold is destroyed, and
//! at the maximum hold time.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Expiry, LossReason};

use super::{is_held, within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 16: A normal release never fires the lost-lock signal; destroying the hold behind the
/// client's back fires it within a bounded time; subscribing after the loss reports it at once.
pub async fn c16_lost_lock_signal(ctx: Ctx) -> Outcome {
    let ttl = ctx.short_ttl();
    let client = ctx.client().await;

    let name = ctx.name("quiet");
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    let signal = guard.lost_signal();
    assert!(guard.release().await.expect("works"));
    let fired = tokio::time::timeout(ttl * 2, signal.lost()).await;
    assert!(
        fired.is_err(),
        "a normal release fired the lost-lock signal: {fired:?}"
    );
    assert!(!signal.is_lost());

    if !ctx.fixture().can_steal() {
        return ctx.partial(
            Reason::Steal,
            "the fixture cannot steal a lock (the release part passed)",
        );
    }
    let name = ctx.name("stolen");
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    let started = Instant::now();
    ctx.fixture()
        .steal(&name)
        .await
        .expect("the fixture destroys the hold");
    let limit = match ctx.caps().expiry {
        Expiry::Ttl => ttl * 3 + Duration::from_secs(5),
        _ => Duration::from_secs(30),
    };
    let reason = within(limit, "the lost-lock signal fires", guard.lost()).await;
    ctx.note(format!("lost {:?} after the steal: {reason}", started.elapsed()));
    assert!(guard.is_lost());
    let late = guard.lost_signal();
    within(
        Duration::from_millis(200),
        "a late subscriber hears of the loss at once",
        late.lost(),
    )
    .await;
    assert!(
        !guard.release().await.expect("release works"),
        "release after a loss reports not owned"
    );
    Outcome::Passed
}

/// Case 18: The maximum hold time: the watchdog stops renewing, the signal fires with
/// `MaxHoldExceeded`, and the lock is then freed while its holder's process lives on (a TTL
/// lock runs out; a session-bound one, whose session outlives the hold, is released).
pub async fn c18_max_hold_time(ctx: Ctx) -> Outcome {
    let ttl = ctx.short_ttl();
    let client = ctx.client().await;
    let name = ctx.name("max-hold");
    let max_hold = ttl * 2;
    let started = Instant::now();
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl).max_hold(max_hold))
        .await
        .expect("acquired");
    let reason = within(max_hold + Duration::from_secs(5), "max hold fires", guard.lost()).await;
    assert_eq!(reason, LossReason::MaxHoldExceeded);
    assert!(
        started.elapsed() >= max_hold - Duration::from_millis(20),
        "fired early: {:?}",
        started.elapsed()
    );
    let probe = ctx.backend().await;
    within(
        ttl * 4 + Duration::from_secs(10),
        "the lock is freed after the maximum hold time",
        async {
            while is_held(&*probe, &name, LONG_TTL).await {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        },
    )
    .await;
    drop(guard);
    Outcome::Passed
}

/// Case 19: With renewal off, the guard reports the loss when its TTL runs out.
pub async fn c19_no_renewal_reports_expiry(ctx: Ctx) -> Outcome {
    if ctx.caps().expiry != Expiry::Ttl {
        return ctx.skip(Reason::Ttl, "session-bound locks have no TTL");
    }
    let ttl = ctx.short_ttl();
    let client = ctx.client().await;
    let name = ctx.name("no-renew");
    let started = Instant::now();
    let guard = client
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl).auto_renew(false))
        .await
        .expect("acquired");
    let reason = within(
        ttl + Duration::from_secs(5),
        "the expiry is reported",
        guard.lost(),
    )
    .await;
    assert_eq!(reason, LossReason::Expired);
    let elapsed = started.elapsed();
    // The signal leads the store's expiry by the safety margin, and comes no earlier.
    let margin = AcquireOptions::new().ttl(ttl).safety_margin_value();
    assert!(
        elapsed >= ttl - margin - Duration::from_millis(20) && elapsed < ttl + Duration::from_secs(2),
        "{elapsed:?} (TTL {ttl:?}, safety margin {margin:?})"
    );
    Outcome::Passed
}
