//! Weighted permits against a real memcached: a hold of `weight` permits is one record in the
//! semaphore's item, taken, renewed and given back whole, and the weights of the live holds
//! never add up to more than the semaphore's count.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};
use distlock_memcached::MemcachedLock;

const LONG: Duration = Duration::from_secs(30);

/// A name no other test (or earlier run against the same server) uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", OwnerToken::new())
}

async fn shared() -> MemcachedLock {
    support::lock(&support::shared_url().await)
}

async fn attempt(lock: &MemcachedLock, name: &LockName, kind: LockKind) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), LONG, None)
        .await
        .expect("the attempt works")
}

async fn take(lock: &MemcachedLock, name: &LockName, kind: LockKind) -> Lease {
    match attempt(lock, name, kind).await {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("{kind} of {name:?} should be granted: {holder:?}"),
    }
}

async fn taken(lock: &MemcachedLock, name: &LockName) -> u32 {
    lock.inspect_holders(name, Primitive::Semaphore)
        .await
        .expect("inspect works")
        .iter()
        .map(|h| h.kind.weight())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memcached_backend_offers_weighted_permits() {
    assert!(shared().await.capabilities().weighted_permits);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_hold_takes_its_weight_of_the_permits() {
    let lock = shared().await;
    let name = LockName::new(fresh("weight-raw")).expect("valid");
    let two = take(&lock, &name, LockKind::permits(3, 2)).await;
    assert!(
        matches!(
            attempt(&lock, &name, LockKind::permits(3, 2)).await,
            TryAcquire::Held(_)
        ),
        "2 of 3 taken: 2 more do not fit"
    );
    let one = take(&lock, &name, LockKind::permit(3)).await;
    assert!(matches!(
        attempt(&lock, &name, LockKind::permit(3)).await,
        TryAcquire::Held(_)
    ));
    let holders = lock
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works");
    assert_eq!(holders.len(), 2, "one record per hold: {holders:?}");
    let of_two = holders
        .iter()
        .find(|h| h.owner == Some(two.owner().to_string()))
        .expect("the weighted hold");
    assert_eq!(of_two.kind, LockKind::permits(3, 2));
    assert_eq!(taken(&lock, &name).await, 3);
    // Released whole: both of its permits come free at once.
    assert!(lock.release(&two).await.expect("works"));
    assert_eq!(taken(&lock, &name).await, 1);
    let again = take(&lock, &name, LockKind::permits(3, 2)).await;
    assert_eq!(again.kind(), LockKind::permits(3, 2));
    assert!(again.fencing_token() > two.fencing_token());
    // The count rules are unchanged: another count is refused while holders live.
    let other = lock
        .try_acquire_kind(&name, LockKind::permits(4, 1), OwnerToken::new(), LONG, None)
        .await;
    assert!(
        matches!(
            other,
            Err(Error::PermitsMismatch {
                stored: 3,
                asked: 4,
                ..
            })
        ),
        "{other:?}"
    );
    // Weights the semaphore cannot hold are refused before anything is sent.
    for bad in [LockKind::permits(3, 0), LockKind::permits(3, 4)] {
        let refused = lock
            .try_acquire_kind(
                &LockName::new(fresh("weight-bad")).expect("valid"),
                bad,
                OwnerToken::new(),
                LONG,
                None,
            )
            .await;
        assert!(
            matches!(refused, Err(Error::InvalidOptions { .. })),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(lock.release(&one).await.expect("works"));
    assert!(lock.release(&again).await.expect("works"));
    assert_eq!(taken(&lock, &name).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_of_mixed_weights_never_exceed_the_count_under_concurrency() {
    let url = support::shared_url().await;
    let name = fresh("weight-mixed");
    let in_use = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(90))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(20));
    let tasks: Vec<_> = (0..9u32)
        .map(|i| {
            // A client (and connection pool) of its own per task: the races are between clients.
            let client = LockClient::new(support::lock(&url));
            let (name, in_use, most, opts) = (name.clone(), in_use.clone(), most.clone(), opts.clone());
            tokio::spawn(async move {
                let semaphore = client.semaphore(name.as_str(), 5).expect("a semaphore");
                let weight = i % 3 + 1;
                for _ in 0..4 {
                    let guard = semaphore.acquire_many_with(weight, &opts).await.expect("permits");
                    assert_eq!(guard.kind(), LockKind::permits(5, weight));
                    let now = in_use.fetch_add(weight, Ordering::SeqCst) + weight;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    in_use.fetch_sub(weight, Ordering::SeqCst);
                    assert!(guard.release().await.expect("released"), "still held at release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("the task finished");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 5, "{most} permits in use at once, of 5");
    assert!(most >= 3, "the holders overlapped ({most} at most)");
    let lock = support::lock(&url);
    assert_eq!(taken(&lock, &LockName::new(name).expect("valid")).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_3_waiter_gets_in_when_3_are_free() {
    let url = support::shared_url().await;
    let client = LockClient::new(support::lock(&url));
    let name = fresh("weight-waiter");
    let semaphore = client.semaphore(name.as_str(), 4).expect("a semaphore");
    let a = semaphore.acquire().await.expect("a permit");
    let b = semaphore.acquire().await.expect("a permit");
    let c = semaphore.acquire().await.expect("a permit");
    let waiter = {
        let client = LockClient::new(support::lock(&url));
        let name = name.clone();
        tokio::spawn(async move {
            let opts = AcquireOptions::new()
                .ttl(LONG)
                .wait_for(Duration::from_secs(60))
                .poll_interval(Duration::from_millis(20), Duration::from_millis(100));
            let semaphore = client.semaphore(name.as_str(), 4).expect("a semaphore");
            semaphore.acquire_many_with(3, &opts).await
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "1 free permit is not 3");
    assert!(a.release().await.expect("works"));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "2 free permits are not 3");
    assert!(b.release().await.expect("works"));
    let big = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter got in once 3 were free")
        .expect("joined")
        .expect("3 permits");
    assert_eq!(big.kind(), LockKind::permits(4, 3));
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "3 + 1 of 4 taken"
    );
    assert!(big.release().await.expect("works"));
    assert!(c.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_hold_is_renewed_and_released_whole() {
    let url = support::shared_url().await;
    let client = LockClient::new(support::lock(&url));
    let name = fresh("weight-whole");
    let semaphore = client.semaphore(name.as_str(), 3).expect("a semaphore");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(1));
    let all = semaphore.acquire_many_with(3, &opts).await.expect("3 permits");
    // Held past several TTLs (and the server's slack) by the watchdog's renewals.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert!(!all.is_lost());
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "all 3 still taken"
    );
    let lock = support::lock(&url);
    let holders = lock
        .inspect_holders(
            &LockName::new(name.as_str()).expect("valid"),
            Primitive::Semaphore,
        )
        .await
        .expect("works");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].kind, LockKind::permits(3, 3));
    assert!(all.release().await.expect("works"));
    let again = semaphore
        .try_acquire_many(3)
        .await
        .expect("works")
        .expect("all 3 free again");
    assert!(again.release().await.expect("works"));
}
