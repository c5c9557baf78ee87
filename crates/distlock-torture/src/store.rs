//! The store under test: started by the harness through the testkit (so the harness can kill,
//! pause and restart it), or given by URL (then only client-side faults apply).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use distlock_testkit::proxy::through_proxies;
use distlock_testkit::{
    FaultProxies, HarnessError, MariaDbServer, MemcachedServer, PostgresServer, RedisCluster,
    RedisClusterOptions, RedisOptions, RedisSentinelSet, RedisServer, ZooKeeperEnsemble, ZooKeeperServer,
};

use crate::faults::FaultKind;

/// Which backend to torture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Backend {
    /// The embedded SQLite file (no server: holder faults only).
    Sqlite,
    /// One redis-server with an append-only file fsync'ed on every write.
    Redis,
    /// One redis-server without persistence (a restart loses every lock: documented).
    RedisVolatile,
    /// Redlock over three redis-servers without persistence, with the delayed-restart rule (a
    /// restarted master's vote does not count for twice the TTL).
    Redlock,
    /// Redlock without the delayed-restart rule (a majority restarted empty loses locks:
    /// documented).
    RedlockNoDelay,
    /// A Redis Cluster of three masters with a replica each, without persistence: a killed
    /// master is replaced by its replica (a failover can lose a lock: documented).
    RedisCluster,
    /// MariaDB.
    Mariadb,
    /// PostgreSQL.
    Postgres,
    /// memcached.
    Memcached,
    /// A standalone ZooKeeper server.
    Zookeeper,
    /// A three-node ZooKeeper ensemble.
    ZookeeperEnsemble,
    /// A Redis primary with one replica and three Sentinels, without persistence, replicas not
    /// required: a killed primary is replaced by its replica (a failover can lose a lock:
    /// documented).
    RedisSentinel,
    /// The same with `wait_for_replicas=1`: every acquisition and renewal acknowledged by the
    /// replica.
    RedisSentinelReplicas,
}

impl Backend {
    /// Every backend, in the order `--backend all` runs them.
    pub const ALL: [Backend; 13] = [
        Backend::Sqlite,
        Backend::Redis,
        Backend::RedisVolatile,
        Backend::Redlock,
        Backend::RedlockNoDelay,
        Backend::RedisCluster,
        Backend::Mariadb,
        Backend::Postgres,
        Backend::Memcached,
        Backend::Zookeeper,
        Backend::ZookeeperEnsemble,
        Backend::RedisSentinel,
        Backend::RedisSentinelReplicas,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Redis => "redis",
            Backend::RedisVolatile => "redis-volatile",
            Backend::Redlock => "redlock",
            Backend::RedlockNoDelay => "redlock-no-delay",
            Backend::RedisCluster => "redis-cluster",
            Backend::Mariadb => "mariadb",
            Backend::Postgres => "postgres",
            Backend::Memcached => "memcached",
            Backend::Zookeeper => "zookeeper",
            Backend::ZookeeperEnsemble => "zookeeper-ensemble",
            Backend::RedisSentinel => "redis-sentinel",
            Backend::RedisSentinelReplicas => "redis-sentinel-replicas",
        }
    }

    /// The backend's operation timeout (its default), which bounds how late a waiter learns
    /// of a freed lock after a fault.
    pub fn operation_timeout(self) -> Duration {
        match self {
            Backend::Sqlite | Backend::Mariadb | Backend::Postgres => Duration::from_secs(5),
            Backend::Zookeeper | Backend::ZookeeperEnsemble => Duration::from_secs(3),
            _ => Duration::from_secs(2),
        }
    }

    /// How long a killed server stays down before it restarts: antirez's delayed-restart rule
    /// for Redlock (at least the longest TTL, here the client's restart quarantine). The
    /// client's quarantine alone cannot cover a client that first meets a master after its
    /// restart (the run that showed it: `--backend redlock --seed 18216203801686383024`
    /// without this delay, two holders after a majority restart at the start of the run).
    pub fn restart_delay(self, ttl: Duration) -> Duration {
        self.restart_quarantine(ttl)
    }

    /// How long a restarted Redlock master's vote does not count (the client's side of the
    /// delayed-restart rule).
    pub fn restart_quarantine(self, ttl: Duration) -> Duration {
        match self {
            Backend::Redlock => ttl * 2,
            _ => Duration::ZERO,
        }
    }

    /// The fault kinds under which the backend's docs say a lock can be lost or two holders
    /// can overlap (shown in the table, not failed).
    pub fn documented_losses(self) -> HashSet<String> {
        let kinds: &[FaultKind] = match self {
            // Without persistence a restarted server has forgotten every lock.
            Backend::RedisVolatile => &[FaultKind::ServerKill],
            // A restarted memcached has forgotten every item; the holder learns it only at its
            // next renewal.
            Backend::Memcached => &[FaultKind::ServerKill],
            // Without the delayed-restart rule, masters restarted empty vote again.
            Backend::RedlockNoDelay => &[FaultKind::MajorityKill, FaultKind::ServerKill],
            // Replication is asynchronous: a lock the promoted replica never got is free on it.
            Backend::RedisCluster => &[FaultKind::Failover, FaultKind::LaggedFailover],
            // The same without replicas required: the promoted replica may lack the lock.
            Backend::RedisSentinel => &[FaultKind::Failover, FaultKind::LaggedFailover],
            _ => &[],
        };
        kinds.iter().map(|k| k.name().to_owned()).collect()
    }
}

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
    /// memcached.
    Memcached(MemcachedServer),
    /// A standalone ZooKeeper.
    Zookeeper(ZooKeeperServer),
    /// A ZooKeeper ensemble.
    Ensemble(ZooKeeperEnsemble),
    /// A store the harness did not start.
    Url(String),
    /// A Redis Sentinel set, and how many replicas acknowledge each write (0: none asked).
    Sentinel(RedisSentinelSet, u32),
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
            Backend::ZookeeperEnsemble => Store::Ensemble(ZooKeeperEnsemble::start()?),
            Backend::RedisSentinel => Store::Sentinel(RedisSentinelSet::start()?, 0),
            Backend::RedisSentinelReplicas => Store::Sentinel(RedisSentinelSet::start()?, 1),
        })
    }

    /// The store's URL (clients reach it through their own fault proxies): ZooKeeper's with
    /// `session` as its session timeout, Redlock's with `quarantine` as its restart quarantine.
    pub fn url(&self, session: Duration, quarantine: Duration) -> String {
        let zk = |url: String| format!("{url}?session_timeout={}ms", session.as_millis());
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
            Store::Url(url) => url.clone(),
            Store::Sentinel(set, replicas) => set.url(*replicas),
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

    /// Whether it has a server process the harness controls.
    pub fn has_server(&self) -> bool {
        !matches!(self, Store::Sqlite(_) | Store::Url(_))
    }

    /// `kill -9` of the server (every server of Redlock's majority or the ensemble's leader,
    /// per `kind`), then a restart on the same port and data; blocks until ready.
    pub fn kill_and_restart(&mut self, kind: FaultKind, pause: Duration) -> Result<String, HarnessError> {
        match (self, kind) {
            (Store::Redis(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Mariadb(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Postgres(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Cluster(_), _) => Err(HarnessError::Other(
                "a cluster's master is killed by a failover".into(),
            )),
            (Store::Memcached(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Zookeeper(s), _) => {
                s.kill()?;
                std::thread::sleep(pause);
                s.restart()?;
                Ok("the server".into())
            }
            (Store::Redlock(servers), FaultKind::MajorityKill) => {
                servers[0].kill()?;
                servers[1].kill()?;
                std::thread::sleep(pause);
                servers[0].restart()?;
                servers[1].restart()?;
                Ok("masters 0 and 1".into())
            }
            (Store::Redlock(servers), _) => {
                servers[0].kill()?;
                std::thread::sleep(pause);
                servers[0].restart()?;
                Ok("master 0".into())
            }
            (Store::Ensemble(ensemble), _) => {
                let leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
                ensemble.node_mut(leader).kill()?;
                std::thread::sleep(pause);
                ensemble.node_mut(leader).restart()?;
                ensemble.wait_for_leader(Duration::from_secs(30))?;
                Ok(format!("the leader (node {leader})"))
            }
            (Store::Sqlite(_) | Store::Url(_), _) => Ok("nothing".into()),
            (Store::Sentinel(..), _) => Err(HarnessError::Other(
                "a Sentinel set's primary is killed by a failover".into(),
            )),
        }
    }

    /// A failover of the cluster's master serving `hot`: with `lag`, its replica is cut off
    /// first for that long (the master's writes meanwhile reach no replica, as when a replica
    /// lags behind); then the master is killed (`kill -9`), its replica promoted, and the old
    /// master restarted (empty) as a replica of the new one. Blocks until the cluster is ok.
    pub fn fail_over(&mut self, hot: &str, lag: Option<Duration>) -> Result<String, HarnessError> {
        if let Store::Sentinel(set, _) = self {
            return sentinel_fail_over(set, lag);
        }
        let Store::Cluster(cluster) = self else {
            return Ok("nothing".into());
        };
        let master = cluster_master_of(cluster, hot)?;
        let replica = match lag {
            Some(lag) => {
                let replica = cluster.stall_replication(master)?;
                std::thread::sleep(lag);
                replica
            }
            None => cluster
                .replica_of(master)
                .ok_or_else(|| HarnessError::Other(format!("node {master} has no live replica")))?,
        };
        let killed = Instant::now();
        cluster.node_mut(master).kill()?;
        if lag.is_some() {
            cluster.node_mut(replica).resume()?;
        }
        cluster.wait_for_promotion(replica)?;
        let promoted = killed.elapsed();
        cluster.rejoin(master)?;
        Ok(format!(
            "node {master} (node {replica} serving its slots, the cluster ok, {} ms after the kill)",
            promoted.as_millis()
        ))
    }

    /// SIGSTOP for `pause`, then SIGCONT, of the server (Redlock: one master; the ensemble:
    /// one follower; the cluster: the master serving `hot`, for less than the node timeout,
    /// so no failover).
    pub fn pause_for(&mut self, pause: Duration, hot: &str) -> Result<String, HarnessError> {
        fn hold(process: &mut distlock_testkit::ServerProcess, pause: Duration) -> Result<(), HarnessError> {
            process.pause()?;
            std::thread::sleep(pause);
            process.resume()
        }
        match self {
            Store::Redis(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Mariadb(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Postgres(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Cluster(cluster) => {
                let master = cluster_master_of(cluster, hot)?;
                hold(cluster.node_mut(master).process_mut(), pause.min(CLUSTER_PAUSE))?;
                cluster.wait_until_ok()?;
                Ok(format!("node {master}"))
            }
            Store::Memcached(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Zookeeper(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Redlock(servers) => hold(servers[2].process_mut(), pause).map(|()| "master 2".into()),
            Store::Ensemble(ensemble) => {
                let leader = ensemble.leader().unwrap_or(0);
                let follower = (leader + 1) % ensemble.nodes().len();
                hold(ensemble.node_mut(follower).process_mut(), pause)
                    .map(|()| format!("follower {follower}"))
            }
            Store::Sqlite(_) | Store::Url(_) => Ok("nothing".into()),
            Store::Sentinel(set, _) => {
                set.isolate_primary()?;
                std::thread::sleep(pause.min(SENTINEL_PAUSE));
                set.heal_primary()?;
                Ok("the primary".into())
            }
        }
    }
}

/// The longest pause of a Sentinel set's primary: below half the Sentinels' down-after time
/// (2 s), past which a Sentinel drops its link to the primary and the reconnection can turn a
/// pause into a failover (600 ms with a 1 s down-after time did, under load: the next
/// failover found the replica promoted already).
const SENTINEL_PAUSE: Duration = Duration::from_millis(500);

/// A failover of a Sentinel set: with `lag`, the replication link is cut first for that long
/// (the primary's writes meanwhile reach no replica); then the primary is killed (`kill -9`),
/// the Sentinels promote the replica, and the old primary is restarted (empty) as a replica
/// of the new one.
fn sentinel_fail_over(set: &mut RedisSentinelSet, lag: Option<Duration>) -> Result<String, HarnessError> {
    let old = set.primary_addr();
    if let Some(lag) = lag {
        set.cut_replication()?;
        std::thread::sleep(lag);
    }
    let killed = Instant::now();
    set.kill_primary()?;
    let new = set.wait_for_failover(Duration::from_secs(60))?;
    let promoted = killed.elapsed();
    set.restart_old_primary_as_replica()?;
    Ok(format!(
        "the primary {old} ({new} promoted {} ms after the kill)",
        promoted.as_millis()
    ))
}

/// The longest pause of a cluster's master: below the node timeout (2 s), so the pause never
/// turns into a failover (those are faults of their own).
const CLUSTER_PAUSE: Duration = Duration::from_millis(1500);

/// The node serving `key`'s slot as master.
fn cluster_master_of(cluster: &RedisCluster, key: &str) -> Result<usize, HarnessError> {
    let slot = cluster.slot_of(key)?;
    cluster
        .node_of_slot(slot)
        .ok_or_else(|| HarnessError::Other(format!("no master serves slot {slot}")))
}
