//! Slots under contention: batched renewals across masters and a moved slot, a slot migrating
//! and a master killed while clients contend (counted exactly), and counting held locks on
//! every master.

use super::*;

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
