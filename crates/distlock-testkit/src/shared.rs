//! Process-wide shared servers, for tests that do not stop, kill or pause
//! their server.
//!
//! Each server is started lazily by the first test that asks for it and then
//! reused by every test of the same test binary; concurrent callers wait for
//! that first start. Statics are never dropped, so the servers are killed and
//! their directories removed by an `atexit` handler (libtest ends through
//! `exit`), and, should the test process be killed outright, by their
//! parent-death signal. A failed start is remembered: every later call
//! returns the same error at once.
//!
//! The `*_url` functions return the URL from an environment variable when it
//! is set (to run the tests against a server you already run) and only
//! otherwise start the shared server.

use std::fs;
use std::sync::{Once, OnceLock};

use crate::RedisCluster;

use crate::{
    EtcdCluster, EtcdServer, HarnessError, MariaDbServer, MemcachedServer, PostgresServer, RedisServer,
    ServerProcess, ZooKeeperEnsemble, ZooKeeperServer,
};

/// Points [`redis_url`] at an existing server, e.g. `redis://127.0.0.1:6379`.
pub const REDIS_URL_ENV: &str = "DISTLOCK_TEST_REDIS_URL";
/// Points [`redis_cluster_url`] at an existing Redis Cluster, e.g.
/// `redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003`.
pub const REDIS_CLUSTER_URL_ENV: &str = "DISTLOCK_TEST_REDIS_CLUSTER_URL";
/// Points [`memcached_url`] at an existing server, e.g.
/// `memcache://127.0.0.1:11211`.
pub const MEMCACHED_URL_ENV: &str = "DISTLOCK_TEST_MEMCACHED_URL";
/// Points [`mysql_url`] at an existing server, e.g.
/// `mysql://user:pass@127.0.0.1:3306/db`.
pub const MYSQL_URL_ENV: &str = "DISTLOCK_TEST_MYSQL_URL";
/// Points [`postgres_url`] at an existing server, e.g.
/// `postgres://user:pass@127.0.0.1:5432/db`.
pub const POSTGRES_URL_ENV: &str = "DISTLOCK_TEST_POSTGRES_URL";
/// Points [`zookeeper_url`] at an existing server or ensemble, e.g.
/// `zk://127.0.0.1:2181`.
pub const ZOOKEEPER_URL_ENV: &str = "DISTLOCK_TEST_ZOOKEEPER_URL";
/// Points [`zookeeper_ensemble_url`] at an existing ensemble of three or more members, e.g.
/// `zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183`.
pub const ZOOKEEPER_ENSEMBLE_URL_ENV: &str = "DISTLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL";
/// Points [`etcd_url`] at an existing etcd member or cluster, e.g. `etcd://127.0.0.1:2379`.
pub const ETCD_URL_ENV: &str = "DISTLOCK_TEST_ETCD_URL";
/// Points [`etcd_cluster_url`] at an existing etcd cluster of three or more members, e.g.
/// `etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379`.
pub const ETCD_CLUSTER_URL_ENV: &str = "DISTLOCK_TEST_ETCD_CLUSTER_URL";

type Cell<T> = OnceLock<Result<T, HarnessError>>;

static REDIS: Cell<RedisServer> = OnceLock::new();
static REDIS_CLUSTER: Cell<RedisCluster> = OnceLock::new();
static MEMCACHED: Cell<MemcachedServer> = OnceLock::new();
static MARIADB: Cell<MariaDbServer> = OnceLock::new();
static POSTGRES: Cell<PostgresServer> = OnceLock::new();
static ZOOKEEPER: Cell<ZooKeeperServer> = OnceLock::new();
static ZOOKEEPER_ENSEMBLE: Cell<ZooKeeperEnsemble> = OnceLock::new();
static ETCD: Cell<EtcdServer> = OnceLock::new();
static ETCD_CLUSTER: Cell<EtcdCluster> = OnceLock::new();

/// The shared `redis-server` (started on first use; blocks until ready).
pub fn redis() -> Result<&'static RedisServer, HarnessError> {
    shared(&REDIS, RedisServer::start)
}

/// The shared three-master Redis Cluster (started on first use; blocks until every node
/// reports `cluster_state:ok`).
pub fn redis_cluster() -> Result<&'static RedisCluster, HarnessError> {
    shared(&REDIS_CLUSTER, RedisCluster::start)
}

/// The shared `memcached` (started on first use; blocks until ready).
pub fn memcached() -> Result<&'static MemcachedServer, HarnessError> {
    shared(&MEMCACHED, MemcachedServer::start)
}

/// The shared MariaDB server (initialised and started on first use; blocks
/// until ready).
pub fn mariadb() -> Result<&'static MariaDbServer, HarnessError> {
    shared(&MARIADB, MariaDbServer::start)
}

/// The shared PostgreSQL server (initialised and started on first use;
/// blocks until ready).
pub fn postgres() -> Result<&'static PostgresServer, HarnessError> {
    shared(&POSTGRES, PostgresServer::start)
}

/// The shared standalone ZooKeeper server (started on first use; blocks
/// until ready).
pub fn zookeeper() -> Result<&'static ZooKeeperServer, HarnessError> {
    shared(&ZOOKEEPER, ZooKeeperServer::start)
}

/// The shared 3-node ZooKeeper ensemble (started on first use; blocks until a quorum formed).
pub fn zookeeper_ensemble() -> Result<&'static ZooKeeperEnsemble, HarnessError> {
    shared(&ZOOKEEPER_ENSEMBLE, ZooKeeperEnsemble::start)
}

/// The shared single etcd member (started on first use; blocks until `/health` is healthy).
pub fn etcd() -> Result<&'static EtcdServer, HarnessError> {
    shared(&ETCD, EtcdServer::start)
}

/// The shared 3-member etcd cluster (started on first use; blocks until every member sees a
/// leader).
pub fn etcd_cluster() -> Result<&'static EtcdCluster, HarnessError> {
    shared(&ETCD_CLUSTER, EtcdCluster::start)
}

/// `$DISTLOCK_TEST_REDIS_URL` if set, else the shared server's URL.
pub fn redis_url() -> Result<String, HarnessError> {
    env_url(REDIS_URL_ENV).map_or_else(|| redis().map(RedisServer::url), Ok)
}

/// `$DISTLOCK_TEST_REDIS_CLUSTER_URL` if set, else the shared cluster's `redis+cluster://` URL.
pub fn redis_cluster_url() -> Result<String, HarnessError> {
    env_url(REDIS_CLUSTER_URL_ENV).map_or_else(|| redis_cluster().map(RedisCluster::url), Ok)
}

/// `$DISTLOCK_TEST_MEMCACHED_URL` if set, else the shared server's URL.
pub fn memcached_url() -> Result<String, HarnessError> {
    env_url(MEMCACHED_URL_ENV).map_or_else(|| memcached().map(MemcachedServer::url), Ok)
}

/// `$DISTLOCK_TEST_MYSQL_URL` if set, else the shared MariaDB's URL.
pub fn mysql_url() -> Result<String, HarnessError> {
    env_url(MYSQL_URL_ENV).map_or_else(|| mariadb().map(MariaDbServer::url), Ok)
}

/// `$DISTLOCK_TEST_POSTGRES_URL` if set, else the shared PostgreSQL's URL.
pub fn postgres_url() -> Result<String, HarnessError> {
    env_url(POSTGRES_URL_ENV).map_or_else(|| postgres().map(PostgresServer::url), Ok)
}

/// `$DISTLOCK_TEST_ZOOKEEPER_URL` if set, else the shared server's URL.
pub fn zookeeper_url() -> Result<String, HarnessError> {
    env_url(ZOOKEEPER_URL_ENV).map_or_else(|| zookeeper().map(ZooKeeperServer::url), Ok)
}

/// `$DISTLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL` if set, else the shared ensemble's URL.
pub fn zookeeper_ensemble_url() -> Result<String, HarnessError> {
    env_url(ZOOKEEPER_ENSEMBLE_URL_ENV).map_or_else(|| zookeeper_ensemble().map(ZooKeeperEnsemble::url), Ok)
}

/// `$DISTLOCK_TEST_ETCD_URL` if set, else the shared member's `etcd://` URL.
pub fn etcd_url() -> Result<String, HarnessError> {
    env_url(ETCD_URL_ENV).map_or_else(|| etcd().map(EtcdServer::url), Ok)
}

/// `$DISTLOCK_TEST_ETCD_CLUSTER_URL` if set, else the shared cluster's `etcd://` URL (every
/// member's client address).
pub fn etcd_cluster_url() -> Result<String, HarnessError> {
    env_url(ETCD_CLUSTER_URL_ENV).map_or_else(|| etcd_cluster().map(EtcdCluster::url), Ok)
}

fn env_url(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|url| !url.trim().is_empty())
}

fn shared<T>(
    cell: &'static Cell<T>,
    start: fn() -> Result<T, HarnessError>,
) -> Result<&'static T, HarnessError> {
    cell.get_or_init(|| {
        register_cleanup();
        start()
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn register_cleanup() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // If this fails, the servers still die with the process (parent-death
        // signal); only their temporary directories would be left behind.
        let _ = crate::sys::run_at_exit(cleanup_at_exit);
    });
}

extern "C" fn cleanup_at_exit() {
    // Never unwind into C.
    let _ = std::panic::catch_unwind(|| {
        if let Some(Ok(server)) = REDIS.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(cluster)) = REDIS_CLUSTER.get() {
            for node in cluster.nodes() {
                cleanup(node.process(), node.dir());
            }
        }
        if let Some(Ok(server)) = MEMCACHED.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(server)) = MARIADB.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(server)) = POSTGRES.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(server)) = ZOOKEEPER.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(ensemble)) = ZOOKEEPER_ENSEMBLE.get() {
            for node in ensemble.nodes() {
                node.process().kill_now();
            }
            let _ = fs::remove_dir_all(ensemble.dir());
        }
        if let Some(Ok(server)) = ETCD.get() {
            cleanup(server.process(), server.dir());
        }
        if let Some(Ok(cluster)) = ETCD_CLUSTER.get() {
            for member in cluster.nodes() {
                member.process().kill_now();
            }
            let _ = fs::remove_dir_all(cluster.dir());
        }
    });
}

fn cleanup(process: &ServerProcess, dir: &std::path::Path) {
    process.kill_now();
    let _ = fs::remove_dir_all(dir);
}
