//! Notes beside a mutex hold, and leader election on them, against a real memcached: a note
//! is stored only for the holder, read back only while that same hold lives, kept across
//! renewals, and never shown for a later holder.

use crate::support;

use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockName, OwnerToken,
    Primitive, TryAcquire,
};
use distlock_memcached::{MemcachedLock, MAX_NOTE_BYTES};
use futures::StreamExt;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(30);

/// A name no other test (or earlier run against the same server) uses.
fn fresh(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{}", OwnerToken::new())).expect("valid")
}

async fn shared() -> MemcachedLock {
    support::lock(&support::shared_url().await)
}

async fn take(lock: &MemcachedLock, name: &LockName, ttl: Duration) -> Lease {
    match lock
        .try_acquire(name, OwnerToken::new(), ttl)
        .await
        .expect("the attempt works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("{name:?} should be free: {holder:?}"),
    }
}

async fn note_of(lock: &MemcachedLock, name: &LockName) -> Option<String> {
    let state = lock
        .inspect(name, Primitive::Mutex)
        .await
        .expect("inspect works")
        .into_lock();
    state.note
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memcached_backend_offers_notes() {
    assert!(shared().await.capabilities().notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_is_read_back_while_its_holder_holds_and_survives_renewals() {
    let lock = shared().await;
    let name = fresh("note-basic");
    let lease = take(&lock, &name, Duration::from_secs(2)).await;
    assert_eq!(note_of(&lock, &name).await, None, "no note before one is set");
    assert!(lock.set_note(&lease, "10.0.0.7:8080").await.expect("works"));
    let state = lock.inspect_lock(&name).await.expect("works");
    assert_eq!(state.owner, Some(lease.owner().to_string()));
    assert_eq!(state.note.as_deref(), Some("10.0.0.7:8080"));
    // Notes may hold spaces, newlines and any UTF-8, and a new one replaces the old.
    let odd = "host a\r\nport 8080 é";
    assert!(lock.set_note(&lease, odd).await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some(odd));
    // Renewed past its first TTL (and the server's slack), the hold keeps its note.
    let mut lease = lease;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        lease = lock
            .extend(&lease, Duration::from_secs(2))
            .await
            .expect("works")
            .expect("still ours");
        assert_eq!(note_of(&lock, &name).await.as_deref(), Some(odd));
    }
    // The longest note fits; a longer one is a typed error that changes nothing.
    let longest = "n".repeat(MAX_NOTE_BYTES);
    assert!(lock.set_note(&lease, &longest).await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some(longest.as_str()));
    let too_long = lock.set_note(&lease, &"n".repeat(MAX_NOTE_BYTES + 1)).await;
    assert!(
        matches!(too_long, Err(Error::InvalidOptions { .. })),
        "{too_long:?}"
    );
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some(longest.as_str()));
    assert!(lock.release(&lease).await.expect("works"));
    assert_eq!(note_of(&lock, &name).await, None, "a free lock shows no note");
    let next = take(&lock, &name, LONG).await;
    assert_eq!(
        note_of(&lock, &name).await,
        None,
        "the next holder never shows the earlier holder's note"
    );
    assert!(lock.set_note(&next, "b").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("b"));
    assert!(lock.release(&next).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owners_note_is_refused_and_changes_nothing() {
    let lock = shared().await;
    let name = fresh("note-stale");
    // Nobody holds: nothing to leave a note beside.
    let nobody = Lease::new(name.clone(), OwnerToken::new(), LONG, Instant::now());
    assert!(!lock.set_note(&nobody, "x").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await, None);
    let old = take(&lock, &name, Duration::from_secs(1)).await;
    assert!(lock.set_note(&old, "old").await.expect("works"));
    // A stranger's lease (another owner) leaves nothing.
    let stranger = Lease::new(name.clone(), OwnerToken::new(), LONG, Instant::now());
    assert!(!lock.set_note(&stranger, "stranger").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("old"));
    // The old hold expires on the server (TTL 1 s plus up to 2 s of slack); a new holder
    // comes in and shows no note, and the old owner can no longer leave one.
    let started = Instant::now();
    let new = loop {
        match lock
            .try_acquire(&name, OwnerToken::new(), LONG)
            .await
            .expect("works")
        {
            TryAcquire::Acquired(lease) => break lease,
            TryAcquire::Held(_) => {
                assert!(started.elapsed() < Duration::from_secs(10), "never expired");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(note_of(&lock, &name).await, None, "not the expired holder's note");
    assert!(!lock.set_note(&old, "late").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await, None, "the stale set changed nothing");
    assert!(lock.set_note(&new, "new").await.expect("works"));
    assert!(!lock.set_note(&old, "late again").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("new"));
    // A semaphore's or read-write lock's lease is no mutex hold.
    let permit = new.clone().with_kind(distlock_core::LockKind::permit(1));
    assert!(!lock.set_note(&permit, "permit").await.expect("works"));
    assert_eq!(note_of(&lock, &name).await.as_deref(), Some("new"));
    assert!(lock.release(&new).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_has_one_leader_whose_value_everyone_reads() {
    let url = support::shared_url().await;
    let client = LockClient::new(support::lock(&url));
    let name = format!("election-{}", OwnerToken::new());
    let election = client.election(name.as_str()).expect("notes are offered");
    assert!(election.leader().await.expect("works").is_none());
    let mut changes = election.observe();
    let first = election.campaign("a:1").await.expect("elected");
    let leader = election.leader().await.expect("works").expect("a leader");
    assert_eq!(leader.value, "a:1");
    assert_eq!(leader.term, first.term());
    assert_eq!(leader.owner, first.guard().owner().to_string());
    let seen = tokio::time::timeout(LONG, changes.next())
        .await
        .expect("a change in time")
        .expect("a change")
        .expect("no error");
    assert_eq!(seen.value, "a:1");
    // Another client of the same server sees the same leader and cannot lead meanwhile.
    let other = LockClient::new(support::lock(&url));
    let rival = other.election(name.as_str()).expect("notes are offered");
    assert!(rival.try_campaign("b:2").await.expect("works").is_none());
    assert_eq!(
        rival.leader().await.expect("works").map(|l| l.value).as_deref(),
        Some("a:1")
    );
    assert!(first.resign().await.expect("works"));
    assert!(election.leader().await.expect("works").is_none());
    let second = rival.campaign("b:2").await.expect("elected");
    let seen = tokio::time::timeout(LONG, changes.next())
        .await
        .expect("a change in time")
        .expect("a change")
        .expect("no error");
    assert_eq!(seen.value, "b:2");
    assert!(
        second.term() > leader.term,
        "terms increase: {:?} then {:?}",
        leader.term,
        second.term()
    );
    assert!(second.resign().await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_take_office_one_at_a_time_with_rising_terms() {
    let url = support::shared_url().await;
    let name = format!("election-many-{}", OwnerToken::new());
    let in_office = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let terms = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(5), Duration::from_millis(50));
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let client = LockClient::new(support::lock(&url));
            let (name, in_office, terms, opts) =
                (name.clone(), in_office.clone(), terms.clone(), opts.clone());
            tokio::spawn(async move {
                let election = client.election(name.as_str()).expect("notes are offered");
                for round in 0..3 {
                    let value = format!("candidate-{i}-{round}");
                    let leadership = election
                        .campaign_with(value.clone(), &opts)
                        .await
                        .expect("elected");
                    assert_eq!(
                        in_office.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                        0,
                        "two leaders"
                    );
                    let leader = election.leader().await.expect("works").expect("a leader");
                    assert_eq!(leader.value, value, "the store shows this leader's value");
                    terms
                        .lock()
                        .expect("not poisoned")
                        .push(leadership.term().expect("a term"));
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    in_office.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    assert!(leadership.resign().await.expect("works"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("the candidate finished");
    }
    let terms = terms.lock().expect("not poisoned").clone();
    assert_eq!(terms.len(), 15);
    assert!(
        terms.windows(2).all(|pair| pair[0] < pair[1]),
        "each term above the last: {terms:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_stops_renewing_is_replaced_within_its_ttl() {
    let url = support::shared_url().await;
    let name = format!("election-dead-{}", OwnerToken::new());
    let ttl = Duration::from_secs(2);
    // The leader's process stops: elected as a campaign elects (the mutex of the election's
    // name, its value as the hold's note), then its guard is leaked, so nothing renews it.
    let dead = LockClient::new(support::lock(&url));
    let guard = dead
        .acquire_with(name.as_str(), &AcquireOptions::new().ttl(ttl))
        .await
        .expect("elected");
    assert!(dead
        .backend()
        .set_note(&guard.lease(), "dead:1")
        .await
        .expect("works"));
    let dead_term = guard.fencing_token();
    let _lease = guard.leak();
    let live = LockClient::new(support::lock(&url));
    let election = live.election(name.as_str()).expect("notes are offered");
    let leader = election.leader().await.expect("works").expect("a leader");
    assert_eq!((leader.value.as_str(), leader.term), ("dead:1", dead_term));
    let started = Instant::now();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(30));
    let next = election.campaign_with("live:2", &opts).await.expect("elected");
    // memcached frees an abandoned hold between its TTL and 2 s after it; the waiter polls.
    let waited = started.elapsed();
    assert!(
        waited < ttl + Duration::from_secs(4),
        "took office after {waited:?}"
    );
    let leader = election.leader().await.expect("works").expect("a leader");
    assert_eq!(leader.value, "live:2");
    assert!(leader.term > dead_term, "{:?} after {dead_term:?}", leader.term);
    assert!(next.resign().await.expect("works"));
}

/// The old holder keeps writing its note while its hold expires and a new holder takes the
/// lock and writes its own: whatever the interleaving, the new holder's note stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_writing_on_never_replaces_the_next_holders_note() {
    let url = support::shared_url().await;
    for round in 0..3 {
        let name = fresh(&format!("note-race-{round}"));
        let (old_client, new_client) = (support::lock(&url), support::lock(&url));
        let old = take(&old_client, &name, Duration::from_secs(1)).await;
        let stale = {
            let (lock, old) = (old_client.clone(), old.clone());
            tokio::spawn(async move {
                let (mut stored, started) = (0u32, Instant::now());
                // Until the store no longer records it as the holder.
                while lock.set_note(&old, "old").await.expect("works") {
                    stored += 1;
                    assert!(
                        started.elapsed() < Duration::from_secs(15),
                        "a note was stored 15 s after a hold of 1 s"
                    );
                }
                stored
            })
        };
        let started = Instant::now();
        let new = loop {
            match new_client
                .try_acquire(&name, OwnerToken::new(), LONG)
                .await
                .expect("works")
            {
                TryAcquire::Acquired(lease) => break lease,
                TryAcquire::Held(_) => {
                    assert!(started.elapsed() < Duration::from_secs(10), "never expired");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        assert!(new_client.set_note(&new, "new").await.expect("works"));
        let stored = stale.await.expect("joined");
        assert!(stored > 0, "the old holder stored its note while it held");
        assert!(!old_client.set_note(&old, "old").await.expect("works"));
        assert_eq!(
            note_of(&new_client, &name).await.as_deref(),
            Some("new"),
            "round {round}"
        );
        assert!(new_client.release(&new).await.expect("works"));
    }
}
