//! `WAIT` for replicas with a replica that lags (paused with SIGSTOP): concurrent
//! acquisitions each wait for their own acknowledgement at once, not one after another, and
//! unrelated calls are not held up.

use crate::support;
use crate::support::name;

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, DistributedLockExt, Error, OwnerToken, TryAcquire};
use distlock_redis::RedisConfig;
use distlock_testkit::{RedisOptions, RedisServer};

/// A replica of `master`, in sync with it.
async fn replica_of(master: &RedisServer) -> RedisServer {
    let args = vec![
        "--replicaof".to_owned(),
        "127.0.0.1".to_owned(),
        master.port().to_string(),
    ];
    let replica = tokio::task::spawn_blocking(move || {
        RedisServer::start_with(RedisOptions {
            extra_args: args,
            ..RedisOptions::default()
        })
    })
    .await
    .expect("joined")
    .expect("the replica starts");
    let mut raw = support::raw(&master.url()).await.expect("raw");
    let started = Instant::now();
    loop {
        let acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(100)
            .query_async(&mut raw)
            .await
            .expect("WAIT");
        if acked >= 1 {
            return replica;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica never synced"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_acquisitions_wait_for_a_lagging_replica_in_parallel() {
    let master = support::start_server().await;
    let replica = replica_of(&master).await;
    let ack_timeout = Duration::from_millis(300);
    let lock = RedisConfig::from_url(&master.url())
        .expect("valid")
        .with_operation_timeout(Duration::from_millis(500))
        .with_wait_for_replicas(1, ack_timeout)
        .build()
        .await
        .expect("connects");
    // A warm-up acquisition while the replica answers.
    // (A replica just synced may take a moment to acknowledge promptly.)
    let mut warmed = false;
    for _ in 0..20 {
        let warm = name("warm");
        if let Ok(TryAcquire::Acquired(_)) = lock
            .try_acquire(&warm, OwnerToken::new(), Duration::from_secs(30))
            .await
        {
            warmed = true;
            break;
        }
    }
    assert!(warmed, "the replica acknowledges while it runs");

    let mut replica = tokio::task::spawn_blocking(move || {
        let mut replica = replica;
        replica.pause().expect("SIGSTOP");
        replica
    })
    .await
    .expect("joined");

    let k = 8;
    let started = Instant::now();
    let attempts = (0..k).map(|i| {
        let lock = lock.clone();
        tokio::spawn(async move {
            let name = name(&format!("lagging-{i}"));
            let result = lock
                .try_acquire(&name, OwnerToken::new(), Duration::from_secs(30))
                .await;
            (name, result, Instant::now())
        })
    });
    // An unrelated call while the acknowledgements are awaited.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ping_started = Instant::now();
    lock.ping().await.expect("answers");
    let ping_took = ping_started.elapsed();
    let mut outcomes = Vec::new();
    for attempt in attempts.collect::<Vec<_>>() {
        outcomes.push(attempt.await.expect("joined"));
    }
    let took = started.elapsed();
    tokio::task::spawn_blocking(move || replica.resume().expect("SIGCONT"))
        .await
        .expect("joined");

    let mut wrong = Vec::new();
    for (name, result, _) in &outcomes {
        match result {
            Err(Error::Unavailable { source, .. })
                if source.to_string().contains("replicas acknowledged") => {}
            other => wrong.push(format!("{name}: {other:?}")),
        }
        let state = lock.inspect_lock(name).await.expect("inspects");
        assert!(
            !state.is_held(),
            "{name} was left held after a failed acknowledgement"
        );
    }
    println!("{k} acquisitions waiting for a paused replica took {took:?}; a PING meanwhile {ping_took:?}");
    assert!(
        wrong.is_empty(),
        "each attempt must fail on its own acknowledgement timeout: {wrong:?}"
    );
    assert!(
        took < ack_timeout * 3,
        "{k} acquisitions waited for their acknowledgements one after another: {took:?}"
    );
    assert!(
        ping_took < Duration::from_millis(200),
        "a PING waited {ping_took:?}"
    );
}

/// A lock with replica acknowledgement (1 replica, `ack_timeout`) on `master`, and a lease
/// acquired while the replica answers.
async fn lock_with_lease(
    master: &RedisServer,
    ack_timeout: Duration,
) -> (distlock_redis::RedisLock, distlock_core::Lease) {
    let lock = RedisConfig::from_url(&master.url())
        .expect("valid")
        .with_operation_timeout(Duration::from_millis(500))
        .with_wait_for_replicas(1, ack_timeout)
        .build()
        .await
        .expect("connects");
    // A replica just synced may take a moment to acknowledge promptly.
    for _ in 0..20 {
        if let Ok(TryAcquire::Acquired(lease)) = lock
            .try_acquire(&name("renewed"), OwnerToken::new(), Duration::from_secs(30))
            .await
        {
            return (lock, lease);
        }
    }
    panic!("the replica never acknowledged an acquisition");
}

/// Renewals wait for the same replicas as acquisitions: with the replica paused (SIGSTOP), a
/// renewal the master applied but no replica acknowledged is an unknown outcome
/// ([`Error::Unavailable`]), not a success, through `extend` and `extend_many` alike; a
/// promoted replica would hold the old, shorter TTL. Once the replica answers again,
/// renewals succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_not_acknowledged_by_the_replicas_are_not_successes() {
    let master = support::start_server().await;
    let replica = replica_of(&master).await;
    let ack_timeout = Duration::from_millis(300);
    let (lock, lease) = lock_with_lease(&master, ack_timeout).await;

    let mut replica = tokio::task::spawn_blocking(move || {
        let mut replica = replica;
        replica.pause().expect("SIGSTOP");
        replica
    })
    .await
    .expect("joined");
    let started = Instant::now();
    let single = lock.extend(&lease, Duration::from_secs(30)).await;
    let single_took = started.elapsed();
    let many = lock.renew(std::slice::from_ref(&lease)).await;
    // The replica is kept (dropping it stops it): it must answer again below.
    let _replica = tokio::task::spawn_blocking(move || {
        replica.resume().expect("SIGCONT");
        replica
    })
    .await
    .expect("joined");

    println!("while the replica is paused: extend {single:?} in {single_took:?}; extend_many {many:?}");
    for (what, outcome) in [
        ("extend", single.map(|l| l.is_some())),
        ("extend_many", {
            let [one] = <[_; 1]>::try_from(many).expect("one result");
            one.map(|l| l.is_some())
        }),
    ] {
        match outcome {
            Err(Error::Unavailable { source, .. })
                if source.to_string().contains("replicas acknowledged") => {}
            other => panic!("{what} while no replica acknowledges must be an unknown outcome: {other:?}"),
        }
    }
    assert!(
        single_took >= ack_timeout,
        "the renewal did not wait for the replicas ({single_took:?})"
    );

    // The replica answers again: renewals are acknowledged.
    let mut renewed = None;
    for _ in 0..20 {
        match lock.extend(&lease, Duration::from_secs(30)).await {
            Ok(Some(lease)) => {
                renewed = Some(lease);
                break;
            }
            other => println!("a renewal after the replica resumed: {other:?}"),
        }
    }
    let renewed = renewed.expect("renewals succeed once the replica answers");
    let [again] = <[_; 1]>::try_from(lock.renew(std::slice::from_ref(&renewed)).await).expect("one result");
    assert!(
        matches!(again, Ok(Some(_))),
        "extend_many once the replica answers: {again:?}"
    );
}
