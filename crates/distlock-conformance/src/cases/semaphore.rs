//! Semaphores: never more holders than permits, counts that must agree, stale holders that
//! free nothing, and the object's own namespace.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Expiry, Fencing, Lease, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// The skip of a semaphore case on a backend without semaphores.
pub(crate) fn without_semaphores(ctx: &Ctx) -> Option<Outcome> {
    (!ctx.caps().offers(Primitive::Semaphore)).then(|| {
        ctx.skip(
            Reason::Semaphores,
            "the backend has no semaphores (Capabilities::semaphores is false)",
        )
    })
}

/// One raw attempt at a permit of `name` with `permits` that must succeed.
pub(crate) async fn take_permit(
    backend: &dyn DistributedLock,
    name: &LockName,
    permits: u32,
    ttl: Duration,
) -> Lease {
    match backend
        .try_acquire_kind(
            name,
            LockKind::Permit { permits, weight: 1 },
            OwnerToken::new(),
            ttl,
            None,
        )
        .await
    {
        Ok(TryAcquire::Acquired(lease)) => lease,
        Ok(TryAcquire::Held(h)) => panic!("a permit of {name:?} should be free, but all are held ({h:?})"),
        Err(e) => panic!("taking a permit of {name:?} failed: {e}"),
    }
}

/// A raw permit of `name` taken as soon as the store has one free, trying every 50 ms.
async fn take_permit_once_free(
    backend: &dyn DistributedLock,
    name: &LockName,
    permits: u32,
    ttl: Duration,
) -> Lease {
    loop {
        match backend
            .try_acquire_kind(
                name,
                LockKind::Permit { permits, weight: 1 },
                OwnerToken::new(),
                ttl,
                None,
            )
            .await
        {
            Ok(TryAcquire::Acquired(lease)) => return lease,
            Ok(TryAcquire::Held(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("taking a permit of {name:?} failed: {e}"),
        }
    }
}

/// Case 33: Twelve clients take a 3-permit semaphore eight times each: never more than three
/// hold a permit at once (counted by a shared counter of holders), all finish, and a fourth
/// attempt while three are held finds none free.
pub async fn c33_semaphore_never_over_admits(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_semaphores(&ctx) {
        return skip;
    }
    const CLIENTS: usize = 12;
    const ROUNDS: usize = 8;
    const PERMITS: u32 = 3;
    let name = ctx.name("sem-contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(50));
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let semaphore = ctx
            .client()
            .await
            .semaphore(&name, PERMITS)
            .expect("the backend has semaphores");
        let (inside, most, opts) = (inside.clone(), most.clone(), opts.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = semaphore.acquire_with(&opts).await.expect("a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(15)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(
                    guard.release().await.expect("released"),
                    "the permit was still ours"
                );
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a client finished");
    }
    let most = most.load(Ordering::SeqCst);
    ctx.note(format!("at most {most} of {PERMITS} permits held at once"));
    assert!(
        most <= PERMITS as usize,
        "{most} holders of a {PERMITS}-permit semaphore"
    );
    assert_eq!(
        most, PERMITS as usize,
        "twelve clients never filled three permits: not a semaphore"
    );

    let semaphore = ctx.client().await.semaphore(&name, PERMITS).expect("semaphores");
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(
            semaphore
                .try_acquire()
                .await
                .expect("works")
                .expect("a free permit"),
        );
    }
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "a fourth permit of three"
    );
    if ctx.caps().fencing == Fencing::Monotonic {
        let tokens: Vec<_> = held.iter().map(|g| g.fencing_token()).collect();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "permit tokens do not increase: {tokens:?}"
        );
    }
    for guard in held {
        assert!(guard.release().await.expect("released"));
    }
    Outcome::Passed
}

/// Case 34: Every holder of a semaphore names the same number of permits: another count while
/// permits are held is refused with `PermitsMismatch` and changes nothing, and is accepted once
/// none is held; a release or extend by an owner that does not hold a permit (a stale or forged
/// lease) frees and extends nothing; the semaphore, the read-write lock and the mutex of one
/// name are separate objects; zero permits is a typed error.
pub async fn c34_semaphore_counts_agree_and_stale_frees_nothing(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_semaphores(&ctx) {
        return skip;
    }
    let raw = ctx.backend().await;
    let client = ctx.client().await;
    let name = ctx.name("sem-agree");
    assert!(
        matches!(client.semaphore(&name, 0), Err(Error::InvalidOptions { .. })),
        "zero permits must be refused"
    );

    // The mutex of the name does not touch its semaphore.
    let mutex = client
        .acquire_with(&name, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("the mutex");
    let two = client.semaphore(&name, 2).expect("semaphores");
    let first = two
        .try_acquire()
        .await
        .expect("works")
        .expect("the mutex does not block a permit");

    let three = ctx.client().await.semaphore(&name, 3).expect("semaphores");
    match three.try_acquire().await {
        Err(Error::PermitsMismatch { stored, asked, .. }) => {
            assert_eq!((stored, asked), (2, 3), "the error names both counts")
        }
        other => panic!("a permit of 3 while permits of 2 are held: {other:?}"),
    }
    let second = two
        .try_acquire()
        .await
        .expect("works")
        .expect("the refused attempt took nothing");
    assert!(
        two.try_acquire().await.expect("works").is_none(),
        "two permits of two are held"
    );

    // A forged lease (an owner that holds nothing) frees and extends nothing.
    let forged = Lease::new(
        name.clone(),
        OwnerToken::new(),
        LONG_TTL,
        tokio::time::Instant::now(),
    )
    .with_kind(LockKind::Permit {
        permits: 2,
        weight: 1,
    });
    assert!(
        !raw.release(&forged).await.expect("works"),
        "a forged release freed a permit"
    );
    assert!(
        raw.extend(&forged, LONG_TTL).await.expect("works").is_none(),
        "a forged extend"
    );
    assert!(
        two.try_acquire().await.expect("works").is_none(),
        "still two of two held"
    );

    // A permit's lease does not release the mutex of the same name, nor the other way round.
    let as_mutex = Lease::new(name.clone(), first.owner(), LONG_TTL, tokio::time::Instant::now());
    assert!(
        !raw.release(&as_mutex).await.expect("works"),
        "a permit's owner released the mutex"
    );
    assert!(!mutex.is_lost() && !first.is_lost());
    assert!(mutex.release().await.expect("works"), "the mutex was still ours");

    if ctx.caps().expiry == Expiry::Ttl {
        // A holder whose permit expired: its release frees nobody else's permit.
        let ttl = ctx.short_ttl();
        let stale_name = ctx.name("sem-stale");
        let stale = take_permit(&*raw, &stale_name, 1, ttl).await;
        // The store ends the hold at its own pace after the lease's deadline (whole seconds
        // and a slack on some stores), so wait for it as c03 waits for the mutex.
        let next = within(
            ttl * 4 + Duration::from_secs(15),
            "the stale permit expires",
            take_permit_once_free(&*raw, &stale_name, 1, LONG_TTL),
        )
        .await;
        assert!(
            !raw.release(&stale).await.expect("works"),
            "an expired holder's release freed the permit"
        );
        assert!(
            raw.extend(&stale, LONG_TTL).await.expect("works").is_none(),
            "an expired holder extended"
        );
        let third = raw
            .try_acquire_kind(
                &stale_name,
                LockKind::Permit {
                    permits: 1,
                    weight: 1,
                },
                OwnerToken::new(),
                LONG_TTL,
                None,
            )
            .await
            .expect("works");
        assert!(
            matches!(third, TryAcquire::Held(_)),
            "the next holder's permit was freed by a stale release"
        );
        assert!(raw.release(&next).await.expect("works"));
    }

    assert!(first.release().await.expect("works"));
    assert!(second.release().await.expect("works"));
    let now_three = three
        .try_acquire()
        .await
        .expect("a new count once no permit is held");
    assert!(now_three.is_some(), "three permits once none of two is held");
    if let Some(guard) = now_three {
        assert!(guard.release().await.expect("works"));
    }
    Outcome::Passed
}
