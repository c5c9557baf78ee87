//! Waiters a release may hand the lock to that no longer want it: one whose process died
//! while it waited, one whose wait ended as the release came. A store that grants at release
//! (Redis: the lock goes to the first queued waiter's id) must not let such a grant strand the
//! lock; a store that does not must not strand it either. Owns cases 59 and 60.

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, FencingToken, LockClient, LockGuard, LockName, Result};
use tokio::task::JoinHandle;

use super::process::{child_setup, ChildHolder};
use super::{within, Outcome, LONG_TTL};
use crate::Ctx;

/// Case 59: A waiter whose process dies (kill -9) while it waits, first in line, costs the
/// next waiter no more than a dead holder would: after the release, a live waiter queued
/// behind it gets the lock within the bound of case 17 (the dead waiter's TTL, or its
/// session's end, four times over plus 40 s), with a fencing token above the releaser's, and
/// holds it alone.
pub async fn c59_dead_waiter_strands_nothing(ctx: Ctx) -> Outcome {
    let (env, test) = match child_setup(&ctx) {
        Ok(setup) => setup,
        Err(skipped) => return skipped,
    };
    let ttl = ctx.short_ttl().max(Duration::from_secs(1));
    let limit = ttl * 4 + Duration::from_secs(40);
    let name = ctx.name("dead-waiter");
    let holder = ctx.client().await;
    let held = holder
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).no_wait())
        .await
        .expect("the lock is free");

    // First in line: a child that waits for the lock (its first attempt finds it held).
    let mut dead = ChildHolder::spawn_waiting(&test, &env, &name, ttl).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Second in line: a live waiter of this process, with the default pauses (a store that
    // grants at release may let it learn of the dead waiter's lapsed grant only by them).
    let live = wait_plainly(ctx.client().await, &name, limit + Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    dead.kill().await;

    let before = held.fencing_token();
    let released = Instant::now();
    assert!(
        held.release().await.expect("the release works"),
        "the lock was ours"
    );
    let guard = within(
        limit,
        "the live waiter gets the lock after the waiter before it died",
        live,
    )
    .await
    .expect("joined")
    .expect("the live waiter acquires");
    ctx.note(format!(
        "the live waiter got the lock {:?} after the release (the dead waiter's TTL {ttl:?})",
        released.elapsed()
    ));
    assert_newer(&guard, before, "the live waiter");
    assert!(
        holder.try_acquire(&name).await.expect("works").is_none(),
        "the live waiter holds the lock alone"
    );
    assert!(
        guard.release().await.expect("works"),
        "the live waiter's lock was its own until its release"
    );
    Outcome::Passed
}

/// How the first waiter's wait ends in case 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its future is dropped before the release.
    CancelledBefore,
    /// Its future is dropped just after the release returned.
    CancelledAfter,
    /// Its wait times out just as the release comes.
    TimedOut,
}

/// How long the first waiter waits where its wait times out (case 60).
const SHORT_WAIT: Duration = Duration::from_millis(1500);

/// Case 60: A waiter whose wait ends (its future dropped, or its wait timed out) leaves no
/// hold behind, whether it ends before the release, just after the release handed it the
/// lock, or by its deadline just as the release comes (a guard it got at the last moment is
/// dropped): the next waiter, whose safety-net re-check is 80 s away, gets the lock within
/// 10 s of the release, and the lock is then its alone.
pub async fn c60_wait_ended_at_the_release_strands_nothing(ctx: Ctx) -> Outcome {
    let holder = ctx.client().await;
    for end in [End::CancelledBefore, End::CancelledAfter, End::TimedOut] {
        let name = ctx.name(&format!("ended-{end:?}"));
        let held = holder
            .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL).no_wait())
            .await
            .expect("the lock is free");
        let wait = match end {
            End::TimedOut => SHORT_WAIT,
            _ => Duration::from_secs(120),
        };
        let started = Instant::now();
        let ending = wait_in_task(ctx.client().await, &name, wait);
        tokio::time::sleep(Duration::from_millis(500)).await; // it tried and waits
        if end == End::CancelledBefore {
            ending.abort();
        }
        let next = wait_in_task(ctx.client().await, &name, Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(500)).await; // it tried and waits, behind
        if end == End::TimedOut {
            let deadline = started + SHORT_WAIT;
            tokio::time::sleep(deadline.saturating_duration_since(Instant::now())).await;
        }
        let before = held.fencing_token();
        let released = Instant::now();
        assert!(
            held.release().await.expect("the release works"),
            "the lock was ours"
        );
        if end == End::TimedOut {
            // Timed out, or handed the lock at the last moment: that guard is dropped.
            let ended = within(Duration::from_secs(30), "the short wait ends", ending)
                .await
                .expect("joined");
            ctx.note(format!("the wait that timed out at the release: {ended:?}"));
        } else {
            // Just after the release: the store may have handed the lock to the first
            // waiter. A guard it got already goes with its task's output.
            ending.abort();
            drop(ending);
        }
        let guard = within(
            Duration::from_secs(10),
            &format!("the next waiter gets in after a release (the first wait: {end:?})"),
            next,
        )
        .await
        .expect("joined")
        .expect("the next waiter acquires");
        ctx.note(format!(
            "{end:?}: the next waiter got the lock {:?} after the release",
            released.elapsed()
        ));
        assert_newer(&guard, before, "the next waiter");
        // An ended wait whose grant came before it ended holds nothing either: the lock is
        // the next waiter's alone.
        assert!(
            holder.try_acquire(&name).await.expect("works").is_none(),
            "the next waiter holds the lock alone"
        );
        assert!(
            guard.release().await.expect("works"),
            "the next waiter's lock was its own until its release"
        );
    }
    Outcome::Passed
}

/// A wait for `name` of up to `wait`, whose safety-net re-check is 80 s away: only a release
/// (or the store's queue) lets it in sooner.
pub(super) fn wait_in_task(
    client: LockClient,
    name: &LockName,
    wait: Duration,
) -> JoinHandle<Result<LockGuard>> {
    let name = name.clone();
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(wait)
        .poll_interval(Duration::from_millis(10), Duration::from_secs(20));
    tokio::spawn(async move { client.acquire_with(&name, &opts).await })
}

/// A wait for `name` of up to `wait`, with the default pauses.
pub(super) fn wait_plainly(
    client: LockClient,
    name: &LockName,
    wait: Duration,
) -> JoinHandle<Result<LockGuard>> {
    let name = name.clone();
    let opts = AcquireOptions::new().ttl(LONG_TTL).wait_for(wait);
    tokio::spawn(async move { client.acquire_with(&name, &opts).await })
}

/// Fails unless `guard`'s fencing token is above `before`, where the store has tokens.
pub(super) fn assert_newer(guard: &LockGuard, before: Option<FencingToken>, who: &str) {
    if let (Some(now), Some(then)) = (guard.fencing_token(), before) {
        assert!(
            now > then,
            "{who}'s fencing token {now:?} is not above the releaser's {then:?}"
        );
    }
}
