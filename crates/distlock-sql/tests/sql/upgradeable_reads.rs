//! Upgradeable reads (`LockKind::UpgradeableRead`, `RwLock::upgradeable_read`,
//! `UpgradeableReadGuard::upgrade`) on every dialect: a SQLite file of the test's own, the
//! shared MariaDB and the shared PostgreSQL that distlock-testkit starts. Each client has a
//! pool of its own, as separate processes would. Names are unique per check.
#![cfg(all(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, LockClient, LockKind, LockName, Primitive, RwLock,
};

const TTL: Duration = Duration::from_secs(30);

use crate::dialects;

use dialects::{unique, Store};

/// A client of its own and the read-write lock `name` through it, waiting up to 20 s.
async fn rw(store: &Store, name: &LockName) -> (LockClient, RwLock) {
    let opts = AcquireOptions::new().ttl(TTL).wait_for(Duration::from_secs(20));
    let client = LockClient::new(store.client().await).with_defaults(opts);
    let lock = client.rw_lock(name.clone()).expect("read-write locks");
    (client, lock)
}

/// One upgradeable reader at a time; plain readers share with it; writers stay out.
async fn one_upgradeable_reader_beside_plain_readers(store: &Store) {
    let name = unique("one");
    let (client, a) = rw(store, &name).await;
    assert!(client.capabilities().upgradeable_reads);
    let (_, b) = rw(store, &name).await;
    let upgradeable = a.upgradeable_read().await.expect("the upgradeable read");
    let reader = b.try_read().await.expect("works").expect("a plain reader shares");
    assert!(
        b.try_upgradeable_read().await.expect("works").is_none(),
        "one upgradeable reader at a time"
    );
    assert!(b.try_write().await.expect("works").is_none(), "no writer");
    let kinds: Vec<LockKind> = store
        .client()
        .await
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("works")
        .iter()
        .map(|h| h.kind)
        .collect();
    assert!(
        kinds.contains(&LockKind::UpgradeableRead) && kinds.contains(&LockKind::Read),
        "{kinds:?}"
    );
    assert!(reader.release().await.expect("works"));
    assert!(upgradeable.release().await.expect("works"));
    let next = b
        .try_upgradeable_read()
        .await
        .expect("works")
        .expect("free again");
    assert!(next.release().await.expect("works"));
}

/// The upgrade waits for the plain readers, keeps new readers out meanwhile, and no writer
/// gets in between: a writer that waits all along gets in only after the upgraded guard is
/// released. The write hold has a greater token than the read hold it came from.
async fn an_upgrade_waits_for_readers_and_no_writer_comes_between(store: &Store) {
    let name = unique("upgrade");
    let (_, a) = rw(store, &name).await;
    let (_, b) = rw(store, &name).await;
    let (_, c) = rw(store, &name).await;
    let mut upgradeable = a.upgradeable_read().await.expect("the upgradeable read");
    let read_token = upgradeable.fencing_token().expect("SQL fences");
    let reader = b.read().await.expect("a plain reader");
    let writer = tokio::spawn(async move { c.write().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the writer waits");
    assert!(
        !upgradeable.try_upgrade().await.expect("works"),
        "a plain reader is in"
    );
    let upgrading = tokio::spawn(async move { upgradeable.upgrade().await.map(|()| upgradeable) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!upgrading.is_finished(), "the upgrade waits for the reader");
    assert!(
        b.try_read().await.expect("works").is_none(),
        "new readers wait behind it"
    );
    assert!(reader.release().await.expect("works"));
    let upgraded = tokio::time::timeout(Duration::from_secs(20), upgrading)
        .await
        .expect("the upgrade is granted")
        .expect("the task")
        .expect("upgraded");
    assert!(upgraded.is_upgraded());
    assert_eq!(upgraded.kind(), LockKind::Write);
    assert!(upgraded.fencing_token().expect("SQL fences") > read_token);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "no writer gets in while the upgraded guard holds"
    );
    assert!(
        b.try_read().await.expect("works").is_none(),
        "the writer keeps readers out"
    );
    let upgraded_token = upgraded.fencing_token();
    assert!(upgraded.release().await.expect("works"));
    let write = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the writer gets in")
        .expect("the task")
        .expect("the write lock");
    assert!(write.fencing_token() > upgraded_token);
    assert!(write.release().await.expect("works"));
}

/// After the readers left, the upgrade is granted at once; the store then records one write
/// hold and no upgradeable read (the read lease renews no more), and releasing the upgraded
/// guard frees everything.
async fn an_upgrade_without_readers_turns_the_hold_into_the_write_hold(store: &Store) {
    let name = unique("turn");
    let (_, a) = rw(store, &name).await;
    let (_, b) = rw(store, &name).await;
    let observer = store.client().await;
    let mut upgradeable = a.upgradeable_read().await.expect("the upgradeable read");
    let read_lease = upgradeable.guard().lease();
    assert!(
        upgradeable.try_upgrade().await.expect("works"),
        "no reader: granted"
    );
    let holders = observer
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("works");
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert_eq!(holders[0].kind, LockKind::Write);
    assert_eq!(holders[0].owner, Some(read_lease.owner().to_string()));
    let renewed = observer.renew(std::slice::from_ref(&read_lease)).await;
    assert!(
        matches!(renewed[0], Ok(None)),
        "the read lease is gone: {renewed:?}"
    );
    assert!(b.try_read().await.expect("works").is_none());
    assert!(upgradeable.release().await.expect("works"));
    assert!(observer
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("works")
        .is_empty());
    let write = b.try_write().await.expect("works").expect("all free");
    assert!(write.release().await.expect("works"));
}

/// Dropping an upgradeable guard (upgraded or not) frees the lock.
async fn dropping_the_guard_frees_the_lock(store: &Store) {
    let name = unique("drop");
    let (_, a) = rw(store, &name).await;
    let (_, b) = rw(store, &name).await;
    let mut upgradeable = a.upgradeable_read().await.expect("the upgradeable read");
    upgradeable.upgrade().await.expect("upgraded");
    drop(upgradeable);
    let write = tokio::time::timeout(Duration::from_secs(20), b.write())
        .await
        .expect("freed in time")
        .expect("the write lock");
    assert!(write.release().await.expect("works"));
    let upgradeable = a.upgradeable_read().await.expect("the upgradeable read");
    drop(upgradeable);
    let write = tokio::time::timeout(Duration::from_secs(20), b.write())
        .await
        .expect("freed in time")
        .expect("the write lock");
    assert!(write.release().await.expect("works"));
}

/// A waiting writer keeps new upgradeable readers out, as it keeps plain readers out.
async fn a_waiting_writer_keeps_upgradeable_readers_out(store: &Store) {
    let name = unique("writer-first");
    let (_, a) = rw(store, &name).await;
    let (_, b) = rw(store, &name).await;
    let (_, c) = rw(store, &name).await;
    let reader = a.read().await.expect("a plain reader");
    let writer = tokio::spawn(async move { b.write().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished());
    assert!(
        c.try_upgradeable_read().await.expect("works").is_none(),
        "a writer waits"
    );
    assert!(reader.release().await.expect("works"));
    let write = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .expect("the writer gets in")
        .expect("the task")
        .expect("the write lock");
    assert!(write.release().await.expect("works"));
    let upgradeable = c.try_upgradeable_read().await.expect("works").expect("free");
    assert!(upgradeable.release().await.expect("works"));
}

/// One test per check and dialect.
macro_rules! on_every_dialect {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::sqlite()).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::mysql().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::postgres().await).await;
                }
            )*
        }
    };
}

on_every_dialect!(
    one_upgradeable_reader_beside_plain_readers,
    an_upgrade_waits_for_readers_and_no_writer_comes_between,
    an_upgrade_without_readers_turns_the_hold_into_the_write_hold,
    dropping_the_guard_frees_the_lock,
    a_waiting_writer_keeps_upgradeable_readers_out,
);
