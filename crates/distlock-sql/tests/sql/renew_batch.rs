//! A batched renewal answers for each lease: ours and live renewed, taken over or expired not
//! ours, a lease listed twice renewed once and answered twice, a lease of another TTL, semaphore
//! permits and a read hold in the same batch renewed too, a released permit not. On SQLite and
//! on MariaDB (MySQL and SQLite renew a batch's leases in one statement per table and TTL).
#![cfg(all(feature = "mysql", feature = "sqlite"))]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockKind, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::shared::MYSQL_URL_ENV;

const TTL: Duration = Duration::from_secs(30);

fn unique(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", uuid::Uuid::new_v4())).expect("valid")
}

async fn take(lock: &SqlLock, name: &LockName, kind: LockKind, ttl: Duration) -> Lease {
    match lock
        .try_acquire_kind(name, kind, OwnerToken::new(), ttl, None)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{name} is free: {h:?}"),
    }
}

async fn each_lease_gets_its_answer(lock: SqlLock) {
    let short = Duration::from_millis(300);
    let (a, b, c) = (unique("a"), unique("b"), unique("c"));
    let ours_a = take(&lock, &a, LockKind::Exclusive, TTL).await;
    let ours_b = take(&lock, &b, LockKind::Exclusive, TTL).await;
    let other_ttl = take(&lock, &unique("d"), LockKind::Exclusive, TTL * 2).await;
    let permit = take(&lock, &unique("p"), LockKind::permit(2), TTL).await;
    let permit_too = take(&lock, &unique("q"), LockKind::permit(2), TTL).await;
    let read = take(&lock, &unique("r"), LockKind::Read, TTL).await;
    let permit_released = take(&lock, &unique("s"), LockKind::permit(2), TTL).await;
    assert!(lock.release(&permit_released).await.expect("works"));
    let released = take(&lock, &c, LockKind::Exclusive, TTL).await;
    assert!(lock.release(&released).await.expect("works"));
    let _theirs = take(&lock, &c, LockKind::Exclusive, TTL).await;
    // Two of one TTL, so that they go in one statement too (a lease alone of its TTL is
    // renewed by the single extend).
    let expired = take(&lock, &unique("e"), LockKind::Exclusive, short).await;
    let expired_too = take(&lock, &unique("f"), LockKind::Exclusive, short).await;
    tokio::time::sleep(short * 3).await;

    let batch = [
        ours_a.clone(),
        released,
        ours_b,
        expired,
        ours_a,
        expired_too,
        other_ttl,
        permit,
        permit_released,
        read,
        permit_too,
    ];
    let renewed: Vec<Option<Lease>> = lock
        .renew(&batch)
        .await
        .into_iter()
        .map(|r| r.expect("the database answers"))
        .collect();
    let answers: Vec<bool> = renewed.iter().map(Option::is_some).collect();
    assert_eq!(
        answers,
        [true, false, true, false, true, false, true, true, false, true, true],
        "ours renewed, taken over and expired not: {renewed:?}"
    );
    // Renewed for real: the holder's row says so to another client.
    let held = lock.try_acquire(&a, OwnerToken::new(), TTL).await.expect("works");
    assert!(matches!(held, TryAcquire::Held(_)), "{held:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_batch_answers_each_lease() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let lock = SqlConfig::sqlite(dir.path().join("locks.db"))
        .build()
        .await
        .expect("the database opens");
    each_lease_gets_its_answer(lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_batch_answers_each_lease() {
    let url = match std::env::var(MYSQL_URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
        Some(url) => url,
        None => tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
            .await
            .expect("the starter thread")
            .expect("the shared mariadbd starts (install mariadb-server)"),
    };
    let lock = SqlConfig::from_url(&url)
        .expect("a valid URL")
        .build()
        .await
        .expect("the server answers");
    each_lease_gets_its_answer(lock).await;
}
