//! Many locks held through one client on Redis, through a proxy that adds 100 ms to every
//! request: the watchdog renews them in pipelines, so a renewal period costs one round trip
//! per batch (a renewal of every lease at once takes one round trip, not one per 32), the
//! server runs one `EVALSHA` per lock per renewal (its `INFO commandstats`), and no lock is
//! lost.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{AcquireOptions, Lease, LockClient, LockGuard};
use distlock_redis::RedisConfig;
use distlock_testkit::{Direction, FaultProxy};
use futures::stream::{self, StreamExt, TryStreamExt};
use support::{raw, start_server};

const HELD: u64 = 2_000;
/// The watchdog renews at a third of the TTL: one renewal period is a second.
const TTL: Duration = Duration::from_secs(3);
const PERIODS: u64 = 3;
/// Added to every request on its way to the server.
const LATENCY: Duration = Duration::from_millis(100);

/// `EVALSHA` calls the server has run so far.
async fn script_calls(url: &str) -> u64 {
    let mut conn = raw(url).await.expect("connects");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_held_locks_renew_in_one_round_trip_per_batch() {
    let server = start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("the proxy starts");
    proxy.set_latency(Direction::ToServer, LATENCY, Duration::ZERO);
    let lock = RedisConfig::from_url(&format!("redis://{}", proxy.addr()))
        .expect("valid URL")
        .build()
        .await
        .expect("connects");
    let client = LockClient::new(lock);
    let opts = AcquireOptions::new().ttl(TTL);
    let guards: Vec<LockGuard> = stream::iter(0..HELD)
        .map(|i| {
            let (client, opts) = (&client, &opts);
            async move {
                client
                    .try_acquire_with(format!("entity-{i}"), opts)
                    .await
                    .map(|g| g.expect("the lock is free"))
            }
        })
        .buffer_unordered(200)
        .try_collect()
        .await
        .expect("acquired");

    let before = script_calls(&server.url()).await;
    tokio::time::sleep(TTL / 3 * PERIODS as u32).await;
    let scripts = script_calls(&server.url()).await - before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    // Every lease at once, as the watchdog sends a batch.
    let leases: Vec<Lease> = guards.iter().map(LockGuard::lease).collect();
    let started = Instant::now();
    let renewed = client.backend().renew(&leases).await;
    let took = started.elapsed();
    let ours = renewed.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    println!(
        "{HELD} held locks, {PERIODS} renewal periods: {scripts} EVALSHA, {lost} lost; \
         all renewed at once in {took:?} ({ours} renewed)"
    );
    assert_eq!(lost, 0, "no lock is lost");
    // A renewal comes every 0.23 to 0.33 TTL (a hold due within a tenth of the TTL of a batch
    // goes with it): up to 1.5 per lock and period.
    assert!(
        (HELD * PERIODS / 2..=HELD * PERIODS * 3 / 2).contains(&scripts),
        "{scripts} EVALSHA for {HELD} locks in {PERIODS} renewal periods"
    );
    assert_eq!(ours as u64, HELD, "every lease renewed: {renewed:?}");
    // One round trip is 100 ms here; renewed 32 at a time they would take 63.
    assert!(
        took < LATENCY * 10,
        "renewing {HELD} leases at once took {took:?}: more than a few round trips of {LATENCY:?}"
    );
    stream::iter(guards)
        .for_each_concurrent(200, |guard| async move {
            guard.release().await.expect("released");
        })
        .await;
}
