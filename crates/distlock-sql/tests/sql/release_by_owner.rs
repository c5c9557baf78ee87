//! `release` of a bare lease (name, owner, TTL; no fencing token, no handle), as the core's
//! cleanup after an ambiguous acquire sends it: it frees the lock only if the store records
//! that owner, on SQLite and on MariaDB.
#![cfg(all(feature = "sqlite", feature = "mysql"))]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, TryAcquire};
use distlock_sql::SqlLock;
use tokio::time::Instant;

async fn release_by_owner_only(lock: &SqlLock) {
    let ttl = Duration::from_secs(30);
    let name = LockName::new(format!("bare-{}", uuid::Uuid::new_v4())).expect("valid");
    let owner = OwnerToken::new();
    match lock.try_acquire(&name, owner, ttl).await.expect("works") {
        TryAcquire::Acquired(lease) => assert!(lease.fencing_token().is_some()),
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
    let bare = |owner| Lease::new(name.clone(), owner, ttl, Instant::now());
    // Someone else's token frees nothing.
    assert!(!lock.release(&bare(OwnerToken::new())).await.expect("works"));
    assert!(lock.inspect_lock(&name).await.expect("works").is_held());
    // The holder's token frees it, once.
    assert!(lock.release(&bare(owner)).await.expect("works"));
    assert!(!lock.inspect_lock(&name).await.expect("works").is_held());
    assert!(!lock.release(&bare(owner)).await.expect("works"));
    // A bare release of a name never acquired is a clean "not held".
    let never = LockName::new(format!("never-{}", uuid::Uuid::new_v4())).expect("valid");
    let lease = Lease::new(never, owner, ttl, Instant::now());
    assert!(!lock.release(&lease).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    release_by_owner_only(&SqlLock::connect(&url).await.expect("opens")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    let url = match std::env::var(distlock_testkit::shared::MYSQL_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
            .await
            .expect("the starter thread")
            .expect("the shared mariadbd starts"),
    };
    release_by_owner_only(&SqlLock::connect(&url).await.expect("connects")).await;
}
