//! The store going away: errors in bounded time, lost-lock signals, recovery.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Expiry};

use super::{within, Outcome};
use crate::expect::Reason;
use crate::{Ctx, Needs};

/// How long any single operation may take against a dead store before the suite calls it a
/// hang. Backends' own operation timeouts should be far below this.
const NO_HANG: Duration = Duration::from_secs(30);

/// Case 12: The store going away: operations return an error within a bounded time (no hang), a
/// held guard's lost-lock signal fires, and work resumes once the store is back.
pub async fn c12_store_going_away(ctx: Ctx) -> Outcome {
    let ttl = ctx.short_ttl().max(Duration::from_secs(1));
    let holder = ctx.client().await;
    let other = ctx.client().await;
    let name = ctx.name("outage");
    let guard = holder
        .acquire_with(&name, &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    assert_eq!(
        ctx.needs(),
        Needs::OwnStore,
        "a case that takes the store away declares `Needs::OwnStore`"
    );
    let Some(outage) = ctx.fixture().outage().await else {
        guard.release().await.expect("works");
        return ctx.skip(Reason::Outage, "the fixture cannot take the store away");
    };
    let started = Instant::now();
    let attempt = within(
        NO_HANG,
        "an attempt against a dead store",
        other.try_acquire(&ctx.name("other")),
    )
    .await;
    assert!(
        attempt.is_err(),
        "an attempt against a dead store must fail, got {attempt:?}"
    );
    ctx.note(format!(
        "error after {:?}: {}",
        started.elapsed(),
        attempt.err().map(|e| e.to_string()).unwrap_or_default()
    ));

    let loss_limit = match ctx.caps().expiry {
        Expiry::Ttl => ttl * 2 + NO_HANG,
        _ => NO_HANG * 2,
    };
    let reason = within(loss_limit, "the lost-lock signal fires", guard.lost()).await;
    ctx.note(format!("lost after {:?}: {reason}", started.elapsed()));
    assert!(guard.is_lost());
    drop(guard);

    outage.restore().await;
    let fresh = ctx.client().await;
    within(NO_HANG * 2, "work resumes after the store is back", async {
        loop {
            match fresh.try_acquire(&ctx.name("after")).await {
                Ok(Some(guard)) => {
                    guard.release().await.expect("works");
                    break;
                }
                Ok(None) => panic!("a fresh name is held"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await;
    Outcome::Passed
}
