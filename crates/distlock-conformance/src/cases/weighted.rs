//! Weighted permits: holds of several permits, counted by weight, never more than the count.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, Error, LockClient};

use super::{within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::observed::Observed;
use crate::Ctx;

/// The skip of a weighted-permit case on a backend without them.
fn without_weighted_permits(ctx: &Ctx) -> Option<Outcome> {
    (!ctx.caps().weighted_permits).then(|| {
        ctx.skip(
            Reason::WeightedPermits,
            "no weighted permits (Capabilities::weighted_permits is false)",
        )
    })
}

/// Case 54: Six clients of weights 1, 2 and 3 take a semaphore of 5 permits six times each:
/// the weights held at once (a shared counter added to inside each hold) never add up to more
/// than 5. Then 3 and 2 permits fill it and one more finds none free; asking for more
/// permits than the semaphore has, or for none, is `InvalidOptions` and sends nothing.
pub async fn c54_weighted_permits_never_over_admit(ctx: Ctx) -> Outcome {
    if let Some(skip) = without_weighted_permits(&ctx) {
        return skip;
    }
    const PERMITS: u32 = 5;
    const WEIGHTS: [u32; 6] = [1, 2, 3, 1, 2, 3];
    const ROUNDS: usize = 6;
    let name = ctx.name("weighted");
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(50));
    let mut workers = Vec::new();
    for weight in WEIGHTS {
        let semaphore = ctx
            .client()
            .await
            .semaphore(&name, PERMITS)
            .expect("the backend has semaphores");
        let (inside, most, opts) = (inside.clone(), most.clone(), opts.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = semaphore
                    .acquire_many_with(weight, &opts)
                    .await
                    .unwrap_or_else(|e| panic!("{weight} permits: {e}"));
                let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(weight, Ordering::SeqCst);
                assert!(
                    guard.release().await.expect("released"),
                    "the permits were still ours"
                );
            }
        }));
    }
    within(Duration::from_secs(90), "every weighted holder finishes", async {
        for worker in workers {
            worker.await.expect("a client finished");
        }
    })
    .await;
    let most = most.load(Ordering::SeqCst);
    ctx.note(format!("at most {most} of {PERMITS} permits held at once"));
    assert!(
        most <= PERMITS,
        "holds of {most} permits at once on a semaphore of {PERMITS}"
    );

    let semaphore = ctx.client().await.semaphore(&name, PERMITS).expect("semaphores");
    let three = semaphore
        .try_acquire_many(3)
        .await
        .expect("works")
        .expect("3 of 5 free");
    assert!(
        semaphore.try_acquire_many(3).await.expect("works").is_none(),
        "3 more permits beside 3 of 5"
    );
    let two = semaphore
        .try_acquire_many(2)
        .await
        .expect("works")
        .expect("the other 2 of 5");
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "a sixth permit of five"
    );
    assert!(three.release().await.expect("works"));
    let one = semaphore
        .try_acquire()
        .await
        .expect("works")
        .expect("a permit once 3 are given back");
    for guard in [two, one] {
        assert!(guard.release().await.expect("works"));
    }

    let attempts = Arc::new(AtomicUsize::new(0));
    let counted = LockClient::new(Observed::counting(ctx.backend().await, attempts.clone()));
    let semaphore = counted.semaphore(&name, PERMITS).expect("semaphores");
    for n in [PERMITS + 1, 0] {
        match semaphore.try_acquire_many(n).await {
            Err(Error::InvalidOptions { .. }) => {}
            other => panic!("{n} permits of {PERMITS}: expected InvalidOptions, got {other:?}"),
        }
        match semaphore.acquire_many(n).await {
            Err(Error::InvalidOptions { .. }) => {}
            other => panic!("{n} permits of {PERMITS}: expected InvalidOptions, got {other:?}"),
        }
    }
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        0,
        "a request the semaphore can never grant reached the store"
    );
    Outcome::Passed
}
