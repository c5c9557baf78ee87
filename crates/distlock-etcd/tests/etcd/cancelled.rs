//! A wait in line dropped while the transaction that puts its key in line is out leaves no
//! key behind: the key is deleted only once the cluster has answered that transaction, not
//! beside it (a delete sent beside it can be applied first and find nothing to delete).

use crate::support;

use std::time::Duration;

use distlock_core::{Attempt, DistributedLock, LockName, OwnerToken, TryAcquire};
use distlock_testkit::shared;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_dropped_mid_flight_leaves_no_key_in_line() {
    let url = tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)");
    let holder = support::connect(&url).await;
    let waiter = support::connect(&url).await;
    let name = LockName::new(format!("dropped-mid-flight-{}", OwnerToken::new())).expect("a name");
    let ttl = Duration::from_secs(30);
    let TryAcquire::Acquired(held) = holder
        .attempt(&Attempt::mutex(name.clone(), OwnerToken::new(), ttl))
        .await
        .expect("try")
    else {
        panic!("the lock is free");
    };
    // Dropped at points spread over the transaction's round trip, eight at a time so that
    // the member has several requests in hand when the drops come.
    for round in 0..100u64 {
        let waits = (0..8).map(|_| {
            let attempt = Attempt::mutex(name.clone(), OwnerToken::new(), ttl);
            let waiter = &waiter;
            async move {
                let deadline = Some(Instant::now() + Duration::from_secs(10));
                tokio::time::timeout(
                    Duration::from_micros(round * 30),
                    waiter.wait_queued(&attempt, deadline),
                )
                .await
            }
        });
        for waited in futures::future::join_all(waits).await {
            assert!(
                !matches!(waited, Ok(Ok(Some(_)))),
                "round {round}: the waiter got a lock that is held"
            );
        }
    }
    let prefix = holder.lock_prefix(&name);
    let mut left = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let listing = support::etcdctl(&url, &["get", &prefix, "--prefix", "--keys-only"])
            .await
            .expect("etcdctl lists the keys");
        left = listing
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect::<Vec<_>>();
        if left.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        left,
        vec![held.handle().expect("a key").to_owned()],
        "only the holder's key is left in line 10 s after the waits were dropped (the waiter's lease lives on)"
    );
    assert!(holder.release(&held).await.expect("released"));
}
