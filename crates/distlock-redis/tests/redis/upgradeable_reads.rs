//! Upgradeable reads on a real `redis-server` (and one case on a Redis Cluster): one
//! upgradeable reader at a time beside plain readers, an upgrade that waits for the readers
//! while no writer gets in between, the old read lease gone after it, and fencing going up.

use crate::support::{connect, name};
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockKind, LockName, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_redis::RedisLock;
use distlock_testkit::shared;

const LONG: Duration = Duration::from_secs(30);

async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts (run scripts/install-test-deps)")
}

/// The live holds of the read-write lock `name`: (owner, kind), sorted by owner.
async fn holds(lock: &RedisLock, name: &LockName) -> Vec<(String, LockKind)> {
    let mut holds: Vec<_> = lock
        .inspect_holders(name, Primitive::RwLock)
        .await
        .expect("inspects")
        .into_iter()
        .map(|state| (state.owner.expect("a holder has an owner"), state.kind))
        .collect();
    holds.sort_by(|a, b| a.0.cmp(&b.0));
    holds
}

fn sorted(mut holds: Vec<(String, LockKind)>) -> Vec<(String, LockKind)> {
    holds.sort_by(|a, b| a.0.cmp(&b.0));
    holds
}

/// Plain readers share with the upgradeable reader; a second upgradeable reader and a writer
/// stay out; inspect tells the two kinds of reader apart; once the upgradeable reader leaves,
/// another may come in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_at_a_time_beside_plain_readers() {
    let lock = connect(&shared_url().await).await;
    let client = LockClient::new(lock.clone());
    let rw = name("one-at-a-time");
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let upgradeable = rw_lock.upgradeable_read().await.expect("upgradeable");
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);
    let reader = rw_lock
        .try_read()
        .await
        .expect("answered")
        .expect("a reader shares");
    assert!(
        rw_lock.try_upgradeable_read().await.expect("answered").is_none(),
        "two upgradeable readers at once"
    );
    assert!(rw_lock.try_write().await.expect("answered").is_none());
    assert_eq!(
        holds(&lock, &rw).await,
        sorted(vec![
            (upgradeable.owner().to_string(), LockKind::UpgradeableRead),
            (reader.owner().to_string(), LockKind::Read),
        ])
    );
    // A refused upgradeable attempt names the upgradeable reader that holds.
    match lock
        .try_acquire_kind(&rw, LockKind::UpgradeableRead, OwnerToken::new(), LONG, None)
        .await
        .expect("answered")
    {
        TryAcquire::Held(holder) => {
            assert_eq!(holder.owner, Some(upgradeable.owner().to_string()));
            assert!(holder.remaining.is_some_and(|left| left <= LONG));
        }
        TryAcquire::Acquired(lease) => panic!("a second upgradeable reader: {lease:?}"),
    }
    assert!(upgradeable.release().await.expect("released"));
    let next = rw_lock
        .try_upgradeable_read()
        .await
        .expect("answered")
        .expect("the upgradeable read is free again");
    assert!(next.release().await.expect("released"));
    assert!(reader.release().await.expect("released"));
    assert!(holds(&lock, &rw).await.is_empty());
}

/// An upgrade waits for the plain reader while a writer waits too: new readers stay out,
/// neither gets in while the reader holds; the reader's release lets the upgrade in (woken:
/// its safety-net re-check is 20 s away), not the writer; the upgraded hold is the owner's
/// write hold, with a greater fencing token, and the old upgradeable lease renews no more;
/// the writer gets in only after the upgraded guard's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_readers_and_no_writer_gets_in_between() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let client = LockClient::new(lock.clone());
    let rw = name("upgrade");
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(20));
    let mut upgradeable = rw_lock.upgradeable_read().await.expect("upgradeable");
    let read_lease = upgradeable.lease();
    let read_token = upgradeable.fencing_token().expect("fenced");
    let reader = rw_lock.read().await.expect("a reader shares");
    assert!(
        !upgradeable.try_upgrade().await.expect("answered"),
        "upgraded beside a reader"
    );
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);

    let writer_client = LockClient::new(connect(&url).await);
    let writing = tokio::spawn({
        let (rw, opts) = (rw.clone(), opts.clone());
        async move {
            let guard = writer_client
                .rw_lock(&rw)
                .expect("valid")
                .write_with(&opts)
                .await
                .expect("the writer gets in in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let upgrading = tokio::spawn({
        let opts = opts.clone();
        async move {
            upgradeable
                .upgrade_with(&opts)
                .await
                .expect("upgraded in the end");
            (upgradeable, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!upgrading.is_finished(), "upgraded while a reader holds");
    assert!(!writing.is_finished(), "a writer got in beside readers");
    assert!(
        rw_lock.try_read().await.expect("answered").is_none(),
        "a new reader got in while an upgrade and a writer wait"
    );

    let released = Instant::now();
    assert!(reader.release().await.expect("released"));
    let (upgraded, at) = tokio::time::timeout(Duration::from_secs(10), upgrading)
        .await
        .expect("the upgrade got in")
        .expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(3),
        "the upgrade was not woken by the last reader's release: {handoff:?}"
    );
    assert!(upgraded.is_upgraded());
    assert_eq!(upgraded.kind(), LockKind::Write);
    assert_eq!(upgraded.owner(), read_lease.owner());
    let write_token = upgraded.fencing_token().expect("fenced");
    assert!(write_token > read_token, "{write_token:?} after {read_token:?}");
    assert_eq!(
        holds(&lock, &rw).await,
        vec![(read_lease.owner().to_string(), LockKind::Write)],
        "the upgradeable read became the write hold"
    );
    assert!(
        lock.extend(&read_lease, LONG).await.expect("answered").is_none(),
        "the old upgradeable lease still renews"
    );
    assert!(
        upgraded.extend(LONG).await.expect("answered"),
        "the write hold renews"
    );

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writing.is_finished(), "a writer got in beside the upgraded hold");
    let released = Instant::now();
    assert!(upgraded.release().await.expect("released"));
    let (writer, at) = tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .expect("the writer got in")
        .expect("joined");
    assert!(
        at >= released,
        "the writer got in before the upgraded guard's release"
    );
    assert!(writer.fencing_token().expect("fenced") > write_token);
    assert!(writer.release().await.expect("released"));
    assert!(holds(&lock, &rw).await.is_empty());
}

/// With no plain reader, the upgrade is granted at once; dropping the upgraded guard frees
/// everything: the next upgradeable reader, reader and writer get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_readers_is_granted_and_its_drop_frees_everything() {
    let lock = connect(&shared_url().await).await;
    let client = LockClient::new(lock.clone());
    let rw = name("drop");
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let mut upgradeable = rw_lock.upgradeable_read().await.expect("upgradeable");
    assert!(upgradeable.try_upgrade().await.expect("answered"));
    assert!(rw_lock.try_upgradeable_read().await.expect("answered").is_none());
    assert!(rw_lock.try_read().await.expect("answered").is_none());
    drop(upgradeable);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !holds(&lock, &rw).await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the dropped guard's hold is still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = rw_lock
        .try_upgradeable_read()
        .await
        .expect("answered")
        .expect("free");
    assert!(next.release().await.expect("released"));
    let writer = rw_lock.try_write().await.expect("answered").expect("free");
    assert!(writer.release().await.expect("released"));
}

/// A waiting writer keeps new upgradeable readers out as it keeps plain ones out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_upgradeable_readers_out() {
    let lock = connect(&shared_url().await).await;
    let rw = name("writer-waits");
    let TryAcquire::Acquired(reader) = lock
        .try_acquire_kind(&rw, LockKind::Read, OwnerToken::new(), LONG, None)
        .await
        .expect("answered")
    else {
        panic!("free");
    };
    let stay = Duration::from_secs(5);
    let refused = lock
        .try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w-1", stay)))
        .await
        .expect("answered");
    assert!(matches!(refused, TryAcquire::Held(_)));
    match lock
        .try_acquire_kind(&rw, LockKind::UpgradeableRead, OwnerToken::new(), LONG, None)
        .await
        .expect("answered")
    {
        TryAcquire::Held(holder) => {
            let left = holder.remaining.expect("until the waiting writer's record ends");
            assert!(left <= stay, "{left:?}");
        }
        TryAcquire::Acquired(lease) => {
            panic!("an upgradeable reader got in ahead of a waiting writer: {lease:?}")
        }
    }
    assert!(lock.release(&reader).await.expect("released"));
}

/// On a Redis Cluster: one upgradeable reader beside a reader, its upgrade once the reader
/// leaves, and the release of the upgraded hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_on_a_cluster() {
    let url = tokio::task::spawn_blocking(shared::redis_cluster_url)
        .await
        .expect("joined")
        .expect("the shared Redis Cluster starts (run scripts/install-test-deps)");
    let lock = connect(&url).await;
    let client = LockClient::new(lock.clone());
    let rw = name("cluster");
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let mut upgradeable = rw_lock.upgradeable_read().await.expect("upgradeable");
    let reader = rw_lock.try_read().await.expect("answered").expect("shares");
    assert!(rw_lock.try_upgradeable_read().await.expect("answered").is_none());
    assert!(!upgradeable.try_upgrade().await.expect("answered"));
    assert!(reader.release().await.expect("released"));
    assert!(upgradeable.try_upgrade().await.expect("answered"));
    assert_eq!(
        holds(&lock, &rw).await,
        vec![(upgradeable.owner().to_string(), LockKind::Write)]
    );
    assert!(upgradeable.release().await.expect("released"));
    assert!(holds(&lock, &rw).await.is_empty());
}
