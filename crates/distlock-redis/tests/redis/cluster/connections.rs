//! Timeouts and the cluster connection: many callers' timeouts reopen it once, a slow master
//! leaves the healthy masters' connections alone, a silent connection to a live master is
//! reopened.

use super::*;

/// Connections master `i` has accepted so far (`INFO stats`).
async fn connections_received(cluster: &RedisCluster, i: usize) -> u64 {
    let mut raw = raw_node(cluster, i).await;
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("the field is there")
}

/// Requests to one slow master time out at once in many callers: the cluster connection is
/// opened again at most once for all of them (after one probe of that master), not once per
/// caller that finds it gone (each opening reads the slot map and connects to every master).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_of_many_callers_reopen_the_cluster_connection_once() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let lock = lock_at(&url).await;
    let slow = name_on(&cluster, 1, "slow");
    let fast = name_on(&cluster, 0, "fast");
    lock.inspect_lock(&fast).await.expect("answers");

    let k = 8;
    proxies.0[1].set_latency(
        distlock_testkit::Direction::ToClient,
        OPERATION_TIMEOUT * 2,
        Duration::ZERO,
    );
    let timed_out = futures::future::join_all((0..k).map(|_| lock.inspect_lock(&slow))).await;
    proxies.0[1].heal();
    assert!(
        timed_out.iter().all(Result::is_err),
        "requests to the slow master: {timed_out:?}"
    );
    let before = connections_received(&cluster, 0).await;
    let answered = futures::future::join_all((0..k).map(|_| lock.inspect_lock(&fast))).await;
    let opened = connections_received(&cluster, 0).await - before - 1;
    println!("{k} callers after the timeouts opened {opened} connections to master 0");
    assert!(answered.iter().all(Result::is_ok), "{answered:?}");
    assert!(
        opened <= 3,
        "{k} callers opened {opened} connections to a healthy master after one master's timeouts"
    );
}

/// A request to one master that is slow (slower than the operation timeout, on every
/// connection) times out: a fresh connection's `PING` to that master times out too, so the
/// master itself is slow, not our connection, and the connections to the healthy masters are
/// not opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_on_a_slow_master_leaves_the_healthy_masters_connections_alone() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let lock = lock_at(&url).await;
    let slow = name_on(&cluster, 1, "slow");
    let fast = [name_on(&cluster, 0, "fast"), name_on(&cluster, 2, "fast")];
    for name in &fast {
        lock.inspect_lock(name).await.expect("answers");
    }

    proxies.0[1].set_latency(
        distlock_testkit::Direction::ToClient,
        OPERATION_TIMEOUT * 4,
        Duration::ZERO,
    );
    let timed_out = futures::future::join_all((0..4).map(|_| lock.inspect_lock(&slow))).await;
    assert!(
        timed_out.iter().all(Result::is_err),
        "requests to the slow master: {timed_out:?}"
    );
    // Whatever the client does about the timeout (a probe of the master takes at most the
    // connect and operation timeouts) happens while the master is still slow.
    tokio::time::sleep(OPERATION_TIMEOUT * 3).await;
    let before = [
        connections_received(&cluster, 0).await,
        connections_received(&cluster, 2).await,
    ];
    for _ in 0..3 {
        for name in &fast {
            lock.inspect_lock(name).await.expect("a healthy master answers");
        }
    }
    // Each count includes its own raw connection.
    let opened = [
        connections_received(&cluster, 0).await - before[0] - 1,
        connections_received(&cluster, 2).await - before[1] - 1,
    ];
    proxies.0[1].heal();
    println!("connections opened to the healthy masters 0 and 2 after the timeouts: {opened:?}");
    assert_eq!(
        opened,
        [0, 0],
        "a timeout on a slow master reopened the connections to the healthy masters"
    );
}

/// The network forgets the client's open connections (a NAT that lost its table): a request
/// times out, a fresh connection to its master answers, so the cluster connection is opened
/// again and later requests are answered on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_on_a_silent_connection_to_a_live_master_reopens_the_cluster_connection() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let lock = lock_at(&url).await;
    let name = name_on(&cluster, 1, "silent");
    lock.inspect_lock(&name).await.expect("answers");

    proxies.silence_open();
    let timed_out = lock.inspect_lock(&name).await;
    assert!(
        timed_out.is_err(),
        "a request on a silent connection: {timed_out:?}"
    );
    let started = Instant::now();
    let answered = loop {
        match lock.inspect_lock(&name).await {
            Ok(_) => break started.elapsed(),
            Err(e) if started.elapsed() < Duration::from_secs(20) => {
                println!("not yet: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the silent connection was never replaced: {e}"),
        }
    };
    println!("answered on a reopened connection {answered:?} after the timeout");
}
