//! The benchmark shape every backend plugs into (criterion).
//!
//! [`bench_backend`] measures, for one store, next to that store's raw round trip (its
//! [`ping`](distlock_core::DistributedLock::ping), the floor), in the same run:
//! - `roundtrip_x2`: two raw no-op round trips, the floor for an acquire+release pair;
//! - `acquire_release`: an uncontended [`LockClient::try_acquire`] + release;
//! - `handoff`: from a holder's release to the moment a waiting client holds the lock;
//! - `hot_lock_16`: one lock contended by 16 clients, time per acquisition.
//!
//! Each backend's bench file is a few lines:
//!
//! ```ignore
//! fn benches(c: &mut criterion::Criterion) {
//!     let rt = distlock_conformance::bench::runtime();
//!     let store = MemoryLock::new();
//!     distlock_conformance::bench::bench_backend(c, &rt, "memory", move || {
//!         let store = store.clone();
//!         async move { Arc::new(store) as Arc<dyn DistributedLock> }
//!     });
//! }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use distlock_core::{AcquireOptions, DistributedLock, LockClient, LockName};
use tokio::runtime::Runtime;

/// How many clients contend in `hot_lock_16`.
pub const CONTENDERS: usize = 16;

/// A multi-threaded runtime for the benchmarks.
pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A criterion configuration that keeps a whole run short on a small machine.
pub fn quick_criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// Runs the standard benchmarks for one store. `connect` opens a new independent client.
pub fn bench_backend<F, Fut>(c: &mut Criterion, rt: &Runtime, label: &str, connect: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn DistributedLock>>,
{
    bench_with_options(c, rt, label, AcquireOptions::new(), connect);
}

/// As [`bench_backend`], with other acquire options (for example a polling configuration to
/// compare with notifications).
pub fn bench_with_options<F, Fut>(
    c: &mut Criterion,
    rt: &Runtime,
    label: &str,
    opts: AcquireOptions,
    connect: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<dyn DistributedLock>>,
{
    let run = uuid::Uuid::new_v4().simple().to_string();
    let name = |what: &str| LockName::new(format!("bench-{}-{what}", &run[..8])).expect("valid name");
    let opts = opts.ttl(Duration::from_secs(30));
    let raw = rt.block_on(connect());
    let client = LockClient::from_arc(raw.clone());
    let mut group = c.benchmark_group(label);

    group.bench_function("roundtrip_x2", |b| {
        b.to_async(rt).iter(|| async {
            raw.ping().await.expect("ping");
            raw.ping().await.expect("ping");
        })
    });

    let free = name("free");
    group.bench_function("acquire_release", |b| {
        b.to_async(rt).iter(|| async {
            let guard = client
                .try_acquire_with(&free, &opts)
                .await
                .expect("acquire")
                .expect("free");
            guard.release().await.expect("release");
        })
    });

    let waiter = LockClient::from_arc(rt.block_on(connect()));
    let hand = name("handoff");
    group.bench_function("handoff", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (client, waiter, hand, opts) = (client.clone(), waiter.clone(), hand.clone(), opts.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += handoff_once(&client, &waiter, &hand, &opts).await;
                }
                total
            }
        })
    });

    let contenders: Vec<LockClient> = (0..CONTENDERS)
        .map(|_| LockClient::from_arc(rt.block_on(connect())))
        .collect();
    let hot = name("hot");
    group.bench_function(format!("hot_lock_{CONTENDERS}"), |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (contenders, hot, opts) = (contenders.clone(), hot.clone(), opts.clone());
            async move { hot_lock(&contenders, &hot, &opts, iters).await }
        })
    });
    group.finish();
}

/// One handoff: the holder releases while the waiter waits; returns release-to-acquired.
pub async fn handoff_once(
    holder: &LockClient,
    waiter: &LockClient,
    name: &LockName,
    opts: &AcquireOptions,
) -> Duration {
    let guard = holder.acquire_with(name, opts).await.expect("holder acquires");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let waiting = {
        let (waiter, name, opts) = (waiter.clone(), name.clone(), opts.clone());
        tokio::spawn(async move {
            let _ = tx.send(());
            let guard = waiter.acquire_with(&name, &opts).await.expect("waiter acquires");
            let at = Instant::now();
            guard.release().await.expect("release");
            at
        })
    };
    let _ = rx.await;
    // Let the waiter make its failed attempt and subscribe.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let released = Instant::now();
    guard.release().await.expect("release");
    let acquired = waiting.await.expect("joined");
    acquired.saturating_duration_since(released)
}

/// `total` permits of one semaphore of `permits` taken and given back, shared out over the
/// contenders; returns the elapsed time, as [`hot_lock`]. `Err` if the store has no
/// semaphores.
pub async fn hot_semaphore(
    contenders: &[LockClient],
    name: &LockName,
    permits: u32,
    opts: &AcquireOptions,
    total: u64,
) -> distlock_core::Result<Duration> {
    let per = total.div_ceil(contenders.len() as u64);
    let semaphores = contenders
        .iter()
        .map(|client| client.semaphore(name, permits))
        .collect::<distlock_core::Result<Vec<_>>>()?;
    let started = Instant::now();
    let tasks: Vec<_> = semaphores
        .into_iter()
        .map(|semaphore| {
            let opts = opts.clone();
            tokio::spawn(async move {
                for _ in 0..per {
                    let guard = semaphore.acquire_with(&opts).await.expect("a permit");
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined");
    }
    Ok(started
        .elapsed()
        .mul_f64(total as f64 / (per * contenders.len() as u64) as f64))
}

/// `total` acquisitions of one lock shared out over the contenders; returns the elapsed time.
pub async fn hot_lock(
    contenders: &[LockClient],
    name: &LockName,
    opts: &AcquireOptions,
    total: u64,
) -> Duration {
    let per = total.div_ceil(contenders.len() as u64);
    let started = Instant::now();
    let tasks: Vec<_> = contenders
        .iter()
        .map(|client| {
            let (client, name, opts) = (client.clone(), name.clone(), opts.clone());
            tokio::spawn(async move {
                for _ in 0..per {
                    let guard = client.acquire_with(&name, &opts).await.expect("acquire");
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined");
    }
    // Report time per requested acquisition (per * contenders >= total).
    started
        .elapsed()
        .mul_f64(total as f64 / (per * contenders.len() as u64) as f64)
}
