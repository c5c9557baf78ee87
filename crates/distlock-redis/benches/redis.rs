//! Benchmarks of the Redis backend against one real `redis-server` on loopback, printed as
//! ratios to the floor they should be compared with:
//!
//! - uncontended acquire + release (raw trait, through `LockClient`, and Redlock over 3
//!   masters) vs two `PING`s;
//! - handoff latency (release -> the waiter holds it) with notifications vs polling, and vs
//!   two `PING`s under the same conditions (threads idle for 3 ms first);
//! - throughput of one hot lock with 16 contending clients, and of one hot semaphore of 2
//!   permits (per permit, as a ratio of the hot lock's time per acquisition);
//! - renewing 1,000 held locks with one `extend_many`, vs 1,000 single `extend`s.
//!
//! `cargo bench -p distlock-redis --bench redis` (about 2 s of measurement per benchmark).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Lease, LockClient, LockName, OwnerToken, TryAcquire,
};
use distlock_redis::{RedisConfig, RedisLock, RedlockConfig};
use distlock_testkit::RedisServer;
use tokio::runtime::Runtime;
use tokio::time::Instant;

/// Mean time per iteration of every benchmark, for the ratios printed at the end.
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

/// Runs a measured loop on a runtime worker, next to the connections' I/O, rather than on
/// the thread criterion blocks on (every wake-up would cross threads there).
async fn on_worker(measure: impl std::future::Future<Output = Duration> + Send + 'static) -> Duration {
    tokio::spawn(measure).await.expect("the measurement panicked")
}

struct Setup {
    runtime: Runtime,
    url: String,
    _server: RedisServer,
    /// Three more servers, the masters of a Redlock.
    masters: Vec<RedisServer>,
}

fn setup() -> Setup {
    let server = RedisServer::start().expect("redis-server starts (run scripts/install-test-deps)");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let masters = (0..3)
        .map(|_| RedisServer::start().expect("redis-server starts"))
        .collect();
    Setup {
        url: server.url(),
        runtime,
        _server: server,
        masters,
    }
}

fn lock(setup: &Setup, notifications: bool) -> RedisLock {
    setup.runtime.block_on(async {
        RedisConfig::from_url(&setup.url)
            .expect("valid")
            .with_notifications(notifications)
            .build()
            .await
            .expect("connects")
    })
}

fn name(label: &str) -> LockName {
    LockName::new(format!("bench-{label}-{}", uuid::Uuid::new_v4().simple())).expect("valid")
}

fn uncontended(c: &mut Criterion, setup: &Setup) {
    let backend = lock(setup, true);
    let client = LockClient::new(backend.clone());
    let mut group = c.benchmark_group("uncontended");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));

    group.bench_function("two PINGs", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let backend = backend.clone();
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    backend.ping().await.expect("PING");
                    backend.ping().await.expect("PING");
                }
                record("two PINGs", started.elapsed(), iters)
            })
        });
    });

    let raw_name = name("raw");
    group.bench_function("try_acquire + release (raw)", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let (backend, raw_name) = (backend.clone(), raw_name.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let TryAcquire::Acquired(lease) = backend
                        .try_acquire(&raw_name, OwnerToken::new(), Duration::from_secs(30))
                        .await
                        .expect("works")
                    else {
                        panic!("held");
                    };
                    assert!(backend.release(&lease).await.expect("works"));
                }
                record("acquire+release raw", started.elapsed(), iters)
            })
        });
    });

    let redlock = setup.runtime.block_on(async {
        RedlockConfig::new(setup.masters.iter().map(RedisServer::url))
            .expect("valid")
            .build()
            .await
            .expect("builds")
    });
    let redlock_name = name("redlock");
    group.bench_function("try_acquire + release (Redlock, 3 masters)", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let (redlock, redlock_name) = (redlock.clone(), redlock_name.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let TryAcquire::Acquired(lease) = redlock
                        .try_acquire(&redlock_name, OwnerToken::new(), Duration::from_secs(30))
                        .await
                        .expect("works")
                    else {
                        panic!("held");
                    };
                    assert!(redlock.release(&lease).await.expect("works"));
                }
                record("acquire+release redlock", started.elapsed(), iters)
            })
        });
    });

    let client_name = name("client");
    group.bench_function("acquire + release (LockClient)", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let (client, client_name) = (client.clone(), client_name.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let guard = client.acquire(&client_name).await.expect("acquired");
                    assert!(guard.release().await.expect("works"));
                }
                record("acquire+release client", started.elapsed(), iters)
            })
        });
    });
    group.finish();
}

/// Release -> the waiter holds it: the waiter has been waiting for 3 ms when the holder
/// releases (so it has subscribed, retried and gone to sleep).
fn handoff(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("handoff");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat);
    // The floor under the same conditions: threads parked for 3 ms, then two round trips
    // (a handoff is a release round trip, the publish, and an acquire round trip).
    let floor = lock(setup, true);
    group.bench_function("floor: two PINGs after 3 ms idle", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let floor = floor.clone();
            on_worker(async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let started = Instant::now();
                    floor.ping().await.expect("PING");
                    floor.ping().await.expect("PING");
                    total += started.elapsed();
                }
                record("two PINGs idle", total, iters)
            })
        });
    });
    for (label, key, notifications) in [
        ("notification", "handoff notification", true),
        ("polling (10..500 ms backoff)", "handoff polling", false),
    ] {
        let holder = LockClient::new(lock(setup, notifications));
        let waiter = LockClient::new(lock(setup, notifications));
        let lock_name = name("handoff");
        group.bench_function(label, |b| {
            b.to_async(&setup.runtime).iter_custom(|iters| {
                let (holder, waiter, lock_name) = (holder.clone(), waiter.clone(), lock_name.clone());
                on_worker(async move {
                    let mut total = Duration::ZERO;
                    let opts = AcquireOptions::new().wait_for(Duration::from_secs(10));
                    for _ in 0..iters {
                        let guard = holder.acquire(&lock_name).await.expect("acquired");
                        let waiting = tokio::spawn({
                            let (waiter, lock_name, opts) = (waiter.clone(), lock_name.clone(), opts.clone());
                            async move {
                                let guard =
                                    waiter.acquire_with(&lock_name, &opts).await.expect("handed over");
                                (guard, Instant::now())
                            }
                        });
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        let released_at = Instant::now();
                        assert!(guard.release().await.expect("works"));
                        let (guard, acquired_at) = waiting.await.expect("joined");
                        total += acquired_at - released_at;
                        assert!(guard.release().await.expect("works"));
                    }
                    record(key, total, iters)
                })
            });
        });
    }
    group.finish();
}

/// 16 clients loop acquire (waiting) + release on one name; time per acquisition. On one
/// server and on a Redlock over 3 masters.
fn hot_lock(c: &mut Criterion, setup: &Setup) {
    const CONTENDERS: usize = 16;
    let clients: Vec<LockClient> = (0..CONTENDERS)
        .map(|_| LockClient::new(lock(setup, true)))
        .collect();
    let urls: Vec<String> = setup.masters.iter().map(RedisServer::url).collect();
    let redlock_clients: Vec<LockClient> = (0..CONTENDERS)
        .map(|_| {
            LockClient::new(setup.runtime.block_on(async {
                RedlockConfig::new(&urls)
                    .expect("valid")
                    .build()
                    .await
                    .expect("builds")
            }))
        })
        .collect();
    let mut group = c.benchmark_group("hot lock");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(10)
        .throughput(Throughput::Elements(1));
    // (label, key of the mean, clients, the semaphore's permits or None for the lock)
    for (label, key, clients, permits) in [
        (
            "16 contenders, per acquisition",
            "hot lock",
            clients.clone(),
            None,
        ),
        (
            "16 contenders, Redlock over 3 masters, per acquisition",
            "hot lock redlock",
            redlock_clients,
            None,
        ),
        (
            "16 contenders, semaphore of 2 permits, per permit",
            "hot semaphore",
            clients,
            Some(2),
        ),
    ] {
        let lock_name = name("hot");
        group.bench_function(label, |b| {
            b.to_async(&setup.runtime).iter_custom(|iters| {
                let (clients, lock_name) = (clients.clone(), lock_name.clone());
                on_worker(async move {
                    let remaining = Arc::new(std::sync::atomic::AtomicI64::new(
                        i64::try_from(iters).unwrap_or(i64::MAX),
                    ));
                    let opts = AcquireOptions::new()
                        .ttl(Duration::from_secs(30))
                        .wait_for(Duration::from_secs(60));
                    let started = Instant::now();
                    let workers: Vec<_> = clients
                        .into_iter()
                        .map(|client| {
                            let (remaining, lock_name, opts) =
                                (remaining.clone(), lock_name.clone(), opts.clone());
                            tokio::spawn(async move {
                                while remaining.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) > 0 {
                                    let guard = match permits {
                                        None => client.acquire_with(&lock_name, &opts).await,
                                        Some(permits) => {
                                            let semaphore =
                                                client.semaphore(&lock_name, permits).expect("a semaphore");
                                            semaphore.acquire_with(&opts).await
                                        }
                                    }
                                    .expect("acquired");
                                    black_box(guard.fencing_token());
                                    assert!(guard.release().await.expect("works"));
                                }
                            })
                        })
                        .collect();
                    for worker in workers {
                        worker.await.expect("joined");
                    }
                    record(key, started.elapsed(), iters)
                })
            });
        });
    }
    group.finish();
}

/// Renewing 1,000 held locks: one `extend_many` (one pipeline) vs 1,000 `extend`s in turn.
fn renew_many(c: &mut Criterion, setup: &Setup) {
    const HELD: usize = 1000;
    let backend = lock(setup, true);
    let base = name("renew");
    let leases: Vec<Lease> = setup.runtime.block_on(async {
        let mut leases = Vec::with_capacity(HELD);
        for i in 0..HELD {
            let n = LockName::new(format!("{base}-{i}")).expect("valid");
            match backend
                .try_acquire(&n, OwnerToken::new(), Duration::from_secs(600))
                .await
                .expect("works")
            {
                TryAcquire::Acquired(lease) => leases.push(lease),
                TryAcquire::Held(_) => panic!("held"),
            }
        }
        leases
    });
    let leases = Arc::new(leases);
    let mut group = c.benchmark_group("renew 1000 held locks");
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(10);
    group.bench_function("extend_many (one pipeline)", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let (backend, leases) = (backend.clone(), leases.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    let renewed = backend.renew(&leases).await;
                    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))));
                }
                record("renew extend_many", started.elapsed(), iters)
            })
        });
    });
    group.bench_function("1000 x extend, one after another", |b| {
        b.to_async(&setup.runtime).iter_custom(|iters| {
            let (backend, leases) = (backend.clone(), leases.clone());
            on_worker(async move {
                let started = Instant::now();
                for _ in 0..iters {
                    for lease in leases.iter() {
                        let renewed = backend.extend(lease, lease.ttl()).await.expect("works");
                        assert!(renewed.is_some());
                    }
                }
                record("renew sequential", started.elapsed(), iters)
            })
        });
    });
    group.finish();
    setup.runtime.block_on(async {
        for lease in leases.iter() {
            let _ = backend.release(lease).await;
        }
    });
}

fn summary() {
    // `--list` (as cargo nextest asks) must print the benchmarks' names and nothing else.
    if std::env::args().any(|arg| arg == "--list") {
        return;
    }
    let show = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| format!("{d:?}"));
    let ratio = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => format!("{:.2}x", a.as_secs_f64() / b.as_secs_f64()),
        _ => "-".to_owned(),
    };
    let pings = mean("two PINGs");
    let raw = mean("acquire+release raw");
    let client = mean("acquire+release client");
    let redlock = mean("acquire+release redlock");
    let idle_pings = mean("two PINGs idle");
    let notified = mean("handoff notification");
    let polled = mean("handoff polling");
    let hot = mean("hot lock");
    let hot_semaphore = mean("hot semaphore");
    let many = mean("renew extend_many");
    let sequential = mean("renew sequential");
    println!();
    println!("== distlock-redis summary (means over all iterations, warm-up included) ==");
    println!("two PING round trips:                 {}", show(pings));
    println!(
        "acquire+release, raw trait:           {}  = {} of two PINGs",
        show(raw),
        ratio(raw, pings)
    );
    println!(
        "acquire+release, LockClient:          {}  = {} of two PINGs",
        show(client),
        ratio(client, pings)
    );
    println!(
        "acquire+release, Redlock (3 masters): {}  = {} of two PINGs",
        show(redlock),
        ratio(redlock, pings)
    );
    println!("two PINGs after 3 ms idle:            {}", show(idle_pings));
    println!(
        "handoff with notification:            {}  = {} of two idle PINGs",
        show(notified),
        ratio(notified, idle_pings)
    );
    println!(
        "handoff with polling:                 {}  = {} of the notified handoff",
        show(polled),
        ratio(polled, notified)
    );
    if let Some(hot) = hot {
        println!(
            "hot lock, 16 contenders:              {}/acquisition = {:.0} acquisitions/s",
            show(Some(hot)),
            1.0 / hot.as_secs_f64()
        );
    }
    if let Some(permit) = hot_semaphore {
        println!(
            "hot semaphore (2 permits), 16 contenders: {}/permit = {:.0} permits/s = {} of the hot lock's time",
            show(Some(permit)),
            1.0 / permit.as_secs_f64(),
            ratio(hot_semaphore, hot)
        );
    }
    println!(
        "renew 1000 locks, extend_many:        {}  ({} per lock, {} of two PINGs)",
        show(many),
        show(many.map(|d| d / 1000)),
        ratio(many, pings)
    );
    println!(
        "renew 1000 locks, 1000 x extend:      {}  = {} of extend_many",
        show(sequential),
        ratio(sequential, many)
    );
}

fn benches(c: &mut Criterion) {
    let setup = setup();
    uncontended(c, &setup);
    handoff(c, &setup);
    hot_lock(c, &setup);
    renew_many(c, &setup);
    summary();
}

criterion_group!(redis_benches, benches);
criterion_main!(redis_benches);
