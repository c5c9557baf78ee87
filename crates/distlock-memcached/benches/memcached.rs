//! Benchmarks of the memcached backend against one real `memcached` on loopback.
//!
//! - `memcached/*`: the standard shape (`distlock_conformance::bench::bench_backend`): two
//!   `ping`s (the floor), uncontended acquire + release through `LockClient`, handoff
//!   latency (release -> the polling waiter holds it), one hot lock with 16 contenders;
//! - `memcached_poll_1_20ms/*`: the same with waiters polling every 1..20 ms;
//! - `memcached_raw/*`: two raw meta no-op (`mn`) round trips on a bare socket (the floor
//!   without our client), acquire + release through the raw trait (two round trips), and
//!   renewing 500 held locks with one pipelined `extend_many` vs 500 concurrent `extend`s.
//!
//! `cargo bench -p distlock-memcached --bench memcached` (set `DISTLOCK_TEST_MEMCACHED_URL`
//! to use a running server instead of starting one).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use distlock_core::{AcquireOptions, DistributedLock, DistributedLockExt, LockName, OwnerToken, TryAcquire};
use distlock_memcached::{MemcachedConfig, MemcachedLock};
use distlock_testkit::shared;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn connect(url: &str) -> MemcachedLock {
    MemcachedConfig::from_url(url)
        .expect("valid URL")
        .build()
        .expect("valid config")
}

fn benches(c: &mut Criterion) {
    let url = shared::memcached_url().expect("memcached starts (run scripts/install-test-deps)");
    let rt = distlock_conformance::bench::runtime();

    let standard_url = url.clone();
    distlock_conformance::bench::bench_backend(c, &rt, "memcached", move || {
        let url = standard_url.clone();
        async move { Arc::new(connect(&url)) as Arc<dyn DistributedLock> }
    });

    // The same with tighter polling (1..20 ms instead of 10..500 ms): faster handoffs and a
    // hotter hot lock, for more attempts on the server.
    let fast_url = url.clone();
    distlock_conformance::bench::bench_with_options(
        c,
        &rt,
        "memcached_poll_1_20ms",
        AcquireOptions::new().poll_interval(Duration::from_millis(1), Duration::from_millis(20)),
        move || {
            let url = fast_url.clone();
            async move { Arc::new(connect(&url)) as Arc<dyn DistributedLock> }
        },
    );

    let mut group = c.benchmark_group("memcached_raw");
    let addr = url.trim_start_matches("memcache://").to_owned();
    let socket = rt.block_on(async {
        let stream = TcpStream::connect(&addr).await.expect("connects");
        stream.set_nodelay(true).expect("nodelay");
        Arc::new(tokio::sync::Mutex::new(BufReader::new(stream)))
    });
    group.bench_function("mn_x2_bare_socket", |b| {
        b.to_async(&rt).iter(|| {
            let socket = socket.clone();
            async move {
                let mut socket = socket.lock().await;
                for _ in 0..2 {
                    socket.get_mut().write_all(b"mn\r\n").await.expect("writes");
                    let mut line = String::new();
                    socket.read_line(&mut line).await.expect("reads");
                    assert_eq!(line, "MN\r\n");
                }
            }
        })
    });

    let lock = connect(&url);
    let name = LockName::new(format!("bench-raw-{}", OwnerToken::new())).expect("valid");
    group.bench_function("acquire_release_raw_trait", |b| {
        b.to_async(&rt).iter(|| async {
            let TryAcquire::Acquired(lease) = lock
                .try_acquire(&name, OwnerToken::new(), Duration::from_secs(30))
                .await
                .expect("acquire")
            else {
                panic!("the lock is free");
            };
            assert!(lock.release(&lease).await.expect("release"));
        })
    });

    // Renewing 500 held locks: the watchdog's pipelined `extend_many` vs 500 single extends.
    let leases: Vec<_> = rt.block_on(async {
        let mut leases = Vec::new();
        for i in 0..500 {
            let name = LockName::new(format!("bench-renew-{}-{i}", OwnerToken::new())).expect("valid");
            match lock
                .try_acquire(&name, OwnerToken::new(), Duration::from_secs(60))
                .await
                .expect("acquire")
            {
                TryAcquire::Acquired(lease) => leases.push(lease),
                TryAcquire::Held(_) => panic!("the lock is free"),
            }
        }
        leases
    });
    let held = Arc::new(tokio::sync::Mutex::new(leases));
    group.bench_function("renew_500_extend_many", |b| {
        b.to_async(&rt).iter(|| async {
            let mut held = held.lock().await;
            let renewed = lock.renew(&held).await;
            *held = renewed
                .into_iter()
                .map(|r| r.expect("works").expect("still ours"))
                .collect();
        })
    });
    group.bench_function("renew_500_single_extends", |b| {
        b.to_async(&rt).iter(|| async {
            let mut held = held.lock().await;
            let renewed = futures::future::join_all(held.iter().map(|l| lock.extend(l, l.ttl()))).await;
            *held = renewed
                .into_iter()
                .map(|r| r.expect("works").expect("still ours"))
                .collect();
        })
    });
    group.finish();
}

criterion_group! {
    name = memcached;
    config = distlock_conformance::bench::quick_criterion();
    targets = benches
}
criterion_main!(memcached);
