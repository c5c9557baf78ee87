//! Semaphores and read-write locks on both dialects: every check runs on a SQLite file (a
//! temporary directory of its own) and on a real MariaDB (the test binary's shared `mariadbd`
//! from distlock-testkit, or the server named by `DISTLOCK_TEST_MYSQL_URL`), each client
//! with its own pool, as separate processes would be. Names are unique per check, so checks
//! share the server.
#![cfg(all(feature = "sqlite", feature = "mysql"))]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedLockExt, Error, Lease, LockClient, LockKind, LockName,
    OwnerToken, Primitive, TryAcquire,
};
use distlock_sql::{SqlConfig, SqlLock};
use distlock_testkit::shared::MYSQL_URL_ENV;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

/// One database: a SQLite file, or a MariaDB server.
enum Store {
    Sqlite { path: PathBuf, _dir: tempfile::TempDir },
    MySql { url: String },
}

impl Store {
    async fn sqlite() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("distlock-primitives-")
            .tempdir()
            .expect("a temporary directory");
        Self::Sqlite {
            path: dir.path().join("locks.db"),
            _dir: dir,
        }
    }

    async fn mysql() -> Self {
        let url = match std::env::var(MYSQL_URL_ENV).ok().filter(|u| !u.trim().is_empty()) {
            Some(url) => url,
            None => tokio::task::spawn_blocking(distlock_testkit::shared::mysql_url)
                .await
                .expect("the starter thread")
                .expect("the shared mariadbd starts (install mariadb-server)"),
        };
        Self::MySql { url }
    }

    /// A new client with a pool of its own.
    async fn client(&self) -> SqlLock {
        let config = match self {
            Self::Sqlite { path, .. } => SqlConfig::sqlite(path),
            Self::MySql { url } => SqlConfig::from_url(url).expect("a valid URL"),
        };
        config
            .with_operation_timeout(Duration::from_secs(5))
            .build()
            .await
            .expect("the database answers")
    }
}

/// A name no other check uses.
fn unique(what: &str) -> LockName {
    LockName::new(format!("{what}-{}", uuid::Uuid::new_v4())).expect("valid")
}

fn permit(n: u32) -> LockKind {
    LockKind::Permit {
        permits: n,
        weight: 1,
    }
}

async fn attempt(lock: &SqlLock, name: &LockName, kind: LockKind) -> TryAcquire {
    lock.try_acquire_kind(name, kind, OwnerToken::new(), TTL, None)
        .await
        .expect("works")
}

fn won(outcome: TryAcquire, what: &str) -> Lease {
    match outcome {
        TryAcquire::Acquired(lease) => lease,
        TryAcquire::Held(h) => panic!("{what}: held ({h:?})"),
    }
}

/// The holder's hint of a refused attempt (`None`: unknown).
fn refused(outcome: TryAcquire, what: &str) -> Option<Duration> {
    match outcome {
        TryAcquire::Held(h) => h.remaining,
        TryAcquire::Acquired(lease) => panic!("{what}: acquired ({lease:?})"),
    }
}

async fn holders(lock: &SqlLock, name: &LockName, primitive: Primitive) -> usize {
    lock.inspect_holders(name, primitive).await.expect("works").len()
}

/// Twelve clients at once on an empty semaphore of three: exactly three get in.
async fn a_burst_admits_exactly_the_permits(store: &Store) {
    let name = unique("burst");
    let mut clients = Vec::new();
    for _ in 0..12 {
        clients.push(store.client().await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for lock in clients {
        let (name, barrier) = (name.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            lock.try_acquire_kind(&name, permit(3), OwnerToken::new(), TTL, None)
                .await
                .expect("works")
        });
    }
    let mut tokens = Vec::new();
    while let Some(outcome) = tasks.join_next().await {
        if let TryAcquire::Acquired(lease) = outcome.expect("the task") {
            tokens.push(lease.fencing_token().expect("a token"));
        }
    }
    assert_eq!(tokens.len(), 3, "admitted: {tokens:?}");
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 3, "every hold has a token of its own");
    let lock = store.client().await;
    assert_eq!(holders(&lock, &name, Primitive::Semaphore).await, 3);
}

/// Twelve tasks, each with a client of its own, take a permit of three over and over: never
/// more than three hold at once, and three do at some point.
async fn a_semaphore_is_exact_under_contention(store: &Store) {
    const TASKS: usize = 12;
    const ROUNDS: usize = 4;
    let name = unique("contended");
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let client = LockClient::new(store.client().await);
        let (name, inside, most) = (name.clone(), inside.clone(), most.clone());
        tasks.spawn(async move {
            let semaphore = client.semaphore(name, 3).expect("valid");
            let opts = AcquireOptions::new()
                .ttl(TTL)
                .wait_for(Duration::from_secs(60))
                .poll_interval(Duration::from_millis(5), Duration::from_millis(40));
            for _ in 0..ROUNDS {
                let guard = semaphore.acquire_with(&opts).await.expect("a permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= 3, "{now} holders of 3 permits");
                tokio::time::sleep(Duration::from_millis(25)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("works"), "still ours");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("the task");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "the most holders at once");
}

/// A count other than the live holders' is refused and changes nothing; with no holder left
/// a new count is accepted.
async fn another_count_is_refused_while_holders_live(store: &Store) {
    let lock = store.client().await;
    let name = unique("mismatch");
    let first = won(attempt(&lock, &name, permit(3)).await, "first of 3");
    for asked in [2, 4] {
        match lock
            .try_acquire_kind(&name, permit(asked), OwnerToken::new(), TTL, None)
            .await
        {
            Err(Error::PermitsMismatch {
                name: n,
                stored,
                asked: a,
            }) => assert_eq!((n.as_str(), stored, a), (name.as_str(), 3, asked)),
            other => panic!("asked {asked} of 3: {other:?}"),
        }
    }
    assert_eq!(
        holders(&lock, &name, Primitive::Semaphore).await,
        1,
        "nothing changed"
    );
    let second = won(attempt(&lock, &name, permit(3)).await, "second of 3");
    assert!(lock.release(&first).await.expect("works"));
    assert!(lock.release(&second).await.expect("works"));
    let two = won(attempt(&lock, &name, permit(2)).await, "a new count once empty");
    assert_eq!(two.kind(), permit(2));
    assert!(matches!(
        lock.try_acquire_kind(&name, permit(3), OwnerToken::new(), TTL, None)
            .await,
        Err(Error::PermitsMismatch {
            stored: 2,
            asked: 3,
            ..
        })
    ));
    assert!(lock.release(&two).await.expect("works"));
}

/// Someone else's owner token frees and extends nothing; the holder's own frees once.
async fn a_stale_owner_frees_nothing(store: &Store) {
    let lock = store.client().await;
    for (primitive, kind) in [
        (Primitive::Semaphore, permit(2)),
        (Primitive::RwLock, LockKind::Read),
        (Primitive::RwLock, LockKind::Write),
    ] {
        let name = unique("stale");
        let held = won(attempt(&lock, &name, kind).await, "fresh");
        let stranger = Lease::new(name.clone(), OwnerToken::new(), TTL, Instant::now()).with_kind(kind);
        assert!(!lock.release(&stranger).await.expect("works"), "{kind}");
        assert!(
            lock.extend(&stranger, TTL).await.expect("works").is_none(),
            "{kind}"
        );
        assert_eq!(holders(&lock, &name, primitive).await, 1, "{kind}");
        let renewed = lock.extend(&held, TTL).await.expect("works").expect("ours");
        assert!(lock.release(&renewed).await.expect("works"), "{kind}");
        assert!(
            !lock.release(&held).await.expect("works"),
            "{kind}: released twice"
        );
        assert_eq!(holders(&lock, &name, primitive).await, 0, "{kind}");
    }
}

/// A permit not renewed frees at the end of its TTL, on the database's clock; the refused
/// attempt learns when.
async fn expiry_frees_a_permit(store: &Store) {
    let lock = store.client().await;
    let name = unique("expiry");
    let short = Duration::from_millis(400);
    let held = lock
        .try_acquire_kind(&name, permit(1), OwnerToken::new(), short, None)
        .await
        .expect("works");
    let held = won(held, "the only permit");
    let left = refused(attempt(&lock, &name, permit(1)).await, "full").expect("the holder's expiry");
    assert!(left <= short, "{left:?}");
    tokio::time::sleep(short + Duration::from_millis(300)).await;
    assert!(lock.extend(&held, TTL).await.expect("works").is_none(), "expired");
    let next = won(attempt(&lock, &name, permit(1)).await, "after expiry");
    assert!(next.fencing_token() > held.fencing_token());
    assert!(!lock.release(&held).await.expect("works"));
    assert!(lock.release(&next).await.expect("works"));
}

/// A full semaphore's hint is the first permit's expiry.
async fn a_full_semaphore_hints_at_its_first_expiry(store: &Store) {
    let lock = store.client().await;
    let name = unique("hint");
    for ttl in [Duration::from_secs(10), Duration::from_secs(30)] {
        let outcome = lock
            .try_acquire_kind(&name, permit(2), OwnerToken::new(), ttl, None)
            .await
            .expect("works");
        won(outcome, "a free permit");
    }
    let left = refused(attempt(&lock, &name, permit(2)).await, "full").expect("a hint");
    assert!(
        left > Duration::from_secs(7) && left <= Duration::from_secs(10),
        "{left:?}"
    );
}

/// Readers share; a writer excludes readers and writers, and readers exclude a writer.
async fn readers_overlap_and_a_writer_excludes(store: &Store) {
    let lock = store.client().await;
    let name = unique("rw");
    let r1 = won(attempt(&lock, &name, LockKind::Read).await, "first reader");
    let r2 = won(attempt(&lock, &name, LockKind::Read).await, "second reader");
    assert_eq!(holders(&lock, &name, Primitive::RwLock).await, 2);
    let left = refused(
        attempt(&lock, &name, LockKind::Write).await,
        "writer among readers",
    );
    assert!(left.is_some_and(|l| l <= TTL), "{left:?}");
    assert!(lock.release(&r1).await.expect("works"));
    refused(
        attempt(&lock, &name, LockKind::Write).await,
        "writer with a reader left",
    );
    assert!(lock.release(&r2).await.expect("works"));
    let w = won(attempt(&lock, &name, LockKind::Write).await, "writer alone");
    assert!(w.fencing_token() > r2.fencing_token());
    let left = refused(
        attempt(&lock, &name, LockKind::Read).await,
        "reader under a writer",
    );
    assert!(left.is_some_and(|l| l <= TTL && l > TTL / 2), "{left:?}");
    refused(attempt(&lock, &name, LockKind::Write).await, "second writer");
    let states = lock
        .inspect_holders(&name, Primitive::RwLock)
        .await
        .expect("works");
    assert_eq!(states.len(), 1);
    assert_eq!(states[0].kind, LockKind::Write);
    assert_eq!(states[0].owner.as_deref(), Some(w.owner().to_string().as_str()));
    assert_eq!(states[0].fencing, w.fencing_token());
    assert!(lock.release(&w).await.expect("works"));
    won(
        attempt(&lock, &name, LockKind::Read).await,
        "reader after the writer",
    );
}

/// A writer refused with a waiter id keeps new readers out until it gets in; other waiting
/// writers do not block a writer; winning removes the record.
async fn a_waiting_writer_keeps_new_readers_out_and_gets_in(store: &Store) {
    let lock = store.client().await;
    let name = unique("waiting");
    let stay = Duration::from_secs(20);
    let reader = won(attempt(&lock, &name, LockKind::Read).await, "reader");
    let writer = OwnerToken::new();
    let try_write =
        |owner| lock.try_acquire_kind(&name, LockKind::Write, owner, TTL, Some(("writer-1", stay)));
    refused(try_write(writer).await.expect("works"), "writer among a reader");
    // The reader already in keeps its hold and can renew it; new readers wait.
    assert_eq!(
        refused(attempt(&lock, &name, LockKind::Read).await, "new reader"),
        None,
        "no moment is known for a waiting writer"
    );
    let reader = lock
        .extend(&reader, TTL)
        .await
        .expect("works")
        .expect("still ours");
    assert!(lock.release(&reader).await.expect("works"));
    let w = won(try_write(writer).await.expect("works"), "the waiting writer");
    assert!(lock.release(&w).await.expect("works"));
    // Its record went with its win: readers come in at once.
    let r = won(
        attempt(&lock, &name, LockKind::Read).await,
        "reader after the writer",
    );
    assert!(lock.release(&r).await.expect("works"));

    // A writer waiting does not keep another writer out.
    let holder = won(attempt(&lock, &name, LockKind::Write).await, "a writer");
    let outcome = lock
        .try_acquire_kind(
            &name,
            LockKind::Write,
            OwnerToken::new(),
            TTL,
            Some(("writer-2", stay)),
        )
        .await
        .expect("works");
    refused(outcome, "writer-2 behind the holder");
    assert!(lock.release(&holder).await.expect("works"));
    let other = won(
        attempt(&lock, &name, LockKind::Write).await,
        "a writer past a waiting writer",
    );
    assert!(lock.release(&other).await.expect("works"));
    refused(
        attempt(&lock, &name, LockKind::Read).await,
        "writer-2 still waits",
    );
    lock.withdraw(&name, LockKind::Write, "writer-2")
        .await
        .expect("works");
    won(attempt(&lock, &name, LockKind::Read).await, "writer-2 withdrew");
}

/// Through `LockClient`: a writer waiting on a reader keeps new readers out, and gets in once
/// the reader leaves.
async fn a_waiting_writer_gets_in_through_the_client(store: &Store) {
    let readers = LockClient::new(store.client().await);
    let writers = LockClient::new(store.client().await);
    let name = unique("client-rw");
    let rw = readers.rw_lock(name.clone()).expect("valid");
    let reader = rw.read().await.expect("a read lock");
    let opts = AcquireOptions::new()
        .ttl(TTL)
        .wait_for(Duration::from_secs(20))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(50));
    let waiting = {
        let rw = writers.rw_lock(name.clone()).expect("valid");
        let opts = opts.clone();
        tokio::spawn(async move { rw.write_with(&opts).await.expect("the write lock") })
    };
    // Until the writer recorded itself, new readers may still get in.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match rw.try_read().await.expect("works") {
            None => break,
            Some(guard) => {
                assert!(
                    Instant::now() < deadline,
                    "the waiting writer never kept readers out"
                );
                guard.release().await.expect("works");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(!waiting.is_finished());
    reader.release().await.expect("works");
    let writer = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the writer got in")
        .expect("the task");
    assert!(rw.try_read().await.expect("works").is_none(), "the writer holds");
    writer.release().await.expect("works");
    let reader = rw.try_read().await.expect("works").expect("free again");
    reader.release().await.expect("works");
}

/// A withdrawn waiting writer lets readers in at once; an unrenewed record expires.
async fn withdraw_lets_readers_in(store: &Store) {
    let lock = store.client().await;
    let name = unique("withdraw");
    let reader = won(attempt(&lock, &name, LockKind::Read).await, "reader");
    let outcome = lock
        .try_acquire_kind(
            &name,
            LockKind::Write,
            OwnerToken::new(),
            TTL,
            Some(("gone", TTL)),
        )
        .await
        .expect("works");
    refused(outcome, "writer");
    refused(attempt(&lock, &name, LockKind::Read).await, "kept out");
    // Withdrawing another kind, or another waiter, changes nothing.
    lock.withdraw(&name, LockKind::Read, "gone").await.expect("works");
    lock.withdraw(&name, LockKind::Write, "someone-else")
        .await
        .expect("works");
    refused(attempt(&lock, &name, LockKind::Read).await, "still kept out");
    lock.withdraw(&name, LockKind::Write, "gone")
        .await
        .expect("works");
    let r2 = won(
        attempt(&lock, &name, LockKind::Read).await,
        "after the withdrawal",
    );

    let short = Duration::from_millis(300);
    let outcome = lock
        .try_acquire_kind(
            &name,
            LockKind::Write,
            OwnerToken::new(),
            TTL,
            Some(("brief", short)),
        )
        .await
        .expect("works");
    refused(outcome, "a briefly waiting writer");
    refused(attempt(&lock, &name, LockKind::Read).await, "kept out briefly");
    tokio::time::sleep(short + Duration::from_millis(300)).await;
    let r3 = won(
        attempt(&lock, &name, LockKind::Read).await,
        "after the record expired",
    );
    for r in [reader, r2, r3] {
        assert!(lock.release(&r).await.expect("works"));
    }
}

/// The mutex, the semaphore and the read-write lock of one name are three objects.
async fn one_name_three_objects(store: &Store) {
    let lock = store.client().await;
    let name = unique("three");
    let mutex = won(
        lock.try_acquire(&name, OwnerToken::new(), TTL)
            .await
            .expect("works"),
        "mutex",
    );
    let sem = won(attempt(&lock, &name, permit(1)).await, "semaphore");
    let w = won(attempt(&lock, &name, LockKind::Write).await, "write lock");
    assert!(matches!(
        lock.try_acquire(&name, OwnerToken::new(), TTL)
            .await
            .expect("works"),
        TryAcquire::Held(_)
    ));
    refused(attempt(&lock, &name, permit(1)).await, "semaphore");
    refused(attempt(&lock, &name, LockKind::Read).await, "rw lock");
    for primitive in [Primitive::Mutex, Primitive::Semaphore, Primitive::RwLock] {
        assert_eq!(holders(&lock, &name, primitive).await, 1, "{primitive}");
    }
    // A lease of one primitive frees nothing of another, even with the same owner token.
    let cross = Lease::new(name.clone(), sem.owner(), TTL, Instant::now()).with_kind(LockKind::Write);
    assert!(!lock.release(&cross).await.expect("works"));
    let cross = Lease::new(name.clone(), w.owner(), TTL, Instant::now());
    assert!(!lock.release(&cross).await.expect("works"));
    assert!(lock.release(&sem).await.expect("works"));
    assert!(
        lock.inspect_lock(&name).await.expect("works").is_held(),
        "the mutex stays"
    );
    assert_eq!(
        holders(&lock, &name, Primitive::RwLock).await,
        1,
        "the writer stays"
    );
    assert!(lock.release(&mutex).await.expect("works"));
    assert!(lock.release(&w).await.expect("works"));
}

/// The cleanup after an ambiguous attempt releases by name, kind and owner alone.
async fn a_bare_lease_releases_the_hold(store: &Store) {
    let lock = store.client().await;
    for (primitive, kind) in [
        (Primitive::Semaphore, permit(3)),
        (Primitive::RwLock, LockKind::Read),
        (Primitive::RwLock, LockKind::Write),
    ] {
        let name = unique("bare");
        let owner = OwnerToken::new();
        let outcome = lock
            .try_acquire_kind(&name, kind, owner, TTL, None)
            .await
            .expect("works");
        won(outcome, "fresh");
        let bare = Lease::new(name.clone(), owner, TTL, Instant::now()).with_kind(kind);
        assert!(bare.fencing_token().is_none() && bare.handle().is_none());
        assert!(lock.release(&bare).await.expect("works"), "{kind}");
        assert_eq!(holders(&lock, &name, primitive).await, 0, "{kind}");
        assert!(!lock.release(&bare).await.expect("works"), "{kind}");
    }
    // Never acquired: a clean "not held".
    let never = Lease::new(unique("never"), OwnerToken::new(), TTL, Instant::now()).with_kind(permit(1));
    assert!(!lock.release(&never).await.expect("works"));
}

/// An attempt run again with the same owner token (a retry after a lost answer) finds its
/// own hold: the same token, one hold, and no place taken twice.
async fn a_retried_attempt_finds_its_own_hold(store: &Store) {
    let lock = store.client().await;
    let name = unique("retry");
    let owner = OwnerToken::new();
    let first = won(
        lock.try_acquire_kind(&name, permit(1), owner, TTL, None)
            .await
            .expect("works"),
        "first",
    );
    let again = won(
        lock.try_acquire_kind(&name, permit(1), owner, TTL, None)
            .await
            .expect("works"),
        "again",
    );
    assert_eq!(first.fencing_token(), again.fencing_token());
    assert_eq!(holders(&lock, &name, Primitive::Semaphore).await, 1);
    assert!(lock.release(&again).await.expect("works"));
}

/// Every new hold of an object gets a greater token, across releases and an empty object.
async fn fencing_tokens_grow_per_object(store: &Store) {
    let lock = store.client().await;
    let name = unique("fencing");
    let mut last = None;
    for kind in [permit(2), permit(2), LockKind::Read, LockKind::Write, permit(2)] {
        let lease = won(attempt(&lock, &name, kind).await, "free");
        let token = lease.fencing_token().expect("a token");
        if kind.primitive() == Primitive::Semaphore {
            assert!(Some(token) > last, "{token:?} after {last:?}");
            last = Some(token);
        }
        assert!(lock.release(&lease).await.expect("works"));
    }
    let r1 = won(attempt(&lock, &name, LockKind::Read).await, "read");
    let r2 = won(attempt(&lock, &name, LockKind::Read).await, "read");
    assert!(r2.fencing_token() > r1.fencing_token());
}

/// A renewed hold outlives its first TTL; through the client, the watchdog renews it.
async fn renewal_keeps_a_hold(store: &Store) {
    let lock = store.client().await;
    let name = unique("renew");
    let short = Duration::from_millis(500);
    let outcome = lock
        .try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), short, None)
        .await
        .expect("works");
    let mut lease = won(outcome, "free");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        lease = lock
            .extend(&lease, short)
            .await
            .expect("works")
            .expect("still ours");
    }
    refused(
        attempt(&lock, &name, LockKind::Read).await,
        "the writer still holds",
    );
    let renewed = lock.renew(std::slice::from_ref(&lease)).await;
    assert!(matches!(renewed.as_slice(), [Ok(Some(_))]), "{renewed:?}");
    assert!(lock.release(&lease).await.expect("works"));

    let client = LockClient::new(store.client().await);
    let semaphore = client.semaphore(unique("watchdog"), 1).expect("valid");
    let opts = AcquireOptions::new().ttl(short).no_wait();
    let guard = semaphore.acquire_with(&opts).await.expect("a permit");
    tokio::time::sleep(short * 3).await;
    assert!(!guard.is_lost());
    assert!(
        semaphore.try_acquire().await.expect("works").is_none(),
        "renewed, still held"
    );
    assert!(guard.release().await.expect("works"));
}

/// Bad input is a typed error.
async fn bad_input_is_a_typed_error(store: &Store) {
    let lock = store.client().await;
    let name = unique("bad");
    assert!(matches!(
        lock.try_acquire_kind(&name, permit(0), OwnerToken::new(), TTL, None)
            .await,
        Err(Error::InvalidOptions { .. })
    ));
    assert!(matches!(
        lock.try_acquire_kind(&name, LockKind::Read, OwnerToken::new(), Duration::ZERO, None)
            .await,
        Err(Error::InvalidOptions { .. })
    ));
    // An odd waiter id is stored under its digest, and withdrawn by it.
    let reader = won(attempt(&lock, &name, LockKind::Read).await, "reader");
    let odd = "it's a 'waiter'; DROP TABLE x; -- é".repeat(5);
    let outcome = lock
        .try_acquire_kind(&name, LockKind::Write, OwnerToken::new(), TTL, Some((&odd, TTL)))
        .await
        .expect("works");
    refused(outcome, "writer");
    refused(attempt(&lock, &name, LockKind::Read).await, "kept out");
    lock.withdraw(&name, LockKind::Write, &odd).await.expect("works");
    won(
        attempt(&lock, &name, LockKind::Read).await,
        "after the withdrawal",
    );
    assert!(lock.release(&reader).await.expect("works"));
    // Names with quotes and non-ASCII characters are names like any other.
    let odd_name = LockName::new(format!("o'dd \\ \"name\" é {}", uuid::Uuid::new_v4())).expect("valid");
    let lease = won(attempt(&lock, &odd_name, permit(1)).await, "odd name");
    refused(attempt(&lock, &odd_name, permit(1)).await, "odd name, full");
    assert!(lock.release(&lease).await.expect("works"));
}

/// Declares the backend's primitives.
async fn capabilities_declare_both_primitives(store: &Store) {
    let caps = store.client().await.capabilities();
    assert!(caps.semaphores && caps.rw_locks);
}

/// MariaDB: a permit attempt whose answer is lost (the transaction committed, the reply never
/// came back) fails with an ambiguous error, and `LockClient`'s owner-checked cleanup frees the
/// permit long before its TTL, through a real proxy that drops the server's replies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_permit_whose_answer_was_lost_is_freed_by_the_cleanup() {
    let Store::MySql { url } = Store::mysql().await else {
        unreachable!("a MySQL store")
    };
    let (proxied_url, proxies) = distlock_testkit::proxy::through_proxies(&url).expect("a proxy");
    let proxied = SqlConfig::from_url(&proxied_url)
        .expect("a valid URL")
        .with_operation_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("the database answers");
    let client = LockClient::new(proxied);
    let observer = Store::MySql { url }.client().await;
    let name = unique("lost-answer");
    let semaphore = client.semaphore(name.clone(), 1).expect("valid");

    proxies.drop_replies();
    let opts = AcquireOptions::new().ttl(TTL).no_wait();
    let lost = semaphore.acquire_with(&opts).await;
    assert!(
        matches!(&lost, Err(e) if e.is_ambiguous()),
        "an attempt without an answer: {lost:?}"
    );
    assert_eq!(
        holders(&observer, &name, Primitive::Semaphore).await,
        1,
        "the attempt committed on the server"
    );
    proxies.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    while holders(&observer, &name, Primitive::Semaphore).await > 0 {
        assert!(Instant::now() < deadline, "the cleanup never freed the permit");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = won(attempt(&observer, &name, permit(1)).await, "the freed permit");
    assert!(observer.release(&next).await.expect("works"));
}

/// SQLite: the DDL handed to DBAs ([`SqlConfig::ddl`]) creates both tables, and a client that
/// runs no DDL of its own takes permits in them.
#[tokio::test]
async fn sqlite_the_ddl_for_dbas_creates_the_holds_table() {
    use sqlx::Connection;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("locks.db");
    let config = SqlConfig::sqlite(&path)
        .with_table("app_locks")
        .expect("a plain name")
        .with_create_table(false);
    assert_eq!(config.holds_table(), "app_locks_holds");
    let ddl = config.ddl();
    assert!(
        ddl.contains("\"app_locks\"") && ddl.contains("\"app_locks_holds\""),
        "{ddl}"
    );
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let mut admin = sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("opens");
    sqlx::raw_sql(&ddl)
        .execute(&mut admin)
        .await
        .expect("the DBA's DDL runs");
    admin.close().await.expect("closes");
    let lock = config.build().await.expect("opens without DDL");
    let name = unique("dba");
    let lease = won(attempt(&lock, &name, permit(1)).await, "a permit");
    refused(attempt(&lock, &name, permit(1)).await, "full");
    assert!(lock.release(&lease).await.expect("works"));
}

/// One test per check and dialect.
macro_rules! on_both_dialects {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(&super::Store::sqlite().await).await;
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
    };
}

on_both_dialects!(
    a_burst_admits_exactly_the_permits,
    a_semaphore_is_exact_under_contention,
    another_count_is_refused_while_holders_live,
    a_stale_owner_frees_nothing,
    expiry_frees_a_permit,
    a_full_semaphore_hints_at_its_first_expiry,
    readers_overlap_and_a_writer_excludes,
    a_waiting_writer_keeps_new_readers_out_and_gets_in,
    a_waiting_writer_gets_in_through_the_client,
    withdraw_lets_readers_in,
    one_name_three_objects,
    a_bare_lease_releases_the_hold,
    a_retried_attempt_finds_its_own_hold,
    fencing_tokens_grow_per_object,
    renewal_keeps_a_hold,
    bad_input_is_a_typed_error,
    capabilities_declare_both_primitives,
);
