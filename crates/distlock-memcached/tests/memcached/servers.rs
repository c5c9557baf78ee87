//! The servers misbehaving: a paused (SIGSTOPped) server never makes an operation hang, and
//! with several servers each name lives on exactly one of them.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, LockClient, LockName, LossReason, OwnerToken,
    TryAcquire,
};
use distlock_memcached::MemcachedConfig;
use distlock_testkit::{MemcachedOptions, MemcachedServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_gives_unavailable_within_the_operation_timeout() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let lock = support::lock(&server.url()); // operation timeout 1 s
    let client = LockClient::new(lock.clone());
    let ttl = Duration::from_secs(2);
    let guard = client
        .acquire_with("paused", &AcquireOptions::new().ttl(ttl))
        .await
        .expect("acquired");
    let lease = guard.lease();

    let mut server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.pause().expect("SIGSTOP");
        server
    })
    .await
    .expect("joined");

    // Pooled connections and new ones (the kernel still accepts them) both time out.
    let started = Instant::now();
    let name = LockName::new("paused-other").expect("valid");
    let attempt = lock.try_acquire(&name, OwnerToken::new(), ttl).await;
    assert!(matches!(attempt, Err(Error::Unavailable { .. })), "{attempt:?}");
    let release = lock.release(&lease).await;
    assert!(matches!(release, Err(Error::Unavailable { .. })), "{release:?}");
    let ping = lock.ping().await;
    assert!(matches!(ping, Err(Error::Unavailable { .. })), "{ping:?}");
    let elapsed = started.elapsed();
    println!("three operations against a paused server failed after {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // The guard cannot renew: its lost-lock signal fires at its deadline.
    let reason = tokio::time::timeout(ttl + Duration::from_secs(3), guard.lost())
        .await
        .expect("the lost signal fires");
    assert!(matches!(reason, LossReason::RenewalFailed(_)), "{reason:?}");

    server = tokio::task::spawn_blocking(move || {
        server.resume().expect("SIGCONT");
        server
    })
    .await
    .expect("joined");
    // The stale connections are gone; the server works again (the held item may still be
    // there until its TTL, so use another name).
    let again = client
        .try_acquire("paused-after")
        .await
        .expect("works")
        .expect("free");
    assert!(again.release().await.expect("works"));
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_lives_on_exactly_one_server() {
    let servers = tokio::task::spawn_blocking(|| {
        (0..3)
            .map(|_| MemcachedServer::start().expect("memcached starts"))
            .collect::<Vec<_>>()
    })
    .await
    .expect("joined");
    let hosts: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    let url = format!("memcache://{}", hosts.join(","));
    let lock = MemcachedConfig::from_url(&url)
        .expect("valid")
        .with_operation_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");
    // Another client listing the servers in another order agrees on every name.
    let mut reversed = hosts.clone();
    reversed.reverse();
    let other = MemcachedConfig::new(&reversed)
        .expect("valid")
        .with_operation_timeout(Duration::from_secs(1))
        .build()
        .expect("valid");

    let names: Vec<LockName> = (0..60)
        .map(|i| LockName::new(format!("spread-{i}")).expect("valid"))
        .collect();
    let mut leases = Vec::new();
    let mut per_server = vec![0usize; hosts.len()];
    for name in &names {
        let TryAcquire::Acquired(lease) = lock
            .try_acquire(name, OwnerToken::new(), Duration::from_secs(30))
            .await
            .expect("works")
        else {
            panic!("{name:?} is free");
        };
        let home = lock.server_of(name);
        assert_eq!(home, other.server_of(name), "clients disagree on {name:?}");
        let at = hosts.iter().position(|h| h == home).expect("a configured server");
        per_server[at] += 1;
        // The item is on its server and nowhere else.
        for host in &hosts {
            let reply = support::raw(host, &format!("mg {} v\r\n", lock.lock_key(name)))
                .await
                .expect("raw get");
            assert_eq!(
                reply.starts_with("VA"),
                host == home,
                "{name:?} on {host}: {reply}"
            );
        }
        assert!(matches!(
            other
                .try_acquire(name, OwnerToken::new(), Duration::from_secs(30))
                .await,
            Ok(TryAcquire::Held(_))
        ));
        leases.push(lease);
    }
    println!("names per server: {per_server:?}");
    assert!(per_server.iter().all(|n| *n > 5), "{per_server:?}");

    // Losing one server loses only its locks: the others still extend and release.
    let mut servers = servers;
    let dead = hosts[0].clone();
    let mut first = servers.remove(0);
    tokio::task::spawn_blocking(move || first.kill().expect("kill -9"))
        .await
        .expect("joined");
    for lease in leases {
        let outcome = lock.extend(&lease, Duration::from_secs(30)).await;
        if lock.server_of(lease.name()) == dead {
            assert!(matches!(outcome, Err(Error::Unavailable { .. })), "{outcome:?}");
        } else {
            let renewed = outcome.expect("works").expect("still ours");
            assert!(lock.release(&renewed).await.expect("works"));
        }
    }
    drop(servers);
}
