//! Renewals: the watchdog's pipelined `extend_many`, and recovery from a renewal that was
//! applied but whose reply never arrived (the lease still holds the previous CAS).

use crate::support;

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Error, Lease, LockName, OwnerToken, TryAcquire};
use distlock_memcached::{MemcachedConfig, MemcachedLock};

async fn take(lock: &MemcachedLock, name: &LockName) -> Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), Duration::from_secs(30))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{name:?} should be free: {h:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_many_renews_ours_and_reports_the_rest() {
    let url = support::shared_url().await;
    let lock = support::lock(&url);
    let run = OwnerToken::new().to_string();
    let names: Vec<LockName> = (0..150)
        .map(|i| LockName::new(format!("many-{run}-{i}")).expect("valid"))
        .collect();
    let mut leases = Vec::new();
    for name in &names {
        leases.push(take(&lock, name).await);
    }
    // Three are stolen behind our back; one lease comes from another backend.
    for lease in &leases[..3] {
        let reply = support::raw(
            lock.server_of(lease.name()),
            &format!("md {}\r\n", lock.lock_key(lease.name())),
        )
        .await
        .expect("raw delete");
        assert_eq!(reply, "HD");
    }
    let mut batch = leases.clone();
    batch.push(Lease::new(
        LockName::new("foreign").expect("valid"),
        OwnerToken::new(),
        Duration::from_secs(5),
        tokio::time::Instant::now(),
    ));
    let results = lock.renew(&batch).await;
    assert_eq!(results.len(), batch.len());
    for (i, result) in results.iter().enumerate() {
        match i {
            0..=2 => assert!(matches!(result, Ok(None)), "{i}: {result:?}"),
            150 => assert!(matches!(result, Err(Error::Backend { .. })), "{result:?}"),
            _ => {
                let renewed = result.as_ref().expect("works").as_ref().expect("still ours");
                assert_ne!(renewed.handle(), leases[i].handle(), "a new CAS");
            }
        }
    }
    for result in results.into_iter().take(150).skip(3) {
        let lease = result.expect("works").expect("ours");
        assert!(lock.release(&lease).await.expect("works"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_reply_was_lost_does_not_lose_the_lock() {
    let url = support::shared_url().await;
    let lock = MemcachedConfig::from_url(&url)
        .expect("valid")
        .build()
        .expect("valid");
    let name = LockName::new(format!("lost-reply-{}", OwnerToken::new())).expect("valid");
    let original = take(&lock, &name).await;
    // A renewal the holder never heard back from: the store has a new CAS, the holder still
    // has the old lease.
    let applied = lock
        .extend(&original, Duration::from_secs(30))
        .await
        .expect("works")
        .expect("ours");
    assert_ne!(applied.handle(), original.handle());
    let renewed = lock
        .extend(&original, Duration::from_secs(30))
        .await
        .expect("works")
        .expect("the item still holds our token, so the old lease recovers");
    let renewed_again = lock
        .renew(std::slice::from_ref(&original))
        .await
        .pop()
        .expect("one result")
        .expect("works")
        .expect("the pipelined renewal recovers too");
    assert_ne!(renewed.handle(), renewed_again.handle());
    // Someone else's lock is never adopted: after a release, the old lease finds nothing.
    assert!(
        lock.release(&original).await.expect("works"),
        "the old lease releases it"
    );
    let other = take(&lock, &name).await;
    assert!(!lock.release(&original).await.expect("works"));
    assert!(lock
        .extend(&original, Duration::from_secs(30))
        .await
        .expect("works")
        .is_none());
    assert!(lock.release(&other).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_gives_each_lease_the_error_once() {
    let mut server = support::start_server(distlock_testkit::MemcachedOptions::default()).await;
    let lock = support::lock(&server.url());
    let run = OwnerToken::new().to_string();
    let mut batch = Vec::new();
    for i in 0..2 {
        batch.push(take(&lock, &LockName::new(format!("batch-{run}-{i}")).expect("valid")).await);
    }
    server.pause().expect("paused");
    let results = lock.renew(&batch).await;
    server.resume().expect("resumed");
    assert_eq!(results.len(), 2);
    for result in results {
        let error = result.expect_err("the server did not answer");
        let message = error.to_string();
        assert!(matches!(error, Error::Unavailable { .. }), "{message}");
        assert_eq!(
            message.matches("memcached is unavailable").count(),
            1,
            "each lease's error names the store once: {message}"
        );
    }
}
