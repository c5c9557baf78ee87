//! Fixtures of the conformance suite for a single Redis server and for Redlock, and helpers
//! shared by this crate's integration tests.
//!
//! Servers come from a [`Site`]: cases that leave the store alone share the test binary's
//! (or the one a `DISTLOCK_TEST_*` variable names); a case that takes the store away gets
//! servers of its own, and so do the Redis Cluster's fault cases (see [`cluster`]).
#![allow(dead_code)] // each test binary uses a different part

pub mod clocked;
pub mod sentinel;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{ClockedStore, Fixture, Needs, Outage, Plan, Proxied, Site};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_redis::{RedisConfig, RedisLock, Redlock, RedlockConfig};
use distlock_testkit::{shared, HarnessError, RedisCluster, RedisClusterOptions, RedisServer};

/// Points the Redlock fixtures at running masters: comma-separated URLs.
pub const REDLOCK_URLS_ENV: &str = "DISTLOCK_TEST_REDLOCK_URLS";

/// A fresh lock name, unique to this run, marked `label`.
pub fn name(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("t-{}-{label}", &run[..12])).expect("valid")
}

/// A client of the server at `url`, with 2 s operation and connect timeouts.
pub async fn connect(url: &str) -> RedisLock {
    RedisConfig::from_url(url)
        .expect("valid")
        .with_operation_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connects")
}

/// Starts a server from a blocking thread (the testkit API blocks).
pub async fn start_server() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("joined")
        .expect("redis-server starts (run scripts/install-test-deps)")
}

/// Deletes `key` on the server at `url` (a raw client, as an operator would).
pub async fn raw_del(url: &str, key: &[u8]) -> redis::RedisResult<()> {
    let mut conn = raw(url).await?;
    redis::cmd("DEL").arg(key).query_async(&mut conn).await
}

/// A raw multiplexed connection to `url`.
pub async fn raw(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?.get_multiplexed_async_connection().await
}

// ---------------------------------------------------------------------------------------------
// Single instance

/// One Redis server under test.
pub struct RedisFixture {
    site: Site,
}

impl RedisFixture {
    /// The server's URL.
    pub fn url(&self) -> &str {
        self.site.url()
    }

    /// A client of the server.
    pub async fn lock(&self) -> RedisLock {
        lock_at(self.url()).await
    }
}

/// The fixtures' operation and connect timeout.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(1);

/// A client of the server at `url`, as the fixture builds them.
pub async fn lock_at(url: &str) -> RedisLock {
    {
        RedisConfig::from_url(url)
            .expect("valid URL")
            .with_operation_timeout(OPERATION_TIMEOUT)
            .with_connect_timeout(OPERATION_TIMEOUT)
            .build()
            .await
            .expect("connects")
    }
}

/// The conformance fixture factory for a single server.
pub async fn single(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| RedisServer::start(),
        shared: shared::redis_url,
        own_for_faults: false,
    };
    Arc::new(RedisFixture {
        site: Site::open(needs, plan).await,
    })
}

#[async_trait]
impl Fixture for RedisFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.lock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        raw_del(self.url(), name.as_str().as_bytes())
            .await
            .map_err(|e| Error::backend("redis", e))
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        self.lock().await.count_held(prefix).await
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        Some(proxied(&self.site).await)
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// `kill -9` of the case's own server (it comes back empty: no persistence).
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        Some(clocked::single(Some("docs/src/stores/redis.md")).await)
    }
}

/// A client of a single server or of a cluster, through the site's fault proxies.
async fn proxied(site: &Site) -> Result<Proxied> {
    let (url, faults) = site.proxied().await.map_err(|e| Error::backend("redis", e))?;
    Ok(Proxied {
        lock: Arc::new(lock_at(&url).await),
        faults,
    })
}

// ---------------------------------------------------------------------------------------------
// Redlock

/// Redlock over N servers under test.
pub struct RedlockFixture {
    site: Site,
}

impl RedlockFixture {
    /// The masters' URLs.
    pub fn urls(&self) -> Vec<String> {
        self.site.url().split(',').map(str::to_owned).collect()
    }

    /// A client of the masters.
    pub async fn redlock(&self) -> Redlock {
        redlock_at(&self.urls()).await
    }
}

/// A Redlock client of the masters at `urls`, as the fixture builds them.
pub async fn redlock_at(urls: &[String]) -> Redlock {
    {
        // Generous: debug builds on a busy 2-core machine answer bursts of 500 acquisitions
        // over 5 masters in up to ~300 ms.
        RedlockConfig::new(urls)
            .expect("valid URLs")
            .with_node_timeout(OPERATION_TIMEOUT)
            .with_connect_timeout(OPERATION_TIMEOUT)
            .build()
            .await
            .expect("builds")
    }
}

type SharedMasters = OnceLock<std::result::Result<Vec<RedisServer>, HarnessError>>;

static SHARED_3: SharedMasters = OnceLock::new();
static SHARED_5: SharedMasters = OnceLock::new();

/// Starts `n` servers.
pub async fn start_servers(n: usize) -> Vec<RedisServer> {
    tokio::task::spawn_blocking(move || {
        (0..n)
            .map(|_| RedisServer::start().expect("redis-server starts (run scripts/install-test-deps)"))
            .collect()
    })
    .await
    .expect("joined")
}

/// Starts `n` servers (blocking).
fn masters(n: usize) -> std::result::Result<Vec<RedisServer>, HarnessError> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// `$DISTLOCK_TEST_REDLOCK_URLS`, or the URLs of the test binary's `n` shared masters.
fn shared_masters(n: usize, shared: &'static SharedMasters) -> std::result::Result<String, HarnessError> {
    if let Some(urls) = std::env::var(REDLOCK_URLS_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        return Ok(urls);
    }
    let servers = shared.get_or_init(|| masters(n)).as_ref().map_err(Clone::clone)?;
    Ok(servers.iter().map(RedisServer::url).collect::<Vec<_>>().join(","))
}

/// The conformance fixture factory for Redlock over 3 masters.
pub async fn redlock3(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| masters(3),
        shared: || shared_masters(3, &SHARED_3),
        own_for_faults: false,
    };
    Arc::new(RedlockFixture {
        site: Site::open(needs, plan).await,
    })
}

/// The conformance fixture factory for Redlock over 5 masters.
pub async fn redlock5(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| masters(5),
        shared: || shared_masters(5, &SHARED_5),
        own_for_faults: false,
    };
    Arc::new(RedlockFixture {
        site: Site::open(needs, plan).await,
    })
}

#[async_trait]
impl Fixture for RedlockFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.redlock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        for url in &self.urls() {
            raw_del(url, name.as_str().as_bytes())
                .await
                .map_err(|e| Error::backend("redis", e))?;
        }
        Ok(())
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        self.redlock().await.count_held(prefix).await
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let mut faults = distlock_conformance::FaultProxies::default();
        let mut urls = Vec::new();
        for url in &self.urls() {
            let (proxied, proxies) = match distlock_testkit::proxy::through_proxies(url) {
                Ok(pair) => pair,
                Err(e) => return Some(Err(Error::backend("redis", e))),
            };
            urls.push(proxied);
            faults.extend(proxies);
        }
        Some(Ok(Proxied {
            lock: Arc::new(redlock_at(&urls).await),
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// Kills a majority of the case's own masters.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    /// As many masters as the fixture's, the first on the clock.
    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        Some(clocked::redlock(self.urls().len(), None).await)
    }
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster

/// A three-master Redis Cluster under test.
pub struct ClusterFixture {
    site: Site,
}

impl ClusterFixture {
    /// The cluster's `redis+cluster://` URL.
    pub fn url(&self) -> &str {
        self.site.url()
    }

    /// A client of the cluster.
    pub async fn lock(&self) -> RedisLock {
        lock_at(self.url()).await
    }
}

/// Starts a cluster from a blocking thread.
pub async fn start_cluster(options: RedisClusterOptions) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start_with(options))
        .await
        .expect("joined")
        .expect("a Redis cluster starts (run scripts/install-test-deps)")
}

/// The conformance fixture factory for a Redis Cluster. A fault case gets a cluster of its
/// own that announces no addresses, so a client behind proxies stays behind them for every
/// master (see `RedisClusterOptions::proxyable`); `MOVED` redirects would otherwise name the
/// real masters and lead the client around the proxies.
pub async fn cluster(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |needs| {
            RedisCluster::start_with(RedisClusterOptions {
                proxyable: needs == Needs::FaultProxy,
                ..RedisClusterOptions::default()
            })
        },
        shared: shared::redis_cluster_url,
        own_for_faults: true,
    };
    Arc::new(ClusterFixture {
        site: Site::open(needs, plan).await,
    })
}

/// A raw cluster connection to `url` (`redis+cluster://...`), as an operator's client.
pub async fn raw_cluster(url: &str) -> redis::RedisResult<redis::cluster_async::ClusterConnection> {
    let hosts = url.trim_start_matches("redis+cluster://");
    let nodes: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
    redis::cluster::ClusterClient::new(nodes)?
        .get_async_connection()
        .await
}

#[async_trait]
impl Fixture for ClusterFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.lock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        let mut conn = raw_cluster(self.url())
            .await
            .map_err(|e| Error::backend("redis", e))?;
        redis::cmd("DEL")
            .arg(name.as_str().as_bytes())
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| Error::backend("redis", e))
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        self.lock().await.count_held(prefix).await
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        Some(proxied(&self.site).await)
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// Kills every master of the case's own cluster; they restart with their `nodes.conf`
    /// (their slots, no data).
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }
}
