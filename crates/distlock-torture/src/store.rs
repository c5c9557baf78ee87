//! The store under test: started by the harness through the testkit (so the harness can kill,
//! pause and restart it), or given by URL (then only client-side faults apply).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use distlock_testkit::proxy::through_proxies;
use distlock_testkit::{
    FaultProxies, HarnessError, MariaDbOptions, MariaDbServer, MemcachedOptions, MemcachedServer,
    PostgresOptions, PostgresServer, RedisCluster, RedisClusterOptions, RedisOptions, RedisSentinelSet,
    RedisServer, StoreClock, ZooKeeperEnsemble, ZooKeeperOptions, ZooKeeperServer,
};
use distlock_testkit::{MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication};
use distlock_testkit::{PostgresReplicated, PostgresReplicatedOptions, Replication};

use crate::faults::FaultKind;
use crate::history::{now, Nanos};

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
    /// MariaDB with a semi-synchronous replica (`AFTER_SYNC`): a failover promotes it and
    /// keeps every acknowledged commit.
    MariadbSemisyncReplica,
    /// MariaDB with an asynchronous replica: a failover loses what the replica had not
    /// received (documented).
    MariadbAsyncReplica,
    /// PostgreSQL with a synchronous streaming standby (`synchronous_commit = on`): a failover
    /// promotes it and keeps every acknowledged commit.
    PostgresSyncStandby,
    /// PostgreSQL with an asynchronous streaming standby: a failover loses what the standby
    /// had not received (documented).
    PostgresAsyncStandby,
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
    pub const ALL: [Backend; 17] = [
        Backend::Sqlite,
        Backend::Redis,
        Backend::RedisVolatile,
        Backend::Redlock,
        Backend::PostgresSyncStandby,
        Backend::PostgresAsyncStandby,
        Backend::RedlockNoDelay,
        Backend::RedisCluster,
        Backend::Mariadb,
        Backend::Postgres,
        Backend::Memcached,
        Backend::Zookeeper,
        Backend::ZookeeperEnsemble,
        Backend::MariadbSemisyncReplica,
        Backend::MariadbAsyncReplica,
        Backend::RedisSentinel,
        Backend::RedisSentinelReplicas,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Redis => "redis",
            Backend::PostgresSyncStandby => "postgres-sync-standby",
            Backend::PostgresAsyncStandby => "postgres-async-standby",
            Backend::RedisVolatile => "redis-volatile",
            Backend::Redlock => "redlock",
            Backend::RedlockNoDelay => "redlock-no-delay",
            Backend::RedisCluster => "redis-cluster",
            Backend::Mariadb => "mariadb",
            Backend::Postgres => "postgres",
            Backend::Memcached => "memcached",
            Backend::Zookeeper => "zookeeper",
            Backend::ZookeeperEnsemble => "zookeeper-ensemble",
            Backend::MariadbSemisyncReplica => "mariadb-semisync-replica",
            Backend::MariadbAsyncReplica => "mariadb-async-replica",
            Backend::RedisSentinel => "redis-sentinel",
            Backend::RedisSentinelReplicas => "redis-sentinel-replicas",
        }
    }

    /// The backend's operation timeout (its default), which bounds how late a waiter learns
    /// of a freed lock after a fault.
    pub fn operation_timeout(self) -> Duration {
        match self {
            Backend::Sqlite | Backend::Mariadb | Backend::Postgres => Duration::from_secs(5),
            Backend::PostgresSyncStandby | Backend::PostgresAsyncStandby => Duration::from_secs(5),
            Backend::Zookeeper | Backend::ZookeeperEnsemble => Duration::from_secs(3),
            Backend::MariadbSemisyncReplica | Backend::MariadbAsyncReplica => Duration::from_secs(5),
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

    /// Whether the harness can step its server's clock (libfaketime): Redis, Redlock (one
    /// master), MariaDB, PostgreSQL and memcached.
    pub fn clock_jumps(self) -> bool {
        matches!(
            self,
            Backend::Redis
                | Backend::RedisVolatile
                | Backend::Redlock
                | Backend::RedlockNoDelay
                | Backend::Mariadb
                | Backend::Postgres
                | Backend::Memcached
        )
    }

    fn is_redlock(self) -> bool {
        matches!(self, Backend::Redlock | Backend::RedlockNoDelay)
    }

    /// The fault kinds under which the backend's docs say a lock can be lost or two holders
    /// can overlap (shown in the table, not failed).
    pub fn documented_losses(self) -> HashSet<String> {
        let kinds: &[FaultKind] = match self {
            // Without persistence a restarted server has forgotten every lock; a step of its
            // clock as for Redis below.
            Backend::RedisVolatile => &[
                FaultKind::ServerKill,
                FaultKind::ClockJumpForward,
                FaultKind::ClockJumpBack,
            ],
            // A restarted memcached has forgotten every item; the holder learns it only at its
            // next renewal.
            Backend::Memcached => &[FaultKind::ServerKill],
            // Without the delayed-restart rule, masters restarted empty vote again; a step of one
            // master's clock as for Redlock below.
            Backend::RedlockNoDelay => &[
                FaultKind::MajorityKill,
                FaultKind::ServerKill,
                FaultKind::ClockJumpForward,
                FaultKind::ClockJumpBack,
            ],
            // One master's forward step frees its key: a holder of a bare majority loses the lock
            // (docs/src/stores/redlock.md, "Clock jumps"); a step back ends with a step forward.
            Backend::Redlock => &[FaultKind::ClockJumpForward, FaultKind::ClockJumpBack],
            // Replication is asynchronous: a lock the promoted replica never got is free on it.
            // Replication is asynchronous: an acquisition the standby had not received when the
            // primary died (all of them while it was cut off; the last milliseconds' otherwise)
            // is gone on the promoted standby.
            Backend::PostgresAsyncStandby => &[FaultKind::Failover, FaultKind::LaggedFailover],
            Backend::RedisCluster => &[FaultKind::Failover, FaultKind::LaggedFailover],
            // Replication is asynchronous: an acquisition the replica had not received when the
            // primary died (all of them while it was cut off; the last milliseconds' otherwise)
            // is gone on the promoted replica (docs/src/stores/mysql.md, "Failover").
            Backend::MariadbAsyncReplica => &[FaultKind::Failover, FaultKind::LaggedFailover],
            // Expiry is judged by the server's wall clock: a forward step frees held locks
            // (docs/src/stores/{redis,mysql,postgres}.md, "Clock jumps"). A step back ends with
            // the step forward to the true time.
            Backend::Redis | Backend::Mariadb | Backend::Postgres => {
                &[FaultKind::ClockJumpForward, FaultKind::ClockJumpBack]
            }
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
    /// A PostgreSQL primary and its streaming standby, behind a front that a failover moves.
    PostgresPair(Box<PostgresReplicated>),
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
        })
    }

    /// Starts `backend`'s server as [`start`](Self::start) does, on a clock the harness steps by
    /// `clock_step` (see [`jump_clock`](Self::jump_clock)) when given and the backend has one
    /// (see [`Backend::clock_jumps`]).
    pub fn start_on(backend: Backend, clock_step: Option<Duration>) -> Result<Self, HarnessError> {
        let Some(step) = clock_step.filter(|_| backend.clock_jumps()) else {
            return Self::start(backend);
        };
        let clock = StoreClock::new()?;
        let on_clock = || RedisOptions {
            clock: Some(clock.clone()),
            ..RedisOptions::default()
        };
        let store = match backend {
            Backend::Redis => Store::Redis(RedisServer::start_with(RedisOptions {
                persistence: true,
                ..on_clock()
            })?),
            Backend::RedisVolatile => Store::Redis(RedisServer::start_with(on_clock())?),
            // Master 1 only: master 0 is the one killed, master 2 the one paused.
            _ if backend.is_redlock() => Store::Redlock(vec![
                RedisServer::start()?,
                RedisServer::start_with(on_clock())?,
                RedisServer::start()?,
            ]),
            Backend::Mariadb => Store::Mariadb(MariaDbServer::start_with(MariaDbOptions {
                clock: Some(clock.clone()),
                ..MariaDbOptions::default()
            })?),
            Backend::Postgres => Store::Postgres(PostgresServer::start_with(PostgresOptions {
                clock: Some(clock.clone()),
                ..PostgresOptions::default()
            })?),
            Backend::Memcached => Store::Memcached(MemcachedServer::start_with(MemcachedOptions {
                clock: Some(clock.clone()),
                ..MemcachedOptions::default()
            })?),
            _ => return Self::start(backend),
        };
        Ok(Store::Clocked(Box::new(store), clock, step))
    }

    /// Whether its server runs on a clock the harness steps.
    pub fn has_clock(&self) -> bool {
        matches!(self, Store::Clocked(..))
    }

    /// Steps the server's clock by its step (ahead, or back with `back`), holds it there for
    /// `duration`, then steps it to the true time again (blocking). Returns what it stepped and
    /// the instants the two steps began (the jump, the restore): no time call of the server
    /// read a stepped clock before them. `None` without a clock.
    pub fn jump_clock(
        &self,
        back: bool,
        duration: Duration,
    ) -> Result<(String, Option<[Nanos; 2]>), HarnessError> {
        let Store::Clocked(store, clock, step) = self else {
            return Ok(("nothing".into(), None));
        };
        let step = i64::try_from(step.as_secs().max(1)).unwrap_or(i64::MAX);
        let step = if back { -step } else { step };
        let jumped = now();
        clock.jump(step)?;
        std::thread::sleep(duration);
        let restored = now();
        clock.jump(0)?;
        let whose = match **store {
            Store::Redlock(_) => "master 1",
            _ => "the server",
        };
        Ok((format!("{whose} ({step:+} s)"), Some([jumped, restored])))
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
            Store::MariadbPair(pair) => pair.url(),
            Store::PostgresPair(pair) => pair.url(),
            Store::Url(url) => url.clone(),
            Store::Clocked(store, ..) => store.url(session, quarantine),
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

    /// The URL client number `client` connects with: an ensemble's first clients are pinned
    /// to one member each, in turn ([`PINNED_CLIENTS`] of them), so that a partition has
    /// clients on each side that cannot move to another member; every other client (and every
    /// client of another store) is given `url`, the whole store.
    pub fn client_url(&self, client: usize, url: &str) -> String {
        let Store::Ensemble(ensemble) = self else {
            return url.to_owned();
        };
        if client >= PINNED_CLIENTS {
            return url.to_owned();
        }
        let member = ensemble.node(client % ensemble.nodes().len());
        let query = url.find('?').map_or("", |at| &url[at..]);
        format!("zk://127.0.0.1:{}{query}", member.port())
    }

    /// The member client number `client` is pinned to ([`client_url`](Self::client_url)).
    pub fn pinned_member(&self, client: usize) -> Option<usize> {
        match self {
            Store::Ensemble(ensemble) if client < PINNED_CLIENTS => Some(client % ensemble.nodes().len()),
            _ => None,
        }
    }

    /// Cuts an ensemble's member off from the others (silently, both ways) for `duration`, then
    /// heals and waits until every member serves again: the leader (`PartitionLeader`), or a
    /// follower (`PartitionFollower`), `prefer` if it is one (the member the hot lock's holder
    /// is pinned to). Blocks.
    pub fn partition(
        &mut self,
        kind: FaultKind,
        duration: Duration,
        prefer: Option<usize>,
    ) -> Result<String, HarnessError> {
        let Store::Ensemble(ensemble) = self else {
            return Ok("nothing".into());
        };
        let leader = ensemble.wait_for_leader(Duration::from_secs(30))?;
        let size = ensemble.nodes().len();
        let (member, role) = match kind {
            FaultKind::PartitionLeader => (leader, "the leader"),
            _ => (
                prefer
                    .filter(|m| *m != leader && *m < size)
                    .unwrap_or((leader + 1) % size),
                "follower",
            ),
        };
        ensemble.isolate(member)?;
        std::thread::sleep(duration);
        ensemble.heal_links()?;
        let healed = Instant::now();
        while !ensemble.nodes().iter().all(|n| n.mode().is_some()) || ensemble.leader().is_none() {
            if healed.elapsed() > Duration::from_secs(30) {
                return Err(HarnessError::Other(format!(
                    "the ensemble did not serve again within 30 s of healing member {member}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let pinned: Vec<usize> = (0..PINNED_CLIENTS).filter(|c| c % size == member).collect();
        Ok(format!(
            "{role} (node {member}, clients {pinned:?} pinned to it; serving again {} ms after the heal)",
            healed.elapsed().as_millis()
        ))
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
            (Store::MariadbPair(_), _) => Err(HarnessError::Other(
                "a replicated MariaDB's primary is killed by a failover".into(),
            )),
            (Store::PostgresPair(_), _) => Err(HarnessError::Other(
                "a replicated PostgreSQL's primary is killed by a failover".into(),
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
            (Store::Clocked(store, ..), kind) => store.kill_and_restart(kind, pause),
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
        if let Store::PostgresPair(pair) = self {
            return fail_over_postgres(pair, lag);
        }
        if let Store::MariadbPair(pair) = self {
            return fail_over_mariadb(pair, lag);
        }
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
            Store::PostgresPair(pair) => {
                hold(pair.primary_mut().process_mut(), pause).map(|()| "the primary".into())
            }
            Store::Redis(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Mariadb(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::Postgres(s) => hold(s.process_mut(), pause).map(|()| "the server".into()),
            Store::MariadbPair(pair) => {
                hold(pair.primary_mut().process_mut(), pause).map(|()| "the primary".into())
            }
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
            Store::Clocked(store, ..) => store.pause_for(pause, hot),
            Store::Sentinel(set, _) => {
                set.isolate_primary()?;
                std::thread::sleep(pause.min(SENTINEL_PAUSE));
                set.heal_primary()?;
                Ok("the primary".into())
            }
        }
    }
}

/// How many of an ensemble's clients are pinned to one member each, in turn (two per member).
pub const PINNED_CLIENTS: usize = 6;

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

fn mariadb_pair(replication: MariaDbReplication) -> Result<Store, HarnessError> {
    Ok(Store::MariadbPair(Box::new(MariaDbReplicated::start_with(
        MariaDbReplicatedOptions {
            replication,
            ..Default::default()
        },
    )?)))
}

/// A failover of the MariaDB pair: with `lag`, the replica's replication link is cut first for
/// that long (a semi-synchronous primary's commits wait meanwhile, and its clients' operations
/// time out; an asynchronous primary's commits reach only itself); then the primary is killed
/// (`kill -9`, its address silent), the replica promoted once it applied what it had received
/// and the address moved to it, and a fresh replica started from a snapshot of the new
/// primary's data and its binary log from there (the old primary's data is discarded), so the
/// next failover finds one.
fn fail_over_mariadb(pair: &mut MariaDbReplicated, lag: Option<Duration>) -> Result<String, HarnessError> {
    if let Some(lag) = lag {
        pair.link()?.blackhole();
        std::thread::sleep(lag);
    }
    let killed = Instant::now();
    pair.failover()?;
    let promoted = killed.elapsed();
    pair.add_replica()?;
    Ok(format!(
        "the primary (the replica promoted and the address moved {} ms after the kill; a fresh replica caught up {} ms after it)",
        promoted.as_millis(),
        killed.elapsed().as_millis()
    ))
}

/// A failover of the PostgreSQL pair: with `lag`, the standby's replication link is cut first
/// for that long (a synchronous primary's commits wait meanwhile, and its clients' operations
/// time out; an asynchronous primary's commits reach only itself); then the primary is killed
/// (`kill -9`, its address silent), the standby promoted and the address moved to it, and a
/// fresh standby built from the new primary by a base backup (the old primary's data is
/// discarded, not rewound), so the next failover finds one.
fn fail_over_postgres(pair: &mut PostgresReplicated, lag: Option<Duration>) -> Result<String, HarnessError> {
    if let Some(lag) = lag {
        pair.link().blackhole();
        std::thread::sleep(lag);
    }
    let killed = Instant::now();
    pair.kill_primary()?;
    pair.promote_standby()?;
    let promoted = killed.elapsed();
    pair.add_standby()?;
    Ok(format!(
        "the primary (the standby promoted and the address moved {} ms after the kill; a fresh standby streams {} ms after it)",
        promoted.as_millis(),
        killed.elapsed().as_millis()
    ))
}
