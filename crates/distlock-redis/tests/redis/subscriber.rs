//! The pub/sub subscriber under races: a channel re-created while its unsubscription is
//! pending, multi-reply `UNSUBSCRIBE`s, and the time a `watch` of a subscribed channel takes.

use crate::support;
use crate::support::{connect, name};

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, LockName, Primitive, Woke};
use distlock_redis::RedisConfig;
use distlock_testkit::{proxy::Direction, FaultProxy};

/// A lock name of about 1000 bytes (names may have up to 1024), so hundreds of
/// unsubscription replies fill several socket reads.
fn long_name(i: usize) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("{}-{i}-{}", &run[..12], "x".repeat(980))).expect("valid")
}

fn channel(lock: &LockName) -> Vec<u8> {
    [b"distlock:released:".as_slice(), lock.as_str().as_bytes()].concat()
}

async fn publish(raw: &mut redis::aio::MultiplexedConnection, lock: &LockName) -> i64 {
    redis::cmd("PUBLISH")
        .arg(channel(lock))
        .arg("released")
        .query_async(raw)
        .await
        .expect("PUBLISH")
}

async fn numsub(raw: &mut redis::aio::MultiplexedConnection, lock: &LockName) -> u64 {
    let (_, n): (Vec<u8>, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel(lock))
        .query_async(raw)
        .await
        .expect("NUMSUB");
    n
}

/// Hundreds of long channels unsubscribed right before a `watch`: the server answers the
/// unsubscription with one reply per channel, over many reads. `watch` must return only once
/// the server ran its own `SUBSCRIBE`, so a release published right after it is heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_its_own_confirmed_subscription_after_mass_unsubscribe() {
    let server = support::start_server().await;
    // Requests reach the server late (replies do not): a watch confirmed by someone else's
    // reply returns before the server ran its SUBSCRIBE, and a release published directly
    // meanwhile is missed.
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    proxy.set_latency(Direction::ToServer, Duration::from_millis(30), Duration::ZERO);
    let lock = connect(&format!("redis://{}", proxy.addr())).await;
    let mut raw = support::raw(&server.url()).await.expect("raw");
    for round in 0..5 {
        let many: Vec<_> = (0..400).map(long_name).collect();
        let watches = futures::future::join_all(many.iter().map(|n| lock.watch(n, Primitive::Mutex))).await;
        assert!(watches.iter().all(Result::is_ok), "subscribes");
        drop(watches);
        let target = name("target");
        let mut watch = lock.watch(&target, Primitive::Mutex).await.expect("subscribes");
        let receivers = publish(&mut raw, &target).await;
        let woke = watch.wait(Duration::from_secs(1)).await;
        assert_eq!(
            woke,
            Woke::Released,
            "round {round}: a release published right after watch returned was missed \
             (the server had {receivers} subscribers when it was published)"
        );
    }
}

/// A channel whose last watch goes while another `watch` of it is under way must not be
/// unsubscribed afterwards: its new watcher must still hear releases, and the server must
/// still have the subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_recreated_during_a_pending_unsubscribe_keeps_its_subscription() {
    let server = support::start_server().await;
    let lock = connect(&server.url()).await;
    let mut raw = support::raw(&server.url()).await.expect("raw");
    let mut failures = Vec::new();
    for round in 0..10 {
        let target = name("recreated");
        let first = lock.watch(&target, Primitive::Mutex).await.expect("subscribes");
        // Stale channels, so the next watch has unsubscriptions to send.
        let stale: Vec<_> = (0..200).map(long_name).collect();
        let mut watches = Vec::new();
        for n in &stale {
            watches.push(lock.watch(n, Primitive::Mutex).await.expect("subscribes"));
        }
        drop(watches);
        // A second watch of the target starts (and sends the stale unsubscriptions) while
        // the first watch of the target goes away.
        let second = tokio::spawn({
            let lock = lock.clone();
            let target = target.clone();
            async move { lock.watch(&target, Primitive::Mutex).await.expect("subscribes") }
        });
        tokio::time::sleep(Duration::from_micros(500 * (round % 4 + 1))).await;
        drop(first);
        let mut second = second.await.expect("joined");
        // Any later watch flushes pending unsubscriptions.
        let _flush = lock
            .watch(&name("flush"), Primitive::Mutex)
            .await
            .expect("subscribes");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let subscribed = numsub(&mut raw, &target).await;
        publish(&mut raw, &target).await;
        let woke = second.wait(Duration::from_secs(1)).await;
        if woke != Woke::Released || subscribed != 1 {
            failures.push(format!("round {round}: NUMSUB {subscribed}, watch {woke:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "a watched channel was unsubscribed: {failures:?}"
    );
}

/// A `watch` of a channel that is already subscribed costs no round trip and does not wait
/// behind other channels' subscription work, even with the server paused (the subscribed
/// channel needs nothing from it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_a_subscribed_channel_needs_no_round_trip() {
    let mut server = support::start_server().await;
    let lock = RedisConfig::from_url(&server.url())
        .expect("valid")
        .with_operation_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connects");
    let target = name("subscribed");
    let _held = lock.watch(&target, Primitive::Mutex).await.expect("subscribes");
    // Stale channels waiting to be unsubscribed, then the server stops answering.
    let stale: Vec<_> = (0..50).map(long_name).collect();
    let mut watches = Vec::new();
    for n in &stale {
        watches.push(lock.watch(n, Primitive::Mutex).await.expect("subscribes"));
    }
    let server = tokio::task::spawn_blocking(move || {
        server.pause().expect("SIGSTOP");
        server
    })
    .await
    .expect("joined");
    drop(watches);
    let started = Instant::now();
    let again = lock.watch(&target, Primitive::Mutex).await;
    let took = started.elapsed();
    let mut server = server;
    tokio::task::spawn_blocking(move || server.resume().expect("SIGCONT"))
        .await
        .expect("joined");
    assert!(again.is_ok(), "{again:?}");
    assert!(
        took < Duration::from_millis(100),
        "watching an already subscribed channel took {took:?}"
    );
}
