//! A statement blocked on a row lock held by someone else (an operator's
//! `SELECT ... FOR UPDATE` on the lock row) must end server-side before the client gives up,
//! so it cannot commit after the client was told it failed, and a timed-out statement's
//! connection must not hold a pool slot while it waits. Owns its server.
#![cfg(feature = "mysql")]

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::MariaDbServer;
use sqlx::{Connection, Executor, MySqlConnection};

const OP_TIMEOUT: Duration = Duration::from_secs(1);

async fn server() -> MariaDbServer {
    tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)")
}

async fn client(url: &str) -> SqlLock {
    client_with(url, OP_TIMEOUT).await
}

async fn client_with(url: &str, timeout: Duration) -> SqlLock {
    SqlConfig::from_url(url)
        .expect("a valid URL")
        .with_operation_timeout(timeout)
        .build()
        .await
        .expect("the server answers")
}

/// Creates `name`'s row (free) and locks it, by primary key so no gap is locked, from a raw
/// connection in an open transaction. (`name` is plain ASCII: its key is the name.)
async fn lock_row(lock: &SqlLock, url: &str, name: &LockName) -> MySqlConnection {
    match lock
        .try_acquire(name, OwnerToken::new(), Duration::from_secs(1))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => assert!(lock.release(&lease).await.expect("works")),
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    }
    let mut raw = MySqlConnection::connect(url).await.expect("connects");
    raw.execute("BEGIN").await.expect("begins");
    sqlx::query("SELECT owner FROM distlock_locks WHERE lock_key = ? FOR UPDATE")
        .bind(name.as_str())
        .fetch_all(&mut raw)
        .await
        .expect("locks the row");
    raw
}

fn typed_timeout(e: &Error) -> bool {
    matches!(e, Error::Unavailable { .. } | Error::Timeout { .. })
}

/// With `timeout`, an acquire blocked on the row lock fails in time with a typed error from
/// the server (not a client-side timeout), and nothing commits after the row is unlocked.
async fn blocked_acquire(timeout: Duration) {
    let server = server().await;
    let url = server.url();
    let lock = client_with(&url, timeout).await;
    let name = LockName::new("row-locked").expect("valid");
    let mut raw = lock_row(&lock, &url, &name).await;

    let started = Instant::now();
    let outcome = lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
        .await;
    let took = started.elapsed();
    match &outcome {
        Err(e) if typed_timeout(e) => assert!(
            !e.to_string().contains("no answer within"),
            "the client gave up while the statement could still commit: {e}"
        ),
        other => panic!("expected Unavailable or Timeout, got {other:?}"),
    }
    assert!(took < timeout + Duration::from_millis(500), "took {took:?}");

    // The operator's transaction ends a while after the client gave up.
    tokio::time::sleep(Duration::from_secs(2)).await;
    raw.execute("COMMIT").await.expect("commits");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let state = lock.inspect_lock(&name).await.expect("works");
    assert!(
        !state.is_held(),
        "the timed-out acquire committed after the client gave up: {state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_fails_in_time_and_leaves_nothing() {
    // 1 s: lock waits of 0 s (no wait) and a 0.75 s statement limit.
    blocked_acquire(OP_TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_fails_in_time_with_a_longer_timeout() {
    // 3 s: lock waits of 2 s and a 2.25 s statement limit.
    blocked_acquire(Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_behind_ddl_fails_in_time_and_leaves_nothing() {
    let server = server().await;
    let url = server.url();
    let timeout = Duration::from_secs(3);
    let lock = client_with(&url, timeout).await;
    let name = LockName::new("behind-ddl").expect("valid");
    // A long transaction that read the table holds a shared metadata lock; an ALTER TABLE
    // then waits for it, and every later statement on the table queues behind the ALTER.
    let mut reader = MySqlConnection::connect(&url).await.expect("connects");
    reader.execute("BEGIN").await.expect("begins");
    reader
        .execute("SELECT COUNT(*) FROM distlock_locks")
        .await
        .expect("reads");
    let mut ddl = MySqlConnection::connect(&url).await.expect("connects");
    let alter = tokio::spawn(async move {
        ddl.execute("SET SESSION lock_wait_timeout = 30")
            .await
            .expect("sets");
        ddl.execute("ALTER TABLE distlock_locks COMMENT = 'x'").await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let started = Instant::now();
    let outcome = lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
        .await;
    let took = started.elapsed();
    match &outcome {
        Err(e) if typed_timeout(e) => assert!(
            !e.to_string().contains("no answer within"),
            "the client gave up while the statement could still commit: {e}"
        ),
        other => panic!("expected Unavailable or Timeout, got {other:?}"),
    }
    assert!(took < timeout + Duration::from_millis(500), "took {took:?}");

    tokio::time::sleep(Duration::from_secs(2)).await;
    reader.execute("COMMIT").await.expect("commits");
    alter.await.expect("the ALTER task").expect("the ALTER runs");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let state = lock.inspect_lock(&name).await.expect("works");
    assert!(
        !state.is_held(),
        "the timed-out acquire committed after the client gave up: {state:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_do_not_exhaust_the_pool() {
    let server = server().await;
    let url = server.url();
    let lock = client(&url).await;
    let name = LockName::new("row-locked").expect("valid");
    let mut raw = lock_row(&lock, &url, &name).await;

    for i in 0..20 {
        let outcome = lock
            .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
            .await;
        assert!(
            matches!(&outcome, Err(e) if typed_timeout(e)),
            "attempt {i}: {outcome:?}"
        );
    }
    // The row is still locked; unrelated names must work at once.
    let mut leases = Vec::new();
    for i in 0..100 {
        let other = LockName::new(format!("free-{i}")).expect("valid");
        match lock
            .try_acquire(&other, OwnerToken::new(), Duration::from_secs(30))
            .await
        {
            Ok(TryAcquire::Acquired(lease)) => leases.push(lease),
            other => panic!("lease {i}: {other:?}"),
        }
    }
    for (i, lease) in leases.iter().enumerate() {
        let renewed = lock.extend(lease, Duration::from_secs(30)).await;
        assert!(matches!(renewed, Ok(Some(_))), "renewal {i}: {renewed:?}");
    }
    raw.execute("COMMIT").await.expect("commits");
}
