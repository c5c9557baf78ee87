//! The store under test: started by the harness through the testkit (so the harness can kill,
//! pause and restart it), or given by URL (then only client-side faults apply). This file
//! starts a store and says how clients reach it; `store/backend.rs` lists the backends,
//! `store/clock.rs` steps a server's clock, `store/server_faults.rs` kills, pauses and
//! partitions servers, `store/failover.rs` fails a replicated store over.

use std::time::Duration;

use distlock_testkit::proxy::through_proxies;
use distlock_testkit::{EtcdCluster, EtcdOptions, EtcdServer};
use distlock_testkit::{
    FaultProxies, HarnessError, MariaDbServer, MemcachedServer, PostgresServer, RedisCluster,
    RedisClusterOptions, RedisOptions, RedisSentinelSet, RedisServer, StoreClock, ZooKeeperEnsemble,
    ZooKeeperOptions, ZooKeeperServer,
};
use distlock_testkit::{MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication};
use distlock_testkit::{PostgresReplicated, PostgresReplicatedOptions, Replication};

mod backend;
mod clock;
mod failover;
mod server_faults;

pub use backend::Backend;

/// A running store.
pub enum Store {
    /// A SQLite file in a temporary directory.
    Sqlite(tempfile::TempDir),
    /// One redis-server.
    Redis(RedisServer),
    /// Three redis-servers.
    Redlock(Vec<RedisServer>),
    /// A Redis Cluster with a replica per master.
    Cluster(RedisCluster),
    /// MariaDB.
    Mariadb(MariaDbServer),
    /// PostgreSQL.
    Postgres(PostgresServer),
    /// A PostgreSQL primary and its streaming standby, behind a front that a failover moves.
    PostgresPair(Box<PostgresReplicated>),
    /// memcached.
    Memcached(MemcachedServer),
    /// A standalone ZooKeeper.
    Zookeeper(ZooKeeperServer),
    /// A ZooKeeper ensemble.
    Ensemble(ZooKeeperEnsemble),
    /// A MariaDB primary and its replica, behind a front that a failover moves.
    MariadbPair(Box<MariaDbReplicated>),
    /// A store the harness did not start.
    Url(String),
    /// A store whose server (Redlock: master 1) runs on a clock the harness steps, and how far
    /// it steps it.
    Clocked(Box<Store>, StoreClock, Duration),
    /// A Redis Sentinel set, and how many replicas acknowledge each write (0: none asked).
    Sentinel(RedisSentinelSet, u32),
    /// One etcd member.
    Etcd(EtcdServer),
    /// Three etcd members, with links between them that a partition cuts.
    EtcdCluster(EtcdCluster),
}

impl Store {
    /// Starts `backend`'s server (blocking; call it off the runtime's workers).
    pub fn start(backend: Backend) -> Result<Self, HarnessError> {
        Ok(match backend {
            Backend::Sqlite => Store::Sqlite(
                tempfile::tempdir()
                    .map_err(|e| HarnessError::Other(format!("a temporary directory: {e}")))?,
            ),
            Backend::Redis => Store::Redis(RedisServer::start_with(RedisOptions {
                persistence: true,
                ..RedisOptions::default()
            })?),
            Backend::RedisVolatile => Store::Redis(RedisServer::start()?),
            Backend::Redlock | Backend::RedlockNoDelay => Store::Redlock(
                (0..3)
                    .map(|_| RedisServer::start())
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            // Announcing no address, so each client stays behind its own proxies.
            Backend::RedisCluster => Store::Cluster(RedisCluster::start_with(RedisClusterOptions {
                replicas_per_master: 1,
                proxyable: true,
                ..RedisClusterOptions::default()
            })?),
            Backend::Mariadb => Store::Mariadb(MariaDbServer::start()?),
            Backend::Postgres => Store::Postgres(PostgresServer::start()?),
            Backend::Memcached => Store::Memcached(MemcachedServer::start()?),
            Backend::Zookeeper => Store::Zookeeper(ZooKeeperServer::start()?),
            // Proxies between the members, for the partition faults.
            Backend::ZookeeperEnsemble => Store::Ensemble(ZooKeeperEnsemble::start_with(ZooKeeperOptions {
                peer_proxies: true,
                ..ZooKeeperOptions::default()
            })?),
            Backend::MariadbSemisyncReplica => mariadb_pair(MariaDbReplication::SemiSynchronous)?,
            Backend::MariadbAsyncReplica => mariadb_pair(MariaDbReplication::Asynchronous)?,
            Backend::PostgresSyncStandby => Store::PostgresPair(Box::new(PostgresReplicated::start_with(
                PostgresReplicatedOptions {
                    replication: Replication::Synchronous,
                    ..Default::default()
                },
            )?)),
            Backend::PostgresAsyncStandby => Store::PostgresPair(Box::new(PostgresReplicated::start_with(
                PostgresReplicatedOptions {
                    replication: Replication::Asynchronous,
                    ..Default::default()
                },
            )?)),
            Backend::RedisSentinel => Store::Sentinel(RedisSentinelSet::start()?, 0),
            Backend::RedisSentinelReplicas => Store::Sentinel(RedisSentinelSet::start()?, 1),
            Backend::Etcd => Store::Etcd(EtcdServer::start()?),
            // Links between the members, for the partition faults.
            Backend::EtcdCluster => Store::EtcdCluster(EtcdCluster::start_with(EtcdOptions {
                peer_links: true,
                ..EtcdOptions::default()
            })?),
        })
    }

    /// The store's URL (clients reach it through their own fault proxies): ZooKeeper's with
    /// `session` as its session timeout, etcd's as its lease TTL (whole seconds, rounded up),
    /// Redlock's with `quarantine` as its restart quarantine.
    pub fn url(&self, session: Duration, quarantine: Duration) -> String {
        let zk = |url: String| format!("{url}?session_timeout={}ms", session.as_millis());
        let etcd = |url: String| format!("{url}?lease_ttl={}s", session.as_millis().div_ceil(1000));
        match self {
            Store::Sqlite(dir) => format!("sqlite://{}", dir.path().join("locks.db").display()),
            Store::Redis(server) => server.url(),
            Store::Redlock(servers) => format!(
                "redlock://{}?restart_quarantine={}ms",
                servers
                    .iter()
                    .map(|s| s.addr().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                quarantine.as_millis()
            ),
            Store::Cluster(cluster) => cluster.url(),
            Store::Mariadb(server) => server.url(),
            Store::Postgres(server) => server.url(),
            Store::Memcached(server) => server.url(),
            Store::Zookeeper(server) => zk(server.url()),
            Store::Ensemble(ensemble) => zk(ensemble.url()),
            Store::MariadbPair(pair) => pair.url(),
            Store::PostgresPair(pair) => pair.url(),
            Store::Url(url) => url.clone(),
            Store::Clocked(store, ..) => store.url(session, quarantine),
            Store::Sentinel(set, replicas) => set.url(*replicas),
            Store::Etcd(server) => etcd(server.url()),
            Store::EtcdCluster(cluster) => etcd(cluster.url()),
        }
    }

    /// A client's URL through fault proxies of its own, and the proxies (a cluster's client
    /// reaches every node, also after a failover, through one proxy per node).
    pub fn client_proxies(&self, url: &str) -> Result<(String, FaultProxies), HarnessError> {
        match self {
            Store::Cluster(cluster) => cluster.proxies(),
            // A client reaches the data servers at the addresses the Sentinels name, around
            // any proxy: no client-link faults (see `FaultKind::applicable`).
            Store::Sentinel(..) => Ok((url.to_owned(), FaultProxies(Vec::new()))),
            _ => through_proxies(url),
        }
    }

    /// The URL client number `client` connects with: the first clients of an ensemble or an
    /// etcd cluster are pinned to one member each, in turn ([`PINNED_CLIENTS`] of them), so
    /// that a partition has clients on each side that cannot move to another member; every
    /// other client (and every client of another store) is given `url`, the whole store.
    pub fn client_url(&self, client: usize, url: &str) -> String {
        let Some(member) = self.pinned_member(client) else {
            return url.to_owned();
        };
        let query = url.find('?').map_or("", |at| &url[at..]);
        match self {
            Store::Ensemble(ensemble) => format!("zk://127.0.0.1:{}{query}", ensemble.node(member).port()),
            Store::EtcdCluster(cluster) => format!("{}{query}", cluster.node(member).url()),
            _ => url.to_owned(),
        }
    }

    /// The member client number `client` is pinned to ([`client_url`](Self::client_url)).
    pub fn pinned_member(&self, client: usize) -> Option<usize> {
        match self {
            Store::Ensemble(ensemble) if client < PINNED_CLIENTS => Some(client % ensemble.nodes().len()),
            Store::EtcdCluster(cluster) if client < PINNED_CLIENTS => Some(client % cluster.nodes().len()),
            _ => None,
        }
    }

    /// Whether it has a server process the harness controls.
    pub fn has_server(&self) -> bool {
        !matches!(self, Store::Sqlite(_) | Store::Url(_))
    }
}

/// How many of an ensemble's clients are pinned to one member each, in turn (two per member).
pub const PINNED_CLIENTS: usize = 6;

fn mariadb_pair(replication: MariaDbReplication) -> Result<Store, HarnessError> {
    Ok(Store::MariadbPair(Box::new(MariaDbReplicated::start_with(
        MariaDbReplicatedOptions {
            replication,
            ..Default::default()
        },
    )?)))
}
