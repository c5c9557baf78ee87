//! A holder cut off from its store until its lock is gone (its TTL ran out, or the store
//! ended its session) frees and renews nothing of the next holder's once it is back: c03 for
//! every kind of expiry, session-bound stores included.

use std::future::Future;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLockExt, Result};

use super::faults::{proxied, warm_up, NO_HANG};
use super::{is_held, take, within, Outcome, LONG_TTL};
use crate::Ctx;

/// Case 48: A holder silently cut off from its store until its lock is gone (at its TTL, or
/// at the end of its session, which the store declares once it hears nothing) and another
/// client has taken it: once the link heals, the stale holder's release reports "not owned",
/// its extend fails, and the new holder still holds the lock.
pub async fn c48_cut_off_holder_frees_nothing_of_the_next(ctx: Ctx) -> Outcome {
    let (stale_client, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    warm_up(&ctx, &stale_client, "stale").await;
    let a = stale_client.backend().clone();
    let name = ctx.name("cut-off");
    let stale = take(&*a, &name, ctx.short_ttl()).await;

    faults.blackhole();
    let next = ctx.client().await;
    let opts = AcquireOptions::new().ttl(LONG_TTL).wait_for(NO_HANG);
    let guard = within(
        NO_HANG,
        "another client takes the lock once the cut-off holder's is gone",
        next.acquire_with(&name, &opts),
    )
    .await
    .expect("the lock of a cut-off holder frees itself (TTL or session end)");
    faults.heal();

    let released = answered(|| a.release(&stale)).await;
    assert!(
        !released,
        "the stale holder's release must report not owned (it may have freed the next holder's lock)"
    );
    let extended = answered(|| a.extend(&stale, LONG_TTL)).await;
    assert!(
        extended.is_none(),
        "the stale holder's extend must fail, got {extended:?}"
    );
    let probe = ctx.backend().await;
    assert!(
        is_held(&*probe, &name, LONG_TTL).await,
        "the next holder must still hold the lock after the stale holder's release"
    );
    assert!(!guard.is_lost(), "the next holder's guard is unaffected");
    assert!(
        guard.release().await.expect("works"),
        "the next holder still owned it"
    );
    Outcome::Passed
}

/// The first answer `op` gets from the store once the stale holder reaches it again (the
/// errors of its reconnection are retried).
async fn answered<T, F: Future<Output = Result<T>>>(mut op: impl FnMut() -> F) -> T {
    within(NO_HANG, "the stale holder reaches the store again", async {
        loop {
            match op().await {
                Ok(answer) => return answer,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await
}
