//! Handing the mutex to its first queued waiter in the release: the release script sets the
//! lock to the waiter's id (an owner token) for what is left of the waiter's stay and draws
//! its fencing token, and the publish tells the waiter, which then holds the lock without a
//! round trip of its own. Each failure case of a handoff on one server.

mod support;

use std::time::Duration;

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, Primitive, TryAcquire,
};
use distlock_redis::RedisLock;

const TTL: Duration = Duration::from_secs(30);
const STAY: Duration = Duration::from_secs(10);

fn name(label: &str) -> LockName {
    LockName::new(format!("handoff-{label}")).expect("valid")
}

fn acquired(outcome: distlock_core::Result<TryAcquire>) -> Lease {
    match outcome.expect("answered") {
        TryAcquire::Acquired(lease) => lease,
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_first_queued_waiter() {
    let server = support::start_server().await;
    let url = server.url();
    let holder = RedisLock::connect(&url).await.expect("connects");
    let waiter = RedisLock::connect(&url).await.expect("connects");
    let lock = name("first");
    let held = acquired(holder.try_acquire(&lock, OwnerToken::new(), TTL).await);

    let mut watch = waiter.watch(&lock, Primitive::Mutex).await.expect("watches");
    let id = watch.waiter().expect("a waiter's watch").to_string();
    let queued = waiter
        .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, STAY))
        .await
        .expect("answered");
    assert!(matches!(queued, TryAcquire::Held(_)), "{queued:?}");

    assert!(holder.release(&held).await.expect("releases"));
    // Handed over in the release: held by the waiter before it does anything.
    let state = holder.inspect_lock(&lock).await.expect("inspects");
    assert_eq!(state.owner.as_deref(), Some(id.as_str()), "{state:?}");
    let granted = state.fencing.expect("a fencing token");
    assert!(granted > held.fencing_token().expect("fenced"), "{state:?}");

    // The publish wakes it, and its next attempt holds under its waiter id, with the
    // token the release drew.
    let woke = watch.wait(Duration::from_secs(5)).await;
    assert!(matches!(woke, distlock_core::Woke::Released), "{woke:?}");
    let lease = acquired(
        waiter
            .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, STAY))
            .await,
    );
    assert_eq!(lease.owner().to_string(), id);
    assert_eq!(lease.fencing_token(), Some(granted));
    assert!(waiter.release(&lease).await.expect("releases"));
    assert!(holder
        .inspect_lock(&lock)
        .await
        .expect("inspects")
        .owner
        .is_none());
}
