//! `WAIT` for replicas with a replica that lags (paused with SIGSTOP): concurrent
//! acquisitions each wait for their own acknowledgement at once, not one after another, and
//! unrelated calls are not held up.

mod support;

use std::time::{Duration, Instant};

use distlock_core::{DistributedLock, Error, LockName, OwnerToken, TryAcquire};
use distlock_redis::RedisConfig;
use distlock_testkit::{RedisOptions, RedisServer};

fn name(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("t-{}-{label}", &run[..12])).expect("valid")
}

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
        let state = lock.inspect(name).await.expect("inspects");
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
