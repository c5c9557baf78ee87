//! Semaphores and read-write locks on one real `redis-server`: exact permits under
//! contention, refused permit counts, owner-checked release and renewal, expiry, readers and
//! writers with a waiting writer keeping new readers out, withdrawal, separate namespaces,
//! fencing, one round trip per operation, the reply nonce after a lost reply, and Redlock
//! offering neither.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};
use distlock_redis::{RedisConfig, RedisLock};
use distlock_testkit::{shared, Direction, FaultProxy, RedisServer};
use rand::Rng;

const LONG: Duration = Duration::from_secs(30);

fn name(label: &str) -> LockName {
    let run = uuid::Uuid::new_v4().simple().to_string();
    LockName::new(format!("t-{}-{label}", &run[..12])).expect("valid")
}

const fn permits(n: u32) -> LockKind {
    LockKind::Permit {
        permits: n,
        weight: 1,
    }
}

async fn shared_url() -> String {
    tokio::task::spawn_blocking(shared::redis_url)
        .await
        .expect("joined")
        .expect("the shared redis-server starts")
}

async fn connect_within(url: &str, timeout: Duration) -> RedisLock {
    RedisConfig::from_url(url)
        .expect("valid")
        .with_operation_timeout(timeout)
        .with_connect_timeout(timeout)
        .build()
        .await
        .expect("connects")
}

async fn connect(url: &str) -> RedisLock {
    connect_within(url, Duration::from_secs(1)).await
}

async fn attempt(lock: &RedisLock, name: &LockName, kind: LockKind, ttl: Duration) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), ttl, None)
        .await
        .expect("answered")
}

async fn take(lock: &RedisLock, name: &LockName, kind: LockKind, ttl: Duration) -> Lease {
    match attempt(lock, name, kind, ttl).await {
        TryAcquire::Acquired(lease) => {
            assert_eq!(lease.kind(), kind);
            lease
        }
        TryAcquire::Held(holder) => panic!("{kind} of {name} is held: {holder:?}"),
    }
}

/// The time until a hold could free, from a refused attempt.
async fn refused(lock: &RedisLock, name: &LockName, kind: LockKind) -> Option<Duration> {
    match attempt(lock, name, kind, LONG).await {
        TryAcquire::Held(holder) => holder.remaining,
        TryAcquire::Acquired(lease) => panic!("{kind} of {name} was granted: {lease:?}"),
    }
}

/// A derived key of the documented layout for a name without braces and no prefix:
/// `{<name>}` `0xFF` `<mark>` `<name>`.
fn derived_key(name: &LockName, mark: &str) -> Vec<u8> {
    [
        b"{".as_slice(),
        name.as_str().as_bytes(),
        b"}\xFF",
        mark.as_bytes(),
        name.as_str().as_bytes(),
    ]
    .concat()
}

async fn exists(url: &str, key: &[u8]) -> bool {
    let mut raw = support::raw(url).await.expect("raw");
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut raw)
        .await
        .expect("EXISTS");
    n == 1
}

async fn owners(lock: &RedisLock, name: &LockName, primitive: Primitive) -> Vec<(String, LockKind)> {
    let mut holders: Vec<_> = lock
        .inspect_holders(name, primitive)
        .await
        .expect("inspects")
        .into_iter()
        .map(|state| (state.owner.expect("a holder has an owner"), state.kind))
        .collect();
    holders.sort_by(|a, b| a.0.cmp(&b.0));
    holders
}

fn owner_of(lease: &Lease) -> String {
    lease.owner().to_string()
}

// ---------------------------------------------------------------------------------------------
// Semaphores

/// Twelve clients race for a 3-permit semaphore at the same instant, ten times: exactly three
/// win each time. Then twelve tasks over four connections each take a permit four times,
/// waiting for it, and hold it a few milliseconds: never more than three hold at once, and
/// three do at some point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_exactly_its_permits_under_contention() {
    let url = shared_url().await;
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(connect(&url).await);
    }
    for round in 0..10 {
        let sem = name(&format!("burst-{round}"));
        let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let tasks: Vec<_> = clients
            .iter()
            .map(|lock| {
                let (lock, sem, start) = (lock.clone(), sem.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    attempt(&lock, &sem, permits(3), LONG).await
                })
            })
            .collect();
        let mut won = Vec::new();
        for task in tasks {
            if let TryAcquire::Acquired(lease) = task.await.expect("joined") {
                won.push(lease);
            }
        }
        assert_eq!(won.len(), 3, "round {round}: {} of 12 got a permit", won.len());
        let mut tokens: Vec<_> = won.iter().map(|l| l.fencing_token().expect("fenced")).collect();
        tokens.sort();
        tokens.dedup();
        assert_eq!(tokens.len(), 3, "round {round}: each permit has its own token");
        assert_eq!(owners(&clients[0], &sem, Primitive::Semaphore).await.len(), 3);
        for lease in &won {
            assert!(clients[0].release(lease).await.expect("releases"));
        }
    }

    let sem = name("waiting");
    let users: Vec<LockClient> = clients[..4].iter().cloned().map(LockClient::new).collect();
    let current = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10)).wait_for(LONG);
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let semaphore = users[i % users.len()].semaphore(&sem, 3).expect("valid");
            let (current, most, opts) = (current.clone(), most.clone(), opts.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    let guard = semaphore.acquire_with(&opts).await.expect("a permit in the end");
                    let now = current.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let hold = rand::rng().random_range(2..12);
                    tokio::time::sleep(Duration::from_millis(hold)).await;
                    current.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.expect("releases"), "still ours");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("joined");
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "at most three hold at once, and three did"
    );
    assert!(owners(&clients[0], &sem, Primitive::Semaphore).await.is_empty());
}

/// An attempt naming another permit count than the live holders' is refused with
/// `PermitsMismatch` and changes nothing; once no holder is live, a new count is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_permit_count_is_refused_while_holders_live() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("mismatch");
    let first = take(&lock, &sem, permits(3), LONG).await;
    match lock
        .try_acquire_kind(&sem, permits(5), OwnerToken::new(), LONG, None)
        .await
    {
        Err(Error::PermitsMismatch { name, stored, asked }) => {
            assert_eq!((name.as_str(), stored, asked), (sem.as_str(), 3, 5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        owners(&lock, &sem, Primitive::Semaphore).await,
        vec![(owner_of(&first), permits(3))],
        "nothing changed"
    );
    let client = LockClient::new(lock.clone());
    assert!(matches!(
        client.semaphore(&sem, 2).expect("valid").try_acquire().await,
        Err(Error::PermitsMismatch {
            stored: 3,
            asked: 2,
            ..
        })
    ));

    assert!(lock.release(&first).await.expect("releases"));
    let five = take(&lock, &sem, permits(5), LONG).await;
    assert_eq!(
        owners(&lock, &sem, Primitive::Semaphore).await,
        vec![(owner_of(&five), permits(5))]
    );
    assert!(lock.release(&five).await.expect("releases"));

    // Also once the holders have expired.
    let short = take(&lock, &sem, permits(1), Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let two = take(&lock, &sem, permits(2), LONG).await;
    assert!(!lock.release(&short).await.expect("answers"));
    assert!(lock.release(&two).await.expect("releases"));

    assert!(matches!(
        lock.try_acquire_kind(&sem, permits(0), OwnerToken::new(), LONG, None)
            .await,
        Err(Error::InvalidOptions { .. })
    ));
}

/// A permit that expired and was given to someone else: its stale owner's release and renewal
/// report "not ours" and change nothing, also while its expired member is still in the set
/// (another holder keeps the set alive); a stranger's owner token frees nothing either. The
/// same for readers and writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_frees_and_extends_nothing() {
    let url = shared_url().await;
    let lock = connect(&url).await;

    let sem = name("stale-permit");
    let keeper = take(&lock, &sem, permits(2), LONG).await;
    let stale = take(&lock, &sem, permits(2), Duration::from_millis(100)).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Expired on the server's clock, though still in the set (nothing pruned it yet).
    assert!(
        lock.extend(&stale, LONG).await.expect("answers").is_none(),
        "an expired permit came back to life"
    );
    assert!(
        !lock.release(&stale).await.expect("answers"),
        "an expired permit was released"
    );
    let fresh = take(&lock, &sem, permits(2), LONG).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(!lock.release(&stale).await.expect("answers"));
    assert!(lock.extend(&stale, LONG).await.expect("answers").is_none());
    let stranger =
        Lease::new(sem.clone(), OwnerToken::new(), LONG, tokio::time::Instant::now()).with_kind(permits(2));
    assert!(!lock.release(&stranger).await.expect("answers"));
    let mut expected = vec![(owner_of(&keeper), permits(2)), (owner_of(&fresh), permits(2))];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await, expected);
    // The cleanup after an ambiguous acquisition: a bare lease, by kind, name and owner.
    let bare =
        Lease::new(sem.clone(), fresh.owner(), LONG, tokio::time::Instant::now()).with_kind(permits(2));
    assert!(lock.release(&bare).await.expect("releases"));
    assert!(lock.release(&keeper).await.expect("releases"));

    let rw = name("stale-rw");
    let keeper = take(&lock, &rw, LockKind::Read, LONG).await;
    let stale_read = take(&lock, &rw, LockKind::Read, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        lock.extend(&stale_read, LONG).await.expect("answers").is_none(),
        "an expired read lock came back to life"
    );
    assert!(
        !lock.release(&stale_read).await.expect("answers"),
        "an expired read lock was released"
    );
    assert!(lock.release(&keeper).await.expect("releases"));
    let writer = take(&lock, &rw, LockKind::Write, Duration::from_millis(300)).await;
    assert!(!lock.release(&stale_read).await.expect("answers"));
    assert!(lock.extend(&stale_read, LONG).await.expect("answers").is_none());
    let as_writer = Lease::new(rw.clone(), stale_read.owner(), LONG, tokio::time::Instant::now())
        .with_kind(LockKind::Write);
    assert!(
        !lock.release(&as_writer).await.expect("answers"),
        "a reader's token is no writer's"
    );
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&writer), LockKind::Write)]
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let reader = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(!lock.release(&writer).await.expect("answers"));
    assert!(lock.extend(&writer, LONG).await.expect("answers").is_none());
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&reader), LockKind::Read)]
    );
    assert!(lock.release(&reader).await.expect("releases"));
}

/// A permit not renewed is free once its TTL passed on the server: a refused attempt says
/// when, and the sorted set of holders expires with its last member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_frees_a_permit_and_the_holders_key() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("expiry");
    let ttl = Duration::from_millis(300);
    let _a = take(&lock, &sem, permits(2), ttl).await;
    let b = take(&lock, &sem, permits(2), ttl + Duration::from_millis(200)).await;
    let remaining = refused(&lock, &sem, permits(2))
        .await
        .expect("the earliest expiry");
    assert!(remaining <= ttl && remaining > Duration::ZERO, "{remaining:?}");
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let c = take(&lock, &sem, permits(2), ttl).await;
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await.len(), 2);
    assert!(lock
        .extend(&b, Duration::from_millis(100))
        .await
        .expect("answers")
        .is_some());
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(owners(&lock, &sem, Primitive::Semaphore).await.is_empty());
    assert!(
        !exists(&url, &derived_key(&sem, "semaphore:")).await,
        "the holders' set expired with them"
    );
    assert!(
        exists(&url, &derived_key(&sem, "semaphore-state:")).await,
        "the fencing counter stays"
    );
    drop(c);
}

/// The same acquisition sent twice (as after a broken connection: the owner token is the
/// attempt's own) is granted again, with a new token, and takes no second permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_sent_twice_takes_one_permit() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let sem = name("twice");
    let owner = OwnerToken::new();
    let mut tokens = Vec::new();
    for _ in 0..2 {
        match lock
            .try_acquire_kind(&sem, permits(2), owner, LONG, None)
            .await
            .expect("answers")
        {
            TryAcquire::Acquired(lease) => tokens.push(lease.fencing_token()),
            held => panic!("{held:?}"),
        }
    }
    assert!(tokens[1] > tokens[0]);
    assert_eq!(owners(&lock, &sem, Primitive::Semaphore).await.len(), 1);
    let other = take(&lock, &sem, permits(2), LONG).await;
    assert!(matches!(
        attempt(&lock, &sem, permits(2), LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(lock.release(&other).await.expect("releases"));

    let rw = name("twice-rw");
    for kind in [LockKind::Read, LockKind::Write] {
        let owner = OwnerToken::new();
        for _ in 0..2 {
            let outcome = lock
                .try_acquire_kind(&rw, kind, owner, LONG, None)
                .await
                .expect("answers");
            assert!(matches!(outcome, TryAcquire::Acquired(_)), "{kind}: {outcome:?}");
        }
        assert_eq!(owners(&lock, &rw, Primitive::RwLock).await.len(), 1);
        let lease = Lease::new(rw.clone(), owner, LONG, tokio::time::Instant::now()).with_kind(kind);
        assert!(lock.release(&lease).await.expect("releases"));
    }
}

// ---------------------------------------------------------------------------------------------
// Read-write locks

/// Readers share the lock; a writer waits for the last reader and then excludes readers and
/// other writers. Refused attempts say when a hold could free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_and_a_writer_excludes_everyone() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("rw");
    let r1 = take(&lock, &rw, LockKind::Read, Duration::from_secs(5)).await;
    let r2 = take(&lock, &rw, LockKind::Read, Duration::from_secs(10)).await;
    let until_readers_leave = refused(&lock, &rw, LockKind::Write).await.expect("known");
    assert!(
        until_readers_leave > Duration::from_secs(9) && until_readers_leave <= Duration::from_secs(10),
        "the last reader's expiry: {until_readers_leave:?}"
    );
    assert!(lock.release(&r1).await.expect("releases"));
    assert!(matches!(
        attempt(&lock, &rw, LockKind::Write, LONG).await,
        TryAcquire::Held(_)
    ));
    assert!(lock.release(&r2).await.expect("releases"));

    let w = take(&lock, &rw, LockKind::Write, Duration::from_secs(5)).await;
    match attempt(&lock, &rw, LockKind::Read, LONG).await {
        TryAcquire::Held(holder) => {
            assert_eq!(holder.owner, Some(owner_of(&w)));
            let left = holder.remaining.expect("the writer's expiry");
            assert!(
                left > Duration::from_secs(4) && left <= Duration::from_secs(5),
                "{left:?}"
            );
        }
        won => panic!("a reader got in beside a writer: {won:?}"),
    }
    assert!(matches!(
        attempt(&lock, &rw, LockKind::Write, LONG).await,
        TryAcquire::Held(_)
    ));
    assert_eq!(
        owners(&lock, &rw, Primitive::RwLock).await,
        vec![(owner_of(&w), LockKind::Write)]
    );
    assert!(lock.release(&w).await.expect("releases"));
    let r3 = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(lock.release(&r3).await.expect("releases"));
}

/// A writer that found readers and will wait is recorded: new readers are refused (readers
/// already in keep their hold), the writer gets in when the last reader leaves and its
/// record goes, and readers come in again after the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("writer-first");
    let r1 = take(&lock, &rw, LockKind::Read, LONG).await;
    let stay = Duration::from_secs(5);
    let writer = OwnerToken::new();
    let refused_writer = lock
        .try_acquire_kind(&rw, LockKind::Write, writer, LONG, Some(("w-1", stay)))
        .await
        .expect("answers");
    assert!(matches!(refused_writer, TryAcquire::Held(_)));
    let left = refused(&lock, &rw, LockKind::Read)
        .await
        .expect("until the waiting writer's record ends");
    assert!(left > Duration::from_secs(4) && left <= stay, "{left:?}");
    assert!(
        lock.extend(&r1, LONG).await.expect("answers").is_some(),
        "readers in stay in"
    );

    assert!(lock.release(&r1).await.expect("releases"));
    let w = match lock
        .try_acquire_kind(&rw, LockKind::Write, writer, LONG, Some(("w-1", stay)))
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("the waiting writer did not get in: {held:?}"),
    };
    assert!(lock.release(&w).await.expect("releases"));
    let r2 = take(&lock, &rw, LockKind::Read, LONG).await;
    assert!(lock.release(&r2).await.expect("releases"));

    // Through the client: the writer waits, is woken by the last reader's release (far
    // sooner than its 2 s safety-net re-check), and readers wait for it.
    let client = LockClient::new(lock.clone());
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let reader = rw_lock.read().await.expect("reads");
    let writing = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.write_with(&opts).await.expect("writes in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        rw_lock.try_read().await.expect("answers").is_none(),
        "a new reader got in ahead of a waiting writer"
    );
    let released = Instant::now();
    assert!(reader.release().await.expect("releases"));
    let (guard, at) = writing.await.expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "the writer was not woken by the release: {handoff:?}"
    );
    let reading = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.read_with(&opts).await.expect("reads in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(guard.release().await.expect("releases"));
    let (reader, at) = reading.await.expect("joined");
    let handoff = at.saturating_duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "the reader was not woken by the writer's release: {handoff:?}"
    );
    assert!(reader.release().await.expect("releases"));
}

/// A waiting writer that withdraws lets readers in at once (a reader waiting for it is woken),
/// and so does one whose wait timed out (the client withdraws it in the background).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdrawing_a_waiting_writer_lets_readers_in() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let rw = name("withdraw");
    let r1 = take(&lock, &rw, LockKind::Read, LONG).await;
    let outcome = lock
        .try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w-1", LONG)))
        .await
        .expect("answers");
    assert!(matches!(outcome, TryAcquire::Held(_)));
    assert!(refused(&lock, &rw, LockKind::Read).await.is_some());

    let client = LockClient::new(lock.clone());
    let rw_lock = client.rw_lock(&rw).expect("valid");
    let reading = tokio::spawn({
        let rw_lock = rw_lock.clone();
        async move {
            let opts = AcquireOptions::new().ttl(LONG).wait_for(Duration::from_secs(20));
            let guard = rw_lock.read_with(&opts).await.expect("reads in the end");
            (guard, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let withdrawn = Instant::now();
    lock.withdraw(&rw, LockKind::Write, "w-1")
        .await
        .expect("withdraws");
    let (r2, at) = reading.await.expect("joined");
    let waited = at.saturating_duration_since(withdrawn);
    assert!(
        waited < Duration::from_secs(1),
        "the reader was not woken by the withdrawal: {waited:?}"
    );
    assert!(r2.release().await.expect("releases"));

    // A writer's wait that times out is withdrawn by the client.
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_millis(400));
    assert!(matches!(
        rw_lock.write_with(&opts).await,
        Err(Error::Timeout { .. })
    ));
    let ended = Instant::now();
    let reader = loop {
        if let Some(reader) = rw_lock.try_read().await.expect("answers") {
            break reader;
        }
        assert!(
            ended.elapsed() < Duration::from_secs(2),
            "the timed-out writer's record kept readers out (its stay is about 3 s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(reader.release().await.expect("releases"));
    assert!(lock.release(&r1).await.expect("releases"));
}

// ---------------------------------------------------------------------------------------------
// All kinds

/// The mutex, the semaphore and the read-write lock of one name are three objects: all three
/// are held at once, each lists only its own holder, and they share no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_primitives_of_one_name_do_not_collide() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("x");
    let mutex = match lock
        .try_acquire(&x, OwnerToken::new(), LONG)
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("{held:?}"),
    };
    let permit = take(&lock, &x, permits(1), LONG).await;
    let write = take(&lock, &x, LockKind::Write, LONG).await;
    assert_eq!(
        lock.inspect_lock(&x).await.expect("inspects").owner,
        Some(owner_of(&mutex))
    );
    assert_eq!(
        owners(&lock, &x, Primitive::Semaphore).await,
        vec![(owner_of(&permit), permits(1))]
    );
    assert_eq!(
        owners(&lock, &x, Primitive::RwLock).await,
        vec![(owner_of(&write), LockKind::Write)]
    );
    assert_eq!(
        owners(&lock, &x, Primitive::Mutex).await,
        vec![(owner_of(&mutex), LockKind::Exclusive)]
    );
    // Releasing one frees only that one.
    assert!(lock.release(&permit).await.expect("releases"));
    assert!(lock.inspect_lock(&x).await.expect("inspects").is_held());
    assert_eq!(owners(&lock, &x, Primitive::RwLock).await.len(), 1);

    let mut raw = support::raw(&url).await.expect("raw");
    let pattern = [b"*".as_slice(), x.as_str().as_bytes()].concat();
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    keys.sort();
    let mut expected = vec![
        x.as_str().as_bytes().to_vec(),
        lock.fencing_key(&x),
        derived_key(&x, "semaphore-state:"),
        derived_key(&x, "rw-writer:"),
        derived_key(&x, "rw-fence:"),
    ];
    expected.sort();
    assert_eq!(keys, expected, "one key per role, none shared");
    assert!(lock.release(&write).await.expect("releases"));
    assert!(lock.release(&mutex).await.expect("releases"));
}

/// Every hold of an object gets a token above all earlier holds of that object, also after
/// the object had no holder at all; the three objects of a name count apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_per_object() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("fence");
    let mut last = None;
    for kind in [permits(2), permits(2), permits(1)] {
        let lease = take(&lock, &x, kind, LONG).await;
        assert!(lease.fencing_token() > last, "{kind}");
        last = lease.fencing_token();
        assert!(lock.release(&lease).await.expect("releases"));
    }
    let mut last = None;
    for kind in [LockKind::Read, LockKind::Read, LockKind::Write, LockKind::Read] {
        let lease = take(&lock, &x, kind, Duration::from_millis(50)).await;
        assert!(lease.fencing_token() > last, "{kind}");
        last = lease.fencing_token();
        if kind == LockKind::Write {
            tokio::time::sleep(Duration::from_millis(100)).await; // freed by expiry
        } else {
            assert!(lock.release(&lease).await.expect("releases"));
        }
    }
}

/// One `extend_many` renews holds of every kind at once; a hold that is not ours any more
/// reports `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_many_renews_every_kind() {
    let url = shared_url().await;
    let lock = connect(&url).await;
    let x = name("many");
    let short = Duration::from_millis(400);
    let mutex = match lock
        .try_acquire(&x, OwnerToken::new(), short)
        .await
        .expect("answers")
    {
        TryAcquire::Acquired(lease) => lease,
        held => panic!("{held:?}"),
    };
    let permit = take(&lock, &x, permits(2), short).await;
    let gone = take(&lock, &x, permits(2), short).await;
    assert!(lock.release(&gone).await.expect("releases"));
    let other = name("many-rw");
    let read = take(&lock, &other, LockKind::Read, short).await;
    let write = take(&lock, &x, LockKind::Write, short).await;
    let leases = [mutex, permit, gone, read, write]
        .map(|lease| lease.renewed(Duration::from_secs(5), tokio::time::Instant::now()));
    let renewed = lock.renew(&leases).await;
    let ours: Vec<bool> = renewed
        .iter()
        .map(|r| r.as_ref().expect("answered").is_some())
        .collect();
    assert_eq!(ours, [true, true, false, true, true]);
    tokio::time::sleep(short + Duration::from_millis(200)).await;
    assert!(lock.inspect_lock(&x).await.expect("inspects").is_held());
    assert_eq!(owners(&lock, &x, Primitive::Semaphore).await.len(), 1);
    assert_eq!(owners(&lock, &x, Primitive::RwLock).await.len(), 1);
    assert_eq!(owners(&lock, &other, Primitive::RwLock).await.len(), 1);
    for lease in &leases {
        let _ = lock.release(lease).await;
    }
}

async fn script_calls(url: &str) -> (u64, u64) {
    let mut raw = support::raw(url).await.expect("raw");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let calls = |command: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (calls("evalsha"), calls("eval"))
}

/// Each operation is one round trip: with 150 ms added to every request on its way to the
/// server, each takes at least 150 ms and less than 300 ms (two round trips), and the
/// server ran one `EVALSHA` for it (`extend_many`: one per lease, in one round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_is_one_round_trip() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = connect_within(&format!("redis://{}", proxy.host_port()), Duration::from_secs(2)).await;
    let (sem, rw) = (name("rt-sem"), name("rt-rw"));
    let latency = Duration::from_millis(150);

    // Once without latency, so the server knows every script (no EVAL fallback below).
    for _ in 0..2 {
        let p = take(&lock, &sem, permits(1), LONG).await;
        let _ = refused(&lock, &sem, permits(1)).await;
        assert!(lock.extend(&p, LONG).await.expect("answers").is_some());
        let r = take(&lock, &rw, LockKind::Read, LONG).await;
        let _ = lock
            .try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w", LONG)))
            .await
            .expect("answers");
        let _ = refused(&lock, &rw, LockKind::Read).await;
        lock.withdraw(&rw, LockKind::Write, "w").await.expect("withdraws");
        assert!(lock.extend(&r, LONG).await.expect("answers").is_some());
        assert!(lock.release(&r).await.expect("releases"));
        let w = take(&lock, &rw, LockKind::Write, LONG).await;
        assert!(lock.extend(&w, LONG).await.expect("answers").is_some());
        let _ = lock
            .inspect_holders(&sem, Primitive::Semaphore)
            .await
            .expect("inspects");
        let _ = lock
            .inspect_holders(&rw, Primitive::RwLock)
            .await
            .expect("inspects");
        assert!(lock.release(&w).await.expect("releases"));
        assert!(lock.release(&p).await.expect("releases"));
    }

    proxy.set_latency(Direction::ToServer, latency, Duration::ZERO);
    let url = server.url();
    let mut timings = Vec::new();
    macro_rules! one_round_trip {
        ($what:expr, $scripts:expr, $op:expr) => {{
            let before = script_calls(&url).await;
            let started = Instant::now();
            let out = $op;
            let took = started.elapsed();
            let after = script_calls(&url).await;
            assert_eq!(after.0 - before.0, $scripts, "{}: EVALSHA calls", $what);
            assert_eq!(after.1, before.1, "{}: no EVAL fallback", $what);
            assert!(
                took >= latency && took < latency * 2,
                "{}: {took:?} is not one round trip of {latency:?}",
                $what
            );
            timings.push(($what, took));
            out
        }};
    }
    let p = one_round_trip!("acquire permit", 1, take(&lock, &sem, permits(1), LONG).await);
    one_round_trip!("refused permit", 1, refused(&lock, &sem, permits(1)).await);
    let p = one_round_trip!(
        "extend permit",
        1,
        lock.extend(&p, LONG).await.expect("answers").expect("ours")
    );
    let r = one_round_trip!("acquire read", 1, take(&lock, &rw, LockKind::Read, LONG).await);
    let recorded = one_round_trip!(
        "refused write, recorded waiting",
        1,
        lock.try_acquire_kind(&rw, LockKind::Write, OwnerToken::new(), LONG, Some(("w", LONG)))
            .await
            .expect("answers")
    );
    assert!(matches!(recorded, TryAcquire::Held(_)));
    one_round_trip!("refused read", 1, refused(&lock, &rw, LockKind::Read).await);
    one_round_trip!(
        "withdraw",
        1,
        lock.withdraw(&rw, LockKind::Write, "w").await.expect("withdraws")
    );
    let r = one_round_trip!(
        "extend read",
        1,
        lock.extend(&r, LONG).await.expect("answers").expect("ours")
    );
    one_round_trip!(
        "release read",
        1,
        assert!(lock.release(&r).await.expect("releases"))
    );
    let w = one_round_trip!("acquire write", 1, take(&lock, &rw, LockKind::Write, LONG).await);
    let w = one_round_trip!(
        "extend write",
        1,
        lock.extend(&w, LONG).await.expect("answers").expect("ours")
    );
    one_round_trip!(
        "inspect holders",
        1,
        lock.inspect_holders(&rw, Primitive::RwLock)
            .await
            .expect("inspects")
    );
    let renewed = one_round_trip!(
        "extend_many of 2 kinds",
        2,
        lock.renew(&[p.clone(), w.clone()]).await
    );
    assert!(renewed.iter().all(|r| matches!(r, Ok(Some(_)))), "{renewed:?}");
    one_round_trip!(
        "release write",
        1,
        assert!(lock.release(&w).await.expect("releases"))
    );
    one_round_trip!(
        "release permit",
        1,
        assert!(lock.release(&p).await.expect("releases"))
    );
    println!("{timings:?}");
}

/// The reply to a request that ran but whose reply was lost is never taken for another
/// request's: a permit's release whose reply is dropped, then a renewal of a permit that is
/// not ours (the server says 0) and one of ours (1). Without the nonce each would read the
/// reply of the request before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_never_taken_for_another_requests_reply() {
    let server = support::start_server().await;
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let lock = connect_within(&format!("redis://{}", proxy.host_port()), Duration::from_secs(2)).await;
    let other = connect_within(&server.url(), Duration::from_secs(2)).await;
    let ours_a = take(&lock, &name("lost-a"), permits(2), LONG).await;
    let theirs = take(&other, &name("lost-b"), permits(2), LONG).await;
    let not_ours = Lease::new(
        theirs.name().clone(),
        OwnerToken::new(),
        LONG,
        tokio::time::Instant::now(),
    )
    .with_kind(permits(2));
    let ours_c = take(&lock, &name("lost-c"), LockKind::Read, LONG).await;

    proxy.drop_replies();
    let releasing = {
        let (lock, lease) = (lock.clone(), ours_a.clone());
        tokio::spawn(async move { lock.release(&lease).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.heal();
    let (stranger, ours) = tokio::join!(lock.extend(&not_ours, LONG), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        lock.extend(&ours_c, LONG).await
    });
    let released = releasing.await.expect("the release task");
    println!("release: {released:?}; renewal of a permit not ours: {stranger:?}; of our read: {ours:?}");
    assert!(
        !matches!(stranger, Ok(Some(_))),
        "a renewal of someone else's permit reported success (another request's reply)"
    );
    assert!(
        !matches!(released, Ok(false)),
        "a release that was applied reported 'not owned' (another request's reply)"
    );
    assert!(
        !matches!(ours, Ok(None)),
        "a renewal of our own read lock reported 'not owned' (another request's reply)"
    );
}

/// With `WAIT` for replicas and none to acknowledge, a permit, a read and the write lock are
/// each granted by the script and given back: the attempt fails with `Unavailable` and
/// nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_give_every_kind_back() {
    let url = shared_url().await;
    let acked = RedisConfig::from_url(&url)
        .expect("valid")
        .with_wait_for_replicas(1, Duration::from_millis(100))
        .build()
        .await
        .expect("connects");
    let plain = connect(&url).await;
    let x = name("replicas");
    for (kind, primitive) in [
        (permits(1), Primitive::Semaphore),
        (LockKind::Read, Primitive::RwLock),
        (LockKind::Write, Primitive::RwLock),
    ] {
        match acked
            .try_acquire_kind(&x, kind, OwnerToken::new(), LONG, None)
            .await
        {
            Err(error @ Error::Unavailable { .. }) => {
                assert!(error.to_string().contains("replicas"), "{kind}: {error}");
            }
            other => panic!("{kind}: {other:?}"),
        }
        assert!(
            owners(&plain, &x, primitive).await.is_empty(),
            "{kind} was left held"
        );
    }
}

/// The capabilities: a single server offers both; Redlock neither, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_and_redlock_offering_neither() {
    let url = shared_url().await;
    let caps = connect(&url).await.capabilities();
    assert!(caps.semaphores && caps.rw_locks);
    assert!(caps.weighted_permits && caps.upgradeable_reads);

    let servers = support::start_servers(3).await;
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let redlock = support::redlock_at(&urls).await;
    let caps = redlock.capabilities();
    assert!(!caps.semaphores && !caps.rw_locks);
    assert!(!caps.weighted_permits && !caps.upgradeable_reads);
    let x = name("redlock");
    for kind in [
        permits(2),
        LockKind::permits(2, 2),
        LockKind::Read,
        LockKind::UpgradeableRead,
        LockKind::Write,
    ] {
        assert!(
            matches!(
                redlock
                    .try_acquire_kind(&x, kind, OwnerToken::new(), LONG, None)
                    .await,
                Err(Error::NotSupported { .. })
            ),
            "{kind}"
        );
        let lease =
            Lease::new(x.clone(), OwnerToken::new(), LONG, tokio::time::Instant::now()).with_kind(kind);
        assert!(matches!(
            redlock.release(&lease).await,
            Err(Error::NotSupported { .. })
        ));
        assert!(matches!(
            redlock.extend(&lease, LONG).await,
            Err(Error::NotSupported { .. })
        ));
    }
    let client = LockClient::new(redlock);
    assert!(matches!(client.semaphore(&x, 2), Err(Error::NotSupported { .. })));
    assert!(matches!(client.rw_lock(&x), Err(Error::NotSupported { .. })));
    drop(servers);
}

/// A client of its own waiting for a permit of the one-permit semaphore `sem`.
async fn spawn_permit_waiter(
    url: &str,
    sem: &LockName,
    opts: &AcquireOptions,
) -> tokio::task::JoinHandle<(distlock_core::LockGuard, Instant)> {
    let client = LockClient::new(connect(url).await);
    let (sem, opts) = (sem.clone(), opts.clone());
    tokio::spawn(async move {
        let guard = client
            .semaphore(&sem, 1)
            .expect("a semaphore")
            .acquire_with(&opts)
            .await
            .expect("the waiter gets the permit");
        (guard, Instant::now())
    })
}

/// A permit's release wakes the one waiter that can take it, not every waiter of the
/// semaphore: with six clients waiting for the one permit (their safety-net re-check 20 s
/// away), a release is followed by at most one attempt besides the winner's, and each later
/// release hands the permit on within a few seconds. No wake is lost, also not to the three
/// waiters that queued first and gave up before the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_wakes_one_waiter() {
    const WAITERS: usize = 6;
    let server = support::start_server().await;
    let url = server.url();
    let sem = name("wake-one");
    let holder = LockClient::new(connect(&url).await);
    let first = holder
        .semaphore(&sem, 1)
        .expect("a semaphore")
        .acquire_with(&AcquireOptions::new().ttl(LONG))
        .await
        .expect("acquired");
    let opts = AcquireOptions::new()
        .ttl(LONG)
        .wait_for(Duration::from_secs(120))
        .poll_interval(Duration::from_millis(10), Duration::from_secs(5));
    let settle = || async {
        // Every waiter asleep: no script runs for a while.
        let mut last = script_calls(&url).await.0;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = script_calls(&url).await.0;
            if now == last {
                break;
            }
            last = now;
        }
    };
    let mut gave_up = Vec::new();
    for _ in 0..3 {
        gave_up.push(spawn_permit_waiter(&url, &sem, &opts).await);
    }
    settle().await;
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(spawn_permit_waiter(&url, &sem, &opts).await);
    }
    settle().await;
    for waiter in &gave_up {
        waiter.abort();
    }
    settle().await;
    let before = script_calls(&url).await.0;
    assert!(first.release().await.expect("released"));
    let mut current = None;
    let deadline = Instant::now() + Duration::from_secs(3);
    while current.is_none() {
        assert!(
            Instant::now() < deadline,
            "no waiter got the released permit within 3 s"
        );
        if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
            current = Some(waiters.swap_remove(i).await.expect("joined").0);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The release's script, the winner's attempt, and at most one more.
    let scripts = script_calls(&url).await.0 - before;
    println!("a release with {WAITERS} waiters ran {scripts} scripts (the release's included)");
    assert!(
        scripts <= 3,
        "a release with {WAITERS} waiters ran {scripts} scripts: it woke more waiters than can win"
    );
    while !waiters.is_empty() {
        let released = Instant::now();
        assert!(current.take().expect("held").release().await.expect("released"));
        loop {
            assert!(
                released.elapsed() < Duration::from_secs(3),
                "the next waiter did not get the permit within 3 s (a lost wake)"
            );
            if let Some(i) = waiters.iter().position(|w| w.is_finished()) {
                current = Some(waiters.swap_remove(i).await.expect("joined").0);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    assert!(current.take().expect("held").release().await.expect("released"));
}
