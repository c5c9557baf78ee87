//! The conformance fixture of a Redis Sentinel set (`redis+sentinel://`, with
//! `wait_for_replicas=1`): cases that leave it alone share one set per test binary; the
//! outage case kills both data servers of a set of its own, and the failover case fails a set
//! of its own over (see [`SentinelFailover`]).
//!
//! It offers no fault proxies: a client reaches the data servers at the addresses the
//! Sentinels name, so proxies in front of the Sentinels would not stand between the client
//! and its data, and proxies in front of the data servers would stand between them and the
//! Sentinels too (a blackholed primary would be failed over in the middle of a case).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Failover, Fixture, Needs, Outage, Plan, Servers, Site};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::{FaultProxies, HarnessError, RedisSentinelSet};

use super::OPERATION_TIMEOUT;

/// Points the shared fixture at a running Sentinel set: its `redis+sentinel://` URL.
pub const SENTINEL_URL_ENV: &str = "DISTLOCK_TEST_REDIS_SENTINEL_URL";

/// A Sentinel set of a case's own, as the conformance site takes it away and back.
pub struct OwnSet(pub RedisSentinelSet);

impl Servers for OwnSet {
    fn url(&self) -> String {
        self.0.url(1)
    }
    fn take_away(&mut self) -> std::result::Result<(), HarnessError> {
        self.0.kill_data_servers()
    }
    fn bring_back(&mut self) -> std::result::Result<(), HarnessError> {
        self.0.restart_data_servers()
    }
    fn proxied(&self) -> std::result::Result<(String, FaultProxies), HarnessError> {
        Err(HarnessError::Other(
            "a Sentinel set offers no fault proxies".to_owned(),
        ))
    }
}

static SHARED: OnceLock<std::result::Result<RedisSentinelSet, HarnessError>> = OnceLock::new();

/// `$DISTLOCK_TEST_REDIS_SENTINEL_URL`, or the test binary's shared set's URL.
fn shared_url() -> std::result::Result<String, HarnessError> {
    if let Some(url) = std::env::var(SENTINEL_URL_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
    {
        return Ok(url);
    }
    SHARED
        .get_or_init(RedisSentinelSet::start)
        .as_ref()
        .map(|set| set.url(1))
        .map_err(Clone::clone)
}

/// A Sentinel set under test.
pub struct SentinelFixture {
    site: Site,
}

impl SentinelFixture {
    /// A client of the set.
    pub async fn lock(&self) -> RedisLock {
        open(self.site.url())
            .await
            .expect("connects through the Sentinels")
    }
}

/// A client of the set at `url`, as the fixture builds them.
async fn open(url: &str) -> Result<RedisLock> {
    RedisConfig::from_url(url)?
        .with_operation_timeout(OPERATION_TIMEOUT)
        .with_connect_timeout(OPERATION_TIMEOUT)
        .build()
        .await
}

/// The conformance fixture factory for a Sentinel set.
pub async fn sentinel(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| RedisSentinelSet::start().map(OwnSet),
        shared: shared_url,
        own_for_faults: false,
    };
    Arc::new(SentinelFixture {
        site: Site::open(needs, plan).await,
    })
}

#[async_trait]
impl Fixture for SentinelFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(self.lock().await))
    }

    /// Deletes the key on the primary the Sentinels name (as an operator would).
    async fn steal(&self, name: &LockName) -> Result<()> {
        let url = primary_url(self.site.url()).await?;
        super::raw_del(&url, name.as_str().as_bytes())
            .await
            .map_err(|e| Error::backend("redis", e))
    }

    async fn held_count(&self, prefix: &str) -> Result<usize> {
        self.lock().await.count_held(prefix).await
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// `kill -9` of both data servers of the case's own set.
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    /// A Sentinel set of the case's own, with `wait_for_replicas=1`.
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        let started = tokio::task::spawn_blocking(RedisSentinelSet::start)
            .await
            .expect("the starter thread");
        Some(
            started
                .map(|set| {
                    let url = set.url(1);
                    Box::new(SentinelFailover {
                        set: Arc::new(Mutex::new(set)),
                        url,
                    }) as Box<dyn Failover>
                })
                .map_err(|e| {
                    Error::backend(
                        "redis",
                        format!("the Sentinel set did not start (run scripts/install-test-deps): {e}"),
                    )
                }),
        )
    }
}

/// How long the Sentinels may take to promote the replica.
const PROMOTION_TIMEOUT: Duration = Duration::from_secs(30);

/// A Sentinel set whose clients wait for one replica's acknowledgement of every write
/// (`wait_for_replicas=1`), so its replica has every acknowledged lock. A failover is the
/// primary's `kill -9` and the Sentinels' promotion of the replica (`down-after-milliseconds`
/// 2000, a few seconds in all); the old primary then comes back as the new primary's replica,
/// without which no write is acknowledged any more.
pub struct SentinelFailover {
    set: Arc<Mutex<RedisSentinelSet>>,
    url: String,
}

#[async_trait]
impl Failover for SentinelFailover {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(open(&self.url).await?))
    }

    /// Renewed every 5 s: the one due while the primary is down is retried until the
    /// promotion and the old primary's return as a replica (about 5 s on a quiet machine).
    fn ttl(&self) -> Duration {
        Duration::from_secs(15)
    }

    async fn fail_over(&self) -> Result<()> {
        let set = self.set.clone();
        tokio::task::spawn_blocking(move || {
            let mut set = set.lock().unwrap_or_else(PoisonError::into_inner);
            set.kill_primary()?;
            set.wait_for_failover(PROMOTION_TIMEOUT)?;
            set.restart_old_primary_as_replica()
        })
        .await
        .map_err(|e| Error::backend("redis", e))?
        .map_err(|e| Error::backend("redis", e))
    }
}

/// The `redis://` URL of the primary the Sentinels of `url` (`redis+sentinel://h1:p1,.../name?..`)
/// name.
pub async fn primary_url(url: &str) -> Result<String> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let (hosts, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let master = tail.split('?').next().unwrap_or_default();
    let sentinels: Vec<String> = hosts.split(',').map(|h| format!("redis://{h}")).collect();
    let mut sentinel = redis::sentinel::Sentinel::build(sentinels).map_err(|e| Error::backend("redis", e))?;
    let client = sentinel
        .async_master_for(master, None)
        .await
        .map_err(|e| Error::backend("redis", e))?;
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(host, port) => Ok(format!("redis://{host}:{port}")),
        other => Err(Error::backend(
            "redis",
            format!("an unexpected primary address {other:?}"),
        )),
    }
}
