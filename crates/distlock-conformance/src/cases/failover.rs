//! c53: a failover of a replicated store ([`Fixture::failover`](crate::Fixture::failover)) to
//! a replica its configuration promises has every acknowledged write (a synchronous standby, a
//! semi-synchronous replica, a Redis replica that `WAIT` counts, an ensemble's quorum).
//!
//! The timeline: a holder acquires (watchdog on, the store's [`Failover::ttl`], which rides the
//! promotion out); another client tries the lock every 100 ms from before the primary goes
//! away until a TTL after the new primary serves (three of the holder's renewals). Two endings
//! are correct: the holder keeps the lock (its renewals succeed on the new primary, and its
//! release there frees it), or its lost signal fires before the other client gets it. Either
//! way, the other client then gets the lock, and its fencing token, issued after the failover,
//! is above the holder's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Fencing, FencingToken, LockClient, LockGuard};

use super::faults::NO_HANG;
use super::{within, Outcome};
use crate::expect::Reason;
use crate::{Ctx, Failover};

/// Between two tries of the other client.
const TRY_EVERY: Duration = Duration::from_millis(100);
/// How long a failover may take (a Sentinel set's election and its old primary's return as a
/// replica, on a loaded machine).
const FAILOVER_LIMIT: Duration = Duration::from_secs(120);
/// How many failed tries of the other client the case's notes quote.
const QUOTED_ERRORS: usize = 3;

/// Case 53: a failover to a replica that has every acknowledged write grants nobody a lock
/// whose holder still says held; the holder keeps it or hears of its loss first; tokens issued
/// after the failover are above the holder's.
pub async fn c53_failover_keeps_every_acknowledged_lock(ctx: Ctx) -> Outcome {
    let Some(store) = ctx.fixture().failover().await else {
        return ctx.skip(
            Reason::Failover,
            "the fixture has no replicated store whose replica keeps every acknowledged write",
        );
    };
    let store = store.expect("the fixture starts a replicated store");
    let ttl = store.ttl();
    let holder = client(&*store).await;
    let other = client(&*store).await;
    let opts = AcquireOptions::new().ttl(ttl);
    let name = ctx.name("failover");
    let guard = within(NO_HANG, "the holder acquires", holder.acquire_with(&name, &opts))
        .await
        .expect("the holder acquires");
    let holder_token = guard.fencing_token();
    let signal = guard.lost_signal();
    let lost_at = tokio::spawn({
        let signal = signal.clone();
        async move {
            let reason = signal.lost().await;
            (Instant::now(), reason)
        }
    });
    // A while of ordinary traffic before the failover.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!guard.is_lost(), "lost before the failover");

    let began = Instant::now();
    let done = AtomicBool::new(false);
    let failing_over = async {
        within(FAILOVER_LIMIT, "the failover", store.fail_over())
            .await
            .expect("the store fails over");
        let served = began.elapsed();
        // The holder's renewals, every third of the TTL, reach the new primary meanwhile.
        tokio::time::sleep(ttl).await;
        done.store(true, Ordering::SeqCst);
        served
    };
    let trying = async {
        let (mut tries, mut errors) = (0_usize, Vec::new());
        while !done.load(Ordering::SeqCst) {
            tries += 1;
            let attempt = other.try_acquire_with(&name, &opts);
            match within(NO_HANG, "another client's try", attempt).await {
                Ok(Some(second)) => {
                    // Checked the moment the grant is known: the holder must have heard first.
                    let holder_said_lost = signal.is_lost();
                    return (Some((began.elapsed(), holder_said_lost, second)), tries, errors);
                }
                Ok(None) => {}
                Err(e) => errors.push(format!("at {:?}: {e}", began.elapsed())),
            }
            tokio::time::sleep(TRY_EVERY).await;
        }
        (None, tries, errors)
    };
    let (served, (second, tries, errors)) = tokio::join!(failing_over, trying);
    let lost = match lost_at.is_finished() {
        true => lost_at.await.ok().map(|(at, reason)| (at - began, reason)),
        false => {
            lost_at.abort();
            None
        }
    };
    ctx.note(format!(
        "failover began at 0 (TTL {ttl:?}), the new primary served at {served:?}; the holder's \
         lost signal: {lost:?}; the other client's {tries} tries ({} failed, first {:?}) got the \
         lock at {:?}",
        errors.len(),
        &errors[..errors.len().min(QUOTED_ERRORS)],
        second.as_ref().map(|(at, _, _)| *at)
    ));

    let next = match second {
        Some((at, holder_said_lost, second)) => {
            assert!(
                holder_said_lost,
                "two holders: the other client acquired {at:?} after the failover began (the new \
                 primary served at {served:?}) while the holder still said held"
            );
            second
        }
        None if !guard.is_lost() => {
            let released = within(NO_HANG, "the holder's release", guard.release())
                .await
                .expect("the holder releases on the new primary");
            assert!(
                released,
                "the holder said held through the failover, but its release on the new primary \
                 found the lock not its own"
            );
            within(
                NO_HANG,
                "the other client's try",
                other.try_acquire_with(&name, &opts),
            )
            .await
            .expect("the other client tries")
            .expect("free once its holder released it on the new primary")
        }
        None => {
            // Lost: the holder lets go (a session store's node goes with the release, if the
            // session lived on), else the store keeps it until its TTL runs out.
            drop(guard);
            let wait = opts.clone().wait_for(ttl * 3);
            within(
                ttl * 3 + NO_HANG,
                "the other client's wait",
                other.acquire_with(&name, &wait),
            )
            .await
            .expect("the lock frees after its holder heard of its loss")
        }
    };
    if ctx.caps().fencing != Fencing::None {
        let (before, after) = (
            token(holder_token, "the holder's"),
            token(next.fencing_token(), "the next"),
        );
        assert!(
            after > before,
            "the token issued after the failover ({after:?}) is not above the holder's ({before:?})"
        );
    }
    within(NO_HANG, "the other client's release", release(next)).await;
    drop(store);
    Outcome::Passed
}

async fn client(store: &dyn Failover) -> LockClient {
    let lock = within(NO_HANG, "a client connects", store.backend())
        .await
        .expect("a client of the replicated store");
    LockClient::from_arc(lock)
}

fn token(token: Option<FencingToken>, whose: &str) -> FencingToken {
    token.unwrap_or_else(|| panic!("{whose} lock has no fencing token, but the backend issues them"))
}

async fn release(guard: LockGuard) {
    assert!(
        guard.release().await.expect("the other client releases"),
        "still the other client's"
    );
}
