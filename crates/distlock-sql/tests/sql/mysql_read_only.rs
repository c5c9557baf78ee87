//! A server switched to read-only (a failover demoting the primary, MariaDB's `--read-only`)
//! refuses writes with 1290 (or 1836): every write operation reports
//! [`Error::Unavailable`], which callers retry, not [`Error::Backend`], and works again when
//! the server is writable. The lock's user has no privilege that bypasses `read_only`
//! (`SUPER`, `READ_ONLY ADMIN`), as an application user should not. Owns its server.
#![cfg(feature = "mysql")]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, Error, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{MariaDbServer, MARIADB_DATABASE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_is_unavailable() {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadbd starts (install mariadb-server)");
    server
        .sql(&format!(
            "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; \
             GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON {MARIADB_DATABASE}.* TO 'app'@'%'"
        ))
        .expect("creates the application user");
    let url = format!("mysql://app:app@127.0.0.1:{}/{MARIADB_DATABASE}", server.port());
    let lock: SqlLock = SqlConfig::from_url(&url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("the server answers");
    let ttl = Duration::from_secs(30);
    let held = LockName::new("held").expect("valid");
    let lease = match lock
        .try_acquire(&held, OwnerToken::new(), ttl)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("held: {h:?}"),
    };

    server.sql("SET GLOBAL read_only = 1").expect("sets read_only");
    let fresh = LockName::new("fresh").expect("valid");
    let acquire = lock.try_acquire(&fresh, OwnerToken::new(), ttl).await;
    let extend = lock.extend(&lease, ttl).await;
    let release = lock.release(&lease).await;
    for (what, outcome) in [
        ("acquire", acquire.map(|_| ())),
        ("extend", extend.map(|_| ())),
        ("release", release.map(|_| ())),
    ] {
        assert!(
            matches!(outcome, Err(Error::Unavailable { .. })),
            "{what} on a read-only server: {outcome:?}"
        );
    }
    // Reads still work.
    assert!(lock.inspect_lock(&held).await.expect("works").is_held());

    server.sql("SET GLOBAL read_only = 0").expect("clears read_only");
    assert!(lock.extend(&lease, ttl).await.expect("works").is_some());
    assert!(lock.release(&lease).await.expect("works"));
}
