//! The conformance fixture for PostgreSQL: a `postgres` started by distlock-testkit in a
//! temporary directory (or the server named by `DISTLOCK_TEST_POSTGRES_URL`).
#![allow(dead_code)] // each test file uses its own part

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use distlock_conformance::{Fixture, Outage, Proxied};
use distlock_core::{DistributedLock, Error, LockName, OwnerToken, Result};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::shared::POSTGRES_URL_ENV;
use distlock_testkit::PostgresServer;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The operation timeout of the fixture's clients: short, so outage cases end quickly.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// Which server a fixture uses.
pub enum Server {
    /// The test binary's shared server, or the one named by `DISTLOCK_TEST_POSTGRES_URL`.
    Shared,
    /// A server of its own, which the fixture may kill and restart.
    Owned,
}

/// A server of the test's own, started off the runtime's threads.
pub async fn own_server() -> PostgresServer {
    tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .expect("the starter thread")
        .expect("postgres starts (run scripts/install-test-deps to install postgresql)")
}

/// The shared server's URL (or `DISTLOCK_TEST_POSTGRES_URL`).
pub async fn shared_url() -> String {
    tokio::task::spawn_blocking(distlock_testkit::shared::postgres_url)
        .await
        .expect("the starter thread")
        .expect("the shared postgres starts (run scripts/install-test-deps to install postgresql)")
}

/// One PostgreSQL server plus an admin pool for the fault hooks.
pub struct PostgresFixture {
    url: String,
    owned: Option<Arc<Mutex<PostgresServer>>>,
    admin: PgPool,
}

impl PostgresFixture {
    /// A fixture on the shared server or on a server of its own.
    pub async fn start(server: Server) -> Self {
        let env_url = std::env::var(POSTGRES_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty());
        let (url, owned) = match (env_url, server) {
            (Some(url), _) => (url, None),
            (None, Server::Shared) => (shared_url().await, None),
            (None, Server::Owned) => {
                let server = own_server().await;
                (server.url(), Some(Arc::new(Mutex::new(server))))
            }
        };
        // The first client creates the tables.
        client(&url).await.expect("the server answers");
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy(&url)
            .expect("a valid URL");
        Self { url, owned, admin }
    }
}

/// A new client of the server at `url`, with its own pool and listener.
pub async fn client(url: &str) -> Result<SqlLock> {
    SqlConfig::from_url(url)?
        .with_operation_timeout(OPERATION_TIMEOUT)
        .build()
        .await
}

fn admin_error(e: sqlx::Error) -> Error {
    Error::backend("postgres", e)
}

#[async_trait::async_trait]
impl Fixture for PostgresFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(client(&self.url).await?))
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match distlock_testkit::proxy::through_proxies(&self.url) {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("postgres", e))),
        };
        Some(client(&url).await.map(|lock| Proxied {
            lock: Arc::new(lock),
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        sqlx::query("UPDATE distlock_locks SET owner = $1 WHERE lock_name = $2 AND owner IS NOT NULL")
            .bind(OwnerToken::new().to_string())
            .bind(name.as_str())
            .execute(&self.admin)
            .await
            .map_err(admin_error)?;
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM distlock_locks WHERE left(lock_name, char_length($1)) = $1 \
             AND owner IS NOT NULL AND expires_at > statement_timestamp()",
        )
        .bind(prefix)
        .fetch_one(&self.admin)
        .await
        .map_err(admin_error)?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// `kill -9` of the fixture's own postmaster; restored by restarting it on the same port
    /// and data directory. `None` on the shared server, which other tests are using.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let server = self.owned.clone()?;
        let killer = server.clone();
        tokio::task::spawn_blocking(move || killer.lock().unwrap_or_else(PoisonError::into_inner).kill())
            .await
            .ok()?
            .ok()?;
        Some(Box::new(KilledServer(server)))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(vec![(POSTGRES_URL_ENV.to_owned(), self.url.clone())])
    }
}

struct KilledServer(Arc<Mutex<PostgresServer>>);

#[async_trait::async_trait]
impl Outage for KilledServer {
    async fn restore(self: Box<Self>) {
        let server = self.0;
        tokio::task::spawn_blocking(move || server.lock().unwrap_or_else(PoisonError::into_inner).restart())
            .await
            .expect("the restarter thread")
            .expect("postgres restarts");
    }
}
