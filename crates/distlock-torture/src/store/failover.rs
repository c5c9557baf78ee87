//! Failovers: a Redis Cluster's master, a Sentinel set's primary, a MariaDB or PostgreSQL
//! pair's primary replaced by its replica, each optionally after the replica was cut off for
//! a while (a lagging replica).

use std::time::{Duration, Instant};

use distlock_testkit::{HarnessError, MariaDbReplicated, PostgresReplicated, RedisSentinelSet};

use super::server_faults::cluster_master_of;
use super::Store;

impl Store {
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
}

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
