//! The client's lease on a real etcd: kept alive in the background for as long as the client
//! lives, so a held lock outlives the lease's TTL.

use crate::support;

use distlock_core::LockClient;
use distlock_testkit::shared;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_outlives_its_lease_ttl() {
    let url = tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)");
    let backend = support::connect(&url).await;
    let lease = backend.lease_id().expect("a lease is granted on connect");
    let holder = LockClient::new(backend.clone());
    let other = LockClient::new(support::connect(&url).await);
    let guard = holder
        .try_acquire("outlives-its-lease")
        .await
        .expect("try")
        .expect("free");
    // Three TTLs: only keep-alives keep the lease (and so the lock) past the first.
    tokio::time::sleep(support::LEASE_TTL * 3).await;
    assert!(!guard.is_lost(), "the lock was lost: {:?}", guard.lost().await);
    assert_eq!(backend.lease_id(), Some(lease), "the lease was replaced");
    assert!(
        other
            .try_acquire("outlives-its-lease")
            .await
            .expect("try")
            .is_none(),
        "another client took a lock its holder keeps"
    );
    assert!(guard.release().await.expect("released"), "still ours at release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_of_more_holds_than_a_transaction_takes_confirms_each() {
    use distlock_core::{Attempt, DistributedLock, LockName, OwnerToken, TryAcquire};
    let url = tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)");
    let backend = support::connect(&url).await;
    let run = OwnerToken::new();
    // etcd takes at most 128 operations in one transaction (its --max-txn-ops default).
    let mut leases = Vec::new();
    for i in 0..300 {
        let name = LockName::new(format!("renew-many-{run}-{i}")).expect("a name");
        let attempt = Attempt::mutex(name, OwnerToken::new(), support::LEASE_TTL);
        match backend.attempt(&attempt).await.expect("attempt") {
            TryAcquire::Acquired(lease) => leases.push(lease),
            TryAcquire::Held(holder) => panic!("a fresh name is held: {holder:?}"),
        }
    }
    let renewed = backend.renew(&leases).await;
    assert_eq!(renewed.len(), leases.len());
    for (i, result) in renewed.into_iter().enumerate() {
        let kept = result.unwrap_or_else(|e| panic!("hold {i}: the renewal failed: {e}"));
        assert!(kept.is_some(), "hold {i}: reported not ours");
    }
    for lease in &leases {
        assert!(backend.release(lease).await.expect("released"));
    }
}
