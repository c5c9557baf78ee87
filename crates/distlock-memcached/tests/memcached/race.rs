//! The race the seeds warn about: a holder whose lock expired releases (or extends) it just
//! as, or after, the next holder takes it. The compare-and-delete must never delete the next
//! holder's lock.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, TryAcquire};
use distlock_memcached::MemcachedLock;
use tokio::time::Instant;

const ROUNDS: usize = 12;

async fn take(lock: &MemcachedLock, name: &LockName, ttl: Duration) -> Option<Lease> {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => Some(lease),
        TryAcquire::Held(_) => None,
    }
}

/// One round: A holds with a 1 s TTL and never renews; B polls until it wins; A keeps
/// sending release and extend with its stale lease (starting at `a_starts_after`, so before
/// or after the expiry) until 300 ms after B won. B's lock must survive all of it.
async fn round(
    a: Arc<MemcachedLock>,
    b: Arc<MemcachedLock>,
    name: LockName,
    a_starts_after: Duration,
) -> u32 {
    let stale = take(&a, &name, Duration::from_secs(1))
        .await
        .expect("A takes the free lock");
    let started = Instant::now();
    let winner = tokio::spawn({
        let (b, name) = (b.clone(), name.clone());
        async move {
            loop {
                if let Some(lease) = take(&b, &name, Duration::from_secs(30)).await {
                    return (lease, Instant::now());
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });
    tokio::time::sleep_until(started + a_starts_after).await;
    let mut a_released = 0u32;
    let mut a_extended = 0u32;
    let mut b_won_at = None;
    loop {
        if a.release(&stale).await.expect("release works") {
            a_released += 1;
        }
        if a.extend(&stale, Duration::from_secs(1))
            .await
            .expect("extend works")
            .is_some()
        {
            a_extended += 1;
        }
        if b_won_at.is_none() && winner.is_finished() {
            b_won_at = Some(Instant::now());
        }
        if b_won_at.is_some_and(|t| t.elapsed() > Duration::from_millis(300)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (lease_b, _) = winner.await.expect("joined");
    assert!(a_released <= 1, "A released twice");
    assert_eq!(a_extended, 0, "A's stale lease was extended");
    let state = b.inspect_lock(&name).await.expect("inspect works");
    assert_eq!(
        state.owner.as_deref(),
        Some(lease_b.owner().to_string().as_str()),
        "B's lock was deleted or replaced by A's stale release"
    );
    assert!(
        b.extend(&lease_b, Duration::from_secs(30))
            .await
            .expect("works")
            .is_some(),
        "B still owns its lock"
    );
    assert!(!a.release(&stale).await.expect("works"));
    let lease_b = b
        .extend(&lease_b, Duration::from_secs(30))
        .await
        .expect("works")
        .expect("still B's");
    assert!(
        b.release(&lease_b).await.expect("works"),
        "B releases its own lock"
    );
    a_released
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_release_never_deletes_the_next_holders_lock() {
    let url = support::shared_url().await;
    let (a, b) = (Arc::new(support::lock(&url)), Arc::new(support::lock(&url)));
    let run = OwnerToken::new().to_string();
    let rounds: Vec<_> = (0..ROUNDS)
        .map(|i| {
            let name = LockName::new(format!("race-{run}-{i}")).expect("valid");
            // Even rounds: A releases around its expiry (a real release, then stale ones).
            // Odd rounds: A stays silent until long after the expiry, then only stale calls.
            let a_starts_after = if i % 2 == 0 {
                Duration::from_millis(700 + 50 * i as u64)
            } else {
                Duration::from_millis(2500)
            };
            tokio::spawn(round(a.clone(), b.clone(), name, a_starts_after))
        })
        .collect();
    let mut real_releases = 0;
    for r in rounds {
        real_releases += r.await.expect("a round panicked");
    }
    println!("{ROUNDS} rounds, {real_releases} of A's releases came before its expiry; no stale one deleted B's lock");
}
