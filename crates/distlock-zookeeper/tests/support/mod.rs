//! The test fixture: ZooKeeper servers started by the harness, clients with short session
//! timeouts, and fault hooks that act on the znodes directly.
#![allow(dead_code)] // each test binary uses its own part of it

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Fixture, Outage, Proxied};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_testkit::{shared, ZooKeeperServer};
use distlock_zookeeper::{ZooKeeperConfig, ZooKeeperLock};
use zookeeper_client as zk;

/// Short enough that session-expiry cases run quickly, long enough for a loaded 2-core box.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// The per-operation bound in tests.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);

/// A client configuration for `url` with the test timeouts.
pub fn config(url: &str) -> ZooKeeperConfig {
    ZooKeeperConfig::from_url(url)
        .and_then(|c| c.with_session_timeout(SESSION_TIMEOUT))
        .and_then(|c| c.with_operation_timeout(OPERATION_TIMEOUT))
        .expect("a valid test URL")
}

/// A new client (its own session) of the server at `url`.
pub async fn connect(url: &str) -> ZooKeeperLock {
    ZooKeeperLock::connect(config(url)).await.expect("connects")
}

/// A raw client, for fault hooks.
pub async fn raw(url: &str) -> zk::Client {
    let address = url.strip_prefix("zk://").unwrap_or(url);
    zk::Client::connector()
        .session_timeout(SESSION_TIMEOUT * 3)
        .connect(address)
        .await
        .expect("the raw client connects")
}

/// The suite's fixture: the binary's shared server, or one of its own when the store must be
/// taken away.
pub struct ZkFixture {
    url: String,
    admin: ZooKeeperLock,
    raw: zk::Client,
    own: Option<Arc<Mutex<ZooKeeperServer>>>,
}

impl ZkFixture {
    /// Over the shared standalone server (or `$DISTLOCK_TEST_ZOOKEEPER_URL`).
    pub async fn shared() -> Self {
        let url = shared::zookeeper_url().expect("the shared ZooKeeper starts");
        Self::over(url, None).await
    }

    /// A fixture over the shared 3-node ensemble (never killed by a case).
    pub async fn ensemble() -> Self {
        // `$DISTLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL` when set: the run's shared ensemble, or the
        // parent's in a child process of the cross-process case.
        let url = tokio::task::spawn_blocking(shared::zookeeper_ensemble_url)
            .await
            .expect("joined")
            .expect("the shared ZooKeeper ensemble starts");
        Self::over(url, None).await
    }

    /// Over a standalone server of its own, which `outage` may kill.
    pub async fn own() -> Self {
        let server = tokio::task::spawn_blocking(ZooKeeperServer::start)
            .await
            .expect("joined")
            .expect("a ZooKeeper server starts");
        let url = server.url();
        Self::over(url, Some(Arc::new(Mutex::new(server)))).await
    }

    async fn over(url: String, own: Option<Arc<Mutex<ZooKeeperServer>>>) -> Self {
        Self {
            admin: connect(&url).await,
            raw: raw(&url).await,
            url,
            own,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The contender nodes of `name`, in queue order.
    pub async fn contenders(&self, name: &LockName) -> Result<Vec<String>> {
        let parent = self.admin.lock_path(name);
        let mut children = match self.raw.list_children(&parent).await {
            Ok(children) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(Error::backend("zookeeper", e)),
        };
        children.retain(|c| c.contains("-lock-"));
        children.sort_by_key(|c| c.rsplit("-lock-").next().map(str::to_owned));
        Ok(children)
    }
}

/// The factory `conformance_tests!` calls once per case. The store-outage case gets a server
/// of its own so that killing it cannot disturb the cases running beside it.
pub async fn fixture() -> Arc<dyn Fixture> {
    let outage_case = distlock_conformance::current_case() == Some("c12_store_going_away");
    if outage_case && std::env::var(shared::ZOOKEEPER_URL_ENV).is_err() {
        Arc::new(ZkFixture::own().await)
    } else {
        Arc::new(ZkFixture::shared().await)
    }
}

#[async_trait]
impl Fixture for ZkFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(ZooKeeperLock::connect(config(&self.url)).await?))
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match distlock_testkit::proxy::through_proxies(&self.url) {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("zookeeper", e))),
        };
        Some(ZooKeeperLock::connect(config(&url)).await.map(|lock| Proxied {
            lock: Arc::new(lock) as Arc<dyn DistributedLock>,
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// The driver drops a connection that stays silent for a quarter of the session timeout,
    /// and pings after three eighths of that when idle, so a round trip must stay under five
    /// eighths of it: a twentieth of the session timeout each way is a slow store the session
    /// survives.
    fn slow_latency(&self) -> Duration {
        SESSION_TIMEOUT / 20
    }

    /// Deletes the holder's node (the first in the queue).
    async fn steal(&self, name: &LockName) -> Result<()> {
        let contenders = self.contenders(name).await?;
        let first = contenders
            .first()
            .ok_or_else(|| Error::backend("zookeeper", format!("nobody holds {name:?}")))?;
        let path = format!("{}/{first}", self.admin.lock_path(name));
        self.raw
            .delete(&path, None)
            .await
            .map_err(|e| Error::backend("zookeeper", e))
    }

    /// Contender nodes under every lock whose name starts with `prefix`.
    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let root = self.admin.config().root().to_owned();
        let parents = match self.raw.list_children(&root).await {
            Ok(parents) => parents,
            Err(zk::Error::NoNode) => return Ok(0),
            Err(e) => return Err(Error::backend("zookeeper", e)),
        };
        let listings = parents.iter().filter(|p| p.starts_with(prefix)).map(|p| {
            let path = format!("{root}/{p}");
            let raw = self.raw.clone();
            async move { raw.list_children(&path).await }
        });
        let mut count = 0;
        for listing in futures::future::join_all(listings).await {
            match listing {
                Ok(children) => count += children.iter().filter(|c| c.contains("-lock-")).count(),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(Error::backend("zookeeper", e)),
            }
        }
        Ok(count)
    }

    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let server = self.own.clone()?;
        let killed = server.clone();
        tokio::task::spawn_blocking(move || {
            killed
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .kill()
                .expect("kill -9 the server")
        })
        .await
        .expect("joined");
        Some(Box::new(Killed(server)))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        // Both: the child opens the same fixture as its parent, single server or ensemble.
        Some(vec![
            (shared::ZOOKEEPER_URL_ENV.to_owned(), self.url.clone()),
            (shared::ZOOKEEPER_ENSEMBLE_URL_ENV.to_owned(), self.url.clone()),
        ])
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}

struct Killed(Arc<Mutex<ZooKeeperServer>>);

#[async_trait]
impl Outage for Killed {
    async fn restore(self: Box<Self>) {
        let server = self.0;
        tokio::task::spawn_blocking(move || {
            server
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .restart()
                .expect("the server restarts")
        })
        .await
        .expect("joined");
    }
}
