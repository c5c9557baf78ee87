//! Taking and giving back: held is not an error, release is owner-checked, no reentrancy,
//! exact names.

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLockExt, Error, TryAcquire};

use super::{is_held, take, Outcome, LONG_TTL};
use crate::Ctx;

/// Case 1: Try-acquire of a free lock succeeds; a second client's try gets "held", not an error.
pub async fn c01_try_acquire_reports_held(ctx: Ctx) -> Outcome {
    let (a, b) = (ctx.client().await, ctx.client().await);
    let name = ctx.name("free");
    let guard = a
        .try_acquire(&name)
        .await
        .expect("try_acquire works")
        .expect("a free lock is acquired");
    assert!(
        b.try_acquire(&name)
            .await
            .expect("held is not an error")
            .is_none(),
        "a second client must see it held"
    );
    let raw = ctx.backend().await;
    let attempt = raw
        .try_acquire(&name, distlock_core::OwnerToken::new(), LONG_TTL)
        .await
        .expect("no error");
    assert!(
        matches!(attempt, TryAcquire::Held(_)),
        "the raw attempt must report Held"
    );
    if ctx.caps().inspect {
        let state = raw.inspect_lock(&name).await.expect("inspect works");
        assert_eq!(
            state.owner,
            Some(guard.owner().to_string()),
            "inspect shows the holder"
        );
        if ctx.caps().fencing != distlock_core::Fencing::None {
            assert_eq!(
                state.fencing,
                guard.fencing_token(),
                "inspect shows the fencing token"
            );
        }
    }
    assert!(
        guard.release().await.expect("release works"),
        "the owner releases it"
    );
    if ctx.caps().inspect {
        assert!(
            !raw.inspect_lock(&name).await.expect("inspect works").is_held(),
            "inspect shows it free"
        );
    }
    assert!(
        b.try_acquire(&name).await.expect("works").is_some(),
        "free again after release"
    );
    Outcome::Passed
}

/// Case 2: Release by the owner frees it; releasing again returns "not owned" without an error.
pub async fn c02_release_then_not_owned(ctx: Ctx) -> Outcome {
    let raw = ctx.backend().await;
    let name = ctx.name("twice");
    let lease = take(&*raw, &name, LONG_TTL).await;
    assert!(
        raw.release(&lease).await.expect("release works"),
        "the owner's release succeeds"
    );
    assert!(
        !raw.release(&lease)
            .await
            .expect("a second release is not an error"),
        "a second release reports not owned"
    );
    assert!(
        raw.extend(&lease, LONG_TTL).await.expect("no error").is_none(),
        "extending a released lock fails"
    );
    let other = ctx.backend().await;
    let lease2 = take(&*other, &name, LONG_TTL).await;
    assert!(
        !raw.release(&lease).await.expect("no error"),
        "the old lease cannot free the new holder"
    );
    assert!(
        is_held(&*raw, &name, LONG_TTL).await,
        "the new holder still holds it"
    );
    assert!(other.release(&lease2).await.expect("works"));
    Outcome::Passed
}

/// Case 14: Reentrancy: a second acquire of a held name by the same client is just another
/// contender (no reentrant counting, on every backend).
pub async fn c14_no_reentrancy(ctx: Ctx) -> Outcome {
    let a = ctx.client().await;
    let name = ctx.name("reentrant");
    let guard = a
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");
    assert!(
        a.try_acquire(&name).await.expect("works").is_none(),
        "the same client must not get it twice"
    );
    let started = std::time::Instant::now();
    let waited = a
        .acquire_with(
            &name,
            &AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(waited, Err(Error::Timeout { .. })),
        "a second wait by the same client times out: {waited:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(guard.release().await.expect("works"));
    assert!(
        a.try_acquire(&name).await.expect("works").is_some(),
        "free after the release"
    );
    Outcome::Passed
}

/// Case 15: Names are exact and case-sensitive: `Lock`, `lock` and `lock ` are three locks.
pub async fn c15_names_are_exact(ctx: Ctx) -> Outcome {
    let names = ["Lock", "lock", "lock ", " lock", "LOCK", "lock\t"].map(|s| ctx.name(s));
    let mut guards = Vec::new();
    for name in &names {
        let client = ctx.client().await;
        let guard = client
            .try_acquire(name)
            .await
            .expect("works")
            .unwrap_or_else(|| panic!("{name:?} must be a lock of its own"));
        guards.push(guard);
    }
    for guard in guards {
        assert!(guard.release().await.expect("works"));
    }
    Outcome::Passed
}
