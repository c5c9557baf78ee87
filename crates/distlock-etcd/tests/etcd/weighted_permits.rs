//! Holds of several permits on a real etcd: taken as one hold, never more permits held than
//! the semaphore has, a heavy waiter let in once enough are free, and release (also by owner,
//! after an ambiguous attempt) giving all of them back.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, LockClient, LockKind, LockName, OwnerToken, Primitive,
    TryAcquire,
};
use distlock_testkit::shared;
use tokio::time::timeout;

/// How long anything that should happen may take on a loaded machine.
const SOON: Duration = Duration::from_secs(15);

async fn url() -> String {
    tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)")
}

fn fresh(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", OwnerToken::new())).expect("a name")
}

fn wait(seconds: u64) -> AcquireOptions {
    AcquireOptions::new().wait_for(Duration::from_secs(seconds))
}

/// The permits the live holds of `name` take, as `inspect` reports them.
async fn held_permits(client: &LockClient, name: &LockName) -> u32 {
    client
        .backend()
        .inspect(name, Primitive::Semaphore)
        .await
        .expect("inspect")
        .holders
        .iter()
        .map(|state| state.kind.weight())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_of_mixed_weights_never_take_more_than_the_permits() {
    let url = url().await;
    let name = fresh("mixed");
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut workers = Vec::new();
    for worker in 0..6u32 {
        let client = LockClient::new(support::connect(&url).await);
        let semaphore = client.semaphore(name.clone(), 4).expect("semaphores");
        let (inside, most) = (inside.clone(), most.clone());
        let weight = worker % 3 + 1;
        workers.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = if worker % 2 == 0 {
                    semaphore
                        .acquire_many_with(weight, &wait(120))
                        .await
                        .expect("permits")
                } else {
                    loop {
                        if let Some(guard) = semaphore.try_acquire_many(weight).await.expect("works") {
                            break guard;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(weight, Ordering::SeqCst);
                assert!(guard.release().await.expect("released"), "still ours");
            }
        }));
    }
    for worker in workers {
        worker.await.expect("a worker finished");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 4, "{most} permits of 4 held at once");
    assert!(most >= 2, "holds overlapped at all ({most})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_three_waiter_gets_in_once_three_are_free() {
    let url = url().await;
    let client = LockClient::new(support::connect(&url).await);
    let name = fresh("heavy");
    let semaphore = client.semaphore(name.clone(), 4).expect("semaphores");
    let mut singles = Vec::new();
    for _ in 0..3 {
        singles.push(semaphore.try_acquire().await.expect("works").expect("free"));
    }
    assert!(
        semaphore.try_acquire_many(3).await.expect("works").is_none(),
        "one permit free: no room for three"
    );
    let heavy = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            semaphore
                .acquire_many_with(3, &wait(60))
                .await
                .expect("three permits")
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!heavy.is_finished(), "one permit free: the waiter waits");
    assert!(singles.pop().expect("a guard").release().await.expect("released"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!heavy.is_finished(), "two permits free: the waiter waits");
    assert!(singles.pop().expect("a guard").release().await.expect("released"));
    let heavy = timeout(SOON, heavy)
        .await
        .expect("in once three are free")
        .expect("joined");
    assert_eq!(heavy.lease().kind(), LockKind::permits(4, 3));
    assert_eq!(held_permits(&client, &name).await, 4, "3 + 1 held");
    assert!(semaphore.try_acquire().await.expect("works").is_none(), "full");
    assert!(heavy.release().await.expect("released"));
    assert_eq!(held_permits(&client, &name).await, 1, "all three given back");
    assert!(singles.pop().expect("a guard").release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_weighted_hold_frees_all_its_permits() {
    let url = url().await;
    let client = LockClient::new(support::connect(&url).await);
    let other = LockClient::new(support::connect(&url).await);
    let name = fresh("whole");
    let semaphore = client.semaphore(name.clone(), 3).expect("semaphores");
    let all = semaphore.try_acquire_many(3).await.expect("works").expect("free");
    assert_eq!(held_permits(&client, &name).await, 3);
    let theirs = other.semaphore(name.clone(), 3).expect("semaphores");
    assert!(
        theirs.try_acquire().await.expect("works").is_none(),
        "all three are taken"
    );
    assert!(all.release().await.expect("released"));
    let again = theirs
        .try_acquire_many(3)
        .await
        .expect("works")
        .expect("all three are free");
    assert!(again.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_weighted_attempt_cleaned_up_by_owner_frees_all_of_it() {
    let url = url().await;
    let raw = support::connect(&url).await;
    let client = LockClient::new(support::connect(&url).await);
    let name = fresh("ambiguous");
    let kind = LockKind::permits(3, 2);
    let attempt = Attempt::new(name.clone(), kind, OwnerToken::new(), Duration::from_secs(30));
    let sent_at = tokio::time::Instant::now();
    let TryAcquire::Acquired(lease) = raw.attempt(&attempt).await.expect("works") else {
        panic!("the semaphore is free");
    };
    assert_eq!(lease.kind(), kind);
    let semaphore = client.semaphore(name.clone(), 3).expect("semaphores");
    assert!(
        semaphore.try_acquire_many(2).await.expect("works").is_none(),
        "two of three are held"
    );
    // Its caller saw an error: it cleans up by owner.
    let cleanup = attempt.cleanup_lease(sent_at);
    assert!(raw.release(&cleanup).await.expect("works"), "found by owner");
    let all = semaphore
        .try_acquire_many(3)
        .await
        .expect("works")
        .expect("all three are free");
    assert!(all.release().await.expect("released"));
}
