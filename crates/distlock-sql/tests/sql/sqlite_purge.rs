//! Idle rows are purged: a client's start purges the lock rows and the objects of semaphores
//! and read-write locks that the database clock proves idle for a day (free or expired, and
//! last taken over a day ago by their version), and keeps the rest; a name taken again after
//! its row was purged still gets a higher fencing token than it ever had.
#![cfg(feature = "sqlite")]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;
use sqlx::{Connection, SqliteConnection};

fn now_us() -> i64 {
    let us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros();
    i64::try_from(us).expect("fits")
}

async fn count(conn: &mut SqliteConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(conn).await.expect("counts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_purges_what_the_clock_proves_idle_and_keeps_the_rest() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("locks.db");
    let first = LockClient::new(SqlConfig::sqlite(&db).build().await.expect("creates the file"));
    let ttl = AcquireOptions::new().ttl(Duration::from_secs(60));
    let held = first.acquire_with("held", &ttl).await.expect("acquired");
    let fresh = first.acquire_with("fresh", &ttl).await.expect("acquired");
    assert!(fresh.release().await.expect("released"));

    // Rows last used two days ago: a free lock, an expired one, and a semaphore whose only
    // permit expired then.
    let old = now_us() - 2 * 86_400 * 1_000_000;
    let old_ms = old / 1000;
    let mut admin = SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .expect("opens");
    sqlx::raw_sql(&format!(
        "INSERT INTO distlock_locks VALUES ('old-free', 'old-free', NULL, {old}, NULL);
         INSERT INTO distlock_locks VALUES ('old-expired', 'old-expired', 'gone', {old}, {old_ms});
         INSERT INTO distlock_locks_holds VALUES
           ('semaphore', 'old-sem', '#', 'old-sem', 'object', NULL, {old}, NULL),
           ('semaphore', 'old-sem', 'gone', 'old-sem', 'permit', 1, {old}, {old_ms});"
    ))
    .execute(&mut admin)
    .await
    .expect("inserts the old rows");

    let _second = LockClient::new(SqlConfig::sqlite(&db).build().await.expect("opens"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let locks = count(
            &mut admin,
            "SELECT count(*) FROM distlock_locks WHERE lock_key LIKE 'old-%'",
        )
        .await;
        let holds = count(
            &mut admin,
            "SELECT count(*) FROM distlock_locks_holds WHERE lock_key = 'old-sem'",
        )
        .await;
        if locks == 0 && holds == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "10 s after a client's start, {locks} idle lock rows and {holds} idle hold rows are left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept = count(
        &mut admin,
        "SELECT count(*) FROM distlock_locks WHERE lock_key IN ('held', 'fresh')",
    )
    .await;
    assert_eq!(kept, 2, "the held lock and the one used just now stay");

    // Taken again, the purged lock's token is above its old version.
    let again = first.acquire_with("old-expired", &ttl).await.expect("acquired");
    let token = again.fencing_token().expect("a token").get();
    assert!(token > u64::try_from(old).expect("positive"), "{token} <= {old}");
    assert!(again.release().await.expect("released"));
    assert!(held.release().await.expect("released"));
}
