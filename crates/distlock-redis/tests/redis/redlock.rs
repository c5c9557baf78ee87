//! Redlock with masters killed: a minority down changes nothing, a majority down is a clean
//! error (no hang, no false success), and service resumes when they come back.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{
    Attempt, DistributedLock, DistributedLockExt, Error, Fencing, LockName, OwnerToken, Primitive, TryAcquire,
};
use distlock_redis::{Redlock, RedlockConfig};
use distlock_testkit::RedisServer;

fn name(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("rl-{}-{label}", &run[..12])).expect("valid")
}

async fn redlock(servers: &[RedisServer]) -> Redlock {
    RedlockConfig::new(servers.iter().map(RedisServer::url))
        .expect("valid")
        .with_node_timeout(Duration::from_millis(100))
        .with_connect_timeout(Duration::from_millis(200))
        // These cases restart masters on purpose and check availability afterwards; the
        // restart quarantine is covered by tests/redis/redlock_faults.rs.
        .with_restart_quarantine(Duration::ZERO)
        .build()
        .await
        .expect("builds")
}

async fn kill(servers: Vec<RedisServer>, count: usize) -> Vec<RedisServer> {
    tokio::task::spawn_blocking(move || {
        let mut servers = servers;
        for server in servers.iter_mut().take(count) {
            server.kill().expect("kill -9");
        }
        servers
    })
    .await
    .expect("joined")
}

async fn restart_all(servers: Vec<RedisServer>) -> Vec<RedisServer> {
    tokio::task::spawn_blocking(move || {
        let mut servers = servers;
        for server in servers.iter_mut().filter(|s| !s.is_running()) {
            server.restart().expect("restart");
        }
        servers
    })
    .await
    .expect("joined")
}

/// Acquire, extend, release, and exclusion, all while `down` masters of `n` are dead.
async fn works_with_minority_down(n: usize) {
    let down = n / 2;
    let servers = kill(support::start_servers(n).await, down).await;
    let (a, b) = (redlock(&servers).await, redlock(&servers).await);
    let lock = name(&format!("minority-{n}"));
    let lease = match a
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(10))
        .await
        .expect("a majority is up")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("free lock reported held: {h:?}"),
    };
    assert!(
        lease.fencing_token().is_none(),
        "Redlock issues no fencing tokens"
    );
    assert!(
        matches!(
            b.try_acquire(&lock, OwnerToken::new(), Duration::from_secs(10))
                .await,
            Ok(TryAcquire::Held(_))
        ),
        "held for others"
    );
    assert!(a
        .extend(&lease, Duration::from_secs(10))
        .await
        .expect("works")
        .is_some());
    let renewed = a.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(Some(_))]), "{renewed:?}");
    assert!(a.inspect_lock(&lock).await.expect("works").is_held());
    a.ping().await.expect("a majority answers");
    let mut watch = b
        .watch(&lock, Primitive::Mutex)
        .await
        .expect("subscribes on the live masters");
    assert!(watch.is_notified());
    let waiter = watch.waiter().expect("a waiter's watch").clone();
    assert!(
        matches!(
            b.attempt(
                &Attempt::mutex(lock.clone(), OwnerToken::new(), Duration::from_secs(10))
                    .waiting(&waiter, Duration::from_secs(10))
            )
            .await,
            Ok(TryAcquire::Held(_))
        ),
        "held, so the waiter is queued on the live masters"
    );
    assert!(a.release(&lease).await.expect("works"));
    assert_eq!(
        watch.wait(Duration::from_secs(5)).await,
        distlock_core::Woke::Released,
        "the release is heard"
    );
    assert!(matches!(
        b.try_acquire(&lock, OwnerToken::new(), Duration::from_secs(10))
            .await,
        Ok(TryAcquire::Acquired(_))
    ));
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_work_with_one_killed() {
    works_with_minority_down(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_masters_work_with_two_killed() {
    works_with_minority_down(5).await;
}

/// With a majority dead, every operation errors within the node timeouts: no hang, no false
/// success. Once they are back, it works again.
async fn fails_cleanly_with_majority_down(n: usize) {
    let servers = support::start_servers(n).await;
    let rl = redlock(&servers).await;
    assert_eq!(rl.capabilities().fencing, Fencing::None);
    let held = name(&format!("held-{n}"));
    let lease = match rl
        .try_acquire(&held, OwnerToken::new(), Duration::from_secs(10))
        .await
        .expect("all up")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(_) => panic!("free lock held"),
    };
    let servers = kill(servers, n / 2 + 1).await;

    let started = Instant::now();
    for round in 0..5 {
        let outcome = rl
            .try_acquire(&name("free"), OwnerToken::new(), Duration::from_secs(10))
            .await;
        assert!(
            matches!(outcome, Err(Error::Unavailable { .. })),
            "round {round}: {outcome:?}"
        );
    }
    let release = rl.release(&lease).await;
    assert!(matches!(release, Err(Error::Unavailable { .. })), "{release:?}");
    let extend = rl.extend(&lease, Duration::from_secs(10)).await;
    assert!(matches!(extend, Err(Error::Unavailable { .. })), "{extend:?}");
    assert!(rl.ping().await.is_err());
    let elapsed = started.elapsed();
    println!("{n} masters, majority down: 8 failed calls in {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    let servers = restart_all(servers).await;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(TryAcquire::Acquired(_)) = rl
                .try_acquire(&name("after"), OwnerToken::new(), Duration::from_secs(10))
                .await
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("works again once the masters are back");
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_fail_cleanly_with_two_killed() {
    fails_cleanly_with_majority_down(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_masters_fail_cleanly_with_three_killed() {
    fails_cleanly_with_majority_down(5).await;
}

/// A lock held on only a minority (another client got in first on the others) is not ours:
/// the failed attempt gives back what it took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_grant_is_given_back() {
    let servers = support::start_servers(3).await;
    let rl = redlock(&servers).await;
    let lock = name("split");
    // Another client holds it on two of three masters.
    for server in &servers[..2] {
        let mut raw = support::raw(&server.url()).await.expect("raw");
        let _: Option<String> = redis::cmd("SET")
            .arg(lock.as_str())
            .arg("other")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut raw)
            .await
            .expect("SET");
    }
    match rl
        .try_acquire(&lock, OwnerToken::new(), Duration::from_secs(10))
        .await
        .expect("works")
    {
        TryAcquire::Held(holder) => assert!(holder.remaining.is_some(), "{holder:?}"),
        TryAcquire::Acquired(_) => panic!("a minority is not a lock"),
    }
    let mut raw = support::raw(&servers[2].url()).await.expect("raw");
    let left: Option<String> = redis::cmd("GET")
        .arg(lock.as_str())
        .query_async(&mut raw)
        .await
        .expect("GET");
    assert_eq!(left, None, "the third master's grant was released");
}

/// Scripts master `url` has run so far (`EVALSHA` and `EVAL` calls, `INFO commandstats`).
async fn scripts_run(url: &str) -> u64 {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split([':', ','])
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// An attempt that every master refuses (the lock is held by someone else) granted nothing
/// anywhere: it costs one script per master, not a second round to release what it never got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_refused_by_every_master_runs_no_cleanup_round() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let (a, b) = (support::redlock_at(&urls).await, support::redlock_at(&urls).await);
    let lock = name("refused-everywhere");
    let ttl = Duration::from_secs(30);
    let held = a.try_acquire(&lock, OwnerToken::new(), ttl).await.expect("works");
    assert!(matches!(held, TryAcquire::Acquired(_)), "{held:?}");
    // The scripts are known to every master, so no EVAL fallback is counted below.
    let warm = b.try_acquire(&lock, OwnerToken::new(), ttl).await.expect("works");
    assert!(matches!(warm, TryAcquire::Held(_)), "{warm:?}");

    let mut before = Vec::new();
    for url in &urls {
        before.push(scripts_run(url).await);
    }
    let refused = b.try_acquire(&lock, OwnerToken::new(), ttl).await.expect("works");
    assert!(matches!(refused, TryAcquire::Held(_)), "{refused:?}");
    let mut ran = Vec::new();
    for (url, before) in urls.iter().zip(before) {
        ran.push(scripts_run(url).await - before);
    }
    println!("scripts per master for an attempt refused everywhere: {ran:?}");
    assert!(ran.iter().all(|&n| n == 1), "scripts per master: {ran:?}");
}

/// `INFO` calls master `url` has answered so far (`INFO commandstats`, which counts itself
/// once the reading is done).
async fn info_calls(url: &str) -> u64 {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_info:"))
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// A master's run id (the restart check) is read once per connection, not by every
/// acquisition: twenty acquisitions on warm connections cost no `INFO` call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_on_a_warm_connection_read_no_server_info() {
    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = support::redlock_at(&urls).await;
    let lock = name("no-info");
    let ttl = Duration::from_secs(10);
    let warm = redlock
        .try_acquire(&lock, OwnerToken::new(), ttl)
        .await
        .expect("works");
    let TryAcquire::Acquired(lease) = warm else {
        panic!("warm-up: {warm:?}")
    };
    assert!(redlock.release(&lease).await.expect("releases"));

    let mut before = Vec::new();
    for url in &urls {
        before.push(info_calls(url).await);
    }
    let started = Instant::now();
    for _ in 0..20 {
        let attempt = redlock
            .try_acquire(&lock, OwnerToken::new(), ttl)
            .await
            .expect("works");
        let TryAcquire::Acquired(lease) = attempt else {
            panic!("{attempt:?}")
        };
        assert!(redlock.release(&lease).await.expect("releases"));
    }
    println!("20 acquisitions and releases in {:?}", started.elapsed());
    let mut calls = Vec::new();
    for (url, before) in urls.iter().zip(before) {
        // One of them is the reading of `before` itself.
        calls.push(info_calls(url).await - before - 1);
    }
    println!("INFO calls per master for 20 acquisitions: {calls:?}");
    assert!(calls.iter().all(|&n| n == 0), "INFO calls per master: {calls:?}");
}
