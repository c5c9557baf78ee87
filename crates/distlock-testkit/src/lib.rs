//! Real lock stores for distlock's tests: `redis-server`, `memcached`,
//! MariaDB, PostgreSQL, ZooKeeper (standalone or a 3-node ensemble) and etcd (one member or a
//! 3-member cluster), each started on
//! free `127.0.0.1` ports in a temporary directory.
//!
//! * **Owned servers** — [`RedisServer::start`], [`MemcachedServer::start`],
//!   [`MariaDbServer::start`], [`PostgresServer::start`], [`ZooKeeperServer::start`],
//!   [`ZooKeeperEnsemble::start`], [`RedisCluster::start`] (three masters),
//!   [`PostgresReplicated::start`] (a primary and a streaming standby, with failover),
//!   [`EtcdServer::start`], [`EtcdCluster::start`] (three members) —
//!   belong to one test, which may stop,
//!   `kill -9`, pause (SIGSTOP), resume (SIGCONT) and restart them (same
//!   port, same data directory). Dropping the handle kills the server and
//!   removes its directory, also when the test panics.
//! * **Shared servers** — [`shared::redis`] and friends — are started once per
//!   test binary and reused; use them only in tests that leave the server
//!   alone. [`shared::redis_url`] and friends honour
//!   `DISTLOCK_TEST_REDIS_URL`, `DISTLOCK_TEST_MEMCACHED_URL`,
//!   `DISTLOCK_TEST_MYSQL_URL`, `DISTLOCK_TEST_POSTGRES_URL` and
//!   `DISTLOCK_TEST_ZOOKEEPER_URL` to use
//!   servers you already run.
//!
//! * **Fault proxies** — [`FaultProxy`] sits between a client and a server on
//!   loopback and adds latency, black-holes traffic (a silent partition),
//!   drops replies, resets or refuses connections, and counts bytes.
//!
//! * **Moveable clocks** — [`StoreClock`] starts a server under libfaketime (the `clock` field
//!   of each server's options) and steps its wall clock while it runs (an NTP step); the
//!   monotonic clock stays true.
//!
//! The API is synchronous: `start` and `restart` block until the server
//! passes a readiness check (a protocol-level ping, polled every 25 ms, at
//! most 10 s for redis/memcached and 30 s for MariaDB/PostgreSQL/ZooKeeper/etcd). From async
//! tests, call them before entering the runtime or via `spawn_blocking`.
//!
//! Each server's stdout/stderr go to `server.log` in its directory; a failed
//! start reports the tail of that log. Server processes die with the test
//! process, even on `kill -9`, through `PR_SET_PDEATHSIG` (Linux only). A
//! missing program is reported with the command that installs it: run
//! `scripts/install-test-deps`.
//!
//! ```no_run
//! use distlock_testkit::RedisServer;
//!
//! let mut redis = RedisServer::start().expect("start redis");
//! let url = redis.url(); // redis://127.0.0.1:PORT
//! redis.pause().expect("pause");
//! // ... the lock client must time out here ...
//! redis.resume().expect("resume");
//! redis.kill().expect("kill -9");
//! redis.restart().expect("restart on the same port");
//! # drop(url);
//! ```

mod client_run;
mod clock;
mod error;
mod etcd;
mod etcd_cluster;
mod mariadb;
mod mariadb_replica;
mod memcached;
mod port;
mod postgres;
mod postgres_standby;
pub mod probe;
mod process;
pub mod proxy;
mod redis;
mod redis_cluster;
mod redis_sentinel;
pub mod shared;
mod spawner;
mod sys;
mod zookeeper;

pub use clock::StoreClock;
pub use error::HarnessError;
pub use etcd::{etcd_status, etcdctl, EtcdOptions, EtcdServer, EtcdStatus, EtcdTls};
pub use etcd_cluster::{EtcdCluster, EtcdMember, EtcdPeerLink, ETCD_CLUSTER_SIZE};
pub use mariadb::{MariaDbOptions, MariaDbServer, MARIADB_DATABASE, MARIADB_PASSWORD, MARIADB_USER};
pub use mariadb_replica::{
    MariaDbReplicated, MariaDbReplicatedOptions, MariaDbReplication, SEMI_SYNC_TIMEOUT,
};
pub use memcached::{MemcachedOptions, MemcachedServer};
pub use port::free_port;
pub use postgres::{
    PausedBackend, PostgresOptions, PostgresServer, POSTGRES_DATABASE, POSTGRES_PASSWORD, POSTGRES_USER,
};
pub use postgres_standby::{PostgresReplicated, PostgresReplicatedOptions, Replication, STANDBY_NAME};
pub use process::ServerProcess;
pub use proxy::{Direction, FaultProxies, FaultProxy, Traffic};
pub use redis::{RedisOptions, RedisServer};
pub use redis_cluster::{ClusterRole, RedisCluster, RedisClusterOptions, CLUSTER_MASTERS};
pub use redis_sentinel::{RedisSentinelSet, SENTINELS, SENTINEL_MASTER_NAME};
pub use zookeeper::{
    four_letter_word, zk_mode, PeerLink, ZkMode, ZooKeeperEnsemble, ZooKeeperNode, ZooKeeperOptions,
    ZooKeeperServer, ENSEMBLE_SIZE,
};

/// A fresh temporary directory named `distlock-KIND-XXXXXX`.
pub(crate) fn temp_dir(kind: &str) -> Result<tempfile::TempDir, HarnessError> {
    tempfile::Builder::new()
        .prefix(&format!("distlock-{kind}-"))
        .tempdir()
        .map_err(|e| HarnessError::io("creating a temporary directory", e))
}
