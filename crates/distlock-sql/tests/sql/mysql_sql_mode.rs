//! The acquire upsert under MariaDB's `SIMULTANEOUS_ASSIGNMENT` (also part of
//! `sql_mode=ORACLE`), where every assignment of `ON DUPLICATE KEY UPDATE` sees the row's old
//! values: acquisition, release and takeover must behave exactly as under the default mode,
//! and a row left with an owner but no expiry (by an older client, or by hand) must be free.
//! Owns its server (it sets the server's global `sql_mode`).
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Lease, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{MariaDbOptions, MariaDbServer};

async fn server(sql_mode: &str) -> MariaDbServer {
    let args = vec![format!("--sql-mode={sql_mode}")];
    tokio::task::spawn_blocking(move || {
        MariaDbServer::start_with(MariaDbOptions {
            extra_args: args,
            ..MariaDbOptions::default()
        })
    })
    .await
    .expect("the starter thread")
    .expect("mariadbd starts (install mariadb-server)")
}

async fn client(url: &str) -> SqlLock {
    SqlConfig::from_url(url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the server answers")
}

fn acquired(outcome: TryAcquire, what: &str) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{what}: held ({h:?})"),
    }
}

async fn acquire_release_takeover(lock: &SqlLock, server: &MariaDbServer) {
    let ttl = Duration::from_secs(30);
    let name = LockName::new(format!("mode-{}", uuid::Uuid::new_v4())).expect("valid");

    // A acquires (insert), a contender B is refused and leaves the row alone.
    let a = acquired(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        "A",
    );
    let b = OwnerToken::new();
    assert!(matches!(
        lock.try_acquire(&name, b, ttl).await.expect("works"),
        TryAcquire::Held(_)
    ));
    let state = lock.inspect_lock(&name).await.expect("works");
    assert_eq!(
        state.owner.as_deref(),
        Some(a.owner().to_string().as_str()),
        "{state:?}"
    );

    // A releases; C takes the free row (the update branch).
    assert!(lock.release(&a).await.expect("works"));
    let c = lock
        .try_acquire(&name, OwnerToken::new(), ttl)
        .await
        .expect("works");
    let rows = server
        .sql(&format!(
            "SELECT owner, expires_at IS NULL FROM distlock_locks WHERE lock_name = '{}'",
            name.as_str()
        ))
        .expect("the admin query runs");
    let c = acquired(c, &format!("C after A's release (row: {})", rows.trim()));
    assert!(c.fencing_token() > a.fencing_token());
    let state = lock.inspect_lock(&name).await.expect("works");
    assert_eq!(
        state.owner.as_deref(),
        Some(c.owner().to_string().as_str()),
        "{state:?}"
    );

    // C's hold expires; D takes it over (the expired branch).
    let short = Duration::from_millis(50);
    assert!(lock.extend(&c, short).await.expect("works").is_some());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let d = acquired(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        "D after C expired",
    );
    assert!(d.fencing_token() > c.fencing_token());
    assert!(
        !lock.release(&c).await.expect("works"),
        "C's release must not free D's hold"
    );
    assert!(lock.inspect_lock(&name).await.expect("works").is_held());
    assert!(lock.release(&d).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_assignment_mode() {
    let server = server("SIMULTANEOUS_ASSIGNMENT").await;
    let lock = client(&server.url()).await;
    acquire_release_takeover(&lock, &server).await;
    // sql_mode=ORACLE includes SIMULTANEOUS_ASSIGNMENT.
    server
        .sql("SET GLOBAL sql_mode = 'ORACLE'")
        .expect("sets the mode");
    let lock = client(&server.url()).await;
    acquire_release_takeover(&lock, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_without_expiry_is_free() {
    let server = server("STRICT_TRANS_TABLES").await;
    let lock = client(&server.url()).await;
    let ttl = Duration::from_secs(30);
    let name = LockName::new(format!("noexp-{}", uuid::Uuid::new_v4())).expect("valid");
    let a = acquired(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        "A",
    );
    server
        .sql(&format!(
            "UPDATE distlock_locks SET owner = 'stranded', expires_at = NULL WHERE lock_name = '{}'",
            name.as_str()
        ))
        .expect("the admin update runs");
    let b = acquired(
        lock.try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("works"),
        "B on a row with an owner and no expiry",
    );
    assert!(b.fencing_token() > a.fencing_token());
    assert!(lock.release(&b).await.expect("works"));
}

/// Semaphores and read-write locks (whose attempt is one text query of several statements,
/// with session variables and hexadecimal literals) behave the same under modes that change
/// how SQL is read: Oracle's, ANSI quotes, no backslash escapes, empty strings as NULL,
/// strict tables and full GROUP BY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rw_locks_under_unusual_modes() {
    use distlock_core::{Error, LockKind, Primitive};

    let server =
        server("ORACLE,ANSI,STRICT_ALL_TABLES,NO_BACKSLASH_ESCAPES,ONLY_FULL_GROUP_BY,EMPTY_STRING_IS_NULL")
            .await;
    let lock = client(&server.url()).await;
    let ttl = Duration::from_secs(30);
    let name = LockName::new(format!("mode's \\ \"kinds\" {}", uuid::Uuid::new_v4())).expect("valid");
    let permit = LockKind::Permit {
        permits: 2,
        weight: 1,
    };
    let take = |kind, waiter| lock.try_acquire_kind(&name, kind, OwnerToken::new(), ttl, waiter);

    let a = acquired(take(permit, None).await.expect("works"), "first permit");
    let b = acquired(take(permit, None).await.expect("works"), "second permit");
    assert!(b.fencing_token() > a.fencing_token());
    match take(permit, None).await.expect("works") {
        TryAcquire::Held(h) => assert!(h.remaining.is_some_and(|l| l <= ttl), "{h:?}"),
        TryAcquire::Acquired(l) => panic!("a third permit of two: {l:?}"),
    }
    assert!(matches!(
        take(
            LockKind::Permit {
                permits: 3,
                weight: 1
            },
            None
        )
        .await,
        Err(Error::PermitsMismatch {
            stored: 2,
            asked: 3,
            ..
        })
    ));
    assert_eq!(
        lock.inspect_holders(&name, Primitive::Semaphore)
            .await
            .expect("works")
            .len(),
        2
    );
    assert!(lock.extend(&a, ttl).await.expect("works").is_some());
    assert!(lock.release(&a).await.expect("works"));
    assert!(lock.release(&b).await.expect("works"));

    let reader = acquired(take(LockKind::Read, None).await.expect("works"), "reader");
    assert!(matches!(
        take(LockKind::Write, Some(("w", ttl))).await.expect("works"),
        TryAcquire::Held(_)
    ));
    assert!(matches!(
        take(LockKind::Read, None).await.expect("works"),
        TryAcquire::Held(_)
    ));
    lock.withdraw(&name, LockKind::Write, "w").await.expect("works");
    let second = acquired(
        take(LockKind::Read, None).await.expect("works"),
        "reader after withdrawal",
    );
    assert!(lock.release(&reader).await.expect("works"));
    assert!(lock.release(&second).await.expect("works"));
    let writer = acquired(
        take(LockKind::Write, Some(("w", ttl))).await.expect("works"),
        "writer",
    );
    assert!(lock.release(&writer).await.expect("works"));
}
