//! `SqlConfig::ddl()` (what `distlock schema` prints) is complete and valid for each dialect:
//! run by the database's own client on an empty database, it lets a client that may not
//! create anything (`with_create_table(false)`) start and take a mutex, a permit and a read
//! lock. On the servers that client logs in as a user with only the privileges the crate docs
//! name: `SELECT`, `INSERT`, `UPDATE`, `DELETE` on the tables, `SELECT` on the version table.
#![cfg(unix)]

use std::time::Duration;

use distlock_core::{DistributedLock, DistributedLockExt, LockKind, LockName, OwnerToken, TryAcquire};
use distlock_sql::{SqlConfig, SqlLock};

async fn takes_every_kind(lock: &SqlLock) {
    let name = LockName::new("from-the-ddl").expect("a name");
    let ttl = Duration::from_secs(30);
    assert!(
        lock.capabilities().notes,
        "the notes table is there and the user may use it"
    );
    for kind in [
        LockKind::Exclusive,
        LockKind::Permit {
            permits: 2,
            weight: 1,
        },
        LockKind::Permit {
            permits: 2,
            weight: 2,
        },
        LockKind::Read,
    ] {
        let attempt = match kind {
            LockKind::Exclusive => lock.try_acquire(&name, OwnerToken::new(), ttl).await,
            kind => {
                lock.try_acquire_kind(&name, kind, OwnerToken::new(), ttl, None)
                    .await
            }
        };
        match attempt {
            Ok(TryAcquire::Acquired(lease)) => {
                if kind == LockKind::Exclusive {
                    assert!(lock.set_note(&lease, "a note").await.expect("notes"));
                }
                assert!(lock.release(&lease).await.expect("releases"))
            }
            other => panic!("{kind:?} on the DBA's schema: {other:?}"),
        }
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_sqlite_ddl_is_complete() {
    use sqlx::Connection;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("locks.db");
    let config = SqlConfig::sqlite(&db).with_create_table(false);
    let url = format!("sqlite://{}?mode=rwc", db.display());
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("creates the file");
    sqlx::raw_sql(&config.ddl())
        .execute(&mut conn)
        .await
        .expect("the DDL runs");
    conn.close().await.expect("closes");
    let lock = config.build().await.expect("starts on the DBA's schema");
    takes_every_kind(&lock).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_ddl_is_complete() {
    let server = tokio::task::spawn_blocking(distlock_testkit::PostgresServer::start)
        .await
        .expect("the starter thread")
        .expect("postgres starts (run scripts/install-test-deps to install postgresql)");
    let config = SqlConfig::from_url(&server.url())
        .expect("a URL")
        .with_create_table(false);
    server.sql(&config.ddl()).expect("psql runs the DDL");
    server
        .sql(
            "CREATE ROLE app LOGIN PASSWORD 'app'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON distlock_locks, distlock_locks_holds, \
             distlock_locks_weights, distlock_locks_notes, distlock_locks_waiters TO app; GRANT SELECT ON distlock_locks_schema TO app",
        )
        .expect("a runtime user");
    let url = format!("postgres://app:app@{}/distlock_test", server.addr());
    let lock = SqlConfig::from_url(&url)
        .expect("a URL")
        .with_create_table(false)
        .build()
        .await
        .expect("starts on the DBA's schema");
    takes_every_kind(&lock).await;
    lock.close().await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_ddl_is_complete() {
    let server = tokio::task::spawn_blocking(distlock_testkit::MariaDbServer::start)
        .await
        .expect("the starter thread")
        .expect("mariadb starts (run scripts/install-test-deps to install mariadb-server)");
    let config = SqlConfig::from_url(&server.url())
        .expect("a URL")
        .with_create_table(false);
    server
        .sql(&config.ddl())
        .expect("the mariadb client runs the DDL");
    server
        .sql(
            "CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'app'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON distlock_test.distlock_locks TO 'app'@'127.0.0.1'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON distlock_test.distlock_locks_holds TO 'app'@'127.0.0.1'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON distlock_test.distlock_locks_weights TO 'app'@'127.0.0.1'; \
             GRANT SELECT, INSERT, UPDATE, DELETE ON distlock_test.distlock_locks_notes TO 'app'@'127.0.0.1'; \
             GRANT SELECT ON distlock_test.distlock_locks_schema TO 'app'@'127.0.0.1'",
        )
        .expect("a runtime user");
    let url = format!("mysql://app:app@{}/distlock_test", server.addr());
    let lock = SqlConfig::from_url(&url)
        .expect("a URL")
        .with_create_table(false)
        .build()
        .await
        .expect("starts on the DBA's schema");
    takes_every_kind(&lock).await;
    lock.close().await;
}
