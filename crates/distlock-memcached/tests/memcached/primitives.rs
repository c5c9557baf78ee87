//! Semaphores and read-write locks against a real memcached: one CAS-guarded item per object,
//! holds ended by the server's clock, and what a restart or a vanished item does to holders.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind, LockName,
    LossReason, OwnerToken, Primitive, TryAcquire,
};
use distlock_memcached::MemcachedLock;
use distlock_testkit::MemcachedOptions;
use tokio::time::Instant;

/// A name no other test (or earlier run against the same server) uses.
fn fresh(prefix: &str) -> LockName {
    LockName::new(format!("{prefix}-{}", OwnerToken::new())).expect("valid")
}

async fn shared() -> MemcachedLock {
    support::lock(&support::shared_url().await)
}

fn permits(n: u32) -> LockKind {
    LockKind::Permit {
        permits: n,
        weight: 1,
    }
}

async fn attempt(lock: &MemcachedLock, name: &LockName, kind: LockKind, ttl: Duration) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), ttl, None)
        .await
        .expect("the attempt works")
}

async fn take(lock: &MemcachedLock, name: &LockName, kind: LockKind, ttl: Duration) -> Lease {
    match attempt(lock, name, kind, ttl).await {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(holder) => panic!("{kind} of {name:?} should be free: {holder:?}"),
    }
}

async fn refused(lock: &MemcachedLock, name: &LockName, kind: LockKind) -> distlock_core::Holder {
    match attempt(lock, name, kind, Duration::from_secs(30)).await {
        TryAcquire::Held(holder) => holder,
        TryAcquire::Acquired(lease) => panic!("{kind} of {name:?} should be refused, got {lease:?}"),
    }
}

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_admits_more_than_its_permits_under_contention() {
    let url = support::shared_url().await;
    let name = fresh("sem-exact");
    let current = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(std::sync::Mutex::new(Vec::new()));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(2), Duration::from_millis(20));
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            // A client (and connection pool) of its own per task: the races are between clients.
            let client = LockClient::new(support::lock(&url));
            let (name, current, most, tokens, opts) = (
                name.clone(),
                current.clone(),
                most.clone(),
                tokens.clone(),
                opts.clone(),
            );
            tokio::spawn(async move {
                let semaphore = client.semaphore(&name, 3).expect("a semaphore");
                for _ in 0..4 {
                    let guard = semaphore.acquire_with(&opts).await.expect("a permit");
                    let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokens
                        .lock()
                        .expect("not poisoned")
                        .push(guard.fencing_token().expect("a token"));
                    tokio::time::sleep(Duration::from_millis(25)).await;
                    current.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("released"), "still held at release");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("the task finished");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "never more than 3 holders, and 3 at once"
    );
    let mut tokens = tokens.lock().expect("not poisoned").clone();
    let count = tokens.len();
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), count, "every permit got its own fencing token");
    assert_eq!(count, 48);
    let lock = support::lock(&url);
    assert!(lock
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works")
        .is_empty());
}

/// Twelve clients race for the same free semaphore at the same instant: exactly its permits
/// win, however the CAS races fall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_attempts_win_exactly_the_permits() {
    let url = support::shared_url().await;
    for round in 0..5 {
        let name = fresh(&format!("sem-race-{round}"));
        let start = Arc::new(tokio::sync::Barrier::new(12));
        let attempts: Vec<_> = (0..12)
            .map(|_| {
                let (lock, name, start) = (support::lock(&url), name.clone(), start.clone());
                tokio::spawn(async move {
                    lock.ping().await.expect("connected");
                    start.wait().await;
                    attempt(&lock, &name, permits(3), LONG).await
                })
            })
            .collect();
        let mut won = 0;
        for outcome in attempts {
            if let TryAcquire::Acquired(_) = outcome.await.expect("joined") {
                won += 1;
            }
        }
        assert_eq!(won, 3, "round {round}");
        let holders = support::lock(&url)
            .inspect_holders(&name, Primitive::Semaphore)
            .await
            .expect("works");
        assert_eq!(holders.len(), 3);
        assert!(holders.iter().all(|h| h.kind == permits(3)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_permit_count_is_refused_while_holders_live() {
    let lock = shared().await;
    let name = fresh("sem-mismatch");
    let held = take(&lock, &name, permits(3), LONG).await;
    let outcome = lock
        .try_acquire_kind(&name, permits(5), OwnerToken::new(), LONG, None)
        .await;
    match outcome {
        Err(Error::PermitsMismatch {
            name: n,
            stored,
            asked,
        }) => {
            assert_eq!((n.as_str(), stored, asked), (name.as_str(), 3, 5));
        }
        other => panic!("expected PermitsMismatch, got {other:?}"),
    }
    let holders = lock
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works");
    assert_eq!(holders.len(), 1, "the refused attempt changed nothing");
    assert_eq!(holders[0].owner, Some(held.owner().to_string()));
    assert!(lock.release(&held).await.expect("works"));
    // No live holder: a new count is accepted.
    let five = take(&lock, &name, permits(5), LONG).await;
    assert_eq!(five.kind(), permits(5));
    // Counts the item cannot hold, or no permit at all, are refused before anything is sent.
    let too_many = lock
        .try_acquire_kind(&fresh("sem-huge"), permits(513), OwnerToken::new(), LONG, None)
        .await;
    assert!(
        matches!(too_many, Err(Error::NotSupported { .. })),
        "{too_many:?}"
    );
    let none = lock
        .try_acquire_kind(&name, permits(0), OwnerToken::new(), LONG, None)
        .await;
    assert!(matches!(none, Err(Error::InvalidOptions { .. })), "{none:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_releases_and_extends_nothing() {
    let lock = shared().await;
    let name = fresh("sem-owner");
    let held = take(&lock, &name, permits(1), LONG).await;
    let stranger = Lease::new(name.clone(), OwnerToken::new(), LONG, Instant::now()).with_kind(permits(1));
    assert!(!lock.release(&stranger).await.expect("works"));
    assert!(lock.extend(&stranger, LONG).await.expect("works").is_none());
    // The same owner on another primitive of the same name holds nothing either.
    let elsewhere = Lease::new(name.clone(), held.owner(), LONG, Instant::now()).with_kind(LockKind::Read);
    assert!(!lock.release(&elsewhere).await.expect("works"));
    assert!(!lock
        .release(&held.clone().with_kind(LockKind::Exclusive))
        .await
        .expect("works"));
    let holders = lock
        .inspect_holders(&name, Primitive::Semaphore)
        .await
        .expect("works");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].owner, Some(held.owner().to_string()));
    // The owner itself, even without any handle (the ambiguous-outcome cleanup's lease).
    let cleanup = Lease::new(name.clone(), held.owner(), LONG, Instant::now()).with_kind(permits(1));
    assert!(lock.release(&cleanup).await.expect("works"));
    assert!(!lock.release(&held).await.expect("works"), "released once only");
    take(&lock, &name, permits(1), LONG).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_permit_comes_free_on_the_servers_clock_not_before_the_local_deadline() {
    let lock = shared().await;
    let name = fresh("sem-expiry");
    let ttl = Duration::from_secs(1);
    let stale = take(&lock, &name, permits(1), ttl).await;
    let deadline = stale.valid_until().expect("a deadline");
    let holder = refused(&lock, &name, permits(1)).await;
    let hint = holder.remaining.expect("the holder's expiry");
    assert!(hint <= Duration::from_secs(3), "{hint:?}");
    assert_eq!(holder.owner, Some(stale.owner().to_string()));
    let started = Instant::now();
    let next = loop {
        match attempt(&lock, &name, permits(1), LONG).await {
            TryAcquire::Acquired(lease) => break lease,
            TryAcquire::Held(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(6),
                    "the permit never came free"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(
        Instant::now() >= deadline,
        "the permit came free before the holder's local deadline"
    );
    assert!(next.fencing_token() > stale.fencing_token());
    assert!(lock.extend(&stale, LONG).await.expect("works").is_none());
    assert!(!lock.release(&stale).await.expect("works"));
    assert!(
        lock.release(&next).await.expect("works"),
        "the next holder was untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_permit_and_tokens_keep_increasing_after_the_last_release() {
    let lock = shared().await;
    let name = fresh("sem-renew");
    let first = take(&lock, &name, permits(2), Duration::from_secs(1)).await;
    let second = take(&lock, &name, permits(2), Duration::from_secs(1)).await;
    let mutex = match lock
        .try_acquire(&name, OwnerToken::new(), Duration::from_secs(1))
        .await
        .expect("works")
    {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("the mutex of the same name is its own object: {h:?}"),
    };
    // Renewed together (one rewrite for both permits, the mutex beside them) past their TTL.
    let mut leases = vec![first, second, mutex];
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let renewed = lock.renew(&leases).await;
        leases = renewed
            .into_iter()
            .map(|r| r.expect("works").expect("still held"))
            .collect();
    }
    assert_eq!(
        refused(&lock, &name, permits(2))
            .await
            .remaining
            .map(|d| d <= Duration::from_secs(3)),
        Some(true)
    );
    // In the same batch, a stranger's lease and one of an object that was never created
    // renew nothing, and the others still renew.
    let stranger = Lease::new(name.clone(), OwnerToken::new(), LONG, Instant::now()).with_kind(permits(2));
    let nowhere =
        Lease::new(fresh("rw-nowhere"), OwnerToken::new(), LONG, Instant::now()).with_kind(LockKind::Read);
    let mut batch = leases.clone();
    batch.extend([stranger, nowhere]);
    let renewed: Vec<Option<Lease>> = lock
        .renew(&batch)
        .await
        .into_iter()
        .map(|r| r.expect("works"))
        .collect();
    assert!(renewed[..3].iter().all(Option::is_some), "{renewed:?}");
    assert!(renewed[3..].iter().all(Option::is_none), "{renewed:?}");
    let before = leases[1].fencing_token();
    for lease in &leases {
        assert!(lock.release(lease).await.expect("works"));
    }
    let later = take(&lock, &name, permits(2), LONG).await;
    assert!(later.fencing_token() > before, "the counter outlives the holders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_excludes() {
    let client = LockClient::new(shared().await);
    let rw = client.rw_lock(fresh("rw-basic")).expect("a rw lock");
    let a = rw.try_read().await.expect("works").expect("a first reader");
    let b = rw.try_read().await.expect("works").expect("readers overlap");
    assert!(
        rw.try_write().await.expect("works").is_none(),
        "readers keep the writer out"
    );
    assert_eq!(rw.holders().await.expect("works").len(), 2);
    assert!(a.release().await.expect("works"));
    assert!(
        rw.try_write().await.expect("works").is_none(),
        "one reader is enough"
    );
    assert!(b.release().await.expect("works"));
    let writer = rw.try_write().await.expect("works").expect("free now");
    assert!(
        rw.try_read().await.expect("works").is_none(),
        "the writer keeps readers out"
    );
    assert!(
        rw.try_write().await.expect("works").is_none(),
        "and other writers"
    );
    let holders = rw.holders().await.expect("works");
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].kind, LockKind::Write);
    assert_eq!(holders[0].fencing, writer.fencing_token());
    assert!(writer.release().await.expect("works"));
    let reader = rw.try_read().await.expect("works").expect("free again");
    assert!(reader.fencing_token() > holders[0].fencing);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let url = support::shared_url().await;
    let name = fresh("rw-waiting");
    let reading = LockClient::new(support::lock(&url));
    let rw = reading.rw_lock(&name).expect("a rw lock");
    let first = rw.try_read().await.expect("works").expect("a reader");
    let writing = LockClient::new(support::lock(&url));
    let writer = tokio::spawn({
        let rw = writing.rw_lock(&name).expect("a rw lock");
        async move {
            let opts = AcquireOptions::new()
                .ttl(Duration::from_secs(10))
                .wait_for(Duration::from_secs(20))
                .poll_interval(Duration::from_millis(10), Duration::from_millis(50));
            let guard = rw.write_with(&opts).await.expect("the writer gets in");
            (guard, Instant::now())
        }
    });
    // Once the writer's record is in, new readers are refused although only readers hold.
    let until = Instant::now() + Duration::from_secs(5);
    while rw.try_read().await.expect("works").is_some() {
        assert!(
            Instant::now() < until,
            "the waiting writer never kept readers out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..5 {
        assert!(rw.try_read().await.expect("works").is_none());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!writer.is_finished(), "the reader still holds");
    let released = Instant::now();
    assert!(first.release().await.expect("works"));
    let (guard, got_in) = writer.await.expect("joined");
    assert!(got_in >= released);
    assert!(
        got_in - released < Duration::from_secs(2),
        "{:?}",
        got_in - released
    );
    assert!(rw.try_read().await.expect("works").is_none(), "the writer holds");
    assert!(guard.release().await.expect("works"));
    assert!(
        rw.try_read().await.expect("works").is_some(),
        "its record went with its win"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawn_writer_lets_readers_in() {
    let lock = shared().await;
    let name = fresh("rw-withdraw");
    let reader = take(&lock, &name, LockKind::Read, LONG).await;
    let waiter = OwnerToken::new().to_string();
    let outcome = lock
        .try_acquire_kind(
            &name,
            LockKind::Write,
            OwnerToken::new(),
            LONG,
            Some((&waiter, Duration::from_secs(20))),
        )
        .await
        .expect("works");
    let TryAcquire::Held(holder) = outcome else {
        panic!("a reader holds: {outcome:?}");
    };
    assert_eq!(
        holder.owner,
        Some(reader.owner().to_string()),
        "blocked by the reader"
    );
    refused(&lock, &name, LockKind::Read).await;
    lock.withdraw(&name, LockKind::Write, &waiter)
        .await
        .expect("works");
    take(&lock, &name, LockKind::Read, LONG).await;
    // Withdrawing what is not recorded, or for a kind that records no waiter, is a no-op.
    lock.withdraw(&name, LockKind::Write, &waiter)
        .await
        .expect("works");
    lock.withdraw(&name, LockKind::Read, &waiter)
        .await
        .expect("works");
    let bad = lock.withdraw(&name, LockKind::Write, "not a waiter id").await;
    assert!(matches!(bad, Err(Error::InvalidOptions { .. })), "{bad:?}");

    // Through the client: a writer whose wait runs out withdraws, and readers come in at once
    // rather than after its record's stay.
    let client = LockClient::new(lock.clone());
    let rw = client.rw_lock(&name).expect("a rw lock");
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_millis(600))
        .poll_interval(Duration::from_millis(100), Duration::from_secs(2));
    let timed_out = rw.write_with(&opts).await;
    assert!(matches!(timed_out, Err(Error::Timeout { .. })), "{timed_out:?}");
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        if let TryAcquire::Acquired(_) = attempt(&lock, &name, LockKind::Read, LONG).await {
            break;
        }
        assert!(
            Instant::now() < until,
            "the timed-out writer's record still keeps readers out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Readers and writers hammering one lock from separate clients, with short holds: never a
/// writer beside anyone, and no release, renewal or attempt fails because the item kept
/// changing under it (every client writes the same item).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap_under_contention() {
    let url = support::shared_url().await;
    let name = fresh("rw-contention");
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait_for(Duration::from_secs(60))
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20));
    let tasks: Vec<_> = (0..10)
        .map(|task| {
            let client = LockClient::new(support::lock(&url));
            let (name, readers, writers, most_readers, opts) = (
                name.clone(),
                readers.clone(),
                writers.clone(),
                most_readers.clone(),
                opts.clone(),
            );
            tokio::spawn(async move {
                let rw = client.rw_lock(&name).expect("a rw lock");
                for round in 0..12 {
                    if (task + round) % 4 == 0 {
                        let guard = rw.write_with(&opts).await.expect("the writer gets in");
                        assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                        assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer beside readers");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        writers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("released"));
                    } else {
                        let guard = rw.read_with(&opts).await.expect("the reader gets in");
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        most_readers.fetch_max(now, Ordering::SeqCst);
                        assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader beside a writer");
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        readers.fetch_sub(1, Ordering::SeqCst);
                        assert!(guard.release().await.expect("released"));
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("no overlap, and everyone finished");
    }
    assert!(most_readers.load(Ordering::SeqCst) >= 2, "readers did overlap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_primitives_of_one_name_are_separate_objects() {
    let lock = shared().await;
    let name = fresh("three");
    let keys = [
        lock.lock_key(&name),
        lock.object_key(&name, Primitive::Semaphore),
        lock.object_key(&name, Primitive::RwLock),
    ];
    assert_eq!(lock.object_key(&name, Primitive::Mutex), keys[0]);
    assert!(
        keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        "{keys:?}"
    );
    let TryAcquire::Acquired(mutex) = lock
        .try_acquire(&name, OwnerToken::new(), LONG)
        .await
        .expect("works")
    else {
        panic!("the mutex is free");
    };
    let permit = take(&lock, &name, permits(1), LONG).await;
    let writer = take(&lock, &name, LockKind::Write, LONG).await;
    // Each item is there under its own key.
    let server = lock.server_of(&name).to_owned();
    for key in &keys {
        let reply = support::raw(&server, &format!("mg {key} v\r\n"))
            .await
            .expect("works");
        assert!(reply.starts_with("VA "), "{key}: {reply}");
    }
    let holders = |primitive| {
        let lock = lock.clone();
        let name = name.clone();
        async move { lock.inspect_holders(&name, primitive).await.expect("works") }
    };
    assert_eq!(
        holders(Primitive::Mutex).await[0].owner,
        Some(mutex.owner().to_string())
    );
    assert_eq!(
        holders(Primitive::Semaphore).await[0].owner,
        Some(permit.owner().to_string())
    );
    assert_eq!(
        holders(Primitive::RwLock).await[0].owner,
        Some(writer.owner().to_string())
    );
    assert!(lock.release(&permit).await.expect("works"));
    assert!(lock.release(&writer).await.expect("works"));
    assert!(
        lock.inspect_lock(&name).await.expect("works").is_held(),
        "the mutex is untouched"
    );
    assert!(lock.release(&mutex).await.expect("works"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_item_keeps_at_most_512_readers() {
    let lock = shared().await;
    let name = fresh("rw-bound");
    for _ in 0..512 {
        take(&lock, &name, LockKind::Read, LONG).await;
    }
    let outcome = lock
        .try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), LONG, None)
        .await;
    assert!(matches!(outcome, Err(Error::NotSupported { .. })), "{outcome:?}");
    assert_eq!(
        lock.inspect_holders(&name, Primitive::RwLock)
            .await
            .expect("works")
            .len(),
        512
    );
}

/// The item vanishes (an eviction, or an operator's delete): every hold of the object is lost,
/// and each holder learns it at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_item_makes_every_renewal_report_the_loss() {
    let lock = shared().await;
    let name = fresh("sem-vanish");
    let client = LockClient::new(lock.clone());
    let semaphore = client.semaphore(&name, 2).expect("a semaphore");
    let opts = AcquireOptions::new().ttl(Duration::from_secs(2));
    let guards = [
        semaphore.acquire_with(&opts).await.expect("a permit"),
        semaphore.acquire_with(&opts).await.expect("a permit"),
    ];
    let key = lock.object_key(&name, Primitive::Semaphore);
    let reply = support::raw(lock.server_of(&name), &format!("md {key}\r\n"))
        .await
        .expect("works");
    assert_eq!(reply, "HD");
    for guard in &guards {
        let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("the next renewal reports the loss");
        assert_eq!(reason, LossReason::NotOwned);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loses_every_hold_and_renewals_report_it() {
    let server = support::start_server(MemcachedOptions::default()).await;
    let url = server.url();
    let (a, b) = (support::lock(&url), support::lock(&url));
    let sem = LockName::new("restart-sem").expect("valid");
    let rw = LockName::new("restart-rw").expect("valid");
    let ttl = Duration::from_secs(3);
    let client = LockClient::new(a.clone());
    let opts = AcquireOptions::new().ttl(ttl);
    let permit = client
        .semaphore(&sem, 1)
        .expect("a semaphore")
        .acquire_with(&opts)
        .await
        .expect("a permit");
    let reader = client
        .rw_lock(&rw)
        .expect("a rw lock")
        .read_with(&opts)
        .await
        .expect("a read lock");
    let raw_writer_name = LockName::new("restart-rw-raw").expect("valid");
    let raw_writer = take(&a, &raw_writer_name, LockKind::Write, LONG).await;

    let server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.kill().expect("kill -9");
        server.restart().expect("restart");
        server
    })
    .await
    .expect("joined");

    // The restart freed everything: another client takes the objects at once.
    let new_permit = take(&b, &sem, permits(1), LONG).await;
    let new_writer = take(&b, &rw, LockKind::Write, LONG).await;
    assert!(a.extend(&raw_writer, LONG).await.expect("works").is_none());
    assert!(!a.release(&raw_writer).await.expect("works"));
    for guard in [&permit, &reader] {
        let reason = tokio::time::timeout(ttl + Duration::from_secs(2), guard.lost())
            .await
            .expect("the guard reports the loss at its next renewal");
        assert_eq!(reason, LossReason::NotOwned);
    }
    assert!(!permit.release().await.expect("works"));
    assert!(!reader.release().await.expect("works"));
    assert!(
        b.release(&new_permit).await.expect("works"),
        "the new holders were untouched"
    );
    assert!(b.release(&new_writer).await.expect("works"));
    drop(server);
}
