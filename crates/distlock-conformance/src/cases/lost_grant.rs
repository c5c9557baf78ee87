//! A release with a waiter, under network faults: the waiter's notification lost, or the
//! releaser's reply lost. Whatever the store did at the release (handed the lock to the
//! waiter, as Redis does, or freed it), the waiter ends up holding the lock alone. Owns cases
//! 61 and 62; the proxy, warm-up and hang bound come from the fault cases.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, WakeUp};

use super::faults::{proxied, warm_up, NO_HANG};
use super::queued::{assert_newer, wait_in_task, wait_plainly};
use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 61: A waiter that hears nothing of the release (a silent partition between it and the
/// store from before the release until every connection is reset and the network heals; a
/// probe by another client meanwhile gives back what it takes) still gets the lock, within
/// two operation timeouts and 10 s of the heal although its safety-net re-check is 80 s away,
/// with a fencing token above the releaser's, and holds it alone. Stores whose waiters poll
/// have no notification to lose and skip it.
pub async fn c61_waiter_whose_notification_is_lost_still_gets_in(ctx: Ctx) -> Outcome {
    if ctx.caps().wake_up != WakeUp::Notification {
        return ctx.skip(
            Reason::Notification,
            "waiters poll: there is no notification to lose",
        );
    }
    let (waiter, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    warm_up(&ctx, &waiter, "c61").await;
    let op = ctx.fixture().operation_timeout();
    let holder = ctx.client().await;
    let name = ctx.name("lost-notification");
    let held = holder
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).no_wait())
        .await
        .expect("the lock is free");
    let wait = wait_in_task(waiter.clone(), &name, NO_HANG * 2);
    tokio::time::sleep(Duration::from_secs(1)).await; // it tried and waits

    faults.blackhole();
    let before = held.fencing_token();
    assert!(
        held.release().await.expect("the release works"),
        "the lock was ours"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Whatever the store did at the release, a probe takes nothing for good.
    let probe = holder.try_acquire(&name).await.expect("works");
    let probed = match probe {
        Some(guard) => {
            let token = guard.fencing_token();
            assert!(
                guard.release().await.expect("works"),
                "the probe's lock was its own"
            );
            format!("took it (token {token:?}) and gave it back")
        }
        None => "found it held".to_owned(),
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // What the store sent meanwhile is lost with the connections.
    faults.reset();
    faults.heal();
    let healed = Instant::now();
    let bound = op * 2 + Duration::from_secs(10);
    let guard = within(
        bound,
        "the waiter whose notification was lost gets the lock after the heal",
        wait,
    )
    .await
    .expect("joined")
    .expect("the waiter acquires");
    ctx.note(format!(
        "a probe during the partition {probed}; the waiter got the lock {:?} after the heal",
        healed.elapsed()
    ));
    assert_newer(&guard, before, "the waiter");
    assert!(
        holder.try_acquire(&name).await.expect("works").is_none(),
        "the waiter holds the lock alone"
    );
    assert!(
        guard.release().await.expect("works"),
        "the waiter's lock was its own until its release"
    );
    Outcome::Passed
}

/// Case 62: A release whose reply is lost while a waiter waits (the proxy between the HOLDER
/// and the store drops replies until the waiter holds or the release returns; then the
/// network heals and every connection resets, so that the releaser's client re-sends or cleans
/// up by owner) answers "ours" or an ambiguous error, never "not ours" (as in case 50), and
/// never frees the lock the waiter got: three operation timeouts and 3 s later,
/// the waiter's guard says held, its renewal succeeds, another client finds the lock held,
/// and the waiter's release finds the lock its own. The waiter's fencing token is above the
/// releaser's.
pub async fn c62_release_whose_reply_is_lost_keeps_the_waiter_s_hold(ctx: Ctx) -> Outcome {
    let (holder, faults) = match proxied(&ctx).await {
        Ok(pair) => pair,
        Err(skip) => return skip,
    };
    warm_up(&ctx, &holder, "c62").await;
    let op = ctx.fixture().operation_timeout();
    let name = ctx.name("lost-release-waiter");
    let held = within(
        NO_HANG,
        "an acquire",
        holder.acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).no_wait()),
    )
    .await
    .expect("the lock is free");
    let wait = wait_plainly(ctx.client().await, &name, NO_HANG);
    tokio::time::sleep(Duration::from_secs(1)).await; // it tried and waits

    faults.drop_replies();
    let before = held.fencing_token();
    let release = tokio::spawn(held.release());
    let applied = tokio::time::timeout(NO_HANG, async {
        while !wait.is_finished() && !release.is_finished() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        applied.is_ok(),
        "neither did the waiter get the lock nor the release return within {NO_HANG:?} (traffic {:?})",
        faults.traffic()
    );
    faults.heal();
    faults.reset();
    let released = within(NO_HANG, "the release returns", release)
        .await
        .expect("joined");
    let guard = within(NO_HANG, "the waiter gets the lock", wait)
        .await
        .expect("joined")
        .expect("the waiter acquires");
    let got = Instant::now();
    ctx.note(format!(
        "release with a lost reply, a waiter waiting: {released:?}"
    ));
    // As in case 50: the releaser cannot tell its own release from the waiter's hold.
    match &released {
        Ok(true) => {}
        Err(error) if error.is_ambiguous() => {}
        Ok(false) => panic!("a release whose reply was lost reported \"not ours\" while the lease was valid"),
        Err(error) => panic!("a lost reply must be an ambiguous error, got {error}"),
    }
    // Time for the releaser's client to re-send its release or clean up by owner.
    tokio::time::sleep(op * 3 + Duration::from_secs(3)).await;
    assert!(
        !guard.is_lost(),
        "the waiter lost the lock {:?} after it got it, after a release whose reply was lost",
        got.elapsed()
    );
    assert!(
        guard.extend(LONG_TTL).await.expect("the renewal answers"),
        "the waiter's renewal found the lock no longer its own"
    );
    let other = ctx.client().await;
    assert!(
        other.try_acquire(&name).await.expect("works").is_none(),
        "another client got the lock the waiter holds"
    );
    assert_newer(&guard, before, "the waiter");
    assert!(
        guard.release().await.expect("works"),
        "the waiter's lock was freed behind its back"
    );
    Outcome::Passed
}
