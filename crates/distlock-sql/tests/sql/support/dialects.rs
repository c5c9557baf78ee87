//! The three dialects a test runs each check on: a SQLite file of the test's own, the shared
//! MariaDB and the shared PostgreSQL that distlock-testkit starts (or the servers
//! `DISTLOCK_TEST_MYSQL_URL` and `DISTLOCK_TEST_POSTGRES_URL` name).
#![allow(dead_code)] // each test file calls the part it needs

use std::path::PathBuf;
use std::time::Duration;

use distlock_core::LockName;
use distlock_sql::{SqlConfig, SqlLock};

/// One database.
pub enum Store {
    Sqlite { path: PathBuf, _dir: tempfile::TempDir },
    Server { url: String },
}

impl Store {
    pub fn sqlite() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("distlock-sql-test-")
            .tempdir()
            .expect("a temporary directory");
        Self::Sqlite {
            path: dir.path().join("locks.db"),
            _dir: dir,
        }
    }

    pub async fn mysql() -> Self {
        let url = tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
            .await
            .expect("the starter thread")
            .expect("the shared mariadbd starts (install mariadb-server)");
        Self::Server { url }
    }

    pub async fn postgres() -> Self {
        let url = tokio::task::spawn_blocking(distlock_testkit::shared::postgres_url)
            .await
            .expect("the starter thread")
            .expect("the shared postgres starts (install postgresql)");
        Self::Server { url }
    }

    /// A new client with a pool of its own, as another process would have.
    pub async fn client(&self) -> SqlLock {
        self.client_on("distlock_locks").await
    }

    /// As [`Store::client`], on the lock table `table`.
    pub async fn client_on(&self, table: &str) -> SqlLock {
        let config = match self {
            Self::Sqlite { path, .. } => SqlConfig::sqlite(path),
            Self::Server { url } => SqlConfig::from_url(url).expect("a valid URL"),
        };
        config
            .with_table(table)
            .expect("a plain name")
            .with_operation_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("the database answers")
    }
}

pub fn unique(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", uuid::Uuid::new_v4())).expect("valid")
}
