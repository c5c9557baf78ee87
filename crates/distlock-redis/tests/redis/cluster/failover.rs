//! Failovers with a replica per master: a lock the replica never got is lost on promotion, one
//! it got is kept, renewals and releases reach the promoted master, and a release sent again
//! is not a lost lock.

use super::*;

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
