//! A SQLite write blocked by another connection's write transaction (`BEGIN IMMEDIATE`) must
//! be answered by SQLite itself (`database is locked`, nothing written) before the client's
//! operation timeout, never left running past it where it could commit after the caller was
//! told it failed.
#![cfg(feature = "sqlite")]

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::SqlConfig;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, Executor, SqliteConnection};

const OP_TIMEOUT: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_write_fails_by_the_database_first() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("locks.db");
    let lock = SqlConfig::sqlite(&path)
        .with_operation_timeout(OP_TIMEOUT)
        .build()
        .await
        .expect("opens");
    let name = LockName::new("busy").expect("valid");

    let mut raw = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(&path))
        .await
        .expect("opens the file");
    raw.execute("BEGIN IMMEDIATE")
        .await
        .expect("takes the write lock");

    let started = Instant::now();
    let outcome = lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
        .await;
    let took = started.elapsed();
    match &outcome {
        Err(e @ Error::Unavailable { .. }) => assert!(
            !e.to_string().contains("no answer within"),
            "the client gave up before SQLite answered, so the write may still commit: {e}"
        ),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took < OP_TIMEOUT + Duration::from_millis(500), "took {took:?}");

    raw.execute("COMMIT").await.expect("commits");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let state = lock.inspect_lock(&name).await.expect("works");
    assert!(!state.is_held(), "a failed acquire left a hold: {state:?}");
    match lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => assert!(lock.release(&lease).await.expect("works")),
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
}
