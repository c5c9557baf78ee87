//! Notes beside a mutex hold and leader election on a real etcd: a note is stored only by the
//! holder, read with that holder only, kept through renewals; campaign, leader, resign and
//! observe through `LockClient::election`, one leader at a time, terms that grow, and a
//! leader whose session ends replaced at once.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{
    AcquireOptions, Attempt, DistributedLock, FencingToken, Lease, LockClient, LockName, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_etcd::EtcdLock;
use distlock_testkit::shared;
use futures::StreamExt;
use tokio::time::timeout;

/// How long anything that should happen may take on a loaded machine.
const SOON: Duration = Duration::from_secs(15);

async fn url() -> String {
    tokio::task::spawn_blocking(shared::etcd_url)
        .await
        .expect("joined")
        .expect("the shared etcd starts (run scripts/install-test-deps)")
}

fn fresh(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", OwnerToken::new())).expect("a name")
}

async fn take(backend: &EtcdLock, name: &LockName) -> Lease {
    let attempt = Attempt::mutex(name.clone(), OwnerToken::new(), support::LEASE_TTL);
    match backend.attempt(&attempt).await.expect("attempt") {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("{name} is held: {holder:?}"),
    }
}

async fn note_of(backend: &EtcdLock, name: &LockName) -> (Option<String>, Option<String>) {
    let state = backend
        .inspect(name, Primitive::Mutex)
        .await
        .expect("inspect")
        .into_lock();
    (state.owner, state.note)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_is_read_with_its_holder_through_renewals_and_gone_with_it() {
    let url = url().await;
    let backend = support::connect(&url).await;
    assert!(backend.capabilities().notes, "etcd declares notes");
    let name = fresh("note");
    let lease = take(&backend, &name).await;
    assert_eq!(
        note_of(&backend, &name).await.1,
        None,
        "no note before one is set"
    );
    assert!(backend.set_note(&lease, "10.0.0.7:8080").await.expect("set_note"));
    let owner = lease.owner().to_string();
    assert_eq!(
        note_of(&backend, &name).await,
        (Some(owner.clone()), Some("10.0.0.7:8080".to_owned())),
        "the holder and its note"
    );
    assert!(backend.set_note(&lease, "10.0.0.7:9090").await.expect("set_note"));
    let renewed = backend.renew(std::slice::from_ref(&lease)).await;
    assert!(
        matches!(renewed.as_slice(), [Ok(Some(_))]),
        "the hold is renewed after its note changed: {renewed:?}"
    );
    assert_eq!(
        note_of(&backend, &name).await,
        (Some(owner), Some("10.0.0.7:9090".to_owned())),
        "the note replaced, kept through the renewal"
    );

    assert!(backend.release(&lease).await.expect("released"));
    assert_eq!(note_of(&backend, &name).await, (None, None), "free: no note");
    assert!(
        !backend.set_note(&lease, "late").await.expect("set_note"),
        "a released hold stores no note"
    );
    assert_eq!(note_of(&backend, &name).await, (None, None), "nothing stored");

    let next = take(&backend, &name).await;
    assert_eq!(
        note_of(&backend, &name).await,
        (Some(next.owner().to_string()), None),
        "a later holder never shows an earlier holder's note"
    );
    assert!(backend.release(&next).await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_sets_no_note_and_changes_nothing() {
    let url = url().await;
    let first = support::connect(&url).await;
    let second = support::connect(&url).await;
    let name = fresh("stale-note");
    let stale = take(&first, &name).await;
    assert!(first.set_note(&stale, "old").await.expect("set_note"));
    assert!(first.release(&stale).await.expect("released"));
    let holder = take(&second, &name).await;
    assert!(second.set_note(&holder, "new").await.expect("set_note"));
    assert!(
        !first.set_note(&stale, "stale").await.expect("set_note"),
        "the stale owner is refused"
    );
    assert_eq!(
        note_of(&first, &name).await,
        (Some(holder.owner().to_string()), Some("new".to_owned())),
        "the holder's note is untouched"
    );
    // A lease without a key (the cleanup of an ambiguous attempt) holds nothing.
    let keyless = Lease::session_bound(name.clone(), holder.owner(), 1, tokio::time::Instant::now());
    assert!(!second.set_note(&keyless, "x").await.expect("set_note"));
    assert!(second.release(&holder).await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_is_gone_when_its_holders_session_ends() {
    let url = url().await;
    let first = support::connect(&url).await;
    let other = support::connect(&url).await;
    let name = fresh("note-session");
    let lease = take(&first, &name).await;
    assert!(first.set_note(&lease, "old").await.expect("set_note"));
    let id = format!("{:x}", first.lease_id().expect("a lease"));
    support::etcdctl(&url, &["lease", "revoke", &id])
        .await
        .expect("etcdctl revokes the lease");
    let next = take(&other, &name).await;
    assert_eq!(
        note_of(&other, &name).await,
        (Some(next.owner().to_string()), None),
        "the next holder does not show the expired holder's note"
    );
    assert!(!first.set_note(&lease, "again").await.expect("set_note"));
    assert!(other.release(&next).await.expect("released"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaign_leader_resign_and_observe() {
    let url = url().await;
    let one = LockClient::new(support::connect(&url).await);
    let two = LockClient::new(support::connect(&url).await);
    let name = fresh("election");
    let election = one.election(name.clone()).expect("elections on etcd");
    let rival = two.election(name).expect("elections on etcd");
    let mut changes = rival.observe();
    assert!(
        election.leader().await.expect("leader").is_none(),
        "no leader yet"
    );

    let first = election.campaign("a:1").await.expect("campaign");
    let leader = rival.leader().await.expect("leader").expect("a leader");
    assert_eq!(leader.value, "a:1");
    assert_eq!(leader.term, first.term());
    assert!(first.term().is_some(), "etcd fences: a term");
    assert!(
        rival.try_campaign("b:2").await.expect("try").is_none(),
        "one leader at a time"
    );
    let seen = timeout(SOON, changes.next())
        .await
        .expect("a change")
        .expect("a stream");
    assert_eq!(seen.expect("read").value, "a:1");

    let waiting = tokio::spawn(async move { rival.campaign("b:2").await.expect("campaign") });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the rival waits while a:1 leads");
    assert!(first.resign().await.expect("resigned"));
    let second = timeout(SOON, waiting)
        .await
        .expect("the rival leads")
        .expect("joined");
    let seen = timeout(SOON, changes.next())
        .await
        .expect("a change")
        .expect("a stream");
    let seen = seen.expect("read");
    assert_eq!(seen.value, "b:2");
    assert!(
        seen.term > leader.term,
        "terms grow: {:?} after {:?}",
        seen.term,
        leader.term
    );
    assert_eq!(
        election.leader().await.expect("leader").map(|l| l.value),
        Some("b:2".to_owned())
    );
    assert!(second.resign().await.expect("resigned"));
    assert!(election.leader().await.expect("leader").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_among_candidates_with_growing_terms() {
    let url = url().await;
    let name = fresh("candidates");
    let in_office = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<FencingToken>>> = Arc::default();
    let mut candidates = Vec::new();
    for candidate in 0..4 {
        let client = LockClient::new(support::connect(&url).await);
        let election = client.election(name.clone()).expect("elections");
        let (in_office, terms) = (in_office.clone(), terms.clone());
        candidates.push(tokio::spawn(async move {
            let opts = AcquireOptions::new().wait_for(Duration::from_secs(120));
            for round in 0..3 {
                let value = format!("candidate-{candidate}-{round}");
                let leadership = election
                    .campaign_with(value.clone(), &opts)
                    .await
                    .expect("campaign");
                assert_eq!(in_office.fetch_add(1, Ordering::SeqCst), 0, "two leaders at once");
                let term = leadership.term().expect("a term");
                terms.lock().expect("terms").push(term);
                let leader = election.leader().await.expect("leader").expect("a leader");
                assert_eq!((leader.value, leader.term), (value, Some(term)));
                tokio::time::sleep(Duration::from_millis(30)).await;
                in_office.fetch_sub(1, Ordering::SeqCst);
                assert!(leadership.resign().await.expect("resigned"), "still led");
            }
        }));
    }
    for candidate in candidates {
        candidate.await.expect("a candidate finished");
    }
    let terms = terms.lock().expect("terms").clone();
    assert_eq!(terms.len(), 12);
    assert!(
        terms.windows(2).all(|pair| pair[0] < pair[1]),
        "each leader's term is above every earlier one's: {terms:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_session_ends_is_replaced_within_the_ttl() {
    let url = url().await;
    let backend = support::connect(&url).await;
    let one = LockClient::new(backend.clone());
    let two = LockClient::new(support::connect(&url).await);
    let name = fresh("session-ends");
    let leader = one
        .election(name.clone())
        .expect("elections")
        .campaign("a")
        .await
        .expect("campaign");
    let rival = two.election(name).expect("elections");
    let waiting = {
        let rival = rival.clone();
        tokio::spawn(async move { rival.campaign("b").await.expect("campaign") })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "b waits while a leads");
    // The leader's session ends as when its process stops keeping its lease alive.
    let id = format!("{:x}", backend.lease_id().expect("a lease"));
    support::etcdctl(&url, &["lease", "revoke", &id])
        .await
        .expect("etcdctl revokes the lease");
    let second = timeout(support::LEASE_TTL, waiting)
        .await
        .expect("b leads within the TTL")
        .expect("joined");
    timeout(SOON, leader.lost())
        .await
        .expect("a hears it lost office");
    let now = rival.leader().await.expect("leader").expect("a leader");
    assert_eq!(now.value, "b");
    assert!(now.term > leader.term(), "the new term is above the old one");
    assert!(second.resign().await.expect("resigned"));
}
