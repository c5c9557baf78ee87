//! Handing the mutex to its first queued waiter in the release: the release script sets the
//! lock to the waiter's id (an owner token) for what is left of the waiter's stay and draws
//! its fencing token, and the publish tells the waiter, which then holds the lock without a
//! round trip of its own. What the handoff keeps on one server (the waiter's id as owner, the
//! token drawn at release, the claim and its first renewal); what a user relies on when a
//! waiter dies, its wait ends, its notification or the release's reply is lost is checked
//! on every store by conformance cases c59 to c62.

use crate::support;

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

/// Queues a waiter of `waiter` on `lock` (held): its watch and its id.
async fn queue(waiter: &RedisLock, lock: &LockName, stay: Duration) -> (distlock_core::ReleaseWatch, String) {
    let watch = waiter.watch(lock, Primitive::Mutex).await.expect("watches");
    let id = watch.waiter().expect("a waiter's watch").to_string();
    let queued = waiter
        .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, stay))
        .await
        .expect("answered");
    assert!(matches!(queued, TryAcquire::Held(_)), "{queued:?}");
    (watch, id)
}

/// Polls until the lock's owner is `owner` (`None`: free), for up to `limit`.
async fn until_owner(lock: &RedisLock, name: &LockName, owner: Option<&str>, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = lock.inspect_lock(name).await.expect("inspects");
        if state.owner.as_deref() == owner {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after {limit:?} the lock is {state:?}, not owned by {owner:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The claim a release sets for a waiter that never takes the lock up (its process died, or
/// it missed the publish): the shortest claim when its stay is shorter, after which the lock
/// is free. (The next waiter getting in after a dead one is conformance case c59.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_waiter_that_died_is_claimed_for_the_shortest_claim() {
    let server = support::start_server().await;
    let url = server.url();
    let holder = RedisLock::connect(&url).await.expect("connects");
    let dead = RedisLock::connect(&url).await.expect("connects");
    let lock = name("dead");
    let held = acquired(holder.try_acquire(&lock, OwnerToken::new(), TTL).await);
    // Queued for a stay of 1 s, then never heard of again (its watch is leaked, as a process
    // that died leaves it: no leaving).
    let (watch, dead_id) = queue(&dead, &lock, Duration::from_secs(1)).await;
    std::mem::forget(watch);

    assert!(holder.release(&held).await.expect("releases"));
    let state = holder.inspect_lock(&lock).await.expect("inspects");
    assert_eq!(state.owner.as_deref(), Some(dead_id.as_str()), "{state:?}");
    let claimed = state.remaining.expect("a claim with a TTL");
    // The shortest claim (5 s), its stay of 1 s being shorter.
    assert!(claimed <= Duration::from_secs(5), "claimed for {claimed:?}");
    assert!(
        state.fencing > held.fencing_token(),
        "{state:?} after {:?}",
        held.fencing_token()
    );
    until_owner(&holder, &lock, None, Duration::from_secs(10)).await;
}

fn lock_name(label: &str) -> String {
    format!("handoff-{label}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_missed_the_publish_finds_the_lock_its_own() {
    let server = support::start_server().await;
    let url = server.url();
    let holder = RedisLock::connect(&url).await.expect("connects");
    let waiter = RedisLock::connect(&url).await.expect("connects");
    let lock = name("missed");
    let held = acquired(holder.try_acquire(&lock, OwnerToken::new(), TTL).await);
    // Queued without listening: the release's publish reaches no one.
    let id = OwnerToken::new().to_string();
    let queued = waiter
        .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, STAY))
        .await
        .expect("answered");
    assert!(matches!(queued, TryAcquire::Held(_)), "{queued:?}");
    assert!(holder.release(&held).await.expect("releases"));
    let state = holder.inspect_lock(&lock).await.expect("inspects");
    assert_eq!(state.owner.as_deref(), Some(id.as_str()), "{state:?}");

    // Its next attempt (a new owner token, as every attempt has) finds the lock its own: held
    // under its id, with the token the release drew, for its TTL now.
    let lease = acquired(
        waiter
            .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, STAY))
            .await,
    );
    assert_eq!(lease.owner().to_string(), id);
    assert_eq!(lease.fencing_token(), state.fencing);
    let now = holder.inspect_lock(&lock).await.expect("inspects");
    assert!(now.remaining.expect("a TTL") > STAY, "{now:?}");
    assert!(waiter.release(&lease).await.expect("releases"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_over_is_renewed_to_its_ttl_by_its_first_renewal() {
    let server = support::start_server().await;
    let url = server.url();
    let holder = distlock_core::LockClient::new(RedisLock::connect(&url).await.expect("connects"));
    let waiter = distlock_core::LockClient::new(RedisLock::connect(&url).await.expect("connects"));
    let inspector = RedisLock::connect(&url).await.expect("connects");
    let opts = distlock_core::AcquireOptions::new()
        .ttl(TTL)
        .wait_for(Duration::from_secs(30));
    let held = holder
        .try_acquire_with(lock_name("renewed"), &opts)
        .await
        .expect("answers")
        .expect("free");
    let wait = {
        let opts = opts.clone();
        tokio::spawn(async move {
            waiter
                .acquire_with(lock_name("renewed"), &opts)
                .await
                .expect("acquires")
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await; // queued
    assert!(held.release().await.expect("releases"));
    let guard = wait.await.expect("joined");
    let lock = name("renewed");
    let state = inspector.inspect_lock(&lock).await.expect("inspects");
    assert_eq!(state.owner, Some(guard.lease().owner().to_string()), "{state:?}");
    // Handed over for a claim of 5 s (the waiter's stay is shorter), then
    // renewed to the TTL by the guard's first renewal, well before that claim ends.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(!guard.is_lost(), "the guard lost its lock");
    let state = inspector.inspect_lock(&lock).await.expect("inspects");
    assert_eq!(state.owner, Some(guard.lease().owner().to_string()), "{state:?}");
    assert!(
        state.remaining.expect("a TTL") > Duration::from_secs(20),
        "{state:?}"
    );
    assert!(guard.release().await.expect("releases"));
}

/// A waiter of a client of an earlier version (its id a random owner token, a version-4 UUID)
/// listens on the lock's channel alone: a release hands it the lock and tells it there. A
/// waiter of this version is told on its client's channel beside it, and only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_an_earlier_version_hears_its_grant_on_the_lock_s_channel() {
    use futures::StreamExt;

    let server = support::start_server().await;
    let url = server.url();
    let holder = RedisLock::connect(&url).await.expect("connects");
    let lock = name("earlier");
    let mut listener = redis::Client::open(url.as_str())
        .expect("valid")
        .get_async_pubsub()
        .await
        .expect("pub/sub");
    listener
        .subscribe(format!("distlock:released:{}", lock.as_str()))
        .await
        .expect("subscribes");

    for earlier in [true, false] {
        let held = acquired(holder.try_acquire(&lock, OwnerToken::new(), TTL).await);
        let (_watch, id) = if earlier {
            let id = OwnerToken::new().to_string();
            let queued = holder
                .attempt(&Attempt::mutex(lock.clone(), OwnerToken::new(), TTL).waiting(&id, STAY))
                .await
                .expect("answered");
            assert!(matches!(queued, TryAcquire::Held(_)), "{queued:?}");
            (None, id)
        } else {
            let (watch, id) = queue(&holder, &lock, STAY).await;
            (Some(watch), id)
        };
        assert!(holder.release(&held).await.expect("releases"));
        let state = holder.inspect_lock(&lock).await.expect("inspects");
        assert_eq!(
            state.owner.as_deref(),
            Some(id.as_str()),
            "handed over: {state:?}"
        );
        let heard = tokio::time::timeout(Duration::from_millis(500), listener.on_message().next())
            .await
            .ok()
            .flatten()
            .map(|message| message.get_payload::<String>().expect("text"));
        if earlier {
            let heard = heard.expect("the grant on the lock's channel");
            assert!(heard.starts_with(&format!("grant:{id}:")), "{heard}");
        } else {
            assert_eq!(
                heard, None,
                "a grant to a waiter of this version on the lock's channel"
            );
        }
        // Given back: the lock's holder is the waiter's id.
        let owner: OwnerToken = id.parse().expect("an owner token");
        let lease = Lease::new(lock.clone(), owner, TTL, tokio::time::Instant::now());
        assert!(holder.release(&lease).await.expect("releases"));
    }
}
