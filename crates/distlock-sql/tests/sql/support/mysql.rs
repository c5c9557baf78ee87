//! The conformance fixture for MySQL/MariaDB: a `mariadbd` started by distlock-testkit in a
//! temporary data directory (or the server named by `DISTLOCK_TEST_MYSQL_URL`, for the cases
//! that leave the store alone).
#![allow(dead_code)] // each test file uses its own part

#[path = "promoted.rs"]
mod promoted;

use std::sync::Arc;
use std::time::Duration;

use distlock_conformance::{Clocked, ClockedStore, Failover, Fixture, Needs, Outage, Plan, Proxied, Site};
use distlock_core::{DistributedLock, Error, LockName, OwnerToken, Result};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::{
    MariaDbOptions, MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication, MariaDbServer,
    StoreClock,
};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

/// The operation timeout of the fixture's clients: short, so outage cases end quickly.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(2);

/// One MariaDB server plus an admin pool for the fault hooks.
pub struct MySqlFixture {
    site: Site,
    admin: MySqlPool,
    /// Whether the failover case gets a replicated store of its own ([`MySqlFixture::with_failover`]).
    failover: bool,
}

impl MySqlFixture {
    /// A fixture on the store a case that declares `needs` gets (see [`Site`]).
    pub async fn start(needs: Needs) -> Self {
        let plan = Plan {
            start: |_| MariaDbServer::start(),
            shared: distlock_testkit::shared::mysql_url,
            own_for_faults: false,
        };
        let site = Site::open(needs, plan).await;
        let url = site.url().to_owned();
        // The first client creates the table.
        client(&url).await.expect("the server answers");
        let admin = MySqlPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy(&url)
            .expect("a valid URL");
        Self {
            site,
            admin,
            failover: false,
        }
    }

    /// The same fixture, offering the failover case (c53) a replicated store of its own
    /// ([`Fixture::failover`]): not in the conformance binary, whose shared server has no
    /// replica; the failover tests run that case alone.
    pub fn with_failover(mut self) -> Self {
        self.failover = true;
        self
    }
}

/// A new client of the server at `url`, with its own pool.
pub async fn client(url: &str) -> Result<SqlLock> {
    SqlConfig::from_url(url)?
        .with_operation_timeout(OPERATION_TIMEOUT)
        .build()
        .await
}

fn admin_error(e: sqlx::Error) -> Error {
    Error::backend("mysql", e)
}

#[async_trait::async_trait]
impl Fixture for MySqlFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(client(self.site.url()).await?))
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match self.site.proxied().await {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("mysql", e))),
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
        sqlx::query("UPDATE distlock_locks SET owner = ? WHERE lock_name = ? AND owner IS NOT NULL")
            .bind(OwnerToken::new().to_string())
            .bind(name.as_str())
            .execute(&self.admin)
            .await
            .map_err(admin_error)?;
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM distlock_locks WHERE LEFT(lock_name, CHAR_LENGTH(?)) = ? \
             AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)",
        )
        .bind(prefix)
        .bind(prefix)
        .fetch_one(&self.admin)
        .await
        .map_err(admin_error)?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// `kill -9` of the case's own server; restored by restarting it on the same port and
    /// data directory.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        let (server, clock) = tokio::task::spawn_blocking(|| {
            let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
            let server = MariaDbServer::start_with(MariaDbOptions {
                clock: Some(clock.clone()),
                ..MariaDbOptions::default()
            })
            .expect("mariadbd starts (run scripts/install-test-deps to install mariadb-server)");
            (server, clock)
        })
        .await
        .expect("the starter thread");
        Some(Box::new(Clocked {
            url: server.url(),
            servers: server,
            clock,
            open: |url| {
                Box::pin(async move { Ok(Arc::new(client(&url).await?) as Arc<dyn DistributedLock>) })
            },
            declared_loss: Some("docs/src/stores/mysql.md"),
            session_lifetime: None,
        }))
    }

    /// A primary with a semi-synchronous replica of the case's own, when offered.
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        if !self.failover {
            return None;
        }
        Some(
            promoted::start(
                || {
                    MariaDbReplicated::start_with(MariaDbReplicatedOptions {
                        replication: MariaDbReplication::SemiSynchronous,
                        ..Default::default()
                    })
                },
                |url| Box::pin(async move { Ok(Arc::new(client(&url).await?) as Arc<dyn DistributedLock>) }),
                "mariadb-server",
            )
            .await,
        )
    }
}

impl promoted::Pair for MariaDbReplicated {
    const BACKEND: &'static str = "mysql";

    fn url(&self) -> String {
        MariaDbReplicated::url(self)
    }

    fn kill_primary(&mut self) -> std::result::Result<(), distlock_testkit::HarnessError> {
        MariaDbReplicated::kill_primary(self)
    }

    fn promote(&mut self) -> std::result::Result<(), distlock_testkit::HarnessError> {
        MariaDbReplicated::promote_replica(self)
    }
}
