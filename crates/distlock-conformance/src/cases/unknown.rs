//! Acquisitions whose outcome is unknown: the store granted them, but the client saw an
//! ambiguous error (a lost reply) or the backend panicked. The client must clean them up by
//! owner token, so the name is free again long before the TTL or the session would free it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient, LockName};

use super::{is_held, take, within, Outcome, LONG_TTL};
use crate::observed::{Fault, Observed};
use crate::Ctx;

/// How soon a name whose acquisition had an unknown outcome must be free again: far below
/// [`LONG_TTL`], and the faulty client's session stays open meanwhile.
const CLEANED_UP_WITHIN: Duration = Duration::from_secs(10);

/// Case 47: An acquisition the store granted but whose reply was lost (an ambiguous error) or
/// whose backend panicked is cleaned up by owner token through `LockClient`: after a single
/// attempt, and after a wait that won (an attempt with a waiter, or the store's own queue on
/// stores that queue), another client can take the name within 10 s, although the lease's TTL
/// is 60 s and the faulty client (and its session) lives on.
pub async fn c47_unknown_acquisition_is_cleaned_up_by_owner(ctx: Ctx) -> Outcome {
    for fault in [Fault::LostReply, Fault::Panic] {
        one_attempt(&ctx, fault).await;
        one_wait(&ctx, fault).await;
    }
    Outcome::Passed
}

/// A single attempt on a free name ends in `fault`.
async fn one_attempt(ctx: &Ctx, fault: Fault) {
    let (faulty, faulted) = faulty(ctx, fault).await;
    let name = ctx.name(&format!("attempt-{fault:?}"));
    let opts = AcquireOptions::new().ttl(LONG_TTL).no_wait();
    let outcome = within(
        Duration::from_secs(30),
        "an attempt whose outcome is unknown",
        faulty.acquire_with(&name, &opts),
    )
    .await;
    assert!(
        outcome.is_err(),
        "an attempt that ended in {fault:?} must fail, got {outcome:?}"
    );
    assert!(
        faulted.load(Ordering::SeqCst),
        "the attempt's grant did not go through the faulty client: nothing was checked"
    );
    freed(ctx, &name, &format!("an attempt that ended in {fault:?}")).await;
    drop(faulty);
}

/// A wait on a held name, whose winning acquisition after the holder's release ends in
/// `fault`.
async fn one_wait(ctx: &Ctx, fault: Fault) {
    let name = ctx.name(&format!("wait-{fault:?}"));
    // A raw hold, released by the store alone: a client's release would hand the lock to a
    // waiter of this process directly (`hand_over`), without an attempt of the waiter's own.
    let holder = ctx.backend().await;
    let held = take(&*holder, &name, LONG_TTL).await;
    let (faulty, faulted) = faulty(ctx, fault).await;
    let waiting = tokio::spawn({
        let (faulty, name) = (faulty.clone(), name.clone());
        async move {
            let opts = AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_secs(60))
                .poll_interval(Duration::from_millis(10), Duration::from_millis(500));
            faulty.acquire_with(&name, &opts).await
        }
    });
    // Let the waiter make its first attempt and start waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(holder.release(&held).await.expect("released"));
    let outcome = within(
        Duration::from_secs(30),
        "a wait whose winning acquisition has an unknown outcome ends",
        waiting,
    )
    .await
    .expect("the waiter task");
    assert!(
        faulted.load(Ordering::SeqCst),
        "the wait's grant did not go through the faulty client: nothing was checked"
    );
    if let Ok(guard) = outcome {
        // The wait went on after the error and won later: only once the unknown grant was
        // freed could it.
        ctx.note(format!("the wait went on after {fault:?} and won"));
        assert!(guard.release().await.expect("released"));
    }
    freed(ctx, &name, &format!("a wait whose grant ended in {fault:?}")).await;
    drop(faulty);
}

/// A client whose first grant ends in `fault`, and whether it has.
async fn faulty(ctx: &Ctx, fault: Fault) -> (LockClient, Arc<AtomicBool>) {
    let observed = Observed::faulty(ctx.backend().await, fault);
    let faulted = observed.faulted();
    (LockClient::new(observed), faulted)
}

/// Fails unless another client can take `name` within [`CLEANED_UP_WITHIN`].
async fn freed(ctx: &Ctx, name: &LockName, what: &str) {
    let probe = ctx.backend().await;
    let started = Instant::now();
    within(
        CLEANED_UP_WITHIN,
        &format!("{what}: the name is free again (cleaned up by owner, not at the 60 s TTL)"),
        async {
            while is_held(&*probe, name, LONG_TTL).await {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    ctx.note(format!("{what}: free again after {:?}", started.elapsed()));
}
