//! Which backend a run tortures, and what the harness knows of each: its name, operation
//! timeout, restart rules, whether its server's clock can be stepped, and the fault kinds
//! under which its docs declare a loss.

use std::collections::HashSet;
use std::time::Duration;

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
    /// One etcd member: a lease per client, create-revision fencing.
    Etcd,
    /// A three-member etcd cluster with links between its members that the harness cuts: the
    /// leader killed, a follower paused, a member partitioned from the others.
    EtcdCluster,
}

impl Backend {
    /// Every backend, in the order `--backend all` runs them.
    pub const ALL: [Backend; 19] = [
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
        Backend::Etcd,
        Backend::EtcdCluster,
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
            Backend::Etcd => "etcd",
            Backend::EtcdCluster => "etcd-cluster",
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
            Backend::Etcd | Backend::EtcdCluster => distlock::etcd::DEFAULT_OPERATION_TIMEOUT,
            _ => Duration::from_secs(2),
        }
    }

    /// The shortest session (lease) the store grants: etcd's members grant no lease shorter
    /// than 1.5 election timeouts (1.5 s with the testkit's 1 s), in whole seconds: 2 s. The
    /// harness asks for at least this, so its recovery bound counts the lease actually granted.
    pub fn min_session(self) -> Duration {
        match self {
            Backend::Etcd | Backend::EtcdCluster => Duration::from_secs(2),
            _ => Duration::from_secs(1),
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

    pub(super) fn is_redlock(self) -> bool {
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
