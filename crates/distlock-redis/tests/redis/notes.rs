//! A mutex holder's note and leader election on one real `redis-server`: the note is stored
//! only by the holder, read only beside its owner's hold, and carries a leader's value; one
//! leader at a time, terms going up, a resigned or silent leader replaced.

use crate::support::name;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, Primitive,
    TryAcquire,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::shared;
use futures::StreamExt;

async fn connect() -> RedisLock {
    let url = tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts");
    RedisConfig::from_url(&url)
        .expect("valid")
        .build()
        .await
        .expect("connects")
}

async fn note_of(lock: &RedisLock, name: &LockName) -> Option<String> {
    lock.inspect(name, Primitive::Mutex)
        .await
        .expect("answered")
        .into_lock()
        .note
}

#[tokio::test]
async fn a_note_is_stored_by_the_holder_only_and_read_only_beside_its_hold() {
    let lock = connect().await;
    let name = name("note");
    let ttl = Duration::from_millis(300);
    let TryAcquire::Acquired(first) = lock
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("answered")
    else {
        panic!("the lock is free");
    };
    assert!(lock.set_note(&first, "host-a:1").await.expect("answered"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("host-a:1"));
    // A note with a line break and any bytes of UTF-8 comes back whole.
    assert!(lock.set_note(&first, "host-a:1\nzone é").await.expect("answered"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("host-a:1\nzone é"));

    // Expired: the next holder does not show the first one's note, and the first one can no
    // longer leave one.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let TryAcquire::Acquired(second) = lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(5))
        .await
        .expect("answered")
    else {
        panic!("the first hold expired");
    };
    assert_eq!(
        note_of(&lock, &name).await,
        None,
        "an earlier holder's note is never shown"
    );
    assert!(
        !lock.set_note(&first, "stale").await.expect("answered"),
        "a stale owner stores nothing"
    );
    assert_eq!(note_of(&lock, &name).await, None);
    assert!(lock.set_note(&second, "host-b:2").await.expect("answered"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("host-b:2"));
    assert!(lock.release(&second).await.expect("answered"));
    assert_eq!(note_of(&lock, &name).await, None, "a free lock shows no note");
}

#[tokio::test]
async fn one_leader_at_a_time_with_terms_going_up_and_observers_seeing_each() {
    let client =
        LockClient::new(connect().await).with_defaults(AcquireOptions::new().ttl(Duration::from_secs(2)));
    let election = client.election(name("election")).expect("offered");
    let mut changes = election.observe();

    let first = election.campaign("a:1").await.expect("leads");
    let seen = election.leader().await.expect("answered").expect("a leader");
    assert_eq!((seen.value.as_str(), seen.term), ("a:1", first.term()));
    assert!(election.try_campaign("b:2").await.expect("answered").is_none());
    assert_eq!(
        changes.next().await.expect("a change").expect("read").value,
        "a:1"
    );

    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("b:2").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_term = first.term();
    assert!(first.resign().await.expect("answered"));
    let second = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting candidate leads at once")
        .expect("joined")
        .expect("leads");
    assert!(
        second.term() > first_term,
        "{:?} after {first_term:?}",
        second.term()
    );
    let change = tokio::time::timeout(Duration::from_secs(5), changes.next())
        .await
        .expect("the observer hears of it")
        .expect("a change")
        .expect("read");
    assert_eq!((change.value.as_str(), change.term), ("b:2", second.term()));

    // A leader that goes silent (no renewal, no release) is replaced within its TTL.
    let silent = second.into_guard().leak();
    let replaced_at = tokio::time::Instant::now();
    let third = tokio::time::timeout(Duration::from_secs(10), election.campaign("c:3"))
        .await
        .expect("replaced within the TTL and a margin")
        .expect("leads");
    assert!(
        replaced_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        replaced_at.elapsed()
    );
    assert!(third.term() > silent.fencing_token());
    third.resign().await.expect("answered");
}
