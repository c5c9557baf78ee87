//! Redlock under restarts, failed masters and contention: a master restarted empty does not
//! vote for a second holder, split-vote detection counts masters that did not answer, and a
//! failed attempt's cleanup announces nothing.

use crate::support;
use crate::support::name;

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, OwnerToken, TryAcquire,
};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::RedisServer;

async fn redlock(urls: &[String]) -> Redlock {
    RedlockConfig::new(urls)
        .expect("valid")
        .with_node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("builds")
}

async fn raw_set_px(url: &str, key: &str, value: &str, ms: u64) {
    let mut raw = support::raw(url).await.expect("raw");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(ms)
        .query_async(&mut raw)
        .await
        .expect("SET");
}

/// A holds the lock on masters 1 and 2 (master 3 was briefly taken by someone else); master 2
/// restarts empty. B, which talked to master 2 before its restart, must not win the lock on
/// masters 2 and 3 while A's lease is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_does_not_vote_for_a_second_holder() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (redlock(&urls).await, redlock(&urls).await);
    // B has seen every master (and its run id) before.
    let warm = name("warm");
    match b
        .try_acquire(&warm, OwnerToken::new(), Duration::from_secs(5))
        .await
    {
        Ok(TryAcquire::Acquired(lease)) => assert!(b.release(&lease).await.expect("releases")),
        other => panic!("warm-up: {other:?}"),
    }

    let lock = name("restart");
    raw_set_px(&urls[2], lock.as_str(), "someone-else", 300).await;
    let a_lease = match a
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(20))
        .await
    {
        Ok(TryAcquire::Acquired(lease)) => lease,
        other => panic!("A acquires on masters 1 and 2: {other:?}"),
    };
    tokio::time::sleep(Duration::from_millis(400)).await; // master 3 is free again

    let mut servers = servers;
    let servers = tokio::task::spawn_blocking(move || {
        servers[1].restart().expect("restarts empty");
        servers
    })
    .await
    .expect("joined");

    let deadline = Instant::now() + Duration::from_secs(2);
    let mut attempts = 0;
    while Instant::now() < deadline {
        attempts += 1;
        let attempt = b
            .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(20))
            .await;
        assert!(
            !matches!(attempt, Ok(TryAcquire::Acquired(_))),
            "attempt {attempts}: B won the lock while A's lease ({:?} left) is valid",
            a_lease.remaining()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        a_lease.remaining().is_some_and(|r| r > Duration::ZERO),
        "A still holds"
    );
    drop(servers);
}

/// A holds master 1 and master 2; master 2 dies. B wins master 3 only: A may still hold a
/// majority (master 2 did not answer), so this is not a split vote: B is told to wait for A's
/// hold, not to retry within milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_vote_counts_masters_that_did_not_answer() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (redlock(&urls).await, redlock(&urls).await);
    let lock = name("split");
    raw_set_px(&urls[2], lock.as_str(), "someone-else", 300).await;
    match a
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(20))
        .await
    {
        Ok(TryAcquire::Acquired(_)) => {}
        other => panic!("A acquires on masters 1 and 2: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut servers = servers;
    let servers = tokio::task::spawn_blocking(move || {
        servers[1].kill().expect("kill -9");
        servers
    })
    .await
    .expect("joined");
    match b
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(20))
        .await
    {
        Ok(TryAcquire::Held(holder)) => assert!(
            holder.remaining.is_some_and(|r| r > Duration::from_secs(5)),
            "told to retry after {:?}, as after a split vote, while A may hold a majority",
            holder.remaining
        ),
        other => panic!("{other:?}"),
    }
    drop(servers);
}

async fn publishes(url: &str) -> u64 {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_publish:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// 16 contenders on one hot lock over 3 masters: each master announces at most one release
/// per acquisition (the holder's); the cleanup of failed attempts announces nothing. Prints
/// the throughput.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_announce_nothing() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = redlock(&urls).await;
    let contenders: Vec<LockClient> = (0..16).map(|_| LockClient::new(redlock.clone())).collect();
    let lock = name("hot");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait_for(Duration::from_secs(60));
    let mut before = Vec::new();
    for url in &urls {
        before.push(publishes(url).await);
    }
    let total = 400;
    let took = distlock_conformance::bench::hot_lock(&contenders, &lock, &opts, total).await;
    let mut extra = Vec::new();
    for (url, before) in urls.iter().zip(before) {
        let published = publishes(url).await - before;
        if published > total {
            extra.push(format!(
                "{url}: {published} announcements for {total} acquisitions"
            ));
        }
    }
    println!(
        "Redlock hot lock, 16 contenders, 3 masters: {:.0} acquisitions/s ({total} in {took:?})",
        total as f64 / took.as_secs_f64()
    );
    assert!(extra.is_empty(), "failed attempts announced releases: {extra:?}");
}
