//! Multi-locks: a set of locks held together, all or none, without deadlock between clients
//! asking for overlapping sets in different orders, with one lost-lock signal for the set.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Error, Expiry, Fencing, LockName};

use super::{is_held, within, Outcome, LONG_TTL};
use crate::expect::Reason;
use crate::Ctx;

/// Case 30: A multi-lock is all or none: an attempt that finds one lock of its set held (at
/// once, after its wait, or dropped while waiting) leaves none of the others held; a set won
/// holds every lock, each with its fencing token, and its release frees every one.
pub async fn c30_multi_lock_all_or_none(ctx: Ctx) -> Outcome {
    let raw = ctx.backend().await;
    let (holder, client) = (ctx.client().await, ctx.client().await);
    let [a, b, c] = ["set-a", "set-b", "set-c"].map(|n| ctx.name(n));
    let guard_b = holder
        .acquire_with(&b, &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("acquired");

    let tried = client.try_acquire_all([&c, &b, &a]).await.expect("answered");
    assert!(tried.is_none(), "a set with a held lock was acquired");
    assert_free(&*raw, &[&a, &c], "after a failed try").await;

    let waited = client
        .acquire_all_with(
            [&a, &b],
            &AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_millis(300)),
        )
        .await;
    match waited {
        Err(Error::Timeout { name, .. }) => {
            assert_eq!(name, b.to_string(), "the timeout names the held lock")
        }
        other => panic!("a set with a held lock: {other:?}"),
    }
    assert_free(&*raw, &[&a], "after a wait that ran out").await;

    // Dropped while waiting for b, holding a: a is released in the background.
    let waiting = {
        let (client, a, b) = (client.clone(), a.clone(), b.clone());
        tokio::spawn(async move {
            let opts = AcquireOptions::new()
                .ttl(LONG_TTL)
                .wait_for(Duration::from_secs(60));
            client.acquire_all_with([a, b], &opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    waiting.abort();
    let _ = waiting.await;
    within(
        Duration::from_secs(10),
        "a dropped multi-lock releases what it took",
        async {
            while is_held(&*raw, &a, LONG_TTL).await {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
    )
    .await;

    assert!(guard_b.release().await.expect("released"));
    let set = client
        .acquire_all_with([&b, &c, &a, &b], &AcquireOptions::new().ttl(LONG_TTL))
        .await
        .expect("a free set");
    assert_eq!(
        set.names(),
        vec![a.clone(), b.clone(), c.clone()],
        "sorted, duplicates dropped"
    );
    for name in [&a, &b, &c] {
        assert!(
            is_held(&*raw, name, LONG_TTL).await,
            "{name} of a set won is not held"
        );
    }
    if ctx.caps().fencing == Fencing::Monotonic {
        assert!(
            set.fencing_tokens().iter().all(Option::is_some),
            "a lock without a token"
        );
    }
    assert!(
        set.release().await.expect("released"),
        "every lock was still ours"
    );
    assert_free(&*raw, &[&a, &b, &c], "after the set's release").await;
    Outcome::Passed
}

/// Case 31: Multi-locks never deadlock: six clients ask, eight times each, for overlapping
/// sets of two or three of four names in different orders; all finish, and no name ever has
/// two holders.
pub async fn c31_multi_lock_never_deadlocks(ctx: Ctx) -> Outcome {
    const CLIENTS: usize = 6;
    const ROUNDS: usize = 8;
    let names: Arc<[LockName]> = (0..4).map(|i| ctx.name(&format!("ring-{i}"))).collect();
    let inside: Arc<[AtomicBool]> = (0..4).map(|_| AtomicBool::new(false)).collect();
    let overlaps = Arc::new(AtomicU64::new(0));
    let opts = AcquireOptions::new()
        .ttl(LONG_TTL)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(50));
    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..CLIENTS {
        let client = ctx.client().await;
        let (names, inside, overlaps, opts) = (names.clone(), inside.clone(), overlaps.clone(), opts.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                // Overlapping sets, asked for in rotating and reversed orders.
                let start = (i * 7 + round * 3) % 4;
                let mut picked: Vec<usize> = (0..2 + (i + round) % 2).map(|k| (start + k) % 4).collect();
                if (i + round) % 2 == 1 {
                    picked.reverse();
                }
                let set = client
                    .acquire_all_with(picked.iter().map(|&k| &names[k]), &opts)
                    .await
                    .expect("acquired within the wait");
                for &k in &picked {
                    if inside[k].swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                for &k in &picked {
                    inside[k].store(false, Ordering::SeqCst);
                }
                assert!(
                    set.release().await.expect("released"),
                    "a lock of the set was lost"
                );
            }
        }));
    }
    within(
        Duration::from_secs(240),
        "every client gets every set (no deadlock)",
        async {
            for worker in workers {
                worker.await.expect("a worker panicked");
            }
        },
    )
    .await;
    ctx.note(format!(
        "{} sets taken in {:?}",
        CLIENTS * ROUNDS,
        started.elapsed()
    ));
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders of one name at once"
    );
    Outcome::Passed
}

/// Case 32: A multi-lock's one lost-lock signal fires when one lock of its set is destroyed
/// behind its back, and its release then reports that not every lock was still ours.
pub async fn c32_multi_lock_lost_signal(ctx: Ctx) -> Outcome {
    if !ctx.fixture().can_steal() {
        return ctx.skip(Reason::Steal, "the fixture cannot steal a lock");
    }
    let ttl = ctx.short_ttl();
    let client = ctx.client().await;
    let [x, y] = ["lost-x", "lost-y"].map(|n| ctx.name(n));
    let set = client
        .acquire_all_with([&x, &y], &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    let signal = set.lost_signal();
    assert!(!signal.is_lost());
    ctx.fixture()
        .steal(&y)
        .await
        .expect("the fixture destroys the hold");
    let limit = match ctx.caps().expiry {
        Expiry::Ttl => ttl * 3 + Duration::from_secs(5),
        _ => Duration::from_secs(30),
    };
    let reason = within(limit, "the set's lost-lock signal fires", signal.lost()).await;
    ctx.note(format!("the set was lost: {reason}"));
    assert!(set.is_lost());
    assert!(
        !set.release().await.expect("answered"),
        "a release after a loss reports not every lock ours"
    );
    Outcome::Passed
}

/// Fails unless every one of `names` is free.
async fn assert_free(raw: &dyn distlock_core::DistributedLock, names: &[&LockName], when: &str) {
    for name in names {
        assert!(!is_held(raw, name, LONG_TTL).await, "{name} is held {when}");
    }
}
