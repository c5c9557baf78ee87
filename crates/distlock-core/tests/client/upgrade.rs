//! An upgrade is only ever an upgrade: it never becomes a plain write after its upgradeable
//! read was lost, and a timed-out upgrade leaves the read hold in place.

use std::time::Duration;

use distlock_core::{AcquireOptions, Error, LockClient, LockKind, MemoryLock};

#[tokio::test(start_paused = true)]
async fn an_upgrade_stops_when_its_read_hold_is_lost_and_takes_no_write_lock() {
    let client = LockClient::new(MemoryLock::new());
    let lock = client.rw_lock("config").expect("offered");
    // The upgradeable read is not renewed: it is lost at its local deadline, 1 s in.
    let unrenewed = AcquireOptions::new()
        .ttl(Duration::from_secs(1))
        .auto_renew(false);
    let mut upgradeable = lock.upgradeable_read_with(&unrenewed).await.expect("free");
    let reader = lock.read().await.expect("readers share");

    let waited = upgradeable
        .upgrade_with(&AcquireOptions::new().wait_for(Duration::from_secs(30)))
        .await;
    assert!(
        matches!(waited, Err(Error::LockLost { .. })),
        "the upgrade must stop when the read hold is lost: {waited:?}"
    );
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);

    // Once the reader goes and the store lets the lapsed read hold go (the guard said lost a
    // safety margin before), nothing of the failed upgrade holds the lock: a writer gets in.
    reader.release().await.expect("answered");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writer = lock.try_write().await.expect("answered");
    assert!(writer.is_some(), "a failed upgrade left a write hold behind");
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_upgrade_keeps_the_upgradeable_read() {
    let client = LockClient::new(MemoryLock::new());
    let lock = client.rw_lock("config").expect("offered");
    let mut upgradeable = lock.upgradeable_read().await.expect("free");
    let reader = lock.read().await.expect("readers share");
    let waited = upgradeable
        .upgrade_with(&AcquireOptions::new().wait_for(Duration::from_millis(500)))
        .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    assert!(!upgradeable.is_lost());
    assert!(
        lock.try_upgradeable_read().await.expect("answered").is_none(),
        "still ours"
    );
    reader.release().await.expect("answered");
    assert!(upgradeable.try_upgrade().await.expect("answered"));
    assert!(
        lock.try_read().await.expect("answered").is_none(),
        "the writer keeps readers out"
    );
    assert!(upgradeable.release().await.expect("answered"));
}
