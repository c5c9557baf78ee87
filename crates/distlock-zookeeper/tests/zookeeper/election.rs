//! Notes beside a mutex hold and leader election against the shared ZooKeeper server: the
//! note is the data of the holder's own lock node (Curator's `LeaderSelector` layout),
//! owner-checked, never shown for a later holder; campaign, leader, resign and observe through
//! [`LockClient::election`]; one leader at a time; terms that grow; a leader whose session
//! dies replaced within the session timeout.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    DistributedLock, DistributedLockExt, Lease, LockClient, LockName, OwnerToken, Primitive, TryAcquire,
};
use distlock_testkit::proxy::through_proxies;
use futures::StreamExt;
use support::ZkFixture;

const TTL: Duration = Duration::from_secs(10);

fn unique(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("zk-{label}-{}", &run[..12])).expect("valid")
}

async fn take(store: &distlock_zookeeper::ZooKeeperLock, name: &LockName) -> Lease {
    match store
        .try_acquire(name, OwnerToken::new(), TTL)
        .await
        .expect("the attempt works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("expected the lock free, found it held: {holder:?}"),
    }
}

/// A holder's note is stored as the data of its own lock node (what Curator's
/// `LeaderSelector.getLeader()` reads) and reported by `inspect`; the holder's owner is still
/// reported as its owner token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_is_the_data_of_the_holders_node() {
    let fixture = ZkFixture::shared().await;
    let store = support::connect(fixture.url()).await;
    let raw = support::raw(fixture.url()).await;
    let name = unique("note");
    let lease = take(&store, &name).await;
    assert!(store.capabilities().notes, "ZooKeeper declares notes");
    let before = store
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    assert_eq!(before.note, None, "no note before one is set");

    assert!(store
        .set_note(&lease, "10.0.0.7:8080")
        .await
        .expect("set_note works"));
    let state = store
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    assert_eq!(state.note.as_deref(), Some("10.0.0.7:8080"));
    assert_eq!(state.owner, Some(lease.owner().to_string()));
    assert_eq!(state.fencing, lease.fencing_token());
    let node = lease.handle().expect("the node path");
    let (data, _) = raw.get_data(node).await.expect("the holder's node");
    assert_eq!(data, b"10.0.0.7:8080", "the note is the node's data");

    // Replaced by a second note; renewals keep it.
    assert!(store
        .set_note(&lease, "10.0.0.7:9090")
        .await
        .expect("set_note works"));
    let renewed = store.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(Some(_))]), "{renewed:?}");
    let state = store
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    assert_eq!(state.note.as_deref(), Some("10.0.0.7:9090"));
    assert!(store.release(&lease).await.expect("released"));
}

/// Only the holder's own lease stores a note: a released lease, a lease of another owner and
/// a waiter's lease return false and change nothing; a later holder never shows an earlier
/// holder's note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_sets_no_note_and_a_new_holder_shows_none() {
    let fixture = ZkFixture::shared().await;
    let first = support::connect(fixture.url()).await;
    let second = support::connect(fixture.url()).await;
    let name = unique("note-stale");
    let old = take(&first, &name).await;
    assert!(first.set_note(&old, "old leader").await.expect("set_note works"));

    // Another owner, on another session, claims the holder's node: refused.
    let forged = Lease::session_bound(name.clone(), OwnerToken::new(), 1, tokio::time::Instant::now())
        .with_handle(old.handle().expect("a path").to_owned());
    assert!(!second.set_note(&forged, "usurper").await.expect("set_note works"));
    assert_eq!(
        first
            .inspect(&name, Primitive::Mutex)
            .await
            .expect("inspect")
            .into_lock()
            .note
            .as_deref(),
        Some("old leader")
    );

    assert!(first.release(&old).await.expect("released"));
    assert!(!first.set_note(&old, "too late").await.expect("set_note works"));
    let new = take(&second, &name).await;
    let state = second
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    assert_eq!(state.owner, Some(new.owner().to_string()));
    assert_eq!(
        state.note, None,
        "the earlier holder's note is gone with its hold"
    );
    assert!(!first.set_note(&old, "too late").await.expect("set_note works"));
    assert_eq!(
        second
            .inspect(&name, Primitive::Mutex)
            .await
            .expect("inspect")
            .into_lock()
            .note,
        None
    );
    assert!(second.set_note(&new, "new leader").await.expect("set_note works"));
    assert_eq!(
        second
            .inspect(&name, Primitive::Mutex)
            .await
            .expect("inspect")
            .into_lock()
            .note
            .as_deref(),
        Some("new leader")
    );
    assert!(second.release(&new).await.expect("released"));
    let free = second
        .inspect(&name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    assert_eq!((free.owner, free.note), (None, None));
}

/// Campaign, leader, resign and observe through the client: the leader's value and term are
/// read back, a second candidate waits until the first resigns, and the observer sees both
/// leaders in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_leader_resign_observe() {
    let fixture = ZkFixture::shared().await;
    let a = LockClient::new(support::connect(fixture.url()).await);
    let b = LockClient::new(support::connect(fixture.url()).await);
    let reader = LockClient::new(support::connect(fixture.url()).await);
    let name = unique("election");
    let watcher = reader.election(&name).expect("ZooKeeper offers elections");
    assert!(watcher.leader().await.expect("leader works").is_none());
    let mut changes = watcher.observe();

    let first = a
        .election(&name)
        .expect("an election")
        .campaign("a:1")
        .await
        .expect("leads");
    let leader = watcher.leader().await.expect("leader works").expect("a leader");
    assert_eq!(leader.value, "a:1");
    assert_eq!(leader.term, first.term());
    assert!(leader.term.is_some(), "ZooKeeper fences");
    let seen = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the observer sees the first leader")
        .expect("a change")
        .expect("no error");
    assert_eq!(seen.value, "a:1");

    let second_election = b.election(&name).expect("an election");
    assert!(
        second_election
            .try_campaign("b:2")
            .await
            .expect("works")
            .is_none(),
        "one leader at a time"
    );
    let waiting = tokio::spawn(async move { second_election.campaign("b:2").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the second candidate waits");
    assert!(first.resign().await.expect("resigned"));
    let second = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the second candidate leads after the resignation")
        .expect("joined")
        .expect("leads");
    let seen = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("the observer sees the second leader")
        .expect("a change")
        .expect("no error");
    assert_eq!(seen.value, "b:2");
    assert!(
        seen.term > leader.term,
        "terms grow: {:?} then {:?}",
        leader.term,
        seen.term
    );
    assert_eq!(seen.term, second.term());
    assert!(second.resign().await.expect("resigned"));
    assert!(watcher.leader().await.expect("leader works").is_none());
}

/// Four candidates on four sessions campaign in turn three times each: never two leaders at
/// once, and every new leader's term is above every earlier one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_growing_terms() {
    let fixture = ZkFixture::shared().await;
    let name = unique("election-many");
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for candidate in 0..4 {
        let client = LockClient::new(support::connect(fixture.url()).await);
        let (leading, terms) = (leading.clone(), terms.clone());
        let name = name.clone();
        tasks.push(tokio::spawn(async move {
            let election = client.election(&name).expect("an election");
            for round in 0..3 {
                let leadership = election
                    .campaign(format!("candidate-{candidate}-{round}"))
                    .await
                    .expect("leads");
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders at once");
                let leader = election.leader().await.expect("leader works").expect("a leader");
                assert_eq!(leader.value, format!("candidate-{candidate}-{round}"));
                terms
                    .lock()
                    .expect("not poisoned")
                    .push(leadership.term().expect("a term"));
                tokio::time::sleep(Duration::from_millis(20)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                assert!(leadership.resign().await.expect("resigned"));
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the candidates finish")
            .expect("no candidate failed");
    }
    let terms = terms.lock().expect("not poisoned").clone();
    assert_eq!(terms.len(), 12);
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms grow: {terms:?}");
}

/// A leader cut off from the server stops renewing its session: the server expires it, its
/// node goes, and the waiting candidate leads within the session timeout (plus slack), with a
/// greater term; the old leader is told it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_within_the_session_timeout() {
    let fixture = ZkFixture::shared().await;
    let name = unique("election-dead");
    let (proxied, faults) = through_proxies(fixture.url()).expect("the fault proxy starts");
    let doomed = LockClient::new(support::connect(&proxied).await);
    let successor = LockClient::new(support::connect(fixture.url()).await);
    let old = doomed
        .election(&name)
        .expect("an election")
        .campaign("doomed")
        .await
        .expect("leads");
    let next_election = successor.election(&name).expect("an election");
    let waiting = tokio::spawn(async move { next_election.campaign("successor").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the successor waits");
    let cut_at = Instant::now();
    faults.blackhole();
    let new = tokio::time::timeout(support::SESSION_TIMEOUT * 4, waiting)
        .await
        .expect("the successor leads once the dead leader's session expires")
        .expect("joined")
        .expect("leads");
    let taken_after = cut_at.elapsed();
    println!("dead leader replaced after {taken_after:?}");
    assert!(taken_after < support::SESSION_TIMEOUT + Duration::from_secs(3));
    assert!(
        old.is_lost(),
        "the old leader knows it lost before the successor leads"
    );
    assert!(new.term() > old.term());
    let leader = successor
        .election(&name)
        .expect("an election")
        .leader()
        .await
        .expect("leader works")
        .expect("a leader");
    assert_eq!(leader.value, "successor");
    assert!(new.resign().await.expect("resigned"));
    faults.heal();
}

/// Curator's `LeaderSelector` layout, both ways: a participant that leads with a protected
/// node whose data is its id (as `LeaderSelector` creates it) is read back as the leader with
/// that value, and a candidate of ours queues behind it and leads once its node is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_selector_participant_is_read_as_the_leader() {
    let fixture = ZkFixture::shared().await;
    let raw = support::raw(fixture.url()).await;
    let client = LockClient::new(support::connect(fixture.url()).await);
    let store = support::connect(fixture.url()).await;
    let name = unique("selector");
    let parent = store.lock_path(&name);
    let container = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    raw.mkdir(&parent, &container).await.expect("the parent");
    let mode =
        zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
    let protected = format!("{parent}/_c_{}-lock-", uuid::Uuid::new_v4());
    let (_, sequence) = raw
        .create(&protected, b"participant-7", &mode)
        .await
        .expect("the participant's node");
    let election = client.election(&name).expect("an election");
    let leader = election.leader().await.expect("leader works").expect("a leader");
    assert_eq!(leader.value, "participant-7");
    let ours = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("ours").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!ours.is_finished(), "our candidate queues behind the participant");
    raw.delete(&format!("{protected}{sequence}"), None)
        .await
        .expect("the participant resigns");
    let leadership = tokio::time::timeout(Duration::from_secs(10), ours)
        .await
        .expect("our candidate leads")
        .expect("joined")
        .expect("leads");
    assert_eq!(
        election.leader().await.expect("leader works").map(|l| l.value),
        Some("ours".to_owned())
    );
    assert!(leadership.resign().await.expect("resigned"));
}
