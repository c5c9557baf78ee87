//! Handing over: one store operation releases a lock and takes it for the next owner, and a
//! release in this process gives the lock to this process's first waiter with it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLockExt, Fencing, LockClient, OwnerToken, WakeUp};

use super::wakeup::handoff_in_process;
use super::{is_held, take, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// Case 29: With [`Mechanics::hands_over`](distlock_core::Mechanics::hands_over),
/// `hand_over` passes a lock from its owner to the next (a higher fencing token, never free in
/// between, the old owner holding nothing), changes nothing for a stale or expired lease, and,
/// on a polling store that names itself, a release in this process hands the lock to this
/// process's waiter: it holds it at once, without an attempt of its own.
pub async fn c29_release_hands_over_to_the_next_owner(ctx: Ctx) -> Outcome {
    let raw = ctx.backend().await;
    if !raw.mechanics().hands_over {
        return ctx.skip(
            Reason::HandOver,
            "the backend cannot hand a lock over in one operation",
        );
    }
    let fenced = ctx.caps().fencing == Fencing::Monotonic;

    // The contract of the primitive.
    let name = ctx.name("hand-over");
    let first = take(&*raw, &name, LONG_TTL).await;
    let next = raw
        .hand_over(&first, OwnerToken::new(), LONG_TTL)
        .await
        .expect("answered")
        .expect("the owner hands its lock over");
    if fenced {
        assert!(
            next.fencing_token() > first.fencing_token(),
            "handed over with {:?} after {:?}",
            next.fencing_token(),
            first.fencing_token()
        );
    }
    assert!(
        is_held(&*raw, &name, LONG_TTL).await,
        "the lock was free after a hand-over"
    );
    assert!(
        !raw.release(&first).await.expect("answered"),
        "the old owner still held it"
    );
    assert!(raw.extend(&first, LONG_TTL).await.expect("answered").is_none());
    let stale = raw
        .hand_over(&first, OwnerToken::new(), LONG_TTL)
        .await
        .expect("answered");
    assert!(stale.is_none(), "a stale owner handed the lock over");
    assert!(
        raw.release(&next).await.expect("answered"),
        "the new owner holds it"
    );
    let freed = raw
        .hand_over(&next, OwnerToken::new(), LONG_TTL)
        .await
        .expect("answered");
    assert!(freed.is_none(), "a released lease was handed over");
    assert!(
        !is_held(&*raw, &name, LONG_TTL).await,
        "a refused hand-over took the lock"
    );

    if ctx.caps().expiry == distlock_core::Expiry::Ttl {
        let expiring = take(&*raw, &name, ctx.short_ttl()).await;
        tokio::time::sleep(ctx.short_ttl() * 3).await;
        let late = raw
            .hand_over(&expiring, OwnerToken::new(), LONG_TTL)
            .await
            .expect("answered");
        assert!(late.is_none(), "an expired lease was handed over");
        assert!(
            !is_held(&*raw, &name, LONG_TTL).await,
            "a refused hand-over took the lock"
        );
    }

    // A release in this process hands the lock to this process's waiter.
    if ctx.caps().wake_up != WakeUp::Polling || raw.store_identity().is_none() {
        ctx.note("no in-process hand-over: the backend notifies, or does not name its store");
        return Outcome::Passed;
    }
    let name = ctx.name("handed-to-waiter");
    let attempts = Arc::new(AtomicUsize::new(0));
    let holder = ctx.client().await;
    let waiter = LockClient::new(Observed::counting(ctx.backend().await, attempts.clone()));
    let long_poll = Duration::from_secs(20);
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(60))
        .poll_interval(long_poll, long_poll);
    for round in 0..3 {
        let mut before = 0;
        let (handed, first, took) = handoff_in_process(&holder, &waiter, &name, &opts, || {
            before = attempts.load(Ordering::SeqCst);
        })
        .await;
        assert!(before > 0, "round {round}: the waiter tried");
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            before,
            "round {round}: the waiter made an attempt of its own after the release"
        );
        if fenced {
            assert!(
                handed.fencing_token() > first,
                "round {round}: the token did not grow"
            );
        }
        ctx.note(format!("round {round}: handed over in {took:?}"));
        assert!(handed.release().await.expect("released"));
    }
    Outcome::Passed
}
