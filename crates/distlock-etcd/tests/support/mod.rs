//! The test fixture: etcd servers started by the harness (one member, or a 3-member cluster
//! whose every member each client is given), clients with a short lease, and fault hooks that
//! act on the keys directly through `etcdctl`.
#![allow(dead_code)] // each test binary uses its own part of it

mod members;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{Failover, Fixture, Members, Needs, Outage, Plan, Proxied, Site};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_etcd::{EtcdConfig, EtcdLock};
use distlock_testkit::{shared, EtcdCluster, EtcdServer};

/// Short enough that lease-expiry cases run quickly, long enough for a loaded 2-core box
/// (etcd's own floor, one and a half election timeouts, is 1.5 s with the testkit's 1 s).
pub const LEASE_TTL: Duration = Duration::from_secs(3);
/// The per-operation bound in tests.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);

/// A client configuration for `url` with the test lease TTL and timeout.
pub fn config(url: &str) -> EtcdConfig {
    EtcdConfig::from_url(url)
        .and_then(|c| c.with_lease_ttl(LEASE_TTL))
        .and_then(|c| c.with_operation_timeout(OPERATION_TIMEOUT))
        .expect("a valid test URL")
}

/// A new client (its own lease) of the cluster at `url`.
pub async fn connect(url: &str) -> EtcdLock {
    EtcdLock::connect(config(url)).await.expect("connects")
}

/// `http://host:port,...`, the `etcdctl --endpoints` of an `etcd://` URL.
pub fn endpoints(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let hosts = rest.split(['/', '?']).next().unwrap_or(rest);
    hosts
        .split(',')
        .map(|host| format!("http://{host}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Runs `etcdctl ARGS...` against `url` off the runtime's threads.
pub async fn etcdctl(url: &str, args: &[&str]) -> Result<String> {
    let endpoints = endpoints(url);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        distlock_testkit::etcdctl(&endpoints, &args)
    })
    .await
    .map_err(|e| Error::backend("etcd", e))?
    .map_err(|e| Error::backend("etcd", e))
}

/// The keys `etcdctl get --keys-only` printed (one per line, blank lines between).
fn keys(listing: &str) -> Vec<String> {
    listing
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The suite's fixture: one member or a cluster, from a [`Site`].
pub struct EtcdFixture {
    site: Site,
    admin: EtcdLock,
    /// Whether the store is a cluster (it offers [`Fixture::members`] and
    /// [`Fixture::failover`]).
    cluster: bool,
}

impl EtcdFixture {
    async fn on(site: Site, cluster: bool) -> Self {
        Self {
            admin: connect(site.url()).await,
            site,
            cluster,
        }
    }

    /// The cluster's URL.
    pub fn url(&self) -> &str {
        self.site.url()
    }

    /// The contender keys of `name`, in queue order (create revision).
    pub async fn contenders(&self, name: &LockName) -> Result<Vec<String>> {
        let prefix = self.admin.lock_prefix(name);
        let listing = etcdctl(
            self.url(),
            &[
                "get",
                &prefix,
                "--prefix",
                "--keys-only",
                "--sort-by=CREATE",
                "--order=ASCEND",
            ],
        )
        .await?;
        Ok(keys(&listing))
    }
}

/// The conformance factory over a single member.
pub async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| EtcdServer::start(),
        shared: shared::etcd_url,
        own_for_faults: false,
    };
    Arc::new(EtcdFixture::on(Site::open(needs, plan).await, false).await)
}

/// The conformance factory over a 3-member cluster (every client is given all three
/// members). The outage case gets a cluster of its own and kills a majority of it.
pub async fn cluster_fixture(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| EtcdCluster::start(),
        shared: shared::etcd_cluster_url,
        own_for_faults: false,
    };
    Arc::new(EtcdFixture::on(Site::open(needs, plan).await, true).await)
}

#[async_trait]
impl Fixture for EtcdFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(EtcdLock::connect(config(self.url())).await?))
    }

    /// A client given only the proxies' addresses: it never learns the members' own (it
    /// does not ask the cluster for its member list), so it stays behind them.
    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match self.site.proxied().await {
            Ok(pair) => pair,
            Err(e) => return Some(Err(Error::backend("etcd", e))),
        };
        Some(EtcdLock::connect(config(&url)).await.map(|lock| Proxied {
            lock: Arc::new(lock) as Arc<dyn DistributedLock>,
            faults,
        }))
    }

    fn operation_timeout(&self) -> Duration {
        OPERATION_TIMEOUT
    }

    /// The keeper waits a third of the lease's TTL for each keep-alive's reply before it
    /// calls the lease suspended, so a round trip must stay well under that: a twentieth of
    /// the TTL each way is a slow store the lease survives.
    fn slow_latency(&self) -> Duration {
        LEASE_TTL / 20
    }

    /// The lease every lock of the client is attached to.
    fn session_lifetime(&self) -> Option<Duration> {
        Some(LEASE_TTL)
    }

    /// Deletes the holder's key (the first contender under the lock's prefix).
    async fn steal(&self, name: &LockName) -> Result<()> {
        let contenders = self.contenders(name).await?;
        let first = contenders
            .first()
            .ok_or_else(|| Error::backend("etcd", format!("nobody holds {name:?}")))?;
        etcdctl(self.url(), &["del", first]).await.map(drop)
    }

    /// Contender keys under every lock whose name starts with `prefix`.
    async fn held_count(&self, prefix: &str) -> Result<usize> {
        let root = format!("{}/", self.admin.config().root());
        // The mutex's prefix of the name `prefix`, less its trailing `/`: the encoding keeps
        // or escapes each byte alone, so every longer name's prefix starts with it.
        let encoded = match LockName::new(prefix) {
            Ok(name) => self.admin.lock_prefix(&name),
            Err(_) => return Ok(0),
        };
        let encoded = encoded
            .strip_prefix(&root)
            .unwrap_or(&encoded)
            .trim_end_matches('/')
            .to_owned();
        let listing = etcdctl(self.url(), &["get", &root, "--prefix", "--keys-only"]).await?;
        Ok(keys(&listing)
            .iter()
            .filter_map(|key| key.strip_prefix(&root))
            .filter(|rest| {
                // `<name>/<contender>`, or `<primitive>:<name>/...` for the other primitives.
                let object = rest.split('/').next().unwrap_or_default();
                let name = object.split_once(':').map_or(object, |(_, name)| name);
                name.starts_with(&encoded) && rest.contains('/')
            })
            .count())
    }

    /// A new 3-member cluster with links the case cuts (a cluster fixture only).
    async fn members(&self) -> Option<Result<Box<dyn Members>>> {
        if !self.cluster {
            return None;
        }
        Some(
            members::EtcdMembers::start()
                .await
                .map(|m| Box::new(m) as Box<dyn Members>),
        )
    }

    /// A new 3-member cluster whose leader the case kills (a cluster fixture only).
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        if !self.cluster {
            return None;
        }
        Some(
            members::EtcdFailover::start()
                .await
                .map(|f| Box::new(f) as Box<dyn Failover>),
        )
    }

    /// `kill -9` of the case's own member (or a majority of its own cluster).
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }
}
