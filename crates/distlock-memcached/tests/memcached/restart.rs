//! A server restarted while locks are held: memcached forgets them and restarts its CAS
//! counter, so a new holder's item can carry the very CAS an old lease remembers. Old holders
//! must learn of the loss at their next renewal and never touch the new holders' locks.

use crate::support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Lease, LockClient, LockName, LossReason, OwnerToken,
    TryAcquire,
};
use distlock_memcached::MemcachedLock;
use distlock_testkit::MemcachedOptions;

fn cas(lease: &Lease) -> u64 {
    lease
        .handle()
        .and_then(|h| h.strip_prefix("cas="))
        .and_then(|h| h.split(';').next())
        .and_then(|c| c.parse().ok())
        .expect("a CAS handle")
}

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
async fn restart_frees_locks_and_old_holders_learn_it_without_harm() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let url = server.url();
    let (a, b) = (support::lock(&url), support::lock(&url));
    let raw_name = LockName::new("restart-raw").expect("valid");
    // The first write on a fresh server: after the restart, B's first write gets the same CAS.
    let old = take(&a, &raw_name).await;

    let ttl = Duration::from_secs(3);
    let names: Vec<LockName> = (0..5)
        .map(|i| LockName::new(format!("restart-guard-{i}")).expect("valid"))
        .collect();
    let client_a = LockClient::new(a.clone());
    let mut guards_a = Vec::new();
    for name in &names {
        guards_a.push(
            client_a
                .acquire_with(name, &AcquireOptions::new().ttl(ttl))
                .await
                .expect("A acquires"),
        );
    }

    let server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.kill().expect("kill -9");
        server.restart().expect("restart");
        server
    })
    .await
    .expect("joined");

    // The restart freed everything; B takes the raw lock first, reusing the old CAS value.
    let new = take(&b, &raw_name).await;
    println!("old lease CAS {} / new lease CAS {}", cas(&old), cas(&new));
    assert_eq!(cas(&old), cas(&new), "the test expects the CAS values to collide");
    assert!(
        a.extend(&old, Duration::from_secs(30))
            .await
            .expect("works")
            .is_none(),
        "the old lease must not extend the new holder's lock despite the equal CAS"
    );
    assert!(
        !a.release(&old).await.expect("works"),
        "the old lease must not release the new holder's lock despite the equal CAS"
    );
    let state = b.inspect_lock(&raw_name).await.expect("works");
    assert_eq!(state.owner, Some(new.owner().to_string()), "B still holds it");

    // B takes the guarded names too, before A's watchdog runs again.
    let client_b = LockClient::new(b.clone());
    let mut guards_b = Vec::new();
    for name in &names {
        guards_b.push(
            client_b
                .try_acquire_with(name, &AcquireOptions::new().ttl(Duration::from_secs(30)))
                .await
                .expect("works")
                .expect("the restart freed A's lock"),
        );
    }
    for guard in &guards_a {
        let reason = tokio::time::timeout(ttl + Duration::from_secs(2), guard.lost())
            .await
            .expect("A's guard reports the loss at its next renewal, before its TTL ends");
        assert_eq!(reason, LossReason::NotOwned);
    }
    for guard in guards_a {
        assert!(!guard.release().await.expect("works"), "A no longer owns it");
    }
    for guard in guards_b {
        assert!(!guard.is_lost());
        assert!(guard.release().await.expect("works"), "B's locks were untouched");
    }
    assert!(b.release(&new).await.expect("works"));
    drop(server);
}
