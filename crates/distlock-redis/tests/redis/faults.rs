//! Network faults on one Redis server: a killed pub/sub connection, one gone silent, a
//! black-holed command connection, and the owner-checked cleanup of an acquisition whose
//! reply was lost.

use crate::support;
use crate::support::name;

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Lease, LockClient, LockName, OwnerToken, Primitive,
    Woke,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::FaultProxy;

async fn connect(url: &str, timeout: Duration) -> RedisLock {
    RedisConfig::from_url(url)
        .expect("valid")
        .with_operation_timeout(timeout)
        .with_connect_timeout(timeout)
        .build()
        .await
        .expect("connects")
}

async fn info_stat(url: &str, field: &str) -> u64 {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .expect("the field is there")
}

/// Waiters keep waiting by notification after their pub/sub connection is killed
/// (`CLIENT KILL TYPE pubsub`, as an idle timeout in a load balancer does): the next release
/// wakes them in about the normal handoff time, not at the safety-net poll (about 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_resubscribed_after_the_pubsub_connection_is_killed() {
    let server = support::start_server().await;
    let url = server.url();
    let holder = LockClient::new(connect(&url, Duration::from_secs(1)).await);
    let waiters = LockClient::new(connect(&url, Duration::from_secs(1)).await);
    let lock = name("killed-pubsub");
    let guard = holder.acquire(lock.as_str()).await.expect("acquires");

    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait_for(Duration::from_secs(20));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let waiters = waiters.clone();
        let lock = lock.clone();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .acquire_with(lock.as_str(), &opts)
                .await
                .expect("acquires in the end");
            let at = Instant::now();
            guard.release().await.expect("releases");
            at
        }));
    }
    // Let them subscribe and start waiting (a waiter polls after its first wait only at the
    // safety net, 2 s), then cut their notifications.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut raw = support::raw(&url).await.expect("raw");
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .expect("CLIENT KILL");
    assert_eq!(killed, 1, "one pub/sub connection for all waiters");
    tokio::time::sleep(Duration::from_millis(300)).await;

    let released = Instant::now();
    guard.release().await.expect("releases");
    let mut handoffs = Vec::new();
    for task in tasks {
        let acquired = task.await.expect("joined");
        handoffs.push(acquired.saturating_duration_since(released));
    }
    handoffs.sort();
    println!("acquired after the release: {handoffs:?}");
    // Each of the three waiters in turn: by notification each handoff takes milliseconds;
    // falling back to the poll makes the first alone take up to 2 s.
    assert!(
        handoffs[2] < Duration::from_millis(700),
        "waiters were not woken by notification after the pub/sub connection was killed: {handoffs:?}"
    );
}

/// The network forgets the waiter's connections (a firewall or NAT that lost its table): the
/// pub/sub connection falls silent without breaking, and a release published then never
/// reaches it. The subscriber's keepalive finds the connection silent, subscribes again on a
/// new one and wakes the watch (a release may have been missed), long before the 60 s the
/// watch waits here. (The waiter's next attempt, on its own silent command connection, would
/// fail by its timeout: that is the command connection's fault, tested below.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_pubsub_connection_is_replaced_and_its_watches_woken() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("the proxy starts");
    let holder = LockClient::new(connect(&server.url(), Duration::from_secs(2)).await);
    let waiter = connect(&format!("redis://{}", proxy.host_port()), Duration::from_secs(2)).await;
    let lock = name("silent-pubsub");
    let guard = holder.acquire(lock.as_str()).await.expect("acquires");
    let mut watch = waiter.watch(&lock, Primitive::Mutex).await.expect("subscribes");

    proxy.silence_open();
    let released = Instant::now();
    guard.release().await.expect("releases");
    let woke = watch.wait(Duration::from_secs(60)).await;
    let took = released.elapsed();
    println!("watch woken past a silent pub/sub connection after {took:?}: {woke:?}");
    assert_eq!(woke, Woke::Released, "after {took:?}");
    assert!(
        took < Duration::from_secs(20),
        "the silent pub/sub connection was not replaced in time: {took:?}"
    );
}

/// A command connection whose request timed out is replaced: a server behind a silent
/// partition (a black hole: no RST, no FIN) must not keep the client on a dead connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_request_timed_out_is_replaced() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = connect(&format!("redis://{}", proxy.addr()), Duration::from_millis(300)).await;
    lock.ping().await.expect("answers");
    let before = info_stat(&server.url(), "total_connections_received").await;

    proxy.blackhole();
    let started = Instant::now();
    assert!(lock.ping().await.is_err(), "a black-holed server does not answer");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "bounded by the timeout"
    );
    proxy.heal();

    lock.ping().await.expect("answers after heal");
    let after = info_stat(&server.url(), "total_connections_received").await;
    // `after` counts our raw INFO connections too: one per call.
    assert!(
        after > before + 1,
        "the timed-out connection was kept: {before} connections before, {after} after"
    );
}

/// The cleanup after an ambiguous acquisition sends a lease with no handle and no fencing
/// token; `release` must free the lock by the owner token alone, and only for that owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_works_on_a_bare_lease_and_only_for_its_owner() {
    let server = support::start_server().await;
    let lock = connect(&server.url(), Duration::from_secs(1)).await;
    let name = name("bare");
    let owner = OwnerToken::new();
    let ttl = Duration::from_secs(30);
    let acquired = lock.try_acquire(&name, owner, ttl).await.expect("works");
    assert!(matches!(acquired, distlock_core::TryAcquire::Acquired(_)));
    let stranger = Lease::new(name.clone(), OwnerToken::new(), ttl, tokio::time::Instant::now());
    assert!(!lock.release(&stranger).await.expect("works"), "not the owner");
    let bare = Lease::new(name.clone(), owner, ttl, tokio::time::Instant::now());
    assert!(
        lock.release(&bare).await.expect("works"),
        "freed by the owner token"
    );
    assert!(!lock.inspect_lock(&name).await.expect("works").is_held());
}

/// A reply lost on the shared connection (the server ran the request; its reply never came)
/// must never be taken for the reply to another request. On one multiplexed connection
/// replies are matched to requests in order: with one missing, each later request would get
/// the reply of the one after it, and a renewal of a lock held by someone else could read the
/// "renewed" of another renewal. Here: a release's reply is dropped; then a renewal of a
/// lease that is not ours (the server says 0) is followed by one of a lease that is (1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_never_taken_for_another_requests_reply() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let url = format!("redis://{}", proxy.host_port());
    let lock = std::sync::Arc::new(connect(&url, Duration::from_secs(2)).await);
    let other = connect(&server.url(), Duration::from_secs(2)).await;
    let ttl = Duration::from_secs(30);
    let take = |lock: &RedisLock, name: LockName| {
        let lock = lock.clone();
        async move {
            match lock
                .try_acquire(&name, OwnerToken::new(), ttl)
                .await
                .expect("answered")
            {
                distlock_core::TryAcquire::Acquired(lease) => lease,
                held => panic!("held: {held:?}"),
            }
        }
    };
    let ours_a = take(&lock, name("lost-reply-a")).await;
    let theirs = take(&other, name("lost-reply-b")).await;
    let not_ours = Lease::new(
        theirs.name().clone(),
        OwnerToken::new(),
        ttl,
        tokio::time::Instant::now(),
    );
    let ours_c = take(&lock, name("lost-reply-c")).await;

    proxy.drop_replies();
    let releasing = {
        let (lock, lease) = (lock.clone(), ours_a.clone());
        tokio::spawn(async move { lock.release(&lease).await })
    };
    // The release runs on the server; its reply is dropped on the way back.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    let (stranger, ours) = tokio::join!(lock.extend(&not_ours, ttl), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        lock.extend(&ours_c, ttl).await
    });
    let released = releasing.await.expect("the release task");
    println!("release: {released:?}; renewal of a lock not ours: {stranger:?}; of ours: {ours:?}");
    assert!(
        !matches!(stranger, Ok(Some(_))),
        "a renewal of someone else's lock reported success (another request's reply)"
    );
    assert!(
        !matches!(released, Ok(false)),
        "a release that was applied reported 'not owned' (another request's reply)"
    );
    assert!(
        !matches!(ours, Ok(None)),
        "a renewal of our own lock reported 'not owned' (another request's reply)"
    );
}

/// A release that ran on the server but whose connection broke before the reply came is sent
/// once more on a fresh connection; that second run finds the key gone (the first run deleted
/// it). Work that finished under the lock must not be reported lost for it: `with_lock`
/// returns the work's output, not `LockLost`, and the lock is free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_that_finds_the_lock_gone_is_not_a_lost_lock() {
    let server = support::start_server().await;
    let proxy = std::sync::Arc::new(FaultProxy::start(server.addr()).expect("proxy"));
    let url = format!("redis://{}", proxy.host_port());
    let client = LockClient::new(connect(&url, Duration::from_secs(2)).await);
    let observer = connect(&server.url(), Duration::from_secs(2)).await;
    let lock = name("release-sent-again");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    // The server learns the release script first: a NOSCRIPT whose reply is dropped would
    // leave the first send without effect.
    client
        .with_lock(name("warm-up").as_str(), &opts, |_| async {})
        .await
        .expect("a release on a healthy connection");
    let outcome = client
        .with_lock(lock.as_str(), &opts, |_| {
            let proxy = proxy.clone();
            async move {
                // The release that follows runs on the server; its reply is dropped, then the
                // connection breaks (RST), so the client sends it once more.
                proxy.drop_replies();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    proxy.heal();
                    proxy.reset();
                });
                "done"
            }
        })
        .await;
    println!("with_lock: {outcome:?}");
    assert!(
        matches!(outcome, Ok("done")),
        "work that finished under the lock was reported as {outcome:?}"
    );
    let state = observer.inspect_lock(&lock).await.expect("inspects");
    assert!(!state.is_held(), "the lock is left held: {state:?}");
}
