//! A Redis Cluster of three real masters under what a cluster does to a lock: releases heard
//! through sharded pub/sub on each lock's master (also after its connections went silent),
//! batched renewals across masters and across
//! a moved slot, a slot migrating while clients contend for a lock in it, a master killed
//! while they contend, and (with a replica per master) failovers: a lock the replica never got
//! is lost on its promotion, one it got is kept. Concurrent holders are counted exactly (a shared counter each holder
//! increments on entry and decrements before its release); holds are far shorter than their
//! TTL, so a count above one is a double grant, never an expiry.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Error, LockClient, LockKind, LockName,
    OwnerToken, Primitive, ReleaseWatch, TryAcquire, Woke,
};
use distlock_redis::RedisLock;
use distlock_testkit::{RedisCluster, RedisClusterOptions};
use support::{lock_at, start_cluster, OPERATION_TIMEOUT};

fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// The hash slot of a lock name without prefix (its key is the name).
fn slot(cluster: &RedisCluster, name: &LockName) -> u16 {
    cluster
        .command(0, &["CLUSTER", "KEYSLOT", name.as_str()])
        .expect("CLUSTER KEYSLOT")
        .parse()
        .expect("a slot number")
}

/// A fresh lock name whose slot master `master` serves.
fn name_on(cluster: &RedisCluster, master: usize, label: &str) -> LockName {
    let run = run_id();
    (0..)
        .map(|i| LockName::new(format!("t-{run}-{label}-{i}")).expect("valid"))
        .find(|name| cluster.node_of_slot(slot(cluster, name)) == Some(master))
        .expect("some name hashes to every master")
}

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

/// A raw connection to master `i`.
async fn raw_node(cluster: &RedisCluster, i: usize) -> redis::aio::MultiplexedConnection {
    support::raw(&cluster.nodes()[i].url())
        .await
        .expect("raw connection")
}

async fn shard_subscribers(cluster: &RedisCluster, master: usize, channel: &[u8]) -> u64 {
    let mut raw = raw_node(cluster, master).await;
    let (_, n): (Vec<u8>, u64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query_async(&mut raw)
        .await
        .expect("PUBSUB SHARDNUMSUB");
    n
}

/// Queues `watch`'s waiter for a permit of the one-permit semaphore `name`, which is held: a
/// permit's release wakes the first waiter of the semaphore's queue alone.
async fn queue_for_permit(waiter: &RedisLock, name: &LockName, watch: &ReleaseWatch) {
    let id = watch.waiter().expect("a semaphore waiter's watch names it");
    let attempt = waiter
        .try_acquire_kind(
            name,
            LockKind::Permit {
                permits: 1,
                weight: 1,
            },
            OwnerToken::new(),
            Duration::from_secs(10),
            Some((&**id, Duration::from_secs(30))),
        )
        .await
        .expect("attempt");
    assert!(matches!(attempt, TryAcquire::Held(_)), "the permit is held");
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

/// The ids of the masters, in node order.
async fn node_ids(cluster: &RedisCluster) -> Vec<String> {
    (0..cluster.nodes().len())
        .map(|i| cluster.command(i, &["CLUSTER", "MYID"]).expect("CLUSTER MYID"))
        .collect()
}

/// Moves `slot` from master `from` to master `to` as `redis-cli --cluster reshard` does:
/// `SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its keys in
/// batches (all of a lock's keys share the slot, but a batch may split them), then `SETSLOT
/// NODE` on every master.
async fn migrate_slot(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
    let ids = node_ids(cluster).await;
    let (mut source, mut target) = (raw_node(cluster, from).await, raw_node(cluster, to).await);
    let setslot = |state: &str, id: &str| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    let () = setslot("IMPORTING", &ids[from])
        .query_async(&mut target)
        .await
        .expect("IMPORTING");
    let () = setslot("MIGRATING", &ids[to])
        .query_async(&mut source)
        .await
        .expect("MIGRATING");
    loop {
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(2)
            .query_async(&mut source)
            .await
            .expect("GETKEYSINSLOT");
        if keys.is_empty() {
            break;
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(cluster.nodes()[to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLACE")
            .arg("KEYS")
            .arg(keys);
        let () = migrate.query_async(&mut source).await.expect("MIGRATE");
        // Let requests arrive between batches, as a real reshard does.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in [to, from]
        .into_iter()
        .chain((0..cluster.nodes().len()).filter(|&i| i != from && i != to))
    {
        let mut conn = raw_node(cluster, i).await;
        let () = setslot("NODE", &ids[to])
            .query_async(&mut conn)
            .await
            .expect("SETSLOT NODE");
    }
}

/// Outcomes of contending clients.
#[derive(Default)]
struct Tally {
    inside: AtomicUsize,
    overlaps: AtomicU64,
    grants: AtomicU64,
    errors: AtomicU64,
    slowest_ms: AtomicU64,
}

/// `clients` clients of `url` take `name` in turn until `stop`: each hold is counted in
/// `tally` (entered, slept 2 ms, left, released). Every call must return a value or a typed
/// error, within the wait plus the operation timeout and a margin.
fn contend(
    url: String,
    name: LockName,
    clients: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let wait = Duration::from_millis(500);
    (0..clients)
        .map(|_| {
            let (url, name, tally, stop) = (url.clone(), name.clone(), tally.clone(), stop.clone());
            tokio::spawn(async move {
                let client = LockClient::new(lock_at(&url).await);
                let opts = AcquireOptions::new()
                    .ttl(Duration::from_secs(3))
                    .wait_for(wait)
                    .poll_interval(Duration::from_millis(5), Duration::from_millis(50));
                while !stop.load(Ordering::SeqCst) {
                    let started = Instant::now();
                    let outcome = client.acquire_with(&name, &opts).await;
                    let took = started.elapsed();
                    tally.slowest_ms.fetch_max(
                        u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                        Ordering::SeqCst,
                    );
                    assert!(
                        took < wait + OPERATION_TIMEOUT * 3,
                        "an acquire took {took:?} (wait {wait:?}, operation timeout {OPERATION_TIMEOUT:?})"
                    );
                    match outcome {
                        Ok(guard) => {
                            if tally.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                                tally.overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            tally.grants.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            tally.inside.fetch_sub(1, Ordering::SeqCst);
                            if guard.release().await.is_err() {
                                tally.errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(Error::Timeout { .. } | Error::Unavailable { .. }) => {
                            tally.errors.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(other) => panic!("an unexpected error kind: {other:?}"),
                    }
                }
            })
        })
        .collect()
}

async fn finish(workers: Vec<tokio::task::JoinHandle<()>>) {
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("a worker hung")
            .expect("a worker panicked");
    }
}

/// A held lock's slot migrates back and forth between two masters, six times, while four
/// clients contend for it (and for a lock in a slot that stays): every acquire returns in
/// bounded time with a grant or a typed error, never two holders at once, and the lock keeps
/// being granted through and after the moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_migration_during_contention_never_grants_twice() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let url = cluster.url();
    let moving = name_on(&cluster, 0, "moving");
    let staying = name_on(&cluster, 2, "staying");
    let stop = Arc::new(AtomicBool::new(false));
    let (moving_tally, staying_tally) = (Arc::new(Tally::default()), Arc::new(Tally::default()));
    let mut workers = contend(url.clone(), moving.clone(), 4, moving_tally.clone(), stop.clone());
    workers.extend(contend(
        url.clone(),
        staying,
        2,
        staying_tally.clone(),
        stop.clone(),
    ));
    // A long hold of a lock in the same slot, renewed by its watchdog through the moves.
    let holder = LockClient::new(lock_at(&url).await);
    let kept = LockName::new(format!("{{{}}}-kept", moving.as_str())).expect("valid");
    assert_eq!(slot(&cluster, &kept), slot(&cluster, &moving));
    let kept = holder
        .acquire_with(&kept, &AcquireOptions::new().ttl(Duration::from_millis(1500)))
        .await
        .expect("a lock in the moving slot");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let moved_slot = slot(&cluster, &moving);
    let mut grants_at_moves = Vec::new();
    for round in 0..6 {
        let (from, to) = if round % 2 == 0 { (0, 1) } else { (1, 0) };
        migrate_slot(&cluster, moved_slot, from, to).await;
        assert_eq!(cluster.node_of_slot(moved_slot), Some(to));
        grants_at_moves.push(moving_tally.grants.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    finish(workers).await;
    let kept_lost = kept.is_lost();
    let _ = kept.release().await;
    for (what, tally) in [("moving", &moving_tally), ("staying", &staying_tally)] {
        eprintln!(
            "{what}: {} grants, {} clean errors, slowest acquire {} ms",
            tally.grants.load(Ordering::SeqCst),
            tally.errors.load(Ordering::SeqCst),
            tally.slowest_ms.load(Ordering::SeqCst)
        );
        assert_eq!(
            tally.overlaps.load(Ordering::SeqCst),
            0,
            "{what}: two holders at once"
        );
    }
    eprintln!("grants of the moving lock at each move: {grants_at_moves:?}; the long hold lost: {kept_lost}");
    let final_grants = moving_tally.grants.load(Ordering::SeqCst);
    assert!(final_grants > grants_at_moves[5], "granted after the last move");
    assert!(
        grants_at_moves.windows(2).any(|w| w[1] > w[0]),
        "granted between moves"
    );
    assert!(
        !kept_lost,
        "the watchdog renewed a hold across six moves of its slot"
    );
}

/// A master is killed while clients contend for a lock on each master: the dead master's
/// lock fails with typed errors within the operation timeout (no panic, no hang), the
/// surviving masters' locks are granted on, never twice at once; after a restart the dead
/// master's lock is granted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_master_during_contention_fails_cleanly() {
    let mut cluster = start_cluster(RedisClusterOptions::default()).await;
    let url = cluster.url();
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Tally>> = (0..3).map(|_| Arc::new(Tally::default())).collect();
    let mut workers = Vec::new();
    for (master, tally) in tallies.iter().enumerate() {
        let name = name_on(&cluster, master, "kill");
        workers.extend(contend(url.clone(), name, 3, tally.clone(), stop.clone()));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before: Vec<u64> = tallies.iter().map(|t| t.grants.load(Ordering::SeqCst)).collect();
    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster.node_mut(1).kill().expect("kill -9");
        cluster
    })
    .await
    .expect("joined");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during: Vec<u64> = tallies.iter().map(|t| t.grants.load(Ordering::SeqCst)).collect();
    let errors_during = tallies[1].errors.load(Ordering::SeqCst);
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.node_mut(1).restart().expect("restart");
        cluster.wait_until_ok().expect("ok again");
        cluster
    })
    .await
    .expect("joined");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    finish(workers).await;
    let after: Vec<u64> = tallies.iter().map(|t| t.grants.load(Ordering::SeqCst)).collect();
    eprintln!("grants before the kill {before:?}, 3 s after it {during:?}, at the end {after:?}; errors on the dead master's lock while it was down: {errors_during}");
    for (master, tally) in tallies.iter().enumerate() {
        assert_eq!(
            tally.overlaps.load(Ordering::SeqCst),
            0,
            "master {master}: two holders at once"
        );
        eprintln!(
            "master {master}: slowest acquire {} ms, {} errors",
            tally.slowest_ms.load(Ordering::SeqCst),
            tally.errors.load(Ordering::SeqCst)
        );
    }
    for master in [0, 2] {
        assert!(
            during[master] > before[master],
            "master {master} kept granting while master 1 was down"
        );
    }
    assert!(errors_during > 0, "the dead master's lock failed");
    assert!(
        after[1] > during[1],
        "the restarted master's lock is granted again"
    );
    drop(cluster);
}

/// `count_held` counts lock keys on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_held_scans_every_master() {
    let cluster = start_cluster(RedisClusterOptions::default()).await;
    let lock: RedisLock = lock_at(&cluster.url()).await;
    let prefix = format!("t-{}-", run_id());
    for master in 0..3 {
        for i in 0..2 {
            let name = (0..)
                .map(|j| LockName::new(format!("{prefix}{master}-{i}-{j}")).expect("valid"))
                .find(|n| cluster.node_of_slot(slot(&cluster, n)) == Some(master))
                .expect("a name");
            let got = lock
                .try_acquire(&name, OwnerToken::new(), Duration::from_secs(10))
                .await;
            assert!(matches!(got, Ok(TryAcquire::Acquired(_))));
        }
    }
    assert_eq!(lock.count_held(&prefix).await.expect("count"), 6);
}

/// A waiter's sharded subscription follows its lock's slot to another master (the server
/// unsubscribes it there; it is subscribed again on the new master and the waiter woken once),
/// and survives another master being killed and restarted: releases are still heard by
/// notification alone (the watches here do not poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_follow_a_moved_slot_and_survive_a_killed_master() {
    let mut cluster = start_cluster(RedisClusterOptions::default()).await;
    let (holder, waiter) = (lock_at(&cluster.url()).await, lock_at(&cluster.url()).await);
    let ttl = Duration::from_secs(10);
    let kind = LockKind::Permit {
        permits: 1,
        weight: 1,
    };
    let take = |name: LockName| {
        let holder = holder.clone();
        async move {
            match holder
                .try_acquire_kind(&name, kind, OwnerToken::new(), ttl, None)
                .await
                .expect("permit")
            {
                TryAcquire::Acquired(lease) => lease,
                TryAcquire::Held(_) => panic!("a free permit is held"),
            }
        }
    };

    let moving = name_on(&cluster, 0, "follow");
    let mut watch = waiter.watch(&moving, Primitive::Semaphore).await.expect("watch");
    let channel = holder
        .primitive_channel(&moving, Primitive::Semaphore)
        .expect("a semaphore channel");
    assert_eq!(shard_subscribers(&cluster, 0, &channel).await, 1);
    migrate_slot(&cluster, slot(&cluster, &moving), 0, 1).await;
    assert_eq!(
        watch.wait(Duration::from_secs(5)).await,
        Woke::Released,
        "woken once resubscribed on the slot's new master"
    );
    assert_eq!(
        shard_subscribers(&cluster, 1, &channel).await,
        1,
        "on the new master"
    );
    assert_eq!(
        shard_subscribers(&cluster, 0, &channel).await,
        0,
        "gone from the old one"
    );
    let permit = take(moving.clone()).await;
    queue_for_permit(&waiter, &moving, &watch).await;
    assert!(holder.release(&permit).await.expect("release"));
    assert_eq!(
        watch.wait(Duration::from_secs(2)).await,
        Woke::Released,
        "heard on the new master"
    );

    let staying = name_on(&cluster, 2, "survive");
    let mut staying_watch = waiter.watch(&staying, Primitive::Semaphore).await.expect("watch");
    let mut cluster = tokio::task::spawn_blocking(move || {
        cluster
            .node_mut(0)
            .kill()
            .expect("kill -9 a master without watched slots");
        cluster
    })
    .await
    .expect("joined");
    // The subscription connection lost a master: it reconnects and resubscribes, and wakes
    // the watches once.
    let _ = staying_watch.wait(Duration::from_secs(5)).await;
    let permit = take(staying.clone()).await;
    queue_for_permit(&waiter, &staying, &staying_watch).await;
    assert!(holder.release(&permit).await.expect("release"));
    assert_eq!(
        staying_watch.wait(Duration::from_secs(5)).await,
        Woke::Released,
        "a release on a surviving master is heard while another master is down"
    );
    let cluster = tokio::task::spawn_blocking(move || {
        cluster.node_mut(0).restart().expect("restart");
        cluster.wait_until_ok().expect("ok again");
        cluster
    })
    .await
    .expect("joined");
    let back = name_on(&cluster, 0, "back");
    let mut back_watch = waiter.watch(&back, Primitive::Semaphore).await.expect("watch");
    let permit = take(back.clone()).await;
    queue_for_permit(&waiter, &back, &back_watch).await;
    assert!(holder.release(&permit).await.expect("release"));
    assert_eq!(
        back_watch.wait(Duration::from_secs(5)).await,
        Woke::Released,
        "heard on the restarted master"
    );
}

/// The TTL of the failover tests: long enough to outlast a failover (the node timeout of 2 s,
/// then the replica's election), so the lock is still ours when the replica takes over.
const FAILOVER_TTL: Duration = Duration::from_secs(30);

/// A cluster of three masters with a replica each.
async fn start_cluster_with_replicas() -> RedisCluster {
    start_cluster(RedisClusterOptions {
        replicas_per_master: 1,
        ..RedisClusterOptions::default()
    })
    .await
}

/// Runs `f` on the cluster off the runtime's workers (its calls block).
async fn on_cluster<T: Send + 'static>(
    cluster: RedisCluster,
    f: impl FnOnce(&mut RedisCluster) -> T + Send + 'static,
) -> (RedisCluster, T) {
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        let out = f(&mut cluster);
        (cluster, out)
    })
    .await
    .expect("joined")
}

/// Keys of `slot` on node `i` (`CLUSTER COUNTKEYSINSLOT`, which replicas answer too).
fn keys_in_slot(cluster: &RedisCluster, i: usize, slot: u16) -> u64 {
    cluster
        .command(i, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()])
        .expect("CLUSTER COUNTKEYSINSLOT")
        .parse()
        .expect("a count")
}

/// `try_acquire` until the store answers (the client finds the promoted master through its
/// refreshed slot map; until then, typed errors), at most 20 s.
async fn try_acquire_once_answered(client: &LockClient, name: &LockName) -> Option<distlock_core::LockGuard> {
    let opts = AcquireOptions::new().ttl(FAILOVER_TTL);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.try_acquire_with(name, &opts).await {
            Ok(outcome) => return outcome,
            Err(error) if Instant::now() < deadline => {
                assert!(
                    matches!(error, Error::Timeout { .. } | Error::Unavailable { .. }),
                    "a typed error while the cluster fails over: {error:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the promoted master never answered: {error:?}"),
        }
    }
}

/// **A failover can lose a lock** (the guide's Redis Cluster caveat, shown): a lock acquired on a master
/// whose replica did not get the write (its replication stalled first) is gone once the master
/// dies and the replica is promoted; another client acquires it, and the first holder's lost
/// signal fires at its next renewal (NotOwned), long before its lease's own deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_before_the_replica_got_the_lock_loses_it() {
    let cluster = start_cluster_with_replicas().await;
    let url = cluster.url();
    let name = name_on(&cluster, 2, "lost");
    let holder = LockClient::new(lock_at(&url).await);
    let other = LockClient::new(lock_at(&url).await);
    assert!(other.try_acquire("warm-up").await.expect("answered").is_some());

    let (cluster, replica) = on_cluster(cluster, |c| c.stall_replication(2).expect("stalled")).await;
    let guard = holder
        .try_acquire_with(&name, &AcquireOptions::new().ttl(FAILOVER_TTL))
        .await
        .expect("answered")
        .expect("free");
    let acquired = Instant::now();
    let slot = slot(&cluster, &name);
    assert!(keys_in_slot(&cluster, 2, slot) > 0, "the master holds the lock");

    let (cluster, ()) = on_cluster(cluster, move |c| {
        c.node_mut(2).kill().expect("kill -9 of the master");
        c.node_mut(replica).resume().expect("the replica resumed");
        c.wait_for_promotion(replica).expect("the replica promoted");
    })
    .await;
    let promoted = Instant::now();
    eprintln!(
        "the replica took over {:?} after the acquisition",
        promoted - acquired
    );
    assert_eq!(
        keys_in_slot(&cluster, replica, slot),
        0,
        "the promoted replica never got the lock"
    );
    assert!(!guard.is_lost(), "the holder does not know yet");

    let second = try_acquire_once_answered(&other, &name)
        .await
        .expect("the lock is free on the promoted replica: another client takes it");
    let reason = tokio::time::timeout(
        FAILOVER_TTL / 3 + OPERATION_TIMEOUT * 2 + Duration::from_secs(3),
        guard.lost(),
    )
    .await
    .expect("the holder's lost signal fires at its next renewal");
    let told = Instant::now();
    eprintln!(
        "the holder was told {:?} after the promotion ({:?} after its acquisition): {reason}",
        told - promoted,
        told - acquired
    );
    assert_eq!(reason, distlock_core::LossReason::NotOwned, "{reason}");
    assert!(
        told - acquired < FAILOVER_TTL / 2,
        "told by a renewal, not by its lease's deadline"
    );
    assert!(
        !guard.release().await.expect("answered"),
        "the release finds it gone"
    );
    assert!(
        second.release().await.expect("answered"),
        "the second holder held it"
    );
    drop(cluster);
}

/// With replication healthy, a failover after the replica got the lock keeps it: another client
/// cannot acquire it on the promoted replica, and the holder goes on renewing it there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_after_the_lock_replicated_keeps_it() {
    let cluster = start_cluster_with_replicas().await;
    let url = cluster.url();
    let name = name_on(&cluster, 2, "kept");
    let holder = LockClient::new(lock_at(&url).await);
    let other = LockClient::new(lock_at(&url).await);
    let guard = holder
        .try_acquire_with(&name, &AcquireOptions::new().ttl(FAILOVER_TTL))
        .await
        .expect("answered")
        .expect("free");
    let slot = slot(&cluster, &name);
    let replica = cluster.replica_of(2).expect("a replica");
    let replicated = Instant::now() + Duration::from_secs(5);
    while keys_in_slot(&cluster, replica, slot) < keys_in_slot(&cluster, 2, slot) {
        assert!(Instant::now() < replicated, "the replica got the lock within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (cluster, promoted) = on_cluster(cluster, |c| c.fail_over(2).expect("a failover")).await;
    assert_eq!(promoted, replica);
    assert!(
        try_acquire_once_answered(&other, &name).await.is_none(),
        "the promoted replica knows the lock is held"
    );
    // A renewal on the promoted replica (at a third of the TTL) succeeds.
    let renewed = guard.lease().valid_until();
    let deadline = Instant::now() + FAILOVER_TTL / 3 + OPERATION_TIMEOUT * 2 + Duration::from_secs(3);
    while guard.lease().valid_until() == renewed {
        assert!(
            Instant::now() < deadline,
            "the holder renewed on the promoted replica"
        );
        assert!(!guard.is_lost(), "the lock is kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!guard.is_lost());
    assert!(guard.release().await.expect("answered"), "still ours");
    let (cluster, ()) = on_cluster(cluster, |c| c.rejoin(2).expect("the old master rejoins")).await;
    assert!(
        other.try_acquire(&name).await.expect("answered").is_some(),
        "free once released"
    );
    drop(cluster);
}

/// Acquires `name` with `lock` for `ttl`, or panics.
async fn take(lock: &RedisLock, name: &LockName, ttl: Duration) -> distlock_core::Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("acquire")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(_) => panic!("a fresh lock is held"),
    }
}

/// After a failover, renewals and releases reach the promoted master: a batch of renewals whose
/// cached slot map still names the dead master is sent again where the slot now lives (not
/// failed until the map ages out), and once the old master is back as a replica, a client that
/// still routes the slot to its address is redirected rather than served by the replica (whose
/// copy may still be empty, or which refuses the script's writes): the lock is found still ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_renewals_and_releases_reach_the_promoted_master() {
    let cluster = start_cluster_with_replicas().await;
    let url = cluster.url();
    let (batched, single) = (lock_at(&url).await, lock_at(&url).await);
    let a = take(&batched, &name_on(&cluster, 2, "batched"), FAILOVER_TTL).await;
    let b = take(&single, &name_on(&cluster, 2, "single"), FAILOVER_TTL).await;
    // The batch's slot map is read now, naming master 2.
    let renewed = batched.renew(std::slice::from_ref(&a)).await;
    assert!(matches!(renewed[0], Ok(Some(_))), "{renewed:?}");
    let replica = cluster.replica_of(2).expect("a replica");
    for lease in [&a, &b] {
        let slot = slot(&cluster, lease.name());
        let replicated = Instant::now() + Duration::from_secs(5);
        while keys_in_slot(&cluster, replica, slot) < keys_in_slot(&cluster, 2, slot) {
            assert!(Instant::now() < replicated, "the replica got the lock within 5 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    let (cluster, _) = on_cluster(cluster, |c| c.fail_over(2).expect("a failover")).await;
    let renewed = batched.renew(std::slice::from_ref(&a)).await;
    assert!(
        matches!(renewed[0], Ok(Some(_))),
        "a batched renewal after the failover reaches the promoted master: {renewed:?}"
    );

    let (cluster, ()) = on_cluster(cluster, |c| c.rejoin(2).expect("the old master rejoins")).await;
    assert!(
        matches!(cluster.role(2), Ok(distlock_testkit::ClusterRole::Replica(_))),
        "the old master is back as a replica"
    );
    let extended = single.extend(&b, FAILOVER_TTL).await;
    assert!(
        matches!(extended, Ok(Some(_))),
        "a renewal through the old master's address reaches the promoted master: {extended:?}"
    );
    let released = single.release(&b).await;
    assert!(
        matches!(released, Ok(true)),
        "released where it is held: {released:?}"
    );
    assert!(batched.release(&a).await.expect("answered"));
    drop(cluster);
}

/// A release that ran on its master but whose reply was lost and whose connection then broke
/// is sent again by the cluster client itself, unseen by us; that second run finds the key
/// gone (the first run deleted it). Work that finished under the lock must not be reported
/// lost for it: `with_lock` returns the work's output, not `LockLost`, and the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_cluster_client_sent_again_is_not_a_lost_lock() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let proxies = Arc::new(proxies);
    let client = LockClient::new(lock_at(&url).await);
    let observer = lock_at(&cluster.url()).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(30));
    for master in 0..3 {
        let name = name_on(&cluster, master, "resent-release");
        // The master learns the release script first: a NOSCRIPT whose reply is dropped
        // would leave the first send without effect.
        let warm = name_on(&cluster, master, "warm-up");
        client
            .with_lock(warm.as_str(), &opts, |_| async {})
            .await
            .expect("a release on a healthy connection");
        let outcome = client
            .with_lock(name.as_str(), &opts, |_| {
                let proxies = proxies.clone();
                async move {
                    // The release that follows runs on the master; its reply is dropped,
                    // then the connection breaks (RST), and the cluster client sends it again.
                    proxies.drop_replies();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                        proxies.heal();
                        proxies.reset();
                    });
                    "done"
                }
            })
            .await;
        println!("with_lock on master {master}: {outcome:?}");
        assert!(
            matches!(outcome, Ok("done")),
            "work that finished under the lock on master {master} was reported as {outcome:?}"
        );
        let state = observer.inspect_lock(&name).await.expect("inspects");
        assert!(!state.is_held(), "the lock is left held: {state:?}");
    }
}

/// As above for every kind of hold (a permit, several permits, a read lock, the upgradeable
/// read lock, the write lock, the mutex): a
/// release the cluster client sent again after its reply was lost reports the hold released,
/// and a later release of the same lease (a new request) reports it not ours.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_of_every_kind_the_cluster_client_sent_again_report_released() {
    let cluster = start_cluster(RedisClusterOptions {
        proxyable: true,
        ..RedisClusterOptions::default()
    })
    .await;
    let (url, proxies) = cluster.proxies().expect("proxies");
    let proxies = Arc::new(proxies);
    let lock = lock_at(&url).await;
    let ttl = Duration::from_secs(30);
    for kind in [
        LockKind::Permit {
            permits: 1,
            weight: 1,
        },
        LockKind::permits(3, 2),
        LockKind::Read,
        LockKind::UpgradeableRead,
        LockKind::Write,
        LockKind::Exclusive,
    ] {
        let name = name_on(&cluster, 2, "resent-kind");
        for round in ["warm-up", "resent"] {
            let TryAcquire::Acquired(lease) = lock
                .try_acquire_kind(&name, kind, OwnerToken::new(), ttl, None)
                .await
                .expect("acquire")
            else {
                panic!("a fresh {kind:?} is held");
            };
            if round == "resent" {
                proxies.drop_replies();
                let proxies = proxies.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    proxies.heal();
                    proxies.reset();
                });
            }
            let released = lock.release(&lease).await;
            println!("{kind:?} {round}: {released:?}");
            assert!(
                matches!(released, Ok(true)),
                "{kind:?} ({round}): the release reported {released:?}"
            );
            let again = lock.release(&lease).await;
            assert!(
                matches!(again, Ok(false)),
                "{kind:?} ({round}): a second release reported {again:?}"
            );
        }
    }
}
