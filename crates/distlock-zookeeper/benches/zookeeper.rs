//! Benchmarks of the ZooKeeper backend against one real standalone server on loopback, with
//! the ratios to the floor they should be compared with printed at the end:
//!
//! - the standard shape (`distlock_conformance::bench::bench_backend`): two `exists` round
//!   trips, an uncontended acquire + release through `LockClient`, handoff latency, one hot
//!   lock with 16 contending clients;
//! - next to it, recorded for the ratios: one raw `exists`, three raw `exists` (the round trips
//!   of an uncontended raw acquire + release), the same three requests the recipe sends issued
//!   by hand with `zookeeper-client` (`create` ephemeral-sequential, `getChildren`, `delete`:
//!   two of them are writes, which the server logs and fsyncs, so `exists` alone is a low
//!   floor), and the raw acquire + release itself.
//!
//! `cargo bench -p distlock-zookeeper --bench zookeeper`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use distlock_conformance::bench::{self, CONTENDERS};
use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_testkit::ZooKeeperServer;
use distlock_zookeeper::{ZooKeeperConfig, ZooKeeperLock};
use tokio::time::Instant;

static MEANS: Mutex<BTreeMap<&'static str, (Duration, u64)>> = Mutex::new(BTreeMap::new());

fn record(name: &'static str, total: Duration, iters: u64) -> Duration {
    let mut means = MEANS.lock().unwrap_or_else(PoisonError::into_inner);
    let entry = means.entry(name).or_default();
    entry.0 += total;
    entry.1 += iters;
    total
}

fn mean(name: &str) -> Option<Duration> {
    let means = MEANS.lock().unwrap_or_else(PoisonError::into_inner);
    means
        .get(name)
        .filter(|(_, n)| *n > 0)
        .map(|(total, n)| *total / u32::try_from(*n).unwrap_or(u32::MAX))
}

fn zookeeper(c: &mut Criterion) {
    let server =
        ZooKeeperServer::start().expect("a ZooKeeper server starts (java and the zookeeper package)");
    let rt = bench::runtime();
    let config = ZooKeeperConfig::from_url(&server.url()).expect("a valid URL");
    let connect = {
        let config = config.clone();
        move || {
            let config = config.clone();
            async move {
                Arc::new(ZooKeeperLock::connect(config).await.expect("connects")) as Arc<dyn DistributedLock>
            }
        }
    };
    bench::bench_backend(c, &rt, "zookeeper", connect.clone());

    let raw = rt.block_on(connect());
    let run = uuid::Uuid::new_v4().simple().to_string();
    let name = |what: &str| LockName::new(format!("bench-{}-{what}", &run[..8])).expect("valid");
    let mut group = c.benchmark_group("zookeeper_ratios");
    group.bench_function("exists_x1", |b| {
        let raw = raw.clone();
        b.to_async(&rt).iter_custom(move |iters| {
            let raw = raw.clone();
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    raw.ping().await.expect("exists");
                }
                record("exists_x1", started.elapsed(), iters)
            }
        })
    });
    group.bench_function("exists_x3", |b| {
        let raw = raw.clone();
        b.to_async(&rt).iter_custom(move |iters| {
            let raw = raw.clone();
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    for _ in 0..3 {
                        raw.ping().await.expect("exists");
                    }
                }
                record("exists_x3", started.elapsed(), iters)
            }
        })
    });
    let zk = rt.block_on(async {
        let zk = zookeeper_client::Client::connector()
            .connect(config.connect_string())
            .await
            .expect("the raw client connects");
        let options =
            zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
        zk.mkdir(&format!("/distlock-bench-{}", &run[..8]), &options)
            .await
            .expect("parent");
        zk
    });
    let parent = format!("/distlock-bench-{}", &run[..8]);
    group.bench_function("recipe_requests_by_hand", |b| {
        let (zk, parent) = (zk.clone(), parent.clone());
        b.to_async(&rt).iter_custom(move |iters| {
            let (zk, parent) = (zk.clone(), parent.clone());
            async move {
                let options = zookeeper_client::CreateMode::EphemeralSequential
                    .with_acls(zookeeper_client::Acls::anyone_all());
                let prefix = format!("{parent}/n-");
                let started = Instant::now();
                for _ in 0..iters {
                    let (_, sequence) = zk.create(&prefix, b"x", &options).await.expect("create");
                    zk.list_children(&parent).await.expect("list");
                    zk.delete(&format!("{prefix}{sequence}"), None)
                        .await
                        .expect("delete");
                }
                record("recipe_requests_by_hand", started.elapsed(), iters)
            }
        })
    });
    let free = name("raw");
    group.bench_function("raw_acquire_release", |b| {
        let (raw, free) = (raw.clone(), free.clone());
        b.to_async(&rt).iter_custom(move |iters| {
            let (raw, free) = (raw.clone(), free.clone());
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let TryAcquire::Acquired(lease) = raw
                        .try_acquire(&free, OwnerToken::new(), Duration::from_secs(30))
                        .await
                        .expect("acquire")
                    else {
                        panic!("the lock is free");
                    };
                    raw.release(&lease).await.expect("release");
                }
                record("raw_acquire_release", started.elapsed(), iters)
            }
        })
    });
    let client = LockClient::from_arc(raw.clone());
    let opts = AcquireOptions::new();
    let free = name("client");
    group.bench_function("client_acquire_release", |b| {
        let (client, free, opts) = (client.clone(), free.clone(), opts.clone());
        b.to_async(&rt).iter_custom(move |iters| {
            let (client, free, opts) = (client.clone(), free.clone(), opts.clone());
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let guard = client
                        .try_acquire_with(&free, &opts)
                        .await
                        .expect("acquire")
                        .expect("free");
                    guard.release().await.expect("release");
                }
                record("client_acquire_release", started.elapsed(), iters)
            }
        })
    });
    let waiter = LockClient::from_arc(rt.block_on(connect()));
    let hand = name("handoff");
    group.bench_function("handoff", |b| {
        let (client, waiter, hand, opts) = (client.clone(), waiter.clone(), hand.clone(), opts.clone());
        b.to_async(&rt).iter_custom(move |iters| {
            let (client, waiter, hand, opts) = (client.clone(), waiter.clone(), hand.clone(), opts.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += bench::handoff_once(&client, &waiter, &hand, &opts).await;
                }
                record("handoff", total, iters)
            }
        })
    });
    let contenders: Vec<LockClient> = (0..CONTENDERS)
        .map(|_| LockClient::from_arc(rt.block_on(connect())))
        .collect();
    let hot = name("hot");
    group.bench_function("hot_lock_16", |b| {
        let (contenders, hot, opts) = (contenders.clone(), hot.clone(), opts.clone());
        b.to_async(&rt).iter_custom(move |iters| {
            let (contenders, hot, opts) = (contenders.clone(), hot.clone(), opts.clone());
            async move {
                let total = bench::hot_lock(&contenders, &hot, &opts, iters).await;
                record("hot_lock_16", total, iters)
            }
        })
    });
    group.finish();
    report();
}

fn report() {
    let (Some(one), Some(three)) = (mean("exists_x1"), mean("exists_x3")) else {
        return;
    };
    println!("\nZooKeeper, one standalone server on loopback (means over all samples):");
    println!("  exists (1 round trip)                 {one:>12.2?}");
    println!("  3 x exists                            {three:>12.2?}");
    let ratio = |name: &str, floor: Duration, label: &str| {
        if let Some(m) = mean(name) {
            println!(
                "  {label:<37} {m:>12.2?}  = {:.2} x {}",
                m.as_secs_f64() / floor.as_secs_f64(),
                if floor == one { "exists" } else { "3 x exists" }
            );
        }
    };
    if let Some(floor) = mean("recipe_requests_by_hand") {
        println!(
            "  create + getChildren + delete by hand {floor:>12.2?}  = {:.2} x 3 x exists",
            floor.as_secs_f64() / three.as_secs_f64()
        );
        for (name, label) in [
            ("raw_acquire_release", "raw try_acquire + release"),
            ("client_acquire_release", "LockClient try_acquire + release"),
        ] {
            if let Some(m) = mean(name) {
                println!(
                    "  {label:<37} {m:>12.2?}  = {:.2} x 3 x exists, {:.2} x the same requests by hand",
                    m.as_secs_f64() / three.as_secs_f64(),
                    m.as_secs_f64() / floor.as_secs_f64()
                );
            }
        }
    }
    ratio("handoff", one, "handoff (release -> waiter holds)");
    if let Some(m) = mean("hot_lock_16") {
        println!(
            "  hot lock, {CONTENDERS} contenders, per acquisition  {m:>12.2?}  = {:.2} x exists, {:.0} acquisitions/s",
            m.as_secs_f64() / one.as_secs_f64(),
            1.0 / m.as_secs_f64()
        );
    }
}

criterion_group! {
    name = benches;
    config = bench::quick_criterion();
    targets = zookeeper
}
criterion_main!(benches);
