//! The public API on SQLite: custom tables, the DBA path (no DDL at runtime), inspection,
//! fencing across release/expiry/steal, and the embedded default's location.
#![cfg(feature = "sqlite")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

async fn take(lock: &SqlLock, name: &LockName, ttl: Duration) -> distlock_core::Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{name:?} is held: {h:?}"),
    }
}

#[tokio::test]
async fn custom_table_inspect_and_fencing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = SqlConfig::sqlite(dir.path().join("a/b/locks.db"))
        .with_table("app_locks")
        .expect("a plain name");
    assert!(config.ddl().contains("\"app_locks\""), "{}", config.ddl());
    let a = config.clone().build().await.expect("opens");
    let b = config.build().await.expect("opens");
    let name = LockName::new("inventory:sku-42").expect("valid");

    assert!(!a.inspect_lock(&name).await.expect("works").is_held());
    let first = take(&a, &name, Duration::from_secs(30)).await;
    let state = b.inspect_lock(&name).await.expect("works");
    assert_eq!(state.owner, Some(first.owner().to_string()));
    assert_eq!(state.fencing, first.fencing_token());
    assert!(state.remaining.is_some_and(|r| r <= Duration::from_secs(30)));
    match b
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
        .await
        .expect("works")
    {
        TryAcquire::Held(h) => assert!(h.remaining.is_some_and(|r| r > Duration::from_secs(25))),
        TryAcquire::Acquired(_) => panic!("held by a"),
    }

    // Release keeps the row and its version: the next token is larger.
    assert!(a.release(&first).await.expect("works"));
    let state = b.inspect_lock(&name).await.expect("works");
    assert!(!state.is_held());
    assert_eq!(state.fencing, first.fencing_token());
    let second = take(&b, &name, Duration::from_millis(50)).await;
    assert!(second.fencing_token() > first.fencing_token());

    // Expiry: taken over by the next client, with a larger token again.
    tokio::time::sleep(Duration::from_millis(80)).await;
    let third = take(&a, &name, Duration::from_secs(30)).await;
    assert!(third.fencing_token() > second.fencing_token());
    assert!(b
        .extend(&second, Duration::from_secs(5))
        .await
        .expect("works")
        .is_none());
    assert!(!b.release(&second).await.expect("works"));
    let renewed = a
        .extend(&third, Duration::from_secs(60))
        .await
        .expect("works")
        .expect("still ours");
    assert_eq!(renewed.fencing_token(), third.fencing_token());
    assert!(a.release(&renewed).await.expect("works"));
}

#[tokio::test]
async fn without_runtime_ddl_the_table_must_exist() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = SqlConfig::sqlite(dir.path().join("locks.db")).with_create_table(false);
    // Refused at once, saying what to run, rather than failing at the first lock.
    let missing = config.clone().build().await;
    assert!(
        matches!(&missing, Err(Error::InvalidConfig { reason }) if reason.contains("distlock schema")),
        "{missing:?}"
    );
    // What a DBA would run.
    let admin = SqlConfig::sqlite(dir.path().join("locks.db"))
        .build()
        .await
        .expect("opens");
    drop(admin);
    let lock = config.build().await.expect("opens on the DBA's schema");
    let name = LockName::new("x").expect("valid");
    take(&lock, &name, Duration::from_secs(1)).await;
}

#[tokio::test]
async fn bad_configs_are_typed_errors() {
    for url in [
        "",
        "sqlite://",
        "sqlite::memory:",
        "oracle://x/y",
        "postgres://u:p@h:x/db",
        "mysql://u:p@h:x/db",
    ] {
        assert!(
            matches!(SqlLock::connect(url).await, Err(Error::InvalidConfig { .. })),
            "{url:?}"
        );
    }
    let config = SqlConfig::from_url("sqlite://x.db").expect("valid");
    assert!(config.clone().with_table("x; DROP TABLE y").is_err());
    assert!(config.with_table("").is_err());
}

#[tokio::test]
async fn absurd_ttls_are_refused_not_panics() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let lock = SqlConfig::sqlite(dir.path().join("locks.db"))
        .build()
        .await
        .expect("opens");
    let name = LockName::new("ttl").expect("valid");
    for ttl in [Duration::ZERO, Duration::MAX, Duration::from_secs(31 * 24 * 3600)] {
        let outcome = lock.try_acquire(&name, OwnerToken::new(), ttl).await;
        assert!(
            matches!(outcome, Err(Error::InvalidOptions { .. })),
            "{ttl:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn fencing_survives_a_deleted_row() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("locks.db");
    let lock = SqlConfig::sqlite(&path).build().await.expect("opens");
    let name = LockName::new("force-unlocked").expect("valid");
    let admin = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("opens");
    let mut last = None;
    // Many rounds back to back: several fall within one millisecond of the database's clock.
    for _ in 0..50 {
        let lease = take(&lock, &name, Duration::from_secs(30)).await;
        assert!(
            lease.fencing_token() > last,
            "{:?} after {last:?}",
            lease.fencing_token()
        );
        last = lease.fencing_token();
        // An operator's "force unlock": the row is deleted behind the holder's back.
        sqlx::query("DELETE FROM distlock_locks")
            .execute(&admin)
            .await
            .expect("deletes");
        assert!(!lock.release(&lease).await.expect("works"));
    }
    admin.close().await;
}
