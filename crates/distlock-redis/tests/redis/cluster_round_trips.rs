//! Round trips on a Redis Cluster, measured through fault proxies that add 150 ms to every
//! request: an acquire, a renewal and a release are one round trip each, as on one server, and
//! `extend_many` of leases spread over the three masters is one round trip in all (one
//! pipeline per master, sent at once), with one `EVALSHA` per lease on its own master.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_testkit::{Direction, RedisCluster, RedisClusterOptions};
use support::{lock_at, start_cluster};

const LATENCY: Duration = Duration::from_millis(150);
const TTL: Duration = Duration::from_secs(60);

/// A fresh lock name in a slot that master `master` serves.
fn name_on(cluster: &RedisCluster, master: usize, label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    (0..)
        .map(|i| LockName::new(format!("rt-{run}-{label}-{i}")).expect("valid"))
        .find(|name| {
            let slot = cluster
                .command(0, &["CLUSTER", "KEYSLOT", name.as_str()])
                .expect("CLUSTER KEYSLOT")
                .parse()
                .expect("a slot number");
            cluster.node_of_slot(slot) == Some(master)
        })
        .expect("some name hashes to every master")
}

/// `EVALSHA` calls each master has run so far.
fn script_calls(cluster: &RedisCluster) -> Vec<u64> {
    (0..cluster.nodes().len())
        .map(|i| {
            let info = cluster.command(i, &["INFO", "commandstats"]).expect("INFO");
            info.lines()
                .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

fn assert_one_round_trip(what: &str, took: Duration) {
    assert!(
        took >= LATENCY && took < LATENCY * 2,
        "{what}: {took:?} is not one round trip of {LATENCY:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_and_batched_renewals_are_one_round_trip() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let lock = lock_at(&url).await;

    let per_master = 10;
    let mut leases = Vec::new();
    for master in 0..3 {
        for i in 0..per_master {
            let name = name_on(&cluster, master, &format!("m{master}-{i}"));
            match lock
                .try_acquire(&name, OwnerToken::new(), TTL)
                .await
                .expect("acquire")
            {
                TryAcquire::Acquired(lease) => leases.push(lease),
                TryAcquire::Held(_) => panic!("a fresh lock is held"),
            }
        }
    }
    // Once without latency: the client reads the slot map and every master knows the scripts.
    let renewed = lock.renew(&leases).await;
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");
    let single = name_on(&cluster, 1, "single");
    let warm = match lock
        .try_acquire(&single, OwnerToken::new(), TTL)
        .await
        .expect("acquire")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(_) => panic!("a fresh lock is held"),
    };
    assert!(lock.release(&warm).await.expect("release"));

    proxies.set_latency(Direction::ToServer, LATENCY, Duration::ZERO);

    let before = script_calls(&cluster);
    let started = Instant::now();
    let renewed = lock.renew(&leases).await;
    let took = started.elapsed();
    let after = script_calls(&cluster);
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");
    eprintln!("extend_many of {} leases on 3 masters: {took:?}", leases.len());
    assert_one_round_trip("extend_many over three masters", took);
    let ran: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        ran,
        vec![per_master as u64; 3],
        "one EVALSHA per lease, each on its own master"
    );

    let started = Instant::now();
    let lease = match lock
        .try_acquire(&single, OwnerToken::new(), TTL)
        .await
        .expect("acquire")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(_) => panic!("released above"),
    };
    assert_one_round_trip("acquire", started.elapsed());
    let started = Instant::now();
    assert!(lock.extend(&lease, TTL).await.expect("extend").is_some());
    assert_one_round_trip("extend", started.elapsed());
    let started = Instant::now();
    assert!(lock.release(&lease).await.expect("release"));
    assert_one_round_trip("release", started.elapsed());

    proxies.heal();
    for lease in &leases {
        let _ = lock.release(lease).await;
    }
}
