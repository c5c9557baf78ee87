//! Releases heard through sharded pub/sub on each lock's master: a silent subscription
//! connection replaced, an unreachable master leaving the others watched, subscriptions that
//! follow a moved slot and survive a killed master.

use super::*;

/// The network forgets the connections open from a client to every master (a firewall or NAT
/// that lost its table): its sharded subscriptions fall silent without breaking, and a release
/// announced then never reaches them. The subscriber's keepalive (`PING` to every master)
/// finds them silent, subscribes again on new connections and wakes the watch, long before
/// the 60 s the watch waits here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_subscription_connection_is_replaced_and_its_watches_woken() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let waiter = lock_at(&url).await;
    let holder = LockClient::new(lock_at(&cluster.url()).await);
    let name = name_on(&cluster, 1, "silent");
    let guard = holder.acquire(name.as_str()).await.expect("acquires");
    let mut watch = waiter.watch(&name, Primitive::Mutex).await.expect("subscribes");

    proxies.silence_open();
    let released = Instant::now();
    assert!(guard.release().await.expect("releases"));
    let woke = watch.wait(Duration::from_secs(60)).await;
    let took = released.elapsed();
    println!("watch woken past silent cluster connections after {took:?}: {woke:?}");
    assert_eq!(woke, Woke::Released, "after {took:?}");
    assert!(
        took < Duration::from_secs(20),
        "the silent subscription connections were not replaced in time: {took:?}"
    );
}

/// One master unreachable (its proxy black-holed) while the watched lock lives on another:
/// the subscriber's keepalive must not take the whole subscription connection for broken
/// (its `PING` to every master fails on the unreachable one): watches must neither be woken
/// at each keepalive though nothing was released, nor miss the release that follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_master_without_subscriptions_leaves_the_others_watched() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let waiter = lock_at(&url).await;
    let holder = LockClient::new(lock_at(&cluster.url()).await);
    let name = name_on(&cluster, 1, "kept-watched");
    let guard = holder.acquire(name.as_str()).await.expect("acquires");
    let mut watch = waiter.watch(&name, Primitive::Mutex).await.expect("subscribes");
    // Queued, so that the release wakes this waiter (a release wakes the first queued one).
    let id = watch.waiter().cloned().expect("a waiter's watch");
    let attempt = waiter
        .attempt(
            &Attempt::mutex(name.clone(), OwnerToken::new(), Duration::from_secs(30))
                .waiting(&id, Duration::from_secs(60)),
        )
        .await
        .expect("answers");
    assert!(matches!(attempt, TryAcquire::Held(_)), "{attempt:?}");

    proxies.0[2].blackhole();
    // Past a keepalive (5 s without a round, then the operation timeout).
    let quiet = watch.wait(Duration::from_secs(9)).await;
    let released = Instant::now();
    assert!(guard.release().await.expect("releases"));
    let woke = watch.wait(Duration::from_secs(15)).await;
    let took = released.elapsed();
    proxies.0[2].heal();
    println!("with master 2 unreachable, a watch on master 1: {quiet:?} before the release, {woke:?} {took:?} after it");
    assert_eq!(quiet, Woke::TimedOut, "woken though the lock was not released");
    assert_eq!(woke, Woke::Released, "the release was not heard within {took:?}");
    assert!(
        took < Duration::from_secs(3),
        "the release was heard only after {took:?}"
    );
}

/// A release wakes a waiter through `SSUBSCRIBE` on the master of its lock's slot, for locks
/// on every master and for a semaphore, and the subscription lives on that master only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_waiters_through_sharded_pubsub_on_each_master() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let (holder, waiter) = (lock_at(&cluster.url()).await, lock_at(&cluster.url()).await);
    let ttl = Duration::from_secs(10);
    for master in 0..3 {
        let name = name_on(&cluster, master, "wake");
        let TryAcquire::Acquired(lease) = holder
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("acquire")
        else {
            panic!("free lock held");
        };
        let mut watch = waiter.watch(&name, Primitive::Mutex).await.expect("watch");
        let id = watch.waiter().expect("a waiter's watch").clone();
        let queued = waiter
            .attempt(
                &Attempt::mutex(name.clone(), OwnerToken::new(), ttl).waiting(&id, Duration::from_secs(5)),
            )
            .await
            .expect("attempt");
        assert!(matches!(queued, TryAcquire::Held(_)), "held by the holder");
        let channel = waiter.release_channel(&name);
        assert_eq!(
            shard_subscribers(&cluster, master, &channel).await,
            1,
            "subscribed on master {master}"
        );
        for other in (0..3).filter(|&o| o != master) {
            assert_eq!(
                shard_subscribers(&cluster, other, &channel).await,
                0,
                "not on master {other}"
            );
        }
        let started = Instant::now();
        assert!(holder.release(&lease).await.expect("release"));
        assert_eq!(
            watch.wait(Duration::from_secs(2)).await,
            Woke::Released,
            "master {master}"
        );
        eprintln!("master {master}: woken {:?} after the release", started.elapsed());
    }
    let name = name_on(&cluster, 1, "semaphore");
    let kind = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let TryAcquire::Acquired(permit) = holder
        .try_acquire_kind(&name, kind, OwnerToken::new(), ttl, None)
        .await
        .expect("permit")
    else {
        panic!("free permit held");
    };
    let mut watch = waiter.watch(&name, Primitive::Semaphore).await.expect("watch");
    // A permit's release wakes the first waiter of the semaphore's queue: this one, queued.
    queue_for_permit(&waiter, &name, &watch).await;
    assert!(holder.release(&permit).await.expect("release"));
    assert_eq!(
        watch.wait(Duration::from_secs(2)).await,
        Woke::Released,
        "semaphore"
    );
}

/// Renewals of leases on all three masters come back renewed from one call, also after one
/// lease's slot moved to another master (the cached slot map is stale: its renewal comes back
/// `MOVED` and is sent again alone); a stolen lease reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_many_renews_across_masters_and_a_moved_slot() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let lock = lock_at(&cluster.url()).await;
    let ttl = Duration::from_secs(5);
    let mut leases = Vec::new();
    for i in 0..30 {
        let name = name_on(&cluster, i % 3, &format!("renew{i}"));
        match lock
            .try_acquire(&name, OwnerToken::new(), ttl)
            .await
            .expect("acquire")
        {
            TryAcquire::Acquired(lease) => leases.push(lease),
            TryAcquire::Held(_) => panic!("free lock held"),
        }
    }
    let renewed = lock.renew(&leases).await;
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");

    let moved = leases[0].name().clone();
    migrate_slot(&cluster, slot(&cluster, &moved), 0, 1).await;
    let started = Instant::now();
    let renewed = lock.renew(&leases).await;
    eprintln!(
        "30 renewals over 3 masters, one slot moved: {:?}",
        started.elapsed()
    );
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");

    support::raw_del(&cluster.nodes()[1].url(), moved.as_str().as_bytes())
        .await
        .expect("steal on its new master");
    let renewed = lock.renew(&leases).await;
    assert!(matches!(renewed[0], Ok(None)), "stolen: {:?}", renewed[0]);
    assert!(
        renewed[1..].iter().all(|r| matches!(r, Ok(Some(_)))),
        "{renewed:?}"
    );

    for _ in 0..10 {
        let started = Instant::now();
        lock.renew(&leases).await;
        eprintln!("extend_many of 30 leases on 3 masters: {:?}", started.elapsed());
    }
    for _ in 0..3 {
        let started = Instant::now();
        lock.extend(&leases[1], ttl).await.expect("extend");
        eprintln!("one extend: {:?}", started.elapsed());
    }
}
