//! `SqlLock::purge_idle` on MariaDB and PostgreSQL: rows the database clock proves idle for the
//! given time go (a free lock, an expired one, a semaphore whose holds ended, and on
//! PostgreSQL an expired entry of the queue of waiters), the rest stays, a purged name taken
//! again gets a higher fencing token, and an idle time under a minute is refused.
#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

const DAY: Duration = Duration::from_secs(86_400);

fn two_days_ago_us() -> i64 {
    let us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros();
    i64::try_from(us).expect("fits") - 2 * 86_400 * 1_000_000
}

async fn client(url: &str) -> SqlLock {
    SqlConfig::from_url(url)
        .expect("a URL")
        .with_purge_after(None)
        .expect("valid")
        .build()
        .await
        .expect("connects")
}

/// Takes `held` and uses `fresh`, purges, and checks what is left with `count` (rows of keys
/// starting with `prefix` in the lock and holds tables).
async fn purge_and_check(lock: &SqlLock, prefix: &str, old: i64, left: impl AsyncFnOnce() -> (i64, i64)) {
    let ttl = Duration::from_secs(60);
    let name = |n: &str| LockName::new(format!("{prefix}{n}")).expect("a name");
    let held = match lock.try_acquire(&name("held"), OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!("{other:?}"),
    };
    match lock.try_acquire(&name("fresh"), OwnerToken::new(), ttl).await {
        Ok(TryAcquire::Acquired(lease)) => assert!(lock.release(&lease).await.expect("released")),
        other => panic!("{other:?}"),
    }
    let refused = lock.purge_idle(Duration::from_secs(10)).await;
    assert!(matches!(refused, Err(Error::InvalidConfig { .. })), "{refused:?}");
    let purged = lock.purge_idle(DAY).await.expect("purges");
    assert!(purged >= 4, "purged {purged} rows");
    let (locks, holds) = left().await;
    assert_eq!(
        locks, 2,
        "the held lock and the one used just now stay, the old ones go"
    );
    assert_eq!(holds, 0, "the old semaphore's rows go");
    match lock
        .try_acquire(&name("old-expired"), OwnerToken::new(), ttl)
        .await
    {
        Ok(TryAcquire::Acquired(lease)) => {
            let token = lease.fencing_token().expect("a token").get();
            assert!(token > u64::try_from(old).expect("positive"), "{token} <= {old}");
            assert!(lock.release(&lease).await.expect("released"));
        }
        other => panic!("{other:?}"),
    }
    assert!(lock.release(&held).await.expect("released"));
}

#[cfg(feature = "postgres")]
use crate::postgres_support as pg_support;

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_purges_what_the_clock_proves_idle() {
    use sqlx::Connection;

    let url = pg_support::shared_url().await;
    let lock = client(&url).await;
    let old = two_days_ago_us();
    let p = "pg-purge-";
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connects");
    sqlx::raw_sql(&format!(
        "INSERT INTO distlock_locks VALUES ('{p}old-free', '{p}old-free', NULL, {old}, NULL);
         INSERT INTO distlock_locks VALUES ('{p}old-expired', '{p}old-expired', 'gone', {old},
           now() - interval '2 days');
         INSERT INTO distlock_locks_holds VALUES
           ('semaphore', '{p}old-sem', '#', '{p}old-sem', 'object', NULL, {old}, NULL),
           ('semaphore', '{p}old-sem', 'gone', '{p}old-sem', 'permit', 1, {old}, now() - interval '2 days');
         INSERT INTO distlock_locks_waiters VALUES ('{p}old-free', 'gone', now() - interval '2 days',
           now() - interval '2 days');"
    ))
    .execute(&mut admin)
    .await
    .expect("inserts the old rows");
    purge_and_check(&lock, p, old, async || {
        let locks: i64 =
            sqlx::query_scalar("SELECT count(*) FROM distlock_locks WHERE lock_key LIKE 'pg-purge-%'")
                .fetch_one(&mut admin)
                .await
                .expect("counts");
        let holds: i64 =
            sqlx::query_scalar("SELECT count(*) FROM distlock_locks_holds WHERE lock_key LIKE 'pg-purge-%'")
                .fetch_one(&mut admin)
                .await
                .expect("counts");
        let queued: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM distlock_locks_waiters WHERE lock_key LIKE 'pg-purge-%'",
        )
        .fetch_one(&mut admin)
        .await
        .expect("counts");
        assert_eq!(queued, 0, "the expired waiter goes");
        (locks, holds)
    })
    .await;
    lock.close().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_purges_what_the_clock_proves_idle() {
    use sqlx::Connection;

    let url = tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
        .await
        .expect("the starter thread")
        .expect("the shared mariadbd starts (run scripts/install-test-deps to install mariadb-server)");
    let lock = client(&url).await;
    let old = two_days_ago_us();
    let p = "my-purge-";
    let mut admin = sqlx::MySqlConnection::connect(&url).await.expect("connects");
    sqlx::raw_sql(&format!(
        "INSERT INTO distlock_locks VALUES ('{p}old-free', '{p}old-free', NULL, {old}, NULL);
         INSERT INTO distlock_locks VALUES ('{p}old-expired', '{p}old-expired', 'gone', {old},
           UTC_TIMESTAMP(6) - INTERVAL 2 DAY);
         INSERT INTO distlock_locks_holds VALUES
           ('semaphore', '{p}old-sem', '#', '{p}old-sem', 'object', NULL, {old}, NULL),
           ('semaphore', '{p}old-sem', 'gone', '{p}old-sem', 'permit', 1, {old}, UTC_TIMESTAMP(6) - INTERVAL 2 DAY);"
    ))
    .execute(&mut admin)
    .await
    .expect("inserts the old rows");
    purge_and_check(&lock, p, old, async || {
        let locks: i64 =
            sqlx::query_scalar("SELECT count(*) FROM distlock_locks WHERE lock_key LIKE 'my-purge-%'")
                .fetch_one(&mut admin)
                .await
                .expect("counts");
        let holds: i64 =
            sqlx::query_scalar("SELECT count(*) FROM distlock_locks_holds WHERE lock_key LIKE 'my-purge-%'")
                .fetch_one(&mut admin)
                .await
                .expect("counts");
        (locks, holds)
    })
    .await;
    lock.close().await;
}
