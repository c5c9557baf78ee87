//! Uncontended acquire+release of distlock, rslock and distributed-lock-redis next to the
//! floor (two `PING`s on a plain redis-rs connection), on one `redis-server` on loopback
//! started for the run.
//!
//! `cargo bench --manifest-path crates/distlock-peer-bench/Cargo.toml`

use std::future::Future;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use distlock_peer_bench::libraries::{Distlock, DistributedLockRedis, Library, Rslock};
use distlock_peer_bench::measure::ping;
use distlock_testkit::RedisServer;
use tokio::runtime::Runtime;

/// Runs a measured loop on a runtime worker, next to the connections' I/O.
async fn on_worker(measure: impl Future<Output = Duration> + Send + 'static) -> Duration {
    tokio::spawn(measure).await.expect("the measurement panicked")
}

fn acquire_release<L: Library>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    runtime: &Runtime,
    url: &str,
) {
    let client = runtime.block_on(L::connect(url)).expect("connects");
    let name = format!("peer-bench-criterion-{}", L::TAG);
    group.bench_function(L::LABEL, |b| {
        b.to_async(runtime).iter_custom(|iters| {
            let (client, name) = (client.clone(), name.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let guard = L::try_acquire(&client, &name)
                        .await
                        .expect("works")
                        .expect("free");
                    L::release(guard).await.expect("works");
                }
                started.elapsed()
            })
        })
    });
}

fn benches(c: &mut Criterion) {
    let server = RedisServer::start().expect("redis-server starts (run scripts/install-test-deps)");
    let url = server.url();
    let runtime = distlock_conformance::bench::runtime();
    let mut group = c.benchmark_group("uncontended acquire+release");

    let connection = runtime
        .block_on(
            redis::Client::open(url.as_str())
                .expect("valid")
                .get_multiplexed_async_connection(),
        )
        .expect("connects");
    group.bench_function("two PINGs (the floor)", |b| {
        b.to_async(&runtime).iter_custom(|iters| {
            let mut connection = connection.clone();
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    ping(&mut connection).await.expect("PING");
                    ping(&mut connection).await.expect("PING");
                }
                started.elapsed()
            })
        })
    });
    acquire_release::<Distlock>(&mut group, &runtime, &url);
    acquire_release::<Rslock>(&mut group, &runtime, &url);
    acquire_release::<DistributedLockRedis>(&mut group, &runtime, &url);
    group.finish();
}

criterion_group! {
    name = peers;
    config = distlock_conformance::bench::quick_criterion();
    targets = benches
}
criterion_main!(peers);
