//! SQLite's host wake covers semaphores and read-write locks too: a release of a permit or of
//! a write lock by one client wakes the waiters of other clients of the host (here, other
//! clients of this process: each has its own waiters) long before their next poll.
#![cfg(all(feature = "sqlite", unix))]

use std::path::Path;
use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;

/// The waiters' polls: only a wake can hand over within [`PROMPT`].
const LONG_POLL: Duration = Duration::from_secs(10);
/// Generous: a wake arrives in milliseconds.
const PROMPT: Duration = Duration::from_secs(3);

fn waiting() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait_for(Duration::from_secs(30))
        .poll_interval(LONG_POLL, LONG_POLL)
}

async fn client(db: &Path) -> LockClient {
    LockClient::new(SqlConfig::sqlite(db).build().await.expect("opens the file"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_wakes_a_waiter_of_another_client() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("locks.db");
    let holder = client(&db).await;
    let waiter = client(&db).await;
    let permit = holder
        .semaphore("exports", 1)
        .expect("a semaphore")
        .acquire_with(&waiting())
        .await
        .expect("a permit");
    let waiting_task = tokio::spawn(async move {
        let semaphore = waiter.semaphore("exports", 1).expect("a semaphore");
        let guard = semaphore
            .acquire_with(&waiting())
            .await
            .expect("the waiter's permit");
        let at = Instant::now();
        assert!(guard.release().await.expect("released"));
        at
    });
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiter tried and sleeps
    let released = Instant::now();
    assert!(permit.release().await.expect("released"));
    let woken = tokio::time::timeout(PROMPT, waiting_task).await;
    assert!(
        woken.is_ok(),
        "the waiter had no permit {:?} after the release (its next poll was {LONG_POLL:?} away)",
        released.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_release_wakes_the_readers_of_other_clients() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("locks.db");
    let writer = client(&db).await;
    let write = writer
        .rw_lock("prices")
        .expect("a read-write lock")
        .write_with(&waiting())
        .await
        .expect("the write lock");
    let mut readers = Vec::new();
    for _ in 0..2 {
        let reader = client(&db).await;
        readers.push(tokio::spawn(async move {
            let rw = reader.rw_lock("prices").expect("a read-write lock");
            rw.read_with(&waiting()).await.expect("the read lock")
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await; // the readers tried and sleep
    let released = Instant::now();
    assert!(write.release().await.expect("released"));
    for reader in readers {
        let read = tokio::time::timeout(PROMPT, reader).await;
        assert!(
            read.is_ok(),
            "a reader had no read lock {:?} after the writer's release (its next poll was \
             {LONG_POLL:?} away)",
            released.elapsed()
        );
    }
}
