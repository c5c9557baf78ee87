//! Upgradeable reads against a real memcached: one upgradeable reader at a time beside plain
//! readers, an upgrade that waits for the plain readers with no writer in between, and the
//! hold it turns into (the write lock, in the same record rewrite).

use crate::support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockKind, LockName, OwnerToken,
    Primitive,
};
use distlock_memcached::MemcachedLock;

const PATIENT: Duration = Duration::from_secs(30);

/// A name no other test (or earlier run against the same server) uses.
fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", OwnerToken::new())
}

async fn client() -> LockClient {
    LockClient::new(support::lock(&support::shared_url().await))
}

async fn raw() -> MemcachedLock {
    support::lock(&support::shared_url().await)
}

fn waiting() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(PATIENT)
        .wait_for(PATIENT)
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
}

async fn kinds(name: &str) -> Vec<(LockKind, Option<String>)> {
    let mut holders: Vec<(LockKind, Option<String>)> = raw()
        .await
        .inspect_holders(&LockName::new(name).expect("valid"), Primitive::RwLock)
        .await
        .expect("inspect works")
        .into_iter()
        .map(|h| (h.kind, h.owner))
        .collect();
    holders.sort_by_key(|(kind, _)| kind.to_string());
    holders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memcached_backend_offers_upgradeable_reads() {
    assert!(raw().await.capabilities().upgradeable_reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_at_a_time_beside_plain_readers() {
    let name = fresh("upg-one");
    let (a, b) = (client().await, client().await);
    let lock_a = a.rw_lock(name.as_str()).expect("an rw lock");
    let lock_b = b.rw_lock(name.as_str()).expect("an rw lock");
    let upgradeable = lock_a.upgradeable_read().await.expect("taken");
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);
    assert!(
        lock_b.try_upgradeable_read().await.expect("works").is_none(),
        "one upgradeable reader at a time"
    );
    let reader = lock_b
        .try_read()
        .await
        .expect("works")
        .expect("plain readers share");
    assert!(
        lock_b.try_write().await.expect("works").is_none(),
        "no writer beside it"
    );
    let holders = kinds(&name).await;
    assert_eq!(
        holders.iter().map(|(kind, _)| *kind).collect::<Vec<_>>(),
        [LockKind::Read, LockKind::UpgradeableRead],
        "{holders:?}"
    );
    assert!(upgradeable.release().await.expect("works"));
    let next = lock_b
        .try_upgradeable_read()
        .await
        .expect("works")
        .expect("free for the next upgradeable reader");
    assert!(next.release().await.expect("works"));
    assert!(reader.release().await.expect("works"));
    let writer = lock_a.try_write().await.expect("works").expect("all gone");
    assert!(writer.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_after_the_readers_leave_becomes_the_write_hold() {
    let name = fresh("upg-after");
    let (a, b) = (client().await, client().await);
    let lock_a = a.rw_lock(name.as_str()).expect("an rw lock");
    let lock_b = b.rw_lock(name.as_str()).expect("an rw lock");
    let mut guard = lock_a.upgradeable_read().await.expect("taken");
    let read_lease = guard.lease();
    let reader = lock_b.read().await.expect("shares");
    assert!(
        !guard.try_upgrade().await.expect("works"),
        "a plain reader is still in"
    );
    assert!(!guard.is_upgraded());
    assert!(reader.release().await.expect("works"));
    assert!(guard.try_upgrade().await.expect("works"), "no reader left");
    assert!(guard.is_upgraded());
    assert_eq!(guard.kind(), LockKind::Write);
    assert!(
        guard.fencing_token() > read_lease.fencing_token(),
        "the write hold has a token of its own"
    );
    // One store record: the write hold, for the same owner, and no upgradeable read.
    assert_eq!(
        kinds(&name).await,
        [(LockKind::Write, Some(read_lease.owner().to_string()))]
    );
    let store = raw().await;
    assert!(
        store.extend(&read_lease, PATIENT).await.expect("works").is_none(),
        "the upgradeable read hold is gone"
    );
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "the writer keeps readers out"
    );
    assert!(lock_b.try_upgradeable_read().await.expect("works").is_none());
    assert!(
        guard.release().await.expect("works"),
        "released as the write hold"
    );
    assert!(kinds(&name).await.is_empty(), "everything is free");
    let writer = lock_b.try_write().await.expect("works").expect("free");
    assert!(writer.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_readers_and_no_writer_gets_in_between() {
    let name = fresh("upg-wait");
    let (a, b, c) = (client().await, client().await, client().await);
    let upgrader = a.rw_lock(name.as_str()).expect("an rw lock");
    let mut guard = upgrader.upgradeable_read().await.expect("taken");
    let reader = b
        .rw_lock(name.as_str())
        .expect("an rw lock")
        .read()
        .await
        .expect("shares");
    // A writer that waits all along.
    let writer = {
        let lock = c.rw_lock(name.as_str()).expect("an rw lock");
        tokio::spawn(async move { lock.write_with(&waiting()).await })
    };
    let upgrade = tokio::spawn(async move { guard.upgrade_with(&waiting()).await.map(|()| guard) });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!upgrade.is_finished(), "a plain reader is still in");
    assert!(!writer.is_finished());
    let late = b.rw_lock(name.as_str()).expect("an rw lock");
    assert!(
        late.try_read().await.expect("works").is_none(),
        "new readers stay out while the upgrade waits"
    );
    assert!(reader.release().await.expect("works"));
    let guard = tokio::time::timeout(PATIENT, upgrade)
        .await
        .expect("upgraded once the reader left")
        .expect("joined")
        .expect("upgraded");
    assert!(guard.is_upgraded());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !writer.is_finished(),
        "no writer gets in while the upgraded guard holds"
    );
    let token = guard.fencing_token();
    assert!(guard.release().await.expect("works"));
    let written = tokio::time::timeout(PATIENT, writer)
        .await
        .expect("the writer got in after the release")
        .expect("joined")
        .expect("the write lock");
    assert!(written.fencing_token() > token);
    assert!(written.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_upgradeable_readers_out() {
    let name = fresh("upg-writer-waits");
    let (a, b) = (client().await, client().await);
    let reader = a
        .rw_lock(name.as_str())
        .expect("an rw lock")
        .read()
        .await
        .expect("free");
    let writer = {
        let lock = b.rw_lock(name.as_str()).expect("an rw lock");
        tokio::spawn(async move { lock.write_with(&waiting()).await })
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let other = client().await;
    let lock = other.rw_lock(name.as_str()).expect("an rw lock");
    assert!(
        lock.try_upgradeable_read().await.expect("works").is_none(),
        "a writer waits: no new upgradeable reader"
    );
    assert!(reader.release().await.expect("works"));
    let written = tokio::time::timeout(PATIENT, writer)
        .await
        .expect("in time")
        .expect("joined")
        .expect("the write lock");
    assert!(written.release().await.expect("works"));
    let upgradeable = lock
        .try_upgradeable_read()
        .await
        .expect("works")
        .expect("free again");
    assert!(upgradeable.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_upgraded_guard_frees_everything() {
    let name = fresh("upg-drop");
    let (a, b) = (client().await, client().await);
    let mut guard = a
        .rw_lock(name.as_str())
        .expect("an rw lock")
        .upgradeable_read()
        .await
        .expect("taken");
    guard.upgrade().await.expect("nobody else reads");
    drop(guard);
    let lock = b.rw_lock(name.as_str()).expect("an rw lock");
    let writer = lock.write_with(&waiting()).await.expect("free once released");
    assert!(writer.release().await.expect("works"));
    assert!(kinds(&name).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_waits_keeps_new_readers_out() {
    let name = fresh("upg-keeps-out");
    let (a, b) = (client().await, client().await);
    let mut guard = a
        .rw_lock(name.as_str())
        .expect("an rw lock")
        .upgradeable_read()
        .await
        .expect("taken");
    let lock_b = b.rw_lock(name.as_str()).expect("an rw lock");
    let reader = lock_b.read().await.expect("shares");
    let upgrade = tokio::spawn(async move { guard.upgrade_with(&waiting()).await.map(|()| guard) });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!upgrade.is_finished(), "a plain reader is still in");
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "the waiting upgrade keeps new readers out, as a waiting writer does"
    );
    assert!(reader.release().await.expect("works"));
    let guard = tokio::time::timeout(PATIENT, upgrade)
        .await
        .expect("upgraded once the reader left")
        .expect("joined")
        .expect("upgraded");
    assert!(guard.release().await.expect("works"));
    let reader = lock_b.try_read().await.expect("works").expect("free again");
    assert!(reader.release().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgradeable_read_is_a_hold_of_the_read_write_lock_not_the_mutex() {
    let store = raw().await;
    let name = LockName::new(fresh("upg-raw")).expect("valid");
    let owner = OwnerToken::new();
    let lease = match store
        .try_acquire_kind(&name, LockKind::UpgradeableRead, owner, PATIENT, None)
        .await
        .expect("works")
    {
        distlock_core::TryAcquire::Acquired(lease) => lease,
        held => panic!("free: {held:?}"),
    };
    assert_eq!(lease.kind(), LockKind::UpgradeableRead);
    assert!(
        !store.inspect_lock(&name).await.expect("works").is_held(),
        "the mutex of the same name stays free"
    );
    assert_eq!(
        kinds(name.as_str()).await,
        [(LockKind::UpgradeableRead, Some(owner.to_string()))]
    );
    assert!(store.release(&lease).await.expect("works"));
    assert!(kinds(name.as_str()).await.is_empty());
}
