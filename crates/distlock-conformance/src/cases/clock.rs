//! c51: jumps of the store's wall clock (an NTP step, `date -s` on the server) while a lock is
//! held, through [`Fixture::store_clock`](crate::Fixture::store_clock).
//!
//! A backward jump comes first: the holder keeps its lock through its renewals and its release
//! frees it at once (on a store that judges expiry by its wall clock, the jump lengthens only
//! what nobody renews or releases: a crashed holder's lock, by the jump). Then a forward jump
//! by far more than the TTL: another client trying all the while must not get in while the
//! holder still says held (its lost signal not fired). A store that judges expiry by its wall
//! clock loses the lock there; the case then fails, unless the backend's docs declare that
//! loss: it then ends as a [`Reason::StoreClockDeclared`] skip that names the page.

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Expiry, LockClient, LockName, OwnerToken, TryAcquire,
};

use super::faults::NO_HANG;
use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;
#[cfg(doc)]
use crate::Fixture;

/// How long another client keeps trying after the forward jump, in TTLs of the holder (in
/// sessions, on a session-bound store whose fixture gives [`Fixture::session_lifetime`]).
const TRIES_FOR_TTLS: u32 = 3;
/// Between two tries of the other client.
const TRY_EVERY: Duration = Duration::from_millis(100);

/// A forward jump of the store's clock lets no second holder in while the first says held.
pub async fn c51_forward_clock_jump_lets_no_second_holder(ctx: Ctx) -> Outcome {
    let Some(store) = ctx.fixture().store_clock().await else {
        return ctx.skip(
            Reason::StoreClock,
            "the fixture cannot start the store's server on a clock it moves",
        );
    };
    let op = ctx.fixture().operation_timeout();
    let ttl = (op * 3).max(ctx.short_ttl()).max(Duration::from_secs(2));
    // Far more than the TTL (and than any slack a backend adds to it).
    let jump = i64::try_from(ttl.as_secs() * 10 + 60).expect("a small jump");
    let open = || async { store.backend().await.expect("the clocked store opens a client") };
    let holder = LockClient::from_arc(open().await);
    let other = open().await;
    let opts = AcquireOptions::new().ttl(ttl);
    // What the lock lasts unless kept, the unit of the case's waits: the TTL, or the session of
    // a session-bound store whose fixture gives it (the TTL asked for is then not used).
    let session = store.session_lifetime().or(ctx.fixture().session_lifetime());
    let lasts = match (ctx.caps().expiry, session) {
        (Expiry::Session, Some(session)) => session.min(ttl),
        _ => ttl,
    };

    // Backward: renewals keep the lock, the release frees it at once.
    let name = ctx.name("clock-back");
    let guard = within(NO_HANG, "the holder acquires", holder.acquire_with(&name, &opts))
        .await
        .expect("the holder acquires");
    store.jump(-jump);
    tokio::time::sleep(lasts * 2).await;
    assert!(
        !guard.is_lost(),
        "a backward jump of {jump} s of the store's clock lost the lock within {:?}",
        lasts * 2
    );
    assert!(
        !takes(&*other, &name, ttl).await,
        "another client got the lock after a backward jump while its holder renewed it"
    );
    within(NO_HANG, "the release", guard.release())
        .await
        .expect("the release after a backward jump");
    assert!(
        takes(&*other, &name, ttl).await,
        "after a backward jump of {jump} s, a released lock was not free at once"
    );
    // Back to the true time: a forward jump for what was written meanwhile, none of it held.
    store.jump(0);

    // Forward: nobody gets in while the holder says held.
    let name = ctx.name("clock-forward");
    let guard = within(NO_HANG, "the holder acquires", holder.acquire_with(&name, &opts))
        .await
        .expect("the holder acquires");
    store.jump(jump);
    let jumped = Instant::now();
    let mut second = None;
    while jumped.elapsed() < lasts * TRIES_FOR_TTLS {
        match within(
            NO_HANG,
            "another client's try",
            other.try_acquire(&name, OwnerToken::new(), LONG_TTL),
        )
        .await
        {
            Ok(TryAcquire::Acquired(_)) => {
                second = Some((jumped.elapsed(), guard.is_lost()));
                break;
            }
            Ok(TryAcquire::Held(_)) => {}
            Err(e) => ctx.note(format!("another client's try after the jump failed: {e}")),
        }
        tokio::time::sleep(TRY_EVERY).await;
    }
    store.jump(0);
    let holder_lost = guard.is_lost();
    drop(guard);
    ctx.note(format!(
        "forward jump of {jump} s with a TTL of {ttl:?}: another client acquired: {:?}; the holder lost by the end: {holder_lost}",
        second.map(|(at, lost)| format!("at {at:?}, the holder then saying {}", if lost { "lost" } else { "held" }))
    ));
    let overlap = second.is_some_and(|(_, holder_lost)| !holder_lost);
    match (overlap, store.declared_loss()) {
        (true, Some(page)) => ctx.skip(
            Reason::StoreClockDeclared,
            format!(
                "a forward jump of the store's clock let another client in while the holder said held, as {page} declares"
            ),
        ),
        (true, None) => panic!(
            "a forward jump of {jump} s of the store's clock let another client in {:?} after it, while the holder still said held: two holders",
            second.map(|(at, _)| at).unwrap_or_default()
        ),
        (false, Some(page)) => panic!(
            "{page} declares that a forward jump of the store's clock loses a lock, but nobody got in while the holder held it for {:?} after one: take the declaration off",
            lasts * TRIES_FOR_TTLS
        ),
        (false, None) => Outcome::Passed,
    }
}

/// Whether a raw attempt by `backend` takes `name` (releasing it again at once).
async fn takes(backend: &dyn DistributedLock, name: &LockName, ttl: Duration) -> bool {
    match within(
        NO_HANG,
        "a try",
        backend.try_acquire(name, OwnerToken::new(), ttl),
    )
    .await
    {
        Ok(TryAcquire::Acquired(lease)) => {
            let _ = backend.release(&lease).await;
            true
        }
        Ok(TryAcquire::Held(_)) => false,
        Err(e) => panic!("trying {name:?} failed: {e}"),
    }
}
