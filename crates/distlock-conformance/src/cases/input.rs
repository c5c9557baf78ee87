//! Bad or unusual input: typed errors, never a panic, never a collision.

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLockExt, Error, LockName, OwnerToken, MAX_NAME_BYTES};

use super::Outcome;
use crate::Ctx;

/// Case 11: Empty and 10 KB names, names with spaces, newlines, NUL, slashes, unicode, names that
/// differ only past any truncation point, zero and absurd TTLs: each works correctly or is a
/// clear typed error; none panics, none collides.
pub async fn c11_bad_input_is_a_typed_error(ctx: Ctx) -> Outcome {
    let client = ctx.client().await;
    let raw = ctx.backend().await;

    assert!(
        matches!(client.try_acquire("").await, Err(Error::InvalidName { .. })),
        "empty name"
    );
    let huge = format!("{}{}", ctx.prefix(), "x".repeat(10 * 1024));
    assert!(
        matches!(
            client.try_acquire(huge.as_str()).await,
            Err(Error::InvalidName { .. })
        ),
        "10 KB name"
    );

    // Names that must work, all held at once (so none collides with another).
    let long_base = "y".repeat(MAX_NAME_BYTES - ctx.prefix().len() - 1);
    let mid_base = "z".repeat(300);
    let odd = [
        "with space".to_owned(),
        "with\nnewline".to_owned(),
        "with\0nul".to_owned(),
        "with/slash/".to_owned(),
        "/".to_owned(),
        "..".to_owned(),
        ".".to_owned(),
        "%41".to_owned(),
        "A".to_owned(),
        "ключ-锁-🔒".to_owned(),
        "tab\tand\r\n".to_owned(),
        "{hash}tag".to_owned(),
        "*?[]".to_owned(),
        format!("{mid_base}a"),
        format!("{mid_base}b"),
        format!("{long_base}a"),
        format!("{long_base}b"),
    ];
    let mut guards = Vec::new();
    for suffix in &odd {
        let name = ctx.name(suffix);
        match client.try_acquire(&name).await {
            Ok(Some(guard)) => guards.push(guard),
            Ok(None) => panic!("{name:?} collided with another name"),
            Err(Error::InvalidName { reason }) => ctx.note(format!("refused {name:?}: {reason}")),
            Err(e) => panic!("{name:?} gave an untyped error: {e}"),
        }
    }
    assert!(
        guards.len() >= odd.len() - 4,
        "most unusual names should work, only {} did",
        guards.len()
    );
    for guard in guards {
        assert!(guard.release().await.expect("release works"));
    }

    // TTLs.
    let name = ctx.name("ttl");
    for ttl in [
        Duration::ZERO,
        Duration::MAX,
        Duration::from_secs(100 * 365 * 24 * 3600),
    ] {
        let outcome = client
            .try_acquire_with(&name, &AcquireOptions::new().ttl(ttl))
            .await;
        assert!(
            matches!(outcome, Err(Error::InvalidOptions { .. })),
            "TTL {ttl:?}: {outcome:?}"
        );
    }
    // The raw trait with an unvalidated absurd TTL: an error or a working lock, no panic.
    if let Ok(distlock_core::TryAcquire::Acquired(lease)) =
        raw.try_acquire(&name, OwnerToken::new(), Duration::MAX).await
    {
        let _ = raw.release(&lease).await;
    }
    let outcome = client
        .acquire_with(&name, &AcquireOptions::new().wait_for(Duration::MAX))
        .await;
    assert!(
        outcome.is_ok() || matches!(outcome, Err(Error::InvalidOptions { .. })),
        "{outcome:?}"
    );
    drop(outcome);
    assert!(LockName::new("x").is_ok());
    Outcome::Passed
}
