//! Upgradeable reads on a real etcd: one at a time beside plain readers, an upgrade that waits
//! for the readers while keeping new ones out, no writer between the read and the write, and
//! the upgraded hold released whole.

use crate::support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, LockClient, LockKind, LockName, OwnerToken, Primitive, RwLock,
};
use distlock_etcd::EtcdLock;
use distlock_testkit::shared;
use tokio::time::{timeout, Instant};

/// How long anything that should happen may take on a loaded machine.
const SOON: Duration = Duration::from_secs(15);
/// How long something that must not happen is watched for.
const A_WHILE: Duration = Duration::from_millis(700);

async fn url() -> String {
    tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)")
}

async fn clients(url: &str) -> (LockClient, LockClient, EtcdLock) {
    let backend = support::connect(url).await;
    (
        LockClient::new(backend.clone()),
        LockClient::new(support::connect(url).await),
        backend,
    )
}

fn fresh(client: &LockClient, what: &str) -> RwLock {
    let name = LockName::new(format!("{what}-{}", OwnerToken::new())).expect("a name");
    client.rw_lock(name).expect("read-write locks")
}

fn wait(seconds: u64) -> AcquireOptions {
    AcquireOptions::new().wait_for(Duration::from_secs(seconds))
}

/// The kinds of the holds of `rw`, as `inspect` reports them, with their owners.
async fn holds(backend: &EtcdLock, rw: &RwLock) -> Vec<(LockKind, String)> {
    backend
        .inspect(rw.name(), Primitive::RwLock)
        .await
        .expect("inspect")
        .holders
        .into_iter()
        .map(|state| (state.kind, state.owner.unwrap_or_default()))
        .collect()
}

/// The keys left under the read-write lock `rw`.
async fn keys_left(url: &str, backend: &EtcdLock, rw: &RwLock) -> usize {
    let prefix = format!(
        "{}/rw-lock:{}/",
        backend.config().root(),
        rw.name().path_segment()
    );
    let listing = support::etcdctl(url, &["get", &prefix, "--prefix", "--keys-only"])
        .await
        .expect("etcdctl lists the keys");
    listing.lines().filter(|l| !l.trim().is_empty()).count()
}

async fn until_no_keys(url: &str, backend: &EtcdLock, rw: &RwLock) {
    let until = Instant::now() + SOON;
    while keys_left(url, backend, rw).await > 0 {
        assert!(Instant::now() < until, "keys left under the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upgradeable_reader_at_a_time_beside_plain_readers() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    assert!(
        backend.capabilities().upgradeable_reads,
        "etcd declares upgradeable reads"
    );
    let rw = fresh(&one, "one-at-a-time");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let upgradeable = rw.upgradeable_read().await.expect("upgradeable read");
    let reader = theirs
        .try_read()
        .await
        .expect("try")
        .expect("readers share with it");
    assert!(
        theirs.try_upgradeable_read().await.expect("try").is_none(),
        "one at a time"
    );
    assert!(
        theirs.try_write().await.expect("try").is_none(),
        "it keeps writers out"
    );
    let mut seen = holds(&backend, &rw).await;
    seen.sort_by_key(|(kind, _)| *kind == LockKind::Read);
    assert_eq!(
        seen,
        vec![
            (LockKind::UpgradeableRead, upgradeable.guard().owner().to_string()),
            (LockKind::Read, reader.owner().to_string()),
        ]
    );
    assert!(reader.release().await.expect("released"));
    assert!(upgradeable.release().await.expect("released"));
    let next = theirs
        .try_upgradeable_read()
        .await
        .expect("try")
        .expect("free again");
    assert!(next.release().await.expect("released"));
    until_no_keys(&url, &backend, &rw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_waits_for_readers_and_no_writer_gets_in_between() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    let rw = fresh(&one, "between");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let mut upgradeable = rw.upgradeable_read().await.expect("upgradeable read");
    let reader = theirs.try_read().await.expect("try").expect("readers share");
    let read_token = upgradeable.guard().fencing_token();
    let writer = {
        let theirs = theirs.clone();
        tokio::spawn(async move { theirs.write_with(&wait(60)).await.expect("the writer in the end") })
    };
    tokio::time::sleep(A_WHILE).await;
    assert!(!writer.is_finished(), "the writer waits for the readers");
    let upgrade = tokio::spawn(async move {
        upgradeable.upgrade_with(&wait(60)).await.expect("upgraded");
        upgradeable
    });
    tokio::time::sleep(A_WHILE).await;
    assert!(!upgrade.is_finished(), "the upgrade waits for the plain reader");
    assert!(
        theirs.try_read().await.expect("try").is_none(),
        "new readers wait"
    );
    assert!(reader.release().await.expect("released"));
    let upgraded = timeout(SOON, upgrade)
        .await
        .expect("upgraded once the reader left")
        .expect("joined");
    assert!(upgraded.is_upgraded());
    assert_eq!(upgraded.kind(), LockKind::Write);
    assert!(
        upgraded.guard().fencing_token() > read_token,
        "a new, greater token"
    );
    assert_eq!(
        holds(&backend, &rw).await,
        vec![(LockKind::Write, upgraded.guard().owner().to_string())],
        "one write hold, no upgradeable read"
    );
    tokio::time::sleep(A_WHILE).await;
    assert!(
        !writer.is_finished(),
        "the writer that waited all along is still out"
    );
    assert!(theirs.try_read().await.expect("try").is_none(), "readers are out");
    let token = upgraded.guard().fencing_token();
    assert!(upgraded.release().await.expect("released"));
    let writer = timeout(SOON, writer)
        .await
        .expect("the writer gets in after")
        .expect("joined");
    assert!(writer.fencing_token() > token, "tokens grow");
    assert!(writer.release().await.expect("released"));
    until_no_keys(&url, &backend, &rw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_writer_that_gives_up_stay_out_of_the_upgraded_lock() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    let rw = fresh(&one, "gives-up");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let mut upgradeable = rw.upgradeable_read().await.expect("upgradeable read");
    let reader = theirs.try_read().await.expect("try").expect("readers share");
    let writer = {
        let theirs = theirs.clone();
        tokio::spawn(async move { theirs.write_with(&wait(3)).await.is_err() })
    };
    tokio::time::sleep(A_WHILE).await;
    let late_reader = {
        let theirs = theirs.clone();
        tokio::spawn(async move { theirs.read_with(&wait(60)).await.expect("a read in the end") })
    };
    tokio::time::sleep(A_WHILE).await;
    assert!(!late_reader.is_finished(), "behind the waiting writer");
    assert!(reader.release().await.expect("released"));
    upgradeable.upgrade_with(&wait(30)).await.expect("upgraded");
    assert!(
        timeout(SOON, writer)
            .await
            .expect("the writer gives up")
            .expect("joined"),
        "the writer timed out"
    );
    tokio::time::sleep(A_WHILE).await;
    assert!(
        !late_reader.is_finished(),
        "the reader stays out of the upgraded lock"
    );
    assert!(upgradeable.release().await.expect("released"));
    let late_reader = timeout(SOON, late_reader)
        .await
        .expect("in after")
        .expect("joined");
    assert!(late_reader.release().await.expect("released"));
    until_no_keys(&url, &backend, &rw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_upgrade_after_the_readers_leave_and_release_frees_everything() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    let rw = fresh(&one, "try-upgrade");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let mut upgradeable = rw.upgradeable_read().await.expect("upgradeable read");
    let read_lease = upgradeable.guard().lease();
    let reader = theirs.try_read().await.expect("try").expect("readers share");
    assert!(!upgradeable.try_upgrade().await.expect("try"), "a reader holds");
    assert!(!upgradeable.is_upgraded());
    assert!(reader.release().await.expect("released"));
    assert!(upgradeable.try_upgrade().await.expect("try"), "no reader left");
    assert!(theirs.try_read().await.expect("try").is_none());
    assert!(theirs.try_upgradeable_read().await.expect("try").is_none());
    let renewed = backend.renew(&[read_lease, upgradeable.guard().lease()]).await;
    assert!(
        matches!(renewed.as_slice(), [Ok(None), Ok(Some(_))]),
        "the read lease is over, the write lease renews: {renewed:?}"
    );
    drop(upgradeable);
    until_no_keys(&url, &backend, &rw).await;
    let writer = theirs
        .try_write()
        .await
        .expect("try")
        .expect("free after the drop");
    assert!(writer.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_key_upgraded_without_its_write_key_goes_with_the_read_release() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    let rw = fresh(&one, "orphan");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let upgradeable = rw.upgradeable_read().await.expect("upgradeable read");
    let key = upgradeable.guard().lease().handle().expect("a key").to_owned();
    // What an upgrade granted while its caller went away leaves once its write key is
    // deleted behind it: the read key written again, alone.
    let owner = upgradeable.guard().owner().to_string();
    support::etcdctl(&url, &["put", &key, &owner, "--ignore-lease"])
        .await
        .expect("etcdctl writes the key again");
    assert!(
        theirs.try_write().await.expect("try").is_none(),
        "the key keeps writers out"
    );
    let _ = upgradeable.release().await.expect("released");
    until_no_keys(&url, &backend, &rw).await;
    let writer = theirs
        .try_write()
        .await
        .expect("try")
        .expect("free after the release");
    assert!(writer.release().await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_upgradeable_reader_stays_out_while_a_writer_waits() {
    let url = url().await;
    let (one, two, backend) = clients(&url).await;
    let rw = fresh(&one, "writer-waits");
    let theirs = two.rw_lock(rw.name().clone()).expect("read-write locks");
    let reader = rw.try_read().await.expect("try").expect("free");
    let writer = {
        let theirs = theirs.clone();
        tokio::spawn(async move { theirs.write_with(&wait(60)).await.expect("the writer in the end") })
    };
    tokio::time::sleep(A_WHILE).await;
    assert!(
        rw.try_upgradeable_read().await.expect("try").is_none(),
        "behind the waiting writer"
    );
    let upgradeable = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.upgradeable_read_with(&wait(60)).await.expect("in the end") })
    };
    tokio::time::sleep(A_WHILE).await;
    assert!(!upgradeable.is_finished(), "waits behind the writer");
    assert!(reader.release().await.expect("released"));
    let writer = timeout(SOON, writer)
        .await
        .expect("the writer first")
        .expect("joined");
    tokio::time::sleep(A_WHILE).await;
    assert!(!upgradeable.is_finished(), "out while the writer holds");
    let token = writer.fencing_token();
    assert!(writer.release().await.expect("released"));
    let upgradeable = timeout(SOON, upgradeable)
        .await
        .expect("in after the writer")
        .expect("joined");
    assert!(upgradeable.guard().fencing_token() > token, "tokens grow");
    assert!(upgradeable.release().await.expect("released"));
    until_no_keys(&url, &backend, &rw).await;
}
