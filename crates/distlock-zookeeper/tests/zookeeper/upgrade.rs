//! Upgradeable reads of a read-write lock against the shared ZooKeeper server: one upgradeable
//! reader at a time beside plain readers, kept out by a waiting writer; an upgrade that waits
//! for the plain readers while new readers and a waiting writer stay out, turns the hold into
//! the write hold with a greater fencing token, and lets the writer in only once released;
//! dropping an upgraded guard frees everything.

use crate::support;

use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockKind, LockName, Primitive,
};
use support::ZkFixture;
use zookeeper_client as zk;

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

fn waiting(for_at_most: Duration) -> AcquireOptions {
    AcquireOptions::new().wait_for(for_at_most)
}

async fn nodes(raw: &zk::Client, store: &distlock_zookeeper::ZooKeeperLock, name: &LockName) -> Vec<String> {
    match raw.list_children(&store.rw_lock_path(name)).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing the read-write lock: {e}"),
    }
}

/// One upgradeable reader at a time; plain readers share with it; no writer gets in. Its node
/// sorts as a reader for Curator (the name ends in `__READ__` and the sequence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_beside_plain_readers() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-share");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    assert!(a.capabilities().upgradeable_reads);
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    assert_eq!(upgradeable.kind(), LockKind::UpgradeableRead);
    assert!(
        lock_b.try_upgradeable_read().await.expect("works").is_none(),
        "one upgradeable reader at a time"
    );
    let reader = lock_b
        .try_read()
        .await
        .expect("works")
        .expect("a plain reader shares");
    assert!(
        lock_b.try_write().await.expect("works").is_none(),
        "no writer gets in"
    );
    let children = nodes(&raw, &store, &name).await;
    let owner = upgradeable.owner().to_string();
    let ours = children
        .iter()
        .find(|c| c.contains(&owner))
        .expect("the upgradeable node");
    assert!(ours.starts_with(&format!("_c_{owner}-")), "{ours}");
    assert!(
        ours.rsplit("__READ__").next().is_some_and(|seq| seq.len() == 10) && !ours.contains("__WRIT__"),
        "a reader to Curator: {ours}"
    );
    let holders = store
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("inspect");
    let kinds: Vec<LockKind> = holders.iter().map(|h| h.kind).collect();
    assert_eq!(kinds, [LockKind::UpgradeableRead, LockKind::Read], "{holders:?}");
    assert!(reader.release().await.expect("released"));
    assert!(upgradeable.release().await.expect("released"));
    let writer = lock_b.try_write().await.expect("works").expect("free now");
    assert!(writer.release().await.expect("released"));
}

/// A writer waiting keeps new upgradeable readers out, as it keeps plain readers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_upgradeable_readers_out() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-writer-waits");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let reader = lock_a.read().await.expect("a reader");
    let writer = {
        let lock_b = lock_b.clone();
        tokio::spawn(async move { lock_b.write_with(&waiting(Duration::from_secs(20))).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "the writer waits for the reader");
    assert!(
        lock_a.try_upgradeable_read().await.expect("works").is_none(),
        "a waiting writer keeps new upgradeable readers out"
    );
    assert!(reader.release().await.expect("released"));
    let writer = writer.await.expect("joined").expect("the writer gets in");
    assert!(writer.release().await.expect("released"));
    let upgradeable = lock_a
        .try_upgradeable_read()
        .await
        .expect("works")
        .expect("free now");
    assert!(upgradeable.release().await.expect("released"));
}

/// The upgrade waits for the plain reader; meanwhile new readers stay out and a writer that
/// queued before the upgrade keeps waiting. Once the reader leaves, the hold becomes the write
/// hold (a greater token; the old read lease renews no more; inspect shows one writer), and
/// the waiting writer gets in only after it is released, with a greater token still.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_readers_and_no_writer_gets_in_between() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-wait");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let store = support::connect(fixture.url()).await;
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let mut upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    let read_lease = upgradeable.lease();
    let reader = lock_b.read().await.expect("a plain reader");
    assert!(
        !upgradeable.try_upgrade().await.expect("works"),
        "a plain reader is in"
    );
    assert!(!upgradeable.is_upgraded());

    let writer = {
        let lock_b = lock_b.clone();
        tokio::spawn(async move { lock_b.write_with(&waiting(Duration::from_secs(60))).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "the writer waits for the readers");
    let upgrade = tokio::spawn(async move {
        upgradeable
            .upgrade_with(&waiting(Duration::from_secs(30)))
            .await
            .map(|()| upgradeable)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!upgrade.is_finished(), "the upgrade waits for the plain reader");
    assert!(
        lock_b.try_read().await.expect("works").is_none(),
        "new readers wait behind the upgrade"
    );

    let reader_token = reader.fencing_token();
    assert!(reader.release().await.expect("released"));
    let upgraded = tokio::time::timeout(Duration::from_secs(15), upgrade)
        .await
        .expect("the upgrade is granted once the reader left")
        .expect("joined")
        .expect("upgraded");
    assert!(upgraded.is_upgraded());
    assert_eq!(upgraded.kind(), LockKind::Write);
    assert_eq!(upgraded.owner(), read_lease.owner());
    assert!(upgraded.fencing_token() > reader_token, "a new, greater token");
    assert!(upgraded.fencing_token() > read_lease.fencing_token());
    let renewed = store.renew(std::slice::from_ref(&read_lease)).await;
    assert!(
        matches!(renewed.as_slice(), [Ok(None)]),
        "the read lease is over: {renewed:?}"
    );
    let holders = store
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("inspect");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].kind, LockKind::Write);
    assert_eq!(holders[0].owner, Some(read_lease.owner().to_string()));
    assert_eq!(holders[0].fencing, upgraded.fencing_token());

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "no writer gets in while the upgraded guard holds"
    );
    assert!(lock_b.try_read().await.expect("works").is_none());
    let released_at = Instant::now();
    let upgraded_token = upgraded.fencing_token();
    assert!(upgraded.release().await.expect("released"));
    let writer = tokio::time::timeout(Duration::from_secs(15), writer)
        .await
        .expect("the writer gets in after the release")
        .expect("joined")
        .expect("the write lock");
    println!(
        "writer in {:?} after the upgraded guard's release",
        released_at.elapsed()
    );
    assert!(
        writer.fencing_token() > upgraded_token,
        "tokens grow: {:?} then {:?}",
        upgraded_token,
        writer.fencing_token()
    );
    assert!(writer.release().await.expect("released"));
}

/// With no plain reader in, the upgrade is granted at once; dropping the upgraded guard frees
/// every node (the upgradeable one too), so a writer and then an upgradeable reader get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_without_readers_is_granted_and_its_drop_frees_everything() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-drop");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let mut upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    assert!(upgradeable.try_upgrade().await.expect("works"), "no reader is in");
    assert!(upgradeable.is_upgraded());
    assert!(lock_b.try_read().await.expect("works").is_none());
    assert!(lock_b.try_upgradeable_read().await.expect("works").is_none());
    assert!(lock_b.try_write().await.expect("works").is_none());
    drop(upgradeable);
    let writer = lock_b
        .write_with(&waiting(Duration::from_secs(10)))
        .await
        .expect("free once the dropped guard is released");
    assert!(writer.release().await.expect("released"));
    assert!(nodes(&raw, &store, &name).await.is_empty(), "no node is left");
    let again = lock_b.try_upgradeable_read().await.expect("works").expect("free");
    assert!(again.release().await.expect("released"));
}

/// A reader that queued behind a waiting writer before an upgrade began holds after the
/// upgraded writer though its node is older: its token is still greater than the upgraded
/// hold's, and the writer's before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_overtaken_by_an_upgrade_get_greater_tokens() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-tokens");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let mut upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    let reader = lock_b.read().await.expect("a plain reader");
    let spawn_wait = |write: bool| {
        let lock_b = lock_b.clone();
        tokio::spawn(async move {
            let opts = waiting(Duration::from_secs(60));
            let guard = if write {
                lock_b.write_with(&opts).await
            } else {
                lock_b.read_with(&opts).await
            }?;
            let token = guard.fencing_token();
            guard.release().await?;
            Ok::<_, distlock_core::Error>(token)
        })
    };
    let writer = spawn_wait(true);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let late_reader = spawn_wait(false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let upgrade = tokio::spawn(async move {
        upgradeable
            .upgrade_with(&waiting(Duration::from_secs(30)))
            .await
            .map(|()| upgradeable)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(reader.release().await.expect("released"));
    let upgraded = upgrade.await.expect("joined").expect("upgraded");
    let upgraded_token = upgraded.fencing_token();
    assert!(!writer.is_finished() && !late_reader.is_finished());
    assert!(upgraded.release().await.expect("released"));
    let writer_token = writer.await.expect("joined").expect("the writer");
    let reader_token = late_reader.await.expect("joined").expect("the reader");
    assert!(
        upgraded_token < writer_token && writer_token < reader_token,
        "tokens in grant order: {upgraded_token:?}, {writer_token:?}, {reader_token:?}"
    );
}

/// The owner's cleanup after an ambiguous upgrade (a write lease of the owner without a
/// handle) frees both nodes of a granted upgrade, and leaves the upgradeable read alone when
/// the upgrade was not granted; the old read lease of an upgraded hold releases nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cleanup_of_an_upgrade_frees_only_what_it_took() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-cleanup");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let write_cleanup = |owner| {
        distlock_core::Lease::new(
            name.clone(),
            owner,
            Duration::from_secs(10),
            tokio::time::Instant::now(),
        )
        .with_kind(LockKind::Write)
    };

    // Not granted: a reader is in; the cleanup finds no writer node and keeps the read hold.
    let upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    let reader = lock_b.read().await.expect("a reader");
    assert!(!store
        .release(&write_cleanup(upgradeable.owner()))
        .await
        .expect("works"));
    assert_eq!(nodes(&raw, &store, &name).await.len(), 2);
    assert!(lock_b.try_upgradeable_read().await.expect("works").is_none());
    assert!(reader.release().await.expect("released"));

    // Granted: the old read lease frees nothing; the cleanup frees both nodes.
    let mut upgradeable = upgradeable;
    let read_lease = upgradeable.lease();
    assert!(upgradeable.try_upgrade().await.expect("works"));
    assert!(
        !store.release(&read_lease).await.expect("works"),
        "the read lease is over"
    );
    assert_eq!(
        nodes(&raw, &store, &name).await.len(),
        2,
        "the write hold is whole"
    );
    assert!(lock_b.try_write().await.expect("works").is_none());
    assert!(store
        .release(&write_cleanup(read_lease.owner()))
        .await
        .expect("cleaned up"));
    assert!(nodes(&raw, &store, &name).await.is_empty());
    let lost = tokio::time::timeout(Duration::from_secs(10), upgradeable.lost())
        .await
        .expect("the upgraded guard learns its nodes are gone");
    assert_eq!(lost, distlock_core::LossReason::NotOwned);
    let writer = lock_b.try_write().await.expect("works").expect("free");
    assert!(writer.release().await.expect("released"));
}

/// An upgrade that times out (a plain reader stays) leaves the upgradeable read held and no
/// writer node behind; once the reader leaves, the upgrade is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_that_times_out_keeps_the_read_hold() {
    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-timeout");
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let raw = support::raw(fixture.url()).await;
    let store = support::connect(fixture.url()).await;
    let lock_a = a.rw_lock(&name).expect("a read-write lock");
    let lock_b = b.rw_lock(&name).expect("a read-write lock");
    let mut upgradeable = lock_a.upgradeable_read().await.expect("the upgradeable read");
    let reader = lock_b.read().await.expect("a reader");
    let outcome = upgradeable
        .upgrade_with(&waiting(Duration::from_millis(500)))
        .await;
    assert!(
        matches!(outcome, Err(distlock_core::Error::Timeout { .. })),
        "{outcome:?}"
    );
    assert!(!upgradeable.is_upgraded() && !upgradeable.is_lost());
    assert_eq!(
        nodes(&raw, &store, &name).await.len(),
        2,
        "no writer node is left"
    );
    assert!(lock_b.try_upgradeable_read().await.expect("works").is_none());
    assert!(reader.release().await.expect("released"));
    assert!(upgradeable.try_upgrade().await.expect("works"));
    assert!(upgradeable.release().await.expect("released"));
    assert!(nodes(&raw, &store, &name).await.is_empty());
}

/// Readers, writers and upgraders on three sessions, four rounds each: a writer (plain or
/// upgraded) is always alone, and at most one upgradeable hold exists at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_writers_and_upgraders_keep_the_rules_under_contention() {
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::Arc;

    let fixture = ZkFixture::shared().await;
    let name = unique("upgr-mix");
    let readers = Arc::new(AtomicI32::new(0));
    let writers = Arc::new(AtomicI32::new(0));
    let upgradeables = Arc::new(AtomicI32::new(0));
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(LockClient::new(support::connect(fixture.url()).await));
    }
    let mut tasks = Vec::new();
    for task in 0..7usize {
        let lock = clients[task % 3].rw_lock(&name).expect("a read-write lock");
        let (readers, writers, upgradeables) = (readers.clone(), writers.clone(), upgradeables.clone());
        tasks.push(tokio::spawn(async move {
            let opts = waiting(Duration::from_secs(90));
            let pause = || tokio::time::sleep(Duration::from_millis(15));
            for _ in 0..4 {
                match task % 3 {
                    0 => {
                        let guard = lock.read_with(&opts).await.expect("a read");
                        readers.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader beside a writer");
                        pause().await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("released"));
                    }
                    1 => {
                        let guard = lock.write_with(&opts).await.expect("a write");
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                        assert_eq!(
                            upgradeables.load(Ordering::SeqCst),
                            0,
                            "a writer beside an upgradeable"
                        );
                        pause().await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("released"));
                    }
                    _ => {
                        let mut guard = lock
                            .upgradeable_read_with(&opts)
                            .await
                            .expect("an upgradeable read");
                        assert_eq!(upgradeables.fetch_add(1, Ordering::SeqCst), 0, "two upgradeables");
                        assert_eq!(
                            writers.load(Ordering::SeqCst),
                            0,
                            "an upgradeable beside a writer"
                        );
                        pause().await;
                        guard.upgrade_with(&opts).await.expect("upgraded");
                        upgradeables.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(
                            readers.load(Ordering::SeqCst),
                            0,
                            "an upgraded writer beside readers"
                        );
                        pause().await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("released"));
                    }
                }
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("no task is stuck")
            .expect("no task failed");
    }
}
