//! Host wake works for a database whose path is too long for a Unix socket's address (about
//! 107 bytes with the waiters' directory and socket name): a release by one client still wakes
//! another client's waiter long before its next poll.
#![cfg(all(feature = "sqlite", unix))]

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, LockClient};
use distlock_sql::SqlConfig;

const LONG_POLL: Duration = Duration::from_secs(10);
const PROMPT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_although_the_socket_path_is_too_long() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let deep = dir
        .path()
        .join("a-directory-with-a-rather-long-name")
        .join("and-another-one-below-it-for-the-locks");
    let db = deep.join("locks.db");
    assert!(
        db.as_os_str().len() + ".waiters/0123456789abcdef/00000000000000000000-1-00000000".len() > 108,
        "the socket's path must be over the limit"
    );
    let open = || async { LockClient::new(SqlConfig::sqlite(&db).build().await.expect("opens the file")) };
    let holder = open().await;
    let waiter = open().await;
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(60))
        .wait_for(Duration::from_secs(30))
        .poll_interval(LONG_POLL, LONG_POLL);
    let guard = holder.acquire_with("deep", &opts).await.expect("acquired");
    let waiting = tokio::spawn({
        let opts = opts.clone();
        async move {
            let guard = waiter
                .acquire_with("deep", &opts)
                .await
                .expect("the waiter acquires");
            assert!(guard.release().await.expect("released"));
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await; // the waiter tried and sleeps
    let released = Instant::now();
    assert!(guard.release().await.expect("released"));
    let woken = tokio::time::timeout(PROMPT, waiting).await;
    assert!(
        woken.is_ok(),
        "the waiter did not hold the lock {:?} after the release (its next poll was {LONG_POLL:?} away)",
        released.elapsed()
    );
}
