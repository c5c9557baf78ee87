//! The conformance fixture for SQLite files: every client opens its own pool on one file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{parent_store, Fixture, Outage, STORE_ENV};
use distlock_core::{DistributedLock, Error, LockName, OwnerToken, Result};
use distlock_sql::SqlConfig;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Connection, SqliteConnection};

/// The operation timeout of the fixture's clients: short, so the outage case ends quickly.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// One SQLite file (in its own temporary directory, or the parent's in the child process of
/// a cross-process case) plus an admin pool for the fault hooks.
pub struct SqliteFixture {
    path: PathBuf,
    admin: SqlitePool,
    _dir: Option<tempfile::TempDir>,
}

impl SqliteFixture {
    /// A fresh file, or the parent's file inside a child process.
    pub async fn start() -> Self {
        let (path, dir) = match parent_store() {
            Some(path) => (PathBuf::from(path), None),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("distlock-sqlite-")
                    .tempdir()
                    .expect("a temporary directory");
                (dir.path().join("locks.db"), Some(dir))
            }
        };
        // The first client creates the file and the table.
        let first = client(&path).await.expect("the SQLite file opens");
        drop(first);
        let admin = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(&path)
                    .busy_timeout(Duration::from_secs(10)),
            )
            .await
            .expect("the admin pool opens");
        Self {
            path,
            admin,
            _dir: dir,
        }
    }
}

/// A new client of the file at `path`, as a second process would open.
pub async fn client(path: &Path) -> Result<distlock_sql::SqlLock> {
    SqlConfig::sqlite(path)
        .with_operation_timeout(OPERATION_TIMEOUT)
        .build()
        .await
}

fn admin_error(e: sqlx::Error) -> Error {
    Error::backend("sqlite", e)
}

#[async_trait::async_trait]
impl Fixture for SqliteFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(client(&self.path).await?))
    }

    // No network between client and store: `proxied_backend` stays `None` and the fault
    // cases skip; SQLite's ambiguous outcomes are covered by the backend's own tests.
    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        sqlx::query("UPDATE distlock_locks SET owner = ?1 WHERE lock_name = ?2 AND owner IS NOT NULL")
            .bind(OwnerToken::new().to_string())
            .bind(name.as_str())
            .execute(&self.admin)
            .await
            .map_err(admin_error)?;
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let count: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM distlock_locks WHERE substr(lock_name, 1, length(?1)) = ?1 \
             AND owner IS NOT NULL AND expires_at > {NOW_MS}"
        ))
        .bind(prefix)
        .fetch_one(&self.admin)
        .await
        .map_err(admin_error)?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// SQLite has no server to kill; its equivalent of a hung server is another process that
    /// takes the database's write lock and never lets go (`BEGIN EXCLUSIVE`). Every write
    /// then waits, so acquisitions and renewals fail after the operation timeout.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let mut conn = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(&self.path))
            .await
            .expect("the blocking connection opens");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .expect("the blocking transaction takes the write lock");
        Some(Box::new(WriteLockOutage(conn)))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(vec![(
            STORE_ENV.to_owned(),
            self.path.to_string_lossy().into_owned(),
        )])
    }
}

struct WriteLockOutage(SqliteConnection);

#[async_trait::async_trait]
impl Outage for WriteLockOutage {
    async fn restore(self: Box<Self>) {
        let mut conn = self.0;
        sqlx::query("ROLLBACK")
            .execute(&mut conn)
            .await
            .expect("the blocking transaction ends");
        let _ = conn.close().await;
    }
}
