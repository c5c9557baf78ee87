//! Fixtures of the conformance suite for a single Redis server and for Redlock, and helpers
//! shared by this crate's integration tests.
//!
//! Servers: cases that leave the server alone share one per test binary; the outage case
//! (and any test thread whose name is unknown) gets its own, because it kills it. A child
//! process of the cross-process case connects to the parent's servers through
//! `DISTLOCK_TEST_REDIS_URL` / `DISTLOCK_TEST_REDLOCK_URLS`.
#![allow(dead_code)] // each test binary uses a different part

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Fixture, Outage, Proxied};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_redis::{RedisConfig, RedisLock, Redlock, RedlockConfig};
use distlock_testkit::{shared, RedisCluster, RedisClusterOptions, RedisServer};

/// Points the Redlock fixtures at running masters: comma-separated URLs.
pub const REDLOCK_URLS_ENV: &str = "DISTLOCK_TEST_REDLOCK_URLS";

/// The conformance case that kills its server.
const OUTAGE_CASE: &str = "c12_store_going_away";

/// Whether this fixture needs servers of its own: the outage case kills them.
fn needs_own_servers() -> bool {
    distlock_conformance::current_case().is_none_or(|case| case == OUTAGE_CASE)
}

/// Starts a server from a blocking thread (the testkit API blocks).
pub async fn start_server() -> RedisServer {
    tokio::task::spawn_blocking(RedisServer::start)
        .await
        .expect("joined")
        .expect("redis-server starts (run scripts/install-test-deps)")
}

/// Servers owned by one fixture, killed and restarted by its outage.
type Owned = Arc<Mutex<Vec<RedisServer>>>;

async fn with_servers(servers: &Owned, f: impl FnOnce(&mut Vec<RedisServer>) + Send + 'static) {
    let servers = servers.clone();
    tokio::task::spawn_blocking(move || {
        let mut servers = servers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut servers);
    })
    .await
    .expect("joined");
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
    url: String,
    own: Option<Owned>,
}

impl RedisFixture {
    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client of the server.
    pub async fn lock(&self) -> RedisLock {
        lock_at(&self.url).await
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
pub async fn single() -> Arc<dyn Fixture> {
    if let Ok(url) = std::env::var(shared::REDIS_URL_ENV) {
        return Arc::new(RedisFixture { url, own: None });
    }
    if needs_own_servers() {
        let server = start_server().await;
        return Arc::new(RedisFixture {
            url: server.url(),
            own: Some(Arc::new(Mutex::new(vec![server]))),
        });
    }
    let url = tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts (run scripts/install-test-deps)");
    Arc::new(RedisFixture { url, own: None })
}

#[async_trait]
impl Fixture for RedisFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.lock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        raw_del(&self.url, name.as_str().as_bytes())
            .await
            .map_err(|e| Error::backend("redis", e))
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        self.lock().await.count_held(prefix).await
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match distlock_testkit::proxy::through_proxies(&self.url) {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("redis", e))),
        };
        Some(Ok(Proxied {
            lock: Arc::new(lock_at(&url).await),
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let own = self.own.clone()?;
        with_servers(&own, |servers| {
            for server in servers.iter_mut() {
                server.kill().expect("kill -9");
            }
        })
        .await;
        Some(Box::new(Restart { servers: own }))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(vec![(shared::REDIS_URL_ENV.to_owned(), self.url.clone())])
    }
}

/// Restarts killed servers (same port, no persistence: they come back empty).
struct Restart {
    servers: Owned,
}

#[async_trait]
impl Outage for Restart {
    async fn restore(self: Box<Self>) {
        with_servers(&self.servers, |servers| {
            for server in servers.iter_mut() {
                if !server.is_running() {
                    server.restart().expect("restart");
                }
            }
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Redlock

/// Redlock over N servers under test.
pub struct RedlockFixture {
    urls: Vec<String>,
    own: Option<Owned>,
}

impl RedlockFixture {
    /// The masters' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// A client of the masters.
    pub async fn redlock(&self) -> Redlock {
        redlock_at(&self.urls).await
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

static SHARED_3: OnceLock<Vec<RedisServer>> = OnceLock::new();
static SHARED_5: OnceLock<Vec<RedisServer>> = OnceLock::new();

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

async fn redlock_fixture(n: usize, shared: &'static OnceLock<Vec<RedisServer>>) -> Arc<dyn Fixture> {
    if let Ok(urls) = std::env::var(REDLOCK_URLS_ENV) {
        let urls = urls.split(',').map(str::to_owned).collect();
        return Arc::new(RedlockFixture { urls, own: None });
    }
    if needs_own_servers() {
        let servers = start_servers(n).await;
        return Arc::new(RedlockFixture {
            urls: servers.iter().map(RedisServer::url).collect(),
            own: Some(Arc::new(Mutex::new(servers))),
        });
    }
    let servers = tokio::task::spawn_blocking(move || {
        shared.get_or_init(|| {
            (0..n)
                .map(|_| RedisServer::start().expect("redis-server starts"))
                .collect()
        })
    })
    .await
    .expect("joined");
    Arc::new(RedlockFixture {
        urls: servers.iter().map(RedisServer::url).collect(),
        own: None,
    })
}

/// The conformance fixture factory for Redlock over 3 masters.
pub async fn redlock3() -> Arc<dyn Fixture> {
    redlock_fixture(3, &SHARED_3).await
}

/// The conformance fixture factory for Redlock over 5 masters.
pub async fn redlock5() -> Arc<dyn Fixture> {
    redlock_fixture(5, &SHARED_5).await
}

#[async_trait]
impl Fixture for RedlockFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.redlock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        for url in &self.urls {
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
        for url in &self.urls {
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

    /// Kills a majority of the masters.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let own = self.own.clone()?;
        with_servers(&own, |servers| {
            let majority = servers.len() / 2 + 1;
            for server in servers.iter_mut().take(majority) {
                server.kill().expect("kill -9");
            }
        })
        .await;
        Some(Box::new(Restart { servers: own }))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(vec![(REDLOCK_URLS_ENV.to_owned(), self.urls.join(","))])
    }
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster

/// The conformance cases that put fault proxies in front of the store: they get a cluster of
/// their own that announces no addresses, so a client behind proxies stays behind them for
/// every master (see `RedisClusterOptions::proxyable`).
const FAULT_CASES: [&str; 7] = [
    "c21_timed_out_acquire_leaves_nothing",
    "c22_silent_partition_of_a_holder",
    "c23_slow_store",
    "c24_waiters_survive_resets",
    "c25_no_exhaustion_after_timeouts",
    "c41_timed_out_permit_or_write_leaves_nothing",
    "c42_silent_partition_of_a_permit_or_rw_holder",
];

/// A three-master Redis Cluster under test.
pub struct ClusterFixture {
    url: String,
    own: Option<Arc<Mutex<RedisCluster>>>,
}

impl ClusterFixture {
    /// The cluster's `redis+cluster://` URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client of the cluster.
    pub async fn lock(&self) -> RedisLock {
        lock_at(&self.url).await
    }
}

/// Starts a cluster from a blocking thread.
pub async fn start_cluster(options: RedisClusterOptions) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start_with(options))
        .await
        .expect("joined")
        .expect("a Redis cluster starts (run scripts/install-test-deps)")
}

/// The conformance fixture factory for a Redis Cluster.
pub async fn cluster() -> Arc<dyn Fixture> {
    if let Ok(url) = std::env::var(shared::REDIS_CLUSTER_URL_ENV) {
        return Arc::new(ClusterFixture { url, own: None });
    }
    let fault_case = distlock_conformance::current_case().is_some_and(|case| FAULT_CASES.contains(&case));
    if needs_own_servers() || fault_case {
        let cluster = start_cluster(RedisClusterOptions {
            proxyable: fault_case,
            ..RedisClusterOptions::default()
        })
        .await;
        return Arc::new(ClusterFixture {
            url: cluster.url(),
            own: Some(Arc::new(Mutex::new(cluster))),
        });
    }
    let url = tokio::task::spawn_blocking(shared::redis_cluster_url)
        .await
        .expect("joined")
        .expect("the shared Redis cluster starts (run scripts/install-test-deps)");
    Arc::new(ClusterFixture { url, own: None })
}

/// A raw cluster connection to `url` (`redis+cluster://...`), as an operator's client.
pub async fn raw_cluster(url: &str) -> redis::RedisResult<redis::cluster_async::ClusterConnection> {
    let hosts = url.trim_start_matches("redis+cluster://");
    let nodes: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
    redis::cluster::ClusterClient::new(nodes)?
        .get_async_connection()
        .await
}

async fn with_cluster(
    cluster: &Arc<Mutex<RedisCluster>>,
    f: impl FnOnce(&mut RedisCluster) + Send + 'static,
) {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut cluster);
    })
    .await
    .expect("joined");
}

#[async_trait]
impl Fixture for ClusterFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.lock().await))
    }

    async fn steal(&self, name: &LockName) -> Result<()> {
        let mut conn = raw_cluster(&self.url)
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

    /// A client behind proxies in front of every master, on a cluster that announces no
    /// addresses (the fault cases get one): `MOVED` redirects would otherwise name the real
    /// masters and lead the client around the proxies.
    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let own = self.own.clone()?;
        let proxies = tokio::task::spawn_blocking(move || {
            own.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .proxies()
        })
        .await
        .expect("joined");
        let (url, faults) = match proxies {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("redis", e))),
        };
        Some(Ok(Proxied {
            lock: Arc::new(lock_at(&url).await),
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// Kills every master.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        let own = self.own.clone()?;
        with_cluster(&own, |cluster| {
            for i in 0..cluster.nodes().len() {
                cluster.node_mut(i).kill().expect("kill -9");
            }
        })
        .await;
        Some(Box::new(RestartCluster { cluster: own }))
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(vec![(shared::REDIS_CLUSTER_URL_ENV.to_owned(), self.url.clone())])
    }
}

/// Restarts killed masters (their `nodes.conf` keeps their slots; no data) and waits until
/// the cluster is ok.
struct RestartCluster {
    cluster: Arc<Mutex<RedisCluster>>,
}

#[async_trait]
impl Outage for RestartCluster {
    async fn restore(self: Box<Self>) {
        with_cluster(&self.cluster, |cluster| {
            for i in 0..cluster.nodes().len() {
                if !cluster.nodes()[i].is_running() {
                    cluster.node_mut(i).restart().expect("restart");
                }
            }
            cluster.wait_until_ok().expect("the cluster is ok again");
        })
        .await;
    }
}
