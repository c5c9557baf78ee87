//! Uncontended acquire+release against two raw `SELECT 1` round trips, contended handoff
//! latency, and throughput with 16 contenders, on MariaDB (started by distlock-testkit, or
//! `DISTLOCK_TEST_MYSQL_URL`) and on a SQLite file.
//!
//! `cargo bench -p distlock-sql --bench sql`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use tokio::runtime::Runtime;
use tokio::time::Instant;

const CONTENDERS: usize = 16;
const TTL: Duration = Duration::from_secs(30);

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

async fn open(config: &SqlConfig) -> SqlLock {
    config.clone().build().await.expect("the database answers")
}

fn bench_store(c: &mut Criterion, rt: &Runtime, label: &str, config: SqlConfig) {
    let lock = rt.block_on(open(&config));
    let mut group = c.benchmark_group(label);
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));

    group.bench_function("two_select_1", |b| {
        b.to_async(rt).iter(|| async {
            lock.ping().await.expect("works");
            lock.ping().await.expect("works");
        });
    });

    let name = LockName::new(format!("bench-uncontended-{}", uuid::Uuid::new_v4())).expect("valid");
    group.bench_function("acquire_release", |b| {
        b.to_async(rt).iter(|| async {
            let TryAcquire::Acquired(lease) = lock
                .try_acquire(&name, OwnerToken::new(), TTL)
                .await
                .expect("works")
            else {
                panic!("uncontended");
            };
            assert!(lock.release(&lease).await.expect("works"));
        });
    });

    group.sample_size(10);
    // From the holder's release to the waiting client holding the lock.
    let holder = LockClient::new(lock.clone());
    let waiter = LockClient::new(rt.block_on(open(&config)));
    let name = format!("bench-handoff-{}", uuid::Uuid::new_v4());
    group.bench_function("handoff", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (holder, waiter, name) = (holder.clone(), waiter.clone(), name.clone());
            async move {
                let mut total = Duration::ZERO;
                let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(30));
                for _ in 0..iters {
                    let guard = holder.acquire_with(name.as_str(), &opts).await.expect("works");
                    let (waiter, name, opts) = (waiter.clone(), name.clone(), opts.clone());
                    let waiting = tokio::spawn(async move {
                        let guard = waiter.acquire_with(name.as_str(), &opts).await.expect("works");
                        let at = Instant::now();
                        guard.release().await.expect("works");
                        at
                    });
                    // Let the waiter fail once and start polling.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let released = Instant::now();
                    guard.release().await.expect("works");
                    let acquired = waiting.await.expect("the waiter");
                    total += acquired.saturating_duration_since(released);
                }
                total
            }
        });
    });

    // 16 clients (own pools) taking turns on one name: time per acquisition.
    let clients: Vec<LockClient> = (0..CONTENDERS)
        .map(|_| LockClient::new(rt.block_on(open(&config.clone().with_max_connections(2)))))
        .collect();
    let name = format!("bench-throughput-{}", uuid::Uuid::new_v4());
    group.bench_function("throughput_16_contenders", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (clients, name) = (clients.clone(), name.clone());
            async move {
                let left = Arc::new(AtomicU64::new(iters));
                let started = Instant::now();
                let tasks: Vec<_> = clients
                    .into_iter()
                    .map(|client| {
                        let (left, name) = (left.clone(), name.clone());
                        tokio::spawn(async move {
                            let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(60));
                            while left
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                                .is_ok()
                            {
                                let guard = client.acquire_with(name.as_str(), &opts).await.expect("works");
                                guard.release().await.expect("works");
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.expect("a contender");
                }
                started.elapsed()
            }
        });
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("a temporary directory");
    bench_store(c, &rt, "sqlite", SqlConfig::sqlite(dir.path().join("bench.db")));
    let url = distlock_testkit::shared::mysql_url().expect("mariadbd starts");
    bench_store(c, &rt, "mariadb", SqlConfig::from_url(&url).expect("a valid URL"));
}

criterion_group!(sql, benches);
criterion_main!(sql);
