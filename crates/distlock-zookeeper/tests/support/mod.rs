//! The test fixture: ZooKeeper servers started by the harness, clients with short session
//! timeouts, and fault hooks that act on the znodes directly.
#![allow(dead_code)] // each test binary uses its own part of it

mod failover;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_conformance::{
    Clocked, ClockedStore, Failover, Fixture, Members, Needs, Outage, Plan, Proxied, Site,
};
use distlock_core::{DistributedLock, Error, LockName, Result};
use distlock_testkit::{shared, StoreClock, ZooKeeperEnsemble, ZooKeeperOptions, ZooKeeperServer};
use distlock_zookeeper::{ZooKeeperConfig, ZooKeeperLock};
use zookeeper_client as zk;

pub mod race;

/// Short enough that session-expiry cases run quickly, long enough for a loaded 2-core box.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(3);
/// The per-operation bound in tests.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(3);
/// The session timeout of the clients of a server on a moved clock ([`ZkFixture`]'s
/// `store_clock`). That server reads libfaketime's offset file at every time call, its threads
/// taking turns, so on a loaded machine it can stay silent for longer than a quarter of
/// [`SESSION_TIMEOUT`] (750 ms), the silence after which a client treats its connection as
/// lost and fails what it was waiting for (seen: "no response from connection in 750ms" on
/// a release). With this one a client waits 2 s before it does.
pub const CLOCKED_SESSION_TIMEOUT: Duration = Duration::from_secs(8);

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

/// Starts a 3-member ensemble with `options` and a fault proxy on every link between its
/// members (`peer_proxies`), and waits for its leader: the ensemble and the leader's index.
pub async fn proxied_ensemble(options: ZooKeeperOptions) -> (ZooKeeperEnsemble, usize) {
    let options = ZooKeeperOptions {
        peer_proxies: true,
        ..options
    };
    tokio::task::spawn_blocking(move || {
        let ensemble = ZooKeeperEnsemble::start_with(options)?;
        let leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
        Ok::<_, distlock_testkit::HarnessError>((ensemble, leader))
    })
    .await
    .expect("joined")
    .expect("the ensemble starts with proxies between its members (run scripts/install-test-deps to install zookeeper)")
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

/// The suite's fixture: a standalone server or an ensemble, from a [`Site`].
pub struct ZkFixture {
    site: Site,
    admin: ZooKeeperLock,
    raw: zk::Client,
    /// Whether the store is an ensemble (it offers [`Fixture::members`]).
    ensemble: bool,
}

impl ZkFixture {
    /// Over the shared standalone server (or `$DISTLOCK_TEST_ZOOKEEPER_URL`).
    pub async fn shared() -> Self {
        let url = tokio::task::spawn_blocking(shared::zookeeper_url)
            .await
            .expect("joined")
            .expect("the shared ZooKeeper starts");
        Self::on(Site::at(url)).await
    }

    /// Over the test binary's shared 3-node ensemble (never killed by a test).
    pub async fn ensemble() -> Self {
        let url = tokio::task::spawn_blocking(shared::zookeeper_ensemble_url)
            .await
            .expect("joined")
            .expect("the shared ZooKeeper ensemble starts");
        Self::on(Site::at(url)).await
    }

    async fn on(site: Site) -> Self {
        Self {
            admin: connect(site.url()).await,
            raw: raw(site.url()).await,
            site,
            ensemble: false,
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        self.site.url()
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

/// The conformance factory over a standalone server.
pub async fn fixture(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| ZooKeeperServer::start(),
        shared: shared::zookeeper_url,
        own_for_faults: false,
    };
    Arc::new(ZkFixture::on(Site::open(needs, plan).await).await)
}

/// The conformance factory over a 3-node ensemble (every client is given all three members).
/// The outage case gets an ensemble of its own and kills a majority of it.
pub async fn ensemble_fixture(needs: Needs) -> Arc<dyn Fixture> {
    let plan = Plan {
        start: |_| ZooKeeperEnsemble::start(),
        shared: shared::zookeeper_ensemble_url,
        own_for_faults: false,
    };
    let mut fixture = ZkFixture::on(Site::open(needs, plan).await).await;
    fixture.ensemble = true;
    Arc::new(fixture)
}

#[async_trait]
impl Fixture for ZkFixture {
    async fn backend(&self) -> Result<Arc<dyn DistributedLock>> {
        Ok(Arc::new(ZooKeeperLock::connect(config(self.url())).await?))
    }

    async fn proxied_backend(&self) -> Option<Result<Proxied>> {
        let (url, faults) = match self.site.proxied().await {
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

    /// The session every lock of the client belongs to.
    fn session_lifetime(&self) -> Option<Duration> {
        Some(SESSION_TIMEOUT)
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

    /// `kill -9` of the case's own server (or a majority of its own ensemble).
    async fn outage(&self) -> Option<Box<dyn Outage>> {
        Some(self.site.outage().await)
    }

    fn child_env(&self) -> Option<Vec<(String, String)>> {
        Some(self.site.child_env())
    }

    fn short_ttl(&self) -> Duration {
        Duration::from_millis(500)
    }

    /// A standalone server of the case's own. None for an ensemble: three JVMs that read the
    /// clock's file at every time call do not elect a leader within the testkit's 30 s here.
    async fn store_clock(&self) -> Option<Box<dyn ClockedStore>> {
        if self.url().contains(',') {
            return None;
        }
        let (servers, clock) = tokio::task::spawn_blocking(|| {
            let clock = StoreClock::new().expect("libfaketime is installed (run scripts/install-test-deps)");
            let servers = ZooKeeperServer::start_with(ZooKeeperOptions {
                clock: Some(clock.clone()),
                ..ZooKeeperOptions::default()
            })
            .expect("ZooKeeper starts (run scripts/install-test-deps)");
            (servers, clock)
        })
        .await
        .expect("the starter thread");
        Some(Box::new(Clocked {
            url: servers.url(),
            servers,
            clock,
            open: |url| {
                Box::pin(async move {
                    let config = config(&url).with_session_timeout(CLOCKED_SESSION_TIMEOUT)?;
                    Ok(Arc::new(ZooKeeperLock::connect(config).await?) as Arc<dyn DistributedLock>)
                })
            },
            declared_loss: None,
            session_lifetime: Some(CLOCKED_SESSION_TIMEOUT),
        }))
    }

    /// A new 3-node ensemble with proxies between its members (an ensemble fixture only).
    async fn members(&self) -> Option<Result<Box<dyn Members>>> {
        if !self.ensemble {
            return None;
        }
        Some(ZkMembers::start().await.map(|m| Box::new(m) as Box<dyn Members>))
    }

    /// A new 3-node ensemble whose leader the case kills (an ensemble fixture only).
    async fn failover(&self) -> Option<Result<Box<dyn Failover>>> {
        if !self.ensemble {
            return None;
        }
        Some(
            failover::ZkFailover::start()
                .await
                .map(|f| Box::new(f) as Box<dyn Failover>),
        )
    }
}

/// An ensemble of a case's own whose members can be partitioned ([`Fixture::members`]).
/// `syncLimit` is 20 ticks (10 s, as ZooKeeper's sample configuration), well past the
/// clients' 3 s session timeout: a cut-off follower keeps answering its clients long after
/// the leader may have expired their sessions.
pub struct ZkMembers {
    ensemble: Arc<ZooKeeperEnsemble>,
}

impl ZkMembers {
    pub async fn start() -> Result<Self> {
        let options = ZooKeeperOptions {
            sync_limit: 20,
            peer_proxies: true,
            ..ZooKeeperOptions::default()
        };
        let ensemble = blocking(move || ZooKeeperEnsemble::start_with(options)).await?;
        Ok(Self {
            ensemble: Arc::new(ensemble),
        })
    }
}

/// Runs a blocking harness call off the runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::result::Result<T, distlock_testkit::HarnessError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend("zookeeper", e))?
        .map_err(|e| Error::backend("zookeeper", e))
}

#[async_trait]
impl Members for ZkMembers {
    fn count(&self) -> usize {
        self.ensemble.nodes().len()
    }

    async fn leader(&self) -> Result<usize> {
        let ensemble = self.ensemble.clone();
        blocking(move || ensemble.wait_for_leader(Duration::from_secs(30))).await
    }

    async fn client(&self, members: &[usize]) -> Result<Arc<dyn DistributedLock>> {
        let nodes = self.ensemble.nodes();
        let hosts = members
            .iter()
            .map(|m| {
                let node = nodes
                    .get(*m)
                    .ok_or_else(|| Error::backend("zookeeper", format!("no member {m}")))?;
                Ok(format!("127.0.0.1:{}", node.port()))
            })
            .collect::<Result<Vec<String>>>()?;
        let url = format!("zk://{}", hosts.join(","));
        Ok(Arc::new(ZooKeeperLock::connect(config(&url)).await?))
    }

    async fn isolate(&self, member: usize) -> Result<()> {
        self.ensemble
            .isolate(member)
            .map_err(|e| Error::backend("zookeeper", e))
    }

    async fn heal(&self) -> Result<()> {
        self.ensemble
            .heal_links()
            .map_err(|e| Error::backend("zookeeper", e))
    }
}
