//! A lock key holding another library's lock type (Redisson keeps a hash under the lock
//! name): `WRONGTYPE` on it means "held by a foreign owner", never an error that ends a wait.

use crate::support;
use crate::support::name;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, OwnerToken, TryAcquire,
};
use distlock_redis::{RedisConfig, Redlock, RedlockConfig};

/// What Redisson's `RLock` stores: a hash `{<uuid>:<thread id>: hold count}` with a TTL.
async fn redisson_hold(url: &str, key: &str, ttl: Duration) {
    let mut raw = support::raw(url).await.expect("raw");
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key)
        .arg("5f0b3c8e-0d6f-4a47-9d3c-6c1f6b7e2a10:1")
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(key)
        .arg(u64::try_from(ttl.as_millis()).expect("small"))
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("HSET");
}

async fn checks<L: DistributedLock + Clone + 'static>(lock: L, url_for_hash: &[String]) {
    let lock_name = name("redisson");
    for url in url_for_hash {
        redisson_hold(url, lock_name.as_str(), Duration::from_secs(30)).await;
    }
    let attempt = lock
        .try_acquire(&lock_name, OwnerToken::new(), Duration::from_secs(10))
        .await;
    assert!(
        matches!(attempt, Ok(TryAcquire::Held(_))),
        "a Redisson hash is a lock held by someone else: {attempt:?}"
    );
    let state = lock.inspect_lock(&lock_name).await.expect("inspects");
    assert!(state.is_held(), "{state:?}");
    assert_eq!(
        state.owner.as_deref(),
        Some("<hash>"),
        "inspect names the foreign key's type, read with its TTL in one script: {state:?}"
    );
    let bare = Lease::new(
        lock_name.clone(),
        OwnerToken::new(),
        Duration::from_secs(10),
        tokio::time::Instant::now(),
    );
    assert!(!lock.release(&bare).await.expect("works"), "not ours");
    assert!(
        lock.extend(&bare, Duration::from_secs(10))
            .await
            .expect("works")
            .is_none(),
        "not ours"
    );

    let client = LockClient::new(lock);
    let waited = client
        .acquire_with(
            lock_name.as_str(),
            &AcquireOptions::new().wait_for(Duration::from_millis(400)),
        )
        .await;
    assert!(
        matches!(waited, Err(Error::Timeout { .. })),
        "the wait runs to its deadline: {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_hash_is_held_by_a_foreign_owner() {
    let server = support::start_server().await;
    let lock = RedisConfig::from_url(&server.url())
        .expect("valid")
        .build()
        .await
        .expect("connects");
    checks(lock, &[server.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_hash_is_held_by_a_foreign_owner_on_redlock() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(distlock_testkit::RedisServer::url).collect();
    let lock: Redlock = RedlockConfig::new(&urls)
        .expect("valid")
        .build()
        .await
        .expect("builds");
    checks(lock, &urls).await;
}
