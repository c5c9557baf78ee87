//! Weighted semaphore holds against the shared ZooKeeper server: a hold of `n` permits is `n`
//! lease nodes created together (Curator's `InterProcessSemaphoreV2.acquire(n)` layout) and
//! given back together; holders of mixed weights never exceed the count; a heavy waiter gets
//! in once enough are free; release and the owner's cleanup free the whole hold.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, DistributedLockExt, Lease, LockClient, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};
use support::ZkFixture;
use zookeeper_client as zk;

const TTL: Duration = Duration::from_secs(10);

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

fn waiting(for_at_most: Duration) -> AcquireOptions {
    AcquireOptions::new().wait_for(for_at_most)
}

async fn leases(raw: &zk::Client, store: &distlock_zookeeper::ZooKeeperLock, name: &LockName) -> Vec<String> {
    match raw
        .list_children(&format!("{}/leases", store.semaphore_path(name)))
        .await
    {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing the leases: {e}"),
    }
}

/// The sum of the weights `inspect` reports.
async fn held_weight(store: &distlock_zookeeper::ZooKeeperLock, name: &LockName) -> u32 {
    store
        .inspect_holders(name, Primitive::Semaphore)
        .await
        .expect("inspect")
        .iter()
        .map(|h| h.kind.weight())
        .sum()
}

/// Twelve tasks on three sessions take 1, 2 or 3 of 5 permits, four times each, half waiting
/// in line and half by single attempts: the weights inside never add up to more than 5 (an
/// overlap count kept by the tasks, and `inspect`'s sum read while they run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_weights_never_exceed_the_count() {
    const PERMITS: u32 = 5;
    let fixture = ZkFixture::shared().await;
    let name = unique("weights");
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(LockClient::new(support::connect(fixture.url()).await));
    }
    assert!(clients[0].capabilities().weighted_permits);
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for task in 0..12u32 {
        let semaphore = clients[task as usize % 3]
            .semaphore(&name, PERMITS)
            .expect("a semaphore");
        let (inside, most) = (inside.clone(), most.clone());
        let weight = task % 3 + 1;
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let guard = if task % 2 == 0 {
                    semaphore
                        .acquire_many_with(weight, &waiting(Duration::from_secs(90)))
                        .await
                        .expect("permits")
                } else {
                    let deadline = Instant::now() + Duration::from_secs(90);
                    loop {
                        if let Some(guard) = semaphore.try_acquire_many(weight).await.expect("an attempt") {
                            break guard;
                        }
                        assert!(
                            Instant::now() < deadline,
                            "task {task} never got {weight} permits"
                        );
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                assert_eq!(guard.kind(), LockKind::permits(PERMITS, weight));
                let now = inside.fetch_add(weight, Ordering::SeqCst) + weight;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= PERMITS, "{now} permits held at once");
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(weight, Ordering::SeqCst);
                assert!(guard.release().await.expect("released"));
            }
        }));
    }
    let observer = support::connect(fixture.url()).await;
    let mut seen = 0;
    while !tasks.iter().all(tokio::task::JoinHandle::is_finished) {
        let weight = held_weight(&observer, &name).await;
        assert!(weight <= PERMITS, "inspect reports {weight} permits held");
        seen = seen.max(weight);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    for task in tasks {
        task.await.expect("no task failed");
    }
    println!(
        "most permits held at once: {} (inspect saw {seen})",
        most.load(Ordering::SeqCst)
    );
    assert!(most.load(Ordering::SeqCst) >= 3, "the holds overlapped");
}

/// With 2 of 4 permits held, a weight-3 attempt is refused and a weight-3 waiter waits; once
/// one holder leaves (3 free) it gets in. Its hold is 3 lease nodes of one owner, created in
/// one transaction (one creation zxid, the fencing token), which `inspect` reports as one
/// holder of weight 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heavy_waiter_gets_in_when_enough_are_free() {
    let fixture = ZkFixture::shared().await;
    let name = unique("heavy");
    let client = LockClient::new(support::connect(fixture.url()).await);
    let other = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    let semaphore = client.semaphore(&name, 4).expect("a semaphore");
    let a = semaphore.try_acquire().await.expect("works").expect("room");
    let b = semaphore.try_acquire().await.expect("works").expect("room");
    let heavy = other.semaphore(&name, 4).expect("a semaphore");
    assert!(
        heavy.try_acquire_many(3).await.expect("works").is_none(),
        "only 2 are free"
    );
    let waiter = {
        let heavy = heavy.clone();
        tokio::spawn(async move {
            heavy
                .acquire_many_with(3, &waiting(Duration::from_secs(20)))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "3 permits are not free yet");
    assert!(a.release().await.expect("released"));
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the heavy waiter gets in once 3 are free")
        .expect("joined")
        .expect("permits");
    assert_eq!(guard.kind(), LockKind::permits(4, 3));
    let owner = guard.owner().to_string();
    let nodes = leases(&raw, &store, &name).await;
    let ours: Vec<_> = nodes.iter().filter(|c| c.contains(&owner)).collect();
    assert_eq!(ours.len(), 3, "three lease nodes of the owner: {nodes:?}");
    assert!(
        ours.iter().all(|c| c.starts_with(&format!("_c_{owner}-lease-"))),
        "{ours:?}"
    );
    let holders = store
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("inspect");
    assert_eq!(holders.len(), 2, "{holders:?}");
    let mine = holders
        .iter()
        .find(|h| h.owner.as_deref() == Some(owner.as_str()))
        .expect("the heavy holder is listed");
    assert_eq!(mine.kind, LockKind::permits(4, 3));
    assert_eq!(mine.fencing, guard.fencing_token());
    assert!(guard.fencing_token() > b.fencing_token());
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "all 4 are held"
    );
    assert!(guard.release().await.expect("released"));
    assert!(b.release().await.expect("released"));
}

/// Releasing a weighted hold gives back all its permits at once; renewing it checks the whole
/// hold; a stale lease of it frees nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_weighted_hold_frees_all_its_permits() {
    let fixture = ZkFixture::shared().await;
    let name = unique("weight-release");
    let store = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let kind = LockKind::permits(3, 3);
    let lease = match store
        .try_acquire_kind(&name, kind, OwnerToken::new(), TTL, None)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("the semaphore is free, found {holder:?}"),
    };
    assert_eq!(lease.kind(), kind);
    assert_eq!(leases(&raw, &store, &name).await.len(), 3);
    let renewed = store.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(Some(_))]), "{renewed:?}");
    let one = LockKind::permit(3);
    let tried = store
        .try_acquire_kind(&name, one, OwnerToken::new(), TTL, None)
        .await;
    assert!(matches!(tried, Ok(TryAcquire::Held(_))), "full: {tried:?}");
    assert!(store.release(&lease).await.expect("released"));
    assert!(
        leases(&raw, &store, &name).await.is_empty(),
        "all three lease nodes are gone"
    );
    assert!(!store.release(&lease).await.expect("works"), "released once");
    let renewed = store.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(None)]), "{renewed:?}");
    let mut singles = Vec::new();
    for _ in 0..3 {
        match store
            .try_acquire_kind(&name, one, OwnerToken::new(), TTL, None)
            .await
            .expect("works")
        {
            TryAcquire::Acquired(lease) => singles.push(lease),
            TryAcquire::Held(holder) => panic!("three permits are free, found {holder:?}"),
        }
    }
    for lease in singles {
        assert!(store.release(&lease).await.expect("released"));
    }
}

/// The core's cleanup after an ambiguous weighted attempt (a lease of the owner without a
/// handle, of the same kind) deletes every lease node of the hold: all its permits are free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ambiguous_weighted_attempt_cleaned_up_by_owner_frees_all_of_it() {
    let fixture = ZkFixture::shared().await;
    let name = unique("weight-cleanup");
    let store = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let owner = OwnerToken::new();
    let kind = LockKind::permits(4, 3);
    let attempt = Attempt::new(name.clone(), kind, owner, TTL);
    assert!(matches!(
        store.attempt(&attempt).await,
        Ok(TryAcquire::Acquired(_))
    ));
    assert_eq!(leases(&raw, &store, &name).await.len(), 3);
    let cleanup = Lease::new(name.clone(), owner, TTL, tokio::time::Instant::now()).with_kind(kind);
    assert!(store.release(&cleanup).await.expect("cleaned up"));
    assert!(leases(&raw, &store, &name).await.is_empty());
    let all = LockKind::permits(4, 4);
    let lease = match store
        .try_acquire_kind(&name, all, OwnerToken::new(), TTL, None)
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("all four are free, found {holder:?}"),
    };
    assert!(store.release(&lease).await.expect("released"));
    let bad = store
        .try_acquire_kind(&name, LockKind::permits(4, 5), OwnerToken::new(), TTL, None)
        .await;
    assert!(
        matches!(bad, Err(distlock_core::Error::InvalidOptions { .. })),
        "{bad:?}"
    );
    let zero = store
        .try_acquire_kind(&name, LockKind::permits(4, 0), OwnerToken::new(), TTL, None)
        .await;
    assert!(
        matches!(zero, Err(distlock_core::Error::InvalidOptions { .. })),
        "{zero:?}"
    );
}

/// Any lease node of a weighted hold deleted behind our back (here the last one) is the
/// hold's loss: its guard is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_hold_missing_one_lease_is_lost() {
    let fixture = ZkFixture::shared().await;
    let name = unique("weight-stolen");
    let client = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    let guard = client
        .semaphore(&name, 3)
        .expect("a semaphore")
        .acquire_many(2)
        .await
        .expect("two permits");
    let mut nodes = leases(&raw, &store, &name).await;
    nodes.sort_by_key(|c| c.rsplit('-').next().map(str::to_owned));
    assert_eq!(nodes.len(), 2);
    let last = format!("{}/leases/{}", store.semaphore_path(&name), nodes[1]);
    raw.delete(&last, None).await.expect("deleted behind its back");
    let reason = tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the guard learns it lost the hold");
    assert_eq!(reason, distlock_core::LossReason::NotOwned);
    assert!(
        !guard.release().await.expect("works"),
        "the hold was no longer whole"
    );
    assert!(
        leases(&raw, &store, &name).await.is_empty(),
        "its other lease is deleted too"
    );
}
