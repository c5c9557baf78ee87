//! A Redis Cluster of three real masters under what a cluster does to a lock: releases heard
//! through sharded pub/sub on each lock's master (also after its connections went silent),
//! batched renewals across masters and across
//! a moved slot, a slot migrating while clients contend for a lock in it, a master killed
//! while they contend, and (with a replica per master) failovers: a lock the replica never got
//! is lost on its promotion, one it got is kept. Concurrent holders are counted exactly (a shared counter each holder
//! increments on entry and decrements before its release); holds are far shorter than their
//! TTL, so a count above one is a double grant, never an expiry.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, LockClient, LockKind, LockName,
    OwnerToken, Primitive, ReleaseWatch, TryAcquire, Woke,
};
use distlock_redis::RedisLock;
use distlock_testkit::{RedisCluster, RedisClusterOptions};
use support::{lock_at, start_cluster, OPERATION_TIMEOUT};

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// The hash slot of a lock name without prefix (its key is the name).
fn slot(cluster: &RedisCluster, name: &LockName) -> u16 {
    cluster
        .command(0, &["CLUSTER", "KEYSLOT", name.as_str()])
        .expect("CLUSTER KEYSLOT")
        .parse()
        .expect("a slot number")
}

/// A fresh lock name whose slot master `master` serves.
fn name_on(cluster: &RedisCluster, master: usize, label: &str) -> LockName {
    let run = run_id();
    (0..)
        .map(|i| LockName::new(format!("t-{run}-{label}-{i}")).expect("valid"))
        .find(|name| cluster.node_of_slot(slot(cluster, name)) == Some(master))
        .expect("some name hashes to every master")
}

/// A raw connection to master `i`.
async fn raw_node(cluster: &RedisCluster, i: usize) -> redis::aio::MultiplexedConnection {
    support::raw(&cluster.nodes()[i].url())
        .await
        .expect("raw connection")
}

async fn shard_subscribers(cluster: &RedisCluster, master: usize, channel: &[u8]) -> u64 {
    let mut raw = raw_node(cluster, master).await;
    let (_, n): (Vec<u8>, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut raw)
        .await
        .expect("PUBSUB SHARDNUMSUB");
    n
}

/// Queues `watch`'s waiter for a permit of the one-permit semaphore `name`, which is held: a
/// permit's release wakes the first waiter of the semaphore's queue alone.
async fn queue_for_permit(waiter: &RedisLock, name: &LockName, watch: &ReleaseWatch) {
    let id = watch.waiter().expect("a semaphore waiter's watch names it");
    let attempt = waiter
        .try_acquire_kind(
            name,
            LockKind::Permit {
                permits: 1,
                weight: 1,
            },
            OwnerToken::new(),
            Duration::from_secs(10),
            Some((&**id, Duration::from_secs(30))),
        )
        .await
        .expect("attempt");
    assert!(matches!(attempt, TryAcquire::Held(_)), "the permit is held");
}

/// The ids of the masters, in node order.
async fn node_ids(cluster: &RedisCluster) -> Vec<String> {
    (0..cluster.nodes().len())
        .map(|i| cluster.command(i, &["CLUSTER", "MYID"]).expect("CLUSTER MYID"))
        .collect()
}

/// Moves `slot` from master `from` to master `to` as `redis-cli --cluster reshard` does:
/// `SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its keys in
/// batches (all of a lock's keys share the slot, but a batch may split them), then `SETSLOT
/// NODE` on every master.
async fn migrate_slot(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
    let ids = node_ids(cluster).await;
    let (mut source, mut target) = (raw_node(cluster, from).await, raw_node(cluster, to).await);
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let () = setslot("IMPORTING", &ids[from])
        .query_async(&mut target)
        .await
        .expect("IMPORTING");
    let () = setslot("MIGRATING", &ids[to])
        .query_async(&mut source)
        .await
        .expect("MIGRATING");
    loop {
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(2)
            .query_async(&mut source)
            .await
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(cluster.nodes()[to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLACE")
            .arg("KEYS")
            .arg(keys);
        let () = migrate.query_async(&mut source).await.expect("MIGRATE");
        // Let requests arrive between batches, as a real reshard does.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in [to, from]
        .into_iter()
        .chain((0..cluster.nodes().len()).filter(|&i| i != from && i != to))
    {
        let mut conn = raw_node(cluster, i).await;
        let () = setslot("NODE", &ids[to])
            .query_async(&mut conn)
            .await
            .expect("SETSLOT NODE");
    }
}

/// Acquires `name` with `lock` for `ttl`, or panics.
async fn take(lock: &RedisLock, name: &LockName, ttl: Duration) -> distlock_core::Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("acquire")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(_) => panic!("a fresh lock is held"),
    }
}

mod connections;
mod failover;
mod slots;
mod subscriptions;
